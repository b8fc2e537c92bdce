"""Shared fixtures: tiny randomly initialised models (Qwen2 and Llama) and a private user folder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from tiny_models import make_tiny_model, perturbed_copy  # noqa: F401  (tests import them from here)

torch.set_num_threads(1)

VOCAB = 64  # make_tiny_model's default vocabulary
SHARED = Path(__file__).resolve().parents[1].parent / "shared"


FLOAT32_TIE = 1e-5  # top-2 logit gap below which float32 rounding decides the greedy pick


def assert_greedy_equal(model, prompt: list[int], expected: list[int], got: list[int]) -> None:
    """``got`` is the baseline's greedy ``expected``, or leaves it only where the target's top two
    logits tie within float32 rounding: both tokens are then greedy picks, and a pass over more
    tokens may round the other way (property tests draw thousands of cases; such ties turn up)."""
    if got == expected:
        return
    i = next((j for j, (a, b) in enumerate(zip(expected, got)) if a != b), None)
    assert i is not None, f"one output is a prefix of the other: {len(got)} vs {len(expected)} tokens"
    with torch.no_grad():
        logits = model(torch.tensor([list(prompt) + expected[:i]])).logits[0, -1].double()
    top = torch.topk(logits, 2)
    gap = float(top.values[0] - top.values[1])
    assert gap < FLOAT32_TIE and {expected[i], got[i]} <= set(top.indices.tolist()), (
        f"outputs differ at token {i} ({got[i]} vs the baseline's {expected[i]}) without a float32 tie "
        f"(top-2 gap {gap:.3g})")


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
