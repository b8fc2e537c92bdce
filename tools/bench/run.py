"""Run one method against plain generation on the same prompt, measure both, store the run.

This is what ``specpilot run`` and the agent's run tool call. Every figure in the returned record
comes from this measurement; the record is stored in memory and can be named by its run id.
"""

from __future__ import annotations

import logging
from typing import Callable, Literal

from pydantic import BaseModel, ConfigDict, Field

from tools import models
from tools.bench import peers
from tools.bench import protocol as measure
from tools.engine import quantize
from tools.engine.types import GenerationSettings
from tools.errors import ParameterError
from tools.medusa.checkpoint import default_medusa_heads_path, load_medusa_heads
from tools.engine.methods import METHOD_NAMES, MethodContext, needs_draft, parse_params, run

log = logging.getLogger(__name__)

Method = Literal["baseline", "draft", "medusa", "lookahead", "ngram"]


class MeasureOptions(BaseModel):
    """Models and settings every measurement shares (run, compare, bench, tune); defaults live here."""

    model_config = ConfigDict(extra="forbid")

    target: str = models.DEFAULT_TARGET
    draft: str | None = Field(None, description="draft model for 'draft' and the assisted peer (default: built-in)")
    medusa_heads: str | None = Field(None, description="Medusa heads folder (default: trained or shipped heads)")
    max_new_tokens: int = Field(128, ge=1, le=4096)
    temperature: float = Field(0.0, ge=0.0, le=100.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = Field(0, ge=0)
    seed: int = 0
    chat: bool = Field(True, description="apply the model's chat template (False: raw prompt)")
    dtype: str = "auto"
    device_map: str | None = None
    threads: int | None = Field(None, ge=1)
    repeats: int = Field(1, ge=1, le=50)
    warmup: int = Field(1, ge=0, le=5)


PEERS_DESCRIPTION = "also time transformers' assisted generation and prompt lookup"


class RunInput(MeasureOptions):
    """One measured run: a method and the baseline on the same prompt and settings."""

    method: Method
    prompt: str = Field(..., min_length=1)
    params: dict = Field(default_factory=dict, description="the method's own parameters")
    peers: bool = Field(False, description=PEERS_DESCRIPTION)


_LOADED: dict[tuple, models.LoadedModel] = {}


def load_cached(ref: str, dtype: str, device_map: str | None, threads: int | None = None) -> models.LoadedModel:
    """Load a model once per process (compare and bench reuse it across methods)."""
    key = (ref, dtype, device_map)
    if key not in _LOADED:
        _LOADED[key] = models.load(ref, dtype=dtype, device_map=device_map, threads=threads)
    return _LOADED[key]


def prompt_ids_for(tokenizer, prompt: str, chat: bool) -> list[int]:
    """The exact ids fed to the model: the chat template applied unless ``chat`` is False."""
    if chat and getattr(tokenizer, "chat_template", None):
        ids = tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=True, return_dict=False
        )
        if isinstance(ids, dict) or hasattr(ids, "keys"):
            ids = ids["input_ids"]
        return [int(t) for t in ids]
    ids = tokenizer(prompt, add_special_tokens=True)["input_ids"]
    if not ids:
        raise ParameterError("the prompt gives no tokens", hint="give a non-empty prompt")
    return [int(t) for t in ids]


def eos_ids_for(loaded: models.LoadedModel) -> list[int]:
    """Stop tokens: the generation config's EOS ids and the tokenizer's EOS."""
    ids: list[int] = []
    gen = getattr(loaded.model, "generation_config", None)
    eos = getattr(gen, "eos_token_id", None) if gen is not None else None
    for value in (eos if isinstance(eos, list) else [eos]) + [loaded.tokenizer.eos_token_id]:
        if value is not None and int(value) not in ids:
            ids.append(int(value))
    return ids


def build_context(inp: RunInput, progress: Callable[[str], None] | None = None) -> MethodContext:
    """Load the models the method needs."""
    if progress:
        progress(f"loading target {inp.target}")
    target = load_cached(inp.target, inp.dtype, inp.device_map, inp.threads)
    ctx = MethodContext(target=target)
    if needs_draft(inp.method) or (inp.peers and inp.draft):
        ref = inp.draft or models.DEFAULT_DRAFT
        if progress:
            progress(f"loading draft {ref}")
        ctx.draft = load_cached(ref, inp.dtype, inp.device_map, inp.threads)
    if inp.method == "medusa":
        ctx.medusa_heads = load_medusa_heads(target, inp.medusa_heads)
    return ctx


def settings_for(inp: RunInput, ctx: MethodContext) -> GenerationSettings:
    return GenerationSettings(
        max_new_tokens=inp.max_new_tokens, temperature=inp.temperature, top_p=inp.top_p, top_k=inp.top_k,
        seed=inp.seed, eos_token_ids=eos_ids_for(ctx.target),
    )


def measure_method(inp: RunInput, ctx: MethodContext, prompt_ids: list[int], settings: GenerationSettings,
                   progress: Callable[[str], None] | None = None) -> dict:
    """Time the method and the baseline (and peers) alternating; return the run record (not stored)."""
    params = parse_params(inp.method, inp.params)
    runners = {"baseline": lambda s: run("baseline", ctx, prompt_ids, s, parse_params("baseline", {}))}
    if inp.method != "baseline":
        runners[inp.method] = lambda s: run(inp.method, ctx, prompt_ids, s, params)
    if inp.peers:
        if ctx.draft is not None:
            runners["hf_assisted"] = lambda s: peers.hf_assisted(ctx.target.model, ctx.draft.model, prompt_ids, s)
            if inp.method == "draft" and quantize.resolve(params.draft_quant, ctx.draft.device) == "int8":
                # the same int8 draft our decoder uses, so the comparison is like for like
                q = quantize.int8_draft(ctx.draft.model)
                runners["hf_assisted_int8"] = lambda s: peers.hf_assisted(ctx.target.model, q, prompt_ids, s)
        runners["hf_prompt_lookup"] = lambda s: peers.hf_prompt_lookup(ctx.target.model, prompt_ids, s)
    timed = measure.alternate(runners, settings, repeats=inp.repeats, warmup=inp.warmup, progress=progress)
    return record_from(inp, ctx, prompt_ids, settings, params.model_dump(), timed)


def record_from(inp: RunInput, ctx: MethodContext, prompt_ids: list[int], settings: GenerationSettings,
                params: dict, timed: dict[str, measure.Timed]) -> dict:
    """Assemble the stored record from measured timings (every figure comes from ``timed``)."""
    base = timed["baseline"]
    main = timed[inp.method]
    res = main.result
    tok = ctx.target.tokenizer
    greedy = settings.greedy
    divergence = None
    matches = None
    if greedy:
        matches = res.output_ids == base.result.output_ids
        if not matches:
            divergence = measure.diagnose_divergence(
                ctx.target.model, prompt_ids, base.result.output_ids, res.output_ids, ctx.target.dtype
            )
    new_tokens = res.new_tokens
    wall = main.median
    peer_rows = {}
    for name in peers.PEER_LABELS:
        if name in timed:
            t = timed[name]
            peer_rows[name] = {
                "wall_time_s": t.median,
                "tokens_per_s": t.result.new_tokens / t.median if t.median else None,
                "speedup": base.median / t.median if t.median else None,
                "new_tokens": t.result.new_tokens,
                "matches_baseline": (t.result.output_ids == base.result.output_ids) if greedy else None,
                "times": t.times,
            }
    return {
        "method": inp.method,
        "target": inp.target,
        "draft": (ctx.draft.ref if ctx.draft is not None and inp.method == "draft" else None),
        "params": params,
        "settings": settings.model_dump(),
        "prompt": inp.prompt,
        "chat": inp.chat,
        "prompt_ids": list(prompt_ids),
        "output_ids": list(res.output_ids),
        "output_text": tok.decode(res.output_ids, skip_special_tokens=True),
        "baseline_output_ids": list(base.result.output_ids),
        "new_tokens": new_tokens,
        "wall_time_s": wall,
        "tokens_per_s": new_tokens / wall if wall else None,
        "baseline_wall_time_s": base.median,
        "baseline_tokens_per_s": base.result.new_tokens / base.median if base.median else None,
        "speedup": base.median / wall if wall else None,
        "times": main.times,
        "baseline_times": base.times,
        "repeats": inp.repeats,
        "prefill_s": res.prefill_s,
        "acceptance_rate": res.acceptance_rate,
        "tokens_drafted": res.tokens_drafted,
        "tokens_accepted": res.tokens_accepted,
        "steps": res.steps,
        "mean_accepted_per_step": res.mean_accepted_per_step,
        "drafted_by_position": res.drafted_by_position,
        "accepted_by_position": res.accepted_by_position,
        "stopped_by": res.stopped_by,
        "method_extra": res.extra,
        "lossy": bool(res.extra.get("lossy", False)),
        "matches_baseline": matches,
        "first_divergence": divergence,
        "peers": peer_rows,
        "hardware": measure.hardware_info(ctx.target.device),
        "dtype": ctx.target.dtype,
        "dtype_reason": ctx.target.dtype_reason,
        "device_map": inp.device_map,
        "versions": measure.versions(),
    }


def run_method(inp: RunInput, store=None, progress: Callable[[str], None] | None = None,
               task_id: int | None = None) -> dict:
    """Measure ``inp.method`` against the baseline, store the run, and return its record."""
    if inp.method not in METHOD_NAMES:
        raise ParameterError(f"unknown method {inp.method!r}", hint=f"choose one of: {', '.join(METHOD_NAMES)}")
    parse_params(inp.method, inp.params)  # fail fast, before loading models
    ctx = build_context(inp, progress)
    prompt_ids = prompt_ids_for(ctx.target.tokenizer, inp.prompt, inp.chat)
    settings = settings_for(inp, ctx)
    record = measure_method(inp, ctx, prompt_ids, settings, progress)
    if task_id is not None:
        record["task_id"] = task_id
    if store is None:
        from memory import Store

        store = Store()
    record["run_id"] = store.add_run(record)
    return record
