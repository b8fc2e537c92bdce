"""First-run onboarding: ask which method, collect that method's parameters with the guidance
defaults offered, save them, then run the first request.

Every answer is saved as it is given (``onboarding.*`` answers), so an interrupted onboarding
resumes where it stopped and nothing answered is asked twice; once the parameters are saved the
onboarding is marked complete and later sessions ask nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agent.brains.base import Reply
from agent.brains.offline import find_method
from agent.loop import Session
from tools.errors import ParameterError
from tools.engine.methods import parse_params
from tools.models import DEFAULT_DRAFT, DEFAULT_TARGET

METHODS = {"draft": "draft model (speculative decoding)", "medusa": "Medusa heads", "lookahead": "lookahead decoding"}
METHOD_KEY = "onboarding.method"
FIRST_PROMPT_KEY = "onboarding.first_prompt"
DEFAULT_FIRST_PROMPT = "Write a Python function that checks whether a string is a palindrome."
OWN_PARAMS = {"draft": ("k", "adaptive_k"), "medusa": ("posterior_threshold", "posterior_alpha"),
              "lookahead": ("window", "ngram", "guess")}
GENERATION = (("max_new_tokens", 128, "new tokens per run"), ("temperature", 0.0, "0 = greedy, exact output"))

Ask = Callable[[str, str], str | None]  # (question, default shown) -> answer ('' = default), None at end of input
Say = Callable[[str], None]


class InputEnded(Exception):
    """The person closed the input before onboarding finished (what was answered is saved)."""


@dataclass
class Question:
    key: str
    text: str
    default: Any


def questions(method: str, suggested: dict) -> list[Question]:
    """The questions for ``method``, each offering a default (guidance's suggestion where it has one)."""
    qs = [Question("target", "Target model (built-in name, local folder or .gguf file)", DEFAULT_TARGET)]
    if method == "draft":
        qs.append(Question("draft", "Draft model (same tokenizer as the target, 5-10x smaller)", DEFAULT_DRAFT))
    if method == "medusa":
        qs.append(Question("medusa_heads", "Medusa heads folder (empty: the shipped or trained heads)", ""))
    for name in OWN_PARAMS[method]:
        qs.append(Question(name, f"{method} parameter {name}", suggested.get(name)))
    qs += [Question(name, f"{name} ({why})", default) for name, default, why in GENERATION]
    return qs


def parse_answer(answer: str, default: Any) -> Any:
    """The typed value of an answer ('' keeps the default; bools accept yes/no/true/false)."""
    answer = answer.strip()
    if answer == "":
        return default
    if isinstance(default, bool):
        if answer.lower() in ("y", "yes", "true", "1", "on"):
            return True
        if answer.lower() in ("n", "no", "false", "0", "off"):
            return False
        raise ParameterError(f"{answer!r} is not yes or no")
    if isinstance(default, int):
        try:
            return int(answer)
        except ValueError:
            raise ParameterError(f"{answer!r} is not a whole number") from None
    if isinstance(default, float):
        try:
            return float(answer)
        except ValueError:
            raise ParameterError(f"{answer!r} is not a number") from None
    return answer


def choose_method(answer: str) -> str | None:
    """The method an answer names ('1'/'2'/'3' or a word), or None."""
    answer = answer.strip().lower()
    numbered = dict(zip("123", METHODS, strict=True))
    if answer in numbered:
        return numbered[answer]
    method = find_method(answer)
    return method if method in METHODS else None


def _ask(ask: Ask, text: str, default: str) -> str:
    answer = ask(text, default)
    if answer is None:
        raise InputEnded(text)
    return answer


def run_onboarding(session: Session, ask: Ask, say: Say) -> Reply | None:
    """Ask what is not saved yet, save the method's parameters, then run the first request.

    Returns the reply to the first request, or None when onboarding was already complete.
    Raises InputEnded when the input closes first (answers so far stay saved).
    """
    store = session.store
    if store.onboarding_complete():
        return None
    say("Welcome to specpilot. A few questions first; press Enter to take the suggested value.")
    method = store.get_answer(METHOD_KEY)
    while method is None:
        options = ", ".join(f"{i}) {m} — {d}" for i, (m, d) in enumerate(METHODS.items(), start=1))
        method = choose_method(_ask(ask, f"Which method do you want to use? {options}", "draft") or "draft")
        if method is None:
            say("Please answer draft, medusa or lookahead (or 1, 2, 3).")
    store.save_answer(METHOD_KEY, method)
    suggested = session.call_tool("guidance", {"method": method})
    suggested_params = {} if suggested.is_error else suggested.content["suggested_params"]
    if not suggested.is_error:
        say(f"Suggested starting values ({suggested.content['source']}; advice to be measured): "
            + ", ".join(f"{k}={suggested_params[k]}" for k in OWN_PARAMS[method] if k in suggested_params))
    params = _collect(store, method, suggested_params, ask, say, use_saved=True)
    while True:
        saved = session.call_tool("save_params", {"method": method, "params": params, "make_default": True})
        if not saved.is_error:
            break
        say(f"Those parameters do not work together: {saved.content['error']} — please answer them again.")
        params = _collect(store, method, suggested_params, ask, say, use_saved=False)
    store.mark_onboarding_complete()
    say(f"Saved {method} parameters: " + ", ".join(f"{k}={v}" for k, v in params.items())
        + ". I will not ask for them again.")
    prompt = store.get_answer(FIRST_PROMPT_KEY) or _ask(ask, "What prompt should I run first?", DEFAULT_FIRST_PROMPT)
    prompt = prompt.strip() or DEFAULT_FIRST_PROMPT
    store.save_answer(FIRST_PROMPT_KEY, prompt)
    return session.handle(f"/run {method} {prompt}")


_MISSING = object()


def _collect(store: Any, method: str, suggested: dict, ask: Ask, say: Say, use_saved: bool) -> dict:
    """Ask each parameter question not answered yet (every one when ``use_saved`` is False); save each answer."""
    params: dict[str, Any] = {}
    for q in questions(method, suggested):
        key = f"onboarding.{method}.{q.key}"
        value = store.get_answer(key, _MISSING) if use_saved else _MISSING
        while value is _MISSING:
            try:
                value = parse_answer(_ask(ask, q.text, "" if q.default is None else str(q.default)), q.default)
                if q.key in OWN_PARAMS[method]:
                    parse_params(method, {q.key: value})
            except ParameterError as exc:
                say(f"{exc.user_message()} — please try again.")
                value = _MISSING
        store.save_answer(key, value)
        if value != "" and value is not None:
            params[q.key] = value
    return params
