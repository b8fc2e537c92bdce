"""Starting and ending `specpilot chat` in a real pseudo-terminal (pexpect), for the pty tests."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pexpect

ROOT = Path(__file__).resolve().parents[1]
PROMPT = "you> "


def spawn_chat(home: Path, *flags: str, width: int = 200, timeout: int = 90) -> pexpect.spawn:
    """``specpilot chat --brain offline FLAGS`` in a fresh terminal of ``width`` columns, with ``home`` as its
    specpilot home and no API key."""
    env = dict(os.environ, SPECPILOT_HOME=str(home), TERM="dumb", COLUMNS=str(width), LINES="50", HF_HUB_OFFLINE="1")
    env.pop("ANTHROPIC_API_KEY", None)
    return pexpect.spawn(sys.executable, ["-m", "agent.cli.main", "chat", "--brain", "offline", *flags],
                         cwd=str(ROOT), env=env, encoding="utf-8", timeout=timeout, dimensions=(50, width))


def quit_chat(chat: pexpect.spawn) -> None:
    """/quit, then wait for the process to end; it must exit cleanly."""
    chat.sendline("/quit")
    chat.expect("Bye.")
    chat.expect(pexpect.EOF)
    chat.close()
    assert chat.exitstatus == 0
