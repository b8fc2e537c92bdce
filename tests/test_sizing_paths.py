"""Every path that picks a method's parameters picks them as run and compare do (tools.bench.sizing):
bench (on the eval half, sized per method, resumable), guidance and onboarding (the sized values with
their reasons, never the GPU-shaped lookahead on a CPU; onboarding saves only what was changed), tune's
sized lookahead and sweep centre (the same function and reference as run), and the run_method tool
(saved parameters labelled "memory", not "given"). Tiny models or no model at all."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

import tools.agent_tools.advice as guidance
import tools.bench.suite as suite
from agent.brains.offline import OfflineBrain
from agent.loop import Session
from agent.onboarding import run_onboarding
from memory import Store
from prompts.spec_bench import EVAL_PATH, FIT_PATH
from tools.agent_tools import registry
from tools.agent_tools.registry import ToolContext
from tools.agent_tools.run_tool import with_saved_params
from tools.bench.context import sized_run_params
from tools.bench.machine_cost import CPU_FALLBACK_CURVE, MachineCost
from tools.bench.protocol import hardware_name
from tools.bench.run import RunInput
from tools.bench.sizing import SIZED_FIELDS, SIZERS, fixed_params, remembered_machine, size_params
from tools.bench.suite import BenchInput, bench, default_prompts_path, load_prompt_set
from tools.bench.tune import lookahead_grid, sized_lookahead_params
from tools.engine import cpu_gemm
from tools.engine.cost_curve import suggest_lookahead_params
from tools.models import DEFAULT_TARGET

# a slow CPU whose cost climbs past a few tokens (tests/test_sizing.py), and the shape of an AVX2 CPU in
# float32 whose one-token pass has a fast path (2 tokens cost 2.4x one): there the raw curve and the
# step curve sizing reads give different lookahead settings, so a path on the raw curve would show
STEEP = {1: 0.50, 2: 0.52, 4: 0.56, 8: 0.66, 16: 0.86, 32: 1.30}
AVX2 = {n: t * 1.1 for n, t in CPU_FALLBACK_CURVE.items()}
LOOKAHEAD_KEYS = ("window", "ngram", "guess", "prompt_lookup")


def machine(curve: dict) -> MachineCost:
    return MachineCost("cpu", "test cpu", curve, "a test curve")


def cpu_hw() -> dict:
    """This machine's CPU as guidance names it (the name run and compare store curves under)."""
    return {"kind": "cpu", "name": hardware_name("cpu")}


# ---------------------------------------------------------------------------- sizing helpers
def test_the_sized_fields_are_those_each_sizer_sets():
    for method, sizer in SIZERS.items():
        assert set(sizer(machine(STEEP), {})) == set(SIZED_FIELDS[method])


def test_fixed_params_need_no_machine_only_when_every_sized_field_is_given_or_saved():
    assert fixed_params("lookahead", {"window": 3}) is None  # ngram, guess and the drafts are left to the curve
    assert fixed_params("draft", None, {"k": 4}) is None  # k_max is sized
    assert fixed_params("draft", {"k": 4}, {"k_max": 6}) is None  # the pass costs and the draft's cost are sized
    fixed = fixed_params("draft", {"k": 4, "pass_costs": [1.0, 1.2]},
                         {"k_max": 6, "draft_confidence": 0.5, "draft_cost": 0.3})
    assert fixed.params["k"] == 4 and fixed.params["k_max"] == 6 and fixed.source == "given"
    assert fixed.fields["k_max"].source == "memory" and fixed.fields["adaptive_k"].source == "default"
    assert fixed_params("baseline").params == {}


def test_remembered_machine_reads_the_stored_curve_else_the_conservative_cpu_one():
    with Store() as store:
        cpu, stored = remembered_machine(store, "t", "cpu", "hw", "float32")
        assert stored is None and cpu.curve == CPU_FALLBACK_CURVE and "conservative CPU curve" in cpu.curve_source
        gpu, _ = remembered_machine(store, "t", "gpu", "hw", "float32")
        assert gpu.curve is None  # the defaults, shaped for a GPU, stay there
        store.save_cost_curve("t", "hw", STEEP, dtype="float32", measured_at="2026-02-03T00:00:00",
                              kernels=cpu_gemm.expected_kernels("cpu", "float32"))
        store.save_cost_curve("d", "hw", {1: 0.1}, dtype="int8", measured_at="2026-02-03T00:00:00")
        found, stored = remembered_machine(store, "t", "cpu", "hw", "float32", draft="d", draft_dtype="int8")
        assert found.curve == STEEP and stored["dtype"] == "float32" and "stored on 2026-02-03" in found.curve_source
        assert found.draft_ratio == pytest.approx(0.1 / 0.5) and found.draft_source.startswith("d in int8")
        assert remembered_machine(store, "t", "cpu", "hw", "bfloat16")[1] is None  # another dtype's curve: not it


# ---------------------------------------------------------------------------- 1. bench
def test_bench_reads_the_eval_half_by_default():
    assert default_prompts_path() == EVAL_PATH
    rows = load_prompt_set(None)
    evaluated = {json.loads(line)["question_id"] for line in EVAL_PATH.read_text().splitlines() if line.strip()}
    fitted = {json.loads(line)["question_id"] for line in FIT_PATH.read_text().splitlines() if line.strip()}
    assert {r["question_id"] for r in rows} == evaluated and not evaluated & fitted
    assert BenchInput(target="t").prompts is None  # the eval half unless a file is given


@pytest.fixture
def one_prompt(tmp_path):
    path = tmp_path / "prompts.jsonl"
    path.write_text(json.dumps({"question_id": 1, "category": "coding", "prompt": "def x return x"}) + "\n")
    return path


def test_bench_sizes_each_method_as_run_does_and_resumes_on_the_sized_parameters(tiny_model_dir, one_prompt,
                                                                                 monkeypatch):
    store = Store()
    store.save_cost_curve(str(tiny_model_dir), hardware_name("cpu"), STEEP, dtype="float32",  # nothing measured
                          kernels=cpu_gemm.expected_kernels("cpu", "float32"))  # as runs load it
    store.save_params("ngram", {"max_draft_tokens": 4})
    loads = []
    real_prepare = suite.prepare
    monkeypatch.setattr(suite, "prepare", lambda *a, **k: loads.append(a[1]) or real_prepare(*a, **k))
    inp = BenchInput(prompts=str(one_prompt), methods=["lookahead", "ngram"], params={"lookahead": {"window": 2}},
                     target=str(tiny_model_dir), max_new_tokens=6, chat=False, dtype="float32")
    first = bench(inp, store=store)
    assert first["measured"] == 2 and len(loads) == 1
    runs = {r["method"]: r for r in store.list_runs(limit=10)}
    look = size_params("lookahead", machine(STEEP), given={"window": 2})
    assert runs["lookahead"]["params"] == look.params and runs["lookahead"]["params_source"] == "given"
    assert runs["lookahead"]["sizing"]["window"].startswith("given: ")
    assert runs["lookahead"]["sizing"]["ngram"].startswith("sized: ")
    ngram = size_params("ngram", machine(STEEP), saved={"max_draft_tokens": 4})
    assert runs["ngram"]["params"] == ngram.params and runs["ngram"]["params_source"] == "memory"
    assert runs["ngram"]["sizing"]["max_draft_tokens"].startswith("memory: ")
    assert runs["ngram"]["sizing"]["num_candidate_tokens"].startswith("sized: ")
    assert first["params"]["ngram"]["source"] == "memory" and first["params"]["lookahead"]["params"] == look.params

    again = bench(inp, store=store)  # sized fields need the machine: the target is loaded, nothing re-measured
    assert again["measured"] == 0 and again["reused"] == 2 and len(loads) == 2

    monkeypatch.setattr(suite, "prepare", lambda *a, **k: pytest.fail("no model is needed to find these runs"))
    pinned = BenchInput(prompts=str(one_prompt), methods=["ngram"], params={"ngram": runs["ngram"]["params"]},
                        target=str(tiny_model_dir), max_new_tokens=6, chat=False, dtype="float32")
    found = bench(pinned, store=store)  # every sized field given: found in memory before loading anything
    assert found["measured"] == 0 and found["reused"] == 1 and found["run_ids"] == [runs["ngram"]["run_id"]]


def test_bench_does_not_run_a_method_whose_saved_parameters_do_not_fit_together(one_prompt, monkeypatch):
    store = Store()
    store.save_params("draft", {"k": 8, "k_max": 4})  # each valid, together not
    monkeypatch.setattr(suite, "prepare", lambda *a, **k: pytest.fail("nothing is left to run"))
    out = bench(BenchInput(prompts=str(one_prompt), methods=["draft"], target="t"), store=store)
    assert "k_max=4 is below k=8" in out["not_run"]["draft"] and out["measured"] == 0


# ---------------------------------------------------------------------------- 2. guidance and onboarding
def measuring_gives(monkeypatch, curve: dict) -> list:
    """Guidance's measurement of this machine stands in as storing ``curve`` (what a run measures and stores
    before its first step); returns the list of what was measured."""
    measured = []

    def measure(ctx, method, target, backend):
        measured.append((method, target))
        hw = cpu_hw()
        dtype = guidance.run_dtype(ctx.store, method, hw)
        ctx.store.save_cost_curve(target, hw["name"], dict(curve), dtype=dtype,
                                  kernels=cpu_gemm.expected_kernels("cpu", dtype))

    monkeypatch.setattr(guidance, "measure_machine", measure)
    return measured


def advise(store, monkeypatch, method: str, hw: dict | None = None, **extra) -> dict:
    monkeypatch.setattr(guidance, "detect_hardware", lambda choice: hw or cpu_hw())
    tool = registry.get_tool("guidance")
    result = registry.execute(tool, registry.parse_input(tool, {"method": method, **extra}), ToolContext(store=store))
    assert not result.is_error, result.content
    return result.content


def test_guidance_on_a_cpu_without_a_curve_measures_it_then_offers_the_sized_lookahead(monkeypatch):
    measured = measuring_gives(monkeypatch, CPU_FALLBACK_CURVE)
    with Store() as store:
        out = advise(store, monkeypatch, "lookahead")
    fallback = size_params("lookahead", machine(dict(CPU_FALLBACK_CURVE)))
    assert measured == [("lookahead", DEFAULT_TARGET)] and out["measured_now"]
    assert out["suggested_params"] == fallback.params
    assert (out["suggested_params"]["window"], out["suggested_params"]["guess"]) != (15, 5)
    assert out["param_reasons"]["window"] == f"sized: {fallback.fields['window'].reason}"
    assert any(r.startswith(f"window={fallback.params['window']} (sized): ") for r in out["reasons"])
    assert "next_step" not in out


def test_guidance_tune_and_run_size_lookahead_alike_from_the_stored_curve(monkeypatch):
    hw = cpu_hw()
    with Store() as store:
        dtype = guidance.run_dtype(store, "lookahead", hw)
        kernels = cpu_gemm.expected_kernels("cpu", dtype)  # as a run on this machine stores it
        store.save_cost_curve(DEFAULT_TARGET, hw["name"], AVX2, dtype=dtype, measured_at="2026-02-03T00:00:00",
                              kernels=kernels)
        monkeypatch.setattr(cpu_gemm, "kernels", lambda model: kernels)  # the stand-in target's layers are those
        advised = advise(store, monkeypatch, "lookahead", hw)["suggested_params"]
        target = SimpleNamespace(ref=DEFAULT_TARGET, device="cpu", dtype=dtype, model=None)
        tuned, reasoning = sized_lookahead_params(store, target, allow_measure=False)
        ctx = SimpleNamespace(target=target, draft=None, medusa_heads=None)
        run = sized_run_params(RunInput(method="lookahead", prompt="p"), ctx, store, allow_measure=False)
    sized = {k: run.params[k] for k in LOOKAHEAD_KEYS}
    assert {k: advised[k] for k in LOOKAHEAD_KEYS} == tuned == sized == {k: lookahead_grid(AVX2)[0][k] for k in
                                                                         LOOKAHEAD_KEYS}
    raw, _ = suggest_lookahead_params(AVX2)  # the raw curve would size it otherwise: the step curve is the reference
    assert (raw.window, raw.ngram) != (sized["window"], sized["ngram"])
    assert "stored on 2026-02-03" in reasoning and run.source == "sized"


def test_guidance_sizes_draft_k_as_run_does(monkeypatch):
    measuring_gives(monkeypatch, CPU_FALLBACK_CURVE)
    with Store() as store:
        out = advise(store, monkeypatch, "draft")
    fallback = size_params("draft", machine(dict(CPU_FALLBACK_CURVE)))
    assert (out["suggested_params"]["k"], out["suggested_params"]["k_max"]) == (fallback.params["k"],
                                                                              fallback.params["k_max"])
    assert out["param_reasons"]["k"].startswith("sized: ")


def onboard(store, monkeypatch, answers: dict[str, str]) -> tuple[dict, list[str]]:
    """Run onboarding with scripted answers (matched by the start of each question); returns the
    defaults offered ({question: default}) and what was said."""
    monkeypatch.setattr(guidance, "detect_hardware", lambda choice: cpu_hw())
    offered, said = {}, []

    def ask(question: str, default: str) -> str:
        offered[question] = default
        return next((a for q, a in answers.items() if question.startswith(q)), "")

    run_onboarding(Session(store, OfflineBrain()), ask, said.append)
    return offered, said


def test_onboarding_offers_the_sized_values_and_saves_only_what_was_changed(monkeypatch):
    measuring_gives(monkeypatch, CPU_FALLBACK_CURVE)
    fallback = size_params("lookahead", machine(dict(CPU_FALLBACK_CURVE))).params
    changed = fallback["ngram"] - 1
    with Store() as store:
        offered, said = onboard(store, monkeypatch, {"Which method": "lookahead", "lookahead parameter ngram":
                                                     str(changed), "Run a short first": "n"})
        saved = store.get_params("lookahead")
        answers = store.all_answers()
    for name in ("window", "ngram", "guess"):
        assert offered[f"lookahead parameter {name}"] == str(fallback[name])
    assert saved == {"target": DEFAULT_TARGET, "ngram": changed, "max_new_tokens": 128, "temperature": 0.0}
    assert answers["onboarding.lookahead.window"] is None  # kept as offered: remembered as answered, not saved
    text = "\n".join(said)
    assert f"window={fallback['window']}: sized: the widest window W that fits" in text
    assert "Not saved, so each run sizes them to this machine: window, guess." in text


def test_onboarding_keeps_a_typed_value_equal_to_the_offer_unsaved(monkeypatch):
    measuring_gives(monkeypatch, CPU_FALLBACK_CURVE)
    fallback = size_params("draft", machine(dict(CPU_FALLBACK_CURVE))).params
    with Store() as store:
        offered, first = onboard(store, monkeypatch, {"Which method": "draft", "draft parameter k": str(fallback["k"]),
                                                  "draft parameter adaptive_k": "no", "Run a short first": "n"})
        saved = store.get_params("draft")
        offered_draft, said = onboard(Store(), monkeypatch, {})  # all answered already: nothing asked again
    assert offered["draft parameter k"] == str(fallback["k"])
    assert "k" not in saved and saved["adaptive_k"] is False
    assert any("adaptive_k=False" in line and "each run sizes them to this machine: k." in line for line in first)
    assert offered_draft == {} and said == []


# ---------------------------------------------------------------------------- 4. run_method's saved parameters
def test_saved_parameters_reach_the_run_as_memory_not_as_given():
    with Store() as store:
        store.save_params("lookahead", {"window": 4, "max_new_tokens": 16})
        inp = with_saved_params(RunInput(method="lookahead", prompt="p", params={"ngram": 3}),
                                store.get_params("lookahead"))
        assert inp.params == {"ngram": 3} and inp.max_new_tokens == 16
        ctx = SimpleNamespace(target=SimpleNamespace(ref="t", device="cpu", dtype="float32", model=None), draft=None,
                              medusa_heads=None)
        sizing = sized_run_params(inp, ctx, store, allow_measure=False)
    assert sizing.fields["window"].source == "memory" and sizing.params["window"] == 4
    assert sizing.fields["ngram"].source == "given" and sizing.fields["guess"].source == "sized"


def test_the_run_method_tool_records_saved_parameters_as_memory(tiny_model_dir):
    store = Store()
    store.save_cost_curve(str(tiny_model_dir), hardware_name("cpu"), STEEP, dtype="float32")
    store.save_params("ngram", {"max_draft_tokens": 4, "max_new_tokens": 6})
    tool = registry.get_tool("run_method")
    inp = registry.parse_input(tool, {"method": "ngram", "prompt": "def x return x", "target": str(tiny_model_dir),
                                      "chat": False, "dtype": "float32"})
    result = registry.execute(tool, inp, ToolContext(store=store))
    assert not result.is_error, result.content
    run = store.get_run(result.content["run_id"])
    assert run["params_source"] == "memory" and run["new_tokens"] == 6
    assert run["params"]["max_draft_tokens"] == 4 and run["sizing"]["max_draft_tokens"].startswith("memory: ")
    assert run["sizing"]["num_candidate_tokens"].startswith("sized: ")
