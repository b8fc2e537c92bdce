"""Run one method against plain generation on the same prompt, measure both, store the run.

This is what ``specpilot run`` and the agent's run tool call. Every figure in the returned record
comes from this measurement; the record is stored in memory and can be named by its run id.
:func:`measure_candidates` (a method and its parameters beside the baseline and the peers, timed by
the one protocol) and :func:`record_from` are shared with compare, bench and tune.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace

from pydantic import BaseModel

from memory import Store
from tools.bench import auto
from tools.bench import protocol as measure
from tools.bench.auto import AutoChoice
from tools.bench.context import (backend_of, backend_refusal, check_backend, checked_prompt_ids, eos_ids_for,
                                 generation_settings, load_cached, medusa_heads_for, peer_runners, prepare,
                                 prompt_ids_for, run_on, sized_run_params, uses_int8_draft)
from tools.bench.inputs import PEER_LABELS, SELF_DRAFT, MeasureOptions, RunInput
from tools.bench.record import PeerFigures, RunRecord
from tools.engine import llamacpp
from tools.engine.methods import ACCELERATED, METHOD_NAMES, METHODS, MethodContext, parse_params
from tools.engine.params import AUTO, PARAM_MODELS
from tools.engine.types import GenerationSettings
from tools.errors import ParameterError, SpecpilotError, StoreError, interruption

log = logging.getLogger(__name__)

__all__ = ["MeasureOptions", "RunInput", "Candidate", "measure_candidates", "record_from", "measure_method",
           "run_method", "store_record", "build_context", "settings_for", "load_cached", "prompt_ids_for", "eos_ids_for"]

@dataclass
class Candidate:
    """One thing timed beside the baseline: a method with parameters, shown under ``label``."""

    label: str
    method: str
    params: BaseModel
    source: str  # where the parameters came from: given, memory, default, sweep, or a note


# ---------------------------------------------------------------------------- measuring
def measure_candidates(ctx: MethodContext, prompt_ids: list[int], settings: GenerationSettings,
                       candidates: list[Candidate], repeats: int, warmup: int, with_peers: bool,
                       on_finished: Callable[[Candidate, dict[str, measure.Timed]], None],
                       on_failed: Callable[[Candidate, str], None] | None = None,
                       progress: measure.Progress = None, int8_peer: bool = False, bracket: bool = False,
                       rotate: int = 0) -> None:
    """Time the baseline, the peers (``with_peers``; ``int8_peer`` adds assisted generation with the
    int8 draft) and every candidate on one prompt with :func:`tools.bench.protocol.measure_rounds`:
    the baseline and the peers lead every round, the candidates rotate after them (``rotate`` places on),
    and with ``bracket`` the baseline is timed again after them (a benchmark's one round per prompt).

    ``on_finished(candidate, timed)`` is called as soon as a candidate has all its repeats, with
    ``timed`` holding "baseline", the peers and the candidate (under its method name), ready for
    ``record_from``; a "baseline" candidate is the baseline itself. With ``on_failed`` a candidate whose
    runner raises a user-facing error (or runs out of memory) is dropped with ``on_failed(candidate,
    reason)`` and a failing peer is left out; without it every error propagates.
    """
    baseline_params = parse_params("baseline", {})
    runners: dict[str, measure.Runner] = {"baseline": lambda s: run_on("baseline", ctx, prompt_ids, s, baseline_params)}
    peer_names = []
    if with_peers:
        found = peer_runners(ctx, prompt_ids, int8_peer, settings.max_new_tokens,
                             {c.method: c.params for c in candidates})
        runners.update(found)
        peer_names = list(found)
    live = {c.label: c for c in candidates if c.method != "baseline"}
    for cand in live.values():
        runners[cand.label] = (lambda c: lambda s: run_on(c.method, ctx, prompt_ids, s, c.params))(cand)

    def finished(name: str, timed: dict[str, measure.Timed]) -> None:
        if name == "baseline":
            for cand in candidates:
                if cand.method == "baseline":
                    on_finished(cand, dict(timed))
        elif name in live:
            cand = live[name]
            on_finished(cand, {**{k: v for k, v in timed.items() if k != name}, cand.method: timed[name]})

    def failed(name: str, reason: str) -> None:
        if name in peer_names:
            log.warning("peer %s dropped: %s", name, reason)
        else:
            on_failed(live[name], reason)

    measure.measure_rounds(runners, settings, repeats, warmup, lead=["baseline", *peer_names],
                           required=["baseline"] if on_failed else list(runners), on_finished=finished,
                           on_failed=failed, progress=progress, bracket=["baseline"] if bracket else (),
                           rotate=rotate)


def peer_rows(timed: dict[str, measure.Timed], greedy: bool) -> dict[str, PeerFigures]:
    """The record's figures of each peer (the engine's own modes) timed beside the baseline."""
    base = timed["baseline"]
    rows = {}
    for name in PEER_LABELS:
        if name in timed:
            t = timed[name]
            rows[name] = PeerFigures(
                wall_time_s=t.median,
                tokens_per_s=t.result.new_tokens / t.median if t.median else None,
                speedup=base.median / t.median if t.median else None,
                new_tokens=t.result.new_tokens,
                matches_baseline=(t.result.output_ids == base.result.output_ids) if greedy else None,
                acceptance=peer_acceptance(t.result),
                tokens_per_step=t.result.new_tokens / t.result.steps if t.result.steps else None,
                times=t.times,
            )
    return rows


def peer_acceptance(result) -> float | None:
    """The share of a peer's drafted tokens its target accepted, where the peer counts them (llama-server)."""
    drafted = (result.extra or {}).get("draft_n")
    return result.extra["draft_n_accepted"] / drafted if drafted else None


def rerun_for(method: str, ctx: MethodContext, prompt_ids: list[int], settings: GenerationSettings, params: dict):
    """``rerun(backend) -> output ids``: the method again, same settings, with the target's model swapped for
    ``backend`` (the divergence diagnosis replays it through a recording backend)."""
    model = parse_params(method, params)

    def rerun(backend) -> list[int]:
        return run_on(method, replace(ctx, target=replace(ctx.target, model=backend)), prompt_ids, settings,
                      model).output_ids
    return rerun


def record_from(inp: RunInput, ctx: MethodContext, prompt_ids: list[int], settings: GenerationSettings,
                params: dict, timed: dict[str, measure.Timed]) -> RunRecord:
    """Assemble the run record from measured timings (every figure comes from ``timed``)."""
    base, main = timed["baseline"], timed[inp.method]
    res = main.result
    divergence = matches = None
    backend = backend_of(ctx)
    if settings.greedy:
        matches = res.output_ids == base.result.output_ids
        if not matches and backend == "llamacpp":
            divergence = llamacpp.diagnose_divergence(ctx.target.model, prompt_ids, base.result.output_ids,
                                                      res.output_ids, rerun=rerun_for(inp.method, ctx, prompt_ids,
                                                                                      settings, params))
        elif not matches:
            divergence = measure.diagnose_divergence(
                ctx.target.model, prompt_ids, base.result.output_ids, res.output_ids, ctx.target.dtype
            )
    wall = main.median
    return RunRecord(
        method=inp.method, target=inp.target,
        draft=ctx.draft.ref if ctx.draft is not None and inp.method == "draft" else None,
        params=params, settings=settings.model_dump(), prompt=inp.prompt, chat=inp.chat,
        prompt_ids=list(prompt_ids), output_ids=list(res.output_ids),
        output_text=ctx.target.tokenizer.decode(res.output_ids, skip_special_tokens=True),
        baseline_output_ids=list(base.result.output_ids), new_tokens=res.new_tokens,
        wall_time_s=wall, tokens_per_s=res.new_tokens / wall if wall else None,
        baseline_wall_time_s=base.median,
        baseline_tokens_per_s=base.result.new_tokens / base.median if base.median else None,
        speedup=base.median / wall if wall else None, times=main.times, baseline_times=base.times,
        repeats=inp.repeats, prefill_s=res.prefill_s, acceptance_rate=res.acceptance_rate,
        tokens_drafted=res.tokens_drafted, tokens_accepted=res.tokens_accepted, steps=res.steps,
        mean_accepted_per_step=res.mean_accepted_per_step, drafted_by_position=res.drafted_by_position,
        accepted_by_position=res.accepted_by_position, stopped_by=res.stopped_by, method_extra=res.extra,
        lossy=bool(res.extra.get("lossy", False)), matches_baseline=matches, first_divergence=divergence,
        medusa_heads=inp.medusa_heads if METHODS[inp.method].needs_heads else None,
        peers=peer_rows(timed, settings.greedy), backend=backend, hardware=measure.hardware_info(ctx.target.device),
        dtype=ctx.target.dtype, dtype_reason=ctx.target.dtype_reason, device_map=inp.device_map,
        versions=measure.versions(backend),
    )


def build_context(inp: RunInput, progress: measure.Progress = None, store=None) -> MethodContext:
    """The models a single run of ``inp.method`` needs (load errors propagate): with ``store``, the head folders
    not given are those saved in it (:func:`with_heads`; EAGLE's: tools.bench.context.prepare), as the run reads
    every other saved parameter."""
    inp = with_heads(inp, store)
    return prepare(inp, [inp.method], inp.medusa_heads, progress, strict=True, store=store).ctx


def with_heads(inp: RunInput, store=None) -> RunInput:
    """``inp`` with the Medusa heads folder a run of a method that needs heads loads and records: the given one,
    else the one saved for medusa, else heads trained here, else the shipped ones
    (tools.bench.context.medusa_heads_for); ``inp`` itself for other methods or without ``store``."""
    if store is None or not METHODS[inp.method].needs_heads or inp.medusa_heads:
        return inp
    return inp.model_copy(update={"medusa_heads": medusa_heads_for(store, inp.target, None)})


settings_for = generation_settings  # kept for callers of the old name


def measure_method(inp: RunInput, ctx: MethodContext, prompt_ids: list[int], settings: GenerationSettings,
                   progress: measure.Progress = None) -> dict:
    """Time the method and the baseline (and peers) alternating; return the run record (not stored)."""
    params = parse_params(inp.method, inp.params)
    timed: dict[str, measure.Timed] = {}
    measure_candidates(ctx, prompt_ids, settings, [Candidate(inp.method, inp.method, params, "given")], inp.repeats,
                       inp.warmup, inp.peers, lambda cand, t: timed.update(t), progress=progress,
                       int8_peer=inp.peers and uses_int8_draft(inp.method, params, ctx))
    return record_from(inp, ctx, prompt_ids, settings, params.model_dump(), timed)


def run_method(inp: RunInput, store=None, progress: measure.Progress = None,
               task_id: int | None = None) -> dict:
    """Measure ``inp.method`` against the baseline, store the run, and return its record.

    Without ``task_id`` the run gets a task of its own (kind "run"): done when stored, unfinished on
    Ctrl-C, failed on an error, and left "running" by a killed process (read back as unfinished).
    A run that was measured but cannot be stored (a read-only or broken database) is still returned,
    with ``run_id`` None and ``not_stored`` saying why, so the figures are never lost silently.
    """
    store = store if store is not None else Store()
    picked = None
    asked = inp
    if inp.method == AUTO:
        picked = auto_choice(inp, store)
        inp = for_method(inp, picked.method)
    if inp.method not in METHOD_NAMES:
        raise ParameterError(f"unknown method {inp.method!r}", hint=f"choose one of: {', '.join(METHOD_NAMES)}, auto")
    parse_params(inp.method, inp.params)  # fail fast, before loading models
    draft_choice = None
    if picked is None and inp.method == "draft" and inp.draft is None and inp.backend == "transformers":
        draft_choice = auto.choose_draft(inp, store)
        if draft_choice.self_draft:
            inp = type(inp).model_validate({**inp.model_dump(), "draft": SELF_DRAFT})
    check_backend(inp.method, inp.backend)
    own_task = task_id is None and not getattr(store, "read_only", False)
    if own_task:
        shown = inp.prompt if len(inp.prompt) <= 60 else inp.prompt[:57] + "..."
        task_id = store.create_task(f"run {inp.method} on {shown!r}", "run", [inp.method])
    try:
        if picked is not None:
            planned = inp.method
            ctx, inp, picked = auto_context(asked, picked, progress, store)
            if own_task and inp.method != planned:  # the first pick cannot run here: the plan is the one that runs
                store.update_task(task_id, left=[inp.method], note=f"auto: {planned} cannot run here, {inp.method} runs")
        else:
            inp = with_heads(inp, store)  # the heads folder it loads is the one its record shows
            ctx = build_context(inp, progress, store)
        prompt_ids = checked_prompt_ids(inp, ctx, inp.prompt)  # fits the context, before any measuring
        # parameters not given: from memory, else sized to this machine's cost curve (given > memory > sized)
        sizing = sized_run_params(inp, ctx, store, progress=progress)
        if sizing is not None:
            inp = inp.model_copy(update={"params": sizing.params})
        record = measure_method(inp, ctx, prompt_ids, generation_settings(inp, ctx), progress)
        if sizing is not None:
            record.params_source, record.sizing = sizing.source, sizing.reasons()
        if draft_choice is not None:  # which draft: the built-in one or the target's own 4-bit copy, and why
            record.sizing = {"draft": draft_choice.reason, **(record.sizing or {})}
        if picked is not None:  # why this method: the first reason the record gives
            record.sizing = {"method": picked.reason(), **(record.sizing or {})}
    except BaseException as exc:
        if own_task:
            interrupted = isinstance(exc, KeyboardInterrupt)
            store.update_task(task_id, status="unfinished" if interrupted else "failed",
                              note=interruption(exc) if interrupted else f"stopped by an error: {exc}")
        raise
    record.task_id = task_id
    out = store_record(record, store)
    if own_task and out.get("run_id"):
        store.update_task(task_id, status="done", done=[inp.method], run_ids=[out["run_id"]])
    return out


def auto_choice(inp: RunInput, store) -> AutoChoice:
    """The method ``auto`` picks for ``inp.prompt`` among those the backend runs (ParameterError where no fit
    figures exist for any of them)."""
    allowed = [m for m in ACCELERATED if backend_refusal(m, inp.backend) is None]
    picked = auto.choose(inp.prompt, allowed, store, auto.matching(inp))
    if picked is None:
        raise ParameterError("auto has no fit-half figures to choose a method from",
                             hint="run `specpilot bench --prompts fit` once, or name a method (--method draft)")
    return picked


def for_method(inp: RunInput, method: str) -> RunInput:
    """``inp`` for ``method``, auto's pick: of the parameters given, the ones that method has."""
    own = PARAM_MODELS[method].model_fields
    return inp.model_copy(update={"method": method, "params": {k: v for k, v in inp.params.items() if k in own}})


def auto_context(inp: RunInput, picked: AutoChoice, progress: measure.Progress = None, store=None
                 ) -> tuple[MethodContext, RunInput, AutoChoice]:
    """Load what ``picked.method`` needs (with the head folders saved in ``store``, as :func:`build_context`);
    where it cannot run here (no EAGLE head or draft for this target), the next method by predicted speedup,
    said so in the reason."""
    ranked = sorted(picked.predicted, key=picked.predicted.get, reverse=True)
    skipped = []
    for method in ranked:
        trial = with_heads(for_method(inp, method), store)
        try:
            ctx = build_context(trial, progress, store)
        except SpecpilotError as exc:
            skipped.append(f"{method} cannot run here: {exc.user_message()}")
            if method == ranked[-1]:
                raise
            continue
        if skipped:
            picked = replace(picked, method=method, source=picked.source + "; " + "; ".join(skipped))
        return ctx, trial, picked
    raise ParameterError("auto found no method that runs here", hint="name one with --method")


def store_record(record: RunRecord, store=None) -> dict:
    """Store ``record``; return it as the dict callers print, with ``not_stored`` when storing failed."""
    try:
        store = store if store is not None else Store()
        record.run_id = store.add_run(record.to_store())
    except StoreError as exc:
        log.warning("run measured but not stored: %s", exc)
        out = record.to_store()
        out["not_stored"] = exc.user_message()
        return out
    return record.to_store()
