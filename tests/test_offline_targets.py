"""Model targets while the model hub cannot be reached (a quick, clear error, or the hub cache), and guidance
refusing a target path that is not on this machine, as a run does."""

from __future__ import annotations

import json
import shutil
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from huggingface_hub import constants

from memory import Store
from tools import models
from tools.agent_tools import registry
from tools.agent_tools.registry import ToolContext
from tools.errors import ModelNotFoundError

MISSING_PATHS = ["/nonexistent/model", "./no/such/model", "../no-such-model", "~/no-such-model-here", "missing.gguf"]


def closed_port() -> int:
    """A local port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def hub(tmp_path, monkeypatch):
    """The hub at a local port nothing listens on, HF_HUB_OFFLINE unset and an empty hub cache; returns the
    cache folder."""
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{closed_port()}")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub-cache"))
    monkeypatch.setattr(models, "_hub_probe", {})
    return tmp_path / "hub-cache"


def cache_model(cache, repo_id: str, folder) -> None:
    """Put a model folder into the hub cache as huggingface_hub lays out a download of ``repo_id``."""
    commit = "0" * 40
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    shutil.copytree(folder, repo / "snapshots" / commit)


def test_an_uncached_hub_id_fails_in_seconds_when_the_hub_does_not_answer(hub):
    start = time.monotonic()
    for call in (models.resolve_ref, models.load):
        with pytest.raises(ModelNotFoundError) as exc:
            call("nonexistent-hub/model")
        assert "the hub does not answer" in str(exc.value) and exc.value.hint == models.OFFLINE_HINT
    assert time.monotonic() - start < 10  # huggingface_hub's own retries took about 50 s


def test_medusa_heads_from_an_uncached_hub_id_fail_in_seconds_when_the_hub_does_not_answer(hub):
    from tools.medusa.checkpoint import load_heads

    start = time.monotonic()
    with pytest.raises(ModelNotFoundError, match="the hub does not answer and the hub cache"):
        load_heads("nonexistent-hub/medusa-heads")
    assert time.monotonic() - start < 10


def test_a_cached_hub_model_loads_while_the_hub_does_not_answer(hub, tiny_model_dir, monkeypatch):
    cache_model(hub, "someone/tiny", tiny_model_dir)
    loaded = models.load("someone/tiny", dtype="float32")
    assert loaded.source == "someone/tiny" and loaded.vocab_size > 0
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # said to be offline: the cache serves it too
    assert models.resolve_ref("someone/tiny") == ("someone/tiny", None)
    with pytest.raises(ModelNotFoundError, match="HF_HUB_OFFLINE"):
        models.resolve_ref("someone/not-cached")


def test_a_hub_that_answers_is_used_as_before(hub, monkeypatch):
    class Answer(BaseHTTPRequestHandler):
        def do_HEAD(self):  # noqa: N802 - the name http.server calls
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}")
        assert models.hub_reachable()
        assert models.resolve_ref("someone/model") == ("someone/model", None)
    finally:
        server.shutdown()
        server.server_close()


def guidance(store, **tool_input):
    tool = registry.get_tool("guidance")
    return registry.execute(tool, registry.parse_input(tool, tool_input), ToolContext(store=store))


@pytest.mark.parametrize("target", MISSING_PATHS)
def test_guidance_refuses_a_target_path_that_is_not_here_with_the_error_of_a_run(target):
    with pytest.raises(ModelNotFoundError) as exc:
        models.resolve_ref(target)
    with Store() as store:
        for tool_input in ({"method": "draft"}, {}, {"method": "lookahead", "task": "summarise a document"}):
            result = guidance(store, target=target, **tool_input)
            assert result.is_error and result.content["error"].endswith(exc.value.user_message()), result.content


def test_guidance_still_advises_for_built_in_names_hub_ids_and_folders(tmp_path, monkeypatch, tiny_model_dir):
    monkeypatch.setenv("SPECPILOT_MODELS", str(tmp_path / "no-models-fetched"))
    with Store() as store:
        for target in ("smollm2-135m-instruct", "Qwen/Qwen2.5-7B-Instruct", str(tiny_model_dir)):
            result = guidance(store, method="draft", target=target)
            assert not result.is_error and result.content["target"] == target, result.content


def test_guide_gives_the_error_run_gives_for_a_missing_target(cli_in_process):
    ran = cli_in_process("run", "--method", "draft", "--prompt", "hi", "--target", "/nonexistent")
    guided = cli_in_process("guide", "draft", "--target", "/nonexistent", "--json")
    assert ran.returncode == 2 and guided.returncode != 0
    assert ran.stderr.splitlines()[0] == guided.stderr.splitlines()[0] == \
        "error: /nonexistent is not a folder or file on this machine"
    assert "check the path" in json.loads(guided.stdout)["error"]
