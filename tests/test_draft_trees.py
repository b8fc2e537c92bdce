"""Draft trees from the draft model: the chain plus the draft's other likely tokens as one-token branches,
verified in one target pass. Greedy output equals the baseline on every backend; leaves are chosen by score
and by this machine's pass costs; the counters and caches stay consistent."""

from __future__ import annotations

import pytest
import torch
from conftest import make_tiny_model, perturbed_copy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tools.engine import autoregressive, speculative
from tools.engine.draft_tree import chain_with_leaves
from tools.engine.params import DraftParams
from tools.engine.speculative import SpeculativeDecoder
from tools.engine.types import GenerationSettings
from tools.errors import ParameterError

PROMPT = [3, 17, 5, 9, 22]
VOCAB = 64


@pytest.fixture(scope="module")
def drafts(tiny_qwen):
    return {"random": make_tiny_model("qwen2", layers=1, seed=123), "self": tiny_qwen,
            "close": perturbed_copy(tiny_qwen, noise=0.02), "far": perturbed_copy(tiny_qwen, noise=0.2)}


def _baseline(model, prompt, n, eos=()):
    return autoregressive.generate(model, prompt, GenerationSettings(max_new_tokens=n, eos_token_ids=list(eos)))


def _tree(target, draft, prompt, n, eos=(), **options):
    options = {"k": 4, "draft_tree": 8, "tree_lookup": 6, **options}
    return speculative.generate(target, draft, prompt, GenerationSettings(max_new_tokens=n, eos_token_ids=list(eos)),
                                **options)


# ---------------------------------------------------------------- the tree itself (pure)


def test_leaves_are_the_drafts_other_tokens_by_score():
    # slot 0: the chain's 5 (0.6) beside 7 (0.3); slot 1: the chain's 6 (0.5) beside 8 (0.4); slot 2: a stop slot
    slots = [[(5, 0.6), (7, 0.3)], [(6, 0.5), (8, 0.4)], [(9, 0.2), (4, 0.1)]]
    tree, mass = chain_with_leaves(1, [5, 6], slots, leaves=8)
    assert tree.tokens[:3] == [1, 5, 6]  # the chain first: nodes 1..m
    leaves = {(tree.depths[i], tree.tokens[i], tree.parents[i]) for i in range(3, tree.size)}
    # 7 beside 5 at depth 1 (score 0.3), 8 beside 6 (0.6*0.4), 9 and 4 after 6 (0.3*0.2, 0.3*0.1)
    assert leaves == {(1, 7, 0), (2, 8, 1), (3, 9, 2), (3, 4, 2)}
    assert mass == pytest.approx(0.3 + 0.24 + 0.06 + 0.03)
    assert [tree.tokens[c] for c in tree.children[0]] == [5, 7]  # the chain's token is tried first
    few, few_mass = chain_with_leaves(1, [5, 6], slots, leaves=2)
    assert {few.tokens[i] for i in range(3, few.size)} == {7, 8} and few_mass == pytest.approx(0.54)


def test_no_slots_or_no_leaves_is_the_chain():
    tree, mass = chain_with_leaves(1, [5, 6], [], leaves=8)
    assert tree.is_chain and tree.tokens == [1, 5, 6] and mass == 0
    tree, mass = chain_with_leaves(1, [5, 6], [[(5, 0.6), (7, 0.3)]], leaves=0)
    assert tree.is_chain and tree.size == 3


def test_pass_costs_keep_only_the_leaves_that_pay():
    slots = [[(5, 0.9), (7, 0.05)], [(6, 0.9), (8, 0.04)], [(9, 0.3), (4, 0.2)]]
    flat, _ = chain_with_leaves(1, [5, 6], slots, 8, cost=lambda n: 1.0 + 0.001 * n)
    steep, _ = chain_with_leaves(1, [5, 6], slots, 8, cost=lambda n: float(n))
    assert flat.size == 3 + 4  # every leaf is nearly free to verify
    assert steep.size == 3  # a pass that costs a token per token: no leaf pays
    doubted, _ = chain_with_leaves(1, [5, 6], slots, 8, cost=lambda n: 1.0 + 0.05 * n, calibration=0.1)
    trusted, _ = chain_with_leaves(1, [5, 6], slots, 8, cost=lambda n: 1.0 + 0.05 * n, calibration=1.0)
    assert doubted.size < trusted.size


# ---------------------------------------------------------------- exact output


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(prompt=st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=24), k=st.integers(1, 12),
       leaves=st.integers(0, 32), max_new_tokens=st.integers(1, 40),
       quality=st.sampled_from(["random", "self", "close", "far"]), lookup=st.sampled_from([0, 4]),
       confidence=st.sampled_from([None, 0.4]), adaptive=st.booleans())
def test_greedy_output_equals_the_baseline(tiny_qwen, drafts, prompt, k, leaves, max_new_tokens, quality, lookup,
                                           confidence, adaptive):
    base = _baseline(tiny_qwen, prompt, max_new_tokens)
    result = _tree(tiny_qwen, drafts[quality], prompt, max_new_tokens, k=k, draft_tree=leaves, draft_lookup=lookup,
                   draft_confidence=confidence, adaptive_k=adaptive)
    assert result.output_ids == base.output_ids
    assert result.target_forwards == result.steps + 1
    assert sum(result.accepted_per_step) == result.tokens_accepted
    assert len(result.output_ids) == len(base.output_ids)


def test_greedy_output_equals_the_baseline_with_costs_and_a_stop_token(tiny_qwen, drafts):
    base = _baseline(tiny_qwen, PROMPT, 40)
    eos = base.output_ids[17]
    base = _baseline(tiny_qwen, PROMPT, 40, eos=[eos])
    for quality in drafts:
        result = _tree(tiny_qwen, drafts[quality], PROMPT, 40, eos=[eos], adaptive_k=True, draft_confidence=0.4,
                       pass_costs=[1.0, 1.02, 1.03, 1.05, 1.06, 1.08, 1.1, 1.12], draft_cost=0.2)
        assert result.output_ids == base.output_ids, quality


def test_leaves_save_steps_where_the_chain_fails(tiny_qwen, drafts):
    """A far draft's second and third choices are often the target's: the tree needs fewer target passes."""
    chain = _tree(tiny_qwen, drafts["far"], PROMPT, 40, draft_tree=0, draft_confidence=0.4)
    tree = _tree(tiny_qwen, drafts["far"], PROMPT, 40, draft_tree=16, draft_confidence=0.4)
    assert tree.output_ids == chain.output_ids
    assert tree.steps < chain.steps
    assert tree.extra["leaves_kept"] > 0 and tree.extra["leaves_per_tree"] > 1
    assert chain.extra["leaves_per_tree"] is None and chain.extra["draft_tree"] == 0


@torch.no_grad()
def test_the_caches_hold_the_committed_sequence_after_every_step(tiny_qwen, drafts):
    decoder = SpeculativeDecoder(tiny_qwen, drafts["far"], k=4, draft_tree=8, draft_confidence=0.4)
    core = decoder._core
    decoder.init_caches(PROMPT, GenerationSettings(max_new_tokens=30))
    for _ in range(8):
        core.step([], 30)
        seq = core.seq
        assert core.target.cache_length(core.cache) == len(seq) - 1
        assert core.drafter.length <= len(seq) - 1
        # the kept tree path gives the same next-token logits as a fresh forward over the committed tokens
        logits = core.target.forward(torch.tensor([[seq[-1]]]), core.cache, torch.tensor([[len(seq) - 1]]))
        core.target.crop(core.cache, len(seq) - 1)
        torch.testing.assert_close(logits[-1], tiny_qwen(torch.tensor([seq])).logits[0, -1], rtol=1e-4, atol=1e-4)


def test_draft_tree_is_validated_and_in_the_parameters():
    with pytest.raises(ParameterError, match="draft_tree"):
        SpeculativeDecoder(make_tiny_model("qwen2", layers=1, seed=0), make_tiny_model("qwen2", layers=1, seed=1),
                           draft_tree=99)
    assert DraftParams().draft_tree == 16
    assert DraftParams(draft_tree=0).draft_tree == 0


def test_acceptance_counts_the_deepest_path_not_every_leaf(tiny_qwen, drafts):
    """As EAGLE counts a tree: a step drafts its deepest path, so a draft that is always right keeps nearly all of it."""
    result = _tree(tiny_qwen, drafts["self"], PROMPT, 40, draft_tree=16)
    assert result.tokens_drafted == sum(result.drafted_by_position)
    assert result.tokens_accepted / result.tokens_drafted > 0.8  # (a lookup branch may reach deeper than the chain)
