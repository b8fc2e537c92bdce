"""Tuning sweeps: measure a method's parameters on a few prompts on this machine and recommend the best.

- draft: K = 2, 3, 4, 6, 8 fixed and adaptive K (starting at 4), the other settings as saved or default;
- medusa: trees chain3, cpu8, cpu16 (and mc_sim_7b_63 on a GPU);
- lookahead: a small W/N/G grid around the setting run and compare would use (tools.bench.sizing.size_params
  over this machine's forward-pass cost curve: the stored one, or measured now and stored, as they do).

Every setting is timed beside the same baseline on each prompt (tools.bench.run.measure_candidates) and
stored as a run of a ``tune_sweep`` task, so the guidance tool can cite measured sweeps
(:func:`best_measured_params`). The recommendation is saved to memory only when the user agrees.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Literal

from pydantic import Field

from memory import Store
from prompts.spec_bench import FIT_PATH
from tools.bench import protocol as measure
from tools.bench.compare import common_settings, make_record, own_params, run_key
from tools.bench.context import checked_prompt_ids, generation_settings, medusa_heads_for, prepare
from tools.bench.machine_cost import MachineCost, machine_cost
from tools.bench.inputs import MeasureOptions
from tools.bench.run import Candidate, measure_candidates
from tools.bench.sizing import size_params
from tools.bench.suite import load_prompt_set
from tools.bench.summary import method_stats
from tools.engine.lookahead import LookaheadParams
from tools.engine.methods import ACCELERATED, parse_params
from tools.errors import ParameterError, interruption

SWEEP_KIND = "tune_sweep"
DRAFT_KS = (2, 3, 4, 6, 8)
ADAPTIVE_START_K = 4
MEDUSA_TREES_CPU = ("chain3", "cpu8", "cpu16")
MEDUSA_TREES_GPU = ("chain3", "cpu8", "cpu16", "mc_sim_7b_63")
SWEPT_FIELDS = {"draft": ("k", "adaptive_k", "k_max"), "medusa": ("tree",), "lookahead": ("window", "ngram", "guess")}
TUNABLE = tuple(m for m in ACCELERATED if m in SWEPT_FIELDS)  # the methods with a built-in sweep
TunableName = Literal[TUNABLE]  # type: ignore[valid-type]  (the schema's enum, built from the method table)
LOOKAHEAD_GRID_SIZE = 6
DEFAULT_TUNE_PROMPTS = 3


class TuneInput(MeasureOptions):
    """The method to sweep, the prompts to sweep it on, and the settings every measurement shares."""

    method: TunableName
    prompts: str | None = Field(None, description="JSONL prompt file (default: the fit half of the shipped "
                                                  "Spec-Bench prompts; never tune on what you evaluate on)")
    category: str | None = None
    limit: int = Field(DEFAULT_TUNE_PROMPTS, ge=1, le=100, description="prompts to sweep on (spread over categories)")
    grid: list[dict] | None = Field(None, description="settings to measure instead of the built-in sweep")

    @property
    def peers(self) -> bool:
        return False


# ---------------------------------------------------------------------------- grids
def label_for(method: str, params: dict) -> str:
    """A short name for one swept setting."""
    if method == "draft":
        return f"K={params.get('k')}" + (" adaptive" if params.get("adaptive_k") else "")
    if method == "medusa":
        tree = params.get("tree")
        return f"tree={tree}" if isinstance(tree, str) else f"tree={len(tree)} nodes"
    if method == "lookahead":
        return f"W={params.get('window')} N={params.get('ngram')} G={params.get('guess')}"
    return json.dumps(params, sort_keys=True)


def draft_grid() -> list[dict]:
    """K = 2, 3, 4, 6, 8 fixed, and adaptive K starting at 4."""
    return [{"k": k, "adaptive_k": False} for k in DRAFT_KS] + [{"k": ADAPTIVE_START_K, "adaptive_k": True}]


def medusa_grid(on_gpu: bool) -> list[dict]:
    """The trees sized for a CPU (and upstream's 64-node tree on a GPU)."""
    return [{"tree": t} for t in (MEDUSA_TREES_GPU if on_gpu else MEDUSA_TREES_CPU)]


def lookahead_grid(curve: dict[int, float] | None) -> list[dict]:
    """The setting run and compare would use on this cost curve first (tools.bench.sizing.size_params;
    the defaults without a curve), then neighbours (W±1, N±1, 2W; G = W // 2 and its prompt-lookup
    drafts), all valid and distinct."""
    machine = MachineCost("cpu", "this machine", curve, "the cost curve of the sweep") if curve else None
    best = LookaheadParams(**size_params("lookahead", machine).params)
    w, n = best.window, best.ngram
    shapes = [(w, n), (w + 1, n), (w - 1, n), (w, n + 1), (w, n - 1), (2 * w, n), (w + 2, n)]
    grid: list[dict] = []
    for width, ngram in shapes:
        if width < 1 or ngram < 2:
            continue
        params = {"window": width, "ngram": ngram, "guess": max(1, width // 2), "prompt_lookup": best.prompt_lookup}
        try:
            LookaheadParams(**params).check()
        except ParameterError:
            continue
        if params not in grid:
            grid.append(params)
        if len(grid) == LOOKAHEAD_GRID_SIZE:
            break
    return grid


def sized_lookahead_params(store, target, progress=None, allow_measure: bool = True) -> tuple[dict, str]:
    """Lookahead W/N/G and the prompt-lookup drafts as run and compare size them for a loaded target
    (tools.bench.sizing.size_params over tools.bench.machine_cost.machine_cost: the stored curve, else
    measured now and stored, else the conservative CPU curve), with the reasoning."""
    machine = machine_cost(store, target, allow_measure=allow_measure, progress=progress)
    sizing = size_params("lookahead", machine)
    params = {k: sizing.params[k] for k in ("window", "ngram", "guess", "prompt_lookup")}
    return params, "; ".join(sizing.lines())


def pick_prompts(path: str | None, category: str | None, limit: int) -> list[dict]:
    """``limit`` prompts taken in turn from each category (so a sweep sees more than one kind of text);
    without ``path``, from the fit half of the Spec-Bench prompts (prompts.spec_bench: the eval half is
    what benchmarks measure, so a sweep never sees it)."""
    rows = load_prompt_set(path or FIT_PATH, category)
    by_cat: dict[str, list[dict]] = {}
    for row in rows:
        by_cat.setdefault(row["category"], []).append(row)
    picked: list[dict] = []
    while len(picked) < limit and any(by_cat.values()):
        for cat in list(by_cat):
            if by_cat[cat] and len(picked) < limit:
                picked.append(by_cat[cat].pop(0))
    return picked


# ---------------------------------------------------------------------------- sweep
def tune(inp: TuneInput, store=None, progress=None, confirm: Callable[[str], bool] | None = None) -> dict:
    """Sweep the method's parameters, store every measurement, and recommend the best measured setting.

    ``confirm(question)`` is asked before saving the recommendation to memory; without it nothing is
    saved. Returns the table (``rows``, best first), ``best``, ``recommendation``, ``saved`` and the
    sweep's ``task_id``.
    """
    store = store if store is not None else Store()
    prompts = pick_prompts(inp.prompts, inp.category, inp.limit)
    saved = store.get_params(inp.method) or {}
    base = {k: v for k, v in own_params(inp.method, saved).items() if k not in SWEPT_FIELDS[inp.method]}
    heads_path = medusa_heads_for(store, inp.target, inp.medusa_heads) if inp.method == "medusa" else None
    prepared = prepare(inp, [inp.method], heads_path, progress, store=store)
    if inp.method in prepared.unavailable:
        raise ParameterError(f"cannot tune {inp.method}: {prepared.unavailable[inp.method]}",
                             hint="fix that first, then run the sweep again")
    ctx = prepared.ctx
    grid = inp.grid if inp.grid is not None else default_grid(inp.method, store, ctx, progress)
    candidates = sweep_candidates(inp.method, base, grid)
    plan = [f"q{row['question_id']} {c.label}" for row in prompts for c in candidates]
    task_id = store.create_task(f"tune {inp.method} on {len(prompts)} prompts: {', '.join(c.label for c in candidates)}",
                                SWEEP_KIND, plan)
    by_label: dict[str, list[dict]] = {c.label: [] for c in candidates}
    failures: dict[str, str] = {}
    try:
        for i, row in enumerate(prompts, 1):
            sweep_prompt(inp, store, task_id, ctx, heads_path, row, [c for c in candidates if c.label not in failures],
                         by_label, failures, lambda text, i=i: progress and progress(f"[prompt {i}/{len(prompts)}] {text}"))
    except KeyboardInterrupt as exc:
        store.update_task(task_id, status="unfinished", note=interruption(exc))
        raise
    except BaseException as exc:
        store.update_task(task_id, status="failed", note=f"stopped by an error: {exc}")
        raise
    store.update_task(task_id, status="done")
    rows = sweep_rows(inp.method, candidates, by_label, failures)
    best = next((r for r in rows if r["eligible"]), None)
    hardware = measure.hardware_info(ctx.target.device)
    result = {"task_id": task_id, "method": inp.method, "target": inp.target, "prompts": len(prompts),
              "hardware": hardware, "dtype": ctx.target.dtype, "max_new_tokens": inp.max_new_tokens,
              "rows": rows, "best": best, "saved": False, "versions": measure.versions()}
    result["recommendation"] = recommendation(inp.method, best, hardware["name"], len(prompts))
    if best is not None:
        merged = {**saved, **best["params"]}
        result["would_save"] = merged
        question = f"save {best['label']} as your {inp.method} parameters? ({json.dumps(best['params'], sort_keys=True)})"
        if confirm is not None and confirm(question):
            # merged into what is saved at this moment (not when the sweep began), in one transaction
            result["would_save"] = store.update_params(inp.method, best["params"])
            result["saved"] = True
    return result


def sweep_candidates(method: str, base: dict, grid: list[dict]) -> list[Candidate]:
    """One candidate per setting of the grid (over the saved, unswept parameters), each named by its setting."""
    candidates = []
    for setting in grid:
        params = parse_params(method, {**base, **setting})
        candidates.append(Candidate(label_for(method, params.model_dump()), method, params, "sweep"))
    if len({c.label for c in candidates}) != len(candidates):
        raise ParameterError("the sweep lists the same setting twice", hint="give each setting once")
    return candidates


def sweep_prompt(inp: TuneInput, store, task_id: int, ctx, heads_path: str | None, row: dict,
                 candidates: list[Candidate], by_label: dict[str, list[dict]], failures: dict[str, str], say) -> None:
    """Time every setting beside the baseline on one prompt; store each run as a run of the sweep."""
    prompt_ids = checked_prompt_ids(inp, ctx, row["prompt"])  # fits the context, before any measuring
    settings = generation_settings(inp, ctx)
    common = common_settings(inp, heads_path)

    def finished(cand: Candidate, timed: dict) -> None:
        rec = make_record(inp, row["prompt"], ctx, prompt_ids, settings, cand, timed, heads_path)
        rec.task_id, rec.category, rec.question_id = task_id, row["category"], row["question_id"]
        rec.sweep = {"task_id": task_id, "label": cand.label}
        rec.settings_key = run_key(cand.method, rec.params, row["prompt"], common)
        rec.run_id = store.add_run(rec.to_store())
        record = rec.to_store()
        by_label[cand.label].append(record)
        store.update_task(task_id, done=[f"q{row['question_id']} {cand.label}"], run_ids=[record["run_id"]])

    def failed(cand: Candidate, reason: str) -> None:
        failures[cand.label] = reason
        store.update_task(task_id, note=f"{cand.label} on q{row['question_id']}: not run: {reason}")

    measure_candidates(ctx, prompt_ids, settings, candidates, inp.repeats, inp.warmup, False, finished, failed, say)


def default_grid(method: str, store, ctx, progress=None) -> list[dict]:
    """The built-in sweep for a method on this hardware."""
    if method == "draft":
        return draft_grid()
    if method == "medusa":
        return medusa_grid(str(ctx.target.device).startswith("cuda"))
    return lookahead_grid(machine_cost(store, ctx.target, progress=progress).curve)


def sweep_rows(method: str, candidates: list[Candidate], by_label: dict[str, list[dict]],
               failures: dict[str, str]) -> list[dict]:
    """One row per setting with its pooled figures, best measured speedup first.

    A setting is eligible for the recommendation when it ran on every prompt and its output matched
    the baseline on every prompt (or the run sampled, where outputs are not compared token by token).
    """
    counts = {len(v) for v in by_label.values() if v}
    prompts = max(counts) if counts else 0
    rows = []
    for cand in candidates:
        runs = by_label[cand.label]
        if not runs:
            rows.append({"label": cand.label, "params": cand.params.model_dump(), "status": "not run",
                         "reason": failures.get(cand.label), "eligible": False})
            continue
        stats = method_stats(runs)
        exact = stats["identical"] == stats["compared"]
        rows.append({"label": cand.label, "params": cand.params.model_dump(), "status": "measured",
                     "reason": failures.get(cand.label), **stats,
                     "eligible": exact and len(runs) == prompts and cand.label not in failures})
    return sorted(rows, key=lambda r: (r["status"] != "measured", -(r.get("speedup") or 0.0)))


def recommendation(method: str, best: dict | None, hardware: str, prompts: int) -> str:
    """A sentence naming the best measured setting and what it measured, or why there is none."""
    if best is None:
        return f"no {method} setting ran on every prompt with output identical to the baseline: nothing to recommend"
    text = (f"best measured on {hardware}: {best['label']} with a speedup of {best['speedup']:.2f}x over "
            f"{prompts} prompt(s) ({best['mean_accepted_per_step']:.2f} tokens per step; runs "
            f"{', '.join(best['run_ids'][:5])})")
    if best["speedup"] < 1.0:
        text += f"; no {method} setting was faster than plain generation here"
    return text


def best_measured_params(store, method: str, target: str, hardware_name: str) -> dict | None:
    """The best setting of the newest tuning sweep of ``method`` on ``target`` on this hardware.

    Returns None when there is no sweep, else {"params", "label", "speedup", "mean_accepted_per_step",
    "prompts", "run_ids", "task_id", "measured_at", "source"} with figures pooled over the sweep's
    prompts (only settings measured on every prompt with output identical to the baseline count).
    """
    sweeps: dict[int, list[dict]] = {}
    for r in store.find_runs(method=method, target=target):
        sweep = r.get("sweep")
        name = str((r.get("hardware") or {}).get("name") or "")
        if isinstance(sweep, dict) and (name == hardware_name or name.startswith(hardware_name)):
            sweeps.setdefault(int(sweep["task_id"]), []).append(r)
    if not sweeps:
        return None
    task_id = max(sweeps)
    groups: dict[str, list[dict]] = {}
    for r in sweeps[task_id]:
        groups.setdefault(r["sweep"]["label"], []).append(r)
    prompts = max(len(v) for v in groups.values())
    best = None
    for label, runs in groups.items():
        stats = method_stats(runs)
        if len(runs) < prompts or stats["identical"] != stats["compared"] or stats["speedup"] is None:
            continue
        if best is None or stats["speedup"] > best["speedup"]:
            best = {"params": runs[0]["params"], "label": label, "speedup": stats["speedup"],
                    "mean_accepted_per_step": stats["mean_accepted_per_step"], "prompts": len(runs),
                    "run_ids": stats["run_ids"], "task_id": task_id,
                    "measured_at": max(r.get("created_at") or "" for r in runs)}
    if best is not None:
        best["source"] = (f"measured by the tuning sweep (task {task_id}) on {hardware_name}: {best['label']} gave "
                          f"{best['speedup']:.2f}x over {best['prompts']} prompt(s)")
    return best
