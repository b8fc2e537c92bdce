"""Medusa tree buffers, named trees, tree files, and the acceptance rules on hand-made inputs."""

from __future__ import annotations

import json
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tools.engine.medusa import (
    accept_greedy_tree,
    accept_typical_tree,
    build_tree_buffers,
    typical_thresholds,
)
from tools.engine.medusa_trees import MC_SIM_7B_63, TREES, load_choices, resolve_tree, validate_choices
from tools.errors import ParameterError

T, F = True, False


def test_buffers_of_a_small_tree_match_hand_computed_values():
    # given out of order on purpose; nodes become 1:[0] 2:[1] 3:[0,0] 4:[0,1] 5:[1,0]
    tree = build_tree_buffers([[0, 1], [1], [0], [1, 0], [0, 0]])
    assert tree.choices == [[0], [1], [0, 0], [0, 1], [1, 0]]
    assert tree.n == 6 and tree.depth == 2 and tree.topk == 2
    assert tree.visible.tolist() == [
        [T, F, F, F, F, F],
        [T, T, F, F, F, F],
        [T, F, T, F, F, F],
        [T, T, F, T, F, F],
        [T, T, F, F, T, F],
        [T, F, T, F, F, T],
    ]
    # candidates are [root, head0 top-2, head1 top-2]: index 1 + (depth-1)*2 + rank
    assert tree.tree_indices.tolist() == [0, 1, 2, 3, 4, 3]
    assert tree.position_ids.tolist() == [0, 1, 1, 2, 2, 2]
    assert tree.retrieve_indices.tolist() == [[0, 1, 3], [0, 1, 4], [0, 2, 5]]


def test_buffers_pad_short_paths_with_minus_one():
    tree = build_tree_buffers([[0], [1], [0, 0], [0, 0, 0]])
    assert tree.tree_indices.tolist() == [0, 1, 2, 3, 5]
    assert tree.position_ids.tolist() == [0, 1, 1, 2, 3]
    assert tree.retrieve_indices.tolist() == [[0, 2, -1, -1], [0, 1, 3, 4]]
    assert tree.visible[4].tolist() == [T, T, F, T, T]


def test_empty_tree_is_the_root_alone():
    tree = build_tree_buffers([])
    assert tree.n == 1 and tree.depth == 0
    assert tree.visible.tolist() == [[True]]
    assert tree.retrieve_indices.tolist() == [[0]]


@pytest.mark.parametrize("bad", [[[0, 1]], [[0], [0]], [[-1]], [[0.5]], [[]], "[[0]]", [[True]]])
def test_invalid_choices_are_refused(bad):
    with pytest.raises(ParameterError):
        build_tree_buffers(bad)


@st.composite
def prefix_closed_trees(draw):
    choices: set[tuple[int, ...]] = set()
    for _ in range(draw(st.integers(1, 12))):
        parent = draw(st.sampled_from(sorted(choices) + [()]))
        if len(parent) < 4:
            choices.add(parent + (draw(st.integers(0, 4)),))
    return [list(c) for c in choices]


@settings(max_examples=60, deadline=None)
@given(prefix_closed_trees())
def test_buffers_agree_with_the_tree_definition(choices):
    tree = build_tree_buffers(choices)
    nodes = [()] + [tuple(c) for c in tree.choices]
    for i, a in enumerate(nodes):
        assert int(tree.position_ids[i]) == len(a)
        for j, b in enumerate(nodes):
            assert bool(tree.visible[i, j]) == (a[: len(b)] == b), (a, b)
        if i:
            assert int(tree.tree_indices[i]) == 1 + (len(a) - 1) * tree.topk + a[-1]
    leaves = {a for a in nodes[1:] if not any(b != a and b[: len(a)] == a for b in nodes)}
    paths = set()
    for row in tree.retrieve_indices.tolist():
        real = [k for k in row if k >= 0]
        assert row[: len(real)] == real and real[0] == 0
        assert all(nodes[real[d + 1]][:-1] == nodes[real[d]] for d in range(len(real) - 1))
        paths.add(nodes[real[-1]])
    assert paths == leaves


def test_named_trees_are_valid_and_sized_for_their_purpose():
    assert len(MC_SIM_7B_63) == 63
    sizes = {name: build_tree_buffers(c).n for name, c in TREES.items()}
    assert sizes == {"chain3": 4, "chain4": 5, "cpu8": 8, "cpu16": 16, "mc_sim_7b_63": 64}
    assert build_tree_buffers(MC_SIM_7B_63).depth == 4


def test_resolve_tree_auto_depends_on_device_and_head_count():
    assert resolve_tree("auto", 4, "cpu") == ("cpu8", TREES["cpu8"])
    name, choices = resolve_tree("auto", 3, "cuda")
    assert name == "mc_sim_7b_63[depth<=3]" and max(len(c) for c in choices) == 3
    assert resolve_tree("auto", 5, "cuda")[1] == MC_SIM_7B_63


def test_resolve_tree_refuses_a_tree_deeper_than_the_heads():
    with pytest.raises(ParameterError, match="only 2 heads"):
        resolve_tree("chain3", 2)
    with pytest.raises(ParameterError, match="unknown Medusa tree"):
        resolve_tree("no-such-tree", 4)


def test_tree_files_load_as_list_or_object(tmp_path):
    (tmp_path / "a.json").write_text(json.dumps([[0], [0, 0]]))
    (tmp_path / "b.json").write_text(json.dumps({"choices": [[0], [1]]}))
    (tmp_path / "bad.json").write_text("[[0], [")
    assert load_choices(tmp_path / "a.json") == [[0], [0, 0]]
    assert resolve_tree(str(tmp_path / "b.json"), 4) == (str(tmp_path / "b.json"), [[0], [1]])
    with pytest.raises(ParameterError, match="not valid JSON"):
        load_choices(tmp_path / "bad.json")
    with pytest.raises(ParameterError, match="does not exist"):
        load_choices(tmp_path / "missing.json")
    assert validate_choices(((0,), (0, 1))) == [[0], [0, 1]]


def test_greedy_acceptance_takes_the_longest_matching_path():
    tree = build_tree_buffers([[0], [1], [0, 0], [0, 1], [1, 0]])
    tokens = torch.tensor([7, 3, 5, 9, 2, 8])  # node tokens
    # the target's argmax after each node: after root 5 (node 2 matches), after node 2 -> 8 (node 5 matches)
    target_next = torch.tensor([5, 1, 8, 0, 0, 4])
    assert accept_greedy_tree(tokens, target_next, tree.retrieve_indices) == (2, 2)
    target_next[2] = 6  # node 5 no longer matches
    assert accept_greedy_tree(tokens, target_next, tree.retrieve_indices) == (2, 1)
    target_next[0] = 6  # no depth-1 node matches
    best, accepted = accept_greedy_tree(tokens, target_next, tree.retrieve_indices)
    assert accepted == 0


def test_greedy_acceptance_ignores_padding():
    tree = build_tree_buffers([[0], [1], [0, 0], [0, 0, 0]])
    tokens = torch.tensor([4, 0, 1, 0, 0])
    # node 2 (token 1) matches; after it the target wants 4, which is the root's token: a padded
    # slot (-1) must not be read as "node 0 proposed 4"
    target_next = torch.tensor([1, 9, 4, 9, 9])
    assert accept_greedy_tree(tokens, target_next, tree.retrieve_indices) == (0, 1)


def _probs(*rows):
    return torch.tensor(rows, dtype=torch.float32)


def test_typical_threshold_is_min_of_threshold_and_alpha_exp_minus_entropy():
    p = _probs([0.5, 0.5, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0])
    thr = typical_thresholds(p, 0.09, 0.3)
    assert thr[0].item() == pytest.approx(min(0.09, 0.3 * math.exp(-math.log(2))))
    assert thr[1].item() == pytest.approx(0.09)
    thr = typical_thresholds(p, 0.5, 0.3)
    assert thr.tolist() == pytest.approx([0.15, 0.3])


def test_typical_acceptance_prefers_longest_then_most_likely():
    tree = build_tree_buffers([[0], [1], [0, 0], [1, 0]])  # nodes 1:[0] 2:[1] 3:[0,0] 4:[1,0]
    tokens = torch.tensor([0, 1, 2, 3, 3])
    flat = [0.25, 0.25, 0.25, 0.25]
    probs = _probs(
        [0.02, 0.49, 0.49, 0.0],  # after root: tokens 1 and 2 both typical
        [0.0, 0.0, 0.0, 1.0],  # after node 1 (token 1): 3 is certain
        [0.0, 0.2, 0.0, 0.8],  # after node 2 (token 2): 3 likely
        flat, flat,
    )
    # both depth-2 paths are accepted; path via node 1 has likelihood 0.49*1.0 > 0.49*0.8
    best, accepted = accept_typical_tree(tokens, probs, tree.retrieve_indices, 0.09, 0.3)
    assert accepted == 2 and tree.retrieve_indices[best].tolist() == [0, 1, 3]
    probs[1] = torch.tensor([0.0, 0.0, 0.97, 0.03])  # token 3 now atypical after node 1
    best, accepted = accept_typical_tree(tokens, probs, tree.retrieve_indices, 0.09, 0.3)
    assert accepted == 2 and tree.retrieve_indices[best].tolist() == [0, 2, 4]
    probs[0] = torch.tensor([0.94, 0.03, 0.03, 0.0])  # neither depth-1 token is typical
    assert accept_typical_tree(tokens, probs, tree.retrieve_indices, 0.09, 0.3) == (0, 0)
