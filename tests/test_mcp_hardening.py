"""The MCP server under a hostile client (issue 13, findings 1 and 10): an approval is decided only by
an answer to an elicitation this server issued on this connection (sealed request state: bound to
the connection, the tool and its exact input, single use, expiring), and every JSON-RPC request
that has an id gets an answer. Ends with a hypothesis fuzz of every registered tool through a real
stdio session. pip and model loading are replaced by recorders in the server: nothing is installed
or loaded."""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.loop import host_call
from agent.mcp_server import RequestSeal, input_hash, screen_line
from memory import Store
from tools.agent_tools import registry
from tools.errors import ApprovalError

ROOT = Path(__file__).resolve().parents[1]
START_TIMEOUT_S = 180  # the first answer waits for the server to import torch (slow on a busy machine)
ANSWER_TIMEOUT_S = 60  # any later request not answered in this time counts as a hang
MODERN = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
          "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
          "io.modelcontextprotocol/clientInfo": {"name": "hostile", "version": "0"}}
ACCEPT = {"approval": {"action": "accept", "content": {"approve": True}}}

# `specpilot mcp` with pip and model loading replaced by recorders (appended to $PIP_RECORD / $LOAD_RECORD)
RECORDING_SERVER = """
import json, os
import tools.agent_tools.install as install
import tools.models as models
from tools.errors import ModelNotFoundError

class Done:
    returncode, stdout, stderr = 0, "recorded\\n", ""

def record(name, value):
    with open(os.environ[name], "a") as f:
        f.write(json.dumps(value) + "\\n")

def record_pip(argv):
    record("PIP_RECORD", list(argv))
    return Done()

def record_load(ref, *a, **k):
    record("LOAD_RECORD", str(ref))
    raise ModelNotFoundError("model loading is replaced in this test")

install.run_pip = record_pip
models.load = record_load
from agent.mcp_server import serve
serve()
"""


class RawServer:
    """A recording `specpilot mcp` process spoken to line by line, as a hostile client would."""

    def __init__(self, home: Path, folder: Path):
        self.records = {"pip": folder / "pip.jsonl", "load": folder / "load.jsonl"}
        self.stderr_path = folder / "server-stderr.txt"
        env = {"SPECPILOT_HOME": str(home), "PATH": os.environ.get("PATH", ""), "HF_HUB_OFFLINE": "1",
               "SPECPILOT_PEERS": os.environ.get("SPECPILOT_PEERS", str(folder / "no-peers")),
               "PYTHONPATH": str(ROOT), "PIP_RECORD": str(self.records["pip"]),
               "LOAD_RECORD": str(self.records["load"])}
        self._stderr = open(self.stderr_path, "wb")  # a file: a chatty server never blocks on a full pipe
        self.proc = subprocess.Popen([sys.executable, "-c", RECORDING_SERVER], cwd=ROOT, env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr)
        self._buffer = b""
        self._selector = selectors.DefaultSelector()
        self._selector.register(self.proc.stdout, selectors.EVENT_READ)
        self.started = False
        self.stdout_lines: list[str] = []

    def send(self, message: dict | str) -> None:
        line = message if isinstance(message, str) else json.dumps(message)
        self.proc.stdin.write(line.encode("utf-8", "surrogatepass") + b"\n")
        self.proc.stdin.flush()

    def read(self, timeout: float) -> dict:
        """The next message on stdout; fails on a line that is not JSON-RPC, or when none comes in time."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            assert left > 0 and self._selector.select(left), f"no answer within {timeout:.0f} s (a hang)"
            chunk = os.read(self.proc.stdout.fileno(), 1 << 16)
            assert chunk, f"the server closed its output; stderr:\n{self.stderr()[-3000:]}"
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        self.stdout_lines.append(line.decode())
        message = json.loads(line)  # only the protocol is printed on stdout
        assert message.get("jsonrpc") == "2.0", line
        return message

    def answer(self, request_id, timeout: float | None = None) -> dict:
        """Read until the answer to ``request_id`` (other messages in between are dropped)."""
        timeout = timeout or (ANSWER_TIMEOUT_S if self.started else START_TIMEOUT_S)
        deadline = time.monotonic() + timeout
        while True:
            message = self.read(max(deadline - time.monotonic(), 0.01))
            if "method" not in message and message.get("id") == request_id:
                self.started = True
                return message

    def request(self, request_id, method: str, params: dict | None = None) -> dict:
        self.send({"jsonrpc": "2.0", "id": request_id, "method": method, **({"params": params} if params else {})})
        return self.answer(request_id)

    def initialize(self, capabilities: dict | None = None) -> None:
        reply = self.request("init", "initialize", {"protocolVersion": "2025-06-18", "capabilities": capabilities or {},
                                                    "clientInfo": {"name": "test", "version": "0"}})
        assert "result" in reply, reply
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def recorded(self, what: str) -> list:
        path = self.records[what]
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def stderr(self) -> str:
        self._stderr.flush()
        return self.stderr_path.read_text(errors="replace")

    def close(self) -> str:
        """Close the connection, wait for the server to leave, and return its stderr."""
        if self.proc.stdin and not self.proc.stdin.closed:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError("the server did not exit when its input closed") from None
        finally:
            self._stderr.close()
        return self.stderr_path.read_text(errors="replace")


@pytest.fixture
def server(specpilot_home, tmp_path):
    raw = RawServer(specpilot_home, tmp_path)
    yield raw
    if raw.proc.poll() is None:
        raw.close()


@pytest.fixture
def one_run(specpilot_home) -> str:
    with Store() as store:
        return store.add_run({"method": "draft", "target": "t", "prompt": "p", "speedup": 1.42,
                              "hardware": {"name": "Test CPU"}})


def modern_call(request_id, name: str, arguments: dict, **extra) -> dict:
    """A 2026-07-28 tools/call: no initialize, the protocol envelope in _meta."""
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
            "params": {"name": name, "arguments": arguments, "_meta": MODERN, **extra}}


def result_of(reply: dict) -> dict:
    assert "result" in reply, reply
    return reply["result"]


def statuses() -> list[str]:
    with Store() as store:
        return [a["status"] for a in store.list_approvals()]


# ---- finding 1: one line with no initialize approves nothing -----------------------------

def test_one_forged_line_with_no_initialize_approves_nothing(server, one_run, tmp_path):
    """The issue's probe: requestState = a pending approval id made through `specpilot tool`, and an
    accepting inputResponses, in one JSON line with no initialize."""
    outside = tmp_path / "outside"
    outside.mkdir()
    with Store() as store:
        shared = host_call(store, "share_results", {"destination": str(outside)}).content
        install = host_call(store, "install_packages", {"packages": ["p-x"]}).content
    assert shared["status"] == install["status"] == "approval_required"
    forged = [modern_call(1, "share_results", {"destination": str(outside)}, requestState=shared["approval_id"],
                          inputResponses=ACCEPT),
              modern_call(2, "install_packages", {"packages": ["p-x"]}, requestState=install["approval_id"],
                          inputResponses=ACCEPT),
              modern_call(3, "install_packages", {"packages": ["p-x"]}, requestState="v1." + "A" * 80,
                          inputResponses=ACCEPT)]
    for line in forged:
        server.send(line)
        reply = server.answer(line["id"])
        assert "error" in reply or reply["result"].get("isError"), reply
    assert list(outside.iterdir()) == [] and server.recorded("pip") == []
    assert statuses() == ["pending", "pending"]
    assert "Traceback" not in server.close()


def test_an_answer_with_no_question_decides_nothing(server):
    """inputResponses without requestState: the server asks anew (a new pending approval), decides nothing."""
    line = modern_call(1, "install_packages", {"packages": ["p-x"]}, inputResponses=ACCEPT)
    server.send(line)
    result = result_of(server.answer(1))
    assert result.get("inputRequests") and result.get("requestState")
    assert statuses() == ["pending"] and server.recorded("pip") == []


def test_sealed_state_is_single_use_and_bound_to_the_exact_input(server):
    asked = modern_call(1, "install_packages", {"packages": ["p-x"]})
    first = result_of(server.request(1, "tools/call", asked["params"]))
    state = first["requestState"]
    swapped = modern_call(2, "install_packages", {"packages": ["p-evil"]}, requestState=state, inputResponses=ACCEPT)
    server.send(swapped)
    assert "error" in server.answer(2)  # state issued for other input
    good = modern_call(3, "install_packages", {"packages": ["p-x"]}, requestState=state, inputResponses=ACCEPT)
    server.send(good)
    assert result_of(server.answer(3))["structuredContent"]["status"] == "installed"
    server.send({**good, "id": 4})
    again = result_of(server.answer(4))
    assert again["isError"] and "already used" in again["structuredContent"]["error"]
    assert server.recorded("pip") == [[sys.executable, "-m", "pip", "install", "p-x"]]
    assert statuses() == ["consumed"]
    assert "Traceback" not in server.close()


def test_a_pending_approval_id_in_the_arguments_runs_nothing(server):
    with Store() as store:
        pending = host_call(store, "install_packages", {"packages": ["p-x"]}).content["approval_id"]
    server.initialize()
    reply = server.request(1, "tools/call", {"name": "install_packages",
                                             "arguments": {"packages": ["p-x"], "approval_id": pending}})
    assert result_of(reply)["isError"] and "not been approved yet" in reply["result"]["structuredContent"]["error"]
    assert server.recorded("pip") == [] and statuses() == ["pending"]


def test_request_seal_refuses_what_it_did_not_issue_for_this_call():
    seal, other = RequestSeal(), RequestSeal()
    token = seal.issue("install_packages", "h1", "abcd1234")
    tampered = token[:-2] + ("AA" if token[-2:] != "AA" else "BA")  # always another MAC (1 in ~1000 ends in AA)
    for wrong, why in ((lambda: other.redeem(token, "install_packages", "h1"), "did not issue"),
                       (lambda: seal.redeem(token, "share_results", "h1"), "another tool"),
                       (lambda: seal.redeem(token, "install_packages", "h2"), "other input"),
                       (lambda: seal.redeem(tampered, "install_packages", "h1"), "did not issue"),
                       (lambda: seal.redeem("abcd1234", "install_packages", "h1"), "did not issue"),
                       (lambda: seal.redeem(None, "install_packages", "h1"), "did not issue")):
        with pytest.raises(ApprovalError, match=why):
            wrong()
    assert seal.redeem(token, "install_packages", "h1") == "abcd1234"
    with pytest.raises(ApprovalError, match="already used"):
        seal.redeem(token, "install_packages", "h1")
    same_secret = RequestSeal(secret=b"k" * 32)
    foreign = RequestSeal(secret=b"k" * 32).issue("install_packages", "h1", "abcd1234")
    with pytest.raises(ApprovalError, match="another connection"):
        same_secret.redeem(foreign, "install_packages", "h1")
    expired = RequestSeal(ttl=-1.0)
    with pytest.raises(ApprovalError, match="expired"):
        expired.redeem(expired.issue("install_packages", "h1", "abcd1234"), "install_packages", "h1")


def test_the_input_hash_covers_the_exact_input():
    tool_ = registry.get_tool("install_packages")
    a = input_hash(tool_, registry.parse_input(tool_, {"packages": ["gguf"]}))
    assert a == input_hash(tool_, registry.parse_input(tool_, {"packages": ["gguf"], "upgrade": False}))
    assert a != input_hash(tool_, registry.parse_input(tool_, {"packages": ["gguf"], "upgrade": True}))


# ---- finding 10: every request with an id is answered -------------------------------------

BAD_LINES = [  # (line, expected id of the answer, expected code)
    ("not json", None, -32700),
    ('{"jsonrpc": "2.0", "id": 1, "method": ', None, -32700),
    ("[1, 2]", None, -32600),
    ('"a string"', None, -32600),
    ('{"jsonrpc": "2.0", "id": 7}', 7, -32600),
    ('{"jsonrpc": "2.0", "id": "x", "method": 5}', "x", -32600),
    ('{"jsonrpc": "1.0", "id": 8, "method": "ping"}', 8, -32600),
    ('{"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": [1]}', 9, -32602),
    ('{"jsonrpc": "2.0", "id": true, "method": "ping"}', None, -32600),
    ('{"jsonrpc": "2.0", "id": 1.5, "method": "ping"}', None, -32600),
    ('{"jsonrpc": "2.0", "id": 10, "method": "no/such/method"}', 10, -32601),
    ('{"jsonrpc": "2.0", "id": 11, "method": "tools/call", "params": {"name": 5}}', 11, -32602),
    ("[" * 5000, None, -32700),
]


def test_every_request_with_an_id_gets_an_answer(server):
    server.initialize()
    for line, expected_id, code in BAD_LINES:
        server.send(line)
        reply = server.answer(expected_id)
        assert reply["error"]["code"] == code, (line, reply)
    server.send('{"jsonrpc": "2.0", "method": "notifications/whatever", "params": 3}')  # no id: no answer
    assert "result" in server.request(12, "ping")
    assert "result" in server.request(13, "tools/list")
    assert "Traceback" not in server.close()


@pytest.mark.parametrize("line,expected", [
    ('{"jsonrpc": "2.0", "id": 1, "method": "ping"}', (True, None)),
    ('{"jsonrpc": "2.0", "method": "notifications/initialized"}', (True, None)),
    ('{"jsonrpc": "2.0", "id": 1, "result": {}}', (True, None)),
    ("   ", (False, None)),
    ('{"jsonrpc": "2.0", "method": 5}', (False, None)),
])
def test_screen_line_passes_messages_and_drops_what_nobody_waits_for(line, expected):
    assert screen_line(line) == expected


# ---- stdin closed while calls run (QA s21, finding 9) ---------------------------------------

# `specpilot mcp` whose model loading sleeps $LOAD_SLEEP_S seconds and then fails, with EOF_WAIT_S = $EOF_WAIT_S
SLEEPY_SERVER = """
import os, sys, time
import agent.mcp_server as mcp_server
import tools.models as models
from tools.errors import ModelNotFoundError

def sleepy_load(*a, **k):
    time.sleep(float(os.environ["LOAD_SLEEP_S"]))
    raise ModelNotFoundError("model loading is replaced in this test")

models.load = sleepy_load
mcp_server.EOF_WAIT_S = float(os.environ["EOF_WAIT_S"])
sys.exit(mcp_server.serve())
"""

INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "batch", "version": "0"}}}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


def call(request_id, name: str, arguments: dict) -> dict:
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": {"name": name, "arguments": arguments}}


def piped(home: Path, messages: list[dict], *, load_sleep_s: float = 0, eof_wait_s: float = 600,
          regular_file: Path | None = None) -> tuple[int, list[dict], str, float]:
    """Feed ``messages`` to a sleepy server all at once and close its input (a pipe, or a regular file);
    return (exit code, the messages on stdout, stderr, seconds taken)."""
    env = {"SPECPILOT_HOME": str(home), "PATH": os.environ.get("PATH", ""), "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": str(ROOT), "LOAD_SLEEP_S": str(load_sleep_s), "EOF_WAIT_S": str(eof_wait_s)}
    text = "".join(json.dumps(m) + "\n" for m in messages)
    started = time.monotonic()
    if regular_file is not None:
        regular_file.write_text(text)
        with regular_file.open("rb") as stdin:
            done = subprocess.run([sys.executable, "-c", SLEEPY_SERVER], cwd=ROOT, env=env, stdin=stdin,
                                  capture_output=True, timeout=START_TIMEOUT_S)
    else:
        done = subprocess.run([sys.executable, "-c", SLEEPY_SERVER], cwd=ROOT, env=env, input=text.encode(),
                              capture_output=True, timeout=START_TIMEOUT_S)
    took = time.monotonic() - started
    lines = done.stdout.decode().splitlines()
    return done.returncode, [json.loads(line) for line in lines], done.stderr.decode(), took  # stdout: JSON only


@pytest.mark.parametrize("stdin", ["pipe", "file"])
def test_a_piped_batch_gets_every_answer_when_the_input_closes_at_once(specpilot_home, tmp_path, stdin):
    """The QA's example: tool calls still running when stdin closes are answered (they were dropped)."""
    batch = [INIT, INITIALIZED, call(2, "explain", {"topic": "medusa"}), call(3, "lookup_runs", {}),
             {"jsonrpc": "2.0", "id": 4, "method": "tools/list"},
             call(5, "run_method", {"method": "draft", "prompt": "hi"}), {"jsonrpc": "2.0", "id": 6, "method": "ping"}]
    code, answers, stderr, _ = piped(specpilot_home, batch, load_sleep_s=3,
                                     regular_file=tmp_path / "batch.jsonl" if stdin == "file" else None)
    assert code == 0 and "Traceback" not in stderr, stderr[-3000:]
    by_id = {a["id"]: a for a in answers if "method" not in a}
    assert sorted(by_id) == [1, 2, 3, 4, 5, 6], answers
    assert all("result" in a for a in by_id.values())
    assert "medusa" in json.dumps(by_id[2]["result"]) and by_id[4]["result"]["tools"]
    assert "model loading is replaced" in json.dumps(by_id[5]["result"])  # the slow call ran to its end


def test_a_call_still_running_after_the_wait_is_answered_with_an_error(specpilot_home):
    code, answers, stderr, took = piped(specpilot_home, [INIT, INITIALIZED, call(2, "run_method", {
        "method": "draft", "prompt": "hi"})], load_sleep_s=120, eof_wait_s=2)
    [error] = [a for a in answers if a.get("id") == 2]
    assert error["error"]["code"] == -32000 and "closed its input and run_method did not finish" in \
        error["error"]["message"]
    assert code == 1 and took < 60 and "Traceback" not in stderr, (code, took, stderr[-3000:])


def test_an_elicitation_asked_when_the_input_closes_is_refused_at_once(specpilot_home):
    """A gated call waiting for the client's elicitation answer: nobody can answer once stdin is closed."""
    init = {**INIT, "params": {**INIT["params"], "capabilities": {"elicitation": {}}}}
    code, answers, stderr, took = piped(specpilot_home, [init, INITIALIZED, call(2, "install_packages", {
        "packages": ["p-x"]})])
    [reply] = [a for a in answers if a.get("id") == 2 and "method" not in a]
    assert reply["result"]["isError"] and "closed its input before the approval question" in json.dumps(reply)
    assert code == 0 and took < 60 and "Traceback" not in stderr, (code, took, stderr[-3000:])
    assert statuses() == ["pending"]  # nothing was decided


# ---- the fuzz: every registered tool through a real MCP stdio session ------------------------

JSON_LEAVES = (st.none() | st.booleans() | st.integers(min_value=-(2 ** 70), max_value=2 ** 70)
               | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=30))
JSON_VALUES = st.recursive(JSON_LEAVES, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=8)
FUZZ_TOOL_CALLS = 700
FUZZ_RAW_LINES = 250


def schema_values(schema) -> list:
    """Every enum/const/default value in a JSON schema (to reach past validation now and then)."""
    found = []
    if isinstance(schema, dict):
        found += schema.get("enum", []) + ([schema["const"]] if "const" in schema else [])
        if "default" in schema:
            found.append(schema["default"])
        for value in schema.values():
            found += schema_values(value)
    elif isinstance(schema, list):
        for value in schema:
            found += schema_values(value)
    return [v for v in found if v is not None]


def tool_arguments(tool_: registry.Tool):
    fields = list(tool_.input_model.model_fields)
    hints = schema_values(tool_.input_schema()) + ["tiny", "draft", "x" * 3, 0, 1, -1, 10 ** 9, [], {}]
    values = JSON_VALUES | st.sampled_from(hints) | st.lists(st.sampled_from(hints) | st.text(max_size=12), max_size=3)
    keys = st.sampled_from(fields) | st.text(max_size=10) if fields else st.text(max_size=10)
    return st.dictionaries(keys, values, max_size=6)


def tool_calls():
    tools = registry.load_tools()
    known = st.sampled_from(list(tools)).flatmap(lambda name: st.tuples(st.just(name), tool_arguments(tools[name])))
    unknown = st.tuples(st.text(max_size=20), JSON_VALUES)
    return st.one_of(known, known, known, unknown)


def raw_lines():
    requests = st.fixed_dictionaries({"jsonrpc": st.sampled_from(["2.0", "1.0", 2]),
                                      "id": st.integers(0, 10 ** 6) | st.text(max_size=6) | JSON_LEAVES,
                                      "method": st.sampled_from(["tools/call", "tools/list", "ping", "x"])
                                      | JSON_LEAVES,
                                      "params": JSON_VALUES})
    as_text = requests.map(json.dumps) | JSON_VALUES.map(json.dumps)
    return as_text | as_text.map(lambda s: s[: len(s) // 2]) | st.text(max_size=60).filter(lambda s: "\n" not in s
                                                                                            and "\r" not in s)


def expected_answer_id(line: str):
    """The id an answer to ``line`` must carry: ... for none expected, else the id (None for id null)."""
    try:
        message = json.loads(line)
    except (ValueError, RecursionError):
        return None if line.strip() else ...
    if not isinstance(message, dict):
        return None
    if "id" not in message or ("method" not in message and ("result" in message or "error" in message)):
        return ...
    request_id = message["id"]
    usable = isinstance(request_id, str) or (isinstance(request_id, int) and not isinstance(request_id, bool))
    return request_id if usable else None


FUZZ_SETTINGS = settings(deadline=None, database=None, derandomize=True, print_blob=False,
                         suppress_health_check=list(HealthCheck))


def test_fuzz_every_tool_and_raw_lines_through_a_real_mcp_stdio_session(server, one_run):
    server.initialize()  # no elicitation: gated tools answer approval_required, nothing is asked
    tally = {"calls": 0, "lines": 0, "tool_errors": 0}
    counter = iter(range(10 ** 9))

    @settings(FUZZ_SETTINGS, max_examples=FUZZ_TOOL_CALLS)
    @given(call=tool_calls())
    def call_a_tool(call):
        name, arguments = call
        request_id = next(counter)
        server.send({"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
                     "params": {"name": name, "arguments": arguments}})
        reply = server.answer(request_id)
        tally["calls"] += 1
        if "result" in reply:
            content = reply["result"].get("structuredContent") or {}
            assert "internal error" not in str(content.get("error", "")), (name, arguments, content)
            tally["tool_errors"] += bool(reply["result"].get("isError"))
        else:
            assert reply["error"]["code"] in (-32602, -32600), reply

    @settings(FUZZ_SETTINGS, max_examples=FUZZ_RAW_LINES)
    @given(line=raw_lines())
    def send_a_line(line):
        expected = expected_answer_id(line)
        ping = f"ping-{next(counter)}"
        server.send(line)
        server.send({"jsonrpc": "2.0", "id": ping, "method": "ping"})
        seen = set()
        while ping not in seen or (expected is not ... and expected not in seen):
            message = server.read(ANSWER_TIMEOUT_S)
            if "method" not in message:
                seen.add(message.get("id"))
        tally["lines"] += 1

    started = time.monotonic()
    call_a_tool()
    send_a_line()
    seconds = time.monotonic() - started
    stderr = server.close()
    assert "Traceback" not in stderr, stderr[-4000:]
    assert server.recorded("pip") == []  # gated: nothing installed without a person
    print(f"\nMCP fuzz: {tally['calls']} tool calls ({tally['tool_errors']} tool errors, all answered; "
          f"{len(server.recorded('load'))} reached model loading), {tally['lines']} raw lines, 0 tracebacks, "
          f"0 hangs, {seconds:.0f} s")
    assert tally["calls"] >= FUZZ_TOOL_CALLS // 2 and tally["lines"] >= FUZZ_RAW_LINES // 2


FUZZ_REGISTRY_CALLS = 600


def test_fuzz_every_tool_through_the_registry(monkeypatch, caplog, one_run):
    """The same generated calls in-process through the approval gate (host mode): every one returns a
    result (no exception, no internal error), and nothing gated runs."""
    import tools.agent_tools.install as install
    import tools.models
    from agent.approval import Gate
    from tools.agent_tools.registry import ToolContext
    from tools.errors import ModelNotFoundError

    def no_model(ref, *a, **k):
        raise ModelNotFoundError("model loading is replaced in this test")

    monkeypatch.setattr(tools.models, "load", no_model)
    monkeypatch.setattr(install, "run_pip", lambda argv: pytest.fail(f"pip ran: {argv}"))
    tally = {"calls": 0}
    with Store() as store:
        gate, ctx = Gate(store), ToolContext(store=store)

        @settings(FUZZ_SETTINGS, max_examples=FUZZ_REGISTRY_CALLS)
        @given(call=tool_calls())
        def call_a_tool(call):
            name, arguments = call
            result = gate.call(name, arguments, ctx)
            tally["calls"] += 1
            assert isinstance(result.content, dict) and json.loads(result.as_json()) is not None
            assert "internal error" not in str(result.content.get("error", "")), (name, arguments, result.content)

        call_a_tool()
    assert tally["calls"] >= FUZZ_REGISTRY_CALLS // 2
    assert not [r for r in caplog.records if r.exc_info], "a tool logged a traceback"
