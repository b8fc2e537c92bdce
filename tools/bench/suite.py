"""Evaluate methods over a prompt set, Spec-Bench style: per-category and overall speedup and mean
accepted tokens per step, with transformers' peers measured in the same run when asked.

A prompt file is JSONL with ``question_id``, ``category`` and ``prompt`` per line (the default is
the eval half of the shipped Spec-Bench prompts, prompts/spec_bench_eval.jsonl: what is fitted or
tuned sees only the fit half). Each method's parameters are chosen as run and compare choose them,
field by field: given > saved in memory > sized to this machine's cost curve > default
(tools.bench.sizing), each with its source and reason in the stored run.

On each prompt the baseline is timed first and again after every method (the methods rotating one
place on from prompt to prompt), and each method is compared with the median of both: on a shared CPU
whose speed drifts over minutes, that is the baseline the methods ran beside, and how far apart the two
timings were is reported (``baseline_drift``) as the noise the figures carry.

Every stored record carries a ``settings_key`` (memory.settings_key of the method, its parameters,
the models, dtype and generation settings, and the prompt), so a rerun skips each prompt and method
already measured with identical settings: an interrupted benchmark resumes where it stopped. A
method whose parameters are all given or saved is found in memory without loading a model; one with
parameters left to the sizing needs the target loaded to read this machine's cost curve first.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import Field

from memory import Store
from prompts.spec_bench import EVAL_PATH, HALVES
from tools.bench import protocol as measure
from tools.bench.compare import common_settings, make_record, own_params, resolve_candidates, run_key
from tools.bench.context import (Prepared, checked_prompt_ids, generation_settings, medusa_heads_for, prepare,
                                 size_candidates)
from tools.bench.inputs import PEERS_DESCRIPTION, MeasureOptions
from tools.bench.prompt_sets import BOTH_HALVES, default_prompts_path, load_prompt_set, prompt_set_path
from tools.bench.run import Candidate, measure_candidates
from tools.bench.sizing import Sizing, fixed_params
from tools.bench.summary import auto_row, fit_vs_eval, method_stats, peer_stats, summarise
from tools.bench import auto
from tools.bench.context import backend_refusal
from tools.engine.methods import ACCELERATED, parse_params
from tools.engine.params import AUTO, RunMethodName
from tools.errors import ParameterError, interruption

__all__ = ["BENCH_METHODS", "BOTH_HALVES", "BenchInput", "bench", "bench_halves", "default_prompts_path",
           "load_prompt_set", "step_name", "method_stats", "peer_stats", "summarise"]

BENCH_METHODS = list(ACCELERATED)  # the default: every method that speeds decoding up


class BenchInput(MeasureOptions):
    """A prompt set, the methods to measure on it, and the settings they all share."""

    prompts: str | None = Field(None, description="JSONL prompt file, or 'fit' / 'eval' (the shipped Spec-Bench "
                                                  "halves; default: eval), or 'both' (the fit half, then the eval "
                                                  "half, with each method's figures side by side)")
    category: str | None = Field(None, description="only this category")
    limit: int | None = Field(None, ge=1, description="at most this many prompts per category")
    methods: list[RunMethodName] = Field(default_factory=lambda: list(BENCH_METHODS), min_length=1,
                                         description="methods to measure; auto: per prompt, the one predicted "
                                                     "fastest from the fit half's figures (its own row)")
    params: dict[str, dict] = Field(default_factory=dict, description="each method's own parameters")
    peers: bool = Field(False, description=PEERS_DESCRIPTION)
    fresh: bool = Field(False, description="measure every prompt and method again, reusing no run stored before this "
                                           "call (after a change to a method's code, say); a later call without it "
                                           "resumes from the runs this one stored")


def step_name(row: dict, method: str) -> str:
    """A task step: one prompt and one method."""
    return f"q{row['question_id']} {method}"


@dataclass
class _BenchRun:
    """The state of one bench call: what is stored, reused, measured and not run so far."""

    inp: BenchInput
    store: Store
    task_id: int
    methods: list[str]
    common: dict
    heads_path: str | None
    prompt_set: str
    not_run: dict[str, str]
    candidates: list[Candidate] = field(default_factory=list)
    records: list[dict] = field(default_factory=list)
    measured: int = 0
    reused: int = 0
    timed_prompts: int = 0  # prompts timed so far (each starts the methods' rotation one place on)
    prepared: Prepared | None = None
    sizings: dict[str, Sizing] = field(default_factory=dict)  # method -> its parameters' sources and reasons
    waiting: set[str] = field(default_factory=set)  # methods whose parameters wait for this machine's cost curve
    fresh_tasks: set[int] = field(default_factory=set)  # with inp.fresh: the tasks whose runs count (this call's)
    auto_from: list[str] = field(default_factory=list)  # with auto asked: the measured methods it picks among
    auto_fits: tuple | None = None  # ... and the fit figures it picks from (tools.bench.auto.fit_prompts), read once

    def settle(self) -> None:
        """Fix now the parameters of each method that needs no machine to know them (every field the
        sizing sets is given or saved: tools.bench.sizing.fixed_params), so that its stored runs are
        found before a model is loaded; the others wait for :meth:`load`, which sizes them. A method
        whose saved parameters do not fit together is not run (said why)."""
        kept = []
        for cand in self.candidates:
            if cand.method != "baseline":
                saved = own_params(cand.method, self.store.get_params(cand.method))
                try:
                    sizing = fixed_params(cand.method, self.inp.params.get(cand.method), saved)
                except ParameterError as exc:
                    self.not_run[cand.method] = f"saved parameters invalid: {exc.user_message()}"
                    self.store.update_task(self.task_id, note=f"{cand.method}: not run: {self.not_run[cand.method]}")
                    continue
                if sizing is None:
                    self.waiting.add(cand.method)
                else:
                    cand.params, cand.source = parse_params(cand.method, sizing.params), sizing.source
                    self.sizings[cand.method] = sizing
            kept.append(cand)
        self.candidates = kept

    def reuse_stored(self, row: dict, candidates: list[Candidate]) -> list[Candidate]:
        """Count the runs already stored with identical settings for this prompt (by compare, tune or an
        earlier bench; summarised here under this prompt set's category); return the candidates left
        (with those whose parameters are not sized yet, looked up again once they are)."""
        todo = []
        for cand in candidates:
            if cand.method in self.waiting:
                todo.append(cand)
                continue
            found = self.store.find_run_by_key(run_key(cand.method, cand.params.model_dump(), row["prompt"], self.common))
            if found is not None and not (self.inp.fresh and found.get("task_id") not in self.fresh_tasks):
                self.records.append({**found, "category": found.get("category") or row["category"],
                                     "question_id": found.get("question_id", row["question_id"])})
                self.reused += 1
                self.store.update_task(self.task_id, done=[step_name(row, cand.method)], run_ids=[found["run_id"]])
            elif self.prepared is None or cand.method not in self.prepared.unavailable:
                todo.append(cand)
        return todo

    def load(self, progress) -> None:
        """Load the models (once), noting the methods that cannot run here, and size the parameters left
        to this machine's cost curve (tools.bench.context.size_candidates: read from memory, else
        measured once and stored), as run and compare do."""
        self.prepared = prepare(self.inp, self.methods, self.heads_path, progress, store=self.store)
        for method, reason in self.prepared.unavailable.items():
            if method in self.methods:
                self.not_run[method] = reason
                self.store.update_task(self.task_id, note=f"{method}: not run: {reason}")
        unavailable = self.prepared.unavailable
        waiting = [c for c in self.candidates if c.method in self.waiting and c.method not in unavailable]
        if waiting:
            self.sizings.update(size_candidates(waiting, self.inp.params, self.store, self.prepared.ctx,
                                                progress=progress))
        self.waiting.clear()

    def prompt(self, row: dict, say, progress) -> None:
        """One prompt: reuse what is stored, load and size when something is left, measure the rest."""
        todo = self.reuse_stored(row, self.candidates)
        if todo and self.prepared is None:
            self.load(progress)
            todo = self.reuse_stored(row, todo)  # now sized: stored runs with these parameters count too
        self.drop_not_run(row)
        if todo:
            self.measure(row, todo, say)
        if self.auto_from:
            self.add_auto(row, say)

    def add_auto(self, row: dict, say) -> None:
        """auto's row for this prompt: the run of the method it picks (predicted from the fit half's figures,
        without this prompt's own), under the method name auto, with the reason."""
        measured = {r["method"]: r for r in self.records if r.get("prompt") == row["prompt"] and r["method"] in self.auto_from}
        picked = auto.choose(row["prompt"], list(measured), found=self.auto_fits)
        if picked is None:
            return
        self.records.append(auto_row(measured[picked.method], picked.method, picked.reason()))
        say(picked.reason())

    def drop_not_run(self, row: dict) -> None:
        """Take this prompt's steps of the methods not run off the task's plan."""
        skipped = [step_name(row, m) for m in self.not_run]
        if skipped:
            left = self.store.get_task(self.task_id)["left"]
            self.store.update_task(self.task_id, left=[s for s in left if s not in skipped])

    def skip(self, row: dict, todo: list[Candidate], reason: str, say) -> None:
        """Take this prompt's steps of ``todo`` off the task's plan, noting why it was not measured."""
        steps = {step_name(row, c.method) for c in todo}
        left = self.store.get_task(self.task_id)["left"]
        self.store.update_task(self.task_id, left=[s for s in left if s not in steps],
                               note=f"q{row['question_id']}: not run: {reason}")
        say(f"not run: {reason}")

    def measure(self, row: dict, todo: list[Candidate], say) -> None:
        """Time ``todo`` beside the baseline on one prompt; store each run as soon as it is finished."""
        inp, ctx = self.inp, self.prepared.ctx
        try:
            prompt_ids = checked_prompt_ids(inp, ctx, row["prompt"])  # fits the context, before any measuring
        except ParameterError as exc:  # one prompt too long for the model: skip it, measure the others
            self.skip(row, todo, exc.user_message(), say)
            return
        settings = generation_settings(inp, ctx)

        def finished(cand: Candidate, timed: dict) -> None:
            rec = make_record(inp, row["prompt"], ctx, prompt_ids, settings, cand, timed, self.heads_path)
            rec.task_id, rec.category, rec.question_id = self.task_id, row["category"], row["question_id"]
            rec.prompt_set = self.prompt_set
            rec.sizing = self.sizings[cand.method].reasons() if cand.method in self.sizings else None
            rec.settings_key = run_key(cand.method, rec.params, row["prompt"], self.common)
            rec.run_id = self.store.add_run(rec.to_store())
            record = rec.to_store()
            self.records.append(record)
            self.measured += 1
            self.store.update_task(self.task_id, done=[step_name(row, cand.method)], run_ids=[record["run_id"]])

        def failed(cand: Candidate, reason: str) -> None:
            left = self.store.get_task(self.task_id)["left"]
            self.store.update_task(self.task_id, left=[s for s in left if s != step_name(row, cand.method)],
                                   note=f"q{row['question_id']} {cand.method}: not run: {reason}")

        self.timed_prompts += 1
        measure_candidates(ctx, prompt_ids, settings, todo, inp.repeats, inp.warmup, self.peers_wanted(row), finished,
                           failed, say, bracket=True, rotate=self.timed_prompts - 1)

    def peers_wanted(self, row: dict) -> bool:
        """Whether transformers' peers are timed on this prompt: asked for, and not already stored with a
        run of it (the summary takes one measurement of each peer per prompt; a method measured again
        alone does not time them again)."""
        return self.inp.peers and not any(r.get("peers") and r.get("prompt") == row["prompt"] for r in self.records)


def bench(inp: BenchInput, store=None, progress=None) -> dict:
    """Measure every method on every selected prompt (skipping those already measured with identical
    settings), store each run linked to one task, and return the per-category and overall summary.
    Parameters not given are taken from memory, else sized to this machine (as run and compare do).

    KeyboardInterrupt leaves finished measurements stored and the task unfinished with what is left.
    ``inp.prompts`` "both" runs :func:`bench_halves`.
    """
    store = store if store is not None else Store()
    if inp.prompts == BOTH_HALVES:
        return bench_halves(inp, store, progress)
    prompts = load_prompt_set(inp.prompts, inp.category, inp.limit)
    asked = list(dict.fromkeys(inp.methods))
    auto_fits = auto.fit_prompts(store, auto.matching(inp)) if AUTO in asked else None
    methods, auto_from = auto_methods(asked, inp, auto_fits)
    candidates, not_run = resolve_candidates(methods, inp.params, store)
    heads_path = medusa_heads_for(store, inp.target, inp.medusa_heads) if "medusa" in methods else None
    source = str(prompt_set_path(inp.prompts))
    plan = [step_name(row, m) for row in prompts for m in methods]
    task_id = store.create_task(f"bench {', '.join(methods)} on {len(prompts)} prompts from {Path(source).name}",
                                "bench", plan)
    for method, reason in not_run.items():
        store.update_task(task_id, note=f"{method}: not run: {reason}")
    state = _BenchRun(inp, store, task_id, methods, common_settings(inp, heads_path), heads_path, Path(source).name,
                      not_run, candidates, fresh_tasks={task_id}, auto_from=auto_from, auto_fits=auto_fits)
    try:
        state.settle()
        for i, row in enumerate(prompts, 1):
            def say(text: str, i=i, row=row) -> None:
                if progress:
                    progress(f"[{i}/{len(prompts)}] {row['category']} q{row['question_id']}: {text}")

            state.prompt(row, say, progress)
    except KeyboardInterrupt as exc:
        left = store.get_task(task_id)["left"]
        store.update_task(task_id, status="unfinished",
                          note=f"{interruption(exc)} with {len(left)} step(s) left; rerun the same command to resume")
        raise
    except BaseException as exc:
        store.update_task(task_id, status="failed", note=f"stopped by an error: {exc}")
        raise
    store.update_task(task_id, status="done")
    if auto_from:
        state.methods = [*methods, AUTO]
    return _result(state, source, len(prompts))


def auto_methods(asked: list[str], inp: BenchInput, auto_fits: tuple | None) -> tuple[list[str], list[str]]:
    """(the methods to measure, those auto picks among): with auto asked beside other methods it picks among
    those; asked alone, among every method its fit figures (``auto_fits``) cover that this backend runs (each
    then measured). ParameterError where auto has no fit figures."""
    if AUTO not in asked:
        return asked, []
    listed = [m for m in asked if m not in (AUTO, "baseline")]
    if not listed:
        fits, _ = auto_fits
        listed = [m for m in ACCELERATED if any(m in p.speedups for p in fits) and backend_refusal(m, inp.backend) is None]
    if not listed:
        raise ParameterError("auto has no fit-half figures to choose a method from",
                             hint="run `specpilot bench --prompts fit` first, or list the methods to measure")
    return [m for m in asked if m != AUTO] + [m for m in listed if m not in asked], listed


def _result(state: _BenchRun, source: str, prompts: int) -> dict:
    """bench's answer: the summary, what was measured or reused, and each method's parameters with why."""
    records = state.records
    return {
        "task_id": state.task_id,
        "prompt_set": source,
        "prompts": prompts,
        "methods": state.methods,
        "measured": state.measured,
        "reused": state.reused,
        "not_run": state.not_run,
        "run_ids": list(dict.fromkeys(r["run_id"] for r in records)),
        "auto": [{"question_id": r.get("question_id"), "category": r.get("category"), "picked": r["auto_picked"],
                  "reason": r["auto_reason"], "run_id": r.get("run_id")} for r in records if "auto_picked" in r],
        "summary": summarise(records),
        "params": {m: s.to_dict() for m, s in state.sizings.items()},
        "hardware": (records[0].get("hardware") if records else None) or {},
        "dtype": records[0].get("dtype") if records else None,
        "settings": {k: v for k, v in state.common.items() if k not in ("medusa_heads",)},
        "versions": measure.versions(),
    }


def bench_halves(inp: BenchInput, store=None, progress=None) -> dict:
    """:func:`bench` on the fit half of the shipped Spec-Bench prompts, then on the eval half, same settings
    (each its own resumable task). The answer is the eval half's (its summary, the figures to report) with
    both halves under ``halves``, all run ids, and ``fit_vs_eval`` (tools.bench.summary.fit_vs_eval): each
    method's figures on both halves, and per category the method the fit half recommends, measured on the
    eval half, so that overfitting and choices made after the fact are both visible."""
    store = store if store is not None else Store()
    halves = {}
    for half in ("fit", "eval"):
        def said(text: str, half=half) -> None:
            if progress:
                progress(f"{half} half {text}")

        halves[half] = bench(inp.model_copy(update={"prompts": half}), store, said)
    fit, held_out = halves["fit"], halves["eval"]
    return {**held_out, "prompt_set": BOTH_HALVES, "halves": halves,
            "fit_vs_eval": fit_vs_eval(fit["summary"], held_out["summary"]),
            "task_ids": [fit["task_id"], held_out["task_id"]], "run_ids": fit["run_ids"] + held_out["run_ids"],
            "auto": fit["auto"] + held_out["auto"],
            "measured": fit["measured"] + held_out["measured"], "reused": fit["reused"] + held_out["reused"],
            "not_run": {**fit["not_run"], **held_out["not_run"]}}
