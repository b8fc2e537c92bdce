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

While a tool runs, a client that sent a ``progressToken`` gets ``notifications/progress`` with each
line the tool reports (loading a model, each timed repeat, each stored run). The server reports the
package's version in ``serverInfo``. Token lists (prompt and output token ids, per-position tallies)
are left out of results unless the call sets ``include_tokens``; the stored runs keep them.

Every JSON-RPC request with an id gets an answer: a line that is not JSON gets a parse error
(-32700, id null), and a JSON object that is not a valid request gets -32600 (or -32602 for
parameters that are not an object, or a string holding a lone surrogate) with its id, instead of
being dropped; a call before ``initialize`` is told to initialize first.

When the client closes stdin, the requests it sent are still answered before the server ends: the
SDK is told the input ended only once each of them is (an elicitation asked meanwhile is refused at
once, nobody can answer it now), so a piped batch gets every answer. Calls still running after
EOF_WAIT_S are answered with an error, as a signal's are.

SIGINT, SIGTERM or SIGHUP end the server at once: every call still running is answered with an
error saying so, the output is flushed, and the process exits with 128 + the signal's number (a tool
still running in its worker thread is abandoned; its task stays ``running`` in memory, i.e. cut off).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import os
import secrets
import signal
import stat
import sys
import threading
import time
from collections.abc import Callable
from importlib import metadata
from typing import Any

import anyio
import mcp_types as types
from mcp.server import Server
from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity
from mcp.server.stdio import stdio_server
from mcp.shared.dispatcher import coerce_request_id
from mcp.shared.exceptions import MCPError
from mcp_types.version import is_version_at_least

from agent.approval import ApprovalDenied, Gate, approval_prompt
from agent.loop import host_call
from agent.skill_install import skill_text
from memory import Store
from memory.approvals import PENDING_TTL
from tools.agent_tools import registry
from tools.errors import ApprovalError, ParameterError, SpecpilotError
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
PACKAGE = "specpilot"
# results may carry long token lists; they are sent only when the call sets INCLUDE_TOKENS
INCLUDE_TOKENS = "include_tokens"
TOKEN_TOOLS = ("run_method", "compare_methods", "lookup_runs")  # tools whose results name stored runs
TOKEN_KEYS = ("prompt_ids", "output_ids", "baseline_output_ids", "drafted_by_position", "accepted_by_position")
INCLUDE_TOKENS_SCHEMA = {
    "type": "boolean", "default": False, "title": "Include Tokens",
    "description": "also return each run's token lists (" + ", ".join(TOKEN_KEYS) + "), read from the stored "
                   "run; default false: they are left out (hundreds of numbers each), the figures stay"}
INVALID_REQUEST_MESSAGE = ('Invalid Request: send one JSON-RPC 2.0 request per line, '
                           '{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}')  # a client that never answers does not hold the call for ever
LONE_SURROGATE_MESSAGE = ("Invalid params: a string in this request holds a lone surrogate ({escape}), which is not "
                          "Unicode text; JSON \\u escapes must form surrogate pairs (e.g. \\ud83d\\ude00)")
NOT_INITIALIZED_MESSAGE = ("Invalid request parameters: this connection is not initialized; send initialize (then "
                           "notifications/initialized) before {method}, or give the 2026-07-28 protocol envelope in "
                           "params._meta")
STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))
STOPPED_CODE = -32000  # a server error: the call did not finish because the server was stopped
# how long the requests still running when stdin closes may take to finish; long, since a tool call may
# take hours (training): a client that wants the server gone sooner sends SIGTERM (the MCP stdio shutdown)
EOF_WAIT_S = 6 * 3600.0
EOF_POLL_S = 0.05


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


def server_version() -> str:
    """The installed package's version, reported in the initialize result's serverInfo."""
    try:
        return metadata.version(PACKAGE)
    except metadata.PackageNotFoundError:  # a checkout run without installing it
        return "0+unknown"


def tool_schema(tool_: registry.Tool) -> dict:
    """The input schema published for a tool: the registry's, plus include_tokens for the tools whose
    results name stored runs."""
    schema = tool_.input_schema()
    if tool_.name in TOKEN_TOOLS:
        schema.setdefault("properties", {})[INCLUDE_TOKENS] = dict(INCLUDE_TOKENS_SCHEMA)
    return schema


def pop_include_tokens(name: str, arguments: dict) -> bool:
    """Take include_tokens out of a call's arguments (the tool's own input model does not know it);
    ParameterError when it is not a boolean. Other tools keep it, and their input check refuses it."""
    if name not in TOKEN_TOOLS or INCLUDE_TOKENS not in arguments:
        return False
    value = arguments.pop(INCLUDE_TOKENS)
    if value is not None and not isinstance(value, bool):
        raise ParameterError(f"bad input for {name}: {INCLUDE_TOKENS} must be true or false, got {value!r}",
                             hint=f"leave {INCLUDE_TOKENS} out to get the figures without token lists")
    return bool(value)


def without_tokens(value: Any, dropped: set[str]) -> Any:
    """``value`` with every token list (TOKEN_KEYS holding a list) left out, at any depth; their names
    are added to ``dropped``."""
    if isinstance(value, dict):
        kept = {}
        for key, item in value.items():
            if key in TOKEN_KEYS and isinstance(item, list):
                dropped.add(key)
            else:
                kept[key] = without_tokens(item, dropped)
        return kept
    if isinstance(value, list):
        return [without_tokens(item, dropped) for item in value]
    return value


def with_tokens(store: Any, value: Any) -> Any:
    """``value`` with the token lists of each stored run it names (an object with a ``run_id``) filled
    in from the store, at any depth."""
    if isinstance(value, list):
        return [with_tokens(store, item) for item in value]
    if not isinstance(value, dict):
        return value
    out = {key: with_tokens(store, item) for key, item in value.items()}
    if isinstance(value.get("run_id"), str):
        try:
            stored = store.get_run(value["run_id"])
        except SpecpilotError:
            return out
        out.update({key: stored[key] for key in TOKEN_KEYS if isinstance(stored.get(key), list)})
    return out


def shape_result(store: Any, result: ToolResult, include_tokens: bool) -> ToolResult:
    """A result as this server sends it: token lists left out (with a note saying how to get them),
    or, with ``include_tokens``, those of every run it names read back from the store."""
    if result.is_error:
        return result
    if include_tokens:
        content = with_tokens(store, result.content)
    else:
        dropped: set[str] = set()
        content = without_tokens(result.content, dropped)
        if dropped:
            content["tokens_omitted"] = (f"left out: {', '.join(sorted(dropped))}; the stored run keeps them "
                                         f"(lookup_runs with the run id and {INCLUDE_TOKENS}: true returns them)")
    return ToolResult(name=result.name, content=content, is_error=result.is_error, run_ids=result.run_ids)


class ProgressRelay:
    """A tool's progress lines as ``notifications/progress`` on its call's progressToken (nothing is
    sent when the client gave none). Called from the tool's worker thread; a notification that cannot
    be sent is dropped and never fails the tool."""

    def __init__(self, session: Any):
        self.session = session
        self.sent = 0

    async def send(self, text: str) -> None:
        """Send one line (from the event loop)."""
        self.sent += 1
        try:
            await self.session.report_progress(float(self.sent), None, text)
        except Exception as exc:  # noqa: BLE001 - the client left: the tool goes on
            log.debug("progress notification not sent: %s", exc)

    def __call__(self, text: str) -> None:
        """Send one line (from the tool's worker thread), waiting until it is written."""
        try:
            anyio.from_thread.run(self.send, str(text))
        except Exception as exc:  # noqa: BLE001 - the event loop is closing: the tool goes on
            log.debug("progress notification not sent: %s", exc)


def _accepted(response: Any) -> bool:
    return (getattr(response, "action", None) == "accept" and isinstance(response.content, dict)
            and response.content.get("approve") is True)


class SpecpilotMCP:
    """The MCP handlers over one Store (shared by the worker threads), for one connection."""

    def __init__(self, store: Any):
        self.store = store
        self.seal = RequestSeal()
        self.in_flight: dict[Any, str] = {}  # request id -> tool name, while a tools/call runs
        self.input_open = True
        self._elicitations: set[anyio.CancelScope] = set()  # waits for an elicitation answer
        self.server = Server(SERVER_NAME, version=server_version(), instructions=_instructions(),
                             on_list_tools=self.list_tools, on_call_tool=self.call_tool)
        self.server.middleware.insert(0, explain_not_initialized)
        # the SDK's own protection of requestState (encrypted, bound to the call), around RequestSeal's
        self.server.middleware.append(RequestStateBoundary(
            RequestStateSecurity.ephemeral(ttl=STATE_TTL_S), default_audience=SERVER_NAME))

    def input_ended(self) -> None:
        """The client closed its input: an elicitation can no longer be answered; stop waiting for those asked."""
        self.input_open = False
        for scope in list(self._elicitations):
            scope.cancel()

    async def list_tools(self, ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[
            types.Tool(name=t.name, description=t.description, input_schema=tool_schema(t))
            for t in registry.load_tools().values()])

    async def call_tool(self, ctx: Any, params: types.CallToolRequestParams):
        request_id = getattr(ctx, "request_id", None)
        self.in_flight[request_id] = params.name
        try:
            return await self._call_tool(ctx, params)
        finally:
            self.in_flight.pop(request_id, None)

    async def _call_tool(self, ctx: Any, params: types.CallToolRequestParams):
        name, arguments = params.name, dict(params.arguments or {})
        try:
            include_tokens = pop_include_tokens(name, arguments)
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
        relay = ProgressRelay(ctx.session)
        await relay.send(f"running {name}")
        result = await anyio.to_thread.run_sync(self._run, name, arguments, include_tokens, relay)
        return to_call_result(result)

    def _run(self, name: str, arguments: dict, include_tokens: bool, progress: Callable[[str], None]) -> ToolResult:
        """The call itself (in a worker thread): the tool through host_call, the result shaped to send."""
        result = host_call(self.store, name, arguments, progress=progress)
        return shape_result(self.store, result, include_tokens)

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
            with anyio.fail_after(ELICIT_TIMEOUT_S), anyio.CancelScope() as hangup:
                if self.input_open:
                    self._elicitations.add(hangup)
                    try:
                        return await ctx.session.elicit_form(message, ELICIT_SCHEMA, related_request_id=ctx.request_id)
                    finally:
                        self._elicitations.discard(hangup)
        except TimeoutError:
            raise ApprovalError(f"the client did not answer the approval question within {ELICIT_TIMEOUT_S / 60:.0f} "
                                "minutes; nothing was run", hint="call the tool again to be asked anew") from None
        except Exception as exc:  # noqa: BLE001 - the client failed the elicitation: nothing is approved
            raise ApprovalError(f"the client could not ask the person ({type(exc).__name__}: {exc}); nothing was run",
                                hint="approve it at a terminal with `specpilot tool approve ID` instead") from None
        raise ApprovalError("the client closed its input before the approval question was answered; nothing was run",
                            hint="approve it at a terminal with `specpilot tool approve ID` instead")


async def explain_not_initialized(ctx: Any, call_next: Any) -> Any:
    """Server middleware: the SDK refuses a call before ``initialize`` with a bare "Invalid request
    parameters" and empty data; say what to send instead."""
    try:
        return await call_next(ctx)
    except MCPError as exc:
        error = exc.error
        if error.code == types.INVALID_PARAMS and error.message == "Invalid request parameters" and not error.data:
            raise MCPError(code=types.INVALID_PARAMS, message=NOT_INITIALIZED_MESSAGE.format(method=ctx.method),
                           data={"method": ctx.method, "expected_first": "initialize"}) from None
        raise


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
    surrogate = lone_surrogate(message)
    if surrogate is not None:
        request_id = message.get("id")
        usable = (isinstance(request_id, str) and lone_surrogate(request_id) is None) or (
            isinstance(request_id, int) and not isinstance(request_id, bool))
        if "id" not in message:
            log.warning("dropped a notification holding a lone surrogate")
            return False, None
        return False, _error(request_id if usable else None, types.INVALID_PARAMS,
                             LONE_SURROGATE_MESSAGE.format(escape=f"\\u{ord(surrogate):04x}"))
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


def lone_surrogate(value: Any) -> str | None:
    """The first lone surrogate in any string (or key) of a decoded JSON value, else None (walked without
    recursion: a request may nest as deep as the JSON parser allows)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            found = next((c for c in item if "\ud800" <= c <= "\udfff"), None)
            if found is not None:
                return found
        elif isinstance(item, dict):
            stack += [*item.keys(), *item.values()]
        elif isinstance(item, list):
            stack += item
    return None


def _error(request_id: Any, code: int, message: str) -> dict:
    return {"id": request_id, "code": code, "message": message}


class ScreenedLines:
    """The lines from stdin, minus the invalid ones, each answered on ``wire`` before the next line is read
    (in order, and never lost when the input ends right after it). Each request passed on is noted on
    ``wire``; when the input ends, ``at_end`` is awaited before the SDK sees the end."""

    def __init__(self, lines: Any, wire: WireOut, at_end: Callable[[], Any] | None = None):
        self.lines, self.wire, self.at_end = lines, wire, at_end

    def __aiter__(self):
        return self._screened()

    async def _screened(self):
        async for line in self.lines:
            passed, error = screen_line(line)
            if error is not None:
                reply = types.JSONRPCError(jsonrpc="2.0", id=error["id"],
                                           error=types.ErrorData(code=error["code"], message=error["message"]))
                await self.wire.reply(reply.model_dump_json(by_alias=True, exclude_unset=True) + "\n")
            if passed:
                self.wire.note_request(json.loads(line))
                yield line
        if self.at_end is not None:
            await self.at_end()


class WireIn:
    """The protocol's input as lines, read from a private descriptor in a way a signal can cancel: the
    event loop waits until the pipe has data (no reading thread blocks on it), then reads what is there."""

    CHUNK = 1 << 16

    def __init__(self, fd: int):
        self.fd = fd
        self.regular = stat.S_ISREG(os.fstat(fd).st_mode)  # a file never blocks (and cannot be polled)
        self._buffer = b""

    def __aiter__(self):
        return self._lines()

    async def _lines(self):
        while True:
            while b"\n" not in self._buffer:
                if not self.regular:
                    await anyio.wait_readable(self.fd)
                chunk = os.read(self.fd, self.CHUNK)
                if not chunk:
                    if self._buffer:
                        yield self._buffer.decode("utf-8", errors="replace")
                    return
                self._buffer += chunk
            line, self._buffer = self._buffer.split(b"\n", 1)
            yield line.decode("utf-8", errors="replace") + "\n"


def _claim_stdin() -> tuple[WireIn, Callable[[], None]]:
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

    def restore() -> None:
        os.dup2(wire, 0)
        os.close(wire)

    return WireIn(wire), restore


class WireOut:
    """The protocol's output: stdout moved to a private descriptor (fd 1 then writes to stderr, so a stray
    print misses the wire). Each line is written whole under a lock, so :meth:`write_now` (from a signal
    watcher) never splits one; after :meth:`close` nothing more is written. It keeps the requests passed
    to the SDK that no answer written has matched yet (:meth:`unanswered`)."""

    def __init__(self) -> None:
        sys.stdout.flush()
        self.fd = os.dup(1)
        self._saved = os.dup(1)
        os.dup2(2, 1)
        self._lock = threading.Lock()
        self.closed = False
        self._waiting: list[tuple[Any, str]] = []  # (request id, method) of each request not answered yet

    def _write(self, text: str) -> None:
        data = text.encode("utf-8")
        with self._lock:
            if self.closed:
                return
            while data:
                data = data[os.write(self.fd, data):]

    def note_request(self, message: Any) -> None:
        """Note a message passed to the SDK: a request waits for its answer; a cancelled one gets none."""
        if not isinstance(message, dict):
            return
        with self._lock:
            if "id" in message and isinstance(message.get("method"), str):
                self._waiting.append((message["id"], message["method"]))
            elif message.get("method") == "notifications/cancelled" and isinstance(message.get("params"), dict):
                self._settle(message["params"].get("requestId"))

    def _settle(self, request_id: Any) -> None:
        # "7" and 7 are one id to the SDK (coerce_request_id); the lock is held
        key = coerce_request_id(request_id) if isinstance(request_id, (int, str)) else request_id
        for i, (waiting, _) in enumerate(self._waiting):
            if coerce_request_id(waiting) == key:
                del self._waiting[i]
                return

    def _answered(self, message: Any) -> None:
        if isinstance(message, dict) and "id" in message and "method" not in message and (
                "result" in message or "error" in message):
            with self._lock:
                self._settle(message["id"])

    def unanswered(self) -> list[tuple[Any, str]]:
        """(id, method) of each request passed to the SDK that has no answer on the wire yet."""
        with self._lock:
            return list(self._waiting)

    def _send(self, text: str) -> None:
        self._write(text)
        try:
            self._answered(json.loads(text))
        except ValueError:  # the SDK writes JSON; anything else answers no request
            return

    async def write(self, text: str) -> None:
        """Write one message from the SDK (an answer settles its request)."""
        await anyio.to_thread.run_sync(self._send, text)

    async def reply(self, text: str) -> None:
        """Write the answer to a line the SDK never saw (it settles nothing)."""
        await anyio.to_thread.run_sync(self._write, text)

    async def flush(self) -> None:
        """Nothing is buffered: each write reached the descriptor."""

    def write_now(self, message: dict) -> None:
        """Write one JSON-RPC message at once (from the event loop, without waiting for the SDK's writer)."""
        self._write(json.dumps(message, ensure_ascii=False) + "\n")
        self._answered(message)

    def close(self) -> None:
        with self._lock:
            self.closed = True

    def restore(self) -> None:
        """Point fd 1 back at the wire, as it was before."""
        os.dup2(self._saved, 1)
        os.close(self._saved)
        os.close(self.fd)


async def _stop_on_signal(app: SpecpilotMCP, wire: WireOut, stopped: dict, scope: anyio.CancelScope) -> None:
    """On SIGINT, SIGTERM or SIGHUP: answer every call still running with an error, flush, and stop.

    With nothing running the server is cancelled and returns normally; a tool still running in its
    worker thread cannot be cancelled, so the process then exits at once (os._exit) after the answers."""
    with anyio.open_signal_receiver(*STOP_SIGNALS) as signals:
        async for signum in signals:
            name = signal.Signals(signum).name
            stopped["signal"] = signum
            running = list(app.in_flight.items())
            for request_id, tool_name in running:
                wire.write_now({"jsonrpc": "2.0", "id": request_id, "error": {
                    "code": STOPPED_CODE, "data": {"signal": name, "tool": tool_name},
                    "message": f"specpilot mcp was stopped by {name} before {tool_name} finished; nothing more of "
                               "it runs (its task is left unfinished in memory); start the server again to retry"}})
            wire.close()
            log.warning("specpilot mcp stopped by %s (%d call(s) answered with an error)", name, len(running))
            sys.stderr.flush()
            if running:
                os._exit(128 + signum)
            scope.cancel()
            return


async def _answer_before_eof(app: SpecpilotMCP, wire: WireOut, limit: float | None = None) -> None:
    """When stdin ends: wait (at most ``limit`` s, EOF_WAIT_S) until every request passed to the SDK is
    answered, since the SDK cancels the handlers still running when it sees the end and their answers are
    lost. What is still unanswered then gets an error, as on a signal, and the process exits at once if a
    tool still runs in its worker thread (it cannot be cancelled)."""
    app.input_ended()
    limit = EOF_WAIT_S if limit is None else limit
    with anyio.move_on_after(limit):
        while wire.unanswered():
            await anyio.sleep(EOF_POLL_S)
    left = wire.unanswered()
    if not left:
        return
    for request_id, method in left:
        what = app.in_flight.get(request_id, method)
        wire.write_now({"jsonrpc": "2.0", "id": request_id, "error": {
            "code": STOPPED_CODE, "data": {"reason": "input closed", "waited_s": limit, "method": method},
            "message": f"the client closed its input and {what} did not finish within {limit:g} s; nothing more of "
                       "it runs (its task is left unfinished in memory); keep the input open until the answer "
                       "comes, or call it again"}})
    wire.close()
    log.warning("specpilot mcp: %d request(s) unfinished %g s after the input closed, answered with an error",
                len(left), limit)
    sys.stderr.flush()
    if app.in_flight:
        os._exit(1)


async def _serve() -> int:
    lines, restore = _claim_stdin()  # first: before anything else opens a file
    wire = WireOut()
    stopped: dict = {}
    try:
        with Store() as store, anyio.CancelScope() as everything:  # a signal cancels the transport too
            app = SpecpilotMCP(store)
            screened = ScreenedLines(lines, wire, at_end=lambda: _answer_before_eof(app, wire))
            async with stdio_server(stdin=screened, stdout=wire) as (read_stream, write_stream):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(_stop_on_signal, app, wire, stopped, everything)
                    await app.server.run(read_stream, write_stream, app.server.create_initialization_options())
                    tg.cancel_scope.cancel()
    finally:
        wire.restore()
        restore()
    return 128 + stopped["signal"] if "signal" in stopped else 0


def serve() -> int:
    """Serve the tools over stdio until the client closes the connection (0) or a signal stops the
    server (128 + its number); return that exit code."""
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    return anyio.run(_serve)


if __name__ == "__main__":
    sys.exit(serve())
