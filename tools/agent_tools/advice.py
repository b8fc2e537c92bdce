"""The work behind the guidance and measure_cost_curve tools (tools.agent_tools.guidance registers them
and holds their input models): parameter guidance for each method, tailored to the model size and the
hardware, and always marked as advice to be measured.

Starting values are the parameter models' defaults (tools.engine.params.PARAM_MODELS), which follow the
sources: draft 5-10x smaller than the target; Medusa posterior threshold 0.09 and alpha 0.3;
lookahead W=15, N=5, G=5 (shaped for a GPU). Lookahead's W/N/G and drafts, draft's K and K_max and
prompt lookup's draft sizes are sized with the function run and compare use (tools.bench.sizing.size_params,
nothing given or saved), to the cost curve stored for this machine in the dtype a run would load the
target in (else, on a CPU, to the conservative CPU curve run and compare use until one is measured; on a
GPU, the defaults), each parameter with its reason: guidance, onboarding and a run cannot offer
different values. (Medusa's tree is sized by the run from the heads' own tree, which guidance does not
load.) When the store holds measured runs of the method on the same target (a sweep), the best measured
settings are reported with their run ids.
"""

from __future__ import annotations

import json
import re
import statistics

from memory.migrations import LEGACY_COST_CURVE_KEY
from tools.engine import cpu_gemm, quantize
from tools.engine.cost_curve import flat_tokens, forward_cost_curve
from tools.engine.gguf_requant import FAST_DTYPE
from tools.engine.medusa_trees import DEFAULT_TREE_CPU, DEFAULT_TREE_GPU, TREES
from tools.engine.params import PARAM_MODELS, SIZED_FIELDS
from tools.bench.machine_cost import MachineCost, prompt_threshold
from tools.bench.context import check_backend, load_cached, prepare, release_models, sized_params
from tools.bench.inputs import MeasureOptions
from tools.bench.protocol import hardware_info
from tools.bench.sizing import Sizing, remembered_machine, size_params
from tools import models
from tools.errors import ParameterError, SpecpilotError
from tools.agent_tools.saved_params import resolve_target, saved_target  # noqa: F401  (imported from here too)

LLAMACPP_DTYPE = "gguf"  # the dtype llama.cpp runs and cost curves are stored under (tools.engine.llamacpp)

# how long measuring a cost curve takes, for the progress line and the answers that offer it: loading the target is
# most of it, and that is minutes for the 1.5B default target on a small CPU (no fixed figure: machines differ)
MEASURE_TIME = "loads the model; a few minutes on a small CPU, less on a fast one"
# a parameter a measured cost curve would size, kept at the method's starting value because none is measured here
# (why none is measured is said once, in the answer's source)
UNSIZED_REASON = "default: not sized, no cost curve of the target is measured on this machine"
ADVICE_NOTE = ("advice to be measured, not a measured result: run the method with these settings on your own "
               "prompts and compare the stored speedups before relying on them")
DRAFT_RATIO = (5, 10)  # draft 5-10x smaller than the target
COST_CURVE_KEY = LEGACY_COST_CURVE_KEY  # old answer key; curves are now rows of the cost_curves table
SIZE_IN_NAME = re.compile(r"(\d+(?:\.\d+)?)\s*([bm])(?![a-z])", re.IGNORECASE)


def size_from_name(ref: str) -> float | None:
    """Billions of parameters named in a model reference ('...-1.5b-...' -> 1.5, '135m' -> 0.135), or None."""
    found = SIZE_IN_NAME.findall(ref.rsplit("/", 1)[-1])
    if not found:
        return None
    number, unit = found[-1]
    return float(number) / (1000.0 if unit.lower() == "m" else 1.0)


def detect_hardware(choice: str) -> dict:
    """The hardware to advise for: {'kind': cpu|gpu, 'name', 'gpu_memory_gb'?}."""
    import torch

    has_gpu = torch.cuda.is_available()
    if choice == "gpu" or (choice == "auto" and has_gpu):
        if not has_gpu:
            return {"kind": "gpu", "name": "a GPU (none detected on this machine)"}
        props = torch.cuda.get_device_properties(0)
        return {"kind": "gpu", "name": props.name, "gpu_memory_gb": round(props.total_memory / 2**30, 1),
                "gpu_count": torch.cuda.device_count()}
    return {"kind": "cpu", "name": hardware_info("cpu")["name"]}


def measured_sweep(store, method: str, target: str) -> list[dict]:
    """Stored runs of ``method`` on ``target`` grouped by parameters, best median speedup first."""
    groups: dict[str, list[dict]] = {}
    for run in store.find_runs(method=method, target=target):
        if run.get("speedup") is None:
            continue
        groups.setdefault(json.dumps(run.get("params") or {}, sort_keys=True), []).append(run)
    rows = []
    for key, runs in groups.items():
        rows.append({"params": json.loads(key), "median_speedup": statistics.median(r["speedup"] for r in runs),
                     "runs": len(runs), "run_ids": [r["run_id"] for r in runs[:5]],
                     "hardware": sorted({str((r.get("hardware") or {}).get("name")) for r in runs})})
    return sorted(rows, key=lambda r: r["median_speedup"], reverse=True)


def stored_cost_curve(store, target: str, hardware_name: str) -> dict | None:
    """The newest cost curve measured on this hardware for ``target`` (saved by measure_cost_curve), or
    None: ``{"curve": {tokens: seconds}, "dtype", "measured_at", "hardware", "target"}``."""
    return store.get_cost_curve(target, hardware_name)


def _defaults(method: str) -> dict:
    return PARAM_MODELS[method]().model_dump()


def draft_advice(store, size_b: float | None, hw: dict, target: str, backend: str = "transformers",
                 unsized: bool = False) -> tuple[dict, list[str], str, Sizing]:
    """``unsized``: no cost curve is measured here, so the method's starting values are offered (and the
    reasons name those, not the sizes a stand-in curve would give)."""
    draft = models.builtin_draft_for(target, size_b)
    sizing, stored = machine_sizing(store, "draft", target, hw, draft, backend)
    params = {**({"draft": draft} if draft else {}), **(_defaults("draft") if unsized else sizing.params)}
    reasons = []
    if size_b:
        low, high = size_b / DRAFT_RATIO[1], size_b / DRAFT_RATIO[0]
        reasons.append(f"pick a draft 5-10x smaller than the {size_b:g}B target, i.e. about {low:.2g}B-{high:.2g}B "
                       "parameters, from the same family (the same tokenizer and vocabulary is required)")
    else:
        reasons.append("pick a same-family draft 5-10x smaller than the target (same tokenizer and vocabulary)")
    draft_size = size_from_name(draft) if draft else None
    if draft and size_b and draft_size:
        reasons.append(f"the built-in draft {draft} is {size_b / draft_size:.0f}x smaller and shares the target's "
                       "tokenizer; its acceptance and speedup must be measured")
    elif draft:
        reasons.append(f"the built-in draft {draft} is smaller and shares the target's tokenizer")
    else:
        reasons.append(f"no built-in draft is smaller than {target} and shares its tokenizer: give your own draft "
                       "(--draft REF, a smaller model of the same family), or use a method without a draft "
                       "(lookahead, ngram)")
    reasons.append(f"start at k={params['k']} drafted tokens per step, let it adapt (adaptive_k, up to "
                   f"{params['k_max']}) and stop a draft early when the draft's top probability is below "
                   f"{params['draft_confidence']}: long drafts pay when acceptance is high, the early stop limits "
                   "the waste when it is not")
    if hw["kind"] == "cpu" and backend == "transformers":
        reasons.append("on a CPU a target pass over a handful of tokens costs about as much as over one, but the "
                       "draft's own passes are not free: a cheaper draft matters more than a larger k (the draft "
                       "runs as an int8 copy, or from its GGUF file on llama.cpp where that is faster, by default "
                       "here; the output is unchanged)")
    source = (f"k and k_max sized as run and compare size them, {sized_to(stored, hw)}; the rest: source defaults "
              "(Leviathan et al. 2022; Chen et al. 2023)")
    return params, reasons + sizing.lines(), source, sizing


def medusa_advice(hw: dict) -> tuple[dict, list[str], str, None]:
    params = {k: v for k, v in _defaults("medusa").items() if k != "pass_costs"}  # the sizing sets them in a run
    tree = DEFAULT_TREE_GPU if hw["kind"] == "gpu" else DEFAULT_TREE_CPU
    params["tree"] = tree
    reasons = [f"posterior_threshold={params['posterior_threshold']} and posterior_alpha="
               f"{params['posterior_alpha']} are the Medusa reference defaults; they matter only when sampling "
               "(temperature > 0), where typical acceptance is lossy",
               f"tree {tree} ({len(TREES[tree]) + 1} tokens per step): "
               + ("a large tree suits a GPU, where verifying 64 tokens costs about one pass" if hw["kind"] == "gpu"
                  else "a small tree, because on a CPU a pass over many more tokens is no longer nearly free"),
               "Medusa needs heads trained for this exact target: train_medusa does it (asks for approval first)",
               "run and compare cut the heads' own fitted tree to this machine's cost curve and add its pass costs "
               "(a step is plain while tree steps do not pay)",
               f"medusa_lookup={params['medusa_lookup']}: prompt lookup's draft (what followed the text's last tokens "
               "earlier in it) joins the tree as one more path, cut to what pays for the longer pass; it helps most "
               "where the answer copies its prompt (summaries, RAG, extraction); 0 turns it off"]
    return params, reasons, "source defaults (Medusa, arXiv 2401.10774, reference implementation)", None


def eagle_advice(store, target: str, hw: dict) -> tuple[dict, list[str], str, Sizing]:
    """The draft tree sized as run and compare size it (depth, top-k, nodes from the cost curve)."""
    sizing, stored = machine_sizing(store, "eagle", target, hw)
    reasons = ["EAGLE drafts with a one-layer head over the target's own features (EAGLE, arXiv 2401.15077) and "
               "grows the draft tree by the head's confidence (EAGLE-2, arXiv 2406.16858)",
               "it needs a head trained for this exact target: `specpilot eagle train` trains one (asks for approval "
               "first), --eagle-heads DIR reads an upstream EAGLE-1/EAGLE-2 checkpoint; the default target ships one",
               *sizing.lines()]
    return sizing.params, reasons, f"tree sized as run and compare size it, {sized_to(stored, hw)}", sizing


def run_dtype(store, method: str, hw: dict) -> str:
    """The dtype a run of ``method`` would load the target in here: the one saved for the method, else
    what ``--dtype auto`` picks on this hardware (run and compare read the cost curve of that dtype)."""
    saved = str((store.get_params(method) or {}).get("dtype") or "auto")
    if saved != "auto":
        return saved
    dtype, _ = models.resolve_dtype("auto", "cuda" if hw["kind"] == "gpu" else "cpu")
    return str(dtype).replace("torch.", "")


def machine_sizing(store, method: str, target: str, hw: dict, draft: str | None = None,
                   backend: str = "transformers") -> tuple[Sizing, dict | None]:
    """``method``'s parameters sized as run and compare size them (tools.bench.sizing.size_params, nothing
    given or saved), from the cost curve memory holds for ``target`` on this hardware in the dtype a run
    would use (else, on a CPU, the conservative curve run and compare use until one is measured; on a GPU
    without a curve, the defaults), and a ``draft`` token's stored cost. Returns the sizing and the
    stored curve (None when none). On llama.cpp the curves are the GGUF files' own (dtype ``gguf``)."""
    dtype = LLAMACPP_DTYPE if backend == "llamacpp" else run_dtype(store, method, hw)
    d_dtype = (LLAMACPP_DTYPE if backend == "llamacpp" else draft_dtype(store, hw, dtype)) if draft else None
    machine, stored = remembered_machine(store, target, hw["kind"], hw["name"], dtype, draft, d_dtype)
    machine.backend = backend  # the notes then name the engine's own measuring command
    if draft and backend == "transformers" and hw["kind"] == "cpu":
        remembered_gguf_draft(store, machine, target, hw, dtype, draft)
    return size_params(method, machine), stored


def remembered_gguf_draft(store, machine, target: str, hw: dict, dtype: str, draft: str) -> None:
    """As run sizes a draft on a CPU (tools.bench.machine_cost.prefer_gguf): its GGUF file on llama.cpp where that
    token's stored cost is below the int8 copy's (or draft_quant gguf is saved)."""
    quant = str((store.get_params("draft") or {}).get("draft_quant") or "auto")
    if quant not in ("auto", "gguf"):
        return
    for stored in (FAST_DTYPE, LLAMACPP_DTYPE):  # a built-in draft runs from its Q4_0 copy (tools.engine.gguf_requant)
        gguf, _ = remembered_machine(store, target, hw["kind"], hw["name"], dtype, draft, stored)
        if gguf.draft_ratio is not None:
            break
    if gguf.draft_ratio is None or (quant == "auto" and machine.draft_ratio is not None
                                    and machine.draft_ratio <= gguf.draft_ratio):
        return
    than = f", less than {machine.draft_source}" if machine.draft_source else ""
    machine.draft_quant = ("gguf", f"the draft's GGUF file on llama.cpp ({gguf.draft_source}{than})")
    if quant == "auto" and machine.draft_ratio is not None:
        curves = [store.get_cost_curve(draft, hw["name"], d, kernels=None) for d in (stored, "int8")]
        if all(curves):
            machine.gguf_until = prompt_threshold(curves[0]["curve"], curves[1]["curve"])
    machine.draft_ratio, machine.draft_source = gguf.draft_ratio, gguf.draft_source


def draft_dtype(store, hw: dict, dtype: str) -> str:
    """The dtype a draft token's cost is stored under: int8 where runs draft with the int8 copy (the CPU
    default), else the run's dtype."""
    quant = str((store.get_params("draft") or {}).get("draft_quant") or "auto")
    try:
        int8 = quantize.resolve(quant, "cuda" if hw["kind"] == "gpu" else "cpu") == "int8"
    except ParameterError:
        int8 = False
    return "int8" if int8 else dtype


def sized_to(stored: dict | None, hw: dict) -> str:
    """What the sizes came from, in words."""
    if stored is not None:
        return f"to the cost curve measured on this machine ({stored['measured_at']}, {stored['dtype']})"
    if hw["kind"] == "cpu":
        return "to a conservative CPU curve (no cost curve of the target is stored for this machine yet)"
    # that no curve is stored is each sized parameter's reason (tools.bench.sizing.default_reason): here what to do
    return "not at all here: the defaults, shaped for a GPU, until measure_cost_curve measures this GPU's curve"


def lookahead_advice(store, target: str, hw: dict, backend: str = "transformers",
                     unsized: bool = False) -> tuple[dict, list[str], str, Sizing]:
    """``unsized``: no cost curve is measured here and the method's starting values are offered, so no reason
    says the sizes come from the conservative curve (the answer's source says why nothing is sized)."""
    sizing, stored = machine_sizing(store, "lookahead", target, hw, backend=backend)
    reasons = sizing.lines()
    if stored is not None:
        return sizing.params, reasons, (f"sized to the cost curve measured on this machine ({stored['measured_at']}, "
                                        f"{stored['dtype']}), as run and compare size it"), sizing
    if backend == "llamacpp":
        reasons.append(f"no llama.cpp cost curve of {target} is stored for this machine: `specpilot guide lookahead "
                       "--backend llamacpp --measure` measures it (a pass over several tokens costs far more than one "
                       "on llama.cpp's CPU kernels, so the sizes shrink)")
        return sizing.params, reasons, "sized to a conservative CPU curve, as run and compare size it", sizing
    dtype = run_dtype(store, "lookahead", hw)
    other = stored_cost_curve(store, target, hw["name"])
    if other is not None:
        reasons.append(f"a cost curve of {target} in {other['dtype']} is stored, but runs here load it in {dtype}: "
                       f"measure the curve in {dtype} (measure_cost_curve) to size to it")
    if hw["kind"] == "cpu":
        if not unsized:
            reasons.append(f"no cost curve of {target} is stored for this machine: the sizes come from a conservative "
                           "CPU curve, the one run and compare use until this machine's is measured "
                           f"(measure_cost_curve: {MEASURE_TIME})")
        return sizing.params, reasons, "sized to a conservative CPU curve, as run and compare size it", sizing
    # no curve: each sized parameter's reason says so, and next_step measures it (guidance): not said again here
    return sizing.params, reasons, ("the source's default starting point, shaped for a GPU (Lookahead Decoding, "
                                    "arXiv 2402.02057)"), sizing


def ngram_advice(store, target: str, hw: dict, backend: str = "transformers") -> tuple[dict, list[str], str, Sizing]:
    sizing, stored = machine_sizing(store, "ngram", target, hw, backend=backend)
    return sizing.params, ["prompt lookup copies continuations of n-grams found in the prompt: it pays off when "
                           "the output repeats the input (code edits, summaries, extraction) and costs little "
                           "otherwise",
                           "num_candidates verifies several continuations of the same n-gram in one pass (a token "
                           "tree): nearly free where a pass over ~30 tokens costs little more than one; set it to 1 "
                           "for a single draft as transformers does", *sizing.lines()], \
        (f"draft lengths and counts sized as run and compare size them, {sized_to(stored, hw)}; the rest: "
         "specpilot's defaults (3-gram matches; transformers uses 2-grams, 10-token drafts, 1 draft)"), sizing


# the methods whose sizes come from this machine's cost curve (Medusa's tree is fitted to its heads instead)
SIZED_BY_CURVE = ("draft", "lookahead", "ngram", "eagle")


def curve_missing(store, method: str, target: str, hw: dict, backend: str) -> bool:
    """Whether advice for ``method`` would have no measured cost curve of ``target`` on this machine to size to."""
    if method not in SIZED_BY_CURVE or hw["kind"] != "cpu" or backend != "transformers":
        return False
    _, stored = machine_sizing(store, method, target, hw, backend=backend)
    return stored is None


def measure_machine(ctx, method: str, target: str, backend: str) -> None:
    """Measure and store what ``method``'s sizing reads, as a run does before its first step: the target's cost
    curve (and the draft's token cost for the draft model). Loads the models, then frees them."""
    ctx.report(f"no cost curve of {target} is stored for this machine: measuring it first ({MEASURE_TIME}), so "
               "the advice is sized to this machine")
    prepared = prepare(MeasureOptions(target=target, backend=backend), [method], None, ctx.report)
    try:
        sized_params([method], {}, ctx.store, prepared.ctx, allow_measure=True, progress=ctx.report)
    finally:
        release_models()


def guidance(inp, ctx) -> dict:
    """The guidance tool's answer for ``inp`` (a tools.agent_tools.guidance.GuidanceInput)."""
    check_backend(inp.method, inp.backend)  # Medusa and EAGLE need hidden states llama.cpp does not give
    target, target_source = resolve_target(ctx.store, inp.method, inp.target)
    size_b = inp.target_size_b or size_from_name(target)
    hw = detect_hardware("cpu" if inp.backend == "llamacpp" else inp.hardware)
    measured_now, not_measured = False, None
    if curve_missing(ctx.store, inp.method, target, hw, inp.backend):
        curve = f"this machine's cost curve of {target}"
        not_measured = f"measuring {curve} was declined"
        if inp.measure:
            try:
                measure_machine(ctx, inp.method, target, inp.backend)
                if curve_missing(ctx.store, inp.method, target, hw, inp.backend):  # timings too disturbed to keep
                    not_measured = f"measuring {curve} gave none that could be stored (the machine looked busy)"
                else:
                    measured_now, not_measured = True, None
            except SpecpilotError as exc:  # the model is not here, say: advise without pretending to have measured
                not_measured = f"{curve} could not be measured ({exc})"
    unsized = not_measured is not None
    if inp.method == "draft":
        params, reasons, source, sizing = draft_advice(ctx.store, size_b, hw, target, inp.backend, unsized)
    elif inp.method == "medusa":
        params, reasons, source, sizing = medusa_advice(hw)
    elif inp.method == "lookahead":
        params, reasons, source, sizing = lookahead_advice(ctx.store, target, hw, inp.backend, unsized)
    elif inp.method == "eagle":
        params, reasons, source, sizing = eagle_advice(ctx.store, target, hw)
    else:
        params, reasons, source, sizing = ngram_advice(ctx.store, target, hw, inp.backend)
    if size_b and hw.get("gpu_memory_gb") and 2 * size_b > 0.8 * hw["gpu_memory_gb"] * hw.get("gpu_count", 1):
        reasons.append(f"a {size_b:g}B model needs about {2 * size_b:.0f} GB in bfloat16: use device_map='auto' to "
                       "spread it over the GPUs (and CPU)")
    out = {"method": inp.method, "target": target, "target_source": target_source, "target_size_b": size_b,
           "hardware": hw, "backend": inp.backend, "suggested_params": params, "reasons": reasons, "source": source, "advice": ADVICE_NOTE}
    if sizing is not None:  # each parameter's source (sized, default) and reason, as a run records them
        out["param_reasons"] = sizing.reasons()
        if sizing.expected and not not_measured:
            out["expected"] = sizing.expected
    if measured_now:
        out["measured_now"] = "this machine's cost curve was measured for this advice and stored"
    elif not_measured:
        sized_lines = set(sizing.lines()) if sizing is not None else set()
        out["reasons"] = [r for r in reasons if r not in sized_lines]  # the sizes below are not this machine's
        defaults = _defaults(inp.method)
        out["suggested_params"] = {k: defaults.get(k, v) for k, v in params.items()}
        out["param_reasons"] = unsized_reasons(inp.method, out["suggested_params"], sizing)
        # the no-curve reason is each sized parameter's (param_reasons): the source says why none is measured, once
        out["source"] = f"not measured: {not_measured}, so these are the method's starting values"
        out["next_step"] = {"tool": "measure_cost_curve", "input": {"target": target},
                            "why": "size the parameters to this machine"}
    if inp.method == "lookahead" and inp.backend == "transformers" and not source.startswith("sized to the cost curve measured"):
        out["next_step"] = {"tool": "measure_cost_curve", "input": {"target": target},
                            "why": "size W/N/G to this machine"}
    out.update(measured_summary(measured_sweep(ctx.store, inp.method, target)))
    return out


def unsized_reasons(method: str, params: dict, sizing: Sizing | None) -> dict[str, str]:
    """Each offered parameter's reason when no cost curve of the target is measured here: the ones a cost curve
    sizes (SIZED_FIELDS, and any the stand-in sizing set) are not sized for want of one; the others are the
    method's defaults whatever the curve, with what they do (as a run records them)."""
    recorded = sizing.reasons() if sizing is not None else {}
    by_curve = set(SIZED_FIELDS.get(method, ())) | {k for k, p in (sizing.fields if sizing else {}).items()
                                                    if p.source == "sized"}
    defaults = _defaults(method)
    return {k: UNSIZED_REASON if k in by_curve else recorded.get(k, "default: the method's default")
            for k in params if k in defaults}


def measured_summary(sweep: list[dict]) -> dict:
    """The ``measured`` rows and the ``measured_best`` sentence of a guidance answer."""
    if not sweep:
        return {"measured_best": "no stored runs of this method on this target: the suggestion is not measured yet"}
    best = sweep[0]
    sentence = (f"measured here: {json.dumps(best['params'], sort_keys=True)} gave a median speedup "
                f"of {best['median_speedup']:.2f}x over {best['runs']} run(s) (run ids {', '.join(best['run_ids'])})")
    if len(sweep) == 1:
        sentence += "; only one setting was measured, so this is not a sweep"
    return {"measured": sweep[:5], "measured_best": sentence}


def measure_cost_curve(inp, ctx) -> dict:
    """The measure_cost_curve tool's work for ``inp`` (a tools.agent_tools.guidance.CostCurveInput)."""
    target, _ = resolve_target(ctx.store, None, inp.target)
    ctx.report(f"loading {target}")
    loaded = load_cached(target, inp.dtype, None)  # the model as runs load it (on a CPU: oneDNN layers, cpu_gemm)
    ctx.report("timing forward passes")
    curve = forward_cost_curve(loaded.model, repeats=inp.repeats)
    hw_kind = "gpu" if loaded.device.startswith("cuda") else "cpu"
    hw_name = detect_hardware(hw_kind)["name"]
    ctx.store.save_cost_curve(target, hw_name, curve, dtype=loaded.dtype, kernels=cpu_gemm.kernels(loaded.model))
    sizing = size_params("lookahead", MachineCost(hw_kind, hw_name, curve, f"the cost curve of {target} in "
                                                  f"{loaded.dtype} measured now"))
    return {"target": target, "hardware": hw_name, "dtype": loaded.dtype,
            "curve_ms": {n: round(t * 1000, 2) for n, t in curve.items()}, "flat_tokens": flat_tokens(curve),
            "suggested_lookahead": sizing.params, "reasoning": "; ".join(sizing.lines()),
            "source": "measured now on this machine and stored"}
