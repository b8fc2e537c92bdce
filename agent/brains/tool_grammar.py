"""The registry's tools as the local model sees them, and the grammar of a tool call's arguments.

Each tool's pydantic input schema becomes a list of :class:`Arg` (name, kind, allowed values): every field
but the approval id. :func:`signature` renders a tool in one line for the prompt; :func:`decode_arguments`
decodes the JSON arguments with a ConstrainedLM: keys, enum values and booleans are chosen among the
allowed ones, numbers are digits (offered only when the user wrote a digit), strings are free text (usually
copied from the user's words; a model field takes a built-in name or a path), and a method's ``params`` take
that method's own parameter names; the object closes only once its required keys are in. Nothing here
reads the user's words for meaning: the model chooses, and the brain's grounding checks drop a text or
number the user never wrote. The result is a dict that the caller validates with the tool's input model.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from tools.agent_tools.registry import Tool
from tools.bench.inputs import RunInput
from tools.engine.params import PARAM_MODELS
from tools.models import BUILTIN_MODELS, DTYPES

# fields a person does not set in conversation (or that only the approval gate may fill)
HIDDEN = frozenset({"approval_id"})
MODEL_FIELDS = ("target", "draft")  # a built-in model's name or a path the user wrote
RUN_SETTINGS = ("target", "draft", "max_new_tokens", "temperature", "top_p", "dtype")  # allowed inside params
MAX_KEYS = 6  # arguments per object at most, besides required ones still missing
MAX_STRING_TOKENS = 64
MAX_LIST_ITEMS = 6
DIGIT = re.compile(r"\d")


@dataclass(frozen=True)
class Arg:
    """One argument: ``kind`` is enum, bool, number, string, enum_list, string_list or params."""

    name: str
    kind: str
    values: tuple[str, ...] = ()
    required: bool = False


def _non_null(prop: dict) -> dict:
    """The schema of an optional field without its ``null`` branch (the first other branch)."""
    branches = [b for b in prop.get("anyOf", ()) if b.get("type") != "null"]
    return {**prop, **branches[0]} if branches else prop


def arg_of(name: str, prop: dict, required: bool = False) -> Arg | None:
    """The Arg for a JSON-schema property, or None when the model should not set it."""
    if name in HIDDEN:
        return None
    prop = _non_null(prop)
    kind = prop.get("type")
    if "enum" in prop:
        return Arg(name, "enum", tuple(str(v) for v in prop["enum"]), required)
    if name in MODEL_FIELDS:
        return Arg(name, "string", tuple(BUILTIN_MODELS), required)
    if name == "dtype":
        return Arg(name, "enum", DTYPES, required)
    if kind == "boolean":
        return Arg(name, "bool", ("true", "false"), required)
    if kind in ("integer", "number"):
        return Arg(name, "number", (), required)
    if kind == "string":
        return Arg(name, "string", (), required)
    if kind == "array":
        items = _non_null(prop.get("items", {}))
        if "enum" in items:
            return Arg(name, "enum_list", tuple(str(v) for v in items["enum"]), required)
        if items.get("type") in ("integer", "number"):
            return Arg(name, "number_list", (), required)  # concurrency levels, K values to sweep
        return Arg(name, "string_list", (), required) if items.get("type") == "string" else None
    if kind == "object" and name == "params" and prop.get("additionalProperties") is True:
        return Arg(name, "params", (), required)
    if kind == "object" and name == "params" and isinstance(prop.get("additionalProperties"), dict):
        return Arg(name, "method_params", (), required)  # {method: its parameters}, as compare_methods takes
    return None


def schema_args(schema: dict) -> list[Arg]:
    """The Args of an object schema, required ones first."""
    required = set(schema.get("required", ()))
    args = [arg_of(name, prop, name in required) for name, prop in schema.get("properties", {}).items()]
    return sorted((a for a in args if a is not None), key=lambda a: not a.required)


def tool_args(tool: Tool) -> list[Arg]:
    return schema_args(tool.input_schema())


def mentioned(arg: Arg, said: str) -> bool:
    """Whether the user's words (``said``) could have set ``arg``: a number only when a digit is written
    (a small model otherwise "helpfully" adds a temperature); every other argument is offered, the model
    chooses, and the brain's grounding drops a text value the user never wrote."""
    return arg.required or arg.kind not in ("number", "number_list") or bool(DIGIT.search(said))


def param_args(method: str | None, settings: bool = True) -> list[Arg]:
    """What a method's ``params`` may hold: its own parameters, then (``settings``) the run settings that may
    be saved with them (every method's parameters when the method is not known yet)."""
    methods = [method] if method in PARAM_MODELS else list(PARAM_MODELS)
    own: dict[str, Arg] = {}
    for m in methods:
        for arg in schema_args(PARAM_MODELS[m].model_json_schema()):
            own.setdefault(arg.name, Arg(arg.name, arg.kind, arg.values))
    run = RunInput.model_json_schema()["properties"]
    saved = [arg_of(name, run[name]) for name in RUN_SETTINGS if name not in own] if settings else []
    return list(own.values()) + [a for a in saved if a is not None]


def signature(tool: Tool, description: str) -> str:
    """One prompt line: ``name(arg*: type, ...) - description`` (``*`` marks a required argument)."""
    parts = []
    for arg in tool_args(tool):
        kind = {"enum": "|".join(arg.values), "bool": "true|false", "string": "text", "number": "number",
                "enum_list": "list of " + "|".join(arg.values), "string_list": "list of text",
                "number_list": "list of numbers",
                "params": "object", "method_params": "object of method: its params"}[arg.kind]
        if arg.name in MODEL_FIELDS:
            kind = "model name"
        parts.append(f"{arg.name}{'*' if arg.required else ''}: {kind}")
    return f"{tool.name}({', '.join(parts)}) - {description}"


# ---- decoding ------------------------------------------------------------------------------------


def _string_end(text: str) -> int | None:
    """Where a JSON string being written ends: its unescaped closing quote, or a raw newline or chat
    markup (which a JSON string cannot hold); None while it goes on."""
    escaped, end = False, None
    for i, ch in enumerate(text):
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == '"':
            end = i
            break
    cuts = [i for i in (end, text.find("\n"), text.find("<|")) if i is not None and i >= 0]
    return min(cuts) if cuts else None


def decode_string(lm, max_tokens: int = MAX_STRING_TOKENS) -> str:
    """A JSON string's content after its opening quote; the committed text gets the string, escaped
    as JSON, and its closing quote."""
    opened = lm.text
    raw = lm.generate(max_tokens, stop=_string_end)
    try:
        value = json.loads(f'"{raw}"')
    except ValueError:
        value = "".join(ch for ch in raw.replace('\\"', '"') if ch.isprintable())
    lm.text = opened + json.dumps(value, ensure_ascii=False)[1:]
    return value


def decode_number(lm) -> int | float | None:
    """A JSON number: the model's digits, written back in JSON's own form ("016" as 16)."""
    opened = lm.text
    raw = lm.generate_number()
    try:
        value = float(raw)
    except ValueError:
        return None
    value = int(value) if value.is_integer() and "." not in raw else value
    lm.text = opened + json.dumps(value)
    return value


def _key_options(args: list[Arg], first: bool) -> tuple[list[str], list[tuple[Arg, Any]]]:
    """The texts that start each allowed argument (enum and boolean values spelled out)."""
    sep = "" if first else ", "
    options, meaning = [], []
    openers = {"string": '"', "number": "", "enum_list": "[", "string_list": '["', "number_list": "[", "params": "{",
               "method_params": "{"}
    for arg in args:
        key = f'{sep}"{arg.name}": '
        if arg.kind in ("enum", "bool"):
            for value in arg.values:
                options.append(key + (value if arg.kind == "bool" else json.dumps(value)))
                meaning.append((arg, value == "true" if arg.kind == "bool" else value))
        else:
            options.append(key + openers[arg.kind])
            meaning.append((arg, None))
    return options, meaning


def decode_object(lm, args: list[Arg], said: str, context: dict | None = None, given: dict | None = None,
                  withheld: frozenset[str] = frozenset()) -> dict:
    """The members of a JSON object whose ``{`` is committed (the arguments ``said`` could have set); ``given``
    members are written first as they are, ``withheld`` ones not offered; the closing ``}`` is committed too."""
    out: dict = {}
    kinds = {a.name: a.kind for a in args}
    for name, value in (given or {}).items():
        lm.text += f'{", " if out else ""}"{name}": '
        if isinstance(value, dict) and kinds.get(name) == "params":  # the model may add to given parameters
            lm.text += "{"
            method = (given or {}).get("method") or (context or {}).get("method")
            out[name] = decode_object(lm, param_args(method), said, given=value, withheld=withheld)
        else:
            lm.text += json.dumps(value, ensure_ascii=False)
            out[name] = value
    args = [a for a in args if mentioned(a, said)]
    left = [a for a in args if a.name not in out and a.name not in withheld]
    while left:
        # past MAX_KEYS only a required argument still missing is offered
        offered = left if len(out) < MAX_KEYS else [a for a in left if a.required]
        if not offered:
            break
        options, meaning = _key_options(offered, first=not out)
        if all(a.name in out for a in args if a.required):
            options.append("}")
            meaning.append((None, None))
        before = lm.text
        arg, value = meaning[lm.choose(options)]
        if arg is None:
            return out
        left.remove(arg)
        value = value if arg.kind in ("enum", "bool") else _decode_value(lm, arg, said, {**(context or {}), **out},
                                                                          withheld)
        if value is None:  # no valid value: forget this key
            lm.text = before
            continue
        out[arg.name] = value
    lm.text += "}"
    return out


def _decode_value(lm, arg: Arg, said: str, siblings: dict, withheld: frozenset[str] = frozenset()) -> Any:
    if arg.kind == "string":
        return decode_string(lm) or None
    if arg.kind == "number":
        return decode_number(lm)
    if arg.kind == "enum_list":
        return decode_enum_list(lm, arg.values)
    if arg.kind == "string_list":
        return decode_string_list(lm)
    if arg.kind == "number_list":
        return decode_number_list(lm)
    if arg.kind == "method_params":
        return decode_method_params(lm, siblings.get("methods") or [], said, withheld)
    # params: the method's own parameters and the run settings, those withheld at the top level not offered
    return decode_object(lm, param_args(siblings.get("method")), said, withheld=withheld) or None


def decode_method_params(lm, methods: list[str], said: str, withheld: frozenset[str] = frozenset()) -> dict | None:
    """``{"method": {its parameters}, ...}`` for some of the compared ``methods`` (those with parameters);
    ``{`` is committed."""
    out: dict = {}
    left = [m for m in methods if m in PARAM_MODELS and param_args(m, settings=False)]
    written = False  # a member is in the text (an empty one too)
    while left:
        options = [f'{", " if written else ""}{json.dumps(m)}: {{' for m in left] + (["}"] if written else [])
        index = lm.choose(options)
        if index == len(left):
            return out or None
        method, written = left.pop(index), True
        own = decode_object(lm, param_args(method, settings=False), said, withheld=withheld)
        if own:
            out[method] = own
    lm.text += "}"
    return out or None


def decode_enum_list(lm, values: tuple[str, ...]) -> list[str]:
    """``["a", "b"]`` with distinct allowed values, at least one; ``[`` is committed."""
    items: list[str] = []
    while len(items) < len(values):
        left = [v for v in values if v not in items]
        sep = ", " if items else ""
        options = [sep + json.dumps(v) for v in left] + (["]"] if items else [])
        index = lm.choose(options)
        if index == len(left):
            return items
        items.append(left[index])
    lm.text += "]"
    return items


def decode_number_list(lm) -> list[int | float] | None:
    """``[1, 8, 32]``: numbers, at least one; ``[`` is committed."""
    items, kept = [], lm.text
    while len(items) < MAX_LIST_ITEMS:
        value = decode_number(lm)
        if value is None:  # no number: the list ends after the last one written
            lm.text = kept
            break
        items.append(value)
        kept = lm.text
        if lm.choose([", ", "]"]) == 1:
            return items
    lm.text += "]"
    return items or None


def decode_string_list(lm) -> list[str] | None:
    """``["...", "..."]`` of free strings; ``["`` is committed."""
    items = []
    while True:
        items.append(decode_string(lm))
        if len(items) == MAX_LIST_ITEMS:
            lm.text += "]"
            break
        if lm.choose([', "', "]"]) == 1:
            break
    return items if any(items) else None


def decode_arguments(lm, tool: Tool, said: str, given: dict | None = None,
                     withheld: frozenset[str] = frozenset(), narrowed: dict[str, tuple[str, ...]] | None = None) -> dict:
    """The arguments of a call to ``tool`` for a request in the words ``said`` (``given`` ones as they are,
    ``withheld`` ones left out, ``narrowed`` choices offered with those values only: a narrowed list is
    written, since the user wrote some of its values); ``lm.text`` ends with ``"arguments": ``."""
    lm.text += "{"
    args = [Arg(a.name, a.kind, narrowed[a.name], a.required or a.kind == "enum_list")
            if a.name in (narrowed or {}) else a for a in tool_args(tool)]
    return decode_object(lm, args, said, given=given, withheld=withheld)
