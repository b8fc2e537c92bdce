"""Onboarding end to end, as a person would do it: a real ``specpilot chat`` process on a terminal
(pexpect), answers typed at its prompts, the database checked afterwards, and a second session
that asks nothing again. The target is a tiny random Qwen2 saved to a folder with a small
tokenizer, so the real pipeline (load, run, measure, store) runs in seconds. Piped input (no terminal) goes
through the same entry point in this process (``cli_in_process``, stdin replaced): a real process would only
add seconds of importing torch per session."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pexpect
import pytest

from memory import Store

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tiny_model_folder(tmp_path_factory) -> Path:
    """A tiny random Qwen2 checkpoint with a word-level tokenizer, saved like any local model."""
    from conftest import make_tiny_model_folder

    return make_tiny_model_folder(tmp_path_factory.mktemp("tiny-qwen"))


def chat_env(home: Path) -> dict:
    return dict(os.environ, SPECPILOT_HOME=str(home), TERM="dumb", COLUMNS="200", LINES="50", HF_HUB_OFFLINE="1")


def spawn_chat(home: Path) -> pexpect.spawn:
    child = pexpect.spawn(sys.executable, ["-m", "agent.cli.main", "chat", "--brain", "offline"], cwd=str(ROOT),
                          env=chat_env(home), encoding="utf-8", timeout=90, dimensions=(50, 200))
    return child


def answer(child: pexpect.spawn, question: str, text: str) -> str:
    """Wait for ``question``, type ``text``; return what was shown before the question."""
    child.expect(re.escape(question))
    shown = child.before
    child.sendline(text)
    return shown


def test_first_run_asks_saves_and_runs_then_the_second_run_asks_nothing(tiny_model_folder, specpilot_home):
    first = spawn_chat(specpilot_home)
    assert "No parameters saved yet." in answer(first, "Which method do you want to use?", "lookahead")
    # the target first; then the offered values, sized for it as runs size them (this machine's curve of the
    # target, measured first where none is stored; never the GPU's W=15, N=5, G=5 on a CPU)
    answer(first, "Target model", str(tiny_model_folder))
    # an answer equal to the offered value is kept, not saved: type values other than those offered (the offered
    # ones depend on the curve measured on this machine at that moment)
    first.expect(r"lookahead parameter window \[(\d+)\]")
    offered, window = first.before, 2 if first.match.group(1) != "2" else 4
    first.sendline(str(window))
    # each value with its reason, or (unsized: one reason shared by all) the values with the reason once
    assert re.search(r"window=\d+(, \w+=\d+)*: (sized|default|the method's starting value)", offered)
    assert "Press Enter to keep a suggested value" in offered
    first.expect(r"lookahead parameter ngram \[(\d+)\]")
    ngram = 3 if first.match.group(1) != "3" else 2
    first.sendline(str(ngram))
    answer(first, "lookahead parameter guess [", "")  # Enter keeps the offered value: not saved, sized per run
    answer(first, "max_new_tokens", "12")
    answer(first, "temperature", "")
    answer(first, "Run a short first measurement now (lookahead on", "y")  # optional, and short
    answer(first, "What prompt should I run first?", "write a python function")
    first.expect(r"Measured now: run ([0-9a-f]{8})")
    run_id = first.match.group(1)
    first.expect(r"speedup ([0-9.]+)x")
    shown_speedup = first.match.group(1)
    answer(first, "you> ", "/quit")
    first.expect(pexpect.EOF)

    with Store() as store:
        assert store.onboarding_complete()
        assert store.get_params("lookahead") == {"target": str(tiny_model_folder), "window": window, "ngram": ngram,
                                                 "max_new_tokens": 12, "temperature": 0.0}
        assert store.get_answer("default_method") == "lookahead"
        [run] = store.list_runs()
        assert run["run_id"] == run_id and run["method"] == "lookahead" and run["prompt"] == "write a python function"
        assert run["params"]["window"] == window and run["new_tokens"] == 12
        assert run["params_source"] == "memory" and run["sizing"]["window"].startswith("memory: ")
        assert run["sizing"]["guess"].startswith("sized: ")  # the value kept at onboarding is sized by the run
        assert f"{run['speedup']:.2f}" == shown_speedup
        [task] = store.list_tasks()
        assert task["status"] == "done" and task["run_ids"] == [run_id]
        answers_before = store.all_answers()

    second = spawn_chat(specpilot_home)
    greeting = answer(second, "you> ", "/runs lookahead")
    assert "Saved parameters (I will not ask for these again):" in greeting
    assert f"lookahead (default): target={tiny_model_folder}, window={window}" in greeting
    assert "No unfinished work." in greeting
    assert "Which method" not in greeting and "Target model" not in greeting
    second.expect(r"From memory")
    second.expect(rf"run {run_id} \(lookahead")
    second.expect(rf"speedup\s+{re.escape(shown_speedup)}x")  # the reply may wrap between them
    answer(second, "you> ", "/quit")
    second.expect(pexpect.EOF)

    with Store() as store:
        assert len(store.list_runs()) == 1  # answered from memory, nothing rerun
        assert store.all_answers() == answers_before  # nothing asked or saved again


@pytest.fixture(scope="module")
def tiny_draft_folder(tmp_path_factory) -> Path:
    """A second tiny model folder (same tokenizer), usable as the draft of ``tiny_model_folder``."""
    from conftest import make_tiny_model_folder

    return make_tiny_model_folder(tmp_path_factory.mktemp("tiny-qwen-draft"))


def piped_chat(cli_in_process, monkeypatch):
    """``specpilot chat --brain offline FLAGS`` with ``lines`` piped in, as chat_env's terminal size sets it."""
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setenv("LINES", "50")

    def piped(lines: list[str], *flags: str) -> subprocess.CompletedProcess:
        monkeypatch.setattr(sys, "stdin", io.StringIO("\n".join(lines) + "\n"))
        return cli_in_process("chat", "--brain", "offline", *flags)

    return piped


def test_piped_input_works_and_interrupted_onboarding_resumes(tiny_model_folder, tiny_draft_folder, cli_in_process,
                                                              monkeypatch):
    piped = piped_chat(cli_in_process, monkeypatch)

    cut = piped(["draft", str(tiny_model_folder)])  # input ends after two answers
    assert cut.returncode == 0 and "your answers so far are saved" in cut.stdout
    with Store() as store:
        assert store.get_answer("onboarding.method") == "draft" and not store.onboarding_complete()
    # answers: the target as draft (refused, with the reason), then another draft model, k=2, adaptive K left
    # at its offered default (on), 8 new tokens, temperature default, yes to the short first run, its prompt
    rest = piped([str(tiny_model_folder), str(tiny_draft_folder), "2", "", "8", "", "y", "def fib", "/params", "/quit"])
    assert "Which method" not in rest.stdout and "Target model" not in rest.stdout  # already answered
    assert "the draft must be a smaller model than the target, not the target itself" in rest.stdout
    assert "Draft model" in rest.stdout and re.search(r"Measured now: run [0-9a-f]{8} \(draft", rest.stdout)
    assert "Traceback" not in rest.stderr
    with Store() as store:
        assert store.get_params("draft") == {"target": str(tiny_model_folder), "draft": str(tiny_draft_folder),
                                             "k": 2, "max_new_tokens": 8, "temperature": 0.0}  # adaptive_k kept
        [run] = store.list_runs()
        assert run["method"] == "draft" and run["prompt"] == "def fib" and run["draft"] == str(tiny_draft_folder)


def test_onboarding_can_be_skipped_and_is_not_asked_again(cli_in_process, monkeypatch):
    piped = piped_chat(cli_in_process, monkeypatch)

    flagged = piped(["/quit"], "--skip-onboarding")  # this time only
    assert "Which method" not in flagged.stdout and "Bye." in flagged.stdout
    with Store() as store:
        assert not store.onboarding_complete()
    skipped = piped(["skip", "/quit"])
    assert "Which method" in skipped.stdout and "Skipped." in skipped.stdout and "Bye." in skipped.stdout
    again = piped(["/quit"])
    assert "Which method" not in again.stdout
    with Store() as store:
        assert store.onboarding_complete() and store.get_answer("onboarding.skipped") is True
        assert store.list_runs() == [] and store.all_params() == {}


def test_ctrl_c_outside_an_onboarding_question_goes_on_to_the_chat(specpilot_home, monkeypatch):
    """Ctrl-C while onboarding works (not at a question, where it answers 'skip') leaves onboarding for the chat,
    with no traceback and exit code 0."""
    import agent.chat as chat

    def interrupted(*_args, **_kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(chat, "run_onboarding", interrupted)
    out = io.StringIO()
    with Store() as store:
        code = chat.Chat(brain="offline", stdin=io.StringIO("/quit\n"), store=store,
                         console=chat.Console(file=out, width=200)).run()
    assert code == 0 and "Interrupted; the answers given so far are saved." in out.getvalue()
    assert "Bye." in out.getvalue()
