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
    not embellish."""
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
    return out
