"""Compare decoding methods on one prompt with identical settings: baseline, draft model, Medusa,
lookahead and prompt lookup, each timed against the same plain-generation baseline, each stored as a
run linked to one task.

Protocol (DESIGN.md, "Measurement protocol"): one model load per model (``load_cached``), a warm-up
of every runner, then ``repeats`` rounds; each round times the baseline first, then the transformers
peers when asked, then the methods in an order that rotates from round to round. So the baseline is
timed once per round for the whole comparison and every method alternates with that same baseline.
A method is finished (its run stored, its task step done) as soon as its last repeat is timed, so a
Ctrl-C keeps what finished and marks the task unfinished with what is left.

A method that cannot run here (no Medusa heads for this target, the draft model missing, a
vocabulary mismatch) is reported as "not run: reason" and noted in the task; it does not stop the
others.
"""

from __future__ import annotations

import json

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from pydantic import BaseModel, Field

from tools import models
from tools.bench import peers
from tools.bench import protocol as measure
from tools.engine.types import GenerationSettings
from tools.errors import ParameterError, SpecpilotError
from tools.medusa.checkpoint import default_medusa_heads_path, load_medusa_heads
from tools.engine.methods import (METHOD_NAMES, PARAM_MODELS, MethodContext, parse_params,
                           run)
from tools.bench.run import (PEERS_DESCRIPTION, Method, MeasureOptions, RunInput, eos_ids_for, load_cached,
                              prompt_ids_for, record_from)

log = logging.getLogger(__name__)

Progress = Callable[[str], None] | None

DEMO_PROMPT = (
    "Write a Python function `merge_intervals(intervals)` that merges overlapping intervals "
    "and returns them sorted. Include a docstring and a short example."
)
# what a method needs besides the target, for the table
TRAINING = {"baseline": "none", "draft": "none", "medusa": "Medusa heads", "lookahead": "none", "ngram": "none"}
RUNNER_ERRORS = (SpecpilotError, torch.OutOfMemoryError, MemoryError)


class CompareInput(MeasureOptions):
    """One prompt, identical generation settings, several methods, each measured against the baseline."""

    prompt: str = Field(..., min_length=1)
    methods: list[Method] = Field(default_factory=lambda: list(METHOD_NAMES), min_length=1,
                                  description="methods to compare (default: all five)")
    params: dict[str, dict] = Field(default_factory=dict,
                                    description="each method's own parameters; missing ones come from memory")
    peers: bool = Field(False, description=PEERS_DESCRIPTION)


@dataclass
class Candidate:
    """One thing timed beside the baseline: a method with parameters, shown under ``label``."""

    label: str
    method: str
    params: BaseModel
    source: str  # where the parameters came from: given, memory, default, or a note


@dataclass
class Prepared:
    """Loaded models and what could not be loaded."""

    ctx: MethodContext
    unavailable: dict[str, str]  # method -> reason it cannot run here
    heads_path: str | None


# ---------------------------------------------------------------------------- parameters
def own_params(method: str, saved: dict | None) -> dict:
    """The method's own fields of saved parameters (saved sets may also hold target, dtype, ...)."""
    fields = PARAM_MODELS[method].model_fields
    return {k: v for k, v in (saved or {}).items() if k in fields}


def resolve_candidates(methods: list[str], given: dict[str, dict], store) -> tuple[list[Candidate], dict[str, str]]:
    """Each method's parameters: given ones win, then those saved in memory, then the defaults.

    Bad given parameters raise ParameterError (the caller can fix them); bad saved ones make the
    method "not run" with the reason. Returns the candidates and {method: reason} for those not run.
    """
    unknown = sorted(set(given) - set(METHOD_NAMES))
    if unknown:
        raise ParameterError(f"parameters given for unknown method(s): {', '.join(unknown)}",
                             hint=f"use method names: {', '.join(METHOD_NAMES)}")
    candidates, not_run = [], {}
    for method in dict.fromkeys(methods):
        if given.get(method):
            candidates.append(Candidate(method, method, parse_params(method, given[method]), "given"))
            continue
        saved = own_params(method, store.get_params(method)) if method != "baseline" else {}
        try:
            params = parse_params(method, saved)
        except ParameterError as exc:
            not_run[method] = f"saved parameters invalid: {exc.user_message()}"
            continue
        candidates.append(Candidate(method, method, params, "memory" if saved else "default"))
    return candidates, not_run


def trained_heads_path(store, target: str) -> str | None:
    """Heads trained here for ``target`` (recorded by the train tool), if the folder still exists."""
    from tools.agent_tools.train_tool import HEADS_ANSWER_KEY

    path = (store.get_answer(HEADS_ANSWER_KEY) or {}).get(target)
    return path if path and Path(path).is_dir() else None


def medusa_heads_for(store, target: str, given: str | None) -> str | None:
    """The Medusa heads to use: the given folder, else heads trained here, else the shipped ones."""
    if given:
        return given
    shipped = default_medusa_heads_path(target)
    return trained_heads_path(store, target) or (str(shipped) if shipped else None)


def run_key(method: str, params: dict, prompt: str, common: dict) -> str:
    """The settings_key of one measurement: everything that changes its figures (see memory.settings_key)."""
    from memory.store import settings_key

    parts = {k: v for k, v in common.items() if k not in ("draft", "medusa_heads")}
    if method == "draft" or common.get("peers"):
        parts["draft"] = common.get("draft") or models.DEFAULT_DRAFT
    if method == "medusa":
        parts["medusa_heads"] = common.get("medusa_heads")
    return settings_key({"method": method, "params": params, **parts}, prompt)


def common_settings(inp: BaseModel, heads_path: str | None) -> dict:
    """The fields of a compare/bench/tune input that make two measurements comparable."""
    keys = ("target", "draft", "max_new_tokens", "temperature", "top_p", "top_k", "seed", "chat", "dtype",
            "device_map", "repeats", "peers")
    out = {k: getattr(inp, k, None) for k in keys}
    out["medusa_heads"] = heads_path
    return out


# ---------------------------------------------------------------------------- models
def prepare(inp: BaseModel, methods: list[str], heads_path: str | None, progress: Progress = None) -> Prepared:
    """Load the target (errors propagate), and the draft and Medusa heads when needed (errors make
    those methods "not run")."""
    if progress:
        progress(f"loading target {inp.target}")
    target = load_cached(inp.target, inp.dtype, inp.device_map, inp.threads)
    ctx = MethodContext(target=target)
    unavailable: dict[str, str] = {}
    if "draft" in methods or getattr(inp, "peers", False):
        ref = inp.draft or models.DEFAULT_DRAFT
        if progress:
            progress(f"loading draft {ref}")
        try:
            ctx.draft = load_cached(ref, inp.dtype, inp.device_map, inp.threads)
        except SpecpilotError as exc:
            unavailable["draft"] = f"draft model not available: {ref}: {exc.user_message()}"
    if "medusa" in methods:
        if heads_path is None:
            unavailable["medusa"] = (f"no Medusa heads for this target: train them with `specpilot medusa train "
                                     f"--target {inp.target}` (asks first) or pass --medusa-heads PATH")
        else:
            if progress:
                progress(f"loading Medusa heads {heads_path}")
            try:
                ctx.medusa_heads = load_medusa_heads(target, heads_path)
            except SpecpilotError as exc:
                unavailable["medusa"] = f"Medusa heads unusable: {heads_path}: {exc.user_message()}"
    return Prepared(ctx=ctx, unavailable=unavailable, heads_path=heads_path)


def generation_settings(inp: BaseModel, ctx: MethodContext) -> GenerationSettings:
    """The generation settings every method runs with (EOS ids from the target)."""
    return GenerationSettings(max_new_tokens=inp.max_new_tokens, temperature=inp.temperature, top_p=inp.top_p,
                              top_k=inp.top_k, seed=inp.seed, eos_token_ids=eos_ids_for(ctx.target))


# ---------------------------------------------------------------------------- measuring
def peer_runners(ctx: MethodContext, prompt_ids: list[int]) -> dict:
    """transformers' assisted generation (when a draft is loaded) and prompt lookup."""
    out = {}
    if ctx.draft is not None:
        out["hf_assisted"] = lambda s: peers.hf_assisted(ctx.target.model, ctx.draft.model, prompt_ids, s)
    out["hf_prompt_lookup"] = lambda s: peers.hf_prompt_lookup(ctx.target.model, prompt_ids, s)
    return out


def measure_candidates(ctx: MethodContext, prompt_ids: list[int], settings: GenerationSettings,
                       candidates: list[Candidate], repeats: int, warmup: int, with_peers: bool,
                       on_finished: Callable[[Candidate, dict[str, measure.Timed]], None],
                       on_failed: Callable[[Candidate, str], None], progress: Progress = None) -> None:
    """Time the baseline, the peers and every candidate in alternating rounds on one prompt.

    ``on_finished(candidate, timed)`` is called as soon as a candidate has all its repeats, with
    ``timed`` holding "baseline", the peers and the candidate (under its method name), ready for
    ``record_from``. A candidate whose runner raises a user-facing error (or runs out of memory) is
    dropped with ``on_failed(candidate, reason)``; the others go on.
    """
    def say(text: str) -> None:
        if progress:
            progress(text)

    baseline_params = parse_params("baseline", {})
    runners: dict[str, Callable] = {"baseline": lambda s: run("baseline", ctx, prompt_ids, s, baseline_params)}
    peer_names = []
    if with_peers:
        for name, fn in peer_runners(ctx, prompt_ids).items():
            runners[name] = fn
            peer_names.append(name)
    live = {}  # label -> candidate, for candidates with their own runner
    waiting_on_baseline = []
    for cand in candidates:
        if cand.method == "baseline":
            waiting_on_baseline.append(cand)
        else:
            live[cand.label] = cand
            runners[cand.label] = (lambda c: lambda s: run(c.method, ctx, prompt_ids, s, c.params))(cand)

    warm = settings.model_copy(update={"max_new_tokens": min(measure.WARMUP_TOKENS, settings.max_new_tokens)})
    for name in list(runners):
        for _ in range(warmup):
            say(f"warm-up: {name}")
            if not _try(name, runners, live, warm, on_failed, peer_names):
                break

    timed = {name: measure.Timed() for name in runners}
    finished: set[str] = set()

    def reference_ready() -> bool:
        return all(len(timed[n].times) == repeats for n in ["baseline", *peer_names] if n in runners)

    def finish_ready() -> None:
        if not reference_ready():
            return
        reference = {n: timed[n] for n in ["baseline", *peer_names] if n in runners}
        for cand in waiting_on_baseline:
            if cand.label not in finished:
                finished.add(cand.label)
                on_finished(cand, dict(reference))
        for label, cand in live.items():
            if label not in finished and label in runners and len(timed[label].times) == repeats:
                finished.add(label)
                on_finished(cand, {**reference, cand.method: timed[label]})

    for r in range(repeats):
        methods = [n for n in runners if n in live]
        shift = r % len(methods) if methods else 0
        order = ["baseline", *[p for p in peer_names if p in runners], *(methods[shift:] + methods[:shift])]
        for name in order:
            if name not in runners:
                continue
            say(f"{name}: repeat {r + 1}/{repeats}")
            result = _try(name, runners, live, settings, on_failed, peer_names)
            if result is not None:
                timed[name].times.append(result.wall_time_s)
                timed[name].result = result
            finish_ready()


def _try(name: str, runners: dict, live: dict, settings: GenerationSettings, on_failed, peer_names: list):
    """Run one runner; a candidate's or peer's user-facing error drops it (the baseline's propagates)."""
    if name == "baseline":
        return runners[name](settings)
    try:
        return runners[name](settings)
    except RUNNER_ERRORS as exc:
        reason = exc.user_message() if isinstance(exc, SpecpilotError) else f"{type(exc).__name__}: {exc}"
        runners.pop(name, None)
        if name in peer_names:
            log.warning("peer %s dropped: %s", name, reason)
            peer_names.remove(name)
        else:
            on_failed(live[name], reason)
        return None


# ---------------------------------------------------------------------------- table text
def quality_text(record: dict) -> str:
    """Quality loss as measured: identical to the baseline, or where and how the output differs."""
    lossy = " (typical acceptance is lossy by design)" if record.get("lossy") else ""
    if record.get("matches_baseline") is None:
        return "not compared token by token (sampling)" + lossy
    if record["matches_baseline"]:
        return f"identical to baseline ({record.get('new_tokens')} tokens)"
    div = record.get("first_divergence") or {}
    pos = div.get("position")
    if div.get("kind") == "near_tie":
        return f"differs from token {pos}: floating-point near-tie (margin {div.get('margin'):.3g}), not an algorithm error"
    if div.get("kind") == "length":
        return f"differs from token {pos}: one output stopped earlier"
    return (f"differs from token {pos}: baseline token {div.get('baseline_token')}, method token "
            f"{div.get('method_token')} (margin {div.get('margin')}): real mismatch") + lossy


def training_text(method: str, target: str, heads_path: str | None) -> str:
    """Training a method needs, and for Medusa whether heads exist for this target."""
    if method != "medusa":
        return TRAINING[method]
    return "Medusa heads (found)" if heads_path else "Medusa heads (none for this target)"


def draft_text(method: str, draft: str | None) -> str:
    """Whether the method needs a draft model, and which one."""
    return f"yes: {draft or models.DEFAULT_DRAFT}" if method == "draft" else "no"


def row_from_record(record: dict, cand: Candidate | None, target: str, heads_path: str | None) -> dict:
    """The compare table's row for a measured method (figures copied from the record)."""
    method = record["method"]
    keys = ("run_id", "wall_time_s", "tokens_per_s", "speedup", "acceptance_rate", "mean_accepted_per_step",
            "matches_baseline", "first_divergence", "new_tokens", "times", "baseline_times", "params", "lossy")
    return {"method": cand.label if cand else method, "status": "measured", "reason": None,
            **{k: record.get(k) for k in keys}, "params_source": record.get("params_source"),
            "quality": quality_text(record), "training_required": training_text(method, target, heads_path),
            "draft_required": draft_text(method, record.get("draft"))}


def row_not_run(method: str, reason: str, target: str, draft: str | None, heads_path: str | None) -> dict:
    """The compare table's row for a method that could not run here (``short``: the reason in a few words)."""
    short = reason.split(": ", 1)[0]
    short = short if len(short) <= 40 else short[:39] + "…"
    return {"method": method, "status": "not run", "reason": reason, "short_reason": short, "run_id": None,
            "quality": f"not run: {reason}", "training_required": training_text(method, target, heads_path),
            "draft_required": draft_text(method, draft)}


# ---------------------------------------------------------------------------- compare
def compare(inp: CompareInput, store=None, progress: Progress = None, sources: dict[str, str] | None = None) -> dict:
    """Run every method in ``inp.methods`` on one prompt against the same baseline; store each run
    (linked to one task) and return the comparison: rows per method in the order asked, task id,
    settings, hardware and versions. ``sources`` relabels where given parameters came from.

    KeyboardInterrupt leaves the finished methods stored, marks the task unfinished with what is left,
    and is re-raised.
    """
    if store is None:
        from memory import Store

        store = Store()
    methods = list(dict.fromkeys(inp.methods))
    candidates, not_run = resolve_candidates(methods, inp.params, store)
    for cand in candidates:
        if sources and cand.method in sources and cand.source == "given":
            cand.source = sources[cand.method]
    heads_path = medusa_heads_for(store, inp.target, inp.medusa_heads) if "medusa" in methods else None
    shown = inp.prompt if len(inp.prompt) <= 60 else inp.prompt[:57] + "..."
    task_id = store.create_task(f"compare {', '.join(methods)} on {shown!r}", "compare", methods)
    rows: dict[str, dict] = {}
    records: dict[str, dict] = {}

    def mark_not_run(method: str, reason: str) -> None:
        rows[method] = row_not_run(method, reason, inp.target, inp.draft, heads_path)
        store.update_task(task_id, left=[m for m in store.get_task(task_id)["left"] if m != method],
                          note=f"{method}: not run: {reason}")
        if progress:
            progress(f"{method}: not run: {reason}")

    try:
        for method, reason in not_run.items():
            mark_not_run(method, reason)
        prepared = prepare(inp, methods, heads_path, progress)
        ctx = prepared.ctx
        for method, reason in prepared.unavailable.items():
            if method in methods and method not in rows:
                mark_not_run(method, reason)
        runnable = [c for c in candidates if c.method not in rows]
        prompt_ids = prompt_ids_for(ctx.target.tokenizer, inp.prompt, inp.chat)
        settings = generation_settings(inp, ctx)
        common = common_settings(inp, heads_path)

        def finished(cand: Candidate, timed: dict) -> None:
            record = make_record(inp, ctx, prompt_ids, settings, cand, timed, heads_path)
            record.update(task_id=task_id, settings_key=run_key(cand.method, record["params"], inp.prompt, common))
            record["run_id"] = store.add_run(record)
            records[cand.method] = record
            rows[cand.method] = row_from_record(record, cand, inp.target, heads_path)
            store.update_task(task_id, done=[cand.method], run_ids=[record["run_id"]])
            if progress:
                progress(f"{cand.method}: stored as run {record['run_id']}")

        measure_candidates(ctx, prompt_ids, settings, runnable, inp.repeats, inp.warmup, inp.peers, finished,
                           lambda cand, reason: mark_not_run(cand.method, reason), progress)
    except KeyboardInterrupt:
        left = [m for m in methods if m not in rows]
        store.update_task(task_id, status="unfinished", left=left,
                          note=f"interrupted by the user; finished: {', '.join(records) or 'nothing'}")
        raise
    except BaseException as exc:
        left = [m for m in methods if m not in rows]
        store.update_task(task_id, status="failed", left=left, note=f"stopped by an error: {exc}")
        raise
    store.update_task(task_id, status="done")
    any_record = next(iter(records.values()), None)
    return {
        "task_id": task_id,
        "prompt": inp.prompt,
        "target": inp.target,
        "draft": ctx.draft.ref if ctx.draft is not None else None,
        "medusa_heads": heads_path,
        "dtype": ctx.target.dtype,
        "settings": settings.model_dump(),
        "repeats": inp.repeats,
        "rows": [rows[m] for m in methods if m in rows],
        "run_ids": [records[m]["run_id"] for m in methods if m in records],
        "run_ids_by_method": {m: records[m]["run_id"] for m in methods if m in records},
        "not_run": {m: rows[m]["reason"] for m in methods if rows.get(m, {}).get("status") == "not run"},
        "peers": (any_record or {}).get("peers") or {},
        "baseline_wall_time_s": (any_record or {}).get("baseline_wall_time_s"),
        "baseline_tokens_per_s": (any_record or {}).get("baseline_tokens_per_s"),
        "hardware": measure.hardware_info(ctx.target.device),
        "versions": measure.versions(),
    }


def make_record(inp: BaseModel, ctx: MethodContext, prompt_ids: list[int], settings: GenerationSettings,
                cand: Candidate, timed: dict, heads_path: str | None) -> dict:
    """The run record of one finished candidate (every figure from ``timed``), not stored yet."""
    params = cand.params.model_dump()
    run_inp = RunInput(
        method=cand.method, prompt=inp.prompt, target=inp.target, draft=inp.draft, medusa_heads=heads_path,
        params=params, max_new_tokens=inp.max_new_tokens, temperature=inp.temperature, top_p=inp.top_p,
        top_k=inp.top_k, seed=inp.seed, chat=inp.chat, dtype=inp.dtype, device_map=inp.device_map,
        threads=inp.threads, repeats=inp.repeats, warmup=inp.warmup, peers=inp.peers,
    )
    record = record_from(run_inp, ctx, prompt_ids, settings, params, timed)
    record["params_source"] = cand.source
    record["training_required"] = training_text(cand.method, inp.target, heads_path)
    record["draft_required"] = draft_text(cand.method, record.get("draft"))
    if cand.method == "medusa":
        record["medusa_heads"] = heads_path
    return record


# ---------------------------------------------------------------------------- demo
def demo(store=None, progress: Progress = None, max_new_tokens: int = 128, repeats: int = 1, dtype: str = "auto",
         target: str = models.DEFAULT_TARGET, draft: str | None = None) -> dict:
    """The demo: all five methods on a coding prompt (default: the offline default models), stored in
    memory, then a Markdown report with PNG charts. Medusa uses the shipped (or trained) heads and is
    reported as not run when there are none. Lookahead without saved parameters is sized to this
    machine's forward-pass cost curve (measured now, a few seconds, when none is stored). Returns the
    comparison (``compare``) and the report's paths (``report``)."""
    from tools.report.markdown import write_report

    if store is None:
        from memory import Store

        store = Store()
    params, sources = {}, {}
    if not own_params("lookahead", store.get_params("lookahead")):
        from tools.bench.tune import sized_lookahead_params

        if progress:
            progress(f"loading target {target}")
        loaded = load_cached(target, dtype, None)
        params["lookahead"], reasoning = sized_lookahead_params(store, loaded, progress)
        sources["lookahead"] = f"sized to this machine: {reasoning}"
    inp = CompareInput(prompt=DEMO_PROMPT, target=target, draft=draft, max_new_tokens=max_new_tokens,
                       repeats=repeats, dtype=dtype, params=params)
    result = compare(inp, store=store, progress=progress, sources=sources)
    runs = [store.get_run(r) for r in result["run_ids"]]
    report = write_report(runs, fmt="md", task=store.get_task(result["task_id"])) if runs else {}
    return {"compare": result, "report": report}


SHARED_SETTINGS = ("target", "draft", "max_new_tokens", "temperature", "top_p", "top_k", "seed", "dtype")


def with_saved_settings(inp: CompareInput, store) -> CompareInput:
    """Fill the settings the caller left out (target, draft, generation settings) from the compared
    methods' saved parameters, where those agree; given values always win."""
    saved = [store.get_params(m) or {} for m in inp.methods]
    update = {}
    for name in SHARED_SETTINGS:
        if name in inp.model_fields_set:
            continue
        values = {json.dumps(p[name]) for p in saved if p.get(name) is not None}
        if len(values) == 1:
            update[name] = json.loads(values.pop())
    return inp.model_copy(update=update) if update else inp


# the agent's compare tool: registered with tool("compare_methods", CompareInput)(compare_tool) in a module
# listed in tools.agent_tools.registry.TOOL_MODULES; ``ctx`` is a tools.agent_tools.registry.ToolContext
def compare_tool(inp: CompareInput, ctx) -> dict:
    """Compare decoding methods on one prompt with identical settings on this machine: baseline, draft
    (draft-model speculative decoding), medusa, lookahead and ngram (prompt lookup), each timed beside
    the same plain-generation baseline and stored as a run of one task. Returns per method: speedup,
    tokens/s, acceptance rate, tokens per step, whether the output matched the baseline (or where it
    differs), the training and draft model it needs, and its run id; methods that cannot run here are
    listed with the reason. Parameters not given are those saved for each method. Report the figures
    exactly as returned, with run ids."""
    inp = with_saved_settings(inp, ctx.store)
    result = compare(inp, store=ctx.store, progress=ctx.progress)
    result["source"] = f"measured now on this machine; stored as the runs of task {result['task_id']}"
    return result
