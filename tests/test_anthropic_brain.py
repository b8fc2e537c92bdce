"""The Claude brain, driven through the real anthropic SDK against a fake Messages API on 127.0.0.1
that replays scripted turns (tool_use, then an answer) and records every request it gets."""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import anthropic
import pytest

import tools.agent_tools.install as install
from agent.brains.anthropic_brain import DEFAULT_MODEL, AnthropicBrain
from agent.loop import Session
from memory import Store
from tools.agent_tools import registry


def text_turn(text: str) -> dict:
    return {"stop_reason": "end_turn", "content": [{"type": "text", "text": text}]}


def tool_turn(*calls: tuple[str, dict], text: str | None = None) -> dict:
    content = [{"type": "text", "text": text}] if text else []
    content += [{"type": "tool_use", "id": f"toolu_{i}_{name}", "name": name, "input": args}
                for i, (name, args) in enumerate(calls)]
    return {"stop_reason": "tool_use", "content": content}


def unanswered_tool_uses(messages: list[dict]) -> list[str]:
    """The tool_use ids not answered by a tool_result in the very next message (the real API's 400)."""
    missing = []
    for i, message in enumerate(messages):
        if message["role"] != "assistant" or not isinstance(message["content"], list):
            continue
        ids = [b["id"] for b in message["content"] if b.get("type") == "tool_use"]
        following = messages[i + 1]["content"] if i + 1 < len(messages) else []
        answered = {b.get("tool_use_id") for b in following if isinstance(b, dict) and b.get("type") == "tool_result"} \
            if isinstance(following, list) else set()
        missing += [x for x in ids if x not in answered]
    return missing


def sse_events(message: dict) -> list[tuple[str, dict]]:
    """A scripted message as the Messages API streams it (server-sent events)."""
    start = {**message, "content": [], "stop_reason": None}
    events = [("message_start", {"type": "message_start", "message": start})]
    for i, block in enumerate(message["content"]):
        if block["type"] == "text":
            events.append(("content_block_start", {"type": "content_block_start", "index": i,
                                                   "content_block": {"type": "text", "text": ""}}))
            for piece in re.findall(r"\S+\s*", block["text"]):  # word by word
                events.append(("content_block_delta", {"type": "content_block_delta", "index": i,
                                                       "delta": {"type": "text_delta", "text": piece}}))
        else:
            events.append(("content_block_start", {"type": "content_block_start", "index": i,
                                                   "content_block": {**block, "input": {}}}))
            events.append(("content_block_delta", {"type": "content_block_delta", "index": i, "delta": {
                "type": "input_json_delta", "partial_json": json.dumps(block["input"])}}))
        events.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
    events.append(("message_delta", {"type": "message_delta", "usage": {"output_tokens": 5},
                                     "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None}}))
    events.append(("message_stop", {"type": "message_stop"}))
    return events


class FakeMessagesAPI:
    """POST /v1/messages answers with the next scripted turn (as JSON, or as server-sent events when the
    request asks to stream); ``requests`` holds the bodies received. Like the real API it answers 400
    when a tool_use has no tool_result right after it."""

    def __init__(self):
        self.script: list[dict] = []
        self.requests: list[dict] = []
        self.headers: list[dict] = []
        self.fail_with: int | None = None
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's naming
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                api.requests.append(body)
                api.headers.append({k.lower(): v for k, v in self.headers.items()})
                if api.fail_with is not None:
                    error = {"type": "api_error", "message": "scripted failure"}
                    self._send(api.fail_with, {"type": "error", "error": error})
                    return
                missing = unanswered_tool_uses(body["messages"])
                if missing:
                    error = {"type": "invalid_request_error",
                             "message": f"tool_use ids were found without tool_result blocks: {missing}"}
                    self._send(400, {"type": "error", "error": error})
                    return
                turn = api.script.pop(0) if api.script else text_turn("(script exhausted)")
                message = {"id": f"msg_{len(api.requests)}", "type": "message", "role": "assistant",
                           "model": body["model"], "stop_sequence": None,
                           "usage": {"input_tokens": 10, "output_tokens": 5}, **turn}
                if body.get("stream"):
                    self._send_events(sse_events(message))
                else:
                    self._send(200, message)

            def _send(self, status: int, payload: dict) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _send_events(self, events: list[tuple[str, dict]]) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.end_headers()
                for name, data in events:
                    self.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
                    self.wfile.flush()
                self.close_connection = True

            def log_message(self, *args):  # keep test output clean
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        # a short poll: shutdown() waits for the loop's next poll (0.5 s by default, in every test's teardown)
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02},
                                       daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()

    def tool_results(self, request_index: int) -> list[dict]:
        last = self.requests[request_index]["messages"][-1]
        assert last["role"] == "user"
        return [b for b in last["content"] if b["type"] == "tool_result"]


@pytest.fixture
def api():
    fake = FakeMessagesAPI()
    yield fake
    fake.close()


@pytest.fixture
def store():
    with Store() as s:
        yield s


@pytest.fixture
def pip_calls(monkeypatch):
    calls = []
    monkeypatch.setattr(install, "run_pip", lambda argv: calls.append(argv))
    return calls


def brain_for(api: FakeMessagesAPI, **kwargs) -> AnthropicBrain:
    client = anthropic.Anthropic(api_key="test-key", base_url=api.url, max_retries=0)
    return AnthropicBrain(client=client, **kwargs)


def stored_medusa_run(store) -> str:
    return store.add_run({"method": "medusa", "target": "qwen2.5-coder-1.5b-instruct", "prompt": "def fib(n):",
                          "speedup": 1.47, "tokens_per_s": 8.2, "baseline_tokens_per_s": 5.58,
                          "hardware": {"name": "Test CPU (2 cores)"}, "dtype": "bfloat16"})


def test_tool_use_loop_runs_tools_and_sends_results_back(api, store, monkeypatch):
    monkeypatch.setenv("SPECPILOT_MODEL", "claude-test-model")
    run_id = stored_medusa_run(store)
    store.save_params("medusa", {"target": "qwen2.5-coder-1.5b-instruct", "posterior_threshold": 0.09})
    api.script = [tool_turn(("lookup_runs", {"method": "medusa", "same_prompt_as_last_run": True}),
                            text="Let me check memory."),
                  text_turn(f"The Medusa run {run_id} had a speedup of 1.47x on Test CPU (2 cores).")]
    session = Session(store, brain_for(api))
    reply = session.handle("What was the speedup for the Medusa run on that prompt?")
    assert reply.text == f"The Medusa run {run_id} had a speedup of 1.47x on Test CPU (2 cores)."

    first, second = api.requests
    assert first["model"] == "claude-test-model"
    assert [t["name"] for t in first["tools"]] == [*registry.load_tools(), "plan_deployment"]
    assert first["tools"][0]["input_schema"] == registry.get_tool("run_method").input_schema()
    assert "No estimates" in first["system"] and '"medusa"' in first["system"]  # system.md + memory
    assert first["messages"] == [{"role": "user", "content": "What was the speedup for the Medusa run on that prompt?"}]
    assert second["messages"][1]["content"][1] == {
        "type": "tool_use", "id": "toolu_0_lookup_runs", "name": "lookup_runs",
        "input": {"method": "medusa", "same_prompt_as_last_run": True}}
    [result] = api.tool_results(1)
    assert result["tool_use_id"] == "toolu_0_lookup_runs" and result["is_error"] is False
    content = json.loads(result["content"])
    assert content["runs"][0]["run_id"] == run_id and content["runs"][0]["speedup"] == 1.47

    [task] = store.list_tasks()
    assert task["status"] == "done" and task["done"] == ["lookup_runs method=medusa", "answer the request"]
    assert [m["role"] for m in store.conversation(session.session_id)] == ["user", "tool", "assistant"]


def test_bad_tool_calls_come_back_as_errors_and_the_loop_goes_on(api, store):
    api.script = [tool_turn(("no_such_tool", {}), ("lookup_runs", {"bogus": 1}),
                            ("lookup_runs", {"run_id": "ffff0000"})),
                  text_turn("Those failed.")]
    reply = Session(store, brain_for(api)).handle("look something up")
    assert reply.text == "Those failed."
    results = api.tool_results(1)
    assert [r["is_error"] for r in results] == [True, True, True]
    assert "there is no tool named 'no_such_tool'" in json.loads(results[0]["content"])["error"]
    assert "bogus" in json.loads(results[1]["content"])["error"]
    assert "no stored run has the id 'ffff0000'" in json.loads(results[2]["content"])["error"]
    assert store.list_tasks()[0]["status"] == "failed"


def test_the_model_cannot_approve_an_install_it_asks_for(api, store, pip_calls):
    asked = []
    api.script = [tool_turn(("install_packages", {"packages": ["evilpkg"]}),
                            ("install_packages", {"packages": ["evilpkg"], "approval_id": "00000000"})),
                  text_turn("The user approved, so I installed it.")]
    session = Session(store, brain_for(api), confirm=lambda prompt: asked.append(prompt) or False)
    session.handle("approved, install evilpkg now")
    denied, made_up = api.tool_results(1)
    assert denied["is_error"] and "denied" in json.loads(denied["content"])["error"]
    assert made_up["is_error"] and "no approval has the id" in json.loads(made_up["content"])["error"]
    assert len(asked) == 1 and "pip install evilpkg" in asked[0]
    assert pip_calls == []


def test_host_mode_hands_the_model_an_approval_request_not_an_install(api, store, pip_calls):
    api.script = [tool_turn(("install_packages", {"packages": ["gguf"]})),
                  text_turn("Please approve it in your terminal.")]
    Session(store, brain_for(api)).handle("install gguf")
    [result] = api.tool_results(1)
    content = json.loads(result["content"])
    assert result["is_error"] is False and content["status"] == "approval_required"
    assert store.get_approval(content["approval_id"])["status"] == "pending" and pip_calls == []
    assert store.list_tasks()[0]["status"] == "unfinished"


def test_the_loop_stops_after_max_iterations(api, store):
    api.script = [tool_turn(("recall", {})) for _ in range(5)]
    reply = Session(store, brain_for(api, max_iterations=3)).handle("loop forever")
    assert len(api.requests) == 3
    assert "stopped after 3 tool rounds" in reply.text
    [task] = store.list_tasks()
    assert task["status"] == "unfinished" and task["left"] == ["stopped after 3 tool rounds"]


def test_an_api_failure_is_a_message_not_a_traceback(api, store):
    api.fail_with = 500
    brain = brain_for(api)
    reply = Session(store, brain).handle("hello")
    assert "The Claude API call failed" in reply.text and "InternalServerError" in reply.text
    assert brain.messages == []  # the failed turn is forgotten
    api.fail_with = None
    api.script = [text_turn("hi")]
    assert Session(store, brain).handle("hello again").text == "hi"
    assert api.requests[-1]["messages"] == [{"role": "user", "content": "hello again"}]


def test_key_base_url_and_model_come_from_the_environment(api, store, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "env-key")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", api.url)
    monkeypatch.delenv("SPECPILOT_MODEL", raising=False)
    api.script = [text_turn("ok")]
    from agent.brains import make_brain

    brain = make_brain("auto")
    assert isinstance(brain, AnthropicBrain) and brain.model == DEFAULT_MODEL
    assert Session(store, brain).handle("hi").text == "ok"
    sent = api.headers[0]
    assert sent.get("x-api-key") == "env-key" or sent.get("authorization") == "Bearer env-key"
    assert api.requests[0]["model"] == DEFAULT_MODEL


def test_without_a_key_auto_picks_the_local_brain_when_its_model_is_fetched_else_commands_only(monkeypatch, tmp_path):
    from agent.brains import make_brain

    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.setenv("SPECPILOT_LOCAL_MODEL", str(tmp_path / "no-such-model"))
    brain = make_brain("auto")
    assert brain.name == "offline" and "is not fetched" in brain.fallback_reason
    assert make_brain("local").name == "offline"  # asked for, but missing: commands only, saying why
    monkeypatch.setenv("SPECPILOT_LOCAL_MODEL", str(tmp_path))  # a folder that exists counts as fetched
    assert make_brain("auto").name == "local"  # (the model is loaded at the first turn, not here)
    assert make_brain("model").name == "local"  # the other name of local
    from tools.errors import ParameterError

    with pytest.raises(ParameterError, match="unknown brain 'hybrid'"):  # the rule pass is gone
        make_brain("hybrid")


def test_without_a_key_the_anthropic_brain_says_what_to_do(monkeypatch):
    from agent.brains import make_brain
    from tools.errors import ParameterError

    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    with pytest.raises(ParameterError, match="ANTHROPIC_API_KEY is not set") as raised:
        make_brain("anthropic")
    assert "--brain local" in raised.value.user_message()
    with pytest.raises(ParameterError, match="ANTHROPIC_API_KEY is not set"):
        AnthropicBrain()


# ---- the thread is kept: interrupts and errors during tool calls, streaming ----------------------------


@pytest.fixture
def interrupted_runs(monkeypatch):
    """run_method's engine stops with Ctrl-C (KeyboardInterrupt) as a person would press it mid-run."""
    import tools.bench.run as run_tool  # the run_method tool imports run_method from it when it runs

    def interrupted(inp, store=None, progress=None, task_id=None):
        raise KeyboardInterrupt

    monkeypatch.setattr(run_tool, "run_method", interrupted)


def test_ctrl_c_during_a_tool_call_leaves_every_tool_use_answered_and_the_next_turn_works(api, store,
                                                                                          interrupted_runs):
    api.script = [tool_turn(("recall", {}), ("run_method", {"method": "draft", "prompt": "def fib(n):"}),
                            ("lookup_runs", {}), text="Let me measure it.")]
    brain = brain_for(api)
    session = Session(store, brain)
    with pytest.raises(KeyboardInterrupt):
        session.handle("measure draft on 'def fib(n):'")
    assert unanswered_tool_uses(brain.messages) == []
    recall, run, lookup = brain.messages[-1]["content"]
    assert (recall["tool_use_id"], recall["is_error"]) == ("toolu_0_recall", False)  # it finished: its result
    assert run["tool_use_id"] == "toolu_1_run_method" and run["is_error"]
    assert "interrupted by the user" in json.loads(run["content"])["error"]
    assert lookup["tool_use_id"] == "toolu_2_lookup_runs" and lookup["is_error"]  # never started
    [task] = store.list_tasks()
    assert task["status"] == "unfinished" and "interrupted" in " ".join(n["text"] for n in task["notes"]).lower()

    api.script = [text_turn("The run was interrupted; nothing was measured.")]
    reply = Session(store, brain).handle("what happened?")
    assert reply.text == "The run was interrupted; nothing was measured."  # not a 400
    last = api.requests[-1]["messages"][-1]
    assert last["role"] == "user" and last["content"][-1] == {"type": "text", "text": "what happened?"}
    assert [b["type"] for b in last["content"]] == ["tool_result"] * 3 + ["text"]


def test_an_error_during_a_tool_call_is_answered_too(api, store, monkeypatch):
    api.script = [tool_turn(("recall", {}), ("explain", {"topic": "medusa"}))]
    brain = brain_for(api)
    session = Session(store, brain)
    real_call = session.call_tool

    def failing_call(name, tool_input):
        if name == "explain":
            raise RuntimeError("disk full")
        return real_call(name, tool_input)

    monkeypatch.setattr(session, "call_tool", failing_call)
    reply = session.handle("explain medusa")
    assert "Something went wrong" in reply.text and store.list_tasks()[0]["status"] == "failed"
    assert unanswered_tool_uses(brain.messages) == []
    assert "failed before it finished (RuntimeError: disk full)" in brain.messages[-1]["content"][1]["content"]
    api.script = [text_turn("ok")]
    assert Session(store, brain).handle("try again").text == "ok"


def test_an_interrupt_before_any_tool_ran_forgets_the_turn(api, store):
    api.script = [text_turn("A long answer that the person interrupts.")]
    brain = brain_for(api)

    def stop(text):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        Session(store, brain, stream_text=stop).handle("tell me everything")
    assert brain.messages == []
    api.script = [text_turn("short")]
    assert Session(store, brain).handle("briefly").text == "short"
    assert api.requests[-1]["messages"] == [{"role": "user", "content": "briefly"}]


def test_text_streams_as_it_arrives_including_between_tool_calls(api, store):
    api.script = [tool_turn(("recall", {}), text="Let me check memory first."),
                  text_turn("Nothing is saved yet.")]
    shown: list[str] = []
    reply = Session(store, brain_for(api), stream_text=shown.append).handle("what do you remember?")
    assert all(r.get("stream") is True for r in api.requests)  # the SDK's streaming API
    assert len(shown) > 4 and "".join(shown) == "Let me check memory first.\nNothing is saved yet."
    assert reply.streamed and reply.text == "Nothing is saved yet."
    [result] = api.tool_results(1)
    assert result["tool_use_id"] == "toolu_0_recall" and result["is_error"] is False
    assert store.list_tasks()[0]["status"] == "done"


def test_a_request_to_deploy_goes_through_the_approval_gate_before_claude_plans(api, store):
    """Claude calls plan_deployment (the brain's own tool, not a registry tool): the approval is asked for, and the
    result tells Claude what it may say; without an answer the task waits for the approval."""
    ask = "deploy the draft setup to our production cluster"
    api.script = [tool_turn(("plan_deployment", {"request": ask})), text_turn("It waits for your approval.")]
    reply = Session(store, brain_for(api)).handle(ask)
    [result] = api.tool_results(1)
    content = json.loads(result["content"])
    assert content["status"] == "pending" and "specpilot tool approve --id" in content["say"]
    assert reply.text == "It waits for your approval." and store.list_tasks()[0]["status"] == "unfinished"
    api.script = [tool_turn(("plan_deployment", {"request": ask})), text_turn("Here is a plan.")]
    approved = Session(store, brain_for(api), confirm=lambda prompt: True).handle(ask)
    content = json.loads(api.tool_results(3)[0]["content"])
    assert content["status"] == "approved" and "Plan (in words only" in content["say"]
    assert approved.text == "Here is a plan." and not approved.unfinished
    assert [a["action"] for a in store.list_approvals()] == ["deploy", "deploy"]
