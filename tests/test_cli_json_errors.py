"""With ``--json`` every command's error is one JSON document on stdout, ``{"error": ...}`` as ``specpilot tool``
prints it, with its exit code kept and the message still on stderr; argparse errors are one line and where the
help is, not the usage (QA findings 3, 4 and 6). Through the real command line in this process (cli_in_process)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent.cli import guide
from agent.cli.main import _quiet_libraries
from memory import Store
from tools.agent_tools.registry import ToolResult

ROOT = Path(__file__).resolve().parents[1]


def one_json(proc: subprocess.CompletedProcess) -> dict:
    """The single JSON document on stdout (fails if anything else is there, or a traceback on stderr)."""
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stdout
    assert "Traceback" not in proc.stderr, proc.stderr
    return json.loads(lines[0])


def test_a_user_error_is_json_on_stdout_and_the_message_stays_on_stderr(cli_in_process):
    proc = cli_in_process("runs", "show", "nope", "--json")
    assert proc.returncode == 2
    error = one_json(proc)["error"]
    assert error.startswith("no stored run has the id 'nope'") and "what to do:" in error
    assert f"error: {error}" in proc.stderr
    plain = cli_in_process("runs", "show", "nope")
    assert plain.returncode == 2 and plain.stdout == "" and "error: no stored run has the id 'nope'" in plain.stderr


def test_bad_input_caught_by_validation_is_json(cli_in_process):
    proc = cli_in_process("run", "--method", "ngram", "--prompt", "hi", "--target", "smollm2-135m-instruct",
                          "--max-new-tokens", "0", "--json")
    assert proc.returncode == 2 and "max_new_tokens" in one_json(proc)["error"]


@pytest.mark.parametrize("raised, code, shown", [(RuntimeError("boom in list_runs"), 1, "RuntimeError: boom in list_runs"),
                                                 (KeyboardInterrupt(), 130, "interrupted: ")])
def test_the_last_resort_and_an_interrupt_are_json_with_their_exit_codes(cli_in_process, monkeypatch, raised, code,
                                                                          shown):
    def broken(self, **kwargs):
        raise raised

    monkeypatch.setattr(Store, "list_runs", broken)
    proc = cli_in_process("runs", "list", "--json")
    assert proc.returncode == code and one_json(proc)["error"].startswith(shown) and shown in proc.stderr
    plain = cli_in_process("runs", "list")
    assert plain.returncode == code and plain.stdout == "" and shown in plain.stderr


def test_a_damaged_database_is_json_for_ask_too(cli_in_process, specpilot_home):
    specpilot_home.mkdir(parents=True, exist_ok=True)
    (specpilot_home / "specpilot.db").write_bytes(b"not a database" * 100)
    for args in (("ask", "hello", "--plan-only", "--json"), ("runs", "list", "--json")):
        proc = cli_in_process(*args)
        assert proc.returncode == 2 and "memory database" in one_json(proc)["error"], proc


@pytest.mark.parametrize("args, help_of", [
    (("runs", "list", "--limit", "-1"), "specpilot runs list"),
    (("run", "--method", "bogus", "--prompt", "hi"), "specpilot run"),
    (("runs", "list", "--bogus"), "specpilot runs list"),  # reported by the top parser, pointed at the subcommand
    (("guide", "draft", "--dtype", "float8", "--measure"), "specpilot guide"),
])
def test_argparse_errors_are_one_line_and_where_the_help_is_and_json_with_json(cli_in_process, args, help_of):
    plain = cli_in_process(*args)
    assert plain.returncode == 2 and plain.stdout == ""
    lines = plain.stderr.strip().splitlines()
    assert lines[0].startswith("error: ") and lines[1:] == [f"  what to do: see `{help_of} --help`"], plain.stderr
    assert "usage:" not in plain.stderr
    proc = cli_in_process(*args, "--json")
    assert proc.returncode == 2 and "usage:" not in proc.stderr
    error = one_json(proc)["error"]
    assert f"error: {error}" in proc.stderr and error.endswith(f"see `{help_of} --help`")


def test_without_a_command_the_pointer_is_the_top_help(cli_in_process):
    proc = cli_in_process()
    assert proc.returncode == 2 and proc.stdout == "" and "see `specpilot --help`" in proc.stderr


def test_guide_takes_the_dtypes_run_takes(cli_in_process):
    for command in (("guide", "draft"), ("run", "--method", "draft")):
        proc = cli_in_process(*command, "--dtype", "float8")
        assert "choose from 'auto', 'float32', 'bfloat16', 'float16'" in proc.stderr, proc.stderr


def test_guide_measure_bad_input_is_json_with_json_and_a_message_without(cli_in_process):
    args = ("guide", "draft", "--target", "smollm2-135m-instruct", "--repeats", "-1", "--measure")
    proc = cli_in_process(*args, "--json")
    assert proc.returncode == 2
    error = one_json(proc)["error"]
    assert error.startswith("bad input for measure_cost_curve: repeats") and f"error: {error}" in proc.stderr
    plain = cli_in_process(*args)
    assert plain.returncode == 2 and plain.stdout == ""
    assert plain.stderr.startswith("error: bad input for measure_cost_curve: repeats") and "{'error'" not in plain.stderr


def test_a_guidance_error_keeps_the_tools_json_and_is_a_message_without_json(cli_in_process, monkeypatch):
    monkeypatch.setattr(guide, "host_call", lambda store, name, raw: ToolResult.error(name, "no advice", why="x"))
    proc = cli_in_process("guide", "draft", "--json")
    assert proc.returncode == 1 and one_json(proc) == {"error": "no advice", "why": "x"}
    plain = cli_in_process("guide", "draft")
    assert plain.returncode == 1 and plain.stdout == "" and plain.stderr.strip() == "error: no advice"


def test_tool_and_ask_print_their_own_json_once(cli_in_process):
    unknown = cli_in_process("tool", "frobnicate")
    assert unknown.returncode == 1 and "no tool named 'frobnicate'" in one_json(unknown)["error"]
    missing = cli_in_process("tool", "lookup_runs", "--input", '{"run_id": "abcd0000"}')
    assert missing.returncode == 1 and "no stored run has the id" in one_json(missing)["error"]
    asked = cli_in_process("ask", "/nonsense", "--brain", "offline", "--json")
    assert asked.returncode == 0 and "reply" in one_json(asked)


def test_huggingface_hub_retry_warnings_are_quiet_without_v(monkeypatch):
    for name in ("HF_HUB_VERBOSITY", "TRANSFORMERS_VERBOSITY", "HF_HUB_DISABLE_PROGRESS_BARS"):
        monkeypatch.delenv(name, raising=False)  # _quiet_libraries sets them: restored after the test
    hub = logging.getLogger("huggingface_hub")
    level = hub.level
    try:
        _quiet_libraries()
        assert not logging.getLogger("huggingface_hub.utils._http").isEnabledFor(logging.WARNING)
    finally:
        hub.setLevel(level)
    # imported after the command line is read, huggingface_hub sets its level from HF_HUB_VERBOSITY
    code = ("import logging; from agent.cli.main import _quiet_libraries; _quiet_libraries(); import huggingface_hub; "
            "print(logging.getLogger('huggingface_hub.utils._http').getEffectiveLevel())")
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_VERBOSITY"}
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, env=env, timeout=120)
    assert proc.stdout.strip() == str(logging.ERROR), proc.stderr
