"""The Claude brain, driven through the real anthropic SDK against a fake Messages API on 127.0.0.1
that replays scripted turns (tool_use, then an answer) and records every request it gets."""

from __future__ import annotations

import json
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


class FakeMessagesAPI:
    """POST /v1/messages answers with the next scripted turn; ``requests`` holds the bodies received."""

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
                turn = api.script.pop(0) if api.script else text_turn("(script exhausted)")
                self._send(200, {"id": f"msg_{len(api.requests)}", "type": "message", "role": "assistant",
                                 "model": body["model"], "stop_sequence": None,
                                 "usage": {"input_tokens": 10, "output_tokens": 5}, **turn})

            def _send(self, status: int, payload: dict) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):  # keep test output clean
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
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
    assert [t["name"] for t in first["tools"]] == list(registry.load_tools())
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


def test_without_a_key_the_offline_brain_is_used(monkeypatch):
    from agent.brains import make_brain

    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    assert make_brain("auto").name == "offline"
