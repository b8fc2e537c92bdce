"""A hypothesis fuzz of every tool's input model, in process through the approval gate and through a real
MCP stdio session (issue 51): values a hostile or careless caller sends (numbers past any range, strings
of thousands of characters, NUL, bidirectional controls, lone surrogates, deep nesting, relative paths,
file: and ftp: addresses) beside the registry's own enum values. Every call is answered within
HANG_S, nothing raises or reports an internal error, and a refused call changes nothing stored.

The default group runs a small version (about 100 inputs); the slow group (``pytest -m slow``) runs
FUZZ_SLOW_INPUTS and more. Model loading, pip and vLLM serving are replaced: nothing is loaded,
installed or served."""

from __future__ import annotations

import json
import sqlite3
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memory.helpers import database_path
from test_mcp_hardening import FUZZ_SETTINGS, JSON_VALUES, RawServer, expected_answer_id, raw_lines, schema_values
from tools.agent_tools import registry

HANG_S = 5.0  # an answer slower than this counts as a hang
FAST = {"registry": 60, "mcp_calls": 25, "mcp_lines": 15}  # about 100 inputs in the default group
SLOW = {"registry": 1000, "mcp_calls": 600, "mcp_lines": 400}  # 2,000 in the slow group
FUZZ_SLOW_INPUTS = sum(SLOW.values())
HOST_TABLES_WRITTEN_ANYWAY = ("tasks", "messages")  # a host call records itself as a task, refused or not

HOSTILE_LEAVES = st.sampled_from([
    10 ** 30, -(10 ** 30), 2 ** 63, -1, 0, 10 ** 12, 1e308, -0.0, True, False, None, "", " ", "4", "true",
    "x" * 5000, "a\x00b", "a\u202eb", "\u2066x\u2069", "\ud800", "a\udfffb", "\x1b[2Kok\nnext line",
    "../../../etc/x", "/etc/shadow", "~", "file:///etc", "ftp://example.com/x", "HTTP://Example.COM", "https://",
    "http://127.0.0.1:9/x", "draft", "medusa", "tiny", "auto", "float32",
])
HOSTILE_VALUES = st.recursive(HOSTILE_LEAVES | JSON_VALUES,
                              lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6) | HOSTILE_LEAVES.filter(lambda v: isinstance(v, str)), inner, max_size=3),
                              max_leaves=6)


def deep(levels: int):
    value: object = 1
    for _ in range(levels):
        value = [value]
    return value


def hostile_arguments(tool_: registry.Tool):
    fields = list(tool_.input_model.model_fields)
    hints = schema_values(tool_.input_schema())
    values = HOSTILE_VALUES | st.sampled_from(hints or [None]) | st.just(deep(40))
    keys = st.sampled_from(fields) if fields else st.text(max_size=8)
    return st.dictionaries(keys | st.sampled_from(["\ud800", "a\x00", "x" * 5000]), values, max_size=5)


def hostile_calls():
    tools = registry.load_tools()
    return st.sampled_from(list(tools)).flatmap(lambda name: st.tuples(st.just(name), hostile_arguments(tools[name])))


def stored(skip: tuple[str, ...] = ()) -> dict:
    """Every row of every table (but ``skip``), read through a connection of its own."""
    with sqlite3.connect(database_path()) as db:
        tables = [r[0] for r in db.execute("select name from sqlite_master where type = 'table'")]
        out = {t: sorted(map(repr, db.execute(f"select * from [{t}]").fetchall())) for t in tables if t not in skip}
    db.close()
    return out


@pytest.fixture
def nothing_runs(monkeypatch):
    """Model loading, pip and vLLM serving replaced by refusals (a fuzzed call may reach any of them)."""
    import tools.agent_tools.install as install
    import tools.agent_tools.serving_tool as serving_tool
    import tools.models
    from tools.errors import ModelNotFoundError, SpecpilotError

    def no_model(*a, **k):
        raise ModelNotFoundError("model loading is replaced in this test")

    def no_serving(*a, **k):
        raise SpecpilotError("serving is replaced in this test")

    monkeypatch.setattr(tools.models, "load", no_model)
    monkeypatch.setattr(serving_tool, "serve_bench", no_serving)
    monkeypatch.setattr(install, "run_pip", lambda argv: pytest.fail(f"pip ran: {argv}"))


def fuzz_the_registry(examples: int, caplog) -> dict:
    """Generated calls through the approval gate in host mode: each answered in time, as a result (never an
    exception or an internal error); a refused one leaves every table as it was."""
    from agent.approval import Gate
    from memory import Store
    from tools.agent_tools.registry import ToolContext

    tally = {"calls": 0, "refused": 0}
    with Store() as store:
        store.add_run({"method": "draft", "target": "t", "prompt": "p", "speedup": 1.4, "hardware": {"name": "CPU"}})
        gate, ctx = Gate(store), ToolContext(store=store)

        @settings(FUZZ_SETTINGS, max_examples=examples)
        @given(call=hostile_calls())
        def call_a_tool(call):
            name, arguments = call
            before = stored()
            started = time.monotonic()
            result = gate.call(name, arguments, ctx)
            took = time.monotonic() - started
            assert took < HANG_S, (name, arguments, took)
            assert isinstance(result.content, dict) and json.loads(result.as_json()) is not None
            assert "internal error" not in str(result.content.get("error", "")), (name, arguments, result.content)
            tally["calls"] += 1
            if result.is_error:
                tally["refused"] += 1
                assert stored() == before, (name, arguments, result.content)

        call_a_tool()
    assert not [r for r in caplog.records if r.exc_info], "a tool logged a traceback"
    return tally


def fuzz_the_transport(server: RawServer, calls: int, lines: int) -> dict:
    """Generated tools/call requests and raw lines through a real `specpilot mcp`: every request with an id
    answered within HANG_S; a refused call changes nothing stored but its task row."""
    server.initialize()
    tally = {"calls": 0, "refused": 0, "lines": 0}
    counter = iter(range(10 ** 9))

    @settings(FUZZ_SETTINGS, max_examples=calls)
    @given(call=hostile_calls())
    def call_a_tool(call):
        name, arguments = call
        request_id = next(counter)
        before = stored(HOST_TABLES_WRITTEN_ANYWAY)
        line = json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
                           "params": {"name": name, "arguments": arguments}})
        server.send(line)
        reply = server.answer(request_id, timeout=HANG_S)
        tally["calls"] += 1
        refused = "error" in reply or reply["result"].get("isError")
        if "result" in reply:
            assert "internal error" not in json.dumps(reply["result"].get("structuredContent") or {}), (name, arguments)
        if refused:
            tally["refused"] += 1
            assert stored(HOST_TABLES_WRITTEN_ANYWAY) == before, (name, arguments, reply)

    @settings(FUZZ_SETTINGS, max_examples=lines)
    @given(line=raw_lines() | HOSTILE_VALUES.map(lambda v: json.dumps({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                                                                      "params": {"name": "save_params",
                                                                                 "arguments": {"method": "draft",
                                                                                               "params": {"target": v}}}})))
    def send_a_line(line):
        expected = expected_answer_id(line)
        ping = f"ping-{next(counter)}"
        server.send(line)
        server.send({"jsonrpc": "2.0", "id": ping, "method": "ping"})
        seen, deadline = set(), time.monotonic() + 2 * HANG_S
        while ping not in seen or (expected is not ... and expected not in seen):
            message = server.read(max(deadline - time.monotonic(), 0.01))
            if "method" not in message:
                seen.add(message.get("id"))
        tally["lines"] += 1

    call_a_tool()
    send_a_line()
    stderr = server.close()
    assert "Traceback" not in stderr, stderr[-4000:]
    assert server.recorded("pip") == []
    return tally


@pytest.fixture
def server(specpilot_home, tmp_path):
    raw = RawServer(specpilot_home, tmp_path)
    yield raw
    if raw.proc.poll() is None:
        raw.close()


def test_fuzz_a_hundred_hostile_inputs(nothing_runs, caplog, server):
    registry_tally = fuzz_the_registry(FAST["registry"], caplog)
    transport_tally = fuzz_the_transport(server, FAST["mcp_calls"], FAST["mcp_lines"])
    assert registry_tally["calls"] >= FAST["registry"] // 2 and registry_tally["refused"] > 0
    assert transport_tally["calls"] + transport_tally["lines"] >= (FAST["mcp_calls"] + FAST["mcp_lines"]) // 2


@pytest.mark.slow
def test_fuzz_thousands_of_hostile_inputs(nothing_runs, caplog, server):
    started = time.monotonic()
    registry_tally = fuzz_the_registry(SLOW["registry"], caplog)
    transport_tally = fuzz_the_transport(server, SLOW["mcp_calls"], SLOW["mcp_lines"])
    inputs = registry_tally["calls"] + transport_tally["calls"] + transport_tally["lines"]
    print(f"\nhostile fuzz: {inputs} inputs ({registry_tally['refused']} + {transport_tally['refused']} refused, "
          f"nothing stored changed by them), 0 tracebacks, 0 answers over {HANG_S:.0f} s, "
          f"{time.monotonic() - started:.0f} s")
    assert inputs >= 1000
