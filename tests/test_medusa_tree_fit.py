"""Fitting a Medusa tree to heads: hit tables, greedy growth, size from a cost curve, storage."""

from __future__ import annotations

import json

import pytest
import torch

from tools.engine.medusa_trees import resolve_tree, validate_choices
from tools.errors import ModelIntegrityError, ParameterError
from tools.medusa.tree_fit import best_size, curve_cost, fit_tree, rank_hits


def test_rank_hits_compares_each_heads_guess_with_the_token_it_predicts():
    tokens = [10, 11, 12, 13]
    topk = torch.zeros(4, 2, 2, dtype=torch.long)
    topk[0, 0] = torch.tensor([11, 5])  # head 0 at position 0 guesses tokens[1]: rank 0 hits
    topk[0, 1] = torch.tensor([5, 12])  # head 1 at position 0 guesses tokens[2]: rank 1 hits
    topk[1, 0] = torch.tensor([5, 12])
    topk[2, 1] = torch.tensor([13, 13])  # head 1 at position 2 would need tokens[4]: past the text
    hits = rank_hits(topk, tokens)
    assert hits.shape == (3, 2, 2)
    assert hits[0].tolist() == [[True, False], [False, True]]
    assert hits[1].tolist() == [[False, True], [False, False]]
    assert not hits[2].any()
    with pytest.raises(ParameterError):
        rank_hits(topk, tokens[:3])


def _hits(rows):
    """hits from rows of (head-0 hit ranks, head-1 hit ranks)."""
    out = torch.zeros(len(rows), 2, 3, dtype=torch.bool)
    for i, (h0, h1) in enumerate(rows):
        for r in h0:
            out[i, 0, r] = True
        for r in h1:
            out[i, 1, r] = True
    return out


def test_fit_tree_adds_the_node_worth_most_accepted_tokens():
    # rank 0 of head 0 hits 3 of 5 positions; after it, head 1's rank 2 hits twice; rank 1 of
    # head 0 hits where rank 0 misses
    hits = _hits([({0}, {2}), ({0}, {2}), ({0}, set()), ({1}, {0}), ({1}, set())])
    choices, means = fit_tree(hits, 4)
    assert choices[:3] == [[0], [1], [0, 2]]
    assert means[:3] == pytest.approx([3 / 5, 5 / 5, 7 / 5])
    assert validate_choices(choices) == choices  # every prefix is a prefix-closed tree
    assert means == sorted(means)
    with pytest.raises(ParameterError):
        fit_tree(hits[:0], 3)


def test_best_size_trades_accepted_tokens_for_forward_cost():
    means = [0.5, 0.8, 0.9, 0.95]
    flat = curve_cost({1: 1.0, 64: 1.0})
    assert best_size(means, flat) == 4  # free nodes: take them all
    steep = curve_cost({1: 1.0, 2: 1.2, 3: 1.9, 5: 3.0})
    assert best_size(means, steep) == 1
    cost = curve_cost({1: 0.2, 8: 0.2, 32: 0.4})
    assert cost(1) == 1.0 and cost(20) == pytest.approx(1.5) and cost(64) == pytest.approx(4.0)


def test_a_tree_stored_with_the_heads_is_what_auto_uses_on_a_cpu(tmp_path, tiny_qwen):
    from tools.medusa.checkpoint import TREE_NAME, load_heads, save_heads, save_tree
    from test_medusa_checkpoint import random_heads

    save_heads(random_heads(), tmp_path / "h")
    assert load_heads(tmp_path / "h").tree_choices is None
    save_tree(tmp_path / "h", [[0], [1], [0, 0]], {"fitted_on": "test"})
    assert json.loads((tmp_path / "h" / TREE_NAME).read_text())["fitted_on"] == "test"
    heads = load_heads(tmp_path / "h", tiny_qwen)
    assert heads.tree_choices == [[0], [1], [0, 0]]
    name, choices = resolve_tree("auto", heads.num_heads, "cpu", heads.tree_choices)
    assert choices == [[0], [1], [0, 0]] and "fitted" in name
    assert resolve_tree("auto", heads.num_heads, "cuda", heads.tree_choices)[0].startswith("mc_sim_7b_63")
    assert resolve_tree("cpu8", heads.num_heads, "cpu", heads.tree_choices)[0] == "cpu8"
    # new weights make the old tree stale: saving heads removes it
    save_heads(random_heads(), tmp_path / "h")
    assert not (tmp_path / "h" / TREE_NAME).exists()
    (tmp_path / "h" / TREE_NAME).write_text('{"choices": [[0, 1]]}')
    with pytest.raises(ModelIntegrityError, match="medusa_tree.json"):
        load_heads(tmp_path / "h")


def test_curve_cost_never_falls_with_more_tokens():
    # a noisy measurement (24 tokens timed below 20) must not make 24 look cheaper than 20
    cost = curve_cost({1: 0.20, 20: 0.25, 24: 0.24, 32: 0.26})
    assert cost(20) == cost(24) == pytest.approx(0.245 / 0.20)
    assert all(cost(t) <= cost(t + 1) for t in range(1, 40))
