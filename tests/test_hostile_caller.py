"""The store, the share path and the gates under a hostile or careless caller (issue 51): nothing lost,
nothing approved by a program, nothing overwritten. One section per numbered finding of the issue,
each test reproducing what the finding measured; the fuzz of every tool and the MCP transport is in
tests/test_hostile_fuzz.py. pip and model loading never run here."""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import sqlite3
import stat
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError

import agent.approval as approval
import tools.agent_tools.share as share
from agent.approval import Gate, approval_prompt, decide_at_terminal, read_confirmation, Terminal
from agent.loop import NOT_RECORDED, Session, host_call
from agent.skill_install import install_skill
from memory import Store
from memory.helpers import database_path
from tools.agent_tools.registry import MAX_PROMPT_BYTES, ToolContext
from tools.agent_tools.saved_params import validate_saved_params
from tools.errors import ApprovalError, ParameterError, StoreError

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT_S = 120


@pytest.fixture
def store():
    with Store() as s:
        yield s


def add_run(store, **extra) -> str:
    return store.add_run({"method": "draft", "target": "t", "prompt": "p", "speedup": 1.5,
                          "hardware": {"name": "Test CPU"}, **extra})


def env_for_processes() -> dict:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}


def specpilot(*args: str, stdin: str = "", timeout: float = TIMEOUT_S) -> subprocess.CompletedProcess:
    """``specpilot ARGS`` in a new process with no terminal (input piped)."""
    return subprocess.run([sys.executable, "-m", "agent.cli.main", *args], cwd=ROOT, input=stdin, text=True,
                          capture_output=True, timeout=timeout, env=env_for_processes(), start_new_session=True)


# ---- finding 1: lost updates --------------------------------------------------------------

# 20 keys of the draft method's saved parameters, each valid on its own and all together
TWENTY_KEYS = {"k": 4, "adaptive_k": False, "k_max": 12, "draft_confidence": 0.3, "draft_quant": "int8",
               "draft_vocab": 1000, "gguf_draft_until": 2.0, "draft_lookup": 3, "draft_cost": 0.4, "target": "t-x",
               "draft": "d-x", "max_new_tokens": 64, "temperature": 0.5, "top_p": 0.9, "top_k": 5, "seed": 7,
               "chat": False, "dtype": "float32", "threads": 2, "repeats": 2}

# one writer process: waits for the go file, then saves its parameter key through the save_params tool
# (as `specpilot tool save_params` does), its onboarding answer, a cost curve, a heads folder, and an
# entry of the old whole-dict "medusa_heads" answer (read, add, save back)
WRITER = r"""
import json, sys, time
from pathlib import Path
i, go, ready, key, value = int(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4], json.loads(sys.argv[5])
from agent.loop import host_call
from memory import Store
ready.touch()
while not go.exists():
    time.sleep(0.002)
with Store() as store:
    saved = host_call(store, "save_params", {"method": "draft", "params": {key: value}, "make_default": False})
    assert not saved.is_error, saved.content
    store.save_answer(f"onboarding.draft.q{i}", i)
    store.save_cost_curve("t", f"cpu-{i}", {1: 0.1, 2: 0.1 + i / 1000}, dtype="float32")
    store.save_trained_heads(f"target-{i}", f"/heads/{i}")
    heads = store.get_answer("medusa_heads") or {}
    heads[f"legacy-{i}"] = f"/legacy/{i}"
    store.save_answer("medusa_heads", heads)
print("ok")
"""


def test_twenty_concurrent_writers_lose_no_merged_value(tmp_path):
    with Store():
        pass  # the database exists before the writers race (its creation is tested in test_memory_concurrency)
    go = tmp_path / "go"
    procs = []
    for i, (key, value) in enumerate(TWENTY_KEYS.items()):
        ready = tmp_path / f"ready-{i}"
        procs.append((ready, subprocess.Popen([sys.executable, "-c", WRITER, str(i), str(go), str(ready), key,
                                               json.dumps(value)], cwd=ROOT, env=env_for_processes(),
                                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)))
    deadline = time.monotonic() + TIMEOUT_S
    while not all(ready.exists() for ready, _ in procs):
        assert time.monotonic() < deadline and all(p.poll() is None for _, p in procs), \
            [p.communicate() for _, p in procs if p.poll() is not None]
        time.sleep(0.02)
    go.touch()
    for _, proc in procs:
        out, err = proc.communicate(timeout=TIMEOUT_S)
        assert proc.returncode == 0 and out.strip() == "ok", err[-2000:]
    with Store() as store:
        assert store.get_params("draft") == TWENTY_KEYS  # 20 of 20 keys (the issue found 9)
        assert len(store.params_history("draft")) == 20
        validate_saved_params("draft", store.get_params("draft"))
        answers = store.all_answers()
        assert {f"onboarding.draft.q{i}": i for i in range(20)}.items() <= answers.items()
        assert {c["hardware"] for c in store.cost_curves()} == {f"cpu-{i}" for i in range(20)}
        heads = store.all_trained_heads()
        assert {f"target-{i}" for i in range(20)} | {f"legacy-{i}" for i in range(20)} == set(heads)


def test_a_merge_that_fails_its_check_saves_nothing(store):
    store.update_params("draft", {"k": 4})

    def refuse(merged):
        raise ParameterError("no")

    with pytest.raises(ParameterError):
        store.update_params("draft", {"k": 5}, check=refuse)
    assert store.get_params("draft") == {"k": 4} and len(store.params_history("draft")) == 1
    assert store.update_params("draft", {"seed": 1}) == {"k": 4, "seed": 1}
    assert store.update_params("draft", {"seed": 2}, replace=True) == {"seed": 2}


# ---- finding 2: symlinks and overwrites on the share path ---------------------------------------

def test_two_reports_in_the_same_second_are_two_files(store):
    add_run(store)
    ctx = ToolContext(store=store)
    first = Gate(store).call("write_report", {}, ctx)
    second = Gate(store).call("write_report", {}, ctx)
    assert not first.is_error and not second.is_error
    assert first.content["path"] != second.content["path"]
    assert Path(first.content["path"]).is_file() and Path(second.content["path"]).is_file()


def test_a_report_is_never_written_through_a_planted_symlink_or_over_a_file(store, tmp_path, monkeypatch):
    run_id = add_run(store)
    folder = tmp_path / "dest"
    folder.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    (folder / "planted.md").symlink_to(victim)
    (folder / "taken.md").write_text("an earlier report")
    names = iter(["planted.md", "taken.md", "fresh.md"])
    monkeypatch.setattr(share, "report_name", lambda runs, fmt: next(names))
    path = share.create_new_file(folder, [store.get_run(run_id)], "markdown", "# new report\n")
    assert path == folder / "fresh.md" and path.read_text() == "# new report\n"
    assert victim.read_text() == "keep me" and (folder / "taken.md").read_text() == "an earlier report"
    monkeypatch.setattr(share, "report_name", lambda runs, fmt: "planted.md")
    with pytest.raises(ParameterError, match="free report file name"):
        share.create_new_file(folder, [store.get_run(run_id)], "markdown", "x")
    assert victim.read_text() == "keep me"


def test_a_share_folder_swapped_for_a_symlink_after_approval_is_not_written(store, tmp_path):
    add_run(store)
    folder, elsewhere = tmp_path / "dest", tmp_path / "elsewhere"
    folder.mkdir()
    elsewhere.mkdir()
    asked = Gate(store).call("share_results", {"destination": str(folder)}, ToolContext(store=store)).content
    store.decide_approval(asked["approval_id"], True, by="test person")
    folder.rmdir()
    folder.symlink_to(elsewhere)
    ran = Gate(store).call("share_results", {"destination": str(folder), "approval_id": asked["approval_id"]},
                           ToolContext(store=store))
    assert ran.is_error and "nothing was written" in ran.content["error"]
    assert list(elsewhere.iterdir()) == []


# ---- finding 3: an approval covers what runs ------------------------------------------------

def approve(store, approval_id: str) -> None:
    store.decide_approval(approval_id, True, by="test person")


def test_the_newest_runs_approved_are_the_runs_sent(store, tmp_path):
    first = add_run(store)
    outside = tmp_path / "outside"
    outside.mkdir()
    share_input = {"destination": str(outside), "limit": 1}
    asked = Gate(store).call("share_results", share_input, ToolContext(store=store)).content
    assert asked["arguments"]["input"]["run_ids"] == [first] and first in asked["will_run"]
    approve(store, asked["approval_id"])
    newer = add_run(store, speedup=9.9)
    ran = Gate(store).call("share_results", {**share_input, "approval_id": asked["approval_id"]},
                           ToolContext(store=store))
    assert not ran.is_error and ran.content["run_ids"] == [first]
    [report] = outside.iterdir()
    assert first in report.read_text() and newer not in report.read_text()


def test_a_relative_destination_is_approved_and_written_as_the_absolute_folder(store, tmp_path, monkeypatch):
    add_run(store)
    here, there = tmp_path / "here", tmp_path / "there"
    for base in (here, there):
        (base / "out").mkdir(parents=True)
    monkeypatch.chdir(here)
    asked = Gate(store).call("share_results", {"destination": "out"}, ToolContext(store=store)).content
    assert asked["arguments"]["input"]["destination"] == str((here / "out").resolve())
    assert asked["arguments"]["requested"]["destination"] == "out"
    assert str((here / "out").resolve()) in asked["will_run"]
    approve(store, asked["approval_id"])
    monkeypatch.chdir(there)
    ran = Gate(store).call("share_results", {"destination": "out", "approval_id": asked["approval_id"]},
                           ToolContext(store=store))
    assert not ran.is_error, ran.content
    assert len(list((here / "out").iterdir())) == 1 and list((there / "out").iterdir()) == []


@pytest.mark.parametrize("destination,why", [
    ("file:///etc", "file: address"), ("ftp://example.com/x", "ftp: address"), ("FTP://example.com", "ftp: address"),
    ("/no/such/folder", "not an existing folder"), ("https://", "not a usable"), ("http://exa mple.com", "not a usable"),
    ("", "the destination is empty"), (" \t ", "the destination is empty"),
])
def test_destinations_outside_the_allow_list_are_refused_before_any_approval(store, destination, why):
    add_run(store)
    result = Gate(store).call("share_results", {"destination": destination}, ToolContext(store=store))
    assert result.is_error and why in result.content["error"]
    assert store.list_approvals() == []


@pytest.mark.parametrize("destination", ["", "   "])
def test_an_empty_destination_is_a_parameter_error_saying_what_to_give(destination):
    """Path("") is the current folder: an empty destination used to ask to copy the report there (QA s21, 12)."""
    with pytest.raises(ParameterError, match="the destination is empty") as raised:
        share.resolve_destination(destination)
    assert "an existing folder" in raised.value.hint and "http(s) URL" in raised.value.hint


def test_urls_are_normalised_in_the_approval(store):
    add_run(store)
    asked = Gate(store).call("share_results", {"destination": "HTTPS://Example.COM"}, ToolContext(store=store))
    assert asked.content["arguments"]["input"]["destination"] == "https://example.com/"


def test_deny_withdraws_an_approved_unused_approval(store, tmp_path, capsys):
    add_run(store)
    outside = tmp_path / "outside"
    outside.mkdir()
    ctx = ToolContext(store=store)
    asked = Gate(store).call("share_results", {"destination": str(outside)}, ctx).content
    approve(store, asked["approval_id"])
    shown = io.StringIO()
    row = decide_at_terminal(store, asked["approval_id"], approve=False, stdout=shown)  # no terminal needed
    assert row["status"] == "revoked" and "Withdrawn" in shown.getvalue()
    ran = Gate(store).call("share_results", {"destination": str(outside), "approval_id": asked["approval_id"]}, ctx)
    assert ran.is_error and "withdrawn" in ran.content["error"] and list(outside.iterdir()) == []
    with pytest.raises(ApprovalError, match="nothing to withdraw"):
        decide_at_terminal(store, asked["approval_id"], approve=False, stdout=io.StringIO())


def test_approvals_revoke_on_the_command_line(store, cli_in_process):
    asked = Gate(store).call("install_packages", {"packages": ["p-x"]}, ToolContext(store=store)).content
    approve(store, asked["approval_id"])
    proc = cli_in_process("approvals", "revoke", asked["approval_id"])
    assert proc.returncode == 0 and json.loads(proc.stdout)["status"] == "revoked", proc.stderr
    assert "pip install p-x" in proc.stderr
    again = cli_in_process("approvals", "revoke", asked["approval_id"])
    assert again.returncode == 2 and "nothing to withdraw" in again.stderr and "Traceback" not in again.stderr
    listed = json.loads(cli_in_process("approvals", "list", "--json", "--status", "revoked").stdout)["approvals"]
    assert [a["id"] for a in listed] == [asked["approval_id"]]


def test_a_newline_in_a_destination_cannot_print_a_line_of_its_own(store, tmp_path):
    add_run(store)
    fake = tmp_path / "x\nTo approve, type exactly:  share ~\n\x1b[2K"
    fake.mkdir()
    questions = []
    gate = Gate(store, confirm=lambda question: questions.append(question) or False)
    gate.call("share_results", {"destination": str(fake)}, ToolContext(store=store))
    [question] = questions
    assert question.count("\n") == 3  # the three lines of the prompt itself, whatever the values hold
    assert "\\nTo approve, type exactly:  share ~\\n\\x1b[2K" in question
    assert "\x1b" not in question and all(line.startswith(("specpilot asks", "This will", "  "))
                                          for line in question.splitlines())
    assert "\n" not in approval_prompt("share\nx", "a\rb\tc", "id\n1").split("\n", 2)[2].rstrip("\n")


class TTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_confirmation_ends_with_a_word_shown_only_on_the_terminal(store, monkeypatch):
    """`(sleep 5; echo "install P") | script -qc "specpilot tool approve ID"` approved: a known phrase
    typed blindly no longer does; the word shown on that terminal does (and differs each time)."""
    asked = Gate(store).call("install_packages", {"packages": ["p-x"]}, ToolContext(store=store)).content
    with pytest.raises(ApprovalError, match="not given"):
        decide_at_terminal(store, asked["approval_id"], approve=True, stdin=TTY("install p-x\n"), stdout=io.StringIO())
    assert store.get_approval(asked["approval_id"])["status"] == "pending"
    words = {approval.challenge_word() for _ in range(50)}
    assert len(words) > 40 and all(len(w) == 4 and w.isalpha() and w.islower() for w in words)
    monkeypatch.setattr(approval, "challenge_word", lambda: "kavo")
    shown = io.StringIO()
    confirmed, typed, phrase = read_confirmation(Terminal(TTY("install p-x kavo\n"), shown), "q", "install p-x")
    assert confirmed and phrase == "install p-x kavo" and "type exactly:  install p-x kavo" in shown.getvalue()
    row = decide_at_terminal(store, asked["approval_id"], approve=True, stdin=TTY("install p-x kavo\n"),
                             stdout=io.StringIO())
    assert row["status"] == "approved"


# ---- finding 4: hangs ----------------------------------------------------------------------------

# `specpilot mcp` whose model loading sleeps (a call that is still running when the signal comes); it
# writes its pid where the test can read it
SLOW_SERVER = """
import os, sys, time
import tools.models as models
open(os.environ["SERVER_PID"], "w").write(str(os.getpid()))
models.load = lambda *a, **k: time.sleep(120)
from agent.cli.main import main
sys.exit(main(["mcp"]))
"""


def slow_server_params(home: Path, pid_file: Path) -> StdioServerParameters:
    env = {"SPECPILOT_HOME": str(home), "PATH": os.environ.get("PATH", ""), "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": str(ROOT), "SERVER_PID": str(pid_file)}
    return StdioServerParameters(command=sys.executable, args=["-c", SLOW_SERVER], env=env, cwd=str(ROOT))


def gone_or_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_sigterm_during_a_call_answers_it_with_an_error_and_the_server_exits(specpilot_home, tmp_path):
    """The official MCP client, the server in its subprocess: SIGTERM while run_method is loading the model."""
    pid_file = tmp_path / "server.pid"
    seen = {}

    async def session():
        async with Client(slow_server_params(specpilot_home, pid_file), read_timeout_seconds=60) as client:
            async with anyio.create_task_group() as tg:
                async def call():
                    try:
                        seen["result"] = await client.call_tool("run_method", {"method": "draft", "prompt": "hi"})
                    except MCPError as exc:
                        seen["error"] = exc.error
                    seen["answered_at"] = time.monotonic()

                tg.start_soon(call)
                await anyio.sleep(3)  # the call is running in the server (loading the model, asleep)
                pid = int(pid_file.read_text())
                seen["pid"], seen["signalled_at"] = pid, time.monotonic()
                os.kill(pid, signal.SIGTERM)
                with anyio.fail_after(10):
                    while not gone_or_zombie(pid):
                        await anyio.sleep(0.02)
                seen["exited_at"] = time.monotonic()

    anyio.run(session)
    assert "error" in seen, seen.get("result")
    assert seen["error"].code == -32000 and "stopped by SIGTERM before run_method finished" in seen["error"].message
    assert seen["answered_at"] - seen["signalled_at"] < 2 and seen["exited_at"] - seen["signalled_at"] < 2
    with Store() as store:  # the call's task is left as it was cut off, not marked done
        [task] = store.list_tasks()
        assert task["status"] == "running" and task["kind"] == "tool:run_method"


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_to_an_idle_server_ends_it_non_zero_within_two_seconds(specpilot_home, tmp_path, signum):
    env = {**env_for_processes(), "SERVER_PID": str(tmp_path / "pid")}
    proc = subprocess.Popen([sys.executable, "-c", SLOW_SERVER], cwd=ROOT, env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}
    proc.stdin.write((json.dumps(init) + "\n").encode())
    proc.stdin.flush()
    assert json.loads(proc.stdout.readline())["id"] == 0  # serving, idle
    started = time.monotonic()
    proc.send_signal(signum)
    code = proc.wait(timeout=10)
    took = time.monotonic() - started
    stderr = proc.stderr.read().decode()
    proc.stdin.close()
    assert code == 128 + signum and took < 2, (code, took, stderr[-2000:])
    assert "Traceback" not in stderr and signal.Signals(signum).name in stderr


def test_calls_before_initialize_and_lone_surrogates_get_clear_errors(specpilot_home, tmp_path):
    from test_mcp_hardening import RawServer

    server = RawServer(specpilot_home, tmp_path)
    try:
        early = server.request(1, "tools/call", {"name": "recall", "arguments": {}})
        assert early["error"]["code"] == -32602 and "not initialized" in early["error"]["message"]
        assert "send initialize" in early["error"]["message"] and early["error"]["data"]
        server.initialize()
        assert "result" in server.request(3, "ping")
        server.send('{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "run_method", '
                    '"arguments": {"method": "draft", "prompt": "a\\ud800b"}}}')
        server.proc.stdin.close()  # the input ends at once: the answer is still written
        odd = server.answer(2)
        assert odd["error"]["code"] == -32602 and "lone surrogate (\\ud800)" in odd["error"]["message"]
    finally:
        assert "Traceback" not in server.close()


ONE_MB_LINE = "compare draft and ngram on " + "z" * (1 << 20)


def test_a_one_megabyte_word_is_refused_before_planning_in_ask(store):
    from agent.ask import ask

    started = time.monotonic()
    answer = ask(store, ONE_MB_LINE, brain="offline")
    took = time.monotonic() - started
    assert took < 1 and f"{MAX_PROMPT_BYTES:,} bytes" in answer["reply"] and answer["tool_calls"] == []
    assert store.list_tasks() == [] and store.db["messages"].count == 0  # nothing of it was stored


def test_a_one_megabyte_word_is_refused_before_planning_in_chat(store):
    from rich.console import Console

    from agent.chat import Chat

    shown = io.StringIO()
    chat = Chat(brain="offline", stdin=io.StringIO(ONE_MB_LINE + "\n/quit\n"), store=store, skip_onboarding=True,
                console=Console(file=shown, width=200))
    started = time.monotonic()
    assert chat.run() == 0
    assert time.monotonic() - started < 1
    assert "1,048,603 bytes of UTF-8" in shown.getvalue() and store.list_tasks() == []


def test_the_tool_inputs_and_the_conversation_share_one_limit(store):
    text = "x" * (MAX_PROMPT_BYTES + 1)
    reply = Session(store, brain=None).handle(text)
    tool = Gate(store).call("run_method", {"method": "draft", "prompt": text}, ToolContext(store=store))
    assert reply.text.split("\n")[0].split(";")[1] == tool.content["error"].split("\n")[0].split(";")[1]


# ---- finding 5: read-only and odd homes ------------------------------------------------------------

def pretend_read_only(monkeypatch, path: Path) -> None:
    """os.access as a user sees a read-only file (root may write any file)."""
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: False if str(p) == str(path) and mode & os.W_OK
                        else real_access(p, mode))


def test_a_read_only_open_leaves_no_read_only_wal_or_shm_behind():
    with Store() as s:
        run_id = add_run(s)
    path = database_path()
    os.chmod(path, 0o444)
    # a patch of its own: undoing the test's monkeypatch would also undo the temporary SPECPILOT_HOME, and the
    # store opened below would be the machine's own
    with pytest.MonkeyPatch.context() as patch:
        pretend_read_only(patch, path)
        try:
            with Store() as s:
                assert s.read_only and s.get_run(run_id)["speedup"] == 1.5
            beside = [path.with_name(path.name + suffix) for suffix in ("-wal", "-shm")]
            assert all(not p.exists() or p.stat().st_mode & stat.S_IWUSR for p in beside), \
                [(p.name, oct(p.stat().st_mode)) for p in beside if p.exists()]
        finally:
            os.chmod(path, 0o644)
    assert database_path() == path  # still the test's own home
    with Store() as s:  # following the printed hint (chmod u+w specpilot.db) is enough to write again
        assert not s.read_only and add_run(s)


def test_a_read_only_memory_still_answers_read_requests_in_the_conversation(monkeypatch):
    from agent.ask import ask

    with Store() as s:
        s.update_params("draft", {"k": 6})
    pretend_read_only(monkeypatch, database_path())
    with Store() as s:
        assert s.read_only
        answer = ask(s, "/params", brain="offline")
        assert "k=6" in answer["reply"].replace(" ", "") or "'k': 6" in answer["reply"], answer["reply"]
        assert "Not recorded in memory" in answer["reply"] and "read-only" in answer["reply"]
        assert answer["task"]["id"] is None


def read_only_mount_works(folder: Path) -> bool:
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        return False
    probe = subprocess.run(["unshare", "-m", "sh", "-c", f"mount --bind {folder} {folder} && "
                            f"mount -o remount,ro,bind {folder} {folder} && ! touch {folder}/.probe"],
                           capture_output=True, timeout=30)
    return probe.returncode == 0


def test_a_database_on_a_read_only_mount_is_read(specpilot_home):
    with Store() as s:
        run_id = add_run(s)
    if not read_only_mount_works(specpilot_home):
        pytest.skip("needs `unshare -m` and a read-only bind mount (root or user namespaces)")
    home = str(specpilot_home)
    command = (f"mount --bind {home} {home} && mount -o remount,ro,bind {home} {home} && "
               f"{sys.executable} -m agent.cli.main tool lookup_runs --input '{{}}'")
    proc = subprocess.run(["unshare", "-m", "sh", "-c", command], cwd=ROOT, capture_output=True, text=True,
                          timeout=TIMEOUT_S, env=env_for_processes())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    answer = json.loads(proc.stdout)
    assert answer["runs"][0]["run_id"] == run_id and "read-only" in answer[NOT_RECORDED]
    assert "Traceback" not in proc.stderr


def test_a_home_that_is_a_file_is_one_clear_message(tmp_path, monkeypatch):
    home = tmp_path / "home-file"
    home.write_text("not a folder")
    monkeypatch.setenv("SPECPILOT_HOME", str(home))
    proc = specpilot("runs", "list")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and "FileExistsError" not in proc.stderr
    assert f"the specpilot folder {home} is a file, not a folder" in proc.stderr
    tool = specpilot("tool", "recall")
    assert tool.returncode == 2 and "is a file, not a folder" in json.loads(tool.stdout)["error"]


def test_another_programs_sqlite_file_is_left_as_it_is():
    path = database_path()
    with sqlite3.connect(path) as db:
        db.execute("create table notes (id integer primary key, text text)")
        db.execute("insert into notes (text) values ('mine')")
    db.close()
    with pytest.raises(StoreError, match="another program") as info:
        Store()
    assert "notes" in str(info.value) and "SPECPILOT_HOME" in info.value.hint
    with sqlite3.connect(path) as db:
        tables = [r[0] for r in db.execute("select name from sqlite_master where type = 'table'")]
    db.close()
    assert tables == ["notes"]


def fill_the_disk(store) -> StoreError:
    """Make the database full as a full disk does (SQLite answers SQLITE_FULL: no page can be added) and
    fill the room left in the pages of the tables a request writes; return the first error."""
    pages = store.db.execute("pragma page_count").fetchone()[0]
    store.db.execute(f"pragma max_page_count = {pages}")
    fillers = (lambda i: store.create_task("filler " * 40, "filler", ["step"]),
               lambda i: store.update_params("lookahead", {"window": 7}),
               lambda i: store.save_answer(f"filler.{i}", "x" * 100))
    errors = []
    for fill in fillers:
        with pytest.raises(StoreError) as info:
            for i in range(100_000):
                fill(i)
        errors.append(info.value)
    return errors[0]


def test_an_answer_saved_on_a_full_disk_is_an_error_not_silently_dropped(store):
    fill_the_disk(store)
    with pytest.raises(StoreError, match="full"):
        store.save_answer("onboarding.first_prompt", "p" * 3000)  # sqlite-utils' upsert dropped it without a word


def test_on_a_full_disk_reads_answer_and_writes_say_the_disk_is_full(store):
    run_id = add_run(store)
    store.update_params("draft", {"k": 4})
    full = fill_the_disk(store)
    assert "full" in str(full) and "the disk holding" in full.hint and "free some space" in full.hint
    found = host_call(store, "lookup_runs", {"run_id": run_id})
    assert not found.is_error and found.content["runs"][0]["run_id"] == run_id
    assert "not recorded as a task" in found.content[NOT_RECORDED] and "full" in found.content[NOT_RECORDED]
    recalled = host_call(store, "recall", {})
    assert not recalled.is_error and recalled.content["saved_params"]["draft"] == {"k": 4}
    saved = host_call(store, "save_params", {"method": "draft", "params": {"k": 5}})
    assert saved.is_error and "full" in saved.content["error"] and store.get_params("draft") == {"k": 4}
    from agent.brains import make_brain

    reply = Session(store, make_brain("offline")).handle("/params")
    assert "k=4" in reply.text.replace(" ", "") or "'k': 4" in reply.text or '"k": 4' in reply.text
    assert "Not recorded in memory" in reply.text


# ---- finding 6: tracebacks and unclear errors --------------------------------------------------------

def test_huge_numbers_and_negative_limits_are_refused_clearly(store, cli_in_process):
    add_run(store)
    report = host_call(store, "write_report", {"task_id": 10 ** 30})
    assert report.is_error and "internal error" not in report.content["error"] and "digits" in report.content["error"]
    assert host_call(store, "write_report", {"task_id": 2 ** 62}).content["error"].startswith("no stored task")
    with pytest.raises(ParameterError):
        store.list_runs(limit=-1)
    for limit in (str(10 ** 20), "-1", "0", "lots"):
        proc = cli_in_process("runs", "list", "--limit", limit)
        assert proc.returncode == 2 and "--limit" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert cli_in_process("runs", "list", "--limit", "1", "--json").returncode == 0


def test_sharing_into_the_specpilot_folder_is_refused_before_an_approval(store, specpilot_home):
    add_run(store)
    (specpilot_home / "reports").mkdir(exist_ok=True)
    result = host_call(store, "share_results", {"destination": str(specpilot_home / "reports")})
    assert result.is_error and "inside the specpilot folder" in result.content["error"]
    assert "write_report" in result.content["error"] and store.list_approvals() == []


@pytest.mark.parametrize("params,why", [
    ({"k": "4"}, "valid integer"), ({"k": True}, "valid integer"), ({"temperature": "0.5"}, "valid number"),
    ({"target": "\ud800"}, "lone surrogate"), ({"target": "a\x00b"}, "NUL"), ({"target": "a\u202eb"}, "U+202E"),
    ({"target": "t" * 10_000_000}, "10,000,000 characters"), ({"seed": 10 ** 30}, "digits"),
])
def test_save_params_refuses_wrong_types_and_strings_no_name_holds(store, params, why):
    result = host_call(store, "save_params", {"method": "draft", "params": params})
    assert result.is_error and why in result.content["error"], result.content
    assert len(json.dumps(result.content)) < 2000  # a 10 MB value is not echoed back
    assert store.get_params("draft") is None


def test_the_json_cli_answers_a_lone_surrogate_without_a_traceback(cli_in_process):
    proc = cli_in_process("tool", "save_params", "--input", '{"method": "draft", "params": {"target": "\\ud800"}}')
    assert proc.returncode == 1 and "lone surrogate" in json.loads(proc.stdout)["error"]
    assert "Traceback" not in proc.stderr and "UnicodeEncodeError" not in proc.stderr


def test_train_medusa_bounds_steps_and_approves_resolved_paths(store, tmp_path, monkeypatch):
    ctx = ToolContext(store=store)
    huge = Gate(store).call("train_medusa", {"steps": 10 ** 12}, ctx)
    assert huge.is_error and "steps" in huge.content["error"]
    data = tmp_path / "data.txt"
    data.write_text("def f(): pass\n")
    monkeypatch.chdir(tmp_path)
    asked = Gate(store).call("train_medusa", {"out": "../../../x", "data_files": ["data.txt"]}, ctx).content
    covered = asked["arguments"]["input"]
    assert covered["out"] == os.path.realpath(tmp_path / "../../../x") and Path(covered["out"]).is_absolute()
    assert covered["data_files"] == [str(data.resolve())]
    assert covered["out"] in asked["will_run"] and str(data.resolve()) in asked["will_run"]
    missing = Gate(store).call("train_medusa", {"data_files": ["/no/such/file"]}, ctx)
    assert missing.is_error and "not a readable file" in missing.content["error"]


def test_skill_install_keeps_an_edited_skill_md_and_never_follows_symlinks(tmp_path):
    warnings = []
    folder = install_skill(tmp_path / "skills", warn=warnings.append)
    skill = folder / "SKILL.md"
    installed = skill.read_text()
    install_skill(tmp_path / "skills", warn=warnings.append)  # unchanged: replaced quietly
    skill.write_text(installed + "\nMy own note.\n")
    warnings.clear()
    install_skill(tmp_path / "skills", warn=warnings.append)
    assert skill.read_text().endswith("My own note.\n") and (folder / "SKILL.md.new").read_text() == installed
    assert any("was edited" in w for w in warnings)

    victim = tmp_path / "victim.md"
    victim.write_text("not specpilot's")
    (folder / "workflows.md").unlink()
    (folder / "workflows.md").symlink_to(victim)
    warnings.clear()
    install_skill(tmp_path / "skills", warn=warnings.append)
    assert victim.read_text() == "not specpilot's" and any("symlink" in w for w in warnings)

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "linked").mkdir()
    (tmp_path / "linked" / "specpilot").symlink_to(elsewhere)
    with pytest.raises(ParameterError, match="symlink"):
        install_skill(tmp_path / "linked", warn=warnings.append)
    assert list(elsewhere.iterdir()) == []
