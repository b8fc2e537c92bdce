"""Approvals only a person can give (issue 13, findings 2-4): the answer is read from the controlling
terminal the gate opens itself (/dev/tty), never from piped input; it is a typed confirmation naming
the action, so a stream of `y` through `script` approves nothing; `medusa train --yes` goes through
the same gate and record; package names are names, never archives, paths, URLs or options; the
approvals audit trail and expiry. pip is replaced by a recorder everywhere: nothing is installed."""

from __future__ import annotations

import fcntl
import io
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import termios
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pexpect
import pytest

import agent.approval as approval
import tools.agent_tools.install as install
from agent.approval import Gate, NoTerminal, Terminal, ask_at_terminal, decide_at_terminal
from agent.cli.main import main as specpilot_main
from memory import Store
from memory.helpers import database_path
from tools.errors import ApprovalError, ParameterError, SpecpilotError
from tools.agent_tools.registry import ToolContext

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT_S = 120

# `specpilot` with pip replaced by a recorder (every pip command is appended to $PIP_RECORD as JSON)
# and model loading replaced by one that records and stops (in $LOAD_RECORD): nothing is installed or loaded.
RECORDING_SPECPILOT = """
import json, os, sys
import tools.agent_tools.install as install
import tools.models as models
from tools.errors import ModelNotFoundError

class Done:
    returncode, stdout, stderr = 0, "recorded\\n", ""

def record_pip(argv):
    with open(os.environ["PIP_RECORD"], "a") as f:
        f.write(json.dumps(list(argv)) + "\\n")
    return Done()

def record_load(ref, *a, **k):
    with open(os.environ["LOAD_RECORD"], "a") as f:
        f.write(json.dumps(ref) + "\\n")
    raise ModelNotFoundError("model loading is replaced in this test")

install.run_pip = record_pip
models.load = record_load
from agent.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


class Done:
    returncode = 0
    stdout = "Successfully installed\n"
    stderr = ""


@pytest.fixture
def store():
    with Store() as s:
        yield s


@pytest.fixture(autouse=True)
def no_challenge_word(monkeypatch):
    """In this process the stand-in terminals type the confirmation before it is shown: no random word is
    added to it. The processes on a real pseudo-terminal below read the word the terminal shows."""
    monkeypatch.setattr(approval, "challenge_word", lambda: "")


CONFIRMATION = r"type exactly:  (install p-x [a-z]{4})\r?\n"  # the confirmation a real terminal shows


@pytest.fixture
def pip_calls(monkeypatch):
    """Every pip command the install tool would run in this process (nothing really runs)."""
    calls: list[list[str]] = []
    monkeypatch.setattr(install, "run_pip", lambda argv: calls.append(list(argv)) or Done())
    return calls


@pytest.fixture
def records(tmp_path, monkeypatch):
    """Files where the recording specpilot writes the pip commands and model loads it was asked for."""
    paths = {"pip": tmp_path / "pip.jsonl", "load": tmp_path / "load.jsonl"}
    monkeypatch.setenv("PIP_RECORD", str(paths["pip"]))
    monkeypatch.setenv("LOAD_RECORD", str(paths["load"]))
    return paths


def recorded(path: Path) -> list:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def run_specpilot(*args: str, stdin: str = "", **popen) -> subprocess.CompletedProcess:
    """The recording specpilot in a new session: no controlling terminal, input piped."""
    popen.setdefault("start_new_session", True)
    return subprocess.run([sys.executable, "-c", RECORDING_SPECPILOT, *args], cwd=ROOT, input=stdin,
                          capture_output=True, text=True, timeout=TIMEOUT_S, env=dict(os.environ), **popen)


def spawn_on_a_pty(*args: str) -> pexpect.spawn:
    """The recording specpilot on a real pseudo-terminal: its stdin and its controlling terminal."""
    return pexpect.spawn(sys.executable, ["-c", RECORDING_SPECPILOT, *args], cwd=str(ROOT),
                         env=dict(os.environ, TERM="dumb"), encoding="utf-8", timeout=TIMEOUT_S)


def pending_install(store, package: str = "p-x") -> str:
    """A pending install approval, as an agent host's call creates it."""
    result = Gate(store).call("install_packages", {"packages": [package]}, ToolContext(store=store))
    assert result.content["status"] == "approval_required", result.content
    return result.content["approval_id"]


def typed(*lines: str):
    """An open_terminal stand-in: a terminal on which the person types ``lines``."""
    shown = io.StringIO()

    def opener() -> Terminal:
        return Terminal(io.StringIO("".join(f"{line}\n" for line in lines)), shown)

    opener.shown = shown
    return opener


# ---- finding 2: piped chat ---------------------------------------------------------------

def test_piped_chat_cannot_approve_an_install(store, records):
    """`printf '/install p-x\\ny\\n/quit\\n' | specpilot chat --brain offline` approves nothing."""
    store.mark_onboarding_complete()
    proc = run_specpilot("chat", "--brain", "offline", stdin="/install p-x\ny\n/quit\n")
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    assert recorded(records["pip"]) == []
    [row] = store.list_approvals()
    assert row["status"] == "pending" and row["decided_by"] is None
    assert row["arguments"]["input"]["packages"] == ["p-x"]
    assert f"specpilot tool approve" in proc.stdout  # the chat says how a person approves it


def test_piped_chat_with_a_controlling_terminal_still_reads_no_decision_from_the_pipe(store, records):
    """A pasted document with a `y` line, even in a session that has a terminal: the pipe is data."""
    store.mark_onboarding_complete()
    master, slave = os.openpty()
    with_terminal = {"pass_fds": (slave,), "preexec_fn": lambda: fcntl.ioctl(slave, termios.TIOCSCTTY, 0),
                     "start_new_session": True}
    try:
        has_tty = subprocess.run([sys.executable, "-c", "import os; os.close(os.open('/dev/tty', os.O_RDWR))"],
                                 timeout=TIMEOUT_S, **with_terminal)
        assert has_tty.returncode == 0  # the session really has a controlling terminal
        proc = run_specpilot("chat", "--brain", "offline", stdin="/install p-x\ny\nyes\ninstall p-x\n/quit\n",
                             **with_terminal)
        os.set_blocking(master, False)
        try:
            on_terminal = os.read(master, 65536).decode(errors="replace")
        except BlockingIOError:
            on_terminal = ""
    finally:
        os.close(master)
        os.close(slave)
    assert proc.returncode == 0, proc.stderr
    assert recorded(records["pip"]) == [] and "type exactly" not in on_terminal
    assert {r["status"] for r in store.list_approvals()} == {"pending"}


def test_with_no_terminal_the_gate_refuses_to_ask_and_says_how_to_approve(store, pip_calls, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.StringIO("y\n"))  # piped input, as in `printf ... | specpilot chat`
    with pytest.raises(NoTerminal, match="interactive terminal"):
        approval.open_terminal()
    result = Gate(store, ask_at_terminal).call("install_packages", {"packages": ["p-x"]}, ToolContext(store=store))
    assert not result.is_error and result.content["status"] == "approval_required"
    assert "nobody was asked" in result.content["why_pending"]
    assert f"specpilot tool approve {result.content['approval_id']}" in result.content["how_to_approve"]
    assert pip_calls == [] and store.get_approval(result.content["approval_id"])["status"] == "pending"


@pytest.mark.parametrize("answer", ["y", "yes", "Y", "approve", "install", "install p-y", ""])
def test_the_terminal_answer_must_name_the_exact_package(store, pip_calls, monkeypatch, answer):
    monkeypatch.setattr(approval, "open_terminal", typed(answer))
    result = Gate(store, ask_at_terminal).call("install_packages", {"packages": ["p-x"]}, ToolContext(store=store))
    assert result.is_error and "denied" in result.content["error"] and pip_calls == []
    assert [r["status"] for r in store.list_approvals()] == ["denied"]


def test_typing_the_confirmation_on_the_terminal_runs_the_install_once(store, pip_calls, monkeypatch):
    terminal = typed("install p-x")
    monkeypatch.setattr(approval, "open_terminal", terminal)
    result = Gate(store, ask_at_terminal).call("install_packages", {"packages": ["p-x"]}, ToolContext(store=store))
    assert not result.is_error, result.content
    assert pip_calls == [[sys.executable, "-m", "pip", "install", "p-x"]]
    shown = terminal.shown.getvalue()
    assert "-m pip install p-x" in shown and "type exactly:  install p-x" in shown
    [row] = store.list_approvals()
    assert row["status"] == "consumed" and row["decided_by"] == "terminal user" and row["decided_at"]


def test_escape_sequences_in_what_is_shown_cannot_repaint_the_terminal():
    assert approval.printable("copy into /tmp/\x1b[2Kok\n") == "copy into /tmp/\\x1b[2Kok\n"


# ---- finding 3: `tool approve` through `script`, and on a real pty -------------------------

@pytest.mark.skipif(shutil.which("script") is None, reason="needs script")
def test_yes_piped_through_script_does_not_approve(store, records):
    """`yes | script -qec "specpilot tool approve ID"`: a pty, but no person typed the confirmation."""
    approval_id = pending_install(store)
    command = f"{sys.executable} -c {_quoted(RECORDING_SPECPILOT)} tool approve {approval_id}"
    # `yes` at 20 lines a second: a flood of "y" lines only made the pty echo compete with the program for the CPU
    slow_yes = "while echo y; do sleep 0.05; done"
    proc = subprocess.run(f"{slow_yes} | script -qec {_quoted(command)} /dev/null | tail -c 20000", shell=True, cwd=ROOT,
                          capture_output=True, text=True, timeout=TIMEOUT_S, start_new_session=True,
                          env=dict(os.environ, TERM="dumb"))
    assert "not given" in proc.stdout, proc.stdout[-2000:]
    assert store.get_approval(approval_id)["status"] == "pending" and recorded(records["pip"]) == []


def _quoted(text: str) -> str:
    import shlex

    return shlex.quote(text)


def test_on_a_real_pty_a_bare_yes_does_not_approve(store, records):
    approval_id = pending_install(store)
    person = spawn_on_a_pty("tool", "approve", approval_id)
    person.expect("pip install p-x")  # the exact command is shown first
    person.expect(CONFIRMATION)
    person.sendline("yes")
    person.expect(pexpect.EOF)
    person.close()
    assert person.exitstatus == 2 and "not given" in person.before
    assert store.get_approval(approval_id)["status"] == "pending"


def test_input_typed_before_the_question_is_discarded(store, records):
    """The confirmation already waiting in the terminal (pasted, typed ahead) does not answer."""
    approval_id = pending_install(store)
    person = spawn_on_a_pty("tool", "approve", approval_id)
    person.send("install p-x\n")  # before the question is asked
    person.expect(CONFIRMATION)
    person.sendline("no")
    person.expect(pexpect.EOF)
    person.close()
    assert person.exitstatus == 2 and store.get_approval(approval_id)["status"] == "pending"


def test_a_person_typing_the_confirmation_on_a_pty_approves_and_the_call_runs_once(store, records, pip_calls):
    approval_id = pending_install(store)
    person = spawn_on_a_pty("tool", "approve", approval_id)
    person.expect(CONFIRMATION)
    person.sendline(person.match.group(1))  # the phrase and the word made for this question
    person.expect(pexpect.EOF)
    person.close()
    assert person.exitstatus == 0, person.before
    row = store.get_approval(approval_id)
    assert row["status"] == "approved" and "/dev/tty" in row["decided_by"] and row["decided_at"]
    ctx = ToolContext(store=store)
    ran = Gate(store).call("install_packages", {"packages": ["p-x"], "approval_id": approval_id}, ctx)
    assert not ran.is_error and pip_calls == [[sys.executable, "-m", "pip", "install", "p-x"]]
    again = Gate(store).call("install_packages", {"packages": ["p-x"], "approval_id": approval_id}, ctx)
    assert again.is_error and len(pip_calls) == 1


def test_tool_approve_without_a_terminal_says_how_to_approve(store, records):
    approval_id = pending_install(store)
    proc = run_specpilot("tool", "approve", approval_id, stdin="install p-x\n")
    assert proc.returncode == 2 and "interactive terminal" in json.loads(proc.stdout)["error"]
    assert store.get_approval(approval_id)["status"] == "pending"


def test_decide_at_terminal_with_a_stand_in_that_is_not_a_terminal_refuses(store):
    approval_id = pending_install(store)
    with pytest.raises(ApprovalError, match="interactive terminal"):
        decide_at_terminal(store, approval_id, approve=True, stdin=io.StringIO("install p-x\n"))


# ---- finding 3: `medusa train --yes` -----------------------------------------------------

MEDUSA_ARGS = ("medusa", "train", "--target", "tiny-target", "--steps", "3")


def test_medusa_train_yes_without_a_terminal_trains_nothing_and_leaves_a_pending_record(store, records, tmp_path):
    proc = run_specpilot(*MEDUSA_ARGS, "--out", str(tmp_path / "heads"), "--yes")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "specpilot tool approve" in proc.stderr and "--approval-id" in proc.stderr
    assert recorded(records["load"]) == []  # the model was never loaded
    [row] = store.list_approvals()
    assert row["status"] == "pending" and row["action"] == "train"
    assert row["arguments"]["tool"] == "specpilot medusa train" and row["arguments"]["input"]["target"] == "tiny-target"


def test_medusa_train_yes_asks_on_the_terminal_and_records_the_decision(store, monkeypatch, tmp_path):
    import tools.models

    loads = []
    monkeypatch.setattr(tools.models, "load", lambda ref, **k: loads.append(ref) or (_ for _ in ()).throw(
        SpecpilotError("stop after the gate")))
    out = str(tmp_path / "heads")
    monkeypatch.setattr(approval, "open_terminal", typed("y"))
    assert specpilot_main([*MEDUSA_ARGS, "--out", out, "--yes"]) == 2
    assert loads == [] and [r["status"] for r in store.list_approvals()] == ["denied"]
    monkeypatch.setattr(approval, "open_terminal", typed("train tiny-target"))
    assert specpilot_main([*MEDUSA_ARGS, "--out", out, "--yes"]) == 2  # stops at our load stand-in
    assert loads == ["tiny-target"]
    assert sorted(r["status"] for r in store.list_approvals()) == ["consumed", "denied"]


def test_medusa_train_uses_an_approval_given_with_tool_approve_once(store, monkeypatch, tmp_path):
    import tools.models

    loads = []
    monkeypatch.setattr(tools.models, "load", lambda ref, **k: loads.append(ref) or (_ for _ in ()).throw(
        SpecpilotError("stop after the gate")))
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    args = [*MEDUSA_ARGS, "--out", str(tmp_path / "heads")]
    assert specpilot_main(args) == 2 and loads == []
    [row] = store.list_approvals()
    monkeypatch.setattr(approval, "open_terminal", typed("train tiny-target"))
    decide_at_terminal(store, row["id"], approve=True, stdin=None)
    other = [*MEDUSA_ARGS, "--out", str(tmp_path / "elsewhere"), "--approval-id", row["id"]]
    assert specpilot_main(other) == 2 and loads == []  # the approval covers another command
    assert specpilot_main([*args, "--approval-id", row["id"]]) == 2 and loads == ["tiny-target"]
    assert specpilot_main([*args, "--approval-id", row["id"]]) == 2 and loads == ["tiny-target"]  # used once
    assert store.get_approval(row["id"])["status"] == "consumed"


def never_asked():
    raise AssertionError("a person was asked to approve a run that cannot start")


def a_file(tmp_path) -> str:
    path = tmp_path / "a-file"
    path.write_text("not a folder")
    return str(path)


# QA s21 finding 8: what can be checked without loading anything is refused before an approval exists
@pytest.mark.parametrize("extra,message", [
    (["--steps", "-5"], "steps: Input should be greater than or equal to 1"),
    (["--heads", "0"], "num_heads"),
    (["--learning-rate", "0"], "learning_rate"),
    (["--data", "/nonexistent.txt"], "training file(s) not found or not readable: /nonexistent.txt"),
    (["--data", __file__, "/tmp"], "not found or not readable: /tmp"),
    (["--target", "/nonexistent"], "/nonexistent is not a folder or file on this machine"),
    (["--target", "./missing.gguf"], "GGUF file missing.gguf does not exist"),
    (["--target", "smollm2-135m-instruct"], "the built-in model smollm2-135m-instruct is not on this machine yet"),
    (["--out", "A_FILE"], "is a file"),
])
def test_medusa_train_refuses_a_run_that_cannot_start_before_asking(store, monkeypatch, tmp_path, capsys,
                                                                    extra, message):
    import tools.models

    monkeypatch.setenv("SPECPILOT_MODELS", str(tmp_path / "no-models"))
    monkeypatch.setattr(tools.models, "load", lambda *a, **k: pytest.fail("a model was loaded"))
    monkeypatch.setattr(approval, "open_terminal", never_asked)
    args = [*MEDUSA_ARGS, "--out", str(tmp_path / "heads"), *extra]
    args = [a_file(tmp_path) if a == "A_FILE" else a for a in args]
    assert specpilot_main(args) == 2
    assert message in capsys.readouterr().err
    assert store.list_approvals() == []


def test_medusa_train_with_bad_steps_and_no_terminal_records_no_approval(store, records, tmp_path):
    """The QA's example: `--steps -5` with no terminal used to leave a pending approval for it."""
    proc = run_specpilot("medusa", "train", "--target", "tiny-target", "--steps", "-5", "--out", str(tmp_path / "h"))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "steps" in proc.stderr and "approv" not in proc.stderr
    assert store.list_approvals() == [] and recorded(records["load"]) == []


# ---- finding 4: package names ------------------------------------------------------------

REFUSED_PACKAGES = ["evil-1.0.tar.gz", "evil.whl", "evil-1.0-py3-none-any.whl", "evil.zip", "EVIL.TAR.GZ", "evil.tgz",
                    "evil.tar.bz2", "evil.tar", "evil.egg", "./evil", "../evil", "/tmp/evil", "evil/", "C:\\evil",
                    "evil\\pkg", "https://evil.example/evil.tar.gz", "file:///tmp/evil", "git+https://x/y.git",
                    "evil @ https://x/evil.whl", "evil@https://x/evil.whl", "evil@file:///tmp/x", "-e", "-e.",
                    "--index-url=http://evil", "--extra-index-url", "-r", "-rrequirements.txt", "--pre",
                    "evil; os_name=='nt'",
                    "evil ==1.0", "evil\n--index-url=x", "evil\x00", "", "=1.0", "[extra]", "evil[", "~evil",
                    "a" * 300, ".evil", "evil.", "e v i l"]


@pytest.mark.parametrize("spec", REFUSED_PACKAGES)
def test_archives_paths_urls_and_options_are_not_package_names(spec):
    with pytest.raises(ParameterError) as refused:
        install.check_package(spec)
    message = refused.value.user_message()
    assert "PyPI names" in message and "archives" in message and "URLs" in message and "--index-url" in message


@pytest.mark.parametrize("spec", ["gguf", "gguf>=0.10", "gguf>=0.10,<1", "transformers[torch]==5.0.1", "zope.interface",
                                  "medusa-llm", "lade", "accelerate<2", "x==1.0+local", "Pillow~=10.0"])
def test_names_with_a_version_specifier_are_accepted(spec):
    assert install.check_package(spec) == spec


@pytest.mark.parametrize("spec", ["evil-1.0.tar.gz", "evil.whl", "./evil", "https://evil.example/e.zip", "-e."])
def test_an_archive_never_reaches_pip_or_an_approval(store, pip_calls, spec, monkeypatch):
    monkeypatch.setattr(approval, "open_terminal", typed(f"install {spec}"))
    for confirm in (None, ask_at_terminal):
        result = Gate(store, confirm).call("install_packages", {"packages": ["gguf", spec]}, ToolContext(store=store))
        assert result.is_error and "not a package name" in result.content["error"]
    assert pip_calls == [] and store.list_approvals() == []


# ---- the audit trail and expiry ------------------------------------------------------------

def _age(approval_id: str, column: str, minutes: float) -> None:
    when = (datetime.now(timezone.utc) - timedelta(minutes=minutes)).isoformat(timespec="microseconds")
    with sqlite3.connect(database_path()) as db:
        db.execute(f"update approvals set {column} = ? where id = ?", [when, approval_id])


def test_a_pending_approval_expires_and_can_no_longer_be_approved(store, pip_calls, monkeypatch):
    approval_id = pending_install(store)
    _age(approval_id, "created_at", 16)
    assert store.get_approval(approval_id)["status"] == "expired"
    monkeypatch.setattr(approval, "open_terminal", typed("install p-x"))
    with pytest.raises(ApprovalError, match="expired"):
        decide_at_terminal(store, approval_id, approve=True)
    with pytest.raises(ApprovalError, match="expired"):
        store.decide_approval(approval_id, True, by="someone")
    assert [r["status"] for r in store.list_approvals(status="expired")] == ["expired"]
    assert store.list_approvals(status="pending") == [] and pip_calls == []


def test_an_approval_unused_for_an_hour_expires(store, pip_calls):
    approval_id = pending_install(store)
    store.decide_approval(approval_id, True, by="test person")
    _age(approval_id, "decided_at", 61)
    ran = Gate(store).call("install_packages", {"packages": ["p-x"], "approval_id": approval_id},
                           ToolContext(store=store))
    assert ran.is_error and "expired" in ran.content["error"] and pip_calls == []
    row = store.get_approval(approval_id)
    assert row["status"] == "expired" and row["decided_by"] == "test person"


def test_approvals_list_is_the_audit_trail(store, capsys):
    denied = pending_install(store, "p-denied")
    store.decide_approval(denied, False, by="test person")
    approved = pending_install(store, "p-used")
    store.decide_approval(approved, True, by="test person")
    store.consume_approval(approved, action="install")
    expired = pending_install(store, "p-old")
    _age(expired, "created_at", 20)
    waiting = pending_install(store, "p-waiting")
    assert specpilot_main(["approvals", "list", "--json"]) == 0
    rows = {r["id"]: r for r in json.loads(capsys.readouterr().out)["approvals"]}
    assert {i: rows[i]["status"] for i in rows} == {denied: "denied", approved: "consumed", expired: "expired",
                                                    waiting: "pending"}
    row = rows[approved]
    assert row["tool"] == "install_packages" and row["input"] == {"packages": ["p-used"], "upgrade": False}
    assert row["decided_by"] == "test person" and row["decided_at"] and row["created_at"] and row["consumed_at"]
    assert rows[waiting]["expires_at"] > rows[waiting]["created_at"]
    assert specpilot_main(["approvals", "list"]) == 0
    table = capsys.readouterr().out
    assert denied in table and "p-waiting" in table and "expired" in table


def test_eagle_train_asks_on_the_terminal_before_anything_loads(store, monkeypatch, tmp_path):
    import tools.models

    loads = []
    monkeypatch.setattr(tools.models, "load", lambda ref, **k: loads.append(ref) or (_ for _ in ()).throw(
        SpecpilotError("stop after the gate")))
    args = ["eagle", "train", "--target", "tiny-target", "--out", str(tmp_path / "head"), "--data", __file__]
    monkeypatch.setattr(approval, "open_terminal", typed("yes"))
    assert specpilot_main(args) == 2
    assert loads == [] and [r["status"] for r in store.list_approvals()] == ["denied"]
    monkeypatch.setattr(approval, "open_terminal", typed("train tiny-target"))
    assert specpilot_main(args) == 2  # stops at our load stand-in, after the approval
    assert loads == ["tiny-target"]
    rows = store.list_approvals()
    assert sorted(r["status"] for r in rows) == ["consumed", "denied"]
    assert all(r["arguments"]["tool"] == "specpilot eagle train" for r in rows)


def test_eagle_train_refuses_bad_fused_layers_or_start_before_asking(store, monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(approval, "open_terminal", typed("train tiny-target"))
    base = ["eagle", "train", "--target", "tiny-target", "--out", str(tmp_path / "head"), "--data", __file__]
    assert specpilot_main([*base, "--fuse-layers", "2,middle"]) == 2
    assert "not a list of layer numbers" in capsys.readouterr().err
    assert specpilot_main([*base, "--start", str(tmp_path / "nothing")]) == 2
    assert "holds no EAGLE head" in capsys.readouterr().err
    assert specpilot_main([*base, "--start", "shipped"]) == 2
    assert "no EAGLE head is shipped for tiny-target" in capsys.readouterr().err
    assert store.list_approvals() == []  # nothing was asked


@pytest.mark.parametrize("extra,message", [
    (["--epochs", "0"], "epochs"),
    (["--passes", "9"], "passes"),
    (["--max-tokens", "0"], "--max-tokens 0 is too few"),
    (["--data", "/nonexistent.txt"], "training file(s) not found or not readable: /nonexistent.txt"),
    (["--data"], "no training text for tiny-target"),
    (["--target", "/nonexistent"], "/nonexistent is not a folder or file on this machine"),
    (["--out", "A_FILE"], "is a file"),
])
def test_eagle_train_refuses_a_run_that_cannot_start_before_asking(store, monkeypatch, tmp_path, capsys,
                                                                   extra, message):
    import tools.models

    monkeypatch.setattr(tools.models, "load", lambda *a, **k: pytest.fail("a model was loaded"))
    monkeypatch.setattr(approval, "open_terminal", never_asked)
    args = ["eagle", "train", "--target", "tiny-target", "--out", str(tmp_path / "head"), "--data", __file__, *extra]
    args = [a_file(tmp_path) if a == "A_FILE" else a for a in args]
    assert specpilot_main(args) == 2
    assert message in capsys.readouterr().err
    assert store.list_approvals() == []


def test_eagle_train_asks_for_the_float32_training_it_will_run(store, monkeypatch, tmp_path):
    import tools.models

    monkeypatch.setattr(tools.models, "load", lambda ref, **k: (_ for _ in ()).throw(SpecpilotError("stop")))
    monkeypatch.setattr(approval, "open_terminal", typed("train tiny-target"))
    args = ["eagle", "train", "--target", "tiny-target", "--out", str(tmp_path / "head"), "--data", __file__]
    assert specpilot_main([*args, "--no-autocast"]) == 2
    (row,) = store.list_approvals()
    assert row["arguments"]["input"]["no_autocast"] is True and "--no-autocast" in json.dumps(row)
