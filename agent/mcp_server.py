"""``specpilot mcp``: the tool registry as an MCP server over stdio (official ``mcp`` SDK, 2.x).

Tools are listed with their pydantic input schemas and run in a worker thread through the approval
gate. A gated call asks the person through MCP elicitation when the client supports it (an
``InputRequiredResult`` on protocol 2026-07-28 and later, an ``elicitation/create`` request on
earlier ones); otherwise it returns ``approval_required`` and the person approves at their terminal
(``specpilot tool approve ID``). Nothing is printed to stdout except the protocol.

An elicitation answer counts only for a question this server asked on this connection: the
``requestState`` it hands out is a :class:`RequestSeal` token (HMAC under a secret made when the
process starts, bound to the connection, the tool, a hash of the exact input and the approval it
asks about; used once; expiring), inside the SDK's own sealed request state. An approval id in a
client's ``requestState`` (or an answer with no question) decides nothing.

Every JSON-RPC request with an id gets an answer: a line that is not JSON gets a parse error
(-32700, id null), and a JSON object that is not a valid request gets -32600 (or -32602 for
parameters that are not an object) with its id, instead of being dropped.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import os
import secrets
import sys
import time
from typing import Any

import anyio
import mcp_types as types
from mcp.server import Server
from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from mcp_types.version import is_version_at_least

from agent.approval import ApprovalDenied, Gate, approval_prompt
from agent.loop import host_call
from agent.skill_install import skill_text
from memory import Store
from memory.approvals import PENDING_TTL
from tools.agent_tools import registry
from tools.errors import ApprovalError, SpecpilotError
from tools.agent_tools.registry import APPROVAL_FIELD, ToolResult

log = logging.getLogger(__name__)

SERVER_NAME = "specpilot"
INPUT_REQUIRED_VERSION = "2026-07-28"  # protocol versions from this one elicit via InputRequiredResult
ELICIT_KEY = "approval"
ELICIT_SCHEMA = {"type": "object", "required": ["approve"],
                 "properties": {"approve": {"type": "boolean", "title": "Approve",
                                            "description": "yes: run exactly this action once; no: do not run it"}}}
ELICITED_BY = "user via MCP client elicitation"
STATE_TTL_S = 600.0  # an elicitation answered later than this is refused (the question must be asked again)
ELICIT_TIMEOUT_S = PENDING_TTL.total_seconds()
INVALID_REQUEST_MESSAGE = ('Invalid Request: send one JSON-RPC 2.0 request per line, '
                           '{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}')  # a client that never answers does not hold the call for ever


class RequestSeal:
    """Opaque request state for elicitations this server issued on this connection.

    ``issue`` returns a token naming the approval it asks about, bound to this connection, the tool
    and a hash of the exact input, expiring after ``ttl`` seconds; ``redeem`` gives the approval id
    back once, for the same tool and input, and raises ApprovalError for anything else (forged,
    altered, another connection's, expired, already used).
    """

    def __init__(self, ttl: float = STATE_TTL_S, secret: bytes | None = None):
        self.ttl = ttl
        self.connection = secrets.token_hex(8)
        self._secret = secret or secrets.token_bytes(32)  # made per process, never written anywhere
        self._used: set[str] = set()

    def _mac(self, body: bytes) -> str:
        return _b64(hmac.new(self._secret, body, hashlib.sha256).digest())

    def issue(self, tool: str, input_hash: str, approval_id: str) -> str:
        claims = {"c": self.connection, "t": tool, "h": input_hash, "a": approval_id,
                  "n": secrets.token_hex(8), "e": time.time() + self.ttl}
        body = _b64(json.dumps(claims, separators=(",", ":"), sort_keys=True).encode())
        return f"{body}.{self._mac(body.encode())}"

    def redeem(self, token: object, tool: str, input_hash: str) -> str:
        claims = self._verified(token)
        if claims.get("c") != self.connection:
            raise _refused("it was issued on another connection")
        if claims.get("t") != tool or claims.get("h") != input_hash:
            raise _refused("it was issued for another tool or other input")
        if not isinstance(claims.get("e"), (int, float)) or time.time() >= claims["e"]:
            raise _refused("it expired")
        if claims.get("n") in self._used:
            raise _refused("it was already used")
        self._used.add(claims["n"])
        return str(claims["a"])

    def _verified(self, token: object) -> dict:
        if not isinstance(token, str) or token.count(".") != 1:
            raise _refused("this server did not issue it")
        body, mac = token.split(".")
        if not hmac.compare_digest(mac, self._mac(body.encode())):
            raise _refused("this server did not issue it")
        try:
            claims = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
        except ValueError:
            raise _refused("it is malformed") from None
        if not isinstance(claims, dict):
            raise _refused("it is malformed")
        return claims


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _refused(why: str) -> ApprovalError:
    return ApprovalError(f"the approval answer was refused: {why}; nothing was decided or run",
                         hint="call the tool again without requestState to be asked anew")


def input_hash(tool_: registry.Tool, inp: Any) -> str:
    """A hash of exactly what an approval of this call covers (the tool and its input)."""
    exact = json.dumps(registry.approval_arguments(tool_, inp), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(exact.encode()).hexdigest()


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
    """The MCP handlers over one Store (shared by the worker threads), for one connection."""

    def __init__(self, store: Any):
        self.store = store
        self.seal = RequestSeal()
        self.server = Server(SERVER_NAME, instructions=_instructions(), on_list_tools=self.list_tools,
                             on_call_tool=self.call_tool)
        # the SDK's own protection of requestState (encrypted, bound to the call), around RequestSeal's
        self.server.middleware.append(RequestStateBoundary(
            RequestStateSecurity.ephemeral(ttl=STATE_TTL_S), default_audience=SERVER_NAME))

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
        # a gated call is answered only with state this server issued; a stray answer decides nothing
        if tool_.gate is not None and not arguments.get(APPROVAL_FIELD) and (
                params.request_state or supports_elicitation(ctx)):
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
        if params.request_state:
            approval_id = self.seal.redeem(params.request_state, tool_.name, input_hash(tool_, inp))
            answer = (params.input_responses or {}).get(ELICIT_KEY)
            if answer is None:
                raise ApprovalError(f"the approval question for {approval_id} was not answered; nothing was run",
                                    hint="call the tool again without requestState to be asked anew")
        elif uses_input_required(ctx):
            return self._ask_with_input_required(tool_, inp)
        else:
            pending = Gate(self.store).request(tool_, inp)
            approval_id = pending["id"]
            answer = await self._elicit_form(ctx, approval_prompt(tool_.gate, pending["reason"], approval_id))
        approved = _accepted(answer)
        self.store.decide_approval(approval_id, approved, by=ELICITED_BY)
        if not approved:
            raise ApprovalDenied(f"the user did not approve {tool_.gate} (approval {approval_id}); nothing was run",
                                 hint="do not retry it unless the user asks for it again")
        return approval_id

    def _ask_with_input_required(self, tool_: registry.Tool, inp: Any) -> types.InputRequiredResult:
        """Record a pending approval and return the question, with sealed state naming it."""
        pending = Gate(self.store).request(tool_, inp)
        message = approval_prompt(tool_.gate, pending["reason"], pending["id"])
        request = types.ElicitRequest(params=types.ElicitRequestFormParams(
            message=message, requested_schema=ELICIT_SCHEMA))
        state = self.seal.issue(tool_.name, input_hash(tool_, inp), pending["id"])
        return types.InputRequiredResult(input_requests={ELICIT_KEY: request}, request_state=state)

    async def _elicit_form(self, ctx: Any, message: str) -> Any:
        """Send elicitation/create on this connection and wait (bounded) for the client's answer."""
        try:
            with anyio.fail_after(ELICIT_TIMEOUT_S):
                return await ctx.session.elicit_form(message, ELICIT_SCHEMA, related_request_id=ctx.request_id)
        except TimeoutError:
            raise ApprovalError(f"the client did not answer the approval question within {ELICIT_TIMEOUT_S / 60:.0f} "
                                "minutes; nothing was run", hint="call the tool again to be asked anew") from None
        except Exception as exc:  # noqa: BLE001 - the client failed the elicitation: nothing is approved
            raise ApprovalError(f"the client could not ask the person ({type(exc).__name__}: {exc}); nothing was run",
                                hint="approve it at a terminal with `specpilot tool approve ID` instead") from None


def _instructions() -> str:
    text = skill_text("SKILL.md")
    return text.split("---", 2)[-1].strip()  # the body, without the frontmatter


# ---- stdio, answering every request --------------------------------------------------------

def screen_line(line: str) -> tuple[bool, dict | None]:
    """Whether the SDK can take ``line`` as a JSON-RPC message, and the error to answer it with if not.

    A line that is not JSON gets a parse error with id null; an object with an id that is not a valid
    request gets -32600 (or -32602 when its params are not an object), with the id when it is usable;
    notifications and responses that are not valid are dropped (nothing waits for an answer to them).
    """
    if not line.strip():
        return False, None
    try:
        message = json.loads(line)
    except (ValueError, RecursionError):
        return False, _error(None, types.PARSE_ERROR, "Parse error: the line is not JSON (or nested too deeply)")
    if not isinstance(message, dict):
        return False, _error(None, types.INVALID_REQUEST,
                             "Invalid Request: send one JSON-RPC object per line (batches are not supported)")
    try:
        parsed = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
    except Exception:  # noqa: BLE001 - any validation failure is answered below
        parsed = None
    if parsed is not None and not (isinstance(parsed, types.JSONRPCNotification) and "id" in message):
        return True, None
    request_id = message.get("id")
    usable = isinstance(request_id, str) or (isinstance(request_id, int) and not isinstance(request_id, bool))
    if "id" not in message or ("method" not in message and ("result" in message or "error" in message)):
        log.warning("dropped an invalid JSON-RPC notification or response: %.200s", line)
        return False, None
    if usable and message.get("params") is not None and not isinstance(message["params"], dict):
        return False, _error(request_id, types.INVALID_PARAMS, "Invalid params: params must be an object")
    return False, _error(request_id if usable else None, types.INVALID_REQUEST, INVALID_REQUEST_MESSAGE)


def _error(request_id: Any, code: int, message: str) -> dict:
    return {"id": request_id, "code": code, "message": message}


class ScreenedLines:
    """The lines from stdin, minus the invalid ones, whose errors go to ``replies`` instead."""

    def __init__(self, lines: Any, replies: Any):
        self.lines, self.replies = lines, replies

    def __aiter__(self):
        return self._screened()

    async def _screened(self):
        async for line in self.lines:
            passed, error = screen_line(line)
            if error is not None:
                await self.replies.send(error)
            if passed:
                yield line


def _claim_stdin() -> tuple[Any, Any]:
    """The protocol's input (stdin, moved to a private descriptor) and a function restoring fd 0.

    fd 0 then reads the null device, so a child process (pip) or a stray read cannot eat protocol bytes.
    """
    if sys.stdin is None:  # fd 0 was closed when the process started: it may now belong to another file
        raise SpecpilotError("specpilot mcp speaks MCP on its standard input, which is closed",
                             hint="start it from an MCP client (it connects the server's stdin and stdout)")
    wire = os.dup(0)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    stream = os.fdopen(wire, "r", encoding="utf-8", errors="replace", newline="\n")

    def restore() -> None:
        os.dup2(wire, 0)
        stream.close()

    return anyio.wrap_file(stream), restore


async def _answer_errors(errors: Any, write_stream: Any) -> None:
    """Write the error answers for invalid lines (until the connection closes)."""
    try:
        async for error in errors:
            reply = types.JSONRPCError(jsonrpc="2.0", id=error["id"],
                                       error=types.ErrorData(code=error["code"], message=error["message"]))
            await write_stream.send(SessionMessage(reply))
    except (anyio.ClosedResourceError, anyio.BrokenResourceError):
        pass  # the client left


async def _serve() -> None:
    lines, restore = _claim_stdin()  # first: before anything else opens a file
    try:
        with Store() as store:
            app = SpecpilotMCP(store)
            send_errors, errors = anyio.create_memory_object_stream(float("inf"))
            async with stdio_server(stdin=ScreenedLines(lines, send_errors)) as (read_stream, write_stream):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(_answer_errors, errors, write_stream)
                    await app.server.run(read_stream, write_stream, app.server.create_initialization_options())
                    tg.cancel_scope.cancel()
    finally:
        restore()


def serve() -> None:
    """Serve the tools over stdio until the client closes the connection."""
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    anyio.run(_serve)


if __name__ == "__main__":
    serve()
