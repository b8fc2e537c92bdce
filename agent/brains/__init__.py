"""Brains decide which tools to call: ``anthropic`` (Claude through the official SDK) and
``offline`` (a deterministic planner, used when there is no API key). What they share with the loop
(Reply, the Brain interface) is in agent.brains.base."""

from __future__ import annotations

import os

from tools.errors import ParameterError

BRAINS = ("auto", "anthropic", "offline")


def make_brain(name: str = "auto"):
    """The brain called ``name``; ``auto`` picks anthropic when ANTHROPIC_API_KEY is set, else offline."""
    if name not in BRAINS:
        raise ParameterError(f"unknown brain {name!r}", hint=f"use one of: {', '.join(BRAINS)}")
    if name == "auto":
        name = "anthropic" if os.environ.get("ANTHROPIC_API_KEY") else "offline"
    # the brains import the loop and the method table (torch): loaded here, not with agent.brains.base
    from agent.brains import anthropic_brain, offline

    return anthropic_brain.AnthropicBrain() if name == "anthropic" else offline.OfflineBrain()
