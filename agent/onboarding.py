"""First-run onboarding: ask which method, collect that method's parameters with the guidance
defaults offered, save them, then offer one short measured run (optional; at most 32 new tokens, on
the small built-in model where the method allows). 'skip' to any question skips the questions (and
is remembered); ``specpilot chat --skip-onboarding`` skips them this time. Every method of the engine's
method table is offered (tools.engine.params.METHODS). A draft equal to the target is refused with the
reason, and so is EAGLE without a head for the target.

Guidance sizes the offered values to this machine's cost curve of the target, measuring it first where
none is stored (minutes on a CPU): that is said before it starts, and Ctrl-C then skips the sizing and
offers the method's starting values instead (nothing stored is lost).

Every answer is saved as it is given (``onboarding.*`` answers), so an interrupted onboarding
resumes where it stopped and nothing answered is asked twice; once the parameters are saved the
onboarding is marked complete and later sessions ask nothing. Of the method's own parameters only
those the person changed from the offered value are saved: a value kept as offered is left to each
run, which sizes it to this machine (saved values would override that sizing).
"""

from __future__ import annotations

import logging
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.brains.base import Reply
from agent.loop import Session
from tools.errors import ParameterError, Terminated
from tools.engine.params import ACCELERATED, METHODS as METHOD_SPECS, SIZED_FIELDS, MethodSpec, parse_params
from tools.agent_tools.saved_params import resolve_target
from tools.models import DEFAULT_DRAFT, DEFAULT_TARGET, SMALL_TARGET, builtin_draft_for, shipped_eagle_head

log = logging.getLogger(__name__)


def method_summary(spec: MethodSpec) -> str:
    """A method in a few words, from the engine's method table: its name and what it needs."""
    name = spec.description.split(":")[0].split(" (")[0]
    if spec.needs_draft:
        needs = "needs a smaller draft model"
    elif spec.training != "none":
        needs = ("needs trained " if spec.training.endswith("s") else "needs a trained ") + spec.training
    else:
        needs = "no extra model, no training"
    return f"{name} ({needs})"


# every method that speeds decoding up, in the table's order (numbered answers 1..N follow it)
METHODS = {name: method_summary(METHOD_SPECS[name]) for name in ACCELERATED}
METHOD_KEY = "onboarding.method"
SKIPPED_KEY = "onboarding.skipped"
SKIP_ANSWER = "skip"  # to any question: skip the questions (remembered)
FIRST_RUN_TOKENS = 32  # the optional first run is short
FIRST_PROMPT_KEY = "onboarding.first_prompt"
DEFAULT_FIRST_PROMPT = "Write a Python function that checks whether a string is a palindrome."
OWN_PARAMS = {"draft": ("k", "adaptive_k"), "medusa": ("posterior_threshold", "posterior_alpha"),
              "lookahead": ("window", "ngram", "guess"), "eagle": ("depth", "topk", "tree_nodes"),
              "ngram": ("max_ngram_size", "num_candidate_tokens", "num_candidates")}
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
    if method == "eagle":
        qs.append(Question("eagle_heads", "EAGLE head folder (empty: the head shipped for the target)", ""))
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
    """The method an answer names (its number 1..N in METHODS, or its name), or None."""
    answer = answer.strip().lower()
    numbered = {str(i): name for i, name in enumerate(METHODS, start=1)}
    if answer in numbered:
        return numbered[answer]
    return next((word for word in answer.replace(",", " ").split() if word in METHODS), None)


def _ask(ask: Ask, text: str, default: str) -> str:
    answer = ask(text, default)
    if answer is None:
        raise InputEnded(text)
    if answer.strip().lower() == SKIP_ANSWER:
        raise Skipped(text)
    return answer


def run_onboarding(session: Session, ask: Ask, say: Say) -> Reply | None:
    """Ask what is not saved yet, save the method's parameters, then offer a short first run.

    Returns the reply to the first run, or None when onboarding was already complete, was skipped
    (the answer 'skip' to any question; remembered, so it is not asked again) or no run was wanted.
    Raises InputEnded when the input closes first (answers so far stay saved).
    """
    store = session.store
    if store.onboarding_complete():
        return None
    say("Welcome to specpilot. A few questions first; press Enter to take the suggested value, or answer "
        f"'{SKIP_ANSWER}' to skip them.")
    try:
        method = _choose_method(store, ask, say)
        params = _save_params(session, method, ask, say)
    except Skipped:
        store.save_answer(SKIPPED_KEY, True)
        store.mark_onboarding_complete()
        say("Skipped. Save parameters any time, e.g. 'save k=6 for draft' or /save lookahead window=5; "
            "/help lists what I can do.")
        return None
    store.mark_onboarding_complete()
    say(saved_text(method, params))
    return _first_run(session, method, params, ask, say)


def saved_text(method: str, params: dict) -> str:
    """What onboarding saved, and which of the method's parameters were kept as suggested (not saved)."""
    text = f"Saved {method} parameters: " + ", ".join(f"{k}={v}" for k, v in params.items()) + "."
    left = [k for k in OWN_PARAMS[method] if k not in params]
    sized = [k for k in left if k in SIZED_FIELDS.get(method, ())]
    if sized:
        text += f" Not saved, so each run sizes them to this machine: {', '.join(sized)}."
    if len(sized) < len(left):
        text += f" Not saved, so each run uses the default: {', '.join(k for k in left if k not in sized)}."
    return text + " I will not ask for them again."


class Skipped(Exception):
    """The person answered 'skip' to an onboarding question."""


def _choose_method(store: Any, ask: Ask, say: Say) -> str:
    method = store.get_answer(METHOD_KEY)
    while method is None:
        options = ", ".join(f"{i}) {m} — {d}" for i, (m, d) in enumerate(METHODS.items(), start=1))
        method = choose_method(_ask(ask, f"Which method do you want to use? {options}", "draft") or "draft")
        if method is None:
            say(f"Please answer {', '.join(list(METHODS)[:-1])} or {list(METHODS)[-1]} "
                f"(or {', '.join(str(i) for i in range(1, len(METHODS) + 1))}), or skip.")
    store.save_answer(METHOD_KEY, method)
    return method


def _save_params(session: Session, method: str, ask: Ask, say: Say) -> dict:
    """Collect the method's parameters and save them; return them. The target is asked first, so guidance's
    suggestions (offered as the defaults) are sized for that target on this machine (measured first where no
    cost curve of it is stored)."""
    store = session.store
    offered: dict[str, dict] = {}

    def suggest(target: str) -> dict:
        if "params" not in offered:
            if will_measure(store, method, target):
                say(f"Measuring this machine's forward-pass costs for {target} to size the {method} parameters "
                    "(this can take a few minutes; Ctrl-C skips and keeps the method's starting values).")
            try:
                result = session.call_tool("guidance", {"method": method, "target": target})
            except Terminated:  # SIGTERM / SIGHUP: the process ends (what was answered is saved)
                raise
            except KeyboardInterrupt:  # Ctrl-C: no curve was stored, nothing stored is lost; no sizing this time
                say("Measuring skipped: the method's starting values are offered instead.")
                result = session.call_tool("guidance", {"method": method, "target": target, "measure": False})
            offered["params"] = {} if result.is_error else result.content["suggested_params"]
            if not result.is_error:
                say(suggestion_text(method, result.content))
        return offered["params"]

    params = _collect(store, method, suggest, ask, say, use_saved=True)
    while True:
        saved = session.call_tool("save_params", {"method": method, "params": params, "make_default": True,
                                                  "replace": True})
        if not saved.is_error:
            return params
        say(f"Those parameters do not work together: {saved.content['error']} — please answer them again.")
        params = _collect(store, method, suggest, ask, say, use_saved=False)


def will_measure(store: Any, method: str, target: str) -> bool:
    """Whether guidance for ``method`` on ``target`` measures this machine first (no cost curve of the target
    stored for it: tools.agent_tools.advice.curve_missing, as guidance itself decides), i.e. is slow."""
    try:
        from tools.agent_tools import advice  # loads torch: only once the questions reach the method's values

        ref, _ = resolve_target(store, method, target)
        return advice.curve_missing(store, method, ref, advice.detect_hardware("auto"), "transformers")
    except Exception:  # noqa: BLE001 - guidance itself reports what is wrong; this only decides a notice
        log.debug("could not tell whether guidance measures %s", target, exc_info=True)
        return False


def suggestion_text(method: str, guidance: dict) -> str:
    """The suggested values of the method's own parameters (guidance's answer), each with its reason
    where guidance gives one (one reason, said once, where all share it), and what pressing Enter does."""
    params, why = guidance["suggested_params"], guidance.get("param_reasons") or {}
    shown = [k for k in OWN_PARAMS[method] if k in params]
    values = ", ".join(f"{k}={params[k]}" for k in shown)
    header = f"Suggested starting values ({guidance['source']}; advice to be measured):"
    reasons = {why.get(k) for k in shown}
    if len(shown) > 1 and len(reasons) == 1 and None not in reasons:  # one reason for all: said once
        lines = [header, f"  {values}: {why[shown[0]]}"]
    else:
        lines = [f"{header} {values}"]
        lines += [f"  {k}={params[k]}: {why[k]}" for k in shown if k in why]
    lines.append("Press Enter to keep a suggested value: kept ones are not saved, so every run picks them itself "
                 "(sized to this machine where they can be).")
    return "\n".join(lines)


def first_run_plan(method: str, params: dict) -> tuple[str, int]:
    """The target and token count of the optional first run: short (at most FIRST_RUN_TOKENS new tokens),
    and on the small built-in model instead of the large default target when the method needs neither a
    draft nor trained heads."""
    target = str(params.get("target") or DEFAULT_TARGET)
    spec = METHOD_SPECS[method]
    if target == DEFAULT_TARGET and not (spec.needs_draft or spec.needs_heads or spec.training != "none"):
        target = SMALL_TARGET  # a trained head (Medusa, EAGLE) fits its own target only
    return target, min(int(params.get("max_new_tokens") or FIRST_RUN_TOKENS), FIRST_RUN_TOKENS)


def _first_run(session: Session, method: str, params: dict, ask: Ask, say: Say) -> Reply | None:
    """Offer one short measured run; run it when the person says yes."""
    target, tokens = first_run_plan(method, params)
    try:
        answer = _ask(ask, f"Run a short first measurement now ({method} on {target}, {tokens} new tokens)? y/n", "n")
    except Skipped:
        return None
    if answer.strip().lower() not in ("y", "yes"):
        say("No first run. Ask for one any time, e.g. 'run " + method + ": <prompt>'.")
        return None
    store = session.store
    prompt = store.get_answer(FIRST_PROMPT_KEY) or _ask(ask, "What prompt should I run first?", DEFAULT_FIRST_PROMPT)
    prompt = prompt.strip() or DEFAULT_FIRST_PROMPT
    store.save_answer(FIRST_PROMPT_KEY, prompt)
    moved = f" target={target}" if target != params.get("target", DEFAULT_TARGET) else ""
    if params.get("eagle_heads"):  # said on the command too (later runs read it from memory, as this one would)
        moved += f" eagle_heads={shlex.quote(str(params['eagle_heads']))}"
    return session.handle(f"/run {method} max_new_tokens={tokens}{moved} {prompt}")


_MISSING = object()


def _collect(store: Any, method: str, suggest: Callable[[str], dict], ask: Ask, say: Say, use_saved: bool) -> dict:
    """Ask each parameter question not answered yet (every one when ``use_saved`` is False); save each answer.
    ``suggest(target)`` gives the offered values of the method's own parameters, asked for once the target is known."""
    params: dict[str, Any] = {}
    for q in questions(method, {}):
        key = f"onboarding.{method}.{q.key}"
        value = store.get_answer(key, _MISSING) if use_saved else _MISSING
        if q.key == "draft":
            q = draft_question(str(params.get("target") or DEFAULT_TARGET))
        if q.key == "eagle_heads":
            q = eagle_question(str(params.get("target") or DEFAULT_TARGET))
        if q.key in OWN_PARAMS[method] and value is _MISSING:
            q = Question(q.key, q.text, suggest(str(params.get("target") or DEFAULT_TARGET)).get(q.key))
        while value is _MISSING:
            try:
                value = parse_answer(_ask(ask, q.text, "" if q.default is None else str(q.default)), q.default)
                if q.key in OWN_PARAMS[method]:
                    parse_params(method, {q.key: value})
                    value = kept(value, q.default)
                if q.key == "draft":
                    check_draft(str(params.get("target") or DEFAULT_TARGET), value)
                if q.key == "eagle_heads":
                    check_eagle_head(str(params.get("target") or DEFAULT_TARGET), value)
                if q.key == "medusa_heads":
                    check_medusa_heads(value)
            except ParameterError as exc:
                say(f"{exc.user_message()} — please try again.")
                value = _MISSING
        store.save_answer(key, value)
        if value != "" and value is not None:
            params[q.key] = value
    return params


def kept(value: Any, offered: Any) -> Any:
    """A method parameter's answer as saved: None when it is the value offered (Enter, or the same value
    typed), so it is not saved and each run sizes it to this machine (tools.bench.sizing: memory would
    override the sizing), else the value the person chose."""
    return None if value == offered else value


def draft_question(target: str) -> Question:
    """The draft question for ``target``: the built-in draft that shares its tokenizer is offered, if any."""
    draft = builtin_draft_for(target)
    if draft:
        return Question("draft", "Draft model (same tokenizer as the target, 5-10x smaller)", draft)
    return Question("draft", f"Draft model (no built-in model is smaller than {target} and shares its tokenizer: "
                             "give a smaller model of its family)", "")


def eagle_question(target: str) -> Question:
    """The EAGLE head question for ``target``: empty takes the head shipped for it, where one is."""
    if shipped_eagle_head(target) is not None:
        return Question("eagle_heads", "EAGLE head folder (empty: the head shipped for the target)", "")
    return Question("eagle_heads", f"EAGLE head folder (none is shipped for {target}: give a head trained for it, "
                                   "or an upstream EAGLE-1/EAGLE-2 checkpoint)", "")


def check_eagle_head(target: str, folder: str) -> None:
    """Refuse no head for a target none is shipped for, or a folder that is not there; ParameterError says why."""
    if not folder.strip():
        if shipped_eagle_head(target) is None:
            raise ParameterError(f"EAGLE needs a head trained for {target}, and none is shipped for it",
                                 hint=f"train one with `specpilot eagle train --target {target} --out DIR` (asks "
                                      "first) and give DIR, or answer 'skip'")
        return
    if not Path(folder.strip()).expanduser().is_dir():
        raise ParameterError(f"no folder {folder.strip()}", hint="give the folder holding the EAGLE head")


def check_medusa_heads(folder: str) -> None:
    """Refuse a Medusa heads folder that is not there (empty: the shipped or trained heads); ParameterError says
    why, as :func:`check_eagle_head` does for EAGLE's."""
    if folder.strip() and not Path(folder.strip()).expanduser().is_dir():
        raise ParameterError(f"no folder {folder.strip()}", hint="give the folder holding the Medusa heads")


def check_draft(target: str, draft: str) -> None:
    """Refuse a draft that is the target itself, or no draft at all; ParameterError says why."""
    if not draft:
        raise ParameterError("the draft method needs a draft model", hint="give one, or answer 'skip'")
    if same_model(target, draft):
        raise ParameterError(
            "the draft must be a smaller model than the target, not the target itself: with draft = target every "
            "token is accepted, so the run would show a high acceptance and a speedup that measure nothing but "
            "overhead", hint="give a smaller model with the same tokenizer")


def same_model(a: str, b: str) -> bool:
    """Whether two model references name the same model (built-in name, or the same folder or file)."""
    a, b = a.strip(), b.strip()
    if a.lower() == b.lower():
        return True
    pa, pb = Path(a).expanduser(), Path(b).expanduser()
    return pa.exists() and pb.exists() and pa.resolve() == pb.resolve()
