"""The cost gate of the tree methods (Medusa, EAGLE): a step is plain (the root alone, no heads run)
while the recent tree steps gave fewer tokens than their passes and the heads cost, and never a tree
step where even a fully accepted one could not gain enough (a one-node tree in float32 on a 2-core AVX2
CPU: 2 tokens for a pass costing 1.8x one). The output stays the baseline's whatever the gate decides."""

from __future__ import annotations

import pytest
import torch
from conftest import VOCAB, make_tiny_model

from tools.bench.machine_cost import MachineCost
from tools.bench.sizing import size_params
from tools.engine import autoregressive, eagle, medusa
from tools.engine.eagle import EagleHead, config_for
from tools.engine.gate import PROBE_EVERY, TRIAL_STEPS, StepGate, weights_ratio
from tools.engine.medusa import MedusaHeads
from tools.engine.params import EagleParams, MedusaParams
from tools.engine.types import GenerationSettings

FLAT = [1.0] * 40
MIXED = [1.0, 1.3, 1.45, 1.6, 1.75, 1.9, 2.05, 2.2, 2.35, 2.5, 2.65]  # worth trying; poor heads then lose
STEEP = [1.0, 1.8]  # this CPU in float32: a one-node tree can never gain 25%
PROMPTS = [[1, 5, 9, 2, 7], [3, 3, 3, 3, 8, 1, 4, 4, 4, 2, 6]]
# where this machine's stored float32 curve puts a pass over 1..17 tokens (seconds)
CPU_F32 = {1: 0.5697, 2: 1.0253, 4: 1.6457, 8: 1.7828, 12: 1.8571, 16: 1.9259}


@pytest.fixture(scope="module")
def target():
    return make_tiny_model("qwen2", layers=8, seed=0)  # deep enough that a head costs what it would: a fraction


def eagle_head(model) -> EagleHead:
    torch.manual_seed(3)
    head = EagleHead(config_for(model.config, VOCAB, 48), torch.arange(VOCAB))
    head.init_identity()
    return head.eval()


def medusa_heads(model) -> MedusaHeads:
    torch.manual_seed(4)
    heads = MedusaHeads(model.config.hidden_size, VOCAB, num_heads=3, num_layers=1)
    for p in heads.parameters():
        torch.nn.init.normal_(p, std=0.2)
    return heads.eval()


def run(method: str, model, prompt, settings, costs, **params):
    if method == "eagle":
        return eagle.generate(model, eagle_head(model), prompt, settings,
                              EagleParams(pass_costs=costs, **{"depth": 3, "topk": 2, "tree_nodes": 5, **params}))
    return medusa.generate(model, medusa_heads(model), prompt, settings,
                           MedusaParams(pass_costs=costs, **{"tree": "cpu8", **params}))


@pytest.mark.parametrize("method", ["eagle", "medusa"])
@pytest.mark.parametrize("costs", [FLAT, MIXED, STEEP, None], ids=["flat", "mixed", "steep", "no-gate"])
def test_greedy_output_is_the_baseline_s_whatever_the_gate_decides(target, method, costs):
    settings = GenerationSettings(max_new_tokens=60)
    for prompt in PROMPTS:
        got = run(method, target, prompt, settings, costs)
        assert got.output_ids == autoregressive.generate(target, prompt, settings).output_ids
        declined = got.extra["declined_steps"]
        assert got.extra["pass_costs"] == costs
        if costs is STEEP:  # never worth a tree: every step plain, nothing drafted
            assert got.tokens_drafted == 0 and declined == got.steps - 1  # the last step is plain anyway
            assert got.target_forwards == got.new_tokens
        elif costs is MIXED:  # the trial's tree steps, then plain while the poor heads do not pay, probes
            assert got.tokens_drafted > 0 and declined > 0
        elif costs is None:
            assert declined == 0
        else:  # free passes: tree steps, declined only where a tiny model's heads cost more than they give
            assert got.tokens_drafted > 0


def test_a_declined_eagle_step_samples_as_plain_decoding_does(target):
    """Declined steps draw from the target's own distribution with the same generator calls as the
    baseline, so a gate that declines everything reproduces the baseline's sample token for token."""
    for seed in range(5):
        settings = GenerationSettings(max_new_tokens=30, temperature=1.3, seed=seed)
        base = autoregressive.generate(target, PROMPTS[0], settings).output_ids
        assert run("eagle", target, PROMPTS[0], settings, STEEP).output_ids == base


def test_the_head_reads_the_features_of_the_plain_steps_when_it_drafts_again(target):
    """After plain steps the head catches up over every position it has not read (one row each)."""
    settings = GenerationSettings(max_new_tokens=50)
    backend = eagle.as_backend(target)
    step = eagle.EagleStep(backend, eagle_head(target), settings,
                           EagleParams(depth=3, topk=2, tree_nodes=5, pass_costs=MIXED))
    result = eagle.decode(backend, PROMPTS[1], settings, step, "eagle")
    assert result.extra["declined_steps"] > 0 and step.gate.full > TRIAL_STEPS  # a probe after the trial
    assert step.dk.shape[2] == step.read and step.feats.shape[0] == len(step.tokens) - 1 - step.read
    assert backend.cache_length(step.cache) == len(step.tokens) - 1


def test_the_heads_work_counts_in_the_step_s_cost(target):
    """A tree step that could gain 25% on the pass alone is not worth it once the heads' own reads are counted."""
    assert StepGate([1.0, 1.5], best_tokens=2, step_tokens=2).worth  # 2 tokens for 1.5
    assert not StepGate([1.0, 1.5], best_tokens=2, step_tokens=2, overhead=0.2).worth
    heads = medusa_heads(target)
    shared = heads.vocab_size * heads.hidden_size + sum(p.numel() for p in heads.parameters())
    assert medusa.heads_overhead(heads, eagle.as_backend(target)) == pytest.approx(weights_ratio(shared, target))
    assert 0 < weights_ratio(shared, target) < 1 and weights_ratio(5, None) == 0.0


@pytest.mark.parametrize("method", ["medusa", "eagle"])
def test_sizing_gives_the_tree_methods_their_pass_costs(method):
    machine = MachineCost("cpu", "AMD EPYC (2 cores)", CPU_F32, "stored")
    sizing = size_params(method, machine)
    costs = sizing.params["pass_costs"]
    assert costs == [1.0, 1.8]  # the sized one-node tree verifies 2 tokens
    assert "plain" in sizing.reasons()["pass_costs"]
    given = size_params(method, machine, given={"pass_costs": [1.0, 1.1]})
    assert given.params["pass_costs"] == [1.0, 1.1]


def test_a_prior_from_the_heads_held_out_acceptance_stands_for_the_trial():
    costs = [1.0, 2.0, 2.05, 2.1, 2.15, 2.2, 2.25, 2.3, 2.35, 2.4, 2.45]
    poor = StepGate(costs, best_tokens=6, step_tokens=11, prior_tokens=1.5)  # 1.5 tokens for a 2.45x pass
    decisions = [poor.take_full() for _ in range(3 * PROBE_EVERY)]
    assert decisions.count(True) == 2 and decisions[PROBE_EVERY - 1] and decisions[-1]  # probes only, no trial
    assert StepGate(costs, best_tokens=6, step_tokens=11, prior_tokens=3.0).take_full()  # heads that pay
    assert eagle.expected_tokens(type("H", (), {"training_info": {"held_out": {"top1_by_depth": [0.5, 0.4]}}})(),
                                 3) == pytest.approx(1 + 0.5 + 0.2 + 0.08)
    assert eagle.expected_tokens(type("H", (), {})(), 3) is None  # an upstream head has no such figures


def test_eagle_with_a_poor_head_s_prior_only_probes_and_keeps_the_output(target):
    settings = GenerationSettings(max_new_tokens=50)
    head = eagle_head(target)
    head.training_info = {"held_out": {"top1_by_depth": [0.05]}}
    got = eagle.generate(target, head, PROMPTS[1], settings,
                         EagleParams(depth=3, topk=2, tree_nodes=5, pass_costs=MIXED))
    assert got.output_ids == autoregressive.generate(target, PROMPTS[1], settings).output_ids
    full_steps = got.steps - got.extra["declined_steps"] - 1  # the last step is plain anyway
    assert 0 < full_steps <= got.steps // PROBE_EVERY + 1  # the probes, no trial


def test_medusa_with_its_fitted_tree_starts_from_what_that_tree_gave_on_the_fit_half(target):
    settings = GenerationSettings(max_new_tokens=50)
    heads = medusa_heads(target)
    heads.tree_choices = [[0], [1], [0, 0]]
    heads.tree_tokens = 1.05  # the fit half's tokens per step of that tree: not worth a MIXED pass
    got = medusa.generate(target, heads, PROMPTS[1], settings, MedusaParams(pass_costs=MIXED, tree="auto"))
    assert got.output_ids == autoregressive.generate(target, PROMPTS[1], settings).output_ids
    full_steps = got.steps - got.extra["declined_steps"] - 1
    assert 0 < full_steps <= got.steps // PROBE_EVERY + 1  # the probes, no trial
    other = medusa.generate(target, heads, PROMPTS[1], settings, MedusaParams(pass_costs=MIXED, tree="cpu8"))
    assert other.steps - other.extra["declined_steps"] - 1 >= TRIAL_STEPS  # another tree: no prior, a trial
    # the sizing's cut of the fitted tree (where passes cost more): a part of it, so its figure bounds the part's
    part = medusa.generate(target, heads, PROMPTS[1], settings, MedusaParams(pass_costs=MIXED, tree=[[0], [0, 0]]))
    assert part.output_ids == got.output_ids
    assert 0 < part.steps - part.extra["declined_steps"] - 1 <= part.steps // PROBE_EVERY + 1  # no trial either


def test_a_part_of_the_fitted_tree_takes_its_figure_as_a_bound_and_another_tree_none():
    heads = type("H", (), {"tree_choices": [[0], [1], [0, 0]], "tree_tokens": 1.48})()
    assert medusa.fitted_prior(heads, [[0], [1], [0, 0]]) == medusa.fitted_prior(heads, [[0], [0, 0]]) == 1.48
    assert medusa.fitted_prior(heads, [[0], [0, 1]]) is None  # a node the fitted tree does not have
    assert medusa.fitted_prior(type("H", (), {"tree_choices": None, "tree_tokens": None})(), [[0]]) is None
