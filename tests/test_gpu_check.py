"""benchmarks/scripts/gpu_check.py runs its exactness checks on a CPU too (it is meant for a GPU machine,
where nothing else of the project's test setup is)."""

from __future__ import annotations

from scripts import BENCHMARKS, load_benchmark

SCRIPT = BENCHMARKS / "gpu_check.py"


def load_script():
    return load_benchmark("gpu_check")


def test_every_method_matches_the_baseline_in_float32_and_runs_sampling():
    gc = load_script()
    rows = gc.check_exactness("cpu", ["float32"], max_new=24)
    assert {r["model"] for r in rows} == {"qwen2", "llama"}
    assert len({r["method"] for r in rows}) == 11
    assert all(r["identical"] and r["sampling_ok"] for r in rows), [r for r in rows if not r.get("identical")]
    oracle = [r for r in rows if r["method"].startswith("medusa (oracle")]
    assert all(r["tokens_per_step"] > 2 for r in oracle)  # long accepted paths are exercised
    trained = [r for r in rows if r["method"] == "eagle (trained head)"]
    assert len(trained) == 2 and all(r["tokens_per_step"] > 2 for r in trained)  # and EAGLE's deep paths


def test_checkpoint_loads_through_the_model_loader_and_decodes(tmp_path):
    gc = load_script()
    rows = gc.check_device_map_auto("cpu", max_new=16)
    f32 = [r for r in rows if r["dtype"] == "float32"]
    assert f32 and all(r["identical"] for r in f32)
    assert not any("error" in r for r in rows)


def test_the_script_runs_on_its_own(tmp_path):
    """Run as a script (as on a bare GPU machine), not imported by pytest: its imports resolve."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "--shape-from" in done.stdout
