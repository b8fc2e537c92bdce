"""The one tool registry: every tool the agent can use, exported to Anthropic tool schemas, the
MCP server and the JSON CLI.

A tool is a plain function ``fn(inp, ctx) -> dict`` with a pydantic input model (``extra="forbid"``)
and a docstring, registered with :func:`tool`. :func:`execute` validates nothing and trusts
nothing: errors become a :class:`ToolResult` with ``is_error`` set (never a traceback), and a
gated tool (install, train, share) refuses to run unless ``ctx.approval`` holds an approval that
the approval gate (``agent.approval``) consumed for exactly this call.
"""

from __future__ import annotations

import importlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ValidationError

from tools.errors import ApprovalError, ParameterError, SpecpilotError

log = logging.getLogger(__name__)

GATED_ACTIONS = ("install", "train", "share")
APPROVAL_FIELD = "approval_id"
# prompt text one tool call may carry (JSON CLI, MCP, the chat): a longer one ties up the machine for
# minutes; the command line reads longer prompt files (both check the model's context before measuring)
MAX_PROMPT_BYTES = 64 * 1024
PROMPT_FIELDS = ("prompt",)  # input fields holding prompt text, in any tool's input model

# Modules whose import registers their tools, in the order tools are listed.
TOOL_MODULES = (
    "tools.agent_tools.run_tool",
    "tools.agent_tools.lookup",
    "tools.agent_tools.guidance",
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

    def input_schema(self) -> dict:
        """The JSON schema of the tool's input (pydantic's, with titles kept for readability)."""
        return self.input_model.model_json_schema()


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
         describe: Callable[[BaseModel], str] | None = None, read_only: bool = False) -> Callable:
    """Register the decorated function as the tool ``name`` (its docstring is the description);
    ``read_only``: it loads no model, writes nothing and needs no approval."""
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
                               describe=describe, read_only=read_only)
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
        except json.JSONDecodeError as exc:
            raise ParameterError(f"the input of {tool_.name} is not valid JSON: {exc}",
                                 hint='pass a JSON object, e.g. --input \'{"method": "draft"}\'') from None
    if not isinstance(raw, dict):
        raise ParameterError(f"the input of {tool_.name} must be a JSON object, got {type(raw).__name__}")
    try:
        inp = tool_.input_model.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'input'}: {e['msg']}" for e in exc.errors())
        fields = ", ".join(tool_.input_model.model_fields)
        raise ParameterError(f"bad input for {tool_.name}: {problems}", hint=f"{tool_.name} takes: {fields}") from None
    for name in PROMPT_FIELDS:
        check_prompt(tool_.name, name, getattr(inp, name, None))
    return inp


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
    if approval.get("arguments") != approval_arguments(tool_, inp):
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
