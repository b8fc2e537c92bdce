"""Medusa with prompt lookup's branch merged into its tree: greedy output stays the target's, the branch's
tokens are kept where the output repeats earlier text, a step the gate declines verifies the branch alone,
and the merged tree buffers are the tree plus one path."""

from __future__ import annotations

import pytest
import torch

from conftest import make_tiny_model
from test_medusa import PROMPTS, random_heads
from tools.engine import autoregressive
from tools.engine.lookup_branch import graft_paths, path_children
from tools.engine.medusa import MedusaParams, build_tree_buffers, generate
from tools.engine.types import GenerationSettings

REPEATS = [4, 7, 4, 7, 4, 7, 4]


@pytest.fixture(scope="module", params=["qwen2", "llama"])
def target(request):
    return make_tiny_model(request.param, layers=2, seed=0)


@pytest.mark.parametrize("tree", ["chain3", "cpu8", [[0], [1], [2], [0, 0], [2, 1]]])
def test_greedy_output_is_the_baseline_with_the_branch(target, tree):
    settings, looked_up = GenerationSettings(max_new_tokens=32), 0
    for prompt in PROMPTS + [REPEATS]:
        base = autoregressive.generate(target, prompt, settings).output_ids
        for lookup in (0, 3, 10):
            got = generate(target, random_heads(), prompt, settings, MedusaParams(tree=tree, medusa_lookup=lookup))
            assert got.output_ids == base
            assert got.extra["medusa_lookup"] == lookup
            assert got.tokens_accepted == sum(got.accepted_per_step)
            assert len(got.output_ids) == 1 + got.steps + got.tokens_accepted
            if lookup == 0:
                assert got.extra["lookup_steps"] == 0
            looked_up += got.extra["looked_up"]
    assert looked_up > 0


def test_steps_the_gate_declines_verify_the_branch_alone(target):
    """Pass costs so steep that no heads' tree is worth a pass: every step is declined, and the branch, cut
    to what a flat start of the curve pays for, still gives tokens; the output is the baseline's."""
    costs = [1.0, 1.0, 1.0, 1.0, 9.0, 9.0, 9.0, 9.0, 9.0, 9.0]
    settings = GenerationSettings(max_new_tokens=40)
    total = 0
    for prompt in PROMPTS + [REPEATS]:
        base = autoregressive.generate(target, prompt, settings).output_ids
        got = generate(target, random_heads(), prompt, settings,
                       MedusaParams(tree="mc_sim_7b_63", pass_costs=costs))
        assert got.output_ids == base
        assert got.extra["declined_steps"] >= got.steps - 1
        total += got.extra["looked_up"]
    assert total > 0


def test_typical_acceptance_runs_with_the_branch(target):
    settings = GenerationSettings(max_new_tokens=24, temperature=0.8, seed=3)
    first = generate(target, random_heads(), REPEATS, settings, MedusaParams(tree="cpu8"))
    again = generate(target, random_heads(), REPEATS, settings, MedusaParams(tree="cpu8"))
    assert first.output_ids == again.output_ids and first.extra["lossy"] is True


def test_a_branch_merges_into_the_tree_buffers_as_one_more_path():
    tree = build_tree_buffers([[0], [1], [0, 0]])  # nodes: root, a=[0], b=[1], c=[0, 0]
    tokens = [50, 10, 11, 20]
    children = path_children(tree.retrieve_indices, tree.n)
    assert [sorted(c) for c in children] == [[1, 2], [3], [], []]
    visible, positions, retrieve, new = graft_paths(tree.visible, tree.position_ids.tolist(), tree.retrieve_indices,
                                                    tokens, children, [10, 21, 22], "cpu")
    assert new == [21, 22]
    assert positions.tolist() == [0, 1, 1, 2, 2, 3]
    assert retrieve.tolist()[-1] == [0, 1, 4, 5] and retrieve.shape == (3, 4)
    assert visible[4].tolist() == [True, True, False, False, True, False]
    assert visible[5].tolist() == [True, True, False, False, True, True]
    assert torch.equal(visible[:4, :4], tree.visible)
    same = graft_paths(tree.visible, tree.position_ids.tolist(), tree.retrieve_indices, tokens, children, [10, 20],
                       "cpu")
    assert same[3] == [] and same[2] is tree.retrieve_indices


@pytest.mark.parametrize("kind", ["qwen2", "llama"])
def test_the_plain_step_the_gate_times_verifies_no_branch(kind, monkeypatch):
    """Every step is slow enough to time and the output repeats its prompt: the step the gate declines to time a plain
    one holds no branch, so the gate gets its plain step's time although the branch would pay on every step."""
    from test_lookahead import bigram_model
    from tools.engine.backend import as_backend
    from tools.engine.loop import decode
    from tools.engine.medusa import MedusaStep

    monkeypatch.setattr("tools.engine.gate.TIMED_STEP_S", 0.0)
    settings = GenerationSettings(max_new_tokens=40)
    target = bigram_model(kind)
    prompt = autoregressive.generate(target, [5], settings).output_ids[-12:] * 3
    backend = as_backend(target)
    heads = random_heads()
    if heads.shared_projection:
        heads.attach(backend.model)
    step = MedusaStep(backend, heads, settings, MedusaParams(tree="cpu8", pass_costs=[1.0] * 40))
    got = decode(backend, prompt, settings, step, "medusa")
    assert got.output_ids == autoregressive.generate(target, prompt, settings).output_ids
    assert step.gate.plain_s is not None
