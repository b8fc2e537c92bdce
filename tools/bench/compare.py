"""Compare decoding methods on one prompt with identical settings: baseline, draft model, Medusa,
lookahead and prompt lookup, each timed against the same plain-generation baseline, each stored as a
run linked to one task.

Protocol (tools.bench.protocol.measure_rounds, the one every measurement uses): one model load per
model (tools.bench.context), a warm-up of every runner, then ``repeats`` rounds; each round times the
baseline first, then the transformers peers when asked, then the methods in an order that rotates
from round to round. So the baseline is
timed once per round for the whole comparison and every method alternates with that same baseline.
A method is finished (its run stored, its task step done) as soon as its last repeat is timed, so a
Ctrl-C keeps what finished and marks the task unfinished with what is left.

A method that cannot run here (no Medusa heads for this target, the draft model missing, a
vocabulary mismatch, Medusa on the llama.cpp backend) is reported as "not run: reason" and noted in
the task; it does not stop the others.

:func:`compare_backends` compares on several engines (``--backend transformers --backend llamacpp``):
one comparison per engine, one after another (the first engine's models are freed before the next
loads), on the same prompt ids, each method's speedup against that engine's own baseline, the rows
put in one table.
"""

from __future__ import annotations

import json

from pydantic import BaseModel

from memory import Store
from memory.store import settings_key
from tools import models
from tools.bench import protocol as measure
from tools.bench.protocol import Progress
from tools.bench.record import RunRecord
from tools.bench.context import (checked_prompt_ids, generation_settings, medusa_heads_for, prepare,
                                 release_models, size_candidates)
from tools.bench.inputs import BACKENDS, CompareInput, MeasureOptions, RunInput
from tools.bench.run import Candidate, measure_candidates, record_from
from tools.bench.summary import lossless, quality_text, recommend
from tools.engine.methods import METHOD_NAMES, METHODS, PARAM_MODELS, MethodContext, parse_params
from tools.engine.types import GenerationSettings
from tools.medusa.eagle_train import head_fingerprint
from tools.errors import ParameterError, interruption

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


def run_key(method: str, params: dict, prompt: str, common: dict) -> str:
    """The settings_key of one measurement: everything that changes its figures (see memory.settings_key)."""
    parts = {k: v for k, v in common.items() if k not in ("draft", "medusa_heads")}
    if METHODS[method].needs_draft or common.get("peers"):
        parts["draft"] = common.get("draft") or models.DEFAULT_DRAFT
    if METHODS[method].needs_heads:
        parts["medusa_heads"] = common.get("medusa_heads")
    if method == "eagle":  # the head's weights, not only its folder: a retrained head is another measurement
        parts["eagle_head"] = head_fingerprint(params.get("eagle_heads"), common.get("target"))
    if METHODS[method].revision:  # (revision 0 keeps the keys runs were stored under before revisions existed)
        parts["revision"] = METHODS[method].revision
    return settings_key({"method": method, "params": params, **parts}, prompt)


def common_settings(inp: BaseModel, heads_path: str | None) -> dict:
    """The fields of a compare/bench/tune input that make two measurements comparable."""
    keys = ("target", "draft", "max_new_tokens", "temperature", "top_p", "top_k", "seed", "chat", "dtype",
            "device_map", "repeats", "peers")
    out = {k: getattr(inp, k, None) for k in keys}
    out["medusa_heads"] = heads_path
    if getattr(inp, "backend", "transformers") != "transformers":  # transformers runs keep their keys of before
        out["backend"] = inp.backend
    return out


# ---------------------------------------------------------------------------- table text
def training_text(method: str, target: str, heads_path: str | None) -> str:
    """Training a method needs, and for Medusa whether heads exist for this target."""
    spec = METHODS[method]
    if not spec.needs_heads:
        return spec.training
    return f"{spec.training} (found)" if heads_path else f"{spec.training} (none for this target)"


def draft_text(method: str, draft: str | None) -> str:
    """Whether the method needs a draft model, and which one."""
    return f"yes: {draft or models.DEFAULT_DRAFT}" if METHODS[method].needs_draft else "no"


def row_from_record(record: dict, cand: Candidate | None, target: str, heads_path: str | None) -> dict:
    """The compare table's row for a measured method (figures copied from the record)."""
    method = record["method"]
    keys = ("run_id", "wall_time_s", "tokens_per_s", "speedup", "acceptance_rate", "mean_accepted_per_step",
            "matches_baseline", "first_divergence", "new_tokens", "times", "baseline_times", "params", "lossy",
            "sizing", "steps", "method_extra")
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
def compare(inp: CompareInput, store=None, progress: Progress = None, sources: dict[str, str] | None = None,
            prompt_ids: list[int] | None = None) -> dict:
    """Run every method in ``inp.methods`` on one prompt against the same baseline; store each run
    (linked to one task) and return the comparison: rows per method in the order asked, task id,
    settings, hardware and versions. ``sources`` relabels where given parameters came from;
    ``prompt_ids``: the prompt's ids as another engine got them (default: the target's tokenizer's).

    KeyboardInterrupt leaves the finished methods stored, marks the task unfinished with what is left,
    and is re-raised.
    """
    store = store if store is not None else Store()
    methods = list(dict.fromkeys(inp.methods))
    candidates, not_run = resolve_candidates(methods, inp.params, store)
    for cand in candidates:
        if sources and cand.method in sources and cand.source == "given":
            cand.source = sources[cand.method]
    heads_path = medusa_heads_for(store, inp.target, inp.medusa_heads) if "medusa" in methods else None
    task_id = store.create_task(task_request(inp, methods), "compare", methods)
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
        prepared = prepare(inp, methods, heads_path, progress, store=store)
        for method, reason in prepared.unavailable.items():
            if method in methods and method not in rows:
                mark_not_run(method, reason)
        ctx = prepared.ctx
        prompt_ids = checked_prompt_ids(inp, ctx, inp.prompt, prompt_ids)  # fits the context, before measuring
        settings = generation_settings(inp, ctx)
        common = common_settings(inp, heads_path)
        # parameters not given or saved are sized to this machine (tools.bench.sizing), each with its reason
        sizings = size_candidates([c for c in candidates if c.method not in rows], inp.params, store, ctx,
                                  progress=progress)

        def finished(cand: Candidate, timed: dict) -> None:
            rec = make_record(inp, inp.prompt, ctx, prompt_ids, settings, cand, timed, heads_path)
            rec.task_id, rec.settings_key = task_id, run_key(cand.method, rec.params, inp.prompt, common)
            rec.sizing = sizings[cand.method].reasons() if cand.method in sizings else None
            rec.run_id = store.add_run(rec.to_store())
            record = rec.to_store()
            records[cand.method] = record
            rows[cand.method] = row_from_record(record, cand, inp.target, heads_path)
            store.update_task(task_id, done=[cand.method], run_ids=[record["run_id"]])
            if progress:
                progress(f"{cand.method}: stored as run {record['run_id']}")

        measure_candidates(ctx, prompt_ids, settings, [c for c in candidates if c.method not in rows], inp.repeats,
                           inp.warmup, inp.peers, finished, lambda cand, reason: mark_not_run(cand.method, reason),
                           progress)
    except BaseException as exc:
        end_stopped_task(store, task_id, exc, [m for m in methods if m not in rows], list(records))
        raise
    store.update_task(task_id, status="done")
    return comparison(inp, task_id, ctx, settings, heads_path, [rows[m] for m in methods if m in rows],
                      {m: records[m] for m in methods if m in records}, prompt_ids)


def task_request(inp: CompareInput, methods: list[str]) -> str:
    """A compare task's request line: the methods, the engine when it is not transformers, the prompt."""
    engine = f" on {inp.backend}" if inp.backend != "transformers" else ""
    return f"compare {', '.join(methods)}{engine} on {short(inp.prompt)!r}"


def short(prompt: str, width: int = 60) -> str:
    """A prompt cut to ``width`` characters for a task's request line."""
    return prompt if len(prompt) <= width else prompt[:width - 3] + "..."


def end_stopped_task(store, task_id: int, exc: BaseException, left: list[str], finished: list[str]) -> None:
    """Record why a task stopped early: unfinished on Ctrl-C (with what finished), else failed."""
    if isinstance(exc, KeyboardInterrupt):
        store.update_task(task_id, status="unfinished", left=left,
                          note=f"{interruption(exc)}; finished: {', '.join(finished) or 'nothing'}")
    else:
        store.update_task(task_id, status="failed", left=left, note=f"stopped by an error: {exc}")


def comparison(inp: CompareInput, task_id: int, ctx: MethodContext, settings: GenerationSettings,
               heads_path: str | None, rows: list[dict], records: dict[str, dict],
               prompt_ids: list[int] | None = None) -> dict:
    """compare's result: the rows in the order asked, the run ids and the shared figures."""
    any_record = next(iter(records.values()), None) or {}
    return {
        "task_id": task_id,
        "backend": inp.backend,
        "prompt": inp.prompt,
        "target": inp.target,
        "draft": ctx.draft.ref if ctx.draft is not None else None,
        "medusa_heads": heads_path,
        "dtype": ctx.target.dtype,
        "settings": settings.model_dump(),
        "repeats": inp.repeats,
        "rows": rows,
        "run_ids": [r["run_id"] for r in records.values()],
        "run_ids_by_method": {m: r["run_id"] for m, r in records.items()},
        "not_run": {r["method"]: r["reason"] for r in rows if r.get("status") == "not run"},
        "recommended": recommended(rows),
        "peers": any_record.get("peers") or {},
        "baseline_wall_time_s": any_record.get("baseline_wall_time_s"),
        "baseline_tokens_per_s": any_record.get("baseline_tokens_per_s"),
        "hardware": measure.hardware_info(ctx.target.device),
        "versions": measure.versions(inp.backend),
        "prompt_ids": prompt_ids,
    }


def recommended(rows: list[dict]) -> dict:
    """The method compare recommends on this prompt and machine (tools.bench.summary.recommend): the fastest
    measured row that was lossless and faster than plain decoding, else the baseline."""
    return recommend({r["method"]: {"speedup": r.get("speedup"), "prompts": 1, "lossless": int(lossless(r)),
                                    "mean_accepted_per_step": r.get("mean_accepted_per_step")}
                      for r in rows if r.get("status") == "measured"})


def compare_backends(inp: CompareInput, backends: list[str], store=None, progress: Progress = None) -> dict:
    """:func:`compare` on each engine in ``backends``, one after another (each engine's models freed before
    the next one's load), every engine on the first one's prompt ids. Returns each engine's comparison
    under ``by_backend`` and one list of ``rows``, each with its ``backend``: every speedup is against
    that engine's own baseline, and tokens/s are absolute, so the engines compare directly."""
    backends = list(dict.fromkeys(backends))
    unknown = [b for b in backends if b not in BACKENDS]
    if unknown or not backends:
        raise ParameterError(f"unknown backend(s): {', '.join(unknown) or 'none given'}",
                             hint=f"choose from: {', '.join(BACKENDS)}")
    store = store if store is not None else Store()
    by_backend: dict[str, dict] = {}
    prompt_ids = None
    for backend in backends:
        if by_backend:
            release_models()  # one engine's models in memory at a time
        if progress:
            progress(f"engine {backend}")
        result = compare(inp.model_copy(update={"backend": backend}), store, progress, prompt_ids=prompt_ids)
        prompt_ids = result["prompt_ids"] if prompt_ids is None else prompt_ids
        by_backend[backend] = result
    rows = [{**row, "backend": b, "baseline_tokens_per_s": r.get("baseline_tokens_per_s")}
            for b, r in by_backend.items() for row in r["rows"]]
    return {"backends": backends, "by_backend": by_backend, "rows": rows, "prompt": inp.prompt,
            "prompt_ids": prompt_ids, "target": inp.target, "settings": next(iter(by_backend.values()))["settings"],
            "repeats": inp.repeats, "task_ids": [r["task_id"] for r in by_backend.values()],
            "run_ids": [i for r in by_backend.values() for i in r["run_ids"]],
            "not_run": {f"{b}/{m}": why for b, r in by_backend.items() for m, why in r["not_run"].items()},
            "peers": {b: r["peers"] for b, r in by_backend.items()},
            "hardware": next(iter(by_backend.values()))["hardware"],
            "versions": {k: v for r in by_backend.values() for k, v in r["versions"].items()}}


def make_record(inp: BaseModel, prompt: str, ctx: MethodContext, prompt_ids: list[int], settings: GenerationSettings,
                cand: Candidate, timed: dict, heads_path: str | None) -> RunRecord:
    """The run record of one finished candidate on ``prompt`` (every figure from ``timed``), not stored
    yet; ``inp`` is the compare, bench or tune input the candidate was measured with."""
    params = cand.params.model_dump()
    shared = {name: getattr(inp, name, None) for name in MeasureOptions.model_fields}
    shared.update(medusa_heads=heads_path)
    run_inp = RunInput(**shared, method=cand.method, prompt=prompt, params=params, peers=getattr(inp, "peers", False))
    record = record_from(run_inp, ctx, prompt_ids, settings, params, timed)
    record.params_source = cand.source
    record.training_required = training_text(cand.method, inp.target, heads_path)
    record.draft_required = draft_text(cand.method, record.draft)
    if METHODS[cand.method].needs_heads:
        record.medusa_heads = heads_path
    return record


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
    if "target" in update and inp.self_draft:
        update["draft"] = update["target"]  # --draft self-q4: the saved target's own copy
    return inp.model_copy(update=update) if update else inp


# the agent's compare tool: registered with tool("compare_methods", CompareInput)(compare_tool) in a module
# listed in tools.agent_tools.registry.TOOL_MODULES; ``ctx`` is a tools.agent_tools.registry.ToolContext
def compare_tool(inp: CompareInput, ctx) -> dict:
    """The compare_methods tool's work (tools.agent_tools.run_tool registers it): ``inp`` with the
    settings saved in memory, compared and stored."""
    inp = with_saved_settings(inp, ctx.store)
    result = compare(inp, store=ctx.store, progress=ctx.progress)
    result["source"] = f"measured now on this machine; stored as the runs of task {result['task_id']}"
    return result
