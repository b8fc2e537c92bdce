"""The vLLM backend without vLLM: the load generator against a local OpenAI-compatible stub server
(tests/openai_stub.py), the spec-decode metrics parser on a /metrics text recorded from vLLM 0.32 (CPU),
the method mapping, the server lifecycle (start, health, stop on close / SIGTERM / crash, a server that
never becomes ready, a port in use) and the whole ``bench --backend vllm`` path with a stand-in for
vLLM's API server module (the stub, started by the real code as ``python -m
vllm.entrypoints.openai.api_server``)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tools.bench import loadgen, vllm_metrics, vllm_methods, vllm_server
from tools.bench.vllm_bench import ServeBenchInput, diagnose, equality, sized_context
from tools.errors import DependencyError, ParameterError

HERE = Path(__file__).resolve().parent
STUB = HERE / "openai_stub.py"
sys.path.insert(0, str(HERE))
import openai_stub  # noqa: E402

RECORDED_METRICS = (HERE / "data" / "vllm_metrics_ngram.txt")


def stub_argv(*extra: str):
    return lambda port: [sys.executable, str(STUB), "--port", str(port), *extra]


# ------------------------------------------------------------------------------------------ load generator
@pytest.fixture
def stub():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = openai_stub.serve(port, spec=3, token_ms=5)
    yield f"http://127.0.0.1:{port}"
    server.shutdown()


def test_a_level_keeps_that_many_streams_busy_and_times_every_request(stub):
    prompts = [("a", [1, 2, 3]), ("b", [4, 5])]
    specs = loadgen.level_specs(prompts, concurrency=4, max_tokens=12)
    assert len(specs) == 8 and [s.key for s in specs[:4]] == ["a", "b", "a", "b"]  # two per stream
    level = loadgen.run_level(stub, "stub-model", specs, 4, {"temperature": 0.0})
    s = level.summary()
    assert s["completed"] == 8 and s["failed"] == 0 and s["output_tokens"] == 8 * 12
    assert s["throughput_tok_s"] == pytest.approx(96 / level.wall_s)
    for key in ("ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms", "itl_p50_ms", "itl_p99_ms"):
        assert s[key] is not None and s[key] > 0
    first = level.requests[0]
    assert first.token_ids == openai_stub.reply_ids([1, 2, 3], 12)  # ids come back in order, all of them
    assert len(first.chunk_gaps_s) == 2  # 12 tokens in chunks of 4: three chunks, two gaps
    # four streams at once: the level takes about two requests' time, not eight
    one = max(r.e2e_s for r in level.requests)
    assert level.wall_s < 4 * one


def test_concurrency_one_sends_one_request_at_a_time(stub):
    level = loadgen.run_level(stub, "stub-model", loadgen.level_specs([("a", [1])], 1, 8, requests=3), 1, {})
    starts = sorted(r.sent_at for r in level.requests)
    ends = sorted(r.sent_at + r.e2e_s for r in level.requests)
    assert all(starts[i + 1] >= ends[i] - 1e-3 for i in range(2))


def test_percentiles_interpolate_between_ranks():
    assert loadgen.percentile([1, 2, 3, 4], 50) == 2.5
    assert loadgen.percentile([10], 99) == 10
    assert loadgen.percentile([], 50) is None
    assert loadgen.percentile(list(range(101)), 99) == 99


def test_a_server_that_refuses_is_a_failed_request_not_a_crash():
    level = loadgen.run_level("http://127.0.0.1:9", "m", [loadgen.RequestSpec("a", [1], 4)], 1, {}, timeout_s=2)
    assert level.summary()["failed"] == 1 and level.summary()["throughput_tok_s"] == 0


def test_served_model_reads_v1_models(stub):
    assert loadgen.served_model(stub) == "stub-model"
    with pytest.raises(DependencyError, match="OpenAI-compatible"):
        loadgen.served_model("http://127.0.0.1:9", timeout_s=2)


# ------------------------------------------------------------------------------------------ metrics
def test_recorded_vllm_metrics_give_the_spec_decode_counters():
    counters = vllm_metrics.parse_spec_counters(RECORDED_METRICS.read_text())
    assert counters.drafts > 0 and counters.draft_tokens == 4 * counters.drafts  # K=4 on that server
    assert 0 < counters.accepted <= counters.draft_tokens
    assert len(counters.accepted_per_pos) == 4 and sum(counters.accepted_per_pos) == counters.accepted
    figures = counters.figures()
    assert figures["acceptance_length"] == pytest.approx(1 + counters.accepted / counters.drafts)
    assert figures["acceptance_rate"] == pytest.approx(counters.accepted / counters.draft_tokens)
    # acceptance falls with the position, as it must (a later token is accepted only after the earlier ones)
    assert figures["acceptance_by_position"] == sorted(figures["acceptance_by_position"], reverse=True)


def test_a_level_is_the_difference_of_two_readings_and_no_speculation_reads_zero():
    before = vllm_metrics.SpecCounters(10, 40, 20, (8, 6, 4, 2))
    after = vllm_metrics.SpecCounters(15, 60, 25, (10, 7, 5, 3))
    f = (after - before).figures()
    assert f["drafts"] == 5 and f["accepted_tokens"] == 5 and f["acceptance_length"] == 2.0
    assert f["acceptance_by_position"] == [0.4, 0.2, 0.2, 0.2]
    off = vllm_metrics.parse_spec_counters("# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0.0\n")
    assert off.figures()["acceptance_length"] is None


# ------------------------------------------------------------------------------------------ methods
def test_our_methods_map_onto_vllms_speculative_config(tmp_path):
    assert vllm_methods.spec_config("baseline", 4, {}) is None
    assert vllm_methods.spec_config("ngram", 3, {"max_ngram_size": 4, "min_ngram_size": 2}) == {
        "method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4, "prompt_lookup_min": 2}
    assert vllm_methods.spec_config("draft", 5, {}, draft_folder=tmp_path) == {
        "method": "draft_model", "model": str(tmp_path), "num_speculative_tokens": 5}
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["Eagle3LlamaForCausalLM"]}))
    assert vllm_methods.spec_config("eagle", 4, {}, heads_folder=tmp_path)["method"] == "eagle3"
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "medusa", "num_heads": 3}))
    assert vllm_methods.spec_config("medusa", 5, {}, heads_folder=tmp_path)["num_speculative_tokens"] == 3
    with pytest.raises(ParameterError, match="upstream EAGLE head"):
        vllm_methods.spec_config("eagle", 4, {})
    with pytest.raises(ParameterError, match="no lookahead"):
        vllm_methods.check_methods(["ngram", "lookahead"])
    assert vllm_methods.check_methods(["baseline", "ngram", "ngram", "draft"]) == ["ngram", "draft"]


def test_inputs_are_checked_before_anything_starts():
    with pytest.raises(ValueError, match="K must be 1-16"):
        ServeBenchInput(k=[0, 4])
    with pytest.raises(ValueError, match="concurrency"):
        ServeBenchInput(concurrency=[0])
    with pytest.raises(ValueError, match="http"):
        ServeBenchInput(endpoint="file:///etc/passwd")
    assert ServeBenchInput(concurrency=[8, 1, 8], k=[4, 2]).concurrency == [1, 8]
    assert sized_context([100, 700], 128, 4) == 1024  # the job's length, rounded up; not a GPU's 32k


def test_greedy_outputs_are_compared_token_by_token_with_a_near_tie_diagnosis():
    base = loadgen.RequestResult("a", ok=True, token_ids=[1, 2, 3],
                                 top_logprobs=[{"x": -0.1, "y": -3}, {"token_id:2": -0.70, "token_id:9": -0.71}, {}])
    assert diagnose(base, loadgen.RequestResult("a", ok=True, token_ids=[1, 2, 3]), "bfloat16") is None
    tie = diagnose(base, loadgen.RequestResult("a", ok=True, token_ids=[1, 9, 3]), "bfloat16")
    assert tie["position"] == 1 and tie["kind"] == "near_tie" and tie["margin"] == pytest.approx(0.01)
    real = diagnose(base, loadgen.RequestResult("a", ok=True, token_ids=[7, 2, 3]), "float32")
    assert real["position"] == 0 and real["kind"] == "mismatch"
    short = diagnose(base, loadgen.RequestResult("a", ok=True, token_ids=[1, 2]), "float32")
    assert short["kind"] == "length"
    outputs = {"a": loadgen.RequestResult("a", ok=True, token_ids=[1, 9, 3]),
               "b": loadgen.RequestResult("b", ok=True, token_ids=[7, 2, 3])}
    same, shown, kinds = equality({"a": base, "b": base}, outputs, "bfloat16")
    assert same is False and shown["prompt"] == "b" and shown["kind"] == "mismatch"  # a real mismatch is shown first
    assert kinds == {"identical": 0, "near_tie": 1, "mismatch": 1}


# ------------------------------------------------------------------------------------------ lifecycle
def test_a_server_starts_answers_and_stops_with_its_process_group():
    with vllm_server.VllmServer(stub_argv(), "stub") as server:
        assert server.alive() and loadgen.served_model(server.base_url) == "stub-model"
        pid = server.proc.pid
    assert not server.alive()
    with pytest.raises(ProcessLookupError):
        os.killpg(pid, 0)


def test_a_server_that_exits_while_loading_is_reported_with_its_log():
    with pytest.raises(DependencyError, match="exited .* told to fail while loading"):
        vllm_server.VllmServer(stub_argv("--exit-at-start"), "stub")
    assert not vllm_server._LIVE


def test_a_server_that_never_becomes_healthy_is_stopped():
    t0 = time.monotonic()
    with pytest.raises(DependencyError, match="not ready after 2 s"):
        vllm_server.VllmServer(stub_argv("--ready-after", "60"), "stub", start_timeout_s=2)
    assert time.monotonic() - t0 < 30 and not vllm_server._LIVE


def test_a_port_taken_after_it_was_chosen_is_retried_on_another(monkeypatch):
    real = vllm_server.free_port
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        ports = iter([busy])
        monkeypatch.setattr(vllm_server, "free_port", lambda: next(ports, None) or real())
        with vllm_server.VllmServer(stub_argv(), "stub") as server:
            assert server.port != busy and server.alive()


@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT", "error"])
def test_the_server_is_stopped_when_its_caller_is_interrupted_or_fails(tmp_path, how):
    pidfile = tmp_path / "pid"
    script = textwrap.dedent(f"""
        import signal, sys, time
        sys.path.insert(0, {str(HERE.parent)!r})
        from agent.termination import terminated_as_interrupt
        from tools.bench import vllm_server
        argv = lambda port: [sys.executable, {str(STUB)!r}, "--port", str(port)]
        # as started from a terminal: a test run started in the background inherits SIGINT ignored
        signal.signal(signal.SIGINT, signal.default_int_handler)
        with terminated_as_interrupt():
            with vllm_server.VllmServer(argv, "stub") as server:
                open({str(pidfile)!r}, "w").write(str(server.proc.pid))
                if {how!r} == "error":
                    raise RuntimeError("the measurement failed")
                time.sleep(60)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while not (pidfile.exists() and pidfile.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.1)  # the file exists before its pid is written
    server_pid = int(pidfile.read_text())
    if how != "error":
        proc.send_signal(getattr(signal, how))
    proc.wait(timeout=40)
    time.sleep(0.3)
    with pytest.raises(ProcessLookupError):
        os.killpg(server_pid, 0)


def test_a_server_does_not_outlive_a_killed_caller(tmp_path):
    pidfile = tmp_path / "pid"
    script = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(HERE.parent)!r})
        from tools.bench import vllm_server
        argv = lambda port: [sys.executable, {str(STUB)!r}, "--port", str(port)]
        server = vllm_server.VllmServer(argv, "stub")
        open({str(pidfile)!r}, "w").write(str(server.proc.pid))
        time.sleep(60)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script])
    deadline = time.monotonic() + 30
    while not (pidfile.exists() and pidfile.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.1)  # the file exists before its pid is written
    server_pid = int(pidfile.read_text())
    proc.kill()  # SIGKILL: no atexit, no finally
    proc.wait(timeout=10)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(server_pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    with pytest.raises(ProcessLookupError):
        os.kill(server_pid, 0)


# ------------------------------------------------------------------------------------------ the whole path
@pytest.fixture
def fake_vllm(tmp_path, monkeypatch):
    """A ready vLLM venv whose python runs a stand-in ``vllm.entrypoints.openai.api_server``: the stub, with
    as many speculative tokens per chunk as the --speculative-config asks."""
    peers = tmp_path / "peers"
    bin_dir = peers / "vllm" / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").symlink_to(sys.executable)
    (peers / "vllm" / "ready.json").write_text(json.dumps({"versions": {"vllm": "stub"}, "device": "cpu"}))
    pkg = tmp_path / "fakevllm" / "vllm" / "entrypoints" / "openai"
    pkg.mkdir(parents=True)
    for d in (pkg.parent.parent, pkg.parent, pkg):
        (d / "__init__.py").write_text("")
    (pkg / "api_server.py").write_text(textwrap.dedent(f"""
        import json, sys
        sys.path.insert(0, {str(HERE)!r})
        import openai_stub
        args = sys.argv[1:]
        spec = json.loads(args[args.index("--speculative-config") + 1]) if "--speculative-config" in args else None
        port = args[args.index("--port") + 1]
        extra = ["--spec", str(spec["num_speculative_tokens"])] if spec else []
        sys.exit(openai_stub.main(["--port", port, "--token-ms", "10", *extra]))
    """))
    monkeypatch.setenv("SPECPILOT_PEERS", str(peers))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "fakevllm"))
    return tmp_path


def test_bench_on_vllm_prints_one_row_per_level_and_stores_them(fake_vllm, tmp_path, capsys, monkeypatch):
    from agent.cli.main import main
    from memory import Store
    from tools.bench import vllm_bench

    prompts = tmp_path / "p.jsonl"
    prompts.write_text("\n".join(json.dumps({"question_id": i, "category": c, "prompt": f"prompt {i}"})
                                 for i, c in enumerate(["coding", "math", "qa"])) + "\n")
    monkeypatch.setattr(vllm_bench, "model_folder", lambda ref, what: None)  # prompts go as text to the stand-in
    code = main(["bench", "--backend", "vllm", "--methods", "ngram", "--concurrency", "1,2,4", "--k", "2,3",
                 "--prompts", str(prompts), "--max-new-tokens", "9", "--json"])
    assert code == 0
    result = json.loads(capsys.readouterr().out)
    rows = result["rows"]
    assert [(r["method"], r["k"], r["concurrency"]) for r in rows] == [
        ("baseline", None, 1), ("baseline", None, 2), ("baseline", None, 4),
        ("ngram", 2, 1), ("ngram", 2, 2), ("ngram", 2, 4), ("ngram", 3, 1), ("ngram", 3, 2), ("ngram", 3, 4)]
    for r in rows:
        assert r["throughput_tok_s"] > 0 and r["tpot_p50_ms"] > 0 and r["ttft_p99_ms"] > 0 and r["failed"] == 0
        assert r["matches_baseline"] is True
    k3 = [r for r in rows if r["k"] == 3]
    assert all(r["acceptance_length"] == pytest.approx(4.0, rel=0.3) for r in k3)  # chunks of up to 4 tokens
    # speedups are ratios of measured throughputs (not asserted: timing belongs to benchmark commands, not tests)
    assert all(r["speedup"] == pytest.approx(r["throughput_tok_s"] / r["baseline_throughput_tok_s"]) for r in rows)
    assert set(result["best_k"]["ngram"]) == {"1", "2", "4"}
    assert Path(result["chart"]).is_file() and Path(result["chart"]).read_bytes()[:4] == b"\x89PNG"
    stored = Store().get_run(rows[-1]["run_id"])
    assert stored["backend"] == "vllm" and stored["method"] == "ngram" and stored["settings"]["concurrency"] == 4
    assert stored["method_extra"]["spec_config"] == {"method": "ngram", "num_speculative_tokens": 3}
    task = Store().get_task(result["task_id"])
    assert task["status"] == "done" and len(task["run_ids"]) == 9
    assert not vllm_server._LIVE  # every server stopped


def test_bracketing_measures_speculation_off_again_and_reports_the_drift(fake_vllm, monkeypatch):
    from tools.bench import vllm_bench

    monkeypatch.setattr(vllm_bench, "model_folder", lambda ref, what: None)
    result = vllm_bench.serve_bench(ServeBenchInput(methods=["ngram"], k=[3], concurrency=[1, 2], max_new_tokens=6,
                                                    bracket=True, prompts=[{"question_id": 1, "category": "c",
                                                                            "prompt": "x"}]))
    assert [(r["method"], r["concurrency"]) for r in result["rows"]] == [
        ("baseline", 1), ("baseline", 2), ("ngram", 1), ("ngram", 2)]  # the second baseline is no row of its own
    assert all(r["baseline_drift"] is not None and r["baseline_drift"] >= 0 for r in result["rows"])
    assert all(r["speedup"] == 1.0 and r["throughput_tok_s"] == r["baseline_throughput_tok_s"]
               for r in result["rows"] if r["method"] == "baseline")
    assert any("measured before and after the methods differed by" in line for line in result["summary"])
    assert "baseline (again, after the methods)" in result["servers"]


def test_a_method_whose_output_differs_is_reported_with_its_position(fake_vllm, tmp_path, monkeypatch):
    from tools.bench import vllm_bench

    monkeypatch.setattr(vllm_bench, "model_folder", lambda ref, what: None)
    real = vllm_server.serve_argv

    def differing(*a, **kw):  # the speculative server answers one token differently at position 5
        argv = real(*a, **kw)
        return argv + ["--differ-at", "5"] if kw.get("spec_config") else argv

    monkeypatch.setattr(vllm_server, "serve_argv", differing)
    api = fake_vllm / "fakevllm" / "vllm" / "entrypoints" / "openai" / "api_server.py"
    api.write_text(api.read_text().replace('"--token-ms", "10", *extra]', '"--token-ms", "2", *extra, *args[args.index("--speculative-config") + 2:]] if spec else ["--port", port]'))
    result = vllm_bench.serve_bench(ServeBenchInput(methods=["ngram"], k=[2], max_new_tokens=8,
                                                    prompts=[{"question_id": 1, "category": "c", "prompt": "x"}]))
    row = next(r for r in result["rows"] if r["method"] == "ngram")
    assert row["matches_baseline"] is False and row["first_divergence"]["position"] == 5
    assert row["first_divergence"]["kind"] == "mismatch"  # the stub's margin (2.9) is no near-tie


def test_an_endpoint_is_measured_with_the_same_load_generator(stub, capsys):
    from agent.cli.main import main

    code = main(["compare", "--endpoint", stub, "--baseline-endpoint", stub, "--target", "/nonexistent/model",
                 "--prompt", "hello", "--concurrency", "1,2", "--max-new-tokens", "8", "--json"])
    assert code == 0
    result = json.loads(capsys.readouterr().out)
    assert result["backend"] == "endpoint"
    assert [(r["method"], r["concurrency"]) for r in result["rows"]] == [
        ("baseline", 1), ("baseline", 2), ("endpoint", 1), ("endpoint", 2)]
    assert all(r["speedup"] for r in result["rows"] if r["method"] == "endpoint")


def test_vllm_not_set_up_is_a_clear_error_and_concurrency_needs_a_server(tmp_path, monkeypatch, capsys):
    from agent.cli.main import main

    monkeypatch.setenv("SPECPILOT_PEERS", str(tmp_path / "none"))
    assert main(["compare", "--backend", "vllm", "--methods", "ngram", "--prompt", "x"]) == 2
    assert "specpilot peers setup vllm" in capsys.readouterr().err
    assert main(["bench", "--concurrency", "1,4", "--methods", "ngram"]) == 2
    assert "--concurrency needs a server" in capsys.readouterr().err
    assert main(["run", "--backend", "vllm", "--method", "lookahead", "--prompt", "x"]) == 2
    assert "no lookahead" in capsys.readouterr().err


def test_setup_makes_its_own_venv_and_leaves_the_cuda_builds_out(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECPILOT_PEERS", str(tmp_path))
    cpu = vllm_server.setup_commands(cuda=False)
    assert cpu[0][1:3] == ["-m", "venv"] and str(tmp_path / "vllm" / "venv") in cpu[0][3]
    assert vllm_server.CPU_PACKAGE in cpu[1] and any(a.startswith("torch==") for a in cpu[1])
    assert cpu[2][-3:] == ["torchvision", "torchaudio", "torchcodec"]
    gpu = vllm_server.setup_commands(cuda=True)
    assert gpu[1][-1] == "vllm" and len(gpu) == 2
    assert not vllm_server.status()["ready"]
