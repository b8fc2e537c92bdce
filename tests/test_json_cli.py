"""The JSON CLI: ``specpilot tool ...`` prints one JSON object and nothing else; gated calls wait for
a person at a real terminal; ``specpilot skill install`` writes a loadable skill folder.

Real processes where the process matters: the tool list and an error (nothing but JSON on stdout from
start-up on), and every approval (a terminal, or none). The other commands run the same entry point in
this process (``cli_in_process``, output read at the file-descriptor level): each real one costs seconds
of importing torch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pexpect
import pytest

from agent.skill_install import parse_frontmatter
from memory import Store
from tools.agent_tools import registry

ROOT = Path(__file__).resolve().parents[1]


def specpilot(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    """Run the ``specpilot`` entry point (agent.cli.main) as a separate process."""
    return subprocess.run([sys.executable, "-m", "agent.cli.main", *args], cwd=ROOT, capture_output=True, text=True,
                          input=stdin, timeout=120, env=dict(os.environ))


def only_json(proc: subprocess.CompletedProcess):
    """The single JSON object on stdout (fails if anything else is there)."""
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stdout
    assert "Traceback" not in proc.stderr, proc.stderr
    return json.loads(lines[0])


def test_tool_list_is_the_registry_as_json():
    proc = specpilot("tool", "list")
    assert proc.returncode == 0
    listed = only_json(proc)["tools"]
    assert [t["name"] for t in listed] == list(registry.load_tools())
    gated = {t["name"]: t["gate"] for t in listed if t["gate"]}
    assert gated == {"install_packages": "install", "train_medusa": "train", "share_results": "share"}


def test_errors_are_json_with_a_nonzero_exit_and_no_traceback(cli_in_process):
    missing = specpilot("tool", "lookup_runs", "--input", '{"run_id": "abcd0000"}')  # a real process
    assert missing.returncode == 1 and "no stored run has the id" in only_json(missing)["error"]
    bad_json = cli_in_process("tool", "explain", "--input", "{topic: medusa}")
    assert bad_json.returncode == 1 and "not valid JSON" in only_json(bad_json)["error"]
    unknown = cli_in_process("tool", "frobnicate")
    assert unknown.returncode == 1 and "there is no tool named 'frobnicate'" in only_json(unknown)["error"]
    ok = cli_in_process("tool", "explain", "--input", '{"topic": "lookahead"}')
    assert ok.returncode == 0 and "2402.02057" in only_json(ok)["arxiv_ids"]
    # the input given without --input: taken when it is a JSON object, refused (saying how) when it is not
    bare = cli_in_process("tool", "explain", '{"topic": "lookahead"}')
    assert bare.returncode == 0 and "2402.02057" in only_json(bare)["arxiv_ids"]
    stray = cli_in_process("tool", "explain", "lookahead")
    assert stray.returncode == 2 and "--input JSON" in only_json(stray)["error"]


def test_a_prompt_that_says_approved_installs_nothing(cli_in_process):
    proc = cli_in_process("tool", "install_packages", "--input", '{"packages": ["specpilot-never-installed-xyz"]}')
    result = only_json(proc)
    assert proc.returncode == 0 and result["status"] == "approval_required"
    assert result["will_run"].endswith("-m pip install specpilot-never-installed-xyz")
    # the agent host cannot approve it: `approve` insists on a person at an interactive terminal
    refused = specpilot("tool", "approve", "--id", result["approval_id"], stdin="yes\n")
    assert refused.returncode == 2 and "interactive terminal" in only_json(refused)["error"]
    with Store() as store:
        assert store.get_approval(result["approval_id"])["status"] == "pending"
        [task] = store.unfinished_tasks()
        assert task["left"] == [f"waiting for approval {result['approval_id']}: {result['will_run']}"]
    pending = only_json(cli_in_process("tool", "pending"))["approvals"]
    assert [a["id"] for a in pending] == [result["approval_id"]]
    pip_list = subprocess.run([sys.executable, "-m", "pip", "list"], capture_output=True, text=True, timeout=120)
    assert "specpilot-never-installed" not in pip_list.stdout


def test_the_person_approves_at_a_terminal_and_the_call_runs_once(tmp_path, cli_in_process):
    with Store() as store:
        store.add_run({"method": "draft", "prompt": "p", "speedup": 1.3, "hardware": {"name": "Test CPU"}})
    outside = tmp_path / "outside"
    outside.mkdir()
    share = {"destination": str(outside)}
    asked = only_json(cli_in_process("tool", "share_results", "--input", json.dumps(share)))
    approval_id = asked["approval_id"]

    person = pexpect.spawn(sys.executable, ["-m", "agent.cli.main", "tool", "approve", "--id", approval_id], cwd=str(ROOT),
                           env=dict(os.environ, TERM="dumb"), encoding="utf-8", timeout=60)
    person.expect("copy into")  # the exact action is shown before the question
    # on the terminal the gate opened (/dev/tty): a confirmation naming it, and a word made for this question
    person.expect(r"type exactly:  (share \S+ [a-z]{4})\r?\n")
    assert person.match.group(1).startswith(f"share {outside.resolve()} ")
    person.sendline(person.match.group(1))
    person.expect(pexpect.EOF)
    person.close()
    assert person.exitstatus == 0
    decided = json.loads(person.before.strip().splitlines()[-1])
    assert decided["status"] == "approved" and decided["approval_id"] == approval_id

    ran = cli_in_process("tool", "share_results", "--input", json.dumps({**share, "approval_id": approval_id}))
    assert ran.returncode == 0 and only_json(ran)["status"] == "shared"
    again = cli_in_process("tool", "share_results", "--input", json.dumps({**share, "approval_id": approval_id}))
    assert again.returncode == 1 and "already used" in only_json(again)["error"]
    assert len(list(outside.iterdir())) == 1
    with Store() as store:
        assert [t["status"] for t in store.list_tasks()] == ["failed", "done", "done"]  # waiting task resolved


def test_skill_install_writes_a_loadable_skill_folder(tmp_path, cli_in_process):
    proc = cli_in_process("skill", "install", "--dir", str(tmp_path / "skills"))
    assert proc.returncode == 0, proc.stderr
    folder = tmp_path / "skills" / "specpilot"
    skill = (folder / "SKILL.md").read_text()
    meta = parse_frontmatter(skill)
    assert meta["name"] == "specpilot" and "Use when" in meta["description"]
    assert "specpilot tool approve --id" in skill and "specpilot tool NAME --input" in skill
    for name in ("workflows.md", "explain_draft.md", "explain_medusa.md", "explain_lookahead.md",
                 "explain_tradeoffs.md"):
        assert (folder / name).is_file()


@pytest.mark.parametrize("args", [["tool", "approve"], ["tool", "deny"]])
def test_approval_commands_need_an_id(args, cli_in_process):
    proc = cli_in_process(*args)
    assert proc.returncode == 2 and "--id" in only_json(proc)["error"]
