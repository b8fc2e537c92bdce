"""The registry's tools as the local model sees them, and the grammar of a tool call's arguments.

Each tool's pydantic input schema becomes a list of :class:`Arg` (name, kind, allowed values): every field
but the approval id. :func:`signature` renders a tool in one line for the prompt; :func:`call_schema` is the
JSON schema one turn's call is decoded under (agent.brains.constrained, llguidance): the candidate tools'
names, each with its arguments: keys, enum values and booleans among the allowed ones, numbers (offered only
when the user wrote a digit), free strings (usually copied from the user's words; a model field takes a
built-in name or a path), a method's ``params`` with that method's own parameter names, the arguments the
classifier's heads gave fixed, the ones they withheld absent. Nothing here reads the user's words for
meaning: the model chooses, and the brain's grounding checks drop a text or number the user never wrote.
The caller validates the decoded call with the tool's input model.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from tools.agent_tools.registry import Tool, model_schema
from tools.bench.inputs import RunInput
from tools.engine.params import PARAM_MODELS
from tools.models import BUILTIN_MODELS, DTYPES

# fields a person does not set in conversation (or that only the approval gate may fill)
HIDDEN = frozenset({"approval_id"})
MODEL_FIELDS = ("target", "draft")  # a built-in model's name or a path the user wrote
RUN_SETTINGS = ("target", "draft", "max_new_tokens", "temperature", "top_p", "dtype")  # allowed inside params
MAX_LIST_ITEMS = 6
# the order of a call's arguments by kind: the grammar fixes the order of an object's keys (as the schema lists
# them), so choices come first, then numbers and nested parameters, then text copied from the request
ORDER = ("enum_list", "enum", "bool", "number", "number_list", "params", "method_params", "string_list", "string")
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
    """The Args of an object schema in the order a call writes them: required ones first, each group by kind
    (:data:`ORDER`; the schema's order within a kind), the prompt last (a choice is made before the text it
    applies to is copied)."""
    required = set(schema.get("required", ()))
    args = [arg_of(name, prop, name in required) for name, prop in schema.get("properties", {}).items()]
    return sorted((a for a in args if a is not None), key=lambda a: (a.name == "prompt", not a.required,
                                                                      ORDER.index(a.kind)))


def tool_args(tool: Tool) -> list[Arg]:
    return list(_tool_args(tool))


@lru_cache(maxsize=None)
def _tool_args(tool: Tool) -> tuple[Arg, ...]:
    return tuple(schema_args(tool.input_schema()))


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
        for arg in schema_args(model_schema(PARAM_MODELS[m])):
            own.setdefault(arg.name, Arg(arg.name, arg.kind, arg.values))
    run = model_schema(RunInput)["properties"]
    saved = [arg_of(name, run[name]) for name in RUN_SETTINGS if name not in own] if settings else []
    return list(own.values()) + [a for a in saved if a is not None]


def in_order(tool: Tool, arguments: dict) -> dict:
    """``arguments`` with their keys in the order a call to ``tool`` writes them (others after), a method's
    ``params`` too."""
    def ordered(values: dict, args: list[Arg]) -> dict:
        rank = {a.name: i for i, a in enumerate(args)}
        return dict(sorted(values.items(), key=lambda kv: rank.get(kv[0], len(rank))))

    args = tool_args(tool)
    kind = {a.name: a.kind for a in args}.get("params")
    out = ordered(arguments, args)
    if isinstance(out.get("params"), dict) and kind == "params":
        out["params"] = ordered(out["params"], param_args(out.get("method")))
    elif isinstance(out.get("params"), dict) and kind == "method_params":
        out["params"] = {m: ordered(own, param_args(m, settings=False)) if isinstance(own, dict) else own
                         for m, own in out["params"].items()}
    return out


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


# ---- the schema of one call --------------------------------------------------------------------


def value_schema(arg: Arg, said: str, context: dict, given: Any = None,
                 withheld: frozenset[str] = frozenset(), asked: frozenset[str] = frozenset()) -> dict:
    """The JSON schema of ``arg``'s value: its allowed values, a nested object's own arguments (a method's
    ``params`` take that method's parameters, those of every method while the method is not known)."""
    if arg.kind == "enum":
        return {"enum": list(arg.values)}
    if arg.kind in ("bool", "number", "string"):
        return {"type": {"bool": "boolean"}.get(arg.kind, arg.kind)}
    if arg.kind == "enum_list":
        return {"type": "array", "items": {"enum": list(arg.values)}, "minItems": 1, "maxItems": len(arg.values)}
    if arg.kind in ("string_list", "number_list"):
        return {"type": "array", "items": {"type": arg.kind.split("_")[0]}, "minItems": 1,
                "maxItems": MAX_LIST_ITEMS}
    if arg.kind == "params":  # the method's own parameters and the run settings, those withheld above left out
        return object_schema(param_args(context.get("method")), said, given, withheld, asked)
    methods = [m for m in context.get("methods") or PARAM_MODELS if m in PARAM_MODELS and param_args(m, False)]
    return {"type": "object", "additionalProperties": False, "properties": {  # method_params: {method: its own}
        m: object_schema(param_args(m, settings=False), said, (given or {}).get(m), withheld) for m in methods}}


def object_schema(args: list[Arg], said: str, given: dict | None = None,
                  withheld: frozenset[str] = frozenset(), asked: frozenset[str] = frozenset()) -> dict:
    """An object of ``args`` in their order: the ``given`` members as they are (a given method's ``params``
    may gain more of its parameters), and the arguments ``said`` could have set (:func:`mentioned`), but the
    ``withheld`` ones; the ``asked`` ones required (the model writes their value). The grammar writes an
    object's keys in the schema's order."""
    given = given or {}
    properties, required = {}, []
    for arg in args:
        if arg.name in given:
            value = given[arg.name]
            nested = arg.kind in ("params", "method_params") and isinstance(value, dict)
            properties[arg.name] = value_schema(arg, said, given, value, withheld, asked) if nested \
                else {"const": value}
            required.append(arg.name)
        elif arg.name not in withheld and mentioned(arg, said):
            properties[arg.name] = value_schema(arg, said, given, None, withheld, asked)
            required += [arg.name] if arg.required or arg.name in asked else []
    for name in [k for k in given if k not in properties]:  # a field the model is never offered (an approval id)
        properties[name] = {"const": given[name]}
        required.append(name)
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


def arguments_schema(tool: Tool, said: str, given: dict | None = None, withheld: frozenset[str] = frozenset(),
                     narrowed: dict[str, tuple[str, ...]] | None = None, asked: frozenset[str] = frozenset()) -> dict:
    """The schema of a call's arguments to ``tool`` for a request in the words ``said``: ``given`` ones as
    they are, ``withheld`` ones left out, ``narrowed`` choices with those values only (a narrowed list is
    required: the user wrote some of its values), the method's parameters ``asked`` required in its
    ``params`` (and so ``params`` too)."""
    args = [Arg(a.name, a.kind, narrowed[a.name], a.required or a.kind == "enum_list")
            if a.name in (narrowed or {}) else a for a in tool_args(tool)]
    args = [Arg(a.name, a.kind, a.values, True) if a.kind == "params" and asked else a for a in args]
    return object_schema(args, said, given, withheld, asked)


def call_schema(arguments: dict[str, dict]) -> dict:
    """One call, ``{"name": ..., "arguments": {...}}``, of any of the names (tool -> its arguments' schema)."""
    calls = [{"type": "object", "properties": {"name": {"const": name}, "arguments": schema},
              "required": ["name", "arguments"], "additionalProperties": False} for name, schema in arguments.items()]
    return calls[0] if len(calls) == 1 else {"anyOf": calls}
