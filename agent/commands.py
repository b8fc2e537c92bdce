"""Tool commands typed in the chat, parsed from the tools' own schemas: no word lists.

``/TOOL [VALUE ...] [key=value ...] [--key value ...] [--flag] [--no-flag]`` calls the registry's tool TOOL (the
names the JSON CLI and the MCP server use; a dash may stand for the underscore). Values are read by the type
the tool's JSON schema gives the field: numbers, booleans (true/false/yes/no/1/0), lists (comma-separated, or
the key repeated), and objects as JSON or as dotted keys (``params.k=4``). A key that is not a field of the
tool but the tool takes a method's ``params`` goes into ``params`` (``/run_method draft k=4 prompt="..."``).
Bare values fill the required fields in the schema's order, a field that lists its values taking the first bare
value it allows. Quoting follows the shell (``prompt="two words"``).
The tool's pydantic model then validates the whole call: what does not validate is a ParameterError that
says which field is wrong and what it takes. This is what runs with no model and no key.
"""

from __future__ import annotations

import copy
import json
import re
import shlex
from typing import Any

from tools.agent_tools.registry import Tool, parse_input
from tools.errors import ParameterError

SHAPE = re.compile(r"\s*/([A-Za-z][\w-]*)(?=\s|$)(.*)", re.DOTALL)
KEY_VALUE = re.compile(r"[A-Za-z_][\w.-]*=")
WORD = re.compile(r"\s*((?:[^\s\"']|\"[^\"]*\"|'[^']*')+)")  # one shell word, its quoted parts whole
TRUE, FALSE = ("true", "yes", "on", "1"), ("false", "no", "off", "0")


def tool_command(text: str, tools: dict[str, Tool]) -> str | None:
    """The registry tool a message calls as a command (``/run_method ...``, ``/run-method ...``), or None."""
    match = SHAPE.match(text)
    if not match:
        return None
    name = match.group(1).replace("-", "_").lower()
    return name if name in tools else None


def parse_command(text: str, tool: Tool) -> dict:
    """The validated arguments of ``/TOOL ...`` for ``tool`` (as a plain dict of what was given); a
    ParameterError that says what to change when the text does not parse or does not validate."""
    match = SHAPE.match(text)
    arguments = read_arguments(match.group(2) if match else "", tool)
    parse_input(tool, arguments)
    return arguments


def read_arguments(rest: str, tool: Tool, text_field: str | None = None) -> dict:
    """The arguments ``rest`` gives ``tool``, not yet validated. With ``text_field`` (a chat shortcut such as
    ``/run draft k=4 Write a haiku``), leading options and schema values are read as such and the text after
    them (unquoted when it is one quoted piece) is that field's value. Otherwise bare values fill the required
    fields in the schema's order; a required field left open stays open (for the caller to ask or refuse)."""
    schema = tool.input_schema()
    properties, required = schema.get("properties", {}), list(schema.get("required", ()))
    arguments: dict[str, Any] = {}
    if text_field is not None:
        text = _leading_options(rest, arguments, properties).strip()
        if text[:1] in "\"'" and len(text) > 1 and text[-1] != text[0] and text[0] in text[1:]:
            end, trial = text.index(text[0], 1), copy.deepcopy(arguments)  # "Write a haiku" k=4
            if not _leading_options(text[end + 1:], trial, properties).strip():
                text, arguments = text[:end + 1], trial
        if text:
            arguments[text_field] = unquote(text)
        return arguments
    try:
        words = shlex.split(rest)
    except ValueError as exc:
        raise ParameterError(f"could not read the command: {exc}",
                             hint='close the quotes: /run_method draft prompt="Write a haiku"') from exc
    _fill_required(arguments, properties, required, _options(words, arguments, properties), tool)
    return arguments


def _options(words: list[str], arguments: dict, properties: dict) -> list[str]:
    """Read ``key=value``, ``--key value``, ``--flag`` and ``--no-flag`` from ``words`` into ``arguments``;
    the bare words left, in order."""
    bare: list[str] = []
    i = 0
    while i < len(words):
        word = words[i]
        if word.startswith("--") and len(word) > 2:
            key, eq, value = word[2:].partition("=")
            key = key.replace("-", "_")
            if not eq:
                if not _takes_value(word, properties):  # --flag, --no-flag
                    key, value = (key, "true") if _type(properties.get(key, {})) == "boolean" else (key[3:], "false")
                elif i + 1 < len(words):
                    i += 1
                    value = words[i]
                else:
                    raise ParameterError(f"--{word[2:]} needs a value", hint=f"write --{word[2:]} VALUE")
            _put(arguments, properties, key, value)
        elif _is_option(word, properties):
            key, _, value = word.partition("=")
            _put(arguments, properties, key.replace("-", "_"), value)
        else:
            bare.append(word)
        i += 1
    return bare


def _leading_options(rest: str, arguments: dict, properties: dict) -> str:
    """Read the options and schema values ``rest`` begins with (``draft ngram k=4 --max-new-tokens 64``) into
    ``arguments``; the text after them."""
    while True:
        match = WORD.match(rest)
        if not match:  # an unclosed quote or apostrophe ("'Twas the night"): the text starts here
            return rest
        word = _unquoted(match.group(1))
        if _is_option(word, properties):
            following = WORD.match(rest, match.end()) if _takes_value(word, properties) else None
            _options([word] if following is None else [word, _unquoted(following.group(1))], arguments, properties)
            rest = rest[(following or match).end():]
            continue
        name = next((k for k, prop in properties.items() if word in allowed(prop)
                     and (k not in arguments or _type(prop) == "array")), None)
        if name is None:
            return rest
        _put(arguments, properties, name, word)
        rest = rest[match.end():]


def _takes_value(word: str, properties: dict) -> bool:
    """Whether an option is ``--key VALUE`` (the next word is its value), not ``--key=value``, ``key=value``,
    a boolean ``--flag`` or ``--no-flag``."""
    if not word.startswith("--") or "=" in word:
        return False
    key = word[2:].replace("-", "_")
    boolean = _type(properties.get(key, {})) == "boolean"
    negated = key.startswith("no_") and key not in properties and _type(properties.get(key[3:], {})) == "boolean"
    return not (boolean or negated)


def _is_option(word: str, properties: dict) -> bool:
    """Whether a word sets a field: ``--key ...``, or ``key=value`` where the key is a field (or a dotted
    one), or the tool takes a method's ``params`` ("numpy==1.26" is no option of install_packages)."""
    if word.startswith("--") and len(word) > 2:
        return True
    if not KEY_VALUE.match(word):
        return False
    key = word.split("=", 1)[0].replace("-", "_")
    return key.split(".", 1)[0] in properties or "params" in properties


def unquote(text: str) -> str:
    """``text`` without one pair of quotes around the whole of it ("'autumn's leaves'" -> "autumn's leaves")."""
    return text[1:-1] if len(text) > 1 and text[0] == text[-1] and text[0] in "\"'" else text


def _unquoted(word: str) -> str:
    try:
        return shlex.split(word)[0]
    except (ValueError, IndexError):
        return word


def _fill_required(arguments: dict, properties: dict, required: list[str], bare: list[str], tool: Tool) -> None:
    """Bare values fill the required fields not given by key: first each field that lists its values takes the
    first bare value it allows, then the others take the bare values left in the schema's order (a list field
    takes every bare value left when it is the last one)."""
    open_fields = [name for name in required if name not in arguments]
    for name in open_fields:  # fields that list their values first
        values = allowed(properties.get(name, {}))
        at = next((i for i, v in enumerate(bare) if v in values), None)
        if at is not None and _type(properties.get(name, {})) != "array":
            _put(arguments, properties, name, bare.pop(at))
    open_fields = [name for name in open_fields if name not in arguments]
    for n, name in enumerate(open_fields):
        if not bare:
            return
        if _type(properties.get(name, {})) == "array" and n == len(open_fields) - 1:
            values, bare[:] = list(bare), []
            for value in values:
                _check_allowed(value, name, properties.get(name, {}))
            _put(arguments, properties, name, ",".join(values))
        else:
            _check_allowed(bare[0], name, properties.get(name, {}))
            _put(arguments, properties, name, bare.pop(0))
    for value in list(bare):  # a bare value an optional field allows by its enum ("draft" for methods)
        name = next((k for k, prop in properties.items() if value in allowed(prop)), None)
        if name is not None:
            bare.remove(value)
            _put(arguments, properties, name, value)
    if len(bare) == 1:  # one word left: not a value of the fields that list theirs (/runs warp: not a method)
        listing = {k: prop for k, prop in properties.items() if allowed(prop) and k not in arguments}
        if len(listing) == 1:
            [(name, prop)] = listing.items()
            _check_allowed(bare[0], name, prop)
        elif listing:
            takes = ", ".join(_with_values(k, prop) for k, prop in listing.items())
            raise ParameterError(f"{bare[0]!r} is not a value /{tool.name} takes: {takes}",
                                 hint="give one of those, or other values by name (key=value or --key value)")
    if bare:
        named = ", ".join(_with_values(k, properties.get(k, {})) for k in required) or "none"
        raise ParameterError(f"/{tool.name} does not know what {' '.join(bare)!r} is for",
                             hint=f"give values by name (key=value or --key value); its required fields: {named}")


def _with_values(name: str, prop: dict) -> str:
    """A field's name with the values its schema lists, where it lists some: "method (baseline | draft | ...)"."""
    values = allowed(prop)
    return f"{name} ({' | '.join(values)})" if values else name


def not_allowed(value: str, name: str, prop: dict) -> str | None:
    """What is wrong with ``value`` as the field ``name`` whose schema lists its values ("'warp' is not a method: one
    of baseline, draft, ..."), or None when the field takes it (or lists no values)."""
    values = allowed(prop)
    if not values or value in values:
        return None
    return f"{value!r} is not a {name.replace('_', ' ')}: one of {', '.join(values)}"


def _check_allowed(value: str, name: str, prop: dict) -> None:
    problem = not_allowed(value, name, prop)
    if problem is not None:
        raise ParameterError(problem, hint=f"give one of them in its place, e.g. {allowed(prop)[0]}")


def allowed(prop: dict) -> tuple:
    """The values a field's schema lists (its enum, or its items' enum)."""
    branches = [prop, *prop.get("anyOf", ())]
    for branch in branches:
        for where in (branch, branch.get("items", {})):
            if "enum" in where:
                return tuple(str(v) for v in where["enum"])
    return ()


def question_for(tool: str, arguments: dict, field: str, prop: dict, read_as: str | None = None) -> str:
    """The question for a required ``field`` of ``tool`` that the user did not give, worded from its schema: the
    values it takes, or what its description says it holds. ``read_as`` names the field the user's words went to
    (the prompt), so that a value misread as it can be said again."""
    if field == "prompt":
        named = " and ".join(m for m in arguments.get("methods") or [arguments.get("method")] if m) or "it"
        return f"Which prompt should I {'compare' if tool == 'compare_methods' else 'run'} {named} on? " \
               "Please give it in quotes."
    label = field.replace("_", " ")
    choices = allowed(prop)
    question = f"Which {label} should it be: one of {', '.join(choices)}?" if choices else \
        f"Which {label} should I use ({prop.get('description', '').split(';')[0].strip() or tool})?"
    if read_as and arguments.get(read_as) and field != read_as:  # say how the words were read
        question += f" ({unquote(str(arguments[read_as]))[:60]!r} was read as the {read_as}.)"
    return question


def _type(prop: dict) -> str | None:
    """The JSON type of a field (the non-null branch of an optional one)."""
    if "type" in prop:
        return prop["type"]
    branches = [b for b in prop.get("anyOf", ()) if b.get("type") != "null"]
    return branches[0].get("type") if branches else None


def _put(arguments: dict, properties: dict, key: str, raw: str) -> None:
    """Set ``key`` (dotted keys go into objects; a key the tool lacks goes into its ``params`` when it has one)."""
    head, dot, tail = key.partition(".")
    if dot and head in properties:
        inner = arguments.setdefault(head, {})
        if not isinstance(inner, dict):
            raise ParameterError(f"{head} was given twice", hint=f"give {head} once, as JSON or as {head}.KEY=VALUE")
        _put(inner, {}, tail, raw)
        return
    if key not in properties and properties and "params" in properties:
        arguments.setdefault("params", {})[key] = _scalar(raw)
        return
    prop = properties.get(key, {})
    kind = _type(prop)
    if kind == "array":
        items = [v.strip() for v in raw.split(",") if v.strip()]
        arguments[key] = [*arguments.get(key, []), *items] if isinstance(arguments.get(key), list) else items
    elif kind == "object" or (raw.startswith("{") and kind is None and properties):
        try:
            arguments[key] = json.loads(raw)
        except ValueError as exc:
            raise ParameterError(f"{key} takes a JSON object", hint=f"{key}='{{\"k\": 4}}' or {key}.k=4") from exc
    elif kind == "boolean":
        low = raw.lower()
        if low not in TRUE + FALSE:
            raise ParameterError(f"{key} is true or false, not {raw!r}", hint=f"{key}=true or --{key} / --no-{key}")
        arguments[key] = low in TRUE
    elif kind in ("integer", "number"):
        arguments[key] = _number(key, raw)
    elif properties:
        arguments[key] = raw
    else:  # inside an object without a schema here (a method's params): read numbers and booleans
        arguments[key] = _scalar(raw)


def _number(key: str, raw: str) -> int | float:
    try:
        value = float(raw)
    except ValueError as exc:
        raise ParameterError(f"{key} takes a number, not {raw!r}", hint=f"write {key}=NUMBER") from exc
    return int(value) if value.is_integer() and re.fullmatch(r"-?\d+", raw.strip()) else value


def _scalar(raw: str) -> Any:
    """A value whose type the schema here does not give: a number, true/false, JSON, else the text."""
    low = raw.lower()
    if low in ("true", "false"):
        return low == "true"
    if re.fullmatch(r"-?\d+(?:\.\d+)?", raw.strip()):
        return _number("value", raw)
    if raw.startswith(("{", "[")):
        try:
            return json.loads(raw)
        except ValueError:
            return raw
    return raw
