"""The choose_method tool: which method to use for a kind of request, as a choice between methods, from the
best evidence there is: runs measured on this machine for that category, else the fit half's per-category
results shipped in benchmarks/results (measured on the CPU they name), else the methods' known properties.
The category is the model's reading of the person's words (the schema lists the Spec-Bench categories)."""

from __future__ import annotations

import os
import re
import statistics
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from tools import models
from tools.agent_tools.registry import ToolContext, tool
from tools.engine.cpu_info import cpu_name
from tools.report.results import default_results_dir, load_results, machine_of

CATEGORIES = ("coding", "extraction", "humanities", "math", "math_reasoning", "qa", "rag", "reasoning", "roleplay",
              "stem", "summarization", "translation", "writing")
Category = Literal[CATEGORIES]  # type: ignore[valid-type]
CANDIDATES = ("draft", "eagle", "ngram", "lookahead", "medusa")

# what each method draws its guesses from, and so where it is known to pay (docs/methods.md): prompt lookup
# copies the input, a draft model or EAGLE predicts text a small model predicts well, lookahead needs nothing
COPIES_INPUT = ("summarization", "rag", "extraction")
PREDICTABLE = ("coding", "math", "math_reasoning", "stem")
PROPERTY = {
    "ngram": "copies spans of the prompt: pays where the answer repeats its input (summaries, RAG, extraction, code "
             "edits), costs nearly nothing elsewhere",
    "draft": "a small model of the same family guesses: pays where a small model predicts the answer well (code, "
             "maths), less on open writing",
    "eagle": "a head trained on the target's features guesses: like the draft model, without a second model",
    "lookahead": "Jacobi iteration, no draft and no training: modest, steady gains where passes have spare compute",
    "medusa": "heads trained for the target guess a tree: gains depend on the heads' training",
}


class ChooseInput(BaseModel):
    """What kind of request the person wants to speed up."""

    model_config = ConfigDict(extra="forbid")

    category: Category = Field(..., description="the kind of request, as Spec-Bench names them: summarization (long "
                                                "documents), rag (answers from retrieved text), coding, math, "
                                                "translation, writing, qa, ...")
    target: str = Field(models.DEFAULT_TARGET, description="the target model")


def category_of(task: str | None) -> str | None:
    """The Spec-Bench category a kind of work written in words names ("summarising long documents" ->
    summarization, "code" -> coding), else None. The vocabulary is the categories' own names: a word matches
    a category when they share their first four letters (or all but the last of a word of four: "code"), or
    are equal ("qa", "rag"); the first word of the text that matches decides."""
    for word in re.findall(r"[a-z]+", (task or "").lower()):
        best = max(CATEGORIES, key=lambda c: (_shared(word, c), -len(c)))
        shared = _shared(word, best)
        if word == best or shared >= 4 or (len(word) == 4 and shared == 3):
            return best
    return None


def _shared(word: str, category: str) -> int:
    return len(os.path.commonprefix([word, category]))


def measured_here(store, category: str | None, target: str, machine: str) -> list[dict]:
    """Median speedup per method of the runs stored for ``category`` (None: every run) and ``target`` on
    this machine."""
    by_method: dict[str, list[dict]] = {}
    filters = {"category": category} if category else {}
    for run in store.find_runs(limit=2000, target=target, **filters):
        name = str((run.get("hardware") or {}).get("name") or "")
        if run.get("method") in CANDIDATES and run.get("speedup") and name.split(" (")[0] == machine.split(" (")[0]:
            by_method.setdefault(run["method"], []).append(run)
    return [{"method": m, "speedup": statistics.median(r["speedup"] for r in runs), "runs": len(runs),
             "run_ids": [r["run_id"] for r in runs[:3]], "source": "measured on this machine"}
            for m, runs in by_method.items()]


def shipped_fit_half(category: str | None) -> list[dict]:
    """Per method, the speedup in the newest shipped ``suite`` result of the fit half for ``category`` (None:
    over every category)."""
    suites = [(path, data) for path, data in load_results(default_results_dir())
              if isinstance(data, dict) and data.get("kind") == "suite"
              and (data.get("extra") or {}).get("prompt_set") in ("fit", "both")]
    if not suites:
        return []
    path, data = max(suites, key=lambda pd: str(pd[1].get("date") or ""))
    rows = [r for r in data.get("rows") or [] if category in (None, r.get("category")) and not r.get("peer")
            and r.get("method") in CANDIDATES and r.get("speedup") and r.get("prompt_set") in (None, "fit")]
    by_method: dict[str, list[float]] = {}
    for r in rows:
        by_method.setdefault(r["method"], []).append(r["speedup"])
    return [{"method": m, "speedup": statistics.median(v), "runs": len(v),
             "source": f"the fit half measured on {machine_of(data)} ({path.name}, {str(data.get('date'))[:10]})"}
            for m, v in by_method.items()]


def by_properties(category: str | None) -> list[dict]:
    """The methods ordered by what they draw on, for ``category`` (no figure: not measured)."""
    if category in COPIES_INPUT:
        order = ["ngram", "draft", "eagle", "lookahead", "medusa"]
    elif category in PREDICTABLE:
        order = ["draft", "eagle", "ngram", "lookahead", "medusa"]
    else:
        order = ["draft", "eagle", "lookahead", "ngram", "medusa"]
    return [{"method": m, "speedup": None, "source": "the methods' known properties"} for m in order]


def ranking(store, category: str | None, target: str) -> dict:
    """The choice between methods for ``category`` (None: any kind of request) on ``target``: the pick, each
    candidate with its figure and source (best evidence first: this machine, the shipped fit half, the methods'
    properties), a line per candidate and the next step."""
    machine = cpu_name()
    candidates = measured_here(store, category, target, machine)
    if not candidates:
        candidates = shipped_fit_half(category)
    if not candidates:
        candidates = by_properties(category)
    else:
        candidates.sort(key=lambda c: c["speedup"], reverse=True)
    lines = []
    for c in candidates:
        figure = f"{c['speedup']:.2f}x" if c["speedup"] is not None else "not measured"
        runs = f", runs {', '.join(c['run_ids'])}" if c.get("run_ids") else ""
        lines.append(f"{c['method']}: {figure} ({c['source']}{runs}); {PROPERTY[c['method']]}")
    pick = candidates[0]["method"]
    return {"category": category, "target": target, "pick": pick, "candidates": candidates, "lines": lines,
            "next_step": {"tool": "compare_methods", "input": {"methods": ["baseline", *[c["method"] for c in
                                                                                      candidates[:2]]]},
                          "why": "measure the first two on your own prompt"},
            "source": candidates[0]["source"]}


@tool("choose_method", ChooseInput, read_only=True)
def choose_method(inp: ChooseInput, ctx: ToolContext) -> dict:
    """Answer "which method should I use for X?" as a choice between methods for a kind of request (category):
    from runs measured on this machine for that category, else the fit half's per-category results shipped
    with specpilot (labelled with the CPU they came from), else the methods' known properties (prompt lookup
    where the answer copies the prompt, a draft model for code and maths). Returns the pick first, one line
    per candidate with its figure and source, and the next step (measure it on the person's own prompt)."""
    return ranking(ctx.store, inp.category, inp.target)
