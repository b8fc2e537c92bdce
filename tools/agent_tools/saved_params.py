"""Saved parameters of a method: which of them fill the run's own fields (target, draft, generation
settings) and which are the method's parameters, validated."""

from __future__ import annotations

from tools.bench.run import RunInput
from tools.engine.methods import PARAM_MODELS, parse_params
from tools.errors import ParameterError


def run_fields() -> set[str]:
    """RunInput fields that saved parameters may fill (everything but method, prompt and params)."""
    return set(RunInput.model_fields) - {"method", "prompt", "params"}


def split_saved_params(method: str, saved: dict) -> tuple[dict, dict]:
    """Split saved parameters into RunInput fields (target, draft, generation settings) and the
    method's own parameters, validating the latter; ParameterError names a bad field."""
    if method not in PARAM_MODELS:
        raise ParameterError(f"unknown method {method!r}", hint=f"choose one of: {', '.join(PARAM_MODELS)}")
    fields = run_fields()
    top = {k: v for k, v in saved.items() if k in fields}
    own = {k: v for k, v in saved.items() if k not in fields}
    parse_params(method, own)
    return top, own
