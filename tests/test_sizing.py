"""Parameters sized to the machine (tools.bench.sizing): every method from a synthetic cost curve,
given > memory > sized > default field by field, and never a GPU-shaped default on a CPU unasked."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from memory import Store
from tools.bench import machine_cost as cost
from tools.bench import sizing
from tools.bench.machine_cost import CPU_FALLBACK_CURVE, MachineCost, machine_cost
from tools.bench.sizing import expected_speedup, size_params
from tools.engine.cost_curve import flat_tokens
from tools.engine.medusa_trees import MC_SIM_7B_63, TREES
from tools.engine.params import METHOD_NAMES, LookaheadParams, PromptLookupParams, parse_params
from tools.errors import ParameterError

# seconds per pass: a slow CPU whose cost climbs past a few tokens, and a GPU that is flat to 64
STEEP = {1: 0.50, 2: 0.52, 4: 0.56, 8: 0.66, 16: 0.86, 32: 1.30}
FLAT = {1: 0.020, 2: 0.020, 4: 0.020, 8: 0.020, 16: 0.021, 32: 0.021, 64: 0.022}
CPU = MachineCost("cpu", "test cpu", STEEP, "a synthetic curve", draft_ratio=0.2, draft_source="synthetic")
GPU = MachineCost("gpu", "test gpu", FLAT, "a synthetic curve", draft_ratio=0.3, draft_source="synthetic")
FITTED = [[0], [1], [2], [0, 0], [0, 1], [3], [1, 0], [0, 0, 0], [2, 0], [4]]  # a heads' fitted tree, in fit order


def test_every_method_is_sized_from_the_curve_with_a_reason_per_parameter():
    tokens = sizing.step_tokens(STEEP)  # 1.3 x the 2-token pass (0.52 s) = 0.676 s: between 8 and 16 tokens
    assert tokens == 8 and flat_tokens(STEEP) == 7
    for method in METHOD_NAMES:
        s = size_params(method, CPU)
        parse_params(method, s.params)  # always valid
        assert all(p.reason and p.source in sizing.SOURCES for p in s.fields.values())
        assert set(s.reasons()) - {"cost_curve"} == set(s.params)
        if method != "baseline":
            assert s.reasons()["cost_curve"].startswith("sized from a synthetic curve")
            assert s.source == "sized" and "a synthetic curve" in s.machine
            assert any(line.startswith("sized from") for line in s.lines())
    look = LookaheadParams(**size_params("lookahead", CPU).params)
    # the window fits the flat part; one prompt-lookup draft beside it, cut each step to what pays
    assert look.tokens_per_step - look.lookup_tokens <= tokens and look.prompt_lookup == 1
    ngram = PromptLookupParams(**size_params("ngram", CPU).params)
    assert (ngram.max_draft_tokens, ngram.num_candidate_tokens, ngram.max_candidate_tokens, ngram.num_candidates) \
        == (tokens - 1, tokens - 1, tokens - 1, 1)
    draft = size_params("draft", CPU).params
    best_long = max(range(1, 17), key=lambda k: (round(expected_speedup(k, 0.95, 0.2, STEEP), 3), k))
    assert draft["k_max"] == best_long and 1 <= draft["k"] <= draft["k_max"]
    assert draft["draft_confidence"] == 0.4  # not sized: the default, said so
    medusa = size_params("medusa", CPU, num_heads=4).fields["tree"]
    assert TREES.get(medusa.value, medusa.value) == MC_SIM_7B_63[:tokens - 1]  # upstream's most useful nodes first
    assert "mc_sim_7b_63" in medusa.reason and f"{tokens} tokens per step" in medusa.reason


def test_a_flat_gpu_curve_keeps_the_large_sizes():
    look = LookaheadParams(**size_params("lookahead", GPU).params)
    assert look.prompt_lookup == 1 and look.tokens_per_step > 50
    assert size_params("medusa", GPU, num_heads=4).params["tree"] == "mc_sim_7b_63"
    cheap = MachineCost("gpu", "gpu", FLAT, "curve", draft_ratio=0.02)  # a cheap draft on a flat curve: draft long
    assert size_params("draft", cheap).params["k_max"] == 16
    assert 4 <= size_params("draft", GPU).params["k_max"] < 16  # a draft at 0.3 of the target: shorter drafts
    assert size_params("ngram", GPU).params["max_draft_tokens"] == 63


def test_medusa_uses_the_heads_fitted_tree_whole_or_cut_to_fit():
    roomy = MachineCost("cpu", "cpu", {1: 0.1, 8: 0.1, 16: 0.11, 32: 0.2}, "curve")
    assert size_params("medusa", roomy, num_heads=3, heads_tree=FITTED).params["tree"] == "auto"
    cut = size_params("medusa", CPU, num_heads=3, heads_tree=FITTED).fields["tree"]
    assert cut.value == FITTED[:sizing.step_tokens(STEEP) - 1] and "fitted to these heads" in cut.reason
    shallow = size_params("medusa", GPU, num_heads=2).params["tree"]  # cut to the heads' depth
    assert max(len(c) for c in shallow) <= 2


def test_given_beats_memory_beats_sized_beats_default():
    s = size_params("lookahead", CPU, given={"window": 4}, saved={"ngram": 3, "target": "x", "window": 9})
    assert s.fields["window"].value == 4 and s.fields["window"].source == "given"
    assert s.fields["ngram"].value == 3 and s.fields["ngram"].source == "memory"
    assert s.fields["guess"].value == 2 and s.fields["guess"].source == "sized"  # G = W // 2 of the given W
    assert s.fields["pool_from_prompt"].source == "default"
    assert s.source == "given" and "target" not in s.params
    assert size_params("lookahead", CPU, saved={"ngram": 3}).source == "memory"
    d = size_params("draft", CPU, given={"k": 12})
    assert d.params["k"] == 12 and d.params["k_max"] >= 12  # sized k_max never below a given k
    n = size_params("ngram", CPU, given={"num_candidate_tokens": 20})
    assert n.params["max_candidate_tokens"] >= 20 and parse_params("ngram", n.params)


def test_bad_given_values_raise_and_clashing_saved_ones_are_dropped_with_a_note():
    with pytest.raises(ParameterError):
        size_params("lookahead", CPU, given={"ngram": 1})
    with pytest.raises(ParameterError):
        size_params("lookahead", CPU, saved={"ngram": 1})
    s = size_params("draft", CPU, given={"k": 8}, saved={"k_max": 2})
    assert s.params["k"] == 8 and s.params["k_max"] >= 8 and "saved ones ignored" in " ".join(s.notes)


def test_no_curve_on_a_gpu_keeps_the_defaults_and_says_why():
    none = MachineCost("gpu", "gpu", None, "no cost curve measured on this GPU yet")
    s = size_params("lookahead", none)
    assert s.source == "default" and s.params == LookaheadParams().model_dump()
    assert "no cost curve measured on this GPU" in s.fields["window"].reason


def _fake_target(device="cpu"):
    return SimpleNamespace(ref="tiny-target", dtype="float32", device=device, model=object())


def test_on_a_cpu_without_a_curve_or_leave_to_measure_the_sizes_stay_small(monkeypatch):
    monkeypatch.setattr(cost, "forward_cost_curve", lambda *a, **k: pytest.fail("measured without leave"))
    machine = machine_cost(Store(), _fake_target(), allow_measure=False)
    assert machine.curve == CPU_FALLBACK_CURVE and "conservative CPU curve" in machine.curve_source
    defaults = {m: parse_params(m, {}).model_dump() for m in ("lookahead", "ngram", "medusa", "draft")}
    for method in defaults:
        params = size_params(method, machine, num_heads=4).params
        assert params != defaults[method], f"{method} ran its GPU-shaped default on a CPU"
    assert LookaheadParams(**size_params("lookahead", machine).params).tokens_per_step < \
        LookaheadParams().tokens_per_step
    assert size_params("ngram", machine).params["max_draft_tokens"] < PromptLookupParams().max_draft_tokens
    assert size_params("medusa", machine, num_heads=4).params["tree"] not in ("mc_sim_7b_63", "auto")


def test_the_curve_is_measured_once_stored_and_then_read_from_memory(monkeypatch):
    calls = []

    def fake_curve(model, sizes, **kw):
        calls.append((tuple(sizes), kw))
        return {1: 0.1, 2: 0.1, 4: 0.1, 8: 0.11, 16: 0.2} if len(sizes) > 1 else {1: 0.03}

    monkeypatch.setattr(cost, "forward_cost_curve", fake_curve)
    monkeypatch.setattr(cost, "hardware_name", lambda device: "test machine")
    store = Store()
    draft = SimpleNamespace(ref="tiny-draft", dtype="float32", device="cpu", model=object())
    first = machine_cost(store, _fake_target(), draft, draft_quant="none")
    assert "measured now" in first.curve_source and first.draft_ratio == pytest.approx(0.3)
    assert calls[0][0] == (1, 2) and calls[1][1]["stop_ratio"] == cost.MEASURE_STOP_RATIO  # a probe, then the curve
    assert len(calls) == 3  # and one draft token
    assert store.get_cost_curve("tiny-target", "test machine", "float32")["curve"][16] == 0.2
    again = machine_cost(store, _fake_target(), draft, draft_quant="none")
    assert len(calls) == 3 and "stored on" in again.curve_source and again.draft_ratio == pytest.approx(0.3)


def test_expected_speedup_prefers_short_drafts_when_drafting_is_dear():
    cheap = max(range(1, 17), key=lambda k: expected_speedup(k, 0.8, 0.05, FLAT))
    dear = max(range(1, 17), key=lambda k: expected_speedup(k, 0.8, 0.5, FLAT))
    assert dear < cheap


def test_forward_cost_curve_stops_timing_sizes_past_the_stop_ratio(tiny_qwen):
    from tools.engine.cost_curve import forward_cost_curve

    full = forward_cost_curve(tiny_qwen, sizes=(1, 2, 4), cache_len=8, repeats=1)
    assert set(full) == {1, 2, 4}
    stopped = forward_cost_curve(tiny_qwen, sizes=(1, 2, 4, 8, 16), cache_len=8, repeats=1, stop_ratio=0.0,
                                 stop_from=2)
    assert set(stopped) == {1, 2}  # 2 tokens already cost more than 0 x one token: nothing larger is timed
    assert set(forward_cost_curve(tiny_qwen, sizes=(1, 2, 4, 8, 16), cache_len=8, repeats=1, stop_ratio=0.0,
                                  stop_from=8)) == {1, 2, 4, 8}  # the sizes below stop_from are always timed


def test_compare_sizes_what_is_not_given_and_stores_the_reasons(tiny_model_dir, monkeypatch):
    from tools.bench.compare import CompareInput, compare

    monkeypatch.setattr(cost, "_DISTURBED", {})
    store = Store()
    store.save_params("draft", {"k": 3})
    inp = CompareInput(prompt="def x return x", target=str(tiny_model_dir), draft=str(tiny_model_dir), max_new_tokens=6,
                       chat=False, dtype="float32", methods=["draft", "lookahead", "ngram"],
                       params={"lookahead": {"window": 2, "ngram": 3, "guess": 2}})
    result = compare(inp, store=store)
    rows = {r["method"]: r for r in result["rows"]}
    assert rows["draft"]["params_source"] == "memory" and rows["draft"]["params"]["k"] == 3
    assert rows["draft"]["sizing"]["k"].startswith("memory") and rows["draft"]["sizing"]["k_max"].startswith("sized")
    assert rows["lookahead"]["params_source"] == "given"
    assert rows["lookahead"]["sizing"]["prompt_lookup"].startswith("sized")
    assert rows["ngram"]["params_source"] == "sized"
    stored = store.get_run(rows["ngram"]["run_id"])
    assert stored["sizing"] == rows["ngram"]["sizing"] and stored["params_source"] == "sized"
    # measured once and stored for the next run (unless the busy machine disturbed it: then not stored, and said)
    assert store.cost_curves() or "looks disturbed" in rows["ngram"]["sizing"]["cost_curve"]


def test_a_single_run_keeps_the_given_fields_and_sizes_the_rest(tiny_model_dir, monkeypatch):
    from tools.bench import context
    from tools.bench.run import RunInput
    from tools.errors import StoreError

    inp = RunInput(method="ngram", prompt="def x", target=str(tiny_model_dir), dtype="float32", chat=False,
                   params={"num_candidates": 2})
    ctx = context.prepare(inp, ["ngram"], None, strict=True).ctx
    store = Store()
    store.save_params("ngram", {"max_ngram_size": 2})
    s = context.sized_run_params(inp, ctx, store)
    assert s.fields["num_candidates"].source == "given" and s.fields["max_ngram_size"].source == "memory"
    assert s.fields["max_draft_tokens"].source == "sized" and s.source == "given"
    assert context.sized_run_params(inp.model_copy(update={"method": "baseline"}), ctx, store) is None

    def broken():
        raise StoreError("the memory database is read-only")

    monkeypatch.setattr(context, "Store", broken)  # no memory: still sized (measured, not stored)
    s = context.sized_run_params(inp, ctx)
    assert s.fields["max_ngram_size"].source == "default" and s.fields["max_draft_tokens"].source == "sized"
    assert "not stored" in s.machine or "stored on" in s.machine


def test_a_curve_that_rises_at_once_gets_the_smallest_sizes_and_a_note():
    steep = MachineCost("cpu", "cpu", {1: 0.1, 2: 0.3, 4: 0.6}, "a busy machine's curve")
    s = size_params("lookahead", steep)
    assert (s.params["window"], s.params["ngram"], s.params["prompt_lookup"]) == (1, 2, 1)
    assert any("measure it again" in n for n in s.notes) and any("measure it again" in line for line in s.lines())
    assert size_params("draft", steep).params["k_max"] == 1
    assert not any("--backend" in n for n in s.notes)
    on_llamacpp = MachineCost("cpu", "cpu", {1: 0.1, 2: 0.3, 4: 0.6}, "a busy machine's curve", backend="llamacpp")
    assert any("--measure --backend llamacpp`" in n for n in size_params("lookahead", on_llamacpp).notes)


def test_a_dear_two_token_pass_is_the_reference_and_gets_a_note():
    # float32 on an AVX2-only CPU: the one-token pass has a fast path; 2 tokens cost about 2x, then it is near-flat
    step = MachineCost("cpu", "cpu", {1: 0.20, 2: 0.48, 4: 0.55, 8: 0.56, 16: 0.61, 32: 0.70}, "a step curve",
                       draft_ratio=0.25)
    assert flat_tokens(step.curve) == 1 and sizing.step_tokens(step.curve) == 18  # 1.3 x 0.48 s past 16 tokens
    s = size_params("ngram", step)
    assert s.params["max_draft_tokens"] == 17 and s.params["num_candidates"] == 1
    assert any("2 tokens already costs 2.4x" in n for n in s.notes)
    assert "which already costs 2.4x a 200 ms one-token pass" in s.fields["max_draft_tokens"].reason
    draft = size_params("draft", step).params
    assert draft["k_max"] >= 12 and draft["k"] >= 4  # one dear pass: verify long drafts in it


def test_a_curve_timed_on_a_busy_machine_is_not_stored_and_the_fallback_is_used(monkeypatch):
    busy = {1: 4.38, 2: 13.5}  # measured here with other jobs on both cores: 2 tokens "cost" 3.1x one
    assert "2 tokens took 3.1x" in cost.disturbed(busy) and cost.disturbed(CPU_FALLBACK_CURVE) is None
    steady, shaky = {1: [0.50, 0.52, 0.51], 2: [1.20, 1.22, 1.21]}, {1: [0.50, 0.90, 1.40], 2: [1.2, 1.2, 1.2]}
    assert cost.disturbed({1: 0.51, 2: 1.21}, steady) is None  # float32's 2.4x step at 2 tokens is real
    assert "passes over 1 tokens took 0.50 to 1.40 s" in cost.disturbed({1: 0.9, 2: 1.2}, shaky)
    calls = []
    monkeypatch.setattr(cost, "forward_cost_curve", lambda model, sizes, **k: calls.append(sizes) or dict(busy))
    monkeypatch.setattr(cost, "_DISTURBED", {})
    store = Store()
    machine = machine_cost(store, _fake_target())
    assert machine.curve == CPU_FALLBACK_CURVE and "looks disturbed" in machine.curve_source
    # the probe caught it (no long passes timed), and once more on the second attempt
    assert store.cost_curves() == [] and calls == [(1, 2)] * cost.MEASURE_ATTEMPTS
    again = machine_cost(store, _fake_target())
    assert "looks disturbed" in again.curve_source and len(calls) == cost.MEASURE_ATTEMPTS  # once a process
    assert not any("measure it again" in n for n in size_params("lookahead", machine).notes)  # the fallback's own shape


def test_a_curve_disturbed_once_is_measured_again_and_stored(monkeypatch):
    busy, idle = {1: 4.38, 2: 13.5}, {1: 0.5, 2: 1.2}
    calls = []

    def timed(model, sizes, **k):
        calls.append(tuple(sizes))
        return {n: (busy if len(calls) == 1 else idle).get(n, 1.2 + 0.01 * n) for n in sizes}

    monkeypatch.setattr(cost, "forward_cost_curve", timed)
    monkeypatch.setattr(cost, "_DISTURBED", {})
    store = Store()
    machine = machine_cost(store, _fake_target())
    assert machine.curve != CPU_FALLBACK_CURVE and "measured now" in machine.curve_source
    assert len(store.cost_curves()) == 1 and calls[0] == (1, 2) and calls[1] == (1, 2)  # the probe, then again


@pytest.mark.parametrize("method", ["lookahead", "eagle", "draft", "ngram"])
def test_a_gpu_without_a_curve_says_so_only_for_the_fields_a_curve_sizes(method):
    from tools.engine.params import SIZED_FIELDS

    gpu = MachineCost("gpu", "Test GPU", None, "no cost curve of t measured here yet: the GPU-sized defaults stay")
    fields = size_params(method, gpu).fields
    for name, p in fields.items():
        assert p.source == "default"
        # a folder, a switch or a prior is never sized from a curve: its reason is what it does, not a missing curve
        assert ("measured here yet" in p.reason) == (name in SIZED_FIELDS[method]), name
