"""Brains decide which tools to call: ``anthropic`` (Claude through the official SDK), ``local`` (heads
learned from labelled requests and a local instruct model with constrained tool calls, agent.brains.local;
``model`` is the same) and ``offline`` (commands only, parsed from the tools' schemas: what runs with no model
and no key, and every brain's slash commands). What they share with the loop (Reply, the Brain interface) is
in agent.brains.base."""

from __future__ import annotations

import logging
import os

from tools.errors import ParameterError

log = logging.getLogger(__name__)

BRAINS = ("auto", "anthropic", "local", "model", "offline")
KEY_ENV = "ANTHROPIC_API_KEY"


def make_brain(name: str = "auto"):
    """The brain called ``name``. ``auto``: anthropic when ANTHROPIC_API_KEY is set, else local when
    its model is fetched, else the command brain (``offline``). ``local`` falls back to the command brain
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
                                      "(a local model) or --brain offline (commands only)")
        # the brains import the loop and the tools (torch): loaded here, not with agent.brains.base
        from agent.brains import anthropic_brain

        return _with_commands(anthropic_brain.AnthropicBrain())
    if name in ("local", "model"):
        brain, why = _local_brain()
        if brain is not None:
            return _with_commands(brain)
        return _offline(fallback_reason=why)
    return _offline()


def _local_brain():
    """(the local brain, None), or (None, why it cannot be used). The tool classifier picks the tool (or an
    answer in words) and the model writes the arguments; without the shipped classifier the model picks too."""
    try:
        from agent.brains import local
    except ImportError as exc:
        return None, f"the local brain is not available ({exc})"
    if not local.local_model_available():
        return None, (f"the local brain's model {local.local_model_ref()} is not fetched "
                      f"(specpilot models fetch {local.local_model_ref()})")
    return local.LocalBrain(classifier=local.default_classifier()), None


def _with_commands(brain):
    """``brain`` with the command brain that answers its slash commands (agent.loop.Session asks it)."""
    brain.commands = _offline()
    return brain


def _offline(fallback_reason: str | None = None):
    from agent.brains import offline

    if fallback_reason:
        log.info("using the command brain: %s", fallback_reason)
    return offline.OfflineBrain(fallback_reason)
