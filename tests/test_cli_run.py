"""The command line as a user meets it: JSON keys, stored runs, clear errors. One `run --json` and one user
error go through a real `specpilot` process (nothing but the JSON on stdout, the exit code, no traceback
from start-up on); the other commands run the same entry point in this process (``cli_in_process``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memory import Store

ROOT = Path(__file__).resolve().parents[1]
RUN_KEYS = {
    "run_id", "method", "target", "draft", "params", "prompt", "prompt_ids", "output_ids", "output_text",
    "new_tokens", "wall_time_s", "tokens_per_s", "baseline_wall_time_s", "baseline_tokens_per_s", "speedup",
    "acceptance_rate", "tokens_drafted", "tokens_accepted", "steps", "mean_accepted_per_step", "matches_baseline",
    "first_divergence", "hardware", "dtype", "versions",
}


def specpilot(*args: str, home: Path, models_dir: Path | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, SPECPILOT_HOME=str(home), HF_HUB_OFFLINE="1")
    if models_dir is not None:
        env["SPECPILOT_MODELS"] = str(models_dir)
    return subprocess.run([sys.executable, "-m", "agent.cli.main", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)


def in_a_process(*cases):
    """Mark the first case to run as a real process, the others in this process."""
    return [pytest.param(*case, process, id=f"{i}-{process}")
            for i, (case, process) in enumerate(zip(cases, ["real"] + ["here"] * (len(cases) - 1)))]


@pytest.mark.parametrize("method,options,process", in_a_process(
    ("draft", ["--k", "3"]),
    ("draft", ["--k", "2", "--no-adaptive-k", "--draft-quant", "none"]),
    ("lookahead", ["--window", "2", "--ngram", "3", "--guess", "2"]),
    ("ngram", []),
    ("baseline", []),
))
def test_run_json_has_every_key_and_is_stored(tiny_model_dir, specpilot_home, cli_in_process, method, options,
                                              process):
    cli = (lambda *args: specpilot(*args, home=specpilot_home)) if process == "real" else cli_in_process
    proc = cli("run", "--method", method, "--target", str(tiny_model_dir), "--draft", str(tiny_model_dir),
               "--prompt", "def x return x", "--max-new-tokens", "12", "--raw", "--dtype", "float32", "--json",
               *options)
    assert proc.returncode == 0, proc.stderr
    record = json.loads(proc.stdout)
    assert RUN_KEYS <= set(record)
    assert record["method"] == method and record["new_tokens"] == 12 == len(record["output_ids"])
    assert record["matches_baseline"] is True and record["first_divergence"] is None
    assert record["speedup"] == pytest.approx(record["baseline_wall_time_s"] / record["wall_time_s"])
    assert record["hardware"]["name"]
    if "--no-adaptive-k" in options:
        assert record["params"]["adaptive_k"] is False and record["params"]["draft_quant"] == "none"
    stored = Store().get_run(record["run_id"])
    assert stored["output_ids"] == record["output_ids"] and stored["speedup"] == record["speedup"]
    shown = cli("runs", "show", record["run_id"], "--json")
    assert json.loads(shown.stdout)["speedup"] == record["speedup"]


def test_the_human_table_names_the_method_speedup_and_hardware(tiny_model_dir, cli_in_process):
    proc = cli_in_process("run", "--method", "draft", "--target", str(tiny_model_dir), "--draft", str(tiny_model_dir),
                          "--prompt", "def x", "--max-new-tokens", "8", "--raw", "--dtype", "float32")
    assert proc.returncode == 0, proc.stderr
    assert "draft vs baseline" in proc.stdout and "identical" in proc.stdout
    assert Store().last_run()["run_id"] in proc.stdout


@pytest.mark.parametrize("args,expected,process", in_a_process(
    (["runs", "show", "nope"], "run"),  # the real process: the quickest to start (no torch)
    (["run", "--method", "draft", "--target", "qwen2.5-coder-1.5b-instruct"], "specpilot models fetch"),
    (["run", "--method", "draft", "--target", "/no/such/folder"], "not a folder or file"),
    (["run", "--method", "draft", "--target", "some-org/some-model"], "HF_HUB_OFFLINE"),
    (["run", "--method", "draft", "--k", "40"], "k"),
    (["run", "--method", "lookahead", "--ngram", "1"], "ngram"),
    (["run", "--method", "draft", "--prompt-file", "/no/such/prompt.txt"], "does not exist"),
))
def test_user_errors_are_clear_messages_not_tracebacks(tmp_path, specpilot_home, cli_in_process, monkeypatch, args,
                                                       expected, process):
    models_dir = tmp_path / "empty-models"
    if process == "real":
        proc = specpilot(*args, home=specpilot_home, models_dir=models_dir)
    else:
        monkeypatch.setenv("SPECPILOT_MODELS", str(models_dir))
        proc = cli_in_process(*args)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.startswith("error:") and expected in proc.stderr


def test_a_corrupt_model_file_is_a_clear_error(tmp_path, cli_in_process, monkeypatch):
    from tools import models

    m = models.builtin("smollm2-135m-instruct")
    path = tmp_path / "models" / m.name / m.gguf_name
    path.parent.mkdir(parents=True)
    path.write_bytes(b"GGUF" + b"\0" * 100)
    monkeypatch.setenv("SPECPILOT_MODELS", str(tmp_path / "models"))
    proc = cli_in_process("run", "--method", "baseline", "--target", m.name)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "specpilot models fetch" in proc.stderr


def test_verify_gguf_names_size_and_checksum_problems(tmp_path, monkeypatch):
    from tools import models
    from tools.errors import ModelIntegrityError

    monkeypatch.setenv("SPECPILOT_MODELS", str(tmp_path))
    m = models.builtin("smollm2-135m-instruct")
    path = tmp_path / "partial.gguf"
    path.write_bytes(b"x" * 10)
    with pytest.raises(ModelIntegrityError, match="partial or corrupt"):
        models.verify_gguf(m, path)
    with open(path, "wb") as f:
        f.truncate(m.size)
    with pytest.raises(ModelIntegrityError, match="sha256"):
        models.verify_gguf(m, path)


def test_models_list_reports_what_is_on_disk(tmp_path, cli_in_process, monkeypatch):
    monkeypatch.setenv("SPECPILOT_MODELS", str(tmp_path))
    proc = cli_in_process("models", "list", "--json")
    assert proc.returncode == 0
    rows = {r["name"]: r for r in json.loads(proc.stdout)}
    assert set(rows) == {"qwen2.5-coder-1.5b-instruct", "qwen2.5-coder-0.5b-instruct", "smollm2-135m-instruct"}
    assert not any(r["gguf"] or r["converted"] for r in rows.values())
