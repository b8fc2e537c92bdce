"""Tiny randomly initialised causal LMs (Qwen2 and Llama) built from a config: fast stand-ins that run
every decoder's real code path. Used by the tests and by benchmarks/scripts/gpu_check.py."""

from __future__ import annotations

import copy

import torch


def tiny_config(kind: str = "qwen2", layers: int = 2, vocab: int = 64, hidden: int = 32, max_positions: int = 1024):
    """A Qwen2Config or LlamaConfig of the given size with peaked logits (initializer_range 0.3), so
    greedy tests meet few floating-point near-ties."""
    common = dict(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=max_positions,
        tie_word_embeddings=False,
        initializer_range=0.3,
    )
    if kind == "qwen2":
        from transformers import Qwen2Config

        return Qwen2Config(**common)
    if kind == "llama":
        from transformers import LlamaConfig

        return LlamaConfig(**common)
    raise ValueError(f"unknown tiny model kind {kind!r}: use 'qwen2' or 'llama'")


def make_tiny_model(kind: str = "qwen2", layers: int = 2, seed: int = 0, vocab: int = 64, dtype=torch.float32,
                    hidden: int = 32, max_positions: int = 1024):
    """A tiny random causal LM in eval mode, deterministic for a seed."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(tiny_config(kind, layers, vocab, hidden, max_positions))
    return model.to(dtype).eval()


def perturbed_copy(model, noise: float, seed: int = 1):
    """A draft that mostly agrees with ``model``: its weights plus Gaussian noise scaled to each tensor."""
    torch.manual_seed(seed)
    draft = copy.deepcopy(model)
    with torch.no_grad():
        for p in draft.parameters():
            p.add_(noise * torch.randn_like(p) * p.std().clamp_min(1e-3))
    return draft.eval()
