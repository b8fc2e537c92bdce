"""The upstream reference peers (medusa-llm, lade) in venvs of their own (tools.bench.upstream).

The default run checks what does not need the real packages: the transformers-4.x model export, the
Medusa heads written in upstream's format (read back by our loader), the status and setup commands,
the approval gate of ``specpilot peers setup``, and the whole process protocol, with a "peer venv"
that runs this Python and a stand-in ``lade`` module whose lookahead is plain greedy generation (so
the peer's output must equal the baseline's). The slow group runs the real packages when
``specpilot peers setup`` has made their venvs on this machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import make_tiny_model_folder
from tools import models
from tools.bench import upstream
from tools.engine.medusa import MedusaHeads
from tools.medusa.checkpoint import load_checkpoint, ours_state_to_upstream, save_upstream

REPO = Path(__file__).resolve().parents[1]
FAKE_LADE = '''"""A stand-in for the lade package: its two entry points do nothing, so USE_LADE runs plain greedy."""
CALLS = []
def augment_all():
    CALLS.append("augment_all")
def config_lade(**kwargs):
    CALLS.append(kwargs)
'''


@pytest.fixture
def peers_home(tmp_path, monkeypatch) -> Path:
    home = tmp_path / "peers"
    monkeypatch.setenv("SPECPILOT_PEERS", str(home))
    return home


def fake_peer_venv(home: Path, name: str, tmp_path: Path, monkeypatch) -> None:
    """``name``'s venv as a script running this Python, with a stand-in lade importable, marked ready."""
    bin_dir = home / name / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").write_text(f"#!/bin/sh\nexec {sys.executable} \"$@\"\n")
    (bin_dir / "python").chmod(0o755)
    (home / name / "ready.json").write_text(json.dumps({"versions": {"stand-in": "1"}}))
    fake = tmp_path / "fake-packages"
    (fake / "lade").mkdir(parents=True)
    (fake / "lade" / "__init__.py").write_text(FAKE_LADE)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(fake), os.environ.get("PYTHONPATH", "")]))


def tiny_llama_folder(folder: Path) -> Path:
    """A tiny random Llama checkpoint with a word-level tokenizer (a local model ref)."""
    return make_tiny_model_folder(folder, kind="llama", seed=3)


# ------------------------------------------------------------------------------------ pure parts
def test_config_for_transformers_4x():
    config = {"model_type": "llama", "dtype": "bfloat16", "rope_parameters": {"rope_theta": 100000.0, "rope_type": "default"}}
    old = upstream.config_for_4x(config)
    assert old["rope_theta"] == 100000.0 and old["rope_scaling"] is None and old["torch_dtype"] == "bfloat16"
    assert "rope_parameters" not in old and "dtype" not in old
    scaled = upstream.config_for_4x({"rope_parameters": {"rope_theta": 5e5, "rope_type": "linear", "factor": 2.0}})
    assert scaled["rope_scaling"] == {"rope_type": "linear", "factor": 2.0}


@pytest.mark.parametrize("shared", [True, False])
def test_heads_in_upstream_format_read_back_by_our_loader(tmp_path, shared):
    torch.manual_seed(0)
    heads = MedusaHeads(16, 40, num_heads=3, num_layers=1, shared_projection=shared)
    for p in heads.parameters():
        p.data.normal_()
    state = ours_state_to_upstream(heads)
    assert set(state) >= {"0.0.linear.weight", "2.0.linear.bias"}
    assert ("1.1.weight" in state) is (not shared)  # upstream copies the lm_head into a shared projection
    folder = save_upstream(heads, tmp_path / "up", tmp_path / "model")
    cfg = json.loads((folder / "config.json").read_text())
    assert cfg["medusa_num_heads"] == 3 and cfg["base_model_name_or_path"] == str(tmp_path / "model")
    back = load_checkpoint(folder).heads
    assert back.shared_projection is shared and back.num_heads == 3
    for key, value in heads.state_dict().items():
        assert torch.equal(back.state_dict()[key], value), key


def test_status_setup_commands_and_unknown_peer(peers_home):
    st = upstream.status("lade")
    assert st["ready"] is False and "specpilot peers setup lade" in st["reason"]
    commands = upstream.setup_commands("medusa-llm")
    pip = commands[1]
    assert upstream.torch_requirement() in pip and upstream.TRANSFORMERS_4X in pip
    assert commands[2][-2:] == ["--no-deps", "medusa-llm==0.1"]
    assert all(str(peers_home) in c[0] or c[0] == sys.executable for c in commands)
    with pytest.raises(Exception, match="no upstream peer called 'vllm'"):
        upstream.peer("vllm")


def test_llama_only(tiny_model_dir):
    target = models.load(str(tiny_model_dir), dtype="float32")  # a Qwen2 folder
    assert "Llama models only" in upstream.llama_only(target)


# ----------------------------------------------------------------------------- the process protocol
def test_runner_answers_errors_as_json_lines():
    reqs = "\n".join(json.dumps(r) for r in ({"op": "generate", "prompt_ids": [1], "max_new_tokens": 2},
                                             {"op": "dance"}, {"op": "load", "peer": "vllm"}, {"op": "quit"}))
    proc = subprocess.run([sys.executable, str(upstream.RUNNER)], input=reqs + "\n", capture_output=True, text=True,
                          timeout=300)
    replies = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [r["ok"] for r in replies] == [False, False, False, True]
    assert "load request first" in replies[0]["error"] and "unknown op" in replies[1]["error"]
    assert "unknown peer" in replies[2]["error"]


def test_lade_peer_runs_beside_lookahead_through_its_process(tmp_path, peers_home, monkeypatch):
    """``run --peers`` on a Llama target: the peer venv's runner is started, loads the exported model,
    and its two rows (the package, its venv's plain generate) are timed beside the baseline."""
    from tools.bench.run import RunInput, run_method

    fake_peer_venv(peers_home, "lade", tmp_path, monkeypatch)
    folder = tiny_llama_folder(tmp_path / "tiny-llama")
    inp = RunInput(method="lookahead", target=str(folder), draft=str(folder), prompt="a b c d a b c", max_new_tokens=12, chat=False,
                   dtype="float32", peers=True, params={"window": 3, "ngram": 3, "guess": 2})
    try:
        record = run_method(inp)
    finally:
        upstream.close_all()
    peers = record["peers"]
    assert {"upstream_lade", "upstream_plain"} <= set(peers)
    for key in ("upstream_lade", "upstream_plain"):
        assert peers[key]["matches_baseline"] is True and peers[key]["new_tokens"] == 12
        assert peers[key]["wall_time_s"] > 0
    exported = list((peers_home / "models").iterdir())
    assert len(exported) == 1 and json.loads((exported[0] / "config.json").read_text())["model_type"] == "llama"
    assert (exported[0] / "model.safetensors").is_symlink()


def test_upstream_peers_skip_a_target_they_cannot_run(tmp_path, peers_home, monkeypatch, tiny_model_dir, caplog):
    from tools.bench.run import RunInput, run_method

    fake_peer_venv(peers_home, "lade", tmp_path, monkeypatch)
    inp = RunInput(method="lookahead", target=str(tiny_model_dir), draft=str(tiny_model_dir), prompt="def x", max_new_tokens=6,
                   chat=False,
                   dtype="float32", peers=True, params={"window": 3, "ngram": 3, "guess": 2})
    record = run_method(inp)
    assert "upstream_lade" not in record["peers"] and "hf_prompt_lookup" in record["peers"]
    assert "Llama models only" in caplog.text


def test_peers_setup_needs_a_person(peers_home):
    """Without a controlling terminal the setup installs nothing: the approval stays pending."""
    proc = subprocess.run([sys.executable, "-m", "agent.cli.main", "peers", "setup", "lade"], cwd=REPO,
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
                          start_new_session=True)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "pending" in proc.stderr and "specpilot tool approve" in proc.stderr
    assert not (peers_home / "lade").exists()


# ------------------------------------------------------------------------------- the real packages
@pytest.mark.slow
@pytest.mark.parametrize("name,method", [("lade", "lookahead"), ("medusa-llm", "medusa")])
def test_real_upstream_package_matches_baseline_on_smollm2(name, method):
    """medusa-llm / lade in their venvs (``specpilot peers setup``) on the built-in SmolLM2-135M: the
    package's greedy output equals our baseline's."""
    from tools.bench.run import RunInput, run_method

    if not upstream.status(name)["ready"]:
        pytest.skip(f"`specpilot peers setup {name}` has not been run on this machine")
    if not (models.converted_path(models.builtin("smollm2-135m-instruct")) / "config.json").exists():
        pytest.skip("smollm2-135m-instruct is not fetched (`specpilot models fetch smollm2-135m-instruct`)")
    inp = RunInput(method=method, target="smollm2-135m-instruct", prompt="Write a Python function that reverses a list.",
                   max_new_tokens=32, dtype="float32", peers=True)
    try:
        record = run_method(inp)
    finally:
        upstream.close_all()
    key = upstream.UPSTREAM_PEERS[name].peer_key
    assert record["peers"][key]["matches_baseline"] is True, record["peers"][key]
    assert record["peers"][key]["new_tokens"] == record["new_tokens"]


def test_dense_cover_holds_every_path_of_our_tree():
    from itertools import product

    from tools.engine.medusa_trees import TREES

    for name in ("cpu8", "chain3"):
        tree = TREES[name]
        shape = upstream.dense_cover(tree)
        assert shape[0] == 1 and len(shape) == 1 + max(len(c) for c in tree)
        dense = {tuple(p) for d in range(1, len(shape)) for p in product(*(range(k) for k in shape[1:d + 1]))}
        assert {tuple(c) for c in tree} <= dense


def test_setup_steps_run_in_order_and_a_failure_says_which_and_why(peers_home):
    """The step runner both setups use (venvs, llama-server): a fresh folder, the commands in order,
    the failing step's own output in the error."""
    from tools.errors import DependencyError

    marker = peers_home / "x" / "ran"
    upstream.run_steps("x", [["sh", "-c", f"echo one > {marker}"]], None, timeout_s=60, hint="h")
    assert marker.read_text() == "one\n"
    with pytest.raises(DependencyError, match="boom") as err:
        upstream.run_steps("x", [["true"], ["sh", "-c", "echo boom >&2; exit 3"]], None, timeout_s=60, hint="do this")
    assert "exit 3" in str(err.value) and not marker.exists()  # the folder was emptied first
