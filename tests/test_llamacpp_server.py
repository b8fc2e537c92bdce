"""llama.cpp's own speculative modes as peers (tools.bench.llamacpp_server): llama-server built from the
llama-cpp-python sdist by ``specpilot peers setup llama.cpp``.

The default run checks what needs no build: the exact build commands (the installed version's sdist,
only the server target, no web page, nothing downloaded at run time), the status, each mode's server
command line, the request, the approval gate, and that an unbuilt peer leaves a llama.cpp run intact.
The slow group runs the real llama-server when it is built on this machine: its greedy output on the
default target equals llama.cpp's own plain decoding.
"""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from tools.bench import llamacpp_server as srv
from tools.bench.inputs import PEER_LABELS
from tools.engine.types import GenerationSettings

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def peers_home(tmp_path, monkeypatch) -> Path:
    home = tmp_path / "peers"
    monkeypatch.setenv("SPECPILOT_PEERS", str(home))
    return home


def test_build_commands_take_the_installed_llama_cpp_and_build_only_the_server(peers_home):
    version = metadata.version("llama-cpp-python")
    download, untar, configure, build = srv.setup_commands()
    assert f"llama-cpp-python=={version}" in download and "--no-binary" in download and "--no-deps" in download
    assert str(peers_home / "llama.cpp" / "src") in download
    assert untar[0] == "tar" and untar[2].endswith(f"llama_cpp_python-{version}.tar.gz")
    assert configure[configure.index("-S") + 1].endswith(f"llama_cpp_python-{version}/vendor/llama.cpp")
    # no web page, no prebuilt download, no TLS library: the build needs nothing beyond the sdist
    for flag in ("-DLLAMA_BUILD_UI=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF", "-DLLAMA_OPENSSL=OFF", "-DLLAMA_BUILD_SERVER=ON"):
        assert flag in configure
    assert build[build.index("--target") + 1] == "llama-server"
    assert srv.binary() == peers_home / "llama.cpp" / "build" / "bin" / "llama-server"


def test_status_says_how_to_set_it_up_and_when_the_build_is_gone(peers_home):
    st = srv.status()
    assert st["ready"] is False and "specpilot peers setup llama.cpp" in st["reason"]
    srv.ready_file().parent.mkdir(parents=True)
    srv.ready_file().write_text('{"versions": {"llama.cpp": "1"}}')
    st = srv.status()
    assert st["ready"] is False and "again" in st["reason"]
    srv.binary().parent.mkdir(parents=True)
    srv.binary().write_text("")
    assert srv.status()["ready"] is True


def test_each_mode_has_its_server_options_and_a_label():
    target, draft = Path("/m/target.gguf"), Path("/m/draft.gguf")
    for key, mode in srv.SERVER_MODES.items():
        argv = srv.server_argv(mode, target, draft, port=8123, n_ctx=1024, threads=2, n_batch=512)
        assert argv[argv.index("-m") + 1] == str(target) and argv[argv.index("--host") + 1] == "127.0.0.1"
        assert argv[argv.index("-np") + 1] == "1" and argv[argv.index("-t") + 1] == "2"
        assert ("-md" in argv) == mode.needs_draft
        assert PEER_LABELS[key] == mode.label
    simple = srv.server_argv(srv.SERVER_MODES["llamacpp_ngram_simple"], target, None, 1, 1024, 2, 512)
    assert simple[simple.index("--spec-type") + 1] == "ngram-simple"
    plain = srv.server_argv(srv.SERVER_MODES["llamacpp_server_plain"], target, None, 1, 1024, 2, 512)
    assert "--spec-type" not in plain


def test_request_is_the_prompt_ids_without_the_prompt_cache():
    greedy = srv.request_body([1, 2, 3], GenerationSettings(max_new_tokens=7))
    assert greedy["prompt"] == [1, 2, 3] and greedy["n_predict"] == 7
    assert greedy["cache_prompt"] is False and greedy["return_tokens"] is True
    assert greedy["temperature"] == 0.0 and greedy["top_k"] == 1
    sampled = srv.request_body([1], GenerationSettings(max_new_tokens=4, temperature=0.7, top_p=0.9, top_k=20, seed=3))
    assert sampled["temperature"] == 0.7 and sampled["top_p"] == 0.9 and sampled["top_k"] == 20 and sampled["seed"] == 3


def test_no_runners_until_it_is_built(peers_home, caplog):
    assert srv.server_runners(ctx=None, prompt_ids=[1, 2], n_ctx=512) == {}
    assert "specpilot peers setup llama.cpp" in caplog.text


def test_building_it_needs_a_person(peers_home):
    """Without a controlling terminal nothing is downloaded or built: the approval stays pending."""
    proc = subprocess.run([sys.executable, "-m", "agent.cli.main", "peers", "setup", "llama.cpp"], cwd=REPO,
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL, start_new_session=True)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "pending" in proc.stderr and "specpilot tool approve" in proc.stderr
    assert not (peers_home / "llama.cpp").exists()


@pytest.mark.slow
def test_real_llama_server_modes_match_llama_cpp_plain_on_the_default_target():
    """llama-server (``specpilot peers setup llama.cpp``) in every mode on the default GGUF pair: greedy
    output identical to the baseline on the llama.cpp backend."""
    from tools import models
    from tools.bench.run import RunInput, run_method

    if not srv.status()["ready"]:
        pytest.skip("`specpilot peers setup llama.cpp` has not been run on this machine")
    if not models.gguf_path(models.builtin(models.DEFAULT_TARGET)).exists():
        pytest.skip("the default models are not fetched (`specpilot models fetch`)")
    inp = RunInput(method="ngram", prompt="Repeat this list: apples, pears, plums, apples, pears, plums.",
                   max_new_tokens=24, peers=True, backend="llamacpp")
    try:
        record = run_method(inp)
    finally:
        srv.close_all()
    for key in ("llamacpp_server_plain", "llamacpp_ngram_simple", "llamacpp_ngram_map_k", "llamacpp_ngram_mod"):
        assert record["peers"][key]["matches_baseline"] is True, (key, record["peers"][key])


def test_a_peers_draft_counts_become_its_acceptance():
    from tools.bench.run import peer_acceptance
    from tools.engine.types import DecodeResult

    def result(extra):
        return DecodeResult(method="p", output_ids=[1, 2], prefill_s=0.0, decode_s=1.0, steps=0, target_forwards=0,
                            extra=extra)

    assert peer_acceptance(result({"draft_n": 10, "draft_n_accepted": 4})) == 0.4
    assert peer_acceptance(result({"draft_n": 0, "draft_n_accepted": 0})) is None
    assert peer_acceptance(result({"engine": "llama-cpp-python Llama"})) is None
