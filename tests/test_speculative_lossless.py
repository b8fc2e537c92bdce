"""Speculative sampling is lossless: over many seeds, the tokens it emits follow the target's own
distribution exactly (chi-square test on a vocabulary of 8), and the same test rejects biased samplers.

The first new token comes from the target's prefill; the second and third come from speculative
steps (draft positions 0 and 1, the residual after a rejection, or the bonus token). So the pair
(x1, x2) checks acceptance at the first draft position and the pair (x2, x3), with x1 summed out,
checks the later positions.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import make_tiny_model
from scipy.stats import chisquare

from tools.engine import speculative
from tools.engine.sampling import sample, warp_probs
from tools.engine.speculative import SpeculativeDecoder
from tools.engine.types import GenerationSettings

V = 8
PROMPT = [1, 2, 3]
ALPHA = 1e-3
MIN_EXPECTED = 5.0
# Runs per case. The power tests below draw this many samples from known-wrong samplers under each
# case's warping and must be rejected: accepting every draft (TV distance 0.47-0.65 from the target's
# (x1, x2) distribution) and, subtler, resampling a rejected token from p instead of the residual (TV
# 0.13-0.21). For the subtle one at 1000 runs the chi-square noncentrality is 116-204 at the first draft
# position (critical values 33-61 at ALPHA, 12-31 merged degrees of freedom) and 103-109 with the bias
# only at the second (critical values 54-87, 26-50 degrees of freedom): power at least 0.9998 in every
# case and position. A decoder run costs ~7 tiny-model forwards, so more runs buy almost no power.
RUNS = 1000

CASES = {
    # name: (runs, decoder options, warping)
    "plain": (RUNS, {"k": 2}, {"temperature": 1.0}),
    "top-p-top-k": (RUNS, {"k": 2}, {"temperature": 1.0, "top_p": 0.9, "top_k": 5}),
    "trimmed-adaptive-confident": (
        RUNS,
        {"k": 3, "draft_vocab": 4, "adaptive_k": True, "draft_confidence": 0.3},
        {"temperature": 1.3},
    ),
    # draft trees: the draft's argmax chain and its other likely tokens, verified by the deterministic-drafts rule
    "tree": (RUNS, {"k": 2, "draft_tree": 4}, {"temperature": 1.0}),
    "tree-top-p-confident": (RUNS, {"k": 3, "draft_tree": 8, "draft_confidence": 0.3, "adaptive_k": True},
                             {"temperature": 1.3, "top_p": 0.9}),
}


@pytest.fixture(scope="module")
def models():
    target = make_tiny_model("qwen2", layers=2, seed=0, vocab=V)
    draft = make_tiny_model("qwen2", layers=1, seed=1, vocab=V)
    return target, draft


@torch.no_grad()
def _next_probs(model, seqs: list[list[int]], settings: GenerationSettings) -> torch.Tensor:
    """Warped next-token probabilities after each sequence, from a plain full forward (float64)."""
    return warp_probs(model(torch.tensor(seqs)).logits[:, -1], settings).double()


def exact_tables(model, settings: GenerationSettings):
    """p(x1) [V], p(x2 | x1) [V, V], p(x3 | x1, x2) [V, V, V] under the warped distribution."""
    p1 = _next_probs(model, [PROMPT], settings)[0]
    p2 = _next_probs(model, [PROMPT + [a] for a in range(V)], settings)
    p3 = _next_probs(model, [PROMPT + [a, b] for a in range(V) for b in range(V)], settings).reshape(V, V, V)
    return p1, p2, p3


def pair_12(p1, p2, p3=None) -> torch.Tensor:
    """Joint distribution of (x1, x2)."""
    return p1[:, None] * p2


def pair_23(p1, p2, p3) -> torch.Tensor:
    """Joint distribution of (x2, x3) with x1 summed out."""
    return torch.einsum("a,ab,abc->bc", p1, p2, p3)


def chi_square_pvalue(counts: np.ndarray, probs: torch.Tensor) -> float:
    """Chi-square goodness of fit of ``counts`` to ``probs`` (same shape), rare cells merged.

    A count in a cell of probability zero is an outright failure (an impossible token pair).
    """
    counts = np.asarray(counts, dtype=float).ravel()
    probs = probs.double().numpy().ravel()
    probs = probs / probs.sum()
    impossible = probs == 0
    assert counts[impossible].sum() == 0, "a token pair of probability zero was sampled"
    expected = probs * counts.sum()
    big = expected >= MIN_EXPECTED
    obs = np.append(counts[big], counts[~big].sum())
    exp = np.append(expected[big], expected[~big].sum())
    if exp[-1] == 0:
        obs, exp = obs[:-1], exp[:-1]
    assert len(obs) >= 5, "too few cells for a meaningful test"
    return float(chisquare(obs, exp).pvalue)


def collect(decoder: SpeculativeDecoder, warping: dict, runs: int):
    """Run the decoder once per seed; return counts of (x1, x2) and (x2, x3) and the acceptance rate."""
    c12 = np.zeros((V, V))
    c23 = np.zeros((V, V))
    drafted = accepted = leaves_kept = 0
    for seed in range(runs):
        settings = GenerationSettings(max_new_tokens=4, seed=seed, **warping)
        result = decoder.run(PROMPT, settings)
        out = result.output_ids
        leaves_kept += result.extra.get("leaves_kept", 0)
        assert len(out) == 4
        c12[out[0], out[1]] += 1
        c23[out[1], out[2]] += 1
        drafted += decoder.tokens_drafted
        accepted += decoder.tokens_accepted
    return c12, c23, accepted / drafted, leaves_kept


@pytest.fixture(scope="module", params=list(CASES))
def sampled(request, models):
    target, draft = models
    runs, options, warping = CASES[request.param]
    decoder = SpeculativeDecoder(target, draft, **options, **warping)
    c12, c23, acceptance, leaves_kept = collect(decoder, warping, runs)
    tables = exact_tables(target, GenerationSettings(**warping))
    return request.param, c12, c23, (acceptance, leaves_kept), tables


def test_both_acceptance_and_rejection_happen(sampled):
    name, c12, c23, (acceptance, leaves_kept), _ = sampled
    if name.startswith("tree"):  # every leaf counts as drafted, and at most one path is kept
        assert 0.05 < acceptance < 0.9 and leaves_kept > 100, f"{name}: {acceptance:.2f}, {leaves_kept} leaves kept"
    else:
        assert 0.15 < acceptance < 0.9, f"{name}: acceptance {acceptance:.2f} leaves a branch untested"


def test_first_two_tokens_follow_the_target_distribution(sampled):
    name, c12, _, _, tables = sampled
    pvalue = chi_square_pvalue(c12, pair_12(*tables))
    assert pvalue > ALPHA, f"{name}: (x1, x2) differs from the target's distribution, p-value {pvalue:.2e}"


def test_later_draft_positions_follow_the_target_distribution(sampled):
    name, _, c23, _, tables = sampled
    pvalue = chi_square_pvalue(c23, pair_23(*tables))
    assert pvalue > ALPHA, f"{name}: (x2, x3) differs from the target's distribution, p-value {pvalue:.2e}"


def test_top_p_top_k_never_emit_a_cut_token(models):
    """Tokens outside the target's warped support are never emitted, whatever the draft proposes."""
    target, draft = models
    warping = {"temperature": 1.0, "top_p": 0.9, "top_k": 5}
    p1, p2, p3 = exact_tables(target, GenerationSettings(**warping))
    assert (pair_12(p1, p2) == 0).sum() > V  # the warping does cut tokens
    decoder = SpeculativeDecoder(target, draft, k=3, **warping)
    for seed in range(200):
        out = decoder.run(PROMPT, GenerationSettings(max_new_tokens=3, seed=seed, **warping)).output_ids
        assert p1[out[0]] > 0 and p2[out[0], out[1]] > 0 and p3[out[0], out[1], out[2]] > 0


# ---------------------------------------------------------------- the test has power


def _draw(probs: torch.Tensor, runs: int, seed: int = 0) -> np.ndarray:
    flat = probs.double().numpy().ravel()
    counts = np.random.default_rng(seed).multinomial(runs, flat / flat.sum())
    return counts.reshape(probs.shape)


def test_exact_samples_pass(models):
    """Counts drawn from the exact target distribution pass: the test is not too strict."""
    target, _ = models
    tables = exact_tables(target, GenerationSettings(temperature=1.0))
    for seed in range(3):
        assert chi_square_pvalue(_draw(pair_12(*tables), RUNS, seed), pair_12(*tables)) > ALPHA
        assert chi_square_pvalue(_draw(pair_23(*tables), RUNS, seed), pair_23(*tables)) > ALPHA


def test_a_sampler_that_always_accepts_drafts_is_rejected(models):
    """x1 from p, then x2 straight from the draft's q: what a decoder skipping the acceptance test emits."""
    target, draft = models
    s = GenerationSettings(temperature=1.0)
    p1, p2, _ = exact_tables(target, s)
    _, q2, _ = exact_tables(draft, s)
    counts = _draw(p1[:, None] * q2, RUNS)
    assert chi_square_pvalue(counts, pair_12(p1, p2)) < ALPHA


def _resampled_from_p(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Accept with min(1, p/q), but draw a rejected token from p instead of max(0, p - q)."""
    kept = torch.minimum(p, q)
    return kept + (1 - kept.sum(-1, keepdim=True)) * p


@pytest.mark.parametrize("name", list(CASES))
def test_a_sampler_that_resamples_from_p_instead_of_the_residual_is_rejected(models, name):
    """The subtle bias, under each case's warping and at its number of runs, at the first draft
    position (x1, x2) and, alone, at the second (x2, x3): the sample counts above have the power."""
    target, draft = models
    runs, _, warping = CASES[name]
    s = GenerationSettings(**warping)
    p1, p2, p3 = exact_tables(target, s)
    _, q2, q3 = exact_tables(draft, s)
    first = _draw(p1[:, None] * _resampled_from_p(p2, q2), runs)
    assert chi_square_pvalue(first, pair_12(p1, p2)) < ALPHA
    second = _draw(torch.einsum("a,ab,abc->bc", p1, p2, _resampled_from_p(p3, q3)), runs)
    assert chi_square_pvalue(second, pair_23(p1, p2, p3)) < ALPHA


def test_the_real_decoder_with_acceptance_switched_off_is_rejected(models, monkeypatch):
    """Run the real decoder with its acceptance rule replaced by 'accept every draft': the test catches it."""
    target, draft = models

    def accept_all(p, q, drafts, generator):
        return len(drafts), int(sample(p[len(drafts)], generator))

    monkeypatch.setattr(speculative, "accept_sampling", accept_all)
    decoder = SpeculativeDecoder(target, draft, k=2, temperature=1.0)
    # 250 runs: this bias (TV 0.47) gives a chi-square noncentrality of ~350 against a critical value of ~35
    c12, _, acceptance, _ = collect(decoder, {"temperature": 1.0}, 250)
    assert acceptance == 1.0
    tables = exact_tables(target, GenerationSettings(temperature=1.0))
    assert chi_square_pvalue(c12, pair_12(*tables)) < ALPHA


def test_a_tree_decoder_that_always_keeps_the_chain_is_rejected(models, monkeypatch):
    """Draft trees with their acceptance replaced by 'keep the draft's chain': the test catches it."""
    target, draft = models

    def keep_chain(tree, p_at, generator):
        node = 0
        while tree.children[node]:
            node = tree.children[node][0]
        return node, int(sample(p_at(node), generator))

    monkeypatch.setattr(speculative, "accept_sampling_tree", keep_chain)
    decoder = SpeculativeDecoder(target, draft, k=2, temperature=1.0, draft_tree=4)
    c12, _, _, _ = collect(decoder, {"temperature": 1.0}, 250)
    tables = exact_tables(target, GenerationSettings(temperature=1.0))
    assert chi_square_pvalue(c12, pair_12(*tables)) < ALPHA
