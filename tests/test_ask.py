"""``specpilot ask TEXT``: one non-interactive turn with exactly one JSON object on stdout; with
--plan-only the read-only tools run and the others are only listed; never onboards; a request that
could not be served is recorded as not done, with the reason."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent.ask import AskSession, ask
from agent.brains.base import Reply
from memory import Store

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def store():
    with Store() as s:
        yield s


def specpilot_ask(home: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    environ = dict(os.environ, SPECPILOT_HOME=str(home), HF_HUB_OFFLINE="1", **(env or {}))
    environ.pop("ANTHROPIC_API_KEY", None)
    return subprocess.run([sys.executable, "-m", "agent.cli.main", "ask", *args], cwd=ROOT, env=environ,
                          capture_output=True, text=True, timeout=120)


def test_plan_only_json_is_one_object_and_lists_a_run_without_running_it(specpilot_home):
    proc = specpilot_ask(specpilot_home, "--brain", "offline", "--plan-only", "--json",
                         "/run draft def fib(n):")
    assert proc.returncode == 0, proc.stderr
    answer = json.loads(proc.stdout)  # the only thing on stdout
    assert set(answer) == {"reply", "tool_calls", "task"}
    assert answer["tool_calls"] == [{"name": "run_method", "input": {"method": "draft", "prompt": "def fib(n):"},
                                     "executed": False, "status": "planned"}]
    assert answer["reply"].startswith("Planned, not executed: run_method")
    # a dry run is no unfinished work: done, said to be planned only
    assert answer["task"]["status"] == "done" and answer["task"]["reason"] == "planned only, not executed: run_method"
    with Store() as store:
        assert store.list_runs() == [] and not store.onboarding_complete()  # nothing ran; never onboards
        task = store.get_task(answer["task"]["id"])
        assert task["request"] == "/run draft def fib(n):" and "planned only, not executed: run_method" in task["done"]
        assert store.unfinished_tasks() == []


def test_a_missing_local_model_falls_back_to_commands_with_a_note(tmp_path, cli_in_process, monkeypatch):
    # in this process (the test above checks the real process's stdout): the fallback and its note
    monkeypatch.setenv("SPECPILOT_LOCAL_MODEL", str(tmp_path / "missing"))
    proc = cli_in_process("ask", "--brain", "local", "--json", "/params")
    assert proc.returncode == 0 and "is not fetched" in proc.stderr and "commands only" in proc.stderr
    answer = json.loads(proc.stdout)
    assert [(c["name"], c["executed"], c["status"]) for c in answer["tool_calls"]] == [("recall", True, "ok")]
    assert answer["task"]["status"] == "done"


@pytest.mark.parametrize("text,tool", [("/params", "recall"), ("/explain medusa", "explain"), ("/deps", "check_deps")])
def test_plan_only_runs_the_read_only_tools(store, text, tool):
    answer = ask(store, text, brain="offline", plan_only=True)
    [call] = answer["tool_calls"]
    assert (call["name"], call["executed"], call["status"]) == (tool, True, "ok")
    assert answer["task"]["status"] == "done" and answer["task"]["reason"] is None


@pytest.mark.parametrize("text,tool", [("/install lade", "install_packages"),
                                       ("/save draft k=6 --make-default", "save_params"),
                                       ("/measure", "measure_cost_curve"),
                                       # guidance measures this machine's cost curve first where none is stored
                                       ("/guide lookahead", "guidance"),
                                       ("/report", "write_report"),
                                       ("/compare draft lookahead 'Write a haiku about rain'", "compare_methods")])
def test_plan_only_lists_model_loads_writes_and_gated_tools_without_running_them(store, text, tool):
    answer = ask(store, text, brain="offline", plan_only=True)
    [call] = answer["tool_calls"]
    assert (call["name"], call["executed"], call["status"]) == (tool, False, "planned")
    assert answer["task"]["status"] == "done" and answer["task"]["reason"] == f"planned only, not executed: {tool}"
    assert store.list_approvals() == [] and store.all_params() == {} and store.list_runs() == []
    # nothing planned is left as unfinished work: not in the greeting, nor in /tasks' unfinished list
    assert store.unfinished_tasks() == []
    from agent.brains import make_brain
    from agent.loop import Session

    assert "No unfinished work." in Session(store, make_brain("offline")).greeting()
    assert "(planned only)" in ask(store, "/tasks", brain="offline")["reply"]


def test_without_plan_only_a_gated_tool_comes_back_as_an_approval_request(store):
    answer = ask(store, "/install lade", brain="offline")
    [call] = answer["tool_calls"]
    assert (call["name"], call["executed"], call["status"]) == ("install_packages", True, "approval_required")
    [approval] = store.list_approvals()
    assert approval["status"] == "pending" and approval["id"] in answer["task"]["reason"]


def test_saving_a_parameter_from_ask_keeps_the_others(store):
    store.save_params("draft", {"target": "qwen2.5-coder-1.5b-instruct", "k": 4, "max_new_tokens": 64})
    answer = ask(store, "/save draft k=6", brain="offline")
    assert answer["tool_calls"][0]["input"]["params"] == {"k": 6}
    assert store.get_params("draft") == {"target": "qwen2.5-coder-1.5b-instruct", "k": 6, "max_new_tokens": 64}
    assert answer["task"]["status"] == "done"


def test_free_text_to_the_command_brain_is_recorded_as_not_done_with_the_reason(store):
    answer = ask(store, "what's the weather in Paris?", brain="offline", plan_only=True)
    assert answer["tool_calls"] == [] and "commands only" in answer["reply"]
    assert answer["task"]["status"] == "failed" and "free text needs a brain that reads words" in answer["task"]["reason"]
    assert store.get_task(answer["task"]["id"])["status"] == "failed"


class ScriptedBrain:
    """A brain that makes the given tool calls and answers 'done'."""

    name = "scripted"

    def __init__(self, calls):
        self.calls = calls

    def respond(self, session, text):
        results = [session.call_tool(name, tool_input) for name, tool_input in self.calls]
        return Reply("done", data=results)


def test_plan_only_validates_what_it_does_not_run(store):
    session = AskSession(store, ScriptedBrain([("run_method", {"method": "nope", "prompt": "x"}),
                                               ("train_medusa", {}), ("no_such_tool", {})]), plan_only=True)
    session.handle("do things")
    bad, planned, unknown = session.calls
    assert (bad["executed"], bad["status"]) == (False, "invalid")
    assert (planned["executed"], planned["status"]) == (False, "planned")
    assert (unknown["executed"], unknown["status"]) == (True, "error")  # unknown tools fail as such
    assert store.list_approvals() == []


def test_a_planned_call_the_reply_already_names_is_printed_once(monkeypatch, capsys):
    from agent import ask as ask_module

    call = {"name": "run_method", "input": {"method": "ngram", "prompt": "hi"}, "executed": False,
            "status": "planned"}
    named = 'Planned, not executed: run_method {"method": "ngram", "prompt": "hi"} (plan only).'
    for reply, lines in ((named, 1), ("I would run it.", 2)):
        monkeypatch.setattr(ask_module, "ask", lambda store, text, **kw: {"reply": reply, "tool_calls": [call]})
        assert ask_module.run_ask("run ngram on 'hi'", plan_only=True) == 0
        out = capsys.readouterr().out
        assert len(out.strip().splitlines()) == lines and out.count('run_method {"method": "ngram"') == 1
