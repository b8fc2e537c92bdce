"""Evaluate methods over a prompt set, Spec-Bench style: per-category and overall speedup and mean
accepted tokens per step, with transformers' peers measured in the same run when asked.

A prompt file is JSONL with ``question_id``, ``category`` and ``prompt`` per line (the shipped set
is prompts/demo_prompts.jsonl). Every stored record carries a ``settings_key`` (memory.settings_key
of the method, its parameters, the models, dtype and generation settings, and the prompt), so a
rerun skips each prompt and method already measured with identical settings: an interrupted
benchmark resumes where it stopped, and a finished one is summarised again without loading a model.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from pathlib import Path

from pydantic import Field

from tools import models
from tools.bench import protocol as measure
from tools.bench.compare import (Candidate, common_settings, generation_settings, make_record, measure_candidates,
                           medusa_heads_for, prepare, resolve_candidates, run_key)
from tools.errors import ParameterError
from tools.bench.run import PEERS_DESCRIPTION, MeasureOptions, Method, prompt_ids_for

BENCH_METHODS = ["draft", "medusa", "lookahead", "ngram"]


def default_prompts_path() -> Path:
    """The prompt set shipped with specpilot (package data of ``prompts``)."""
    return Path(__file__).resolve().parents[2] / "prompts" / "demo_prompts.jsonl"


class BenchInput(MeasureOptions):
    """A prompt set, the methods to measure on it, and the settings they all share."""

    prompts: str | None = Field(None, description="JSONL prompt file (default: the shipped demo prompts)")
    category: str | None = Field(None, description="only this category")
    limit: int | None = Field(None, ge=1, description="at most this many prompts per category")
    methods: list[Method] = Field(default_factory=lambda: list(BENCH_METHODS), min_length=1)
    params: dict[str, dict] = Field(default_factory=dict, description="each method's own parameters")
    peers: bool = Field(False, description=PEERS_DESCRIPTION)


def load_prompt_set(path: str | Path | None, category: str | None = None, limit: int | None = None) -> list[dict]:
    """Read a JSONL prompt set; keep ``category`` only and at most ``limit`` prompts per category.

    Each row comes back with ``question_id`` (the line number when missing), ``category`` and ``prompt``.
    """
    file = Path(path).expanduser() if path else default_prompts_path()
    if not file.is_file():
        raise ParameterError(f"prompt file {file} does not exist",
                             hint="pass --prompts FILE.jsonl with question_id, category and prompt per line")
    rows, per_category = [], defaultdict(int)
    for number, line in enumerate(file.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ParameterError(f"{file} line {number} is not JSON: {exc.msg}", hint="one JSON object per line") from None
        if not isinstance(row, dict) or not isinstance(row.get("prompt"), str) or not row["prompt"].strip():
            raise ParameterError(f"{file} line {number} has no 'prompt' text",
                                 hint="each line needs question_id, category and prompt")
        row = {"question_id": row.get("question_id", number), "category": str(row.get("category") or "uncategorised"),
               "prompt": row["prompt"]}
        if category is not None and row["category"] != category:
            continue
        if limit is not None and per_category[row["category"]] >= limit:
            continue
        per_category[row["category"]] += 1
        rows.append(row)
    if not rows:
        raise ParameterError(f"no prompts selected from {file}" + (f" in category {category!r}" if category else ""),
                             hint="check --category against the file's categories")
    return rows


def step_name(row: dict, method: str) -> str:
    """A task step: one prompt and one method."""
    return f"q{row['question_id']} {method}"


def bench(inp: BenchInput, store=None, progress=None) -> dict:
    """Measure every method on every selected prompt (skipping those already measured with identical
    settings), store each run linked to one task, and return the per-category and overall summary.

    KeyboardInterrupt leaves finished measurements stored and the task unfinished with what is left.
    """
    if store is None:
        from memory import Store

        store = Store()
    prompts = load_prompt_set(inp.prompts, inp.category, inp.limit)
    methods = list(dict.fromkeys(inp.methods))
    candidates, not_run = resolve_candidates(methods, inp.params, store)
    heads_path = medusa_heads_for(store, inp.target, inp.medusa_heads) if "medusa" in methods else None
    common = common_settings(inp, heads_path)
    source = str(Path(inp.prompts).expanduser() if inp.prompts else default_prompts_path())
    plan = [step_name(row, m) for row in prompts for m in methods]
    task_id = store.create_task(f"bench {', '.join(methods)} on {len(prompts)} prompts from {Path(source).name}",
                                "bench", plan)
    for method, reason in not_run.items():
        store.update_task(task_id, note=f"{method}: not run: {reason}")
    records: list[dict] = []
    measured = reused = 0
    prepared = None
    try:
        for i, row in enumerate(prompts, 1):
            def say(text: str, i=i, row=row) -> None:
                if progress:
                    progress(f"[{i}/{len(prompts)}] {row['category']} q{row['question_id']}: {text}")

            todo: list[Candidate] = []
            for cand in candidates:
                key = run_key(cand.method, cand.params.model_dump(), row["prompt"], common)
                found = store.find_run_by_key(key)
                if found is not None:
                    # a run stored by compare or tune with identical settings counts; it is summarised here
                    # under this prompt set's category
                    records.append({**found, "category": found.get("category") or row["category"],
                                    "question_id": found.get("question_id", row["question_id"])})
                    reused += 1
                    store.update_task(task_id, done=[step_name(row, cand.method)], run_ids=[found["run_id"]])
                elif prepared is None or cand.method not in prepared.unavailable:
                    todo.append(cand)
            if todo and prepared is None:
                prepared = prepare(inp, methods, heads_path, progress)
                for method, reason in prepared.unavailable.items():
                    if method in methods:
                        not_run[method] = reason
                        store.update_task(task_id, note=f"{method}: not run: {reason}")
                todo = [c for c in todo if c.method not in prepared.unavailable]
            skipped = [step_name(row, m) for m in not_run]
            if skipped:
                store.update_task(task_id, left=[s for s in store.get_task(task_id)["left"] if s not in skipped])
            if not todo:
                continue
            ctx = prepared.ctx
            prompt_ids = prompt_ids_for(ctx.target.tokenizer, row["prompt"], inp.chat)
            settings = generation_settings(inp, ctx)

            def finished(cand: Candidate, timed: dict, row=row, prompt_ids=prompt_ids, settings=settings) -> None:
                nonlocal measured
                record = make_record(_PromptInput(inp, row["prompt"]), ctx, prompt_ids, settings, cand, timed, heads_path)
                record.update(task_id=task_id, category=row["category"], question_id=row["question_id"],
                              prompt_set=Path(source).name,
                              settings_key=run_key(cand.method, record["params"], row["prompt"], common))
                record["run_id"] = store.add_run(record)
                records.append(record)
                measured += 1
                store.update_task(task_id, done=[step_name(row, cand.method)], run_ids=[record["run_id"]])

            def failed(cand: Candidate, reason: str, row=row) -> None:
                store.update_task(task_id, left=[s for s in store.get_task(task_id)["left"]
                                                 if s != step_name(row, cand.method)],
                                  note=f"q{row['question_id']} {cand.method}: not run: {reason}")

            measure_candidates(ctx, prompt_ids, settings, todo, inp.repeats, inp.warmup, inp.peers, finished,
                               failed, say)
    except KeyboardInterrupt:
        left = store.get_task(task_id)["left"]
        store.update_task(task_id, status="unfinished",
                          note=f"interrupted by the user with {len(left)} step(s) left; rerun the same command to resume")
        raise
    except BaseException as exc:
        store.update_task(task_id, status="failed", note=f"stopped by an error: {exc}")
        raise
    store.update_task(task_id, status="done")
    hardware = (records[0].get("hardware") if records else None) or {}
    return {
        "task_id": task_id,
        "prompt_set": source,
        "prompts": len(prompts),
        "methods": methods,
        "measured": measured,
        "reused": reused,
        "not_run": not_run,
        "run_ids": [r["run_id"] for r in records],
        "summary": summarise(records),
        "hardware": hardware,
        "dtype": records[0].get("dtype") if records else None,
        "settings": {k: v for k, v in common.items() if k not in ("medusa_heads",)},
        "versions": measure.versions(),
    }


class _PromptInput:
    """A bench input seen as one prompt's input (what make_record reads)."""

    def __init__(self, inp: BenchInput, prompt: str):
        self._inp, self.prompt = inp, prompt

    def __getattr__(self, name: str):
        return getattr(self._inp, name)


# ---------------------------------------------------------------------------- summary
def method_stats(runs: list[dict]) -> dict:
    """Pooled figures of one method over several prompts.

    speedup = total baseline time / total method time (each prompt's baseline timed beside the method);
    speedup_mean/min/max are over the per-prompt speedups; mean accepted tokens per step = total new
    tokens / total target forward passes; acceptance = total accepted / total drafted.
    """
    base = sum(r["baseline_wall_time_s"] for r in runs)
    wall = sum(r["wall_time_s"] for r in runs)
    per_prompt = [r["speedup"] for r in runs if r.get("speedup") is not None]
    forwards = sum((r.get("steps") or 0) + 1 for r in runs)
    drafted = sum(r.get("tokens_drafted") or 0 for r in runs)
    accepted = sum(r.get("tokens_accepted") or 0 for r in runs)
    compared = [r for r in runs if r.get("matches_baseline") is not None]
    return {
        "prompts": len(runs),
        "speedup": base / wall if wall else None,
        "speedup_mean": statistics.mean(per_prompt) if per_prompt else None,
        "speedup_min": min(per_prompt) if per_prompt else None,
        "speedup_max": max(per_prompt) if per_prompt else None,
        "mean_accepted_per_step": sum(r.get("new_tokens") or 0 for r in runs) / forwards if forwards else None,
        "acceptance_rate": accepted / drafted if drafted else None,
        "tokens_per_s": sum(r.get("new_tokens") or 0 for r in runs) / wall if wall else None,
        "identical": sum(1 for r in compared if r["matches_baseline"]),
        "compared": len(compared),
        "run_ids": [r["run_id"] for r in runs if r.get("run_id")],
    }


def peer_stats(runs: list[dict]) -> dict[str, dict]:
    """Pooled speedup of each transformers peer, one measurement per prompt (the first record carrying it)."""
    seen: dict[str, dict[str, dict]] = defaultdict(dict)  # peer -> prompt -> (peer row, baseline time)
    for r in runs:
        for name, row in (r.get("peers") or {}).items():
            seen[name].setdefault(str(r.get("prompt")), {"peer": row, "baseline": r["baseline_wall_time_s"]})
    out = {}
    for name, by_prompt in seen.items():
        base = sum(v["baseline"] for v in by_prompt.values())
        wall = sum(v["peer"]["wall_time_s"] for v in by_prompt.values())
        out[name] = {"prompts": len(by_prompt), "speedup": base / wall if wall else None,
                     "identical": sum(1 for v in by_prompt.values() if v["peer"].get("matches_baseline"))}
    return out


def summarise(runs: list[dict]) -> dict:
    """{"categories": {category: {label: stats}}, "overall": {label: stats}, "peers": {...}} for bench runs
    (records with a ``category``), labels being the methods (peers under "peers")."""
    by_cat: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    overall: dict[str, list] = defaultdict(list)
    for r in runs:
        by_cat[str(r.get("category"))][r["method"]].append(r)
        overall[r["method"]].append(r)
    return {
        "categories": {c: {m: method_stats(rs) for m, rs in ms.items()} for c, ms in by_cat.items()},
        "overall": {m: method_stats(rs) for m, rs in overall.items()},
        "peers": {"categories": {c: peer_stats([r for rs in ms.values() for r in rs]) for c, ms in by_cat.items()},
                  "overall": peer_stats(runs)},
    }
