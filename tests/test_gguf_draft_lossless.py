"""Sampling with a draft on llama.cpp beside a transformers target is lossless: over many seeds the tokens
emitted follow the target's own warped distribution (chi-square, as tests/test_speculative_lossless.py does
for two transformers models). The draft's probabilities come from llama.cpp's logits of another engine and
another precision path, so this checks that the rejection sampling uses them as q consistently.

Tiny GGUF pair (tests/gguf_tiny.py: the draft a lightly perturbed copy of the target, 25-50% of its drafts
accepted); top-k keeps the support of each position small enough for a chi-square test over a 262-token
vocabulary. Against the draft's own distribution the same counts fail outright (pairs the target never
samples)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("gguf")
pytest.importorskip("llama_cpp")

from gguf_tiny import write_pair  # noqa: E402
from test_speculative_lossless import ALPHA, chi_square_pvalue  # noqa: E402

from tools.bench import context  # noqa: E402
from tools.engine import methods  # noqa: E402
from tools.engine.params import DraftParams  # noqa: E402
from tools.engine.sampling import warp_probs  # noqa: E402
from tools.engine.types import GenerationSettings  # noqa: E402

PROMPT = [40, 41, 42, 43]
RUNS = 1000
CASES = {  # name: (draft parameters, warping)
    "k2-top-k": (DraftParams(k=2, adaptive_k=False, draft_confidence=None, draft_quant="gguf", draft_tree=0),
                 {"temperature": 1.0, "top_k": 6}),
    "k1-top-p": (DraftParams(k=1, adaptive_k=False, draft_confidence=None, draft_quant="gguf", draft_tree=0),
                 {"temperature": 0.7, "top_k": 8, "top_p": 0.9}),
    # a draft tree: the draft's argmax chain and its other likely tokens (the draft's defaults)
    "k2-tree": (DraftParams(k=2, adaptive_k=False, draft_confidence=None, draft_quant="gguf"),
                {"temperature": 1.0, "top_k": 6}),
}


@pytest.fixture(scope="module")
def ctx(tmp_path_factory):
    target_file, draft_file = write_pair(tmp_path_factory.mktemp("gguf"), noise=0.1)
    target = context.load_cached(target_file, "float32", None, 1)
    gguf = context.load_cached(draft_file, "gguf", None, 1, "llamacpp", role="gguf_draft")
    yield methods.MethodContext(target=target, gguf_draft=gguf)
    context.release_models()


@torch.no_grad()
def _next(model, seqs: list[list[int]], warping: dict) -> torch.Tensor:
    return warp_probs(model(torch.tensor(seqs)).logits[:, -1].float(), GenerationSettings(**warping)).double()


def pair_tables(model, warping: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """The target's joint distributions of (x1, x2) and (x2, x3), x1 summed out, over the warped support."""
    vocab = model.config.vocab_size
    p1 = _next(model, [PROMPT], warping)[0]
    firsts = p1.nonzero().flatten().tolist()
    p2 = torch.zeros(vocab, vocab, dtype=torch.float64)
    p2[firsts] = _next(model, [PROMPT + [a] for a in firsts], warping)
    pairs = [(a, b) for a in firsts for b in p2[a].nonzero().flatten().tolist()]
    p3 = _next(model, [PROMPT + [a, b] for a, b in pairs], warping)
    joint12 = p1[:, None] * p2
    joint23 = torch.zeros(vocab, vocab, dtype=torch.float64)
    for (a, b), row in zip(pairs, p3):
        joint23[b] += joint12[a, b] * row
    return joint12, joint23


@pytest.fixture(scope="module", params=list(CASES))
def sampled(request, ctx):
    params, warping = CASES[request.param]
    vocab = ctx.target.model.config.vocab_size
    c12, c23 = np.zeros((vocab, vocab)), np.zeros((vocab, vocab))
    drafted = accepted = 0
    for seed in range(RUNS):
        settings = GenerationSettings(max_new_tokens=3, seed=seed, **warping)
        result = methods.run("draft", ctx, PROMPT, settings, params)
        out = result.output_ids
        assert len(out) == 3 and result.extra["draft_quant"] == "gguf"
        c12[out[0], out[1]] += 1
        c23[out[1], out[2]] += 1
        drafted += result.tokens_drafted
        accepted += result.tokens_accepted
    return request.param, c12, c23, accepted / max(1, drafted), warping


def test_drafts_are_both_accepted_and_rejected(sampled):
    name, _, _, acceptance, _ = sampled
    low = 0.05 if name.endswith("tree") else 0.2  # every leaf counts as drafted; one path at most is kept
    assert low < acceptance < 0.9, f"{name}: acceptance {acceptance:.2f} leaves a branch untested"


def test_the_tokens_follow_the_targets_distribution(sampled, ctx):
    name, c12, c23, _, warping = sampled
    joint12, joint23 = pair_tables(ctx.target.model, warping)
    for counts, joint, which in ((c12, joint12, "(x1, x2)"), (c23, joint23, "(x2, x3)")):
        pvalue = chi_square_pvalue(counts, joint)
        assert pvalue > ALPHA, f"{name}: {which} differs from the target's distribution, p-value {pvalue:.2e}"
