"""Brains decide which tools to call: ``anthropic`` (Claude through the official SDK), ``local`` (heads
learned from labelled requests and a local instruct model with constrained tool calls, agent.brains.local;
``model`` is the same), ``hybrid`` (the rule planner first, then ``local``; kept while the phrase modules
are) and ``offline`` (the rule planner: deterministic, used for tests and as the last resort). What they share with the loop
(Reply, the Brain interface) is in agent.brains.base."""

from __future__ import annotations

import logging
import os

from tools.errors import ParameterError

log = logging.getLogger(__name__)

BRAINS = ("auto", "anthropic", "local", "model", "hybrid", "offline")
KEY_ENV = "ANTHROPIC_API_KEY"


def make_brain(name: str = "auto"):
    """The brain called ``name``. ``auto``: anthropic when ANTHROPIC_API_KEY is set, else local when
    its model is fetched, else the rule planner (``offline``). ``local`` falls back to the rule planner
    (saying why in the log and in the brain's ``fallback_reason``) when its module or model is missing.
    ``anthropic`` without a key is a ParameterError that says what to do."""
    if name not in BRAINS:
        raise ParameterError(f"unknown brain {name!r}", hint=f"use one of: {', '.join(BRAINS)}")
    if name == "auto":
        name = "anthropic" if os.environ.get(KEY_ENV) else "local"
    if name == "anthropic":
        if not (os.environ.get(KEY_ENV) or os.environ.get("ANTHROPIC_AUTH_TOKEN")):
            raise ParameterError(f"the anthropic brain needs an API key, and {KEY_ENV} is not set",
                                 hint=f"export {KEY_ENV}=... (from console.anthropic.com), or use --brain local "
                                      "(a local model) or --brain offline (the rule planner)")
        # the brains import the loop and the tools (torch): loaded here, not with agent.brains.base
        from agent.brains import anthropic_brain

        return _with_commands(anthropic_brain.AnthropicBrain())
    if name in ("local", "model", "hybrid"):
        brain, why = _local_brain(model_only=name != "hybrid")
        if brain is not None:
            return _with_commands(brain)
        return _offline(fallback_reason=why)
    return _offline()


def _local_brain(model_only: bool = False):
    """(the local brain, None), or (None, why it cannot be used). ``model_only``: no rule pass; the tool
    classifier picks the tool (or an answer in words) and the model writes the arguments (on the held-out
    chat sets it measured at least what the rule pass first did: docs/agent.md). Otherwise the hybrid."""
    try:
        from agent.brains import local
    except ImportError as exc:
        return None, f"the local brain is not available ({exc})"
    if not local.local_model_available():
        return None, (f"the local brain's model {local.local_model_ref()} is not fetched "
                      f"(specpilot models fetch {local.local_model_ref()})")
    classifier = local.default_classifier()
    # without the shipped heads the model alone would choose among every tool: the rules go first then
    return local.LocalBrain(rules=not model_only or classifier is None, classifier=classifier), None


def _with_commands(brain):
    """``brain`` with the deterministic planner that answers its slash commands (agent.loop.Session asks it)."""
    brain.commands = _offline()
    return brain


def _offline(fallback_reason: str | None = None):
    from agent.brains import offline

    brain = offline.OfflineBrain()
    if fallback_reason:
        log.info("using the rule planner: %s", fallback_reason)
        brain.fallback_reason = fallback_reason
    return brain
