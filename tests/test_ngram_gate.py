"""Prompt lookup's cost-aware drafting policy (tools.engine.prompt_lookup.DraftGate): draft lengths
from this machine's pass costs and the expected acceptance, none when a plain step is cheaper; the
output stays the baseline's (greedy) whatever the gate decides."""

from __future__ import annotations

from functools import lru_cache

import pytest
import torch
from conftest import make_tiny_model

from tools.bench.machine_cost import CPU_FALLBACK_CURVE, MachineCost
from tools.bench.sizing import size_params
from tools.engine import autoregressive, prompt_lookup
from tools.engine.params import ACCEPTANCE_PRIOR, PromptLookupParams
from tools.engine.prompt_lookup import DraftGate
from tools.engine.types import GenerationSettings
from tools.errors import ParameterError

FLAT = [1.0] * 40
STEEP = [1.0, 3.0, 3.2, 3.4, 3.6, 3.8, 4.0, 4.2, 4.4, 4.6, 4.8, 5.0]


@lru_cache(maxsize=None)
def bigram_model():
    """A tiny model whose next token depends on the current token only: its output cycles, so prompt
    lookup finds long accepted drafts."""
    model = make_tiny_model("qwen2", seed=0)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
    return model


def test_flat_costs_draft_the_longest_and_steep_costs_decline():
    gate = DraftGate(PromptLookupParams(pass_costs=FLAT))
    assert gate.length(3, 10) == 10
    steep = DraftGate(PromptLookupParams(pass_costs=STEEP, acceptance_prior=[0.3, 0.5, 0.6]))
    assert steep.length(1, 10) == 0 and steep.declined == 1
    sure = DraftGate(PromptLookupParams(pass_costs=STEEP, acceptance_prior=[0.3, 0.5, 0.95]))
    assert sure.length(3, 10) == 10  # (1 - .95^11) / .05 = 8.6 tokens for a pass costing 4.8


def test_the_run_s_own_outcomes_move_the_acceptance():
    gate = DraftGate(PromptLookupParams(pass_costs=STEEP))
    prior = gate.acceptance(3)
    assert prior == pytest.approx(ACCEPTANCE_PRIOR[2])
    for _ in range(20):
        gate.update(3, 10, 10)  # every draft kept whole
    assert gate.acceptance(3) > 0.95 and gate.length(3, 10) == 10
    for _ in range(40):
        gate.update(2, 10, 0)  # every draft of a 2-token match rejected at once
    assert gate.acceptance(2) < 0.1 and gate.length(2, 10) == 0
    assert gate.acceptance(5) == pytest.approx(ACCEPTANCE_PRIOR[4])
    assert gate.acceptance(12) == pytest.approx(ACCEPTANCE_PRIOR[-1])  # longer matches use the last prior


def test_costs_past_the_curve_follow_its_last_slope():
    gate = DraftGate(PromptLookupParams(pass_costs=[2.0, 3.0, 4.0]))
    assert gate.cost(1) == 1.0 and gate.cost(3) == 2.0 and gate.cost(5) == 3.0


@pytest.mark.parametrize("costs", [FLAT, STEEP, [1.0, 1.1, 1.2, 1.5, 2.0, 3.0]])
def test_greedy_output_is_the_baseline_s_whatever_the_gate_decides(costs):
    model = bigram_model()
    prompt = [3, 17, 5, 9, 22, 3, 17, 5, 9, 22, 3, 17]
    settings = GenerationSettings(max_new_tokens=40)
    base = autoregressive.generate(model, prompt, settings).output_ids
    got = prompt_lookup.generate(model, prompt, settings, PromptLookupParams(pass_costs=costs))
    assert got.output_ids == base
    if costs is FLAT:
        assert got.tokens_drafted > 0 and got.extra["declined_drafts"] == 0


def test_a_gate_that_declines_everything_is_plain_decoding():
    model = bigram_model()
    prompt = [3, 17, 5, 9, 22, 3, 17, 5, 9, 22, 3, 17]
    settings = GenerationSettings(max_new_tokens=20)
    params = PromptLookupParams(pass_costs=[1.0, 50.0], acceptance_prior=[0.0])
    got = prompt_lookup.generate(model, prompt, settings, params)
    assert got.tokens_drafted == 0 and got.extra["declined_drafts"] > 0
    assert got.output_ids == autoregressive.generate(model, prompt, settings).output_ids


def test_bad_policy_values_are_refused():
    with pytest.raises(ParameterError, match="pass_costs"):
        PromptLookupParams(pass_costs=[1.0, -2.0]).check()
    with pytest.raises(ParameterError, match="acceptance_prior"):
        PromptLookupParams(acceptance_prior=[1.5]).check()


def test_sizing_sets_the_pass_costs_from_the_curve():
    machine = MachineCost("cpu", "test cpu", dict(CPU_FALLBACK_CURVE), "a test curve")
    sizing = size_params("ngram", machine)
    costs = sizing.params["pass_costs"]
    assert costs[0] == 1.0 and len(costs) == sizing.params["max_draft_tokens"] + 1
    assert sizing.fields["pass_costs"].source == "sized"
    given = size_params("ngram", machine, given={"pass_costs": [1.0, 1.5]})
    assert given.params["pass_costs"] == [1.0, 1.5]


def test_a_match_is_measured_backwards_up_to_the_long_match_cap():
    from tools.engine.prompt_lookup import LONG_MATCH, match_candidates, matched_length

    passage = list(range(10, 30))
    text = torch.tensor([1, 2] + passage + [3] + passage[:12])  # copying the passage: the last 12 tokens recur
    n, drafts = match_candidates(text, PromptLookupParams(num_candidates=1))
    assert n == LONG_MATCH and drafts == [passage[12:] + [3, 10]]
    short = torch.tensor([5, 6, 7, 8, 1, 6, 7])  # only "6 7" recurs
    assert match_candidates(short, PromptLookupParams(num_candidates=1)) == (2, [[8, 1, 6, 7]])
    assert matched_length(torch.tensor([4, 4, 4]), 1, 1) == 1
