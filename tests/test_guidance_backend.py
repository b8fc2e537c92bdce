"""Guidance for the llama.cpp backend: sized to the GGUF file's own stored cost curve (dtype ``gguf``),
never to a transformers curve of the same model, and Medusa/EAGLE refused with what to do."""

from __future__ import annotations

import pytest

import tools.agent_tools.advice as guidance
from memory import Store
from tools.agent_tools import registry
from tools.agent_tools.registry import ToolContext
from tools.engine import cpu_gemm

TARGET = "qwen2.5-coder-1.5b-instruct"
CPU = {"kind": "cpu", "name": "Test CPU (2 cores)"}
FLAT = {1: 0.100, 2: 0.101, 4: 0.102, 8: 0.104, 16: 0.108, 32: 0.118, 64: 0.140}  # a GPU-like flat start
STEEP = {1: 0.050, 2: 0.080, 4: 0.140, 8: 0.300, 16: 0.600}  # llama.cpp on a CPU: every token costs


@pytest.fixture
def store():
    with Store() as s:
        yield s


def advise(store, monkeypatch, **tool_input):
    monkeypatch.setattr(guidance, "detect_hardware", lambda choice: CPU)
    tool = registry.get_tool("guidance")
    return registry.execute(tool, registry.parse_input(tool, tool_input), ToolContext(store=store))


@pytest.mark.parametrize("method", ["lookahead", "ngram", "draft"])
def test_each_backend_reads_its_own_curve(store, monkeypatch, method):
    store.save_cost_curve(TARGET, CPU["name"], FLAT, dtype="float32", measured_at="2026-01-01T00:00:00",
                          kernels=cpu_gemm.expected_kernels("cpu", "float32"))
    store.save_cost_curve(TARGET, CPU["name"], STEEP, dtype=guidance.LLAMACPP_DTYPE, measured_at="2026-01-02T00:00:00")
    monkeypatch.setattr(guidance, "run_dtype", lambda *a: "float32")
    hf = advise(store, monkeypatch, method=method, target=TARGET).content
    cpp = advise(store, monkeypatch, method=method, target=TARGET, backend="llamacpp").content
    assert hf["backend"] == "transformers" and cpp["backend"] == "llamacpp"
    assert "float32" in hf["source"] and "gguf" in cpp["source"]
    assert hf["suggested_params"] != cpp["suggested_params"]


def test_lookahead_without_a_llamacpp_curve_says_how_to_measure_it(store, monkeypatch):
    store.save_cost_curve(TARGET, CPU["name"], FLAT, dtype="float32", measured_at="2026-01-01T00:00:00")
    out = advise(store, monkeypatch, method="lookahead", target=TARGET, backend="llamacpp").content
    assert "conservative CPU curve" in out["source"] and "next_step" not in out
    assert any("--backend llamacpp --measure" in r for r in out["reasons"])


@pytest.mark.parametrize("method", ["medusa", "eagle"])
def test_methods_that_need_hidden_states_are_refused_on_llamacpp(store, monkeypatch, method):
    result = advise(store, monkeypatch, method=method, backend="llamacpp")
    assert result.is_error and "llama.cpp" in str(result.content) and "--backend transformers" in str(result.content)
