"""``specpilot mcp``: the tool registry as an MCP server over stdio (official ``mcp`` SDK, 2.x).

Tools are listed with their pydantic input schemas and run in a worker thread through the approval
gate. A gated call asks the person through MCP elicitation when the client supports it (an
``InputRequiredResult`` on protocol 2026-07-28 and later, an ``elicitation/create`` request on
earlier ones); otherwise it returns ``approval_required`` and the person approves at their terminal
(``specpilot tool approve --id ID``). Nothing is printed to stdout except the protocol.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import anyio
import mcp_types as types
from mcp.server import Server
from mcp.server.stdio import stdio_server
from mcp_types.version import is_version_at_least

from agent.approval import ApprovalDenied, Gate, approval_prompt
from agent.loop import host_call
from agent.skill_install import skill_text
from memory import Store
from tools.agent_tools import registry
from tools.errors import SpecpilotError
from tools.agent_tools.registry import APPROVAL_FIELD, ToolResult

log = logging.getLogger(__name__)

SERVER_NAME = "specpilot"
INPUT_REQUIRED_VERSION = "2026-07-28"  # protocol versions from this one elicit via InputRequiredResult
ELICIT_KEY = "approval"
ELICIT_SCHEMA = {"type": "object", "required": ["approve"],
                 "properties": {"approve": {"type": "boolean", "title": "Approve",
                                            "description": "yes: run exactly this action once; no: do not run it"}}}
ELICITED_BY = "user via MCP client elicitation"


def supports_elicitation(ctx: Any) -> bool:
    """Whether the client declared form elicitation (a bare ``elicitation: {}`` counts as form)."""
    caps = ctx.session.client_capabilities
    elicitation = caps.elicitation if caps is not None else None
    return elicitation is not None and (elicitation.form is not None or elicitation.url is None)


def uses_input_required(ctx: Any) -> bool:
    """Whether this connection elicits by returning InputRequiredResult (2026-07-28+)."""
    version = ctx.protocol_version
    return version is not None and is_version_at_least(version, INPUT_REQUIRED_VERSION)


def to_call_result(result: ToolResult) -> types.CallToolResult:
    """A registry result as an MCP tool result (JSON text plus structured content; is_error kept)."""
    return types.CallToolResult(content=[types.TextContent(type="text", text=result.as_json())],
                                structured_content=result.content, is_error=result.is_error)


def _accepted(response: Any) -> bool:
    return (getattr(response, "action", None) == "accept" and isinstance(response.content, dict)
            and response.content.get("approve") is True)


class SpecpilotMCP:
    """The MCP handlers over one Store (shared by the worker threads)."""

    def __init__(self, store: Any):
        self.store = store
        self.server = Server(SERVER_NAME, instructions=_instructions(), on_list_tools=self.list_tools,
                             on_call_tool=self.call_tool)

    async def list_tools(self, ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[
            types.Tool(name=t.name, description=t.description, input_schema=t.input_schema())
            for t in registry.load_tools().values()])

    async def call_tool(self, ctx: Any, params: types.CallToolRequestParams):
        name, arguments = params.name, dict(params.arguments or {})
        try:
            tool_ = registry.get_tool(name)
            inp = registry.parse_input(tool_, arguments)
        except SpecpilotError as exc:
            return to_call_result(ToolResult.error(name, exc.user_message()))
        if tool_.gate is not None and not arguments.get(APPROVAL_FIELD) and supports_elicitation(ctx):
            try:
                approval_id = await self._elicit(ctx, params, tool_, inp)
            except SpecpilotError as exc:
                return to_call_result(ToolResult.error(name, exc.user_message()))
            if not isinstance(approval_id, str):
                return approval_id  # an InputRequiredResult: the client asks the person and retries
            arguments[APPROVAL_FIELD] = approval_id
        result = await anyio.to_thread.run_sync(host_call, self.store, name, arguments)
        return to_call_result(result)

    async def _elicit(self, ctx: Any, params: Any, tool_: registry.Tool, inp: Any):
        """Ask the person through the client; return the decided approval id (or an InputRequiredResult)."""
        gate = Gate(self.store)
        if uses_input_required(ctx):
            answer = (params.input_responses or {}).get(ELICIT_KEY)
            if answer is None or not params.request_state:
                pending = gate.request(tool_, inp)
                message = approval_prompt(tool_.gate, pending["reason"], pending["id"])
                request = types.ElicitRequest(params=types.ElicitRequestFormParams(
                    message=message, requested_schema=ELICIT_SCHEMA))
                return types.InputRequiredResult(input_requests={ELICIT_KEY: request}, request_state=pending["id"])
            approval_id = params.request_state
            current = self.store.get_approval(approval_id)
            if current["arguments"] != registry.approval_arguments(tool_, inp) or current["action"] != tool_.gate:
                raise SpecpilotError(f"approval {approval_id} does not cover this call",
                                     hint="call the tool again without request state to be asked anew")
        else:
            pending = gate.request(tool_, inp)
            approval_id = pending["id"]
            answer = await ctx.session.elicit_form(approval_prompt(tool_.gate, pending["reason"], approval_id),
                                                   ELICIT_SCHEMA, related_request_id=ctx.request_id)
        approved = _accepted(answer)
        self.store.decide_approval(approval_id, approved, by=ELICITED_BY)
        if not approved:
            raise ApprovalDenied(f"the user did not approve {tool_.gate} (approval {approval_id}); nothing was run",
                                 hint="do not retry it unless the user asks for it again")
        return approval_id


def _instructions() -> str:
    text = skill_text("SKILL.md")
    return text.split("---", 2)[-1].strip()  # the body, without the frontmatter


async def _serve() -> None:
    with Store() as store:
        app = SpecpilotMCP(store)
        async with stdio_server() as (read_stream, write_stream):
            await app.server.run(read_stream, write_stream, app.server.create_initialization_options())


def serve() -> None:
    """Serve the tools over stdio until the client closes the connection."""
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    anyio.run(_serve)


if __name__ == "__main__":
    serve()
