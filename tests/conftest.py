"""Shared fixtures: tiny randomly initialised models (Qwen2 and Llama) and a private user folder."""

from __future__ import annotations

import copy
import os
from pathlib import Path

import pytest
import torch

torch.set_num_threads(1)

VOCAB = 64
SHARED = Path(__file__).resolve().parents[1].parent / "shared"


def _tiny_config(kind: str, layers: int, vocab: int = VOCAB, hidden: int = 32):
    common = dict(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        tie_word_embeddings=False,
        initializer_range=0.3,  # peaked logits: fewer floating-point near-ties in greedy tests
    )
    if kind == "qwen2":
        from transformers import Qwen2Config

        return Qwen2Config(**common)
    from transformers import LlamaConfig

    return LlamaConfig(**common)


def make_tiny_model(kind: str = "qwen2", layers: int = 2, seed: int = 0, vocab: int = VOCAB, dtype=torch.float32):
    """A tiny random causal LM (eval mode) built from a config; deterministic for a seed."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(_tiny_config(kind, layers, vocab))
    return model.to(dtype).eval()


def perturbed_copy(model, noise: float, seed: int = 1):
    """A draft that mostly agrees with ``model``: its weights plus Gaussian noise."""
    torch.manual_seed(seed)
    draft = copy.deepcopy(model)
    with torch.no_grad():
        for p in draft.parameters():
            p.add_(noise * torch.randn_like(p) * p.std().clamp_min(1e-3))
    return draft.eval()


@pytest.fixture(scope="session")
def tiny_qwen():
    return make_tiny_model("qwen2", layers=2, seed=0)


@pytest.fixture(scope="session")
def tiny_llama():
    return make_tiny_model("llama", layers=2, seed=0)


@pytest.fixture(scope="session")
def tiny_draft(tiny_qwen):
    """A draft for ``tiny_qwen`` that accepts often but not always."""
    return perturbed_copy(tiny_qwen, noise=0.3)


@pytest.fixture(autouse=True)
def specpilot_home(tmp_path, monkeypatch):
    """Every test gets its own SPECPILOT_HOME (database, settings) in a temporary folder."""
    home = tmp_path / "specpilot-home"
    monkeypatch.setenv("SPECPILOT_HOME", str(home))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    return home


@pytest.fixture(scope="session")
def spec_bench_path():
    path = SHARED / "data" / "spec_bench_dev.jsonl"
    if not path.exists():
        pytest.skip("../shared/data/spec_bench_dev.jsonl is not beside this checkout")
    return path


TINY_WORDS = "def return the a of to in is for and if else print x y n i value list string function python write code"


def make_tiny_model_folder(folder: Path, eos: bool = False) -> Path:
    """Save a tiny random Qwen2 checkpoint with a word-level tokenizer to ``folder`` (a local model ref)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<eos>": 1}
    for word in TINY_WORDS.split():
        vocab.setdefault(word, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", eos_token="<eos>").save_pretrained(folder)
    model = make_tiny_model("qwen2", layers=2, seed=0, vocab=VOCAB)
    if not eos:
        model.generation_config.eos_token_id = None  # run the full max_new_tokens
    model.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A tiny model folder usable as --target / --draft."""
    return make_tiny_model_folder(tmp_path_factory.mktemp("tiny-model"))
