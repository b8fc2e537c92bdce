"""kill -9 in the middle of a measurement (issue 13): `specpilot run`, `specpilot compare` and a
`specpilot tool run_method` call are killed while they time a tiny model; the database must pass
SQLite's integrity check, keep every row stored before, take new writes, and list the interrupted
task among the unfinished ones."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from memory import Store
from memory.store import database_path

ROOT = Path(__file__).resolve().parents[1]
# The real command line (agent.cli.main.main) with one observer: the plain-generation step touches a
# marker file when it starts, so the test knows the measurement is under way before it kills.
RUNNER = """
import os, sys
from pathlib import Path
from tools.engine import autoregressive

marker, generate = Path(os.environ["SPECPILOT_TEST_MARKER"]), autoregressive.generate

def observed(*args, **kwargs):
    marker.touch()
    return generate(*args, **kwargs)

autoregressive.generate = observed
from agent.cli.main import main
sys.exit(main(sys.argv[1:]))
"""
# long enough to be killed in the middle: ~1000 new tokens a generation, many repeats (the tiny model
# has no EOS, so every generation runs to max_new_tokens; 2 prompt tokens + 1000 fit its 1024 positions)
LONG = ["--raw", "--dtype", "float32", "--prompt", "x y", "--max-new-tokens", "1000", "--repeats", "20"]


def seed_rows() -> dict:
    """Rows stored before the killed process starts: runs, saved parameters, a finished task."""
    with Store() as store:
        run_ids = [store.add_run({"method": "ngram", "prompt": f"earlier {i}", "speedup": 1.0 + i}) for i in range(3)]
        store.save_params("draft", {"k": 4})
        task = store.create_task("an earlier task", "earlier", ["baseline"])
        store.update_task(task, status="done", done=["baseline"], run_ids=run_ids[:1])
    return {"run_ids": run_ids, "task": task}


def start_and_kill(args: list[str], home: Path, tmp_path: Path, sig: int = signal.SIGKILL) -> str:
    """Start ``specpilot ARGS``; once it is measuring, kill -9 it (or send it ``sig``); return its stderr."""
    marker = tmp_path / "measuring"
    env = dict(os.environ, SPECPILOT_HOME=str(home), HF_HUB_OFFLINE="1", SPECPILOT_TEST_MARKER=str(marker))
    proc = subprocess.Popen([sys.executable, "-c", RUNNER, *args], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240
        while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert proc.poll() is None, f"ended before measuring (exit {proc.returncode}): {proc.communicate()[1][-2000:]}"
        assert marker.exists(), "no measurement started within 240 s"
        time.sleep(1.0)  # well inside the first (warm-up) generation of ~1000 tokens
        assert proc.poll() is None, "the measurement ended before the kill: make it longer"
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, sig)
        _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == (-signal.SIGKILL if sig == signal.SIGKILL else 130), stderr[-2000:]
    return stderr


def assert_intact(seeded: dict) -> None:
    """SQLite's integrity check passes, every earlier row is there, and new writes go through."""
    conn = sqlite3.connect(str(database_path()))
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    finally:
        conn.close()
    with Store() as store:
        for run_id in seeded["run_ids"]:
            assert store.get_run(run_id)["prompt"].startswith("earlier")
        assert store.get_params("draft") == {"k": 4}
        assert store.get_task(seeded["task"])["status"] == "done"
        assert store.get_run(store.add_run({"method": "baseline", "prompt": "after the kill"}))


def killed_task(kind: str) -> dict:
    """The one task of ``kind`` recorded by the killed process, as the store lists unfinished work."""
    with Store() as store:
        found = [t for t in store.unfinished_tasks() if t["kind"] == kind]
        mine = [t for t in store.list_tasks() if t["kind"] == kind]
    assert len(mine) == 1 and found == mine, f"{kind}: tasks {mine}, unfinished {found}"
    return found[0]


def test_kill_9_during_compare(specpilot_home, tmp_path, tiny_model_dir):
    seeded = seed_rows()
    start_and_kill(["compare", "--methods", "baseline", "ngram", "--target", str(tiny_model_dir), *LONG],
                   specpilot_home, tmp_path)
    assert_intact(seeded)
    task = killed_task("compare")
    # still "running" (nobody lived to mark it): listed as unfinished, with every method left to do
    assert task["status"] == "running" and task["left"] == ["baseline", "ngram"]
    assert task["done"] == [] and task["run_ids"] == []


def test_kill_9_during_a_tool_call_of_run_method(specpilot_home, tmp_path, tiny_model_dir):
    seeded = seed_rows()
    inp = ('{"method": "ngram", "target": "%s", "prompt": "x y", "chat": false, "dtype": "float32", '
           '"max_new_tokens": 1000, "repeats": 20}' % tiny_model_dir)
    start_and_kill(["tool", "run_method", "--input", inp], specpilot_home, tmp_path)
    assert_intact(seeded)
    task = killed_task("tool:run_method")
    assert task["status"] == "running" and task["left"] == ["run_method"] and task["run_ids"] == []


def test_kill_9_during_run(specpilot_home, tmp_path, tiny_model_dir):
    seeded = seed_rows()
    start_and_kill(["run", "--method", "ngram", "--target", str(tiny_model_dir), *LONG], specpilot_home, tmp_path)
    assert_intact(seeded)
    with Store() as store:
        runs = [r for r in store.list_runs(limit=100) if not r["prompt"].startswith(("earlier", "after"))]
        tasks = [t for t in store.list_tasks() if t["id"] != seeded["task"]]
    assert runs == []  # nothing half-measured was stored
    assert len(tasks) == 1 and tasks[0]["status"] in ("running", "unfinished")


def test_sigterm_during_bench_records_the_task_unfinished_and_says_so(specpilot_home, tmp_path, tiny_model_dir):
    seeded = seed_rows()
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"question_id": 1, "category": "c", "prompt": "x y"}\n')
    stderr = start_and_kill(["bench", "--prompts", str(prompts), "--methods", "ngram", "--target", str(tiny_model_dir),
                             "--raw", "--dtype", "float32", "--max-new-tokens", "1000", "--repeats", "1"], specpilot_home, tmp_path, sig=signal.SIGTERM)
    assert "stopped by SIGTERM" in stderr and "Traceback" not in stderr
    assert_intact(seeded)
    task = killed_task("bench")
    assert task["status"] == "unfinished" and task["left"] == ["q1 ngram"]
    assert task["notes"][-1]["text"].startswith("interrupted by SIGTERM with 1 step(s) left")
