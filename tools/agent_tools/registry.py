"""The one tool registry: every tool the agent can use, exported to Anthropic tool schemas, the
MCP server and the JSON CLI.

A tool is a plain function ``fn(inp, ctx) -> dict`` with a pydantic input model (``extra="forbid"``)
and a docstring, registered with :func:`tool`. :func:`execute` validates nothing and trusts
nothing: errors become a :class:`ToolResult` with ``is_error`` set (never a traceback), and a
gated tool (install, train, share) refuses to run unless ``ctx.approval`` holds an approval that
the approval gate (``agent.approval``) consumed for exactly this call.
"""

from __future__ import annotations

import copy
import importlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from pydantic import BaseModel, ValidationError

from tools.agent_tools.policy import check_content
from tools.engine.params import METHODS, PARAM_MODELS
from tools.errors import ApprovalError, ParameterError, SpecpilotError
from tools.models import BUILTIN_MODELS, DTYPES, SELF_DRAFT

log = logging.getLogger(__name__)

GATED_ACTIONS = ("install", "train", "share")
APPROVAL_FIELD = "approval_id"
# prompt text one tool call may carry (JSON CLI, MCP, the chat): a longer one ties up the machine for
# minutes; the command line reads longer prompt files (both check the model's context before measuring)
MAX_PROMPT_BYTES = 64 * 1024
PROMPT_FIELDS = ("prompt",)  # input fields holding prompt text, in any tool's input model
# any other string in a tool's input (a model name, a path, a URL, a parameter): longer is not a name
MAX_TEXT_CHARS = 4096
MAX_DEPTH = 16  # lists and objects inside a tool's input (a Medusa tree of choices is 3 deep)
INT_LIMIT = 2 ** 63 - 1  # the largest integer SQLite stores: a number beyond it is no id, count or setting
# characters no name, path or setting holds: NUL, and the bidirectional controls that make text display in
# another order than it is read (a name shown in an approval must read as it is)
BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")

# Modules whose import registers their tools, in the order tools are listed.
TOOL_MODULES = (
    "tools.agent_tools.run_tool",
    "tools.agent_tools.serving_tool",
    "tools.agent_tools.lookup",
    "tools.agent_tools.guidance",
    "tools.agent_tools.choose",
    "tools.agent_tools.explain",
    "tools.agent_tools.deps",
    "tools.agent_tools.install",
    "tools.agent_tools.train_tool",
    "tools.agent_tools.share",
)


@dataclass
class ToolContext:
    """What a tool call may use besides its input.

    ``approval`` is set only by the approval gate, to the approval row it consumed for this call.
    ``progress(text)`` reports what a long tool is doing (the chat shows it beside a spinner).
    """

    store: Any  # memory.Store
    progress: Callable[[str], None] | None = None
    approval: dict | None = None
    task_id: int | None = None
    session_id: str | None = None

    def report(self, text: str) -> None:
        """Pass a progress line to whoever is listening (nothing happens when nobody is)."""
        if self.progress is not None:
            self.progress(text)


@dataclass(frozen=True)
class Tool:
    """A registered tool: its name, function, input model, description and approval gate."""

    name: str
    func: Callable[[BaseModel, ToolContext], dict]
    input_model: type[BaseModel]
    description: str
    gate: str | None = None  # one of GATED_ACTIONS, or None for tools that need no approval
    describe: Callable[[BaseModel], str] | None = None  # exactly what a gated call will do
    # reads memory or the machine only: loads no model, writes no file or memory, needs no approval
    # (``specpilot ask --plan-only`` runs these and only lists the others)
    read_only: bool = False
    # a gated call made concrete before it is approved: relative paths made absolute, "the newest runs"
    # made run ids (``resolve(inp, store)`` returns the input the approval covers and the call runs with)
    resolve: Callable[[BaseModel, Any], BaseModel] | None = None

    def input_schema(self) -> dict:
        """The JSON schema of the tool's input (pydantic's, with titles kept for readability), every
        field described: model names with the built-in ones as examples, ``dtype`` as an enum and a
        method's ``params`` with each method's own fields (see :func:`document_schema`)."""
        return copy.deepcopy(_documented_schema(self.input_model))


@dataclass
class ToolResult:
    """The outcome of one tool call: JSON-able ``content``, and whether it is an error."""

    name: str
    content: dict
    is_error: bool = False
    run_ids: list[str] = field(default_factory=list)

    def as_json(self) -> str:
        """The content as JSON text (what the brain and the hosts receive)."""
        return json.dumps(self.content, ensure_ascii=False, default=str)

    @classmethod
    def error(cls, name: str, message: str, **extra: Any) -> ToolResult:
        """An error result whose content is ``{"error": message, ...}``."""
        return cls(name=name, content={"error": message, **extra}, is_error=True)


_REGISTRY: dict[str, Tool] = {}


def tool(name: str, input_model: type[BaseModel], gate: str | None = None,
         describe: Callable[[BaseModel], str] | None = None, read_only: bool = False,
         resolve: Callable[[BaseModel, Any], BaseModel] | None = None) -> Callable:
    """Register the decorated function as the tool ``name`` (its docstring is the description);
    ``read_only``: it loads no model, writes nothing and needs no approval; ``resolve``: see Tool."""
    if read_only and gate is not None:
        raise ValueError(f"gated tool {name!r} cannot be read-only")
    if gate is not None and gate not in GATED_ACTIONS:
        raise ValueError(f"unknown gate {gate!r}; use one of {GATED_ACTIONS}")
    if input_model.model_config.get("extra") != "forbid":
        raise ValueError(f"the input model of tool {name!r} must set extra='forbid'")
    if gate is not None and (APPROVAL_FIELD not in input_model.model_fields or describe is None):
        raise ValueError(f"gated tool {name!r} needs an {APPROVAL_FIELD} input field and a describe function")

    def register(func: Callable[[BaseModel, ToolContext], dict]) -> Callable:
        doc = " ".join((func.__doc__ or "").split())
        if not doc:
            raise ValueError(f"tool {name!r} needs a docstring: it is the description the model reads")
        _REGISTRY[name] = Tool(name=name, func=func, input_model=input_model, description=doc, gate=gate,
                               describe=describe, read_only=read_only, resolve=resolve)
        return func

    return register


def load_tools() -> dict[str, Tool]:
    """Import every tool module (registering its tools) and return ``{name: Tool}`` in listing order."""
    for module in TOOL_MODULES:
        importlib.import_module(module)
    order = {m: i for i, m in enumerate(TOOL_MODULES)}
    return dict(sorted(_REGISTRY.items(), key=lambda kv: order.get(kv[1].func.__module__, len(order))))


def get_tool(name: str) -> Tool:
    """The tool ``name``; a ParameterError listing the known tools when there is none."""
    tools = load_tools()
    if name not in tools:
        raise ParameterError(f"there is no tool named {name!r}", hint=f"use one of: {', '.join(tools)}")
    return tools[name]


def parse_input(tool_: Tool, raw: dict | str | None) -> BaseModel:
    """Validate raw input (a dict or JSON text) against the tool's model; ParameterError if it is wrong."""
    if raw is None or raw == "":
        raw = {}
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except (json.JSONDecodeError, RecursionError) as exc:
            raise ParameterError(f"the input of {tool_.name} is not valid JSON: {str(exc) or 'nested too deeply'}",
                                 hint='pass a JSON object, e.g. --input \'{"method": "draft"}\'') from None
    if not isinstance(raw, dict):
        raise ParameterError(f"the input of {tool_.name} must be a JSON object, got {type(raw).__name__}")
    check_values(tool_.name, raw)
    try:
        inp = tool_.input_model.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'input'}: {e['msg']}" for e in exc.errors())
        fields = ", ".join(tool_.input_model.model_fields)
        raise ParameterError(f"bad input for {tool_.name}: {problems}", hint=f"{tool_.name} takes: {fields}") from None
    for name in PROMPT_FIELDS:
        check_prompt(tool_.name, name, getattr(inp, name, None))
        check_content(tool_.name, name, getattr(inp, name, None))
    return inp


def check_values(tool_name: str, value: Any, where: str = "", depth: int = 0) -> None:
    """Refuse, anywhere in a tool's raw input, nesting deeper than MAX_DEPTH, an integer beyond INT_LIMIT,
    and a string (or key) that is not valid Unicode, holds NUL or (outside prompt text) a bidirectional
    control, or (outside prompt text, which check_prompt bounds by bytes) is over MAX_TEXT_CHARS.
    ParameterError naming the field."""
    if depth > MAX_DEPTH:
        raise ParameterError(f"bad input for {tool_name}: {where} is nested more than {MAX_DEPTH} levels deep",
                             hint="no tool input nests that deep")
    if isinstance(value, str):
        _check_text(tool_name, where or "input", value, prompt=where in PROMPT_FIELDS)
    elif isinstance(value, int) and not isinstance(value, bool):
        if abs(value) > INT_LIMIT:
            raise ParameterError(f"bad input for {tool_name}: {where or 'input'} is {len(str(abs(value)))} digits "
                                 f"long; no count, id or setting is beyond {INT_LIMIT:,}",
                                 hint="give a number in the field's range")
    elif isinstance(value, dict):
        for key, item in value.items():
            name = f"{where}.{key}" if where else str(key)
            _check_text(tool_name, f"a key in {where or 'the input'}", str(key), prompt=False)
            check_values(tool_name, item, name, depth + 1)
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            check_values(tool_name, item, f"{where}[{i}]", depth + 1)


def _check_text(tool_name: str, where: str, text: str, prompt: bool) -> None:
    problem = None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        problem = f"is not valid Unicode text: a lone surrogate at character {exc.start}"
    if problem is None and "\x00" in text:
        problem = f"holds a NUL character at character {text.index(chr(0))}"
    elif problem is None and not prompt:
        if len(text) > MAX_TEXT_CHARS:
            problem = f"is {len(text):,} characters long; a name, path or setting is at most {MAX_TEXT_CHARS:,}"
        else:
            bidi = next((i for i, c in enumerate(text) if c in BIDI_CONTROLS), None)
            if bidi is not None:
                problem = (f"holds a bidirectional control character (U+{ord(text[bidi]):04X}) at character {bidi}, "
                           "which makes text display in another order than it is read")
    if problem:
        raise ParameterError(f"bad input for {tool_name}: {where} {problem}",
                             hint="send plain UTF-8 text (JSON \\u escapes must form surrogate pairs)")


def check_prompt(tool_name: str, field_name: str, text: object) -> None:
    """Refuse prompt text a tool should not run on: empty or only whitespace, not valid Unicode (a lone
    surrogate), or over MAX_PROMPT_BYTES of UTF-8. ParameterError naming the tool, the field and the size."""
    if not isinstance(text, str):
        return
    where = f"{field_name} of {tool_name}"
    if not text.strip():
        raise ParameterError(f"the {where} is empty" + (" (only whitespace)" if text else ""),
                             hint="give the text to run on")
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise ParameterError(f"the {where} is not valid Unicode text: a lone surrogate at character {exc.start}",
                             hint="send UTF-8 text (JSON \\u escapes must form surrogate pairs)") from None
    if size > MAX_PROMPT_BYTES:
        raise ParameterError(
            f"the {where} is {size:,} bytes of UTF-8; a tool call takes at most {MAX_PROMPT_BYTES:,} bytes "
            f"({MAX_PROMPT_BYTES // 1024} KiB)",
            hint="shorten the prompt, or measure a longer one from the command line: "
                 "`specpilot run --prompt-file FILE` (still checked against the model's context)")


def approval_arguments(tool_: Tool, inp: BaseModel) -> dict:
    """What an approval of a gated call covers: the tool name and its exact input (without the approval id)."""
    return {"tool": tool_.name, "input": inp.model_dump(mode="json", exclude={APPROVAL_FIELD})}


def execute(tool_: Tool, inp: BaseModel, ctx: ToolContext) -> ToolResult:
    """Run a tool on validated input. Errors become an ``is_error`` result; nothing is raised.

    A gated tool runs only when ``ctx.approval`` is an approval consumed for its action whose
    arguments are exactly this call's (see :func:`approval_arguments`).
    """
    try:
        if tool_.gate is not None:
            _check_approval(tool_, inp, ctx.approval)
        content = tool_.func(inp, ctx)
    except SpecpilotError as exc:
        return ToolResult.error(tool_.name, exc.user_message())
    except ValidationError as exc:  # e.g. saved parameters that no longer validate
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'input'}: {e['msg']}" for e in exc.errors())
        return ToolResult.error(tool_.name, f"bad parameters for {tool_.name}: {problems}")
    except Exception as exc:  # a tool bug must reach the model as a result, not crash the conversation
        log.exception("tool %s failed", tool_.name)
        return ToolResult.error(tool_.name, f"internal error in {tool_.name}: {type(exc).__name__}: {exc}")
    if not isinstance(content, dict):
        content = {"result": content}
    run_ids = [str(r) for r in content.get("run_ids", []) or []]
    if content.get("run_id"):
        run_ids.append(str(content["run_id"]))
    return ToolResult(name=tool_.name, content=content, run_ids=list(dict.fromkeys(run_ids)))


def _check_approval(tool_: Tool, inp: BaseModel, approval: dict | None) -> None:
    if approval is None:
        raise ApprovalError(f"{tool_.name} needs the user's approval before it runs ({tool_.gate})",
                            hint="the approval gate asks the user; call the tool through it")
    if approval.get("action") != tool_.gate or approval.get("status") != "consumed":
        raise ApprovalError(f"approval {approval.get('id')} does not cover {tool_.name} ({tool_.gate})")
    covered = {key: (approval.get("arguments") or {}).get(key) for key in ("tool", "input")}
    if covered != approval_arguments(tool_, inp):
        raise ApprovalError(f"approval {approval.get('id')} was given for other arguments than this call",
                            hint="ask for approval of exactly this call")


def anthropic_tools() -> list[dict]:
    """Every tool as an Anthropic Messages API tool definition (name, description, input_schema)."""
    return [{"name": t.name, "description": t.description, "input_schema": t.input_schema()}
            for t in load_tools().values()]


def describe_tools() -> list[dict]:
    """Every tool for listings (JSON CLI, docs): name, description, gate, read_only and input schema."""
    return [{"name": t.name, "description": t.description, "gate": t.gate, "read_only": t.read_only,
             "input_schema": t.input_schema()} for t in load_tools().values()]


# ---- the published input schemas: every field described ------------------------------------------

MODEL_FIELDS = ("target", "draft")  # fields naming a model; the built-in names are their examples
MODEL_REF = ("a built-in name (see examples), a local folder holding a transformers checkpoint, a .gguf file, "
             "or a Hugging Face hub id (only when the hub is reachable)")
# what a field means wherever its input model gives no description (the same in every tool that has it)
FIELD_DESCRIPTIONS = {
    "target": f"the target model, whose output is reproduced and timed: {MODEL_REF}",
    "draft": f"the draft model that proposes tokens for the target: {MODEL_REF}",
    "max_new_tokens": "new tokens to generate after the prompt",
    "temperature": "sampling temperature; 0 is greedy decoding (the output must then match the baseline's token "
                   "for token)",
    "top_p": "nucleus sampling: sample among the most likely tokens whose probabilities add up to this (1: off)",
    "top_k": "sample among the k most likely tokens only (0: off)",
    "seed": "random seed of sampling (the same seed gives the same sampled output)",
    "dtype": "precision of the weights and arithmetic; auto picks bfloat16 where this CPU/GPU runs it fast, "
             "else float32 (the result says which was used and why)",
    "device_map": "accelerate's device map: 'auto' spreads a large model over the GPUs (default: one device)",
    "threads": "CPU threads for torch (default: torch's own choice)",
    "repeats": "how many times each measurement is repeated; the median is reported",
    "warmup": "untimed warm-up runs of each method before the timed ones",
    "prompt": "the prompt text (sent through the model's chat template when chat is true)",
    "num_heads": "Medusa heads to train (head i predicts the token i+1 places ahead)",
    "steps": "training steps (batches)",
    "format": "the report's format: markdown (a table with the figures) or json (every stored field)",
}
# one example of each method's own parameters (each valid: tests parse them with parse_params)
PARAM_EXAMPLES = {"draft": {"k": 4}, "medusa": {"tree": "cpu8"}, "lookahead": {"window": 7, "ngram": 4, "guess": 4},
                  "ngram": {"max_ngram_size": 3, "num_candidate_tokens": 10}}
# run settings that save_params keeps inside params, beside the method's own (their JSON types)
SAVED_SETTINGS = {"target": "string", "draft": "string", "dtype": "string", "max_new_tokens": "integer",
                  "temperature": "number", "top_p": "number", "top_k": "integer", "seed": "integer"}


def _model_examples(prop: dict) -> list[str]:
    """A model field's examples: the built-in names, and the target's own 4-bit copy where the field's input
    takes it (its description says so)."""
    return [*BUILTIN_MODELS, *([SELF_DRAFT] if SELF_DRAFT in (prop.get("description") or "") else [])]


def document_schema(schema: dict) -> dict:
    """A copy of an input schema with every top-level field described: a missing description comes
    from FIELD_DESCRIPTIONS (``method`` lists its methods), model fields get the built-in names as
    examples, ``dtype`` becomes an enum, and ``params`` lists each method's own fields. Only
    descriptions, examples and enums are added: no key is renamed or removed."""
    schema = copy.deepcopy(schema)
    props = schema.get("properties", {})
    for name, prop in props.items():
        if name == "method":
            prop.setdefault("description", _method_description(_enum_of(prop)))
        elif name in FIELD_DESCRIPTIONS:
            prop.setdefault("description", FIELD_DESCRIPTIONS[name])
        if name in MODEL_FIELDS:
            prop["examples"] = _model_examples(prop)
        if name == "dtype":
            _set_enum(prop, DTYPES)
        if name == "params":
            # an input with no target of its own (save_params) keeps the run settings inside params too
            _document_params(prop, with_settings="target" not in props)
    return schema


def _enum_of(prop: dict) -> list:
    """The allowed values of a (possibly optional) enum property."""
    for branch in [prop, *prop.get("anyOf", ())]:
        if "enum" in branch:
            return list(branch["enum"])
    return []


def _set_enum(prop: dict, values: tuple[str, ...]) -> None:
    """Make a free string property (or the string branch of an optional one) an enum of ``values``."""
    if _enum_of(prop):
        return
    for branch in [prop, *prop.get("anyOf", ())]:
        if branch.get("type") == "string":
            branch["enum"] = list(values)
            return


def _method_description(methods: list) -> str:
    names = [m for m in methods if m in METHODS] or list(METHODS)
    return "the decoding method: " + "; ".join(f"{m} = {METHODS[m].description}" for m in names)


@lru_cache(maxsize=None)
def _documented_schema(input_model: type[BaseModel]) -> dict:  # pydantic builds a schema in milliseconds: once
    return document_schema(input_model.model_json_schema())


@lru_cache(maxsize=None)
def model_schema(model: type[BaseModel]) -> dict:
    """``model``'s JSON schema, built once (read it, do not change it)."""
    return model.model_json_schema()


def _param_fields(method: str) -> dict:
    return copy.deepcopy(model_schema(PARAM_MODELS[method]).get("properties", {}))


def _params_by_method() -> str:
    return "; ".join(f"{m}: {', '.join(_param_fields(m)) or 'none'}" for m in METHODS)


def _document_params(prop: dict, with_settings: bool) -> None:
    """Describe a ``params`` property: ``{method: {...}}`` when its values are objects (compare_methods),
    else one method's parameters, chosen by the input's ``method`` (the union of every method's fields,
    each description naming its method; the object stays open, so nothing accepted before is refused)."""
    given = prop.get("description", "the method's own parameters")
    if isinstance(prop.get("additionalProperties"), dict):
        prop["properties"] = {m: {**copy.deepcopy(model_schema(PARAM_MODELS[m])),
                                  "description": f"{m} ({METHODS[m].description}): its own parameters"}
                              for m in METHODS}
        prop["description"] = (f"{given}. Keys are method names, values that method's own parameters "
                               f"({_params_by_method()}); e.g. {json.dumps(PARAM_EXAMPLES)}")
        prop["examples"] = [PARAM_EXAMPLES]
        return
    fields: dict = {}
    for method in METHODS:  # a name two methods share keeps the first one's schema and both descriptions
        for name, field_schema in _param_fields(method).items():
            said = f"{method}: {field_schema.get('description', '')}"
            if name in fields:
                fields[name]["description"] += f" | {said}"
            else:
                fields[name] = {**field_schema, "description": said}
    if with_settings:
        for name, kind in SAVED_SETTINGS.items():
            fields.setdefault(name, {"type": kind, "description": f"run setting: {FIELD_DESCRIPTIONS[name]}"})
            if name in MODEL_FIELDS:
                fields[name]["examples"] = _model_examples(fields[name])
            if name == "dtype":
                _set_enum(fields[name], DTYPES)
    prop["properties"] = fields
    prop["description"] = (f"{given}. The keys depend on method ({_params_by_method()})"
                           + ("; run settings may be saved beside them" if with_settings else "")
                           + f"; e.g. for method draft {json.dumps(PARAM_EXAMPLES['draft'])}, "
                             f"for lookahead {json.dumps(PARAM_EXAMPLES['lookahead'])}")
    prop["examples"] = list(PARAM_EXAMPLES.values())
