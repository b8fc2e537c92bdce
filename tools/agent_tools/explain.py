"""Explain a concept from the texts in prompts/ (each cites the papers it draws on)."""

from __future__ import annotations

import re
from importlib import resources
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from tools.engine.params import ACCELERATED
from tools.errors import ParameterError
from tools.agent_tools.registry import ToolContext, tool

ARXIV = re.compile(r"arXiv[: ]\s*(\d{4}\.\d{4,5})")
SUMMARY = re.compile(r"^\*\*Summary\.\*\*\s*(.+?)\s*$", re.MULTILINE)
SECTION = re.compile(r"^\*\*([^*]+?)\.\*\*", re.MULTILINE)
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(])")
PASS_SIZES = (2, 4, 8)  # the passes whose cost the measured line of an explanation gives


# a topic per method that has an explanation in prompts/ (read from the method table), and the trade-offs
TOPIC_NAMES = (*(m for m in ACCELERATED if resources.files("prompts").joinpath(f"explain_{m}.md").is_file()), "tradeoffs")
Topic = Literal[TOPIC_NAMES]  # type: ignore[valid-type]
TOPICS = {name: f"explain_{name}.md" for name in TOPIC_NAMES}


class ExplainInput(BaseModel):
    """Which concept to explain."""

    model_config = ConfigDict(extra="forbid")

    topic: Topic = Field(
        ..., description="draft (draft-model speculative decoding), medusa, lookahead, eagle, ngram (prompt lookup), "
                         "or tradeoffs between them")
    detail: Literal["short", "full"] = Field(
        "short", description="short: the summary paragraph (what 'explain X', 'briefly', 'ELI5' ask for); full: the "
                             "whole text with its sections (what 'in detail', 'more', 'why?' ask for)")
    sentences: int | None = Field(None, ge=1, le=10, description="at most this many sentences of the summary, when "
                                                                 "the person asked for a length ('in two sentences')")


def prompt_text(name: str) -> str:
    """The text of ``prompts/<name>`` (packaged with specpilot)."""
    try:
        return resources.files("prompts").joinpath(name).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ParameterError(f"the text prompts/{name} is missing from this installation",
                             hint="reinstall specpilot") from None


@tool("explain", ExplainInput, read_only=True)
def explain(inp: ExplainInput, ctx: ToolContext) -> dict:
    """Explain draft-model speculative decoding, Medusa, lookahead decoding, EAGLE, prompt lookup, or the
    trade-offs between them, from specpilot's reference texts (which cite the papers). By default the short
    summary; detail='full' for the whole text; sentences=N for a length the person asked for. Quote it; do
    not embellish. For a method with a stored run, ``measured_here`` gives the newest run's speedup and tokens
    per step beside what passes cost where it ran ("why was lookahead slower?")."""
    full = prompt_text(TOPICS[inp.topic])
    found = SUMMARY.search(full)
    summary = found.group(1) if found else full.strip().split("\n\n")[1]
    if inp.sentences:
        summary = " ".join(SENTENCE_END.split(summary)[:inp.sentences])
    sections = [name for name in SECTION.findall(full) if name != "Summary"]
    text = full if inp.detail == "full" and not inp.sentences else summary
    out = {"topic": inp.topic, "detail": "full" if text is full else "short", "text": text,
           "arxiv_ids": list(dict.fromkeys(ARXIV.findall(full)))}
    if text is not full:
        out["more"] = f"the full text also covers: {', '.join(sections)} (ask for it in detail)"
        out["sections"] = sections
    measured = measured_here(ctx.store, inp.topic) if inp.topic in ACCELERATED else None
    if measured:
        out["measured_here"] = measured
    return out


def measured_here(store, method: str) -> dict | None:
    """The newest stored run of ``method``: its speedup and tokens per step beside what passes cost where it
    ran (the run's own pass costs, else the cost curve stored for its target there), with a sentence; None
    when none is stored."""
    runs = store.find_runs(method=method, limit=1) if store is not None else []
    if not runs or runs[0].get("mean_accepted_per_step") is None:
        return None
    run = runs[0]
    costs = pass_costs_of(store, run)
    hardware = (run.get("hardware") or {}).get("name") or "hardware not recorded"
    figures = [f"{run['speedup']:.2f}x" if run.get("speedup") is not None else None,
               f"{run['mean_accepted_per_step']:.2f} tokens per step"]
    sentence = (f"Measured here: run {run['run_id']} ({method}, {run.get('target')}, {hardware}): "
                + ", ".join(f for f in figures if f))
    if costs:
        sizes = ", ".join(str(n) for n in costs)
        sentence += (f", while a pass over {sizes} tokens cost " + ", ".join(f"{c:.2f}x" for c in costs.values())
                     + " a one-token pass there: a step pays only when it gives more tokens than its pass costs")
    else:
        sentence += "; what its passes cost there is not measured"
    return {"run_id": run["run_id"], "speedup": run.get("speedup"),
            "tokens_per_step": run["mean_accepted_per_step"], "pass_costs": costs, "sentence": sentence + "."}


def pass_costs_of(store, run: dict) -> dict[int, float]:
    """What a pass over 2, 4 and 8 tokens cost relative to one token where ``run`` ran: from the run's own
    ``pass_costs`` parameter, else from the cost curve stored for its target and hardware ({} when neither)."""
    listed = (run.get("params") or {}).get("pass_costs")
    if isinstance(listed, list) and listed and listed[0]:
        return {n: listed[n - 1] / listed[0] for n in PASS_SIZES if n <= len(listed)}
    stored = store.get_cost_curve(str(run.get("target")), str((run.get("hardware") or {}).get("name")),
                                  run.get("dtype"))
    curve = {int(n): float(t) for n, t in ((stored or {}).get("curve") or {}).items()}
    if not curve or min(curve) != 1:
        return {}
    return {n: curve[n] / curve[1] for n in PASS_SIZES if n in curve}
