"""Parameter guidance: the sources' starting values, tailored to model size and hardware, measured
curves and sweeps used when stored, and always marked as advice to be measured."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest

import tools.agent_tools.advice as guidance
from memory import Store
from tools.agent_tools import registry
from tools.agent_tools.registry import ToolContext
from tools.bench.machine_cost import CPU_FALLBACK_CURVE, PROMPT_TOKENS, MachineCost, one_token_time
from tools.bench.sizing import size_params
from tools.engine import cpu_gemm

DESIGN_CPU_CURVE = {1: 0.112, 2: 0.108, 4: 0.111, 8: 0.126, 16: 0.149, 32: 0.203, 64: 0.306}
CPU = {"kind": "cpu", "name": "Test CPU (2 cores)"}
GPU = {"kind": "gpu", "name": "Test GPU", "gpu_memory_gb": 24.0, "gpu_count": 1}


@pytest.fixture
def store():
    with Store() as s:
        yield s


def advise(store, monkeypatch, hardware=CPU, **tool_input) -> dict:
    monkeypatch.setattr(guidance, "detect_hardware", lambda choice: hardware)
    tool = registry.get_tool("guidance")
    result = registry.execute(tool, registry.parse_input(tool, tool_input), ToolContext(store=store))
    assert not result.is_error, result.content
    return result.content


@pytest.mark.parametrize("ref,size", [("qwen2.5-coder-1.5b-instruct", 1.5),
                                      ("HuggingFaceTB/SmolLM2-135M-Instruct", 0.135),
                                      ("meta-llama/Llama-3.1-70B", 70.0), ("/models/my-model", None)])
def test_model_size_is_read_from_the_name(ref, size):
    assert guidance.size_from_name(ref) == size


def test_draft_guidance_is_5_to_10x_smaller_and_marked_as_advice(store, monkeypatch):
    out = advise(store, monkeypatch, method="draft", target="meta-llama/Llama-3.1-70B")
    assert out["target_size_b"] == 70.0
    assert any("about 7B-14B parameters" in r for r in out["reasons"])
    from tools.engine.methods import DraftParams

    # on a CPU without a curve and no model here to measure one: the starting values, said to be unmeasured (never a
    # made-up curve presented as this machine's), with measuring as the next step
    assert (out["suggested_params"]["k"], out["suggested_params"]["k_max"]) == (DraftParams().k, DraftParams().k_max)
    assert out["source"].startswith("not measured: this machine's cost curve of meta-llama/Llama-3.1-70B could not")
    assert "could not be measured" in out["source"] and out["next_step"]["tool"] == "measure_cost_curve"
    assert out["param_reasons"]["k"] == guidance.UNSIZED_REASON
    # the reasons name the values offered (the starting k), not the sizes a stand-in curve would give
    assert any(r.startswith(f"start at k={DraftParams().k} ") and f"up to {DraftParams().k_max})" in r
               for r in out["reasons"])
    assert out["advice"].startswith("advice to be measured")
    assert out["measured_best"].startswith("no stored runs")
    on_gpu = advise(store, monkeypatch, hardware=GPU, method="draft", target="meta-llama/Llama-3.1-70B")
    assert any("device_map='auto'" in r for r in on_gpu["reasons"])
    assert on_gpu["suggested_params"]["k"] == DraftParams().k  # a GPU without a curve keeps the defaults


def test_guidance_measures_this_machine_first_where_no_curve_is_stored(store, monkeypatch):
    measured = []

    def measure(ctx, method, target, backend):  # what a run stores before its first step: the target's curve
        measured.append((method, target))
        dtype = guidance.run_dtype(store, method, CPU)
        store.save_cost_curve(target, CPU["name"], dict(DESIGN_CPU_CURVE), dtype=dtype,
                              kernels=cpu_gemm.expected_kernels("cpu", dtype))

    monkeypatch.setattr(guidance, "measure_machine", measure)
    out = advise(store, monkeypatch, method="lookahead", target="my-model")
    assert measured == [("lookahead", "my-model")] and out["measured_now"]
    assert out["source"].startswith("sized to the cost curve measured on this machine")
    again = advise(store, monkeypatch, method="lookahead", target="my-model")
    assert measured == [("lookahead", "my-model")] and "measured_now" not in again  # stored: not measured twice
    declined = advise(store, monkeypatch, method="ngram", target="other-model", measure=False)
    assert declined["source"].startswith("not measured") and "declined" in declined["source"]


def test_builtin_draft_ratio_is_stated(store, monkeypatch):
    out = advise(store, monkeypatch, method="draft")
    assert any("about 0.15B-0.3B" in r for r in out["reasons"])
    assert any("qwen2.5-coder-0.5b-instruct is 3x smaller" in r for r in out["reasons"])


def test_medusa_guidance_uses_the_reference_defaults_and_a_tree_for_the_hardware(store, monkeypatch):
    cpu = advise(store, monkeypatch, method="medusa")
    assert cpu["suggested_params"]["posterior_threshold"] == 0.09
    assert cpu["suggested_params"]["posterior_alpha"] == 0.3
    assert cpu["suggested_params"]["tree"] == "cpu8"
    assert advise(store, monkeypatch, hardware=GPU, method="medusa")["suggested_params"]["tree"] == "mc_sim_7b_63"


def test_medusa_guidance_suggests_no_empty_pass_costs(store, monkeypatch):
    out = advise(store, monkeypatch, method="medusa")
    assert "pass_costs" not in out["suggested_params"] and any("pass costs" in r for r in out["reasons"])


def test_eagle_guidance_sizes_eagle_s_own_tree(store, monkeypatch):
    out = advise(store, monkeypatch, method="eagle")
    params = out["suggested_params"]
    assert {"depth", "topk", "tree_nodes"} <= set(params) and "num_candidate_tokens" not in params
    assert params["pass_costs"] is None  # not sized: no curve is measured here (and none is made up)
    assert out["source"].startswith("not measured") and any("eagle train" in r for r in out["reasons"])


def test_lookahead_without_a_curve_that_cannot_be_measured_gives_the_starting_values_and_says_so(store, monkeypatch):
    from tools.engine.lookahead import LookaheadParams

    out = advise(store, monkeypatch, method="lookahead")
    params = out["suggested_params"]
    start = LookaheadParams()
    assert (params["window"], params["ngram"], params["guess"]) == (start.window, start.ngram, start.guess)
    assert out["source"].startswith("not measured") and out["source"].endswith("the method's starting values")
    assert "not sized" in out["param_reasons"]["window"] and out["next_step"]["tool"] == "measure_cost_curve"
    assert not any("conservative CPU curve" in r for r in out["reasons"])  # no sizes come from it: not said they do
    gpu = advise(store, monkeypatch, hardware=GPU, method="lookahead")["suggested_params"]
    assert (gpu["window"], gpu["ngram"], gpu["guess"]) == (15, 5, 5)  # shaped for a GPU, kept there


def test_lookahead_is_sized_to_a_stored_cost_curve(store, monkeypatch):
    dtype = guidance.run_dtype(store, "lookahead", CPU)
    store.save_cost_curve("qwen2.5-coder-1.5b-instruct", CPU["name"], DESIGN_CPU_CURVE, dtype=dtype,
                          measured_at="2026-01-01T00:00:00", kernels=cpu_gemm.expected_kernels("cpu", dtype))
    out = advise(store, monkeypatch, method="lookahead")
    params = out["suggested_params"]
    expected = size_params("lookahead", MachineCost("cpu", CPU["name"], DESIGN_CPU_CURVE, "stored")).params
    assert params == expected
    assert (params["window"], params["ngram"], params["guess"], params["prompt_lookup"]) == (3, 4, 1, 1)
    assert out["source"].startswith("sized to the cost curve measured on this machine")
    assert any("stored on 2026-01-01" in r for r in out["reasons"]) and "next_step" not in out
    # another machine's curve does not count: that machine is not measured yet, and the advice says so
    other = advise(store, monkeypatch, hardware={"kind": "cpu", "name": "Other CPU"}, method="lookahead")
    assert other["source"].startswith("not measured")
    # nor does a curve in a dtype runs here do not load the target in (said so)
    store.save_params("lookahead", {"dtype": "float16" if dtype != "float16" else "bfloat16"})
    shifted = advise(store, monkeypatch, method="lookahead")
    assert shifted["source"].startswith("not measured")
    assert any(f"a cost curve of qwen2.5-coder-1.5b-instruct in {dtype} is stored" in r for r in shifted["reasons"])


def test_measured_sweeps_from_memory_are_reported_with_run_ids(store, monkeypatch):
    target = "qwen2.5-coder-1.5b-instruct"
    ids = {k: [store.add_run({"method": "draft", "target": target, "params": {"k": k}, "speedup": s,
                              "hardware": {"name": "Test CPU"}}) for s in speeds]
           for k, speeds in {2: [1.1, 1.2, 1.3], 4: [1.5, 1.6, 1.4], 8: [0.9]}.items()}
    out = advise(store, monkeypatch, method="draft")
    best = out["measured"][0]
    assert best["params"] == {"k": 4} and best["median_speedup"] == 1.5 and set(best["run_ids"]) == set(ids[4])
    assert out["measured_best"].startswith('measured here: {"k": 4} gave a median speedup of 1.50x over 3 run(s)')
    assert [row["params"]["k"] for row in out["measured"]] == [4, 2, 8]


def test_measure_cost_curve_stores_the_curve_for_later_guidance(store, monkeypatch, tiny_qwen):
    import tools.agent_tools.advice

    model = copy.deepcopy(tiny_qwen)
    cpu_gemm.use_onednn(model)  # as runs load a float32 model on a CPU
    monkeypatch.setattr(tools.agent_tools.advice, "load_cached", lambda ref, dtype, device_map: SimpleNamespace(
        model=model, device="cpu", dtype="float32"))
    monkeypatch.setattr(guidance, "detect_hardware", lambda choice: CPU)
    monkeypatch.setattr(guidance, "run_dtype", lambda store, method, hw: "float32")  # as the tiny model loaded
    tool = registry.get_tool("measure_cost_curve")
    inp = registry.parse_input(tool, {"target": "tiny", "repeats": 1})
    result = registry.execute(tool, inp, ToolContext(store=store))
    assert not result.is_error, result.content
    from tools.engine.cost_curve import DEFAULT_SIZES

    assert sorted(result.content["curve_ms"]) == list(DEFAULT_SIZES)
    saved = store.get_cost_curve("tiny", CPU["name"])
    assert saved["dtype"] == "float32" and set(saved["curve"]) == set(DEFAULT_SIZES)
    assert store.get_cost_curve("tiny", CPU["name"], dtype="bfloat16") is None
    assert store.all_answers() == {}  # a curve is a row of its own table, not an onboarding answer
    out = advise(store, monkeypatch, method="lookahead", target="tiny")
    assert out["source"].startswith("sized to the cost curve") and out["suggested_params"] == \
        result.content["suggested_lookahead"]


def test_the_draft_offered_is_smaller_than_the_target_and_shares_its_tokenizer(store, monkeypatch):
    small = advise(store, monkeypatch, method="draft", target="smollm2-135m-instruct")
    assert "draft" not in small["suggested_params"]  # qwen2.5-coder-0.5b-instruct is larger, another tokenizer
    assert any("no built-in draft is smaller than smollm2-135m-instruct and shares its tokenizer" in r
               for r in small["reasons"])
    assert "draft" not in advise(store, monkeypatch, method="draft", target="qwen2.5-coder-0.5b-instruct")[
        "suggested_params"]  # the smallest of its family here
    assert advise(store, monkeypatch, method="draft", target="Qwen/Qwen2.5-7B-Instruct")["suggested_params"][
        "draft"] == "qwen2.5-coder-1.5b-instruct"  # same family, smaller
    assert "draft" not in advise(store, monkeypatch, method="draft", target="meta-llama/Llama-3.1-70B")[
        "suggested_params"]  # unknown family: no built-in draft is claimed to fit


def test_the_saved_target_is_used_when_none_is_given(store, monkeypatch):
    assert advise(store, monkeypatch, method="lookahead")["target_source"] == "built-in default"
    store.save_params("draft", {"target": "smollm2-135m-instruct", "k": 4})
    store.save_answer("default_method", "draft")
    out = advise(store, monkeypatch, method="lookahead")  # nothing saved for lookahead: the default method's
    assert (out["target"], out["target_source"]) == ("smollm2-135m-instruct", "saved in memory")
    assert out["next_step"] == {"tool": "measure_cost_curve", "input": {"target": "smollm2-135m-instruct"},
                                "why": "size W/N/G to this machine"}
    assert advise(store, monkeypatch, method="draft", target="qwen2.5-coder-1.5b-instruct")["target_source"] == "given"
    dtype = guidance.run_dtype(store, "lookahead", CPU)
    store.save_cost_curve("smollm2-135m-instruct", CPU["name"], DESIGN_CPU_CURVE, dtype=dtype,
                          measured_at="2026-01-01T00:00:00", kernels=cpu_gemm.expected_kernels("cpu", dtype))
    sized = advise(store, monkeypatch, method="lookahead")
    assert sized["source"].startswith("sized to the cost curve") and "next_step" not in sized


def test_draft_guidance_drafts_on_llamacpp_as_runs_would(store, monkeypatch):
    """With both drafts' costs stored (one token and a prompt read for its last row), guidance sizes the draft as
    run does: on llama.cpp where its token is cheaper, with the prompt threshold from the two prompt costs."""
    dtype = guidance.run_dtype(store, "draft", CPU)
    target, draft = "qwen2.5-coder-1.5b-instruct", "qwen2.5-coder-0.5b-instruct"
    store.save_cost_curve(target, CPU["name"], DESIGN_CPU_CURVE, dtype=dtype,
                          kernels=cpu_gemm.expected_kernels("cpu", dtype))
    store.save_cost_curve(draft, CPU["name"], {1: 0.030, PROMPT_TOKENS: PROMPT_TOKENS * 0.49 / 256}, dtype="int8")
    store.save_cost_curve(draft, CPU["name"], {1: 0.021, PROMPT_TOKENS: PROMPT_TOKENS * 1.66 / 256}, dtype="gguf")
    sizing, _ = guidance.machine_sizing(store, "draft", target, CPU, draft=draft)
    t1 = one_token_time(DESIGN_CPU_CURVE)
    assert sizing.params["draft_quant"] == "gguf" and sizing.params["draft_cost"] == pytest.approx(0.021 / t1, abs=1e-3)
    # 9 ms saved a draft forward, 0.85 forwards a new token over a quarter of them, 4.57 ms more a prompt token: 0.42
    assert sizing.params["gguf_draft_until"] == pytest.approx(0.42, abs=0.01)
    store.save_params("draft", {"draft_quant": "int8"})  # a saved choice stands
    kept, _ = guidance.machine_sizing(store, "draft", target, CPU, draft=draft)
    assert kept.params["draft_cost"] == pytest.approx(0.030 / t1, abs=1e-3)


# ---------------------------------------------------------------------------- without a measured curve
@pytest.mark.parametrize("method", ["draft", "lookahead", "eagle", "ngram"])
def test_without_a_curve_only_the_parameters_a_curve_sizes_say_they_are_not_sized(store, monkeypatch, method):
    from tools.engine.params import PARAM_MODELS, SIZED_FIELDS

    out = advise(store, monkeypatch, method=method, measure=False)
    reasons = out["param_reasons"]
    assert set(reasons) == set(PARAM_MODELS[method].model_fields) & set(out["suggested_params"])
    for name, reason in reasons.items():
        if name in SIZED_FIELDS[method]:
            assert reason == guidance.UNSIZED_REASON
        else:  # never sized from a curve (a folder, a switch, a prior): the method's default, with what it does
            assert reason.startswith("default: the default") and "cost curve of the target" not in reason, name
    # the no-curve reason is said once: the source says why nothing was measured, not that again
    assert out["source"] == (f"not measured: measuring this machine's cost curve of {out['target']} was declined, so "
                             "these are the method's starting values")
    assert "no cost curve" not in out["source"] and not any("no cost curve" in r for r in out["reasons"])


def test_eagle_s_head_folder_and_switches_are_defaults_not_unsized(store, monkeypatch):
    out = advise(store, monkeypatch, method="eagle", measure=False)
    for name in ("eagle_heads", "trim", "eagle_lookup"):
        assert "not sized" not in out["param_reasons"][name] and out["param_reasons"][name].startswith("default: ")
    for name in ("depth", "topk", "tree_nodes", "pass_costs"):
        assert out["param_reasons"][name] == guidance.UNSIZED_REASON
    lookahead = advise(store, monkeypatch, method="lookahead", measure=False)["param_reasons"]
    assert "not sized" not in lookahead["pool_from_prompt"] and lookahead["window"] == guidance.UNSIZED_REASON


def test_on_a_gpu_without_a_curve_only_sizeable_parameters_say_no_curve_is_measured(store, monkeypatch):
    out = advise(store, monkeypatch, hardware=GPU, method="eagle")
    assert "measured here yet" in out["param_reasons"]["tree_nodes"]
    assert "measured here yet" not in out["param_reasons"]["eagle_heads"]
    assert "measured here yet" not in out["param_reasons"]["trim"]
    assert "no cost curve" not in out["source"]  # said by the sized parameters, not again in the source
    lookahead = advise(store, monkeypatch, hardware=GPU, method="lookahead")
    assert "no cost curve" not in lookahead["source"] and lookahead["next_step"]["tool"] == "measure_cost_curve"
    assert "measured here yet" in lookahead["param_reasons"]["window"]
    assert "measured here yet" not in lookahead["param_reasons"]["pool_from_prompt"]


def test_time_to_measure_is_not_promised_as_a_minute(store, monkeypatch):
    import importlib.util

    from tools.agent_tools.guidance import GuidanceInput

    # the fast group stands in for measure_machine (conftest): a fresh copy of the module has the real one
    spec = importlib.util.find_spec("tools.agent_tools.advice")
    work = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(work)
    said = []
    monkeypatch.setattr(work, "prepare", lambda *a, **k: (_ for _ in ()).throw(work.SpecpilotError("stop")))
    with pytest.raises(work.SpecpilotError):  # stops before loading anything: only its progress line is wanted
        work.measure_machine(SimpleNamespace(report=said.append, store=store), "lookahead", "my-model",
                             "transformers")
    assert said and guidance.MEASURE_TIME in said[0] and "a minute" not in said[0]  # not "a minute at most"
    description = GuidanceInput.model_json_schema()["properties"]["measure"]["description"]
    assert "a few minutes on a small CPU" in description and "a minute" not in description
