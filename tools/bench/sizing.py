"""Every method's parameters sized to this machine, each with its source and a one-line reason.

The defaults in tools.engine.params are shaped for fast hardware: lookahead's W=15, N=5, G=5 with two
prompt-lookup drafts puts 91 tokens in every forward pass, prompt lookup verifies up to 31 draft
tokens, Medusa's GPU tree 64. On a CPU the target's forward time grows once a pass holds more than
a handful of tokens (DESIGN.md, "CPU physics"), so those sizes can make a method slower than plain
generation. Here each method's sizes come from this machine's forward-pass cost curve
(tools.engine.cost_curve), read from memory or measured once (tools.bench.machine_cost). Every
speculative step verifies at least 2 tokens, so the "near-flat part" is measured from the 2-token pass
(``step_curve``): on an AVX2-only CPU in float32 the one-token pass has a fast path and 2 tokens
already cost about 2x, after which more tokens are cheap again.

- lookahead: W, N, G whose step fits the near-flat part (``suggest_lookahead_params``) and one prompt-lookup
  draft beside it, cut each step to the length that pays;
- medusa: the tree cut to the tokens that fit there (the heads' fitted tree, else upstream's tree,
  whose choices are ordered by usefulness, so every prefix is a tree of the most useful nodes);
- draft: K_max and the starting K that maximise the expected tokens per unit of target time
  (``expected_speedup``: acceptance, a draft token's cost, the verification's cost from the curve);
- ngram: the draft tokens per step that fit the near-flat part, and the drafts and their lengths.

Precedence, field by field: given (the caller) > memory (saved for the method) > sized > default.
A field the sizing leaves alone keeps its default. On a CPU with no curve and no permission to
measure (or whose measurement was disturbed by other jobs), the sizes come from
``tools.bench.machine_cost.CPU_FALLBACK_CURVE``, a curve measured on a slow CPU, never from the
GPU-shaped defaults; a GPU without a curve keeps the defaults, which are shaped for it.

Every path sizes through ``size_params``: run and compare (tools.bench.context), bench (which uses
``fixed_params`` to find its stored runs before loading a model when nothing is left to size), tune's
sweep centre, and guidance and onboarding, which size from what memory holds without loading or
measuring anything (``remembered_machine``), so none of them can offer values a run would not use.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from memory.machine import ANY_KERNELS
from tools.bench.machine_cost import (CPU_FALLBACK_CURVE, CPU_FALLBACK_DRAFT_RATIO, MachineCost, one_token_time,
                                      relative_cost)
from tools.engine import cpu_gemm
from tools.engine.cost_curve import FLAT_BUDGET, flat_tokens, monotone, suggest_lookahead_params
from tools.engine.medusa_trees import AUTO, MC_SIM_7B_63, TREES, cut_to_depth
from tools.engine.gate import MIN_DRAFT_GAIN
from tools.engine.params import (DRAFT_ACCEPTANCE_PRIOR, MAX_CANDIDATE_TOKENS, PARAM_MODELS, SIZED_FIELDS, DraftParams,
                                 EagleParams, LookaheadParams, PromptLookupParams, parse_params, shown_value)
from tools.errors import ParameterError

SOURCES = ("given", "memory", "sized", "default")

DRAFT_ACCEPTANCE = DRAFT_ACCEPTANCE_PRIOR  # per-token acceptance assumed for the starting K (benchmarks/scripts/draft.py: 73-77%)
DRAFT_ACCEPTANCE_HIGH = 0.95  # ... and for K_max, where adaptive K grows after fully accepted drafts
STEEP_TOKENS = 4  # a curve flat to fewer tokens than this gets a note: was the machine busy when it was measured?
STEP_NOTE_RATIO = 1.5  # a 2-token pass dearer than this many one-token passes gets a note


@dataclass
class SizedParam:
    """One parameter's value, where it came from (given, memory, sized, default) and why."""

    value: Any
    source: str
    reason: str


@dataclass
class Sizing:
    """A method's parameters with each one's source and reason (``lines`` prints them)."""

    method: str
    fields: dict[str, SizedParam]
    machine: str = ""  # the curve behind the sized values, in words
    notes: list[str] = field(default_factory=list)
    expected: dict | None = None  # draft: the speedup the sized K and K_max should give here (expected_range)

    @property
    def params(self) -> dict:
        return {name: p.value for name, p in self.fields.items()}

    @property
    def source(self) -> str:
        """The strongest source among the fields: given > memory > sized > default."""
        found = {p.source for p in self.fields.values()}
        return next((s for s in SOURCES if s in found), "default")

    def reasons(self) -> dict[str, str]:
        """{parameter: "source: reason"}, as a run record stores it, and under ``cost_curve`` the curve
        the sized values came from (with any note) when some were sized."""
        out = {name: f"{p.source}: {p.reason}" for name, p in self.fields.items()}
        if self.machine or self.notes:
            out["cost_curve"] = "; ".join(([f"sized from {self.machine}"] if self.machine else []) + self.notes)
        return out

    def lines(self) -> list[str]:
        """One printable line per parameter, then the curve the sizes came from."""
        out = [f"{name}={shown_value(p.value)} ({p.source}): {p.reason}" for name, p in self.fields.items()]
        return out + ([f"sized from {self.machine}"] if self.machine else []) + self.notes

    def to_dict(self) -> dict:
        fields = {n: {"value": p.value, "source": p.source, "reason": p.reason} for n, p in self.fields.items()}
        return {"method": self.method, "source": self.source, "params": self.params, "machine": self.machine,
                "fields": fields, "notes": list(self.notes)}


# ---------------------------------------------------------------------------- the curve in words
def step_curve(curve: dict[int, float]) -> dict[int, float]:
    """The curve as a speculative step pays it: every step verifies at least 2 tokens, so the 1-token
    point takes the 2-token time. Where a CPU's one-token pass has a fast path of its own (float32 on
    an AVX2-only CPU: 2 tokens cost about 2x one), the near-flat part is then measured from the
    2-token pass that every step pays anyway, not from the one-token pass no step uses."""
    mono = monotone(curve)
    t2 = relative_cost(curve, 2) * one_token_time(curve)
    return {1: t2, **{n: max(t, t2) for n, t in mono.items() if n > 1}}


def step_tokens(curve: dict[int, float]) -> int:
    """Most tokens per step whose pass stays within ``FLAT_BUDGET`` x a 2-token pass (cost_curve.flat_tokens
    of :func:`step_curve`)."""
    return flat_tokens(step_curve(curve))


def _flat(curve: dict[int, float]) -> tuple[int, str]:
    tokens = step_tokens(curve)
    text = f"a pass over up to {tokens} tokens costs at most {FLAT_BUDGET:.2f}x a 2-token pass"
    two = relative_cost(curve, 2)
    if two > STEP_NOTE_RATIO:
        return tokens, f"{text} (which already costs {two:.1f}x a {one_token_time(curve) * 1000:.0f} ms one-token pass)"
    return tokens, f"{text} ({one_token_time(curve) * two * 1000:.0f} ms)"


def pass_costs(curve: dict[int, float], tokens: int) -> list[float]:
    """The cost gates' ``pass_costs``: a pass over 1..``tokens`` tokens relative to one token, from the curve."""
    return [round(relative_cost(curve, n), 3) for n in range(1, tokens + 1)]


# ---------------------------------------------------------------------------- per method
def size_lookahead(machine: MachineCost, fixed: dict, **_) -> dict[str, tuple[Any, str]]:
    """W, N, G from the curve (cost_curve.suggest_lookahead_params, which leaves room for a prompt-lookup draft
    where 21 tokens fit) and one prompt-lookup draft, cut each step to what pays (the sized pass costs price it)."""
    best, _ = suggest_lookahead_params(step_curve(machine.curve))
    sized = {"window": best.window, "ngram": best.ngram, "guess": best.guess, "prompt_lookup": 1}
    if "window" in fixed and "guess" not in fixed:
        sized["guess"] = max(1, int(fixed["window"]) // 2)
    merged = LookaheadParams(**{**sized, **{k: v for k, v in fixed.items() if k in LookaheadParams.model_fields}})
    tokens, flat = _flat(machine.curve)
    window = merged.tokens_per_step - merged.lookup_tokens
    why = f"{flat}; this step holds {window} tokens (about {relative_cost(machine.curve, window):.2f}x a one-token pass)"
    lookup = ("one prompt-lookup draft of up to 10 tokens, cut each step to the length whose expected tokens pay for "
              f"the longer pass ({tokens} tokens fit here)")
    step = merged.tokens_per_step
    return {
        "window": (sized["window"], f"the widest window W that fits: {why}"),
        "ngram": (sized["ngram"], f"the longest n-gram N (at most 5, the paper's) whose window fits: {why}"),
        "guess": (sized["guess"], "G = W // 2 pool n-grams verified per step (at least 1)"),
        "prompt_lookup": (sized["prompt_lookup"], lookup),
        "pass_costs": (pass_costs(machine.curve, step),
                       f"this machine's pass costs over 1..{step} tokens: a step is plain while the recent full steps "
                       "gave fewer tokens than their passes cost (a full step again after 16, waits doubling to 64); "
                       "a plain step verifies the prompt-lookup draft alone where it pays"),
    }


def _medusa_base(heads_tree: list[list[int]] | None) -> tuple[list[list[int]], str]:
    if heads_tree:
        return [list(c) for c in heads_tree], "the tree fitted to these heads"
    return [list(c) for c in MC_SIM_7B_63], "upstream's tree (mc_sim_7b_63, choices ordered by usefulness)"


def size_medusa(machine: MachineCost, fixed: dict, num_heads: int | None = None,
                heads_tree: list[list[int]] | None = None, **_) -> dict[str, tuple[Any, str]]:
    """The tree: a prefix of the heads' fitted tree (else of upstream's) holding the tokens that fit."""
    tokens, flat = _flat(machine.curve)
    base, what = _medusa_base(heads_tree)
    if num_heads:
        base = cut_to_depth(base, num_heads)
    nodes = max(1, min(len(base), tokens - 1))
    choices = base[:nodes]
    if heads_tree and nodes == len(base):
        value, named = AUTO, f"{what}, all {nodes} nodes"
    else:
        value = next((name for name, tree in TREES.items() if tree == choices), choices)
        named = f"{what} cut to its first {nodes} of {len(base)} nodes"
        named += f" ({value})" if isinstance(value, str) else ""
    return {"tree": (value, f"{named}: {nodes + 1} tokens per step; {flat}"),
            "pass_costs": tree_gate_costs(machine.curve, nodes + 1)}


def tree_gate_costs(curve: dict[int, float], tokens: int) -> tuple[list[float], str]:
    """Medusa's and EAGLE's ``pass_costs`` (a given larger tree's passes carry the curve's last slope on)."""
    return (pass_costs(curve, tokens),
            f"this machine's pass costs over 1..{tokens} tokens: a step is plain while the recent tree steps gave "
            "fewer tokens than their passes and the heads cost (a tree step again after 16, waits doubling to 64)")


def size_eagle(machine: MachineCost, fixed: dict, **_) -> dict[str, tuple[Any, str]]:
    """The verified tree: the drafted nodes that fit the near-flat part of the curve; the depth and the
    nodes expanded per depth no larger than that tree can use (EAGLE-2's defaults are GPU-sized:
    60 nodes, depth 6, top-10)."""
    tokens, flat = _flat(machine.curve)
    nodes = int(fixed.get("tree_nodes") or max(1, min(EagleParams().tree_nodes, tokens - 1)))
    depth = max(1, min(EagleParams().depth, nodes))
    topk = max(1, min(EagleParams().topk, nodes))
    return {"tree_nodes": (nodes, f"{nodes} drafted nodes + the root fit in one verification pass: {flat}"),
            "depth": (depth, f"the longest path a {nodes}-node tree can hold, at most {EagleParams().depth}"),
            "topk": (topk, f"nodes expanded per depth: at most {EagleParams().topk} and the tree's {nodes} nodes"),
            "pass_costs": tree_gate_costs(machine.curve, nodes + 1)}


def expected_speedup(k: int, acceptance: float, draft_ratio: float, curve: dict[int, float]) -> float:
    """Tokens per unit of target time of a K-token draft: (1 - a^(K+1)) / (1 - a) tokens per step
    (a: per-token acceptance), over K draft tokens at ``draft_ratio`` each plus one verification of
    K + 1 tokens (the curve's cost of K + 1 over one token)."""
    tokens = (1 - acceptance ** (k + 1)) / (1 - acceptance) if acceptance < 1 else k + 1.0
    return tokens / (k * draft_ratio + relative_cost(curve, k + 1))


def _best_k(acceptance: float, ratio: float, curve: dict[int, float], top: int) -> tuple[int, float]:
    """The K in 1..top with the most expected tokens per unit of target time (the longer on a tie)."""
    scores = {k: expected_speedup(k, acceptance, ratio, curve) for k in range(1, top + 1)}
    best = max(scores, key=lambda n: (round(scores[n], 3), n))
    return best, scores[best]


def size_draft(machine: MachineCost, fixed: dict, **_) -> dict[str, tuple[Any, str]]:
    """K_max and K from the expected tokens per unit of target time (``expected_speedup``): K_max the
    best draft length at ``DRAFT_ACCEPTANCE_HIGH`` (the confident stretches where adaptive K grows),
    K the best at ``DRAFT_ACCEPTANCE`` up to K_max, each at most 16 and never below a given K."""
    limit = next(m.le for m in DraftParams.model_fields["k"].metadata if hasattr(m, "le"))  # 16
    ratio = machine.draft_ratio if machine.draft_ratio is not None else CPU_FALLBACK_DRAFT_RATIO
    where = machine.draft_source or "assumed: not measured here"
    cost = f"a draft token costs {ratio:.2f} of a target token ({where}), verifying K + 1 tokens what the curve says"
    if fixed.get("k_max"):
        k_max, why_max = int(fixed["k_max"]), "as saved"
    else:
        k_max, gain = _best_k(DRAFT_ACCEPTANCE_HIGH, ratio, machine.curve, limit)
        why_max = (f"adaptive K grows up to the best length at {DRAFT_ACCEPTANCE_HIGH:.0%} acceptance "
                   f"(about {gain:.2f}x): {cost}")
    if "k" in fixed:
        k_max = max(k_max, int(fixed["k"]))
    k, gain = _best_k(DRAFT_ACCEPTANCE, ratio, machine.curve, k_max)
    why_k = f"the best starting length at {DRAFT_ACCEPTANCE:.0%} acceptance (about {gain:.2f}x): {cost}"
    if gain < MIN_DRAFT_GAIN:
        why_k += (f"; below {MIN_DRAFT_GAIN:g}x, so steps stay plain (the draft not run) unless this text's drafts "
                  "are accepted more than that")
    leaves = int(fixed.get("draft_tree", DraftParams().draft_tree))
    longest = k_max + 1 + leaves
    return {"k": (k, why_k), "k_max": (k_max, why_max),
            "pass_costs": (pass_costs(machine.curve, longest),
                           f"this machine's pass costs over 1..{longest} tokens: each step drafts the length the "
                           "expected acceptance pays for, none when a plain step is cheaper, and verifies beside the "
                           f"chain the draft's other likely tokens that the pass pays for ({leaves} at most; a pass "
                           f"over {min(longest, max(machine.curve))} tokens costs "
                           f"{relative_cost(machine.curve, min(longest, max(machine.curve))):.2f} of one here)"),
            "draft_cost": (round(ratio, 3), f"a draft token's cost in target tokens ({where})"),
            **({"draft_quant": machine.draft_quant} if machine.draft_quant else {}),
            **({"gguf_draft_until": machine.gguf_until} if machine.gguf_until else {})}


def size_ngram(machine: MachineCost, fixed: dict, **_) -> dict[str, tuple[Any, str]]:
    """Draft tokens per step: those that fit the near-flat part, split into drafts of up to 10 tokens."""
    tokens, flat = _flat(machine.curve)
    budget = int(fixed.get("max_draft_tokens") or max(1, min(MAX_CANDIDATE_TOKENS - 1, tokens - 1)))
    length = int(fixed.get("num_candidate_tokens") or min(PromptLookupParams().num_candidate_tokens, budget))
    longest = max(length, min(PromptLookupParams().max_candidate_tokens, budget))
    drafts = max(1, min(PromptLookupParams().num_candidates, budget // length))
    return {
        "max_draft_tokens": (budget, f"draft tokens verified per step (1 + {budget} fit the near-flat part): {flat}"),
        "num_candidate_tokens": (length, f"a draft's first length: at most 10 and the {budget} tokens per step"),
        "max_candidate_tokens": (longest, f"a fully accepted draft doubles up to {longest} tokens (at most 20 and "
                                          f"the {budget} per step)"),
        "num_candidates": (drafts, f"{drafts} draft(s) of {length} tokens fit the {budget} draft tokens per step "
                                   f"(at most 3)"),
        "pass_costs": (pass_costs(machine.curve, budget + 1),
                       f"this machine's pass costs over 1..{budget + 1} tokens: each step drafts only as many tokens "
                       f"as expected acceptance pays for (a pass over 2 tokens costs "
                       f"{relative_cost(machine.curve, 2):.2f}x one), none when a plain step is cheaper"),
    }


SIZERS = {"lookahead": size_lookahead, "medusa": size_medusa, "draft": size_draft, "ngram": size_ngram,
          "eagle": size_eagle}
# the fields each sizer sets (tests check them against SIZERS): a method whose every one of these is given or
# saved needs no machine to be sized (``fixed_params``)

# ---------------------------------------------------------------------------- precedence
def size_params(method: str, machine: MachineCost | None, given: dict | None = None, saved: dict | None = None,
                num_heads: int | None = None, heads_tree: list[list[int]] | None = None) -> Sizing:
    """``method``'s parameters: given > saved (memory) > sized to ``machine`` > default, field by field.

    Raises ParameterError for bad given or saved values. Sized values that would not validate with
    the given and saved ones fall back to the defaults (noted).
    """
    if method not in PARAM_MODELS:
        parse_params(method, {})  # raises, naming the methods
    fields = PARAM_MODELS[method].model_fields
    given = {k: v for k, v in (given or {}).items() if v is not None}
    saved = {k: v for k, v in (saved or {}).items() if k in fields and k not in given and v is not None}
    parse_params(method, given)  # bad given values fail here, naming the field
    notes = []
    try:
        parse_params(method, {**saved, **given})
        _check_draft(method, {**DraftParams().model_dump(), **saved, **given} if method == "draft" else {})
    except ParameterError as exc:
        if not given:
            raise
        notes.append(f"the saved {method} parameters do not fit the given ones ({exc}): saved ones ignored")
        saved = {}
    sized: dict[str, tuple[Any, str]] = {}
    sizer = SIZERS.get(method)
    if sizer is not None and machine is not None and machine.curve:
        sized = {k: v for k, v in sizer(machine, {**saved, **given}, num_heads=num_heads,
                                        heads_tree=heads_tree).items() if k not in given and k not in saved}
    sizing = _assemble(method, machine, given, saved, sized)
    try:
        parse_params(method, sizing.params)
        _check_draft(method, sizing.params)
    except ParameterError as exc:
        sizing = _assemble(method, machine, given, saved, {})
        notes.append(f"the sized values did not fit the given/saved ones ({exc}): defaults used instead")
    if sized:
        notes.extend(curve_notes(machine.curve, measured=machine.curve != CPU_FALLBACK_CURVE,
                                 backend=machine.backend))
        if method == "draft":
            sizing.expected = expected_range(machine, sizing.params)
    sizing.notes.extend(notes)
    return sizing


def expected_range(machine: MachineCost, params: dict) -> dict:
    """The speedup a draft with these K and K_max should give on ``machine`` (``expected_speedup``): at
    DRAFT_ACCEPTANCE with K, and at DRAFT_ACCEPTANCE_HIGH with K_max, where adaptive K grows on text the
    draft predicts well. A guess from the pass costs until a run measures it."""
    ratio = machine.draft_ratio if machine.draft_ratio is not None else CPU_FALLBACK_DRAFT_RATIO
    k, k_max = int(params["k"]), int(params.get("k_max") or params["k"])
    return {"low": round(expected_speedup(k, DRAFT_ACCEPTANCE, ratio, machine.curve), 2),
            "high": round(expected_speedup(k_max, DRAFT_ACCEPTANCE_HIGH, ratio, machine.curve), 2),
            "acceptance": [DRAFT_ACCEPTANCE, DRAFT_ACCEPTANCE_HIGH], "draft_cost": round(ratio, 3),
            "measured_curve": machine.curve != CPU_FALLBACK_CURVE}


def fixed_params(method: str, given: dict | None = None, saved: dict | None = None) -> Sizing | None:
    """``method``'s parameters when no machine is needed to know them: every field a sizer would set is
    given or saved (``size_params`` without a machine, so the same precedence and checks), else None,
    when only this machine's cost curve can settle them. Lets a resumable benchmark find its stored runs
    before loading a model. Raises ParameterError as ``size_params`` does."""
    sizing = size_params(method, None, given, saved)
    if any(sizing.fields[name].source == "default" for name in SIZED_FIELDS.get(method, ())):
        return None
    return sizing


def remembered_machine(store, target: str, kind: str, hardware: str, dtype: str | None = None,
                       draft: str | None = None, draft_dtype: str | None = None) -> tuple[MachineCost, dict | None]:
    """This machine's cost as memory knows it, with nothing loaded or measured (guidance, onboarding),
    read as ``machine_cost`` reads it: the curve stored for ``target`` on ``hardware`` in ``dtype`` (any
    dtype when None) and, beside it, a ``draft`` token's cost from the draft's stored curve in
    ``draft_dtype``; else on a CPU the conservative curve run and compare use when they may not measure,
    on a GPU none (the defaults stay). Returns the machine and the stored curve's row (None when none)."""
    kernels = cpu_gemm.expected_kernels(kind, dtype) if dtype else ANY_KERNELS
    stored = store.get_cost_curve(target, hardware, dtype, kernels=kernels) if store is not None else None
    if stored is None:
        what = f"no cost curve of {target}" + (f" in {dtype}" if dtype else "") + " measured here yet"
        if kind == "cpu":
            return MachineCost(kind, hardware, dict(CPU_FALLBACK_CURVE),
                               f"{what}, so a conservative CPU curve (2-core AVX2 CPU, float32; "
                               "`specpilot guide lookahead --measure` measures this one)"), None
        return MachineCost(kind, hardware, None, f"{what}: the GPU-sized defaults stay"), None
    curve = stored["curve"]
    machine = MachineCost(kind, hardware, curve, f"the cost curve of {target} in {stored['dtype']} stored on "
                                                 f"{stored['measured_at'][:10]}")
    found = (store.get_cost_curve(draft, hardware, draft_dtype, kernels=cpu_gemm.expected_kernels(kind, draft_dtype))
             if draft and draft_dtype else None)
    if found is not None:
        t1 = one_token_time(found["curve"])
        machine.draft_ratio = t1 / one_token_time(curve)
        machine.draft_source = (f"{draft} in {draft_dtype}: {t1 * 1000:.0f} ms a token, stored on "
                                f"{found['measured_at'][:10]}")
    return machine, stored


def curve_notes(curve: dict[int, float], measured: bool = True, backend: str = "transformers") -> list[str]:
    """What the curve means for speculation here, when it is not the usual near-flat start."""
    notes = []
    two = relative_cost(curve, 2)
    if two > STEP_NOTE_RATIO:
        notes.append(f"here a pass over 2 tokens already costs {two:.1f}x a one-token pass: a method pays off only "
                     f"if it gains more than {two - 1:.1f} tokens per step over plain generation (draft models "
                     "usually do; methods that only verify guesses rarely)")
    if measured and step_tokens(curve) < STEEP_TOKENS:
        notes.append("this curve rises at once, so every size is the smallest; if the machine was busy when it was "
                     "measured, measure it again (`specpilot guide lookahead --measure"
                     + (" --backend llamacpp" if backend == "llamacpp" else "") + "`)")
    return notes


def _check_draft(method: str, params: dict) -> None:
    if method == "draft" and params.get("k_max") is not None and params["k_max"] < params["k"]:
        raise ParameterError(f"k_max={params['k_max']} is below k={params['k']}")


def _assemble(method: str, machine: MachineCost | None, given: dict, saved: dict, sized: dict) -> Sizing:
    model = PARAM_MODELS[method]
    defaults = model().model_dump()
    out: dict[str, SizedParam] = {}
    for name, info in model.model_fields.items():
        if name in given:
            out[name] = SizedParam(given[name], "given", "given for this run")
        elif name in saved:
            out[name] = SizedParam(saved[name], "memory", f"saved in memory for {method}")
        elif name in sized:
            out[name] = SizedParam(sized[name][0], "sized", sized[name][1])
        else:
            out[name] = SizedParam(defaults[name], "default", default_reason(method, name, info, machine))
    machine_text = ""
    if machine is not None and any(p.source == "sized" for p in out.values()):
        machine_text = f"{machine.curve_source} ({machine.hardware})"
    return Sizing(method, out, machine_text)


def default_reason(method: str, name: str, info, machine: MachineCost | None) -> str:
    """Why a field keeps its default: what it does, and for a sizeable field why it was not sized."""
    text = f"the default ({info.description})" if info.description else "the default"
    if (name in SIZED_FIELDS.get(method, ()) and machine is not None and not machine.curve
            and machine.kind == "gpu"):  # only a field a curve would size says that none is measured
        text += f"; {machine.curve_source}"
    return text
