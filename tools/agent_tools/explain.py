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


# a topic per method that has an explanation in prompts/ (read from the method table), and the trade-offs
TOPIC_NAMES = (*(m for m in ACCELERATED if resources.files("prompts").joinpath(f"explain_{m}.md").is_file()), "tradeoffs")
Topic = Literal[TOPIC_NAMES]  # type: ignore[valid-type]
TOPICS = {name: f"explain_{name}.md" for name in TOPIC_NAMES}


class ExplainInput(BaseModel):
    """Which concept to explain."""

    model_config = ConfigDict(extra="forbid")

    topic: Topic = Field(
        ..., description="draft (draft-model speculative decoding), medusa, lookahead, or tradeoffs between them")


def prompt_text(name: str) -> str:
    """The text of ``prompts/<name>`` (packaged with specpilot)."""
    try:
        return resources.files("prompts").joinpath(name).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ParameterError(f"the text prompts/{name} is missing from this installation",
                             hint="reinstall specpilot") from None


@tool("explain", ExplainInput, read_only=True)
def explain(inp: ExplainInput, ctx: ToolContext) -> dict:
    """Explain draft-model speculative decoding, Medusa, lookahead decoding, or the trade-offs between
    them, from specpilot's reference texts (which cite Leviathan et al. 2022, Chen et al. 2023,
    Medusa, Lookahead Decoding and the speculative decoding survey). Quote it; do not embellish."""
    text = prompt_text(TOPICS[inp.topic])
    return {"topic": inp.topic, "text": text, "arxiv_ids": list(dict.fromkeys(ARXIV.findall(text)))}
