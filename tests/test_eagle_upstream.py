"""Upstream EAGLE-1/EAGLE-2 checkpoints (SafeAILab/EAGLE's format) read as specpilot heads: the head
computes what upstream's equations compute (checked against a reference written here from them), any
such head keeps the output exact, and what is not read says why."""

from __future__ import annotations

import json
import math

import pytest
import torch
from safetensors.torch import save_file

from conftest import VOCAB, make_tiny_model
from tools.engine import autoregressive, eagle
from tools.engine.params import EagleParams
from tools.engine.types import GenerationSettings
from tools.errors import ParameterError
from tools.medusa.eagle_train import load_eagle_for, load_head
from tools.medusa.eagle_upstream import load_upstream_head

H, HEADS, KV, INTER = 32, 4, 2, 40


def upstream_config(**over) -> dict:
    cfg = {"architectures": ["LlamaForCausalLM"], "hidden_size": H, "num_attention_heads": HEADS,
           "num_key_value_heads": KV, "intermediate_size": INTER, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
           "vocab_size": VOCAB, "num_hidden_layers": 1, "bias": True}
    return {**cfg, **over}


def upstream_state(fc_bias=True, qkv_bias=False, seed=0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)

    def w(*shape):
        return torch.randn(*shape, generator=g) * 0.2

    d = H // HEADS
    state = {"fc.weight": w(H, 2 * H), "layers.0.self_attn.q_proj.weight": w(HEADS * d, H),
             "layers.0.self_attn.k_proj.weight": w(KV * d, H), "layers.0.self_attn.v_proj.weight": w(KV * d, H),
             "layers.0.self_attn.o_proj.weight": w(H, HEADS * d),
             "layers.0.post_attention_layernorm.weight": 1 + w(H),
             "layers.0.mlp.gate_proj.weight": w(INTER, H), "layers.0.mlp.up_proj.weight": w(INTER, H),
             "layers.0.mlp.down_proj.weight": w(H, INTER), "embed_tokens.weight": w(VOCAB, H)}
    if fc_bias:
        state["fc.bias"] = w(H)
    if qkv_bias:
        state.update({f"layers.0.self_attn.{p}_proj.bias": w((HEADS if p == "q" else KV) * d) for p in "qkv"})
    return state


def reference(state, feats, embeds, theta=10000.0, eps=1e-6):
    """Upstream's EAGLE-1 layer over one causal sequence, written from its equations (positions from 0)."""
    n, d = feats.shape[0], H // HEADS
    x = torch.cat([embeds, feats], -1) @ state["fc.weight"].T + state.get("fc.bias", torch.zeros(H))

    def proj(name, heads):
        y = x @ state[f"layers.0.self_attn.{name}_proj.weight"].T
        y = y + state.get(f"layers.0.self_attn.{name}_proj.bias", torch.zeros_like(y[0]))
        return y.view(n, heads, d).transpose(0, 1)  # [heads, n, d]

    inv = 1.0 / theta ** (torch.arange(0, d, 2).float() / d)
    ang = torch.arange(n).float()[:, None] * inv
    cos, sin = torch.cat([ang, ang], -1).cos(), torch.cat([ang, ang], -1).sin()

    def rot(t):
        return t * cos + torch.cat([-t[..., d // 2:], t[..., : d // 2]], -1) * sin

    q, k, v = rot(proj("q", HEADS)), rot(proj("k", KV)), proj("v", KV)
    k, v = k.repeat_interleave(HEADS // KV, 0), v.repeat_interleave(HEADS // KV, 0)
    scores = q @ k.transpose(1, 2) / math.sqrt(d) + torch.full((n, n), float("-inf")).triu(1)
    attn = (scores.softmax(-1) @ v).transpose(0, 1).reshape(n, H)
    hidden = x + attn @ state["layers.0.self_attn.o_proj.weight"].T
    normed = hidden * torch.rsqrt(hidden.pow(2).mean(-1, keepdim=True) + eps)
    normed = normed * state["layers.0.post_attention_layernorm.weight"]
    mlp = (torch.nn.functional.silu(normed @ state["layers.0.mlp.gate_proj.weight"].T)
           * (normed @ state["layers.0.mlp.up_proj.weight"].T)) @ state["layers.0.mlp.down_proj.weight"].T
    return hidden + mlp


def write(folder, state, cfg, fmt="safetensors"):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(cfg))
    if fmt == "safetensors":
        save_file({k: v.contiguous() for k, v in state.items()}, str(folder / "model.safetensors"))
    else:
        torch.save(state, folder / "pytorch_model.bin")
    return folder


@pytest.mark.parametrize("fc_bias,qkv_bias,fmt", [(True, False, "bin"), (False, False, "safetensors"),
                                                  (True, True, "safetensors")],
                         ids=["llama-bin", "no-fc-bias", "qwen2-qkv-bias"])
def test_the_head_computes_what_upstream_s_layer_computes(tmp_path, fc_bias, qkv_bias, fmt):
    state = upstream_state(fc_bias, qkv_bias)
    cfg = upstream_config(bias=fc_bias, **({"qkv_bias": True} if qkv_bias else {}))
    head = load_head(write(tmp_path / "ea", state, cfg, fmt))
    assert head.config.draft_vocab == VOCAB and head.draft_ids.tolist() == list(range(VOCAB))
    g = torch.Generator().manual_seed(1)
    feats, embeds = torch.randn(7, H, generator=g), torch.randn(7, H, generator=g)
    want = reference(state, feats, embeds)
    with torch.no_grad():  # ours: positions from 1 (the row of position j reads the feature of j - 1)
        got, _, _ = head(feats[None], embeds[None], torch.arange(1, 8), *head.empty_kv("cpu", torch.float32),
                         torch.ones(7, 7, dtype=torch.bool).tril())
    torch.testing.assert_close(got[0], want, rtol=1e-4, atol=1e-5)


def test_an_upstream_head_keeps_the_output_exact(tmp_path):
    target = make_tiny_model("llama", layers=2, seed=0)
    c = target.config
    assert (c.hidden_size, c.num_attention_heads, c.num_key_value_heads) == (H, HEADS, KV)
    folder = write(tmp_path / "ea", upstream_state(seed=2), upstream_config())

    class Loaded:  # what load_eagle_for reads of a loaded target
        ref, model = "tiny-llama", target

    head = load_eagle_for(Loaded(), str(folder))
    settings = GenerationSettings(max_new_tokens=30)
    for prompt in ([1, 5, 9, 2, 7], [3, 3, 3, 8, 1, 4, 4, 4]):
        got = eagle.generate(target, head, prompt, settings, EagleParams(depth=3, topk=2, tree_nodes=6))
        assert got.output_ids == autoregressive.generate(target, prompt, settings).output_ids


def test_what_is_not_an_eagle_1_or_2_head_is_refused_with_the_reason(tmp_path):
    eagle3 = {**upstream_state(), "d2t": torch.zeros(VOCAB, dtype=torch.long), "midlayer.hidden_norm.weight": torch.ones(H)}
    with pytest.raises(ParameterError, match="EAGLE-3"):
        load_head(write(tmp_path / "e3", eagle3, upstream_config()))
    with pytest.raises(ParameterError, match="RoPE scaling"):
        load_head(write(tmp_path / "rs", upstream_state(), upstream_config(rope_scaling={"type": "linear", "factor": 2})))
    with pytest.raises(ParameterError, match="2-layer"):
        load_head(write(tmp_path / "l2", upstream_state(), upstream_config(num_hidden_layers=2)))
    partial = {k: v for k, v in upstream_state().items() if "mlp.down" not in k}
    with pytest.raises(ParameterError, match="down_proj"):
        load_head(write(tmp_path / "p", partial, upstream_config()))
    with pytest.raises(ParameterError, match="shapes"):
        load_upstream_head(write(tmp_path / "w", upstream_state(), upstream_config(intermediate_size=INTER + 8)))
    with pytest.raises(ParameterError, match="holds no EAGLE head"):
        load_head(tmp_path / "nothing")
