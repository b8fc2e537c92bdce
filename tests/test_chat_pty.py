"""Chat input handling through a real pseudo-terminal (pexpect), as a person types it: Ctrl-C at an idle
prompt clears the line and keeps the chat, a path answers a pending question (it is not a slash
command), Ctrl-D and /quit end the chat; log lines go to a file, not into the conversation. The missing-key
error needs no terminal and runs the entry point in this process."""

from __future__ import annotations

import io
import logging
import re
import sys

import pexpect

from chat_pty import PROMPT, quit_chat, spawn_chat
from memory import Store

def store_a_run() -> None:
    """A stored run, so a share has something to send (it is refused before any approval otherwise)."""
    with Store() as store:
        store.add_run({"method": "draft", "prompt": "p", "speedup": 1.2, "hardware": {"name": "Test CPU"}})


def test_ctrl_c_clears_the_line_a_path_answers_the_pending_question_and_quit_exits(specpilot_home, tmp_path):
    store_a_run()
    chat = spawn_chat(specpilot_home, "--skip-onboarding")
    chat.expect_exact(PROMPT)
    assert "Which method" not in chat.before  # --skip-onboarding
    chat.send("hello this half-typed line is dropped")
    chat.sendintr()  # Ctrl-C at an idle prompt: the line is cleared, the chat goes on
    chat.expect_exact(PROMPT)
    assert chat.isalive()
    chat.sendline("/params")
    chat.expect("No parameters saved yet")
    chat.expect_exact(PROMPT)

    destination = str(tmp_path / "shared")  # an existing folder: the approval names it as an absolute path
    (tmp_path / "shared").mkdir()
    chat.sendline("/share")
    chat.expect("Which destination should I use")
    chat.expect_exact(PROMPT)
    chat.sendline(destination)  # a path, not an unknown slash command: it answers the question
    chat.expect_exact("(anything else does not approve) > ")  # the approval is asked on the terminal
    assert destination in chat.before
    chat.sendline("no")
    chat.expect("denied")
    chat.expect_exact(PROMPT)
    quit_chat(chat)

    with Store() as store:
        requests = {t["request"]: t for t in store.list_tasks()}
        assert "hello this half-typed line is dropped" not in " ".join(requests)
        assert not any(r.startswith("hello") for r in requests)
        share = requests["/share"]  # one task: the question and its answer
        assert share["status"] == "failed" and any(destination in n["text"] for n in share["notes"])
        [approval] = store.list_approvals()
        assert approval["arguments"]["input"]["destination"] == destination and approval["status"] == "denied"


def test_a_chat_killed_at_an_approval_question_leaves_the_request_unfinished(specpilot_home, tmp_path):
    """SIGTERM (or SIGHUP: the terminal closed) while the chat waits for an approval: the process ends,
    the request is recorded as unfinished with what stopped it, and the approval stays pending."""
    import signal

    store_a_run()
    chat = spawn_chat(specpilot_home, "--skip-onboarding")
    chat.expect_exact(PROMPT)
    chat.sendline("/share")
    chat.expect("Which destination should I use")
    chat.expect_exact(PROMPT)
    chat.sendline(str(tmp_path))
    chat.expect_exact("(anything else does not approve) > ")
    chat.kill(signal.SIGTERM)
    chat.expect(pexpect.EOF)
    chat.close()
    assert chat.exitstatus == 130 and "Traceback" not in chat.before
    with Store() as store:
        [task] = [t for t in store.list_tasks() if t["request"] == "/share"]
        assert task["status"] == "unfinished" and any("SIGTERM" in n["text"] for n in task["notes"])
        assert [a["status"] for a in store.list_approvals()] == ["pending"]


def test_ctrl_d_ends_the_chat_and_an_unknown_command_is_not_done(specpilot_home):
    chat = spawn_chat(specpilot_home, "--skip-onboarding")
    chat.expect_exact(PROMPT)
    chat.sendline("/frobnicate")
    chat.expect("Unknown command /frobnicate")
    chat.expect_exact(PROMPT)
    chat.send("\x04")  # Ctrl-D
    chat.expect("Bye.")
    chat.expect(pexpect.EOF)
    chat.close()
    assert chat.exitstatus == 0
    with Store() as store:
        [task] = store.list_tasks()
        assert task["status"] == "failed" and task["left"] == ["not done: unknown command /frobnicate"]


def test_chat_logs_go_to_a_file_under_the_specpilot_home(specpilot_home):
    from agent.chat import LOG_FILE, log_to_file

    root = logging.getLogger()
    before, level = list(root.handlers), root.level
    try:
        path = log_to_file()
        logging.getLogger("specpilot.test").warning("a warning for the log file only")
        for handler in root.handlers:
            handler.flush()
        assert path == specpilot_home / LOG_FILE
        assert re.search(r"WARNING specpilot.test: a warning for the log file only", path.read_text())
        assert not any(isinstance(h, logging.StreamHandler) and not isinstance(h, logging.FileHandler)
                       for h in root.handlers)
    finally:
        for handler in list(root.handlers):
            root.removeHandler(handler)
            handler.close()
        for handler in before:
            root.addHandler(handler)
        root.setLevel(level)
        logging.captureWarnings(False)


def test_chat_with_the_anthropic_brain_and_no_key_says_what_to_do_without_a_traceback(cli_in_process, monkeypatch):
    # the entry point in this process: the message is the point, not the terminal (no conversation starts)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    proc = cli_in_process("chat", "--brain", "anthropic")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr + proc.stdout
    assert "error: the anthropic brain needs an API key, and ANTHROPIC_API_KEY is not set" in proc.stderr
    assert "export ANTHROPIC_API_KEY" in proc.stderr
