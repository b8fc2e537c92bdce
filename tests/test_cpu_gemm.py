"""Float32 (and bfloat16 where the CPU multiplies it natively) linear layers through oneDNN on the CPU
(tools.engine.cpu_gemm): the same products as PyTorch's own layers, every method's output still the
baseline's, the int8 draft still quantized, the weights not held twice, and the opt-out."""

from __future__ import annotations

import pytest
import torch
from conftest import make_tiny_model

from tools.bench import context
from tools.bench.protocol import versions
from tools.engine import autoregressive, cpu_gemm, lookahead, medusa, prompt_lookup, quantize, speculative
from tools.engine.cpu_gemm import OneDNNLinear
from tools.engine.medusa import MedusaHeads
from tools.engine.params import LookaheadParams
from tools.engine.types import GenerationSettings

pytestmark = pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="this torch has no oneDNN")
PROMPT = [1, 5, 9, 2, 7, 5, 9]


def swapped(tied: bool = False, seed: int = 0):
    model = make_tiny_model("qwen2", layers=2, seed=seed)
    if tied:
        model.lm_head.weight = model.get_input_embeddings().weight
    plain = make_tiny_model("qwen2", layers=2, seed=seed)
    if tied:
        plain.lm_head.weight = plain.get_input_embeddings().weight
    count = sum(p.numel() for p in model.parameters())
    assert cpu_gemm.use_onednn(model) == 15  # 7 per layer and the LM head
    return model, plain, count


def test_the_layers_compute_what_pytorch_s_compute():
    torch.manual_seed(0)
    layer = torch.nn.Linear(48, 80)
    fast = OneDNNLinear(layer, keep_dense=False)
    with torch.inference_mode():
        for shape in ((1, 48), (1, 3, 48), (2, 5, 48)):
            x = torch.randn(*shape)
            torch.testing.assert_close(fast(x), layer(x), rtol=1e-5, atol=1e-5)
    x = torch.randn(4, 48, requires_grad=True)  # with a gradient wanted: PyTorch's path, gradients flow
    fast(x).sum().backward()
    assert x.grad is not None and torch.equal(fast.weight, layer.weight.detach())
    assert not any(p is layer.weight for p in fast.parameters())  # the dense weight is not held twice


@pytest.mark.parametrize("tied", [False, True], ids=["untied", "tied"])
def test_every_method_s_output_is_the_baseline_s(tied):
    model, plain, count = swapped(tied)
    assert cpu_gemm.weights_numel(model) == count
    if tied:  # the LM head keeps the embeddings' own tensor (shared, not copied)
        assert model.lm_head.weight is model.get_input_embeddings().weight
    settings = GenerationSettings(max_new_tokens=40)
    base = autoregressive.generate(model, PROMPT, settings).output_ids
    assert base == autoregressive.generate(plain, PROMPT, settings).output_ids
    outputs = {
        "draft": speculative.generate(model, model, PROMPT, settings, k=4).output_ids,
        "lookahead": lookahead.generate(model, PROMPT, settings, LookaheadParams(window=3, ngram=3, guess=2)).output_ids,
        "ngram": prompt_lookup.generate(model, PROMPT, settings).output_ids,
    }
    heads = MedusaHeads(model.config.hidden_size, model.config.vocab_size, num_heads=2, num_layers=1).eval()
    outputs["medusa"] = medusa.generate(model, heads, PROMPT, settings).output_ids
    assert all(out == base for out in outputs.values()), {m: o for m, o in outputs.items() if o != base}


def test_a_row_gets_the_same_bits_whatever_the_rows_beside_it():
    """Packed weights: a verification pass computes a token's product exactly as a one-token step does."""
    torch.manual_seed(1)
    fast = OneDNNLinear(torch.nn.Linear(96, 160), keep_dense=False)
    assert fast.packed
    x = torch.randn(1, 16, 96)
    with torch.inference_mode():
        alone = torch.cat([fast(x[:, i:i + 1]) for i in range(16)], dim=1)
        for rows in (2, 3, 8, 16):
            assert torch.equal(fast(x[:, :rows]), alone[:, :rows])


def test_a_curve_timed_with_the_plain_onednn_layout_is_stale_for_packed_layers():
    with pytest.MonkeyPatch.context() as patch:  # its own: the test's monkeypatch also holds SPECPILOT_HOME
        patch.setattr(cpu_gemm, "can_pack", lambda: False)
        model = swapped()[0]
        assert cpu_gemm.kernels(model) == "onednn" and cpu_gemm.expected_kernels("cpu", "float32") == "onednn"
    assert cpu_gemm.kernels(swapped()[0]) == cpu_gemm.PACKED != cpu_gemm.kernels(model)
    x = torch.randn(1, 3, model.lm_head.in_features)
    with torch.inference_mode():  # the plain layout still computes the same products
        torch.testing.assert_close(model.lm_head(x), torch.nn.functional.linear(x, model.lm_head.weight))


def test_the_int8_draft_of_a_swapped_model_is_still_quantized():
    model, _, _ = swapped()
    quantized = quantize.int8_draft(model)
    layers = [m for m in quantized.modules() if isinstance(m, torch.nn.Linear) or "quantized" in type(m).__module__]
    assert layers and not any(isinstance(m, OneDNNLinear) for m in quantized.modules())
    assert all("quantized" in type(m).__module__ for m in layers)
    settings = GenerationSettings(max_new_tokens=20)
    assert (speculative.generate(model, model, PROMPT, settings, k=3, draft_quant="int8").output_ids
            == autoregressive.generate(model, PROMPT, settings).output_ids)


def test_where_it_applies_and_the_opt_out(monkeypatch):
    assert cpu_gemm.wanted("cpu", torch.float32)
    assert not cpu_gemm.wanted("cuda", torch.float32) and not cpu_gemm.wanted("cpu", torch.float16)
    native = cpu_gemm.native_bfloat16() and cpu_gemm.can_pack()
    assert cpu_gemm.wanted("cpu", torch.bfloat16) == native  # emulated bfloat16 stays PyTorch's
    assert versions()["cpu_float32_linear"] == cpu_gemm.PACKED
    assert versions()["cpu_bfloat16_linear"] == (cpu_gemm.PACKED if native else "pytorch")
    monkeypatch.setenv(cpu_gemm.ENV, "blas")
    assert not cpu_gemm.wanted("cpu", torch.float32) and versions()["cpu_float32_linear"] == "blas"
    assert not cpu_gemm.wanted("cpu", torch.bfloat16) and versions()["cpu_bfloat16_linear"] == "pytorch"


def test_a_cpu_without_bfloat16_instructions_keeps_pytorch_s_bfloat16_layers(monkeypatch):
    monkeypatch.setattr(cpu_gemm, "native_bfloat16", lambda: False)
    model = make_tiny_model("qwen2", layers=1).to(torch.bfloat16)
    assert not cpu_gemm.wanted("cpu", torch.bfloat16) and cpu_gemm.use_onednn(model) == 0
    assert cpu_gemm.expected_kernels("cpu", "bfloat16") is None


needs_bf16 = pytest.mark.skipif(not (cpu_gemm.native_bfloat16() and cpu_gemm.can_pack()),
                                reason="this CPU has no bfloat16 instructions (AVX512-BF16 or AMX)")


@needs_bf16
def test_bfloat16_layers_compute_what_pytorch_s_compute_for_any_row_count():
    torch.manual_seed(0)
    layer = torch.nn.Linear(64, 96).to(torch.bfloat16)
    fast = OneDNNLinear(layer, keep_dense=False)
    assert fast.packed and fast.dtype == torch.bfloat16 and cpu_gemm.weight_dtype(fast) == torch.bfloat16
    with torch.inference_mode():
        for shape in ((1, 64), (1, 1, 64), (1, 2, 64), (1, 3, 64), (2, 5, 64), (1, 13, 64)):  # padded below 3 rows
            x = torch.randn(*shape, dtype=torch.bfloat16)
            out = fast(x)
            assert out.shape == (*shape[:-1], 96) and out.dtype == torch.bfloat16
            torch.testing.assert_close(out.float(), layer(x).float(), rtol=2e-2, atol=2e-2)
    assert torch.equal(fast.weight, layer.weight.detach()) and fast.plain().weight.dtype == torch.bfloat16


@needs_bf16
def test_bfloat16_methods_through_onednn_layers_agree_with_their_own_baseline():
    model = make_tiny_model("qwen2", layers=2).to(torch.bfloat16)
    assert cpu_gemm.use_onednn(model) == 15 and cpu_gemm.kernels(model) == cpu_gemm.PACKED
    settings = GenerationSettings(max_new_tokens=24)
    base = autoregressive.generate(model, PROMPT, settings).output_ids
    assert len(base) == 24
    # a tiny random model's logits are far apart: no bfloat16 near-tie between a one-token step and a pass
    params = LookaheadParams(window=3, ngram=3, guess=2)
    outputs = {
        "draft": speculative.generate(model, model, PROMPT, settings, k=3).output_ids,
        "lookahead": lookahead.generate(model, PROMPT, settings, params).output_ids,
        "ngram": prompt_lookup.generate(model, PROMPT, settings).output_ids,
    }
    heads = MedusaHeads(model.config.hidden_size, model.config.vocab_size, num_heads=2, num_layers=1).eval()
    outputs["medusa"] = medusa.generate(model, heads.to(torch.bfloat16), PROMPT, settings).output_ids
    assert all(out == base for out in outputs.values()), {m: o for m, o in outputs.items() if o != base}


@needs_bf16
def test_runs_load_bfloat16_models_with_onednn_layers_where_the_cpu_has_the_instructions(tiny_model_dir, monkeypatch):
    monkeypatch.setattr(context, "_LOADED", {})
    loaded = context.load_cached(str(tiny_model_dir), "bfloat16", None)
    layers = [m for m in loaded.model.modules() if isinstance(m, OneDNNLinear)]
    assert layers and all(m.dtype == torch.bfloat16 for m in layers)
    monkeypatch.setattr(context, "_LOADED", {})
    monkeypatch.setattr(cpu_gemm, "native_bfloat16", lambda: False)  # emulated bfloat16: PyTorch's layers
    loaded = context.load_cached(str(tiny_model_dir), "bfloat16", None)
    assert not any(isinstance(m, OneDNNLinear) for m in loaded.model.modules())


def test_runs_load_float32_models_with_onednn_layers(tiny_model_dir, monkeypatch):
    monkeypatch.setattr(context, "_LOADED", {})
    loaded = context.load_cached(str(tiny_model_dir), "float32", None)
    assert any(isinstance(m, OneDNNLinear) for m in loaded.model.modules())
    monkeypatch.setattr(context, "_LOADED", {})  # placed by accelerate: left as it is
    loaded = context.load_cached(str(tiny_model_dir), "float32", "auto")
    assert not any(isinstance(m, OneDNNLinear) for m in loaded.model.modules())
    monkeypatch.setattr(context, "_LOADED", {})
    monkeypatch.setenv(cpu_gemm.ENV, "blas")
    loaded = context.load_cached(str(tiny_model_dir), "float32", None)
    assert not any(isinstance(m, OneDNNLinear) for m in loaded.model.modules())


def test_a_curve_timed_with_pytorch_s_kernels_is_measured_again_for_onednn_layers(monkeypatch):
    from types import SimpleNamespace

    from memory import Store
    from tools.bench import machine_cost as cost
    from tools.bench.sizing import remembered_machine

    monkeypatch.setattr(cost, "hardware_name", lambda device: "test machine")
    monkeypatch.setattr(cost, "forward_cost_curve", lambda model, sizes, **k: {n: 0.1 + 0.01 * n for n in sizes})
    monkeypatch.setattr(cost, "_DISTURBED", {})
    store = Store()
    store.save_cost_curve("tiny", "test machine", {1: 0.5, 2: 1.5}, dtype="float32")  # timed before oneDNN
    model = swapped()[0]
    assert cpu_gemm.kernels(model) == cpu_gemm.PACKED and cpu_gemm.kernels(make_tiny_model("qwen2", layers=1)) is None
    machine = cost.machine_cost(store, SimpleNamespace(ref="tiny", dtype="float32", device="cpu", model=model))
    assert "measured now" in machine.curve_source and machine.curve[1] == pytest.approx(0.11)
    assert store.get_cost_curve("tiny", "test machine", "float32")["kernels"] == cpu_gemm.PACKED
    # guidance (nothing loaded) reads the curve a run would use
    assert cpu_gemm.expected_kernels("cpu", "float32") == cpu_gemm.PACKED and cpu_gemm.expected_kernels("cpu", "int8") is None
    found, stored = remembered_machine(store, "tiny", "cpu", "test machine", "float32")
    assert stored is not None and found.curve[1] == pytest.approx(0.11)
    monkeypatch.setenv(cpu_gemm.ENV, "blas")  # opted out: a run would not use that curve
    assert remembered_machine(store, "tiny", "cpu", "test machine", "float32")[1] is None
