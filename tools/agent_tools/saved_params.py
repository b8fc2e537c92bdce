"""Saved parameters of a method: which of them fill the run's own fields (target, draft, generation
settings) and which are the method's parameters, validated — both when they are saved
(:func:`validate_saved_params`) and when a run reads them back (:func:`split_saved_params`)."""

from __future__ import annotations

from pydantic import ValidationError

from tools.bench.inputs import MeasureOptions, RunInput
from tools.engine.params import PARAM_MODELS, parse_params
from tools.errors import ParameterError
from tools.models import BUILTIN_MODELS, DEFAULT_TARGET, local_ref


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


def _problems(exc: ValidationError) -> str:
    """Each bad field of a validation error with what it got, e.g. ``max_new_tokens: ... (got 'lots')``."""
    return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'input'}: {e['msg']} (got {e.get('input')!r:.60})"
                     for e in exc.errors())


def check_run_fields(method: str, top: dict) -> None:
    """Validate run-level fields (target, draft, max_new_tokens, ...) as a run would read them: against
    MeasureOptions, and RunInput's own run-level fields (peers); ParameterError naming every bad field."""
    measure = {k: v for k, v in top.items() if k in MeasureOptions.model_fields}
    rest = {k: v for k, v in top.items() if k not in measure}
    try:
        MeasureOptions.model_validate(measure)
        if rest:  # method and prompt are placeholders: only the saved fields can be wrong
            RunInput.model_validate({**rest, "method": method, "prompt": "saved parameters"})
    except ValidationError as exc:
        raise ParameterError(f"cannot save these {method} parameters: {_problems(exc)}",
                             hint=f"run-level fields take the types of a run's input: "
                                  f"{', '.join(sorted(run_fields()))}; {method}'s own: "
                                  f"{', '.join(PARAM_MODELS[method].model_fields) or 'none'}") from None


def check_strict_types(method: str, params: dict) -> None:
    """Refuse a saved value whose JSON type is not the field's own (``k="4"``, ``k=true``, ``temperature="0"``):
    a run would coerce it, but what is stored must read back as what it means. ParameterError naming each."""
    own_model = PARAM_MODELS[method]
    fields = run_fields()
    own = {k: v for k, v in params.items() if k not in fields and k in own_model.model_fields and v is not None}
    measure = {k: v for k, v in params.items() if k in MeasureOptions.model_fields and v is not None}
    problems = []
    for model, values in ((own_model, own), (MeasureOptions, measure)):
        try:
            model.model_validate(values, strict=True)
        except ValidationError as exc:
            problems += [e for e in exc.errors() if e["type"] not in ("missing",)]
    if problems:
        shown = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']} (got {e.get('input')!r:.60})"
                          for e in problems)
        raise ParameterError(f"cannot save these {method} parameters: {shown}",
                             hint="give numbers as numbers and true/false as booleans, e.g. {\"k\": 4}")


def validate_saved_params(method: str, params: object) -> None:
    """Check parameters before they are saved for ``method``, so that a later run cannot fail on them:
    the method's own against its parameter model, the run-level ones against MeasureOptions (and
    RunInput), each value of its field's own JSON type. ParameterError names the bad field; nothing is
    saved by this function."""
    if not isinstance(params, dict):
        raise ParameterError(f"{method} parameters must be a JSON object, got {type(params).__name__}")
    top, _ = split_saved_params(method, params)
    check_run_fields(method, top)
    check_strict_types(method, params)


def saved_target(store, method: str | None = None) -> str | None:
    """The target saved in memory: the method's, else the default method's, else any saved one."""
    default = store.get_answer("default_method")
    saved = store.all_params() or {}
    for name in (method, default, *saved):
        target = (saved.get(name) or {}).get("target") if name else None
        if target:
            return str(target)
    return None


def resolve_target(store, method: str | None, given: str | None) -> tuple[str, str]:
    """The target to advise for and where it came from: given, saved in memory, or the built-in default.
    A given path that is not usable here raises the ModelNotFoundError a run gives for it."""
    if given:
        if given.lower() not in BUILTIN_MODELS:  # built-in names are advised for before they are fetched
            local_ref(given)
        return given, "given"
    found = saved_target(store, method)
    return (found, "saved in memory") if found else (DEFAULT_TARGET, "built-in default")
