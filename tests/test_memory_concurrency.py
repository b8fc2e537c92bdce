"""Two real processes using one database at the same time lose nothing (WAL + busy timeout)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from memory import Store
from memory import migrations

REPO = Path(__file__).resolve().parents[1]

# A writer process: waits for the go file, opens the store, then writes ``n`` runs, links each
# to the shared task (a read-modify-write), logs a message per run, and prints what it did.
WRITER = r"""
import json, sys, time
from pathlib import Path
name, n, go, ready, task_id = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4]), int(sys.argv[5])
from memory import Store
ready.touch()
while not go.exists():
    time.sleep(0.001)
start = time.time()
store = Store()
for i in range(n):
    run_id = store.add_run({"run_id": f"{name}-{i}", "method": "draft", "speedup": i / 10, "writer": name})
    if task_id:
        store.update_task(task_id, run_ids=[run_id])
    store.log_message(f"session-{name}", "user", {"i": i})
end = time.time()
print(json.dumps({"start": start, "end": end, "applied": store.applied_migrations}))
"""


# A writer of cost curves and trained heads: one new row each per step, and the old whole-dict
# read-modify-write of the legacy "medusa_heads" answer, which used to lose the other's entries.
CURVE_WRITER = r"""
import json, sys, time
from pathlib import Path
name, n, go, ready = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4])
from memory import Store
ready.touch()
while not go.exists():
    time.sleep(0.001)
start = time.time()
store = Store()
for i in range(n):
    store.save_cost_curve("t", f"{name}-cpu-{i}", {1: 0.1, 2: 0.1 + i / 1000}, dtype="float32")
    store.save_trained_heads(f"{name}-target-{i}", f"/heads/{name}/{i}")
    heads = store.get_answer("medusa_heads") or {}
    heads[f"{name}-legacy-{i}"] = f"/legacy/{name}/{i}"
    store.save_answer("medusa_heads", heads)
end = time.time()
print(json.dumps({"start": start, "end": end, "applied": store.applied_migrations}))
"""


def run_writers(tmp_path: Path, n: int, task_id: int = 0, names=("a", "b"), script: str = WRITER) -> list[dict]:
    """Start one writer per name, release them at once, wait; return each writer's report."""
    go = tmp_path / "go"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    procs = []
    for name in names:
        ready = tmp_path / f"ready-{name}"
        cmd = [sys.executable, "-c", script, name, str(n), str(go), str(ready), str(task_id)]
        procs.append((ready, subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE,
                                              stderr=subprocess.PIPE, text=True)))
    deadline = time.time() + 120
    while not all(ready.exists() for ready, _ in procs):
        assert time.time() < deadline, "writer processes did not start"
        assert all(p.poll() is None for _, p in procs), [p.communicate() for _, p in procs]
        time.sleep(0.01)
    go.touch()
    reports = []
    for _, proc in procs:
        out, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err
        reports.append(json.loads(out.strip().splitlines()[-1]))
    return reports


def test_two_processes_write_at_once_and_lose_nothing(tmp_path):
    n = 300
    with Store() as store:
        task_id = store.create_task("concurrent writers", "test", ["write"])
    reports = run_writers(tmp_path, n, task_id)
    # the two writers really ran at the same time
    assert max(r["start"] for r in reports) < min(r["end"] for r in reports)
    with Store() as store:
        expected = {f"{name}-{i}" for name in "ab" for i in range(n)}
        assert {r["run_id"] for r in store.db.query("select run_id from runs")} == expected
        assert store.db["runs"].count == 2 * n
        assert store.get_run("b-7")["writer"] == "b" and store.get_run("a-299")["speedup"] == 29.9
        # every read-modify-write of the shared task kept the other process's links
        assert set(store.get_task(task_id)["run_ids"]) == expected
        for name in "ab":
            assert [m["content"]["i"] for m in store.conversation(f"session-{name}")] == list(range(n))


def test_two_processes_migrate_a_new_database_once(tmp_path, specpilot_home):
    assert not (specpilot_home / "specpilot.db").exists()
    reports = run_writers(tmp_path, n=20)
    names = [fn.__name__ for fn in migrations.MIGRATIONS]
    applied = [name for r in reports for name in r["applied"]]
    assert sorted(applied) == sorted(names)  # each migration applied by exactly one process
    with Store() as store:
        assert [r["name"] for r in store.db["_migrations"].rows] == names
        assert store.db["runs"].count == 40


def test_four_processes_open_one_new_database_at_once(tmp_path, monkeypatch):
    # Switching a new database to WAL races for an exclusive lock; SQLite answers "locked" at
    # once to the loser (no busy wait), so every opener must retry rather than fail.
    for trial in range(5):
        home = tmp_path / f"home-{trial}"
        home.mkdir()
        monkeypatch.setenv("SPECPILOT_HOME", str(home))
        reports = run_writers(home, n=1, names=("a", "b", "c", "d"))
        assert sorted(name for r in reports for name in r["applied"]) == sorted(
            fn.__name__ for fn in migrations.MIGRATIONS
        )


def test_two_processes_saving_curves_and_heads_lose_no_row(tmp_path):
    n = 60
    reports = run_writers(tmp_path, n, script=CURVE_WRITER)
    assert max(r["start"] for r in reports) < min(r["end"] for r in reports)
    with Store() as store:
        assert {c["hardware"] for c in store.cost_curves()} == {f"{w}-cpu-{i}" for w in "ab" for i in range(n)}
        assert store.get_cost_curve("t", "b-cpu-7")["curve"] == {1: 0.1, 2: 0.1 + 7 / 1000}
        heads = store.all_trained_heads()
        assert {t: p for t, p in heads.items() if "-target-" in t} == {
            f"{w}-target-{i}": f"/heads/{w}/{i}" for w in "ab" for i in range(n)}
        assert {t for t in heads if "-legacy-" in t} == {f"{w}-legacy-{i}" for w in "ab" for i in range(n)}
        assert store.all_answers() == {}
