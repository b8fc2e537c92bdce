"""The llama.cpp backend wired into the product: ``specpilot run`` / ``compare`` / ``guide --measure`` with
``--backend llamacpp`` (and ``compare`` on both engines in one table), llama.cpp's own modes as peers,
the run record's ``backend``, and the cost curve stored and read per engine.

Everything runs on tiny GGUF files written here with the ``gguf`` package (tests/gguf_tiny.py; no
network, nothing downloaded), through the real command line (``agent.cli.main.main``, and one real
process for the error a user sees). Skipped when llama-cpp-python is not installed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("llama_cpp")
pytest.importorskip("gguf")

from agent.cli.main import main  # noqa: E402
from agent.cli.options import BACKEND_CHOICES  # noqa: E402
from gguf_tiny import write_pair  # noqa: E402
from memory import Store  # noqa: E402
from tools.bench import context  # noqa: E402
from tools.bench.machine_cost import CPU_FALLBACK_CURVE, backend_cost_curve, machine_cost  # noqa: E402
from tools.bench.inputs import PEER_LABELS  # noqa: E402
from tools.bench.protocol import hardware_name  # noqa: E402
from tools.bench.record import RunRecord  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PROMPT = "hello world hello world hello"  # repeats itself: prompt lookup has something to draft
LLAMACPP_PEERS = {"llamacpp_plain", "llamacpp_prompt_lookup"}


@pytest.fixture(scope="module")
def gguf_files(tmp_path_factory):
    yield write_pair(tmp_path_factory.mktemp("gguf"))
    context.release_models()  # the models this module's in-process runs loaded


def cli_json(capsys, *args: str) -> dict:
    """Run ``specpilot ARGS --json`` in this process; return the printed JSON (exit code 0 asserted)."""
    capsys.readouterr()
    code = main([*args, "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return json.loads(captured.out)


def common(files, *extra: str) -> list[str]:
    return ["--target", files[0], "--draft", files[1], "--prompt", PROMPT, "--raw", "--max-new-tokens", "12", *extra]


# ---------------------------------------------------------------------------- run
@pytest.mark.parametrize("method", ["baseline", "draft", "lookahead", "ngram"])
def test_run_on_llamacpp_is_measured_stored_and_says_its_backend(capsys, gguf_files, method):
    record = cli_json(capsys, "run", "--method", method, "--backend", "llamacpp", *common(gguf_files))
    assert record["backend"] == "llamacpp" and record["dtype"] == "gguf"
    assert "not dequantised" in record["dtype_reason"]
    assert record["new_tokens"] == 12 and record["matches_baseline"] is True and record["first_divergence"] is None
    assert record["versions"]["llama_cpp_python"]
    if method == "draft":  # the GGUF draft runs its own quantized weights: no int8 copy, full vocabulary
        assert record["params"]["draft_quant"] == "none" and record["params"]["draft_vocab"] is None
        assert record["draft"] == gguf_files[1]
    stored = RunRecord.from_stored(Store().get_run(record["run_id"]))
    assert stored.backend == "llamacpp" and stored.output_ids == record["output_ids"]


def test_the_default_backend_stays_transformers(capsys, gguf_files):
    record = cli_json(capsys, "run", "--method", "baseline", "--dtype", "float32", *common(gguf_files))
    assert record["backend"] == "transformers" and record["dtype"] == "float32"
    assert Store().get_run(record["run_id"])["backend"] == "transformers"


def test_run_peers_on_llamacpp_are_llamacpps_own_modes(capsys, gguf_files):
    record = cli_json(capsys, "run", "--method", "ngram", "--backend", "llamacpp", "--peers", *common(gguf_files))
    assert set(record["peers"]) == LLAMACPP_PEERS
    for name, peer in record["peers"].items():
        assert name in PEER_LABELS
        # llama.cpp's own greedy decoding, plain and with its prompt-lookup drafts, on the same prompt ids
        assert peer["matches_baseline"] is True and peer["new_tokens"] == 12
        assert peer["speedup"] == pytest.approx(record["baseline_wall_time_s"] / peer["wall_time_s"])
    assert set(Store().get_run(record["run_id"])["peers"]) == LLAMACPP_PEERS


def test_medusa_on_llamacpp_is_a_clear_error_in_a_real_process(tmp_path, gguf_files):
    env = dict(os.environ, SPECPILOT_HOME=str(tmp_path / "home"), HF_HUB_OFFLINE="1")
    proc = subprocess.run([sys.executable, "-m", "agent.cli.main", "run", "--method", "medusa", "--backend",
                           "llamacpp", "--target", gguf_files[0], "--prompt", "hi"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("error: medusa cannot run on the llama.cpp backend")
    assert "hidden states" in proc.stderr and "--backend transformers" in proc.stderr


@pytest.mark.parametrize("args,expected", [
    (["--method", "draft", "--draft-quant", "int8"], "draft_quant=int8 does not apply on the llama.cpp backend"),
    (["--method", "baseline", "--target", "{folder}"], "runs GGUF files"),
    (["--method", "baseline", "--target", "qwen2.5-coder-1.5b-instruct"], "specpilot models fetch"),
])
def test_what_llamacpp_cannot_run_says_what_to_do(capsys, tmp_path, monkeypatch, gguf_files, args, expected):
    monkeypatch.setenv("SPECPILOT_MODELS", str(tmp_path / "no-models"))
    args = [a.replace("{folder}", str(tmp_path)) for a in args]
    target = [] if "--target" in args else ["--target", gguf_files[0]]
    capsys.readouterr()
    code = main(["run", "--backend", "llamacpp", *target, "--draft", gguf_files[1], "--prompt", "hi", *args])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error:") and expected in err and "Traceback" not in err


# ---------------------------------------------------------------------------- compare
def test_compare_on_llamacpp_with_peers(capsys, gguf_files):
    capsys.readouterr()
    assert main(["compare", "--backend", "llamacpp", "--peers", *common(gguf_files)]) == 0
    shown = capsys.readouterr().out
    assert "compare on llama.cpp" in shown and "llama.cpp plain" in shown and "llama.cpp prompt lookup" in shown
    assert "medusa: not run: no hidden states on llama.cpp" in shown and "--backend transformers" in shown
    runs = Store().list_runs(limit=10)
    assert {r["method"] for r in runs} == {"baseline", "draft", "lookahead", "ngram"}
    assert {r["backend"] for r in runs} == {"llamacpp"} and all(set(r["peers"]) == LLAMACPP_PEERS for r in runs)


def test_compare_on_both_engines_is_one_table_on_the_same_prompt_ids(capsys, gguf_files):
    result = cli_json(capsys, "compare", "--backend", "transformers", "--backend", "llamacpp", "--methods", "baseline",
                      "ngram", "--dtype", "float32", *common(gguf_files))
    assert result["backends"] == ["transformers", "llamacpp"] and len(result["task_ids"]) == 2
    assert {(r["backend"], r["method"]) for r in result["rows"]} == {
        (b, m) for b in ("transformers", "llamacpp") for m in ("baseline", "ngram")}
    store = Store()
    records = {(r["backend"], r["method"]): store.get_run(r["run_id"]) for r in result["rows"]}
    assert {rec["backend"] for rec in records.values()} == {"transformers", "llamacpp"}
    assert len({tuple(rec["prompt_ids"]) for rec in records.values()}) == 1 == len({tuple(result["prompt_ids"])})
    for (backend, _), rec in records.items():  # each speedup is against that engine's own baseline
        base = records[(backend, "baseline")]
        assert rec["baseline_times"] == base["times"]
        assert rec["speedup"] == pytest.approx(rec["baseline_wall_time_s"] / rec["wall_time_s"])
        assert rec["tokens_per_s"] == pytest.approx(rec["new_tokens"] / rec["wall_time_s"])
    assert records[("llamacpp", "ngram")]["dtype"] == "gguf" and records[("transformers", "ngram")]["dtype"] == "float32"
    # the human table: both engines, every row
    capsys.readouterr()
    assert main(["compare", "--backend", "transformers", "--backend", "llamacpp", "--methods", "baseline",
                 "--dtype", "float32", "--report", *common(gguf_files)]) == 0
    shown = " ".join(capsys.readouterr().out.split())  # the caption wraps at the console's width
    assert "compare on transformers and llama.cpp" in shown and "speedup against each engine's own baseline" in shown
    assert shown.count("report: ") == 2 and "write a report with" not in shown  # one report per engine


# ---------------------------------------------------------------------------- the cost curve per engine
def test_sizing_on_llamacpp_reads_llamacpps_curve_never_transformers(gguf_files):
    store = Store()
    ref, hardware = gguf_files[0], hardware_name("cpu")
    steep = {1: 0.01, 2: 0.011, 4: 0.012, 8: 0.013, 16: 0.04, 32: 0.08}
    store.save_cost_curve(ref, hardware, steep, dtype="float32")  # a transformers curve of the same file
    loaded = context.load_cached(ref, "auto", None, None, "llamacpp")
    machine = machine_cost(store, loaded, allow_measure=False)
    assert machine.backend == "llamacpp" and machine.curve == CPU_FALLBACK_CURVE  # not the float32 curve
    assert "--backend llamacpp" in machine.curve_source
    flat = {1: 0.01, 2: 0.0105, 4: 0.011, 8: 0.0115, 16: 0.012, 32: 0.0125, 64: 0.013}
    store.save_cost_curve(ref, hardware, flat, dtype="gguf")
    machine = machine_cost(store, loaded, allow_measure=False)
    assert machine.curve == flat and "on llama.cpp" in machine.curve_source
    sized = context.sized_params(["ngram"], {}, store, context.MethodContext(target=loaded), allow_measure=False)
    assert "on llama.cpp" in sized["ngram"].reasons()["cost_curve"]


def test_backend_cost_curve_times_every_size(gguf_files):
    loaded = context.load_cached(gguf_files[0], "auto", None, None, "llamacpp")
    raw: dict[int, list[float]] = {}
    curve = backend_cost_curve(loaded.model, (1, 2, 4, 8), cache_len=32, repeats=2, raw=raw)
    assert sorted(curve) == [1, 2, 4, 8] and all(t > 0 for t in curve.values())
    assert all(len(ts) == 2 for ts in raw.values())
    assert loaded.model.cache_length(loaded.model.new_cache()) == 0  # the backend is usable afterwards


def test_guide_measure_on_llamacpp_stores_llamacpps_curve_and_sizes_from_it(capsys, gguf_files):
    result = cli_json(capsys, "guide", "lookahead", "--backend", "llamacpp", "--measure", "--repeats", "2",
                      "--target", gguf_files[0])
    assert result["backend"] == "llamacpp" and result["measured"]["curve_ms"]
    stored = Store().get_cost_curve(gguf_files[0], hardware_name("cpu"), "gguf")
    assert stored is not None and sorted(stored["curve"]) == sorted(int(n) for n in result["measured"]["curve_ms"])
    assert "on llama.cpp" in result["sizing"]["machine"]
    # run on llama.cpp then sizes from that stored curve
    record = cli_json(capsys, "run", "--method", "lookahead", "--backend", "llamacpp", *common(gguf_files))
    assert "on llama.cpp stored on" in record["sizing"]["cost_curve"]
    capsys.readouterr()
    assert main(["guide", "medusa", "--backend", "llamacpp", "--target", gguf_files[0]]) == 2
    assert "medusa cannot run on the llama.cpp backend" in capsys.readouterr().err


# ---------------------------------------------------------------------------- bench and tune
def _prompt_file(tmp_path) -> str:
    path = tmp_path / "prompts.jsonl"
    rows = [{"question_id": i, "category": cat, "prompt": PROMPT + f" {i}"} for i, cat in enumerate(["a", "b"])]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_bench_and_tune_run_on_llamacpp(capsys, gguf_files, tmp_path):
    prompts = _prompt_file(tmp_path)
    gen = ["--target", gguf_files[0], "--draft", gguf_files[1], "--raw", "--max-new-tokens", "8"]
    bench = cli_json(capsys, "bench", "--backend", "llamacpp", "--prompts", prompts, "--methods", "ngram", *gen)
    runs = [Store().get_run(run_id) for run_id in bench["run_ids"]]
    assert runs and all(r["backend"] == "llamacpp" and r["dtype"] == "gguf" for r in runs)
    assert all(r["matches_baseline"] for r in runs)
    again = cli_json(capsys, "bench", "--backend", "llamacpp", "--prompts", prompts, "--methods", "ngram", *gen)
    assert again["reused"] == len(runs) and again["measured"] == 0  # resumable per engine
    other = cli_json(capsys, "bench", "--prompts", prompts, "--methods", "ngram", "--dtype", "float32", *gen)
    assert other["reused"] == 0  # a transformers bench never reuses llama.cpp runs
    tune = cli_json(capsys, "tune", "--method", "draft", "--backend", "llamacpp", "--prompts", prompts,
                    "--grid", '[{"k": 2}, {"k": 3}]', *gen)
    assert tune["best"] is not None and len(tune["rows"]) == 2
    assert {Store().get_run(r)["backend"] for row in tune["rows"] for r in row["run_ids"]} == {"llamacpp"}


def test_a_diverging_llamacpp_run_is_replayed_on_llamacpp(gguf_files):
    """The divergence diagnosis reruns the method through a recording backend: a draft run on llama.cpp must
    rerun on llama.cpp (both GGUF models), not take the transformers path (which has no LM head to read)."""
    from dataclasses import replace

    from tools.bench.run import RunInput, build_context, rerun_for
    from tools.engine.replay import RecordingBackend

    inp = RunInput(method="draft", prompt=PROMPT, backend="llamacpp", target=gguf_files[0], draft=gguf_files[1],
                   chat=False, max_new_tokens=8)
    ctx = build_context(inp)
    prompt_ids = context.prompt_ids_for(ctx.target.tokenizer, PROMPT, False)
    recorder = RecordingBackend(ctx.target.model, list(prompt_ids))
    assert context.backend_of(replace(ctx, target=replace(ctx.target, model=recorder))) == "llamacpp"
    out = rerun_for("draft", ctx, prompt_ids, context.generation_settings(inp, ctx), {"k": 2})(recorder)
    assert len(out) == 8 and recorder.seen  # the first token's row was recorded
