"""The cost gates (tools.engine.gate): draft-model decoding's draft length (DraftModelGate: the length
this machine's pass costs and the expected acceptance pay for, a plain step with the draft not run when
none does, a probe now and then) and lookahead's full steps (StepGate: plain steps while its own recent
full steps gave fewer tokens than they cost). The output stays the baseline's (greedy) whatever they decide."""

from __future__ import annotations

import pytest
from conftest import make_tiny_model

from tools.bench.machine_cost import CPU_FALLBACK_CURVE, MachineCost
from tools.bench.sizing import size_params
from tools.engine import autoregressive, lookahead, speculative
from tools.engine.gate import (CALIBRATE_EVERY, PROBE_EVERY, PROBE_LONGEST, PROBE_MIN_GAIN, TIMED_STEP_S,
                               TRIAL_DRAFTS, TRIAL_STEPS, DraftModelGate, StepGate, pass_cost)
from tools.engine.params import DRAFT_ACCEPTANCE_PRIOR, DraftParams, LookaheadParams
from tools.engine.types import GenerationSettings
from tools.errors import ParameterError

FLAT = [1.0] * 20
STEEP = [1.0, 1.9, 2.6, 3.3, 4.0, 4.7, 5.4, 6.1, 6.8]  # a 2-token pass at 1.9x one: drafting rarely pays
PROMPT = [3, 17, 5, 9, 22]


def after_trial(gate: DraftModelGate) -> DraftModelGate:
    gate.drafts = TRIAL_DRAFTS
    return gate


def test_flat_costs_draft_the_longest_and_steep_costs_decline():
    assert after_trial(DraftModelGate(FLAT, 0.01, 0.8)).length(8) == 8
    assert after_trial(DraftModelGate(FLAT, 0.1, 0.8)).length(8) == 6  # a draft token costs a tenth: 6 pay at 80%
    steep = DraftModelGate(STEEP, 0.3, 0.8)
    assert steep.length(8) == 0 and steep.declined == 1
    assert DraftModelGate(STEEP, 0.3, 0.8).length(0) == 0  # no room: nothing to decide


def test_the_run_s_own_outcomes_move_the_acceptance():
    gate = after_trial(DraftModelGate([1.0, 1.5, 1.8, 2.1, 2.4, 2.7], 0.2, 0.8))
    assert gate.acceptance() == pytest.approx(0.8)
    start = gate.length(5)
    for _ in range(30):
        gate.update(5, 5)  # every draft kept whole
    assert gate.acceptance() > 0.95 and gate.length(5) >= start
    gate = after_trial(DraftModelGate([1.0, 1.5, 1.8, 2.1, 2.4, 2.7], 0.2, 0.8))
    for _ in range(30):
        gate.update(5, 0)  # every draft rejected at once
    assert gate.acceptance() < 0.2 and gate.length(5) == 0


def test_declining_probes_now_and_then_unless_no_draft_can_pay():
    # a 2-token pass at 1.9x, then cheap: at 30% acceptance nothing pays, drafts always kept would (9 tokens for 5)
    gate = DraftModelGate([1.0, 1.9, 2.0, 2.1, 2.2, 2.3, 2.4, 2.5, 2.6], 0.3, 0.3)
    trial = [gate.length(8) for _ in range(TRIAL_DRAFTS)]
    assert trial == [8] * TRIAL_DRAFTS and gate.declined == 0  # the upside is worth learning this text first
    for _ in range(TRIAL_DRAFTS):
        gate.update(8, 2)  # ... and it is poor
    lengths = [gate.length(8) for _ in range(3 * PROBE_EVERY)]
    assert lengths.count(0) == 3 * PROBE_EVERY - 3 and gate.declined == 3 * PROBE_EVERY - 3
    assert all(n > 0 for n in lengths[PROBE_EVERY - 1::PROBE_EVERY])
    hopeless = DraftModelGate([1.0, 3.0, 5.0, 7.0], 0.5, 0.9)  # even drafts always kept cost more than they give
    assert not hopeless.can_pay(8) and all(hopeless.length(8) == 0 for _ in range(3 * PROBE_EVERY))
    # this CPU on llama.cpp: drafts always kept would gain 9-15%, which would not pay for the draft's catch-up
    small = DraftModelGate([1.0, 1.594, 1.871, 2.147], 0.441, 0.5)
    assert small.can_pay(3) and not small.can_pay(3, PROBE_MIN_GAIN)
    assert all(small.length(3) == 0 for _ in range(3 * PROBE_EVERY))


def test_costs_past_the_curve_follow_its_last_slope():
    assert pass_cost([2.0, 3.0, 4.0], 1) == 1.0 and pass_cost([2.0, 3.0, 4.0], 5) == 3.0
    assert DraftModelGate([1.0, 2.0], 0.5, 0.8).cost(3) == pytest.approx(1.5 + 4.0)


@pytest.mark.parametrize("costs, draft_cost", [(FLAT, 0.1), (STEEP, 0.3), ([1.0, 1.1, 1.2, 1.5, 2.0, 3.0], 0.2)])
def test_greedy_output_is_the_baseline_s_whatever_the_gate_decides(tiny_qwen, costs, draft_cost):
    draft = make_tiny_model("qwen2", layers=1, seed=0)  # the target's first layer's seed: partly accepted
    settings = GenerationSettings(max_new_tokens=40)
    base = autoregressive.generate(tiny_qwen, PROMPT, settings).output_ids
    got = speculative.generate(tiny_qwen, draft, PROMPT, settings, k=4, adaptive_k=True, k_max=8,
                               pass_costs=costs, draft_cost=draft_cost)
    assert got.output_ids == base
    assert got.extra["pass_costs"] == costs and got.extra["draft_cost"] == draft_cost
    if costs is FLAT:
        assert got.tokens_drafted > 0  # its first drafts learn the acceptance (this pair's is too low to go on)


def test_a_gate_that_declines_everything_is_plain_decoding_and_never_runs_the_draft(tiny_qwen):
    decoder = speculative.SpeculativeDecoder(tiny_qwen, tiny_qwen, k=4, adaptive_k=True, pass_costs=[1.0, 50.0],
                                             draft_cost=1.0)
    settings = GenerationSettings(max_new_tokens=20)
    got = decoder.run(PROMPT, settings)
    assert got.output_ids == autoregressive.generate(tiny_qwen, PROMPT, settings).output_ids
    assert got.tokens_drafted == 0 and got.steps == 19
    assert got.extra["declined_steps"] == 18  # the last step has no room for a draft: nothing to decline
    assert decoder._drafter.length == 0  # the draft's prefill was never paid


def test_without_pass_costs_every_step_drafts():
    assert speculative.cost_gate(None, 0.3) is None
    assert speculative.cost_gate([1.0, 1.2], None).draft_cost == pytest.approx(0.25)
    assert speculative.cost_gate([1.0, 1.2], 0.3).prior == DRAFT_ACCEPTANCE_PRIOR


def test_bad_policy_values_are_refused():
    with pytest.raises(ValueError):
        DraftParams(pass_costs=[1.0, -2.0])
    with pytest.raises(ValueError):
        DraftParams(draft_cost=0)
    with pytest.raises(ParameterError, match="positive"):
        speculative.cost_gate([1.0, -1.0], 0.3)


def test_sizing_sets_the_pass_costs_and_the_draft_cost():
    machine = MachineCost("cpu", "test cpu", dict(CPU_FALLBACK_CURVE), "a test curve")
    machine.draft_ratio, machine.draft_source = 0.3, "measured in a test"
    sizing = size_params("draft", machine)
    costs = sizing.params["pass_costs"]
    # the chain and the target's token, and the draft tree's leaves beside them
    assert costs[0] == 1.0 and len(costs) == sizing.params["k_max"] + 1 + DraftParams().draft_tree
    assert sizing.params["draft_cost"] == 0.3 and sizing.fields["draft_cost"].source == "sized"
    given = size_params("draft", machine, given={"pass_costs": [1.0, 1.5]})
    assert given.params["pass_costs"] == [1.0, 1.5] and given.fields["pass_costs"].source == "given"
    DraftParams(**sizing.params)  # what the sizing gives validates


# ---------------------------------------------------------------------------- lookahead's full steps
def test_a_step_gate_tries_then_declines_what_does_not_pay_and_probes():
    gate = StepGate([1.0, 2.0, 2.5, 3.0])
    assert all(gate.take_full() for _ in range(TRIAL_STEPS))
    for _ in range(TRIAL_STEPS):
        gate.record(1, 4)  # one token for a pass costing 3
    taken = [gate.take_full() for _ in range(7 * PROBE_EVERY)]  # probes that do not pay: waits of 16, 32, 64, 64
    assert [i + 1 for i, t in enumerate(taken) if t] == [PROBE_EVERY, 3 * PROBE_EVERY, 7 * PROBE_EVERY]
    assert gate.declined == 7 * PROBE_EVERY - 3 and gate.wait == PROBE_LONGEST
    for _ in range(30):
        gate.record(4, 4)  # the text starts repeating: full steps pay again, and probes are frequent again later
    assert gate.take_full() and gate.wait == PROBE_EVERY
    paying = StepGate([1.0, 1.1, 1.2, 1.3])
    for _ in range(TRIAL_STEPS):
        paying.record(3, 4)
    assert all(paying.take_full() for _ in range(PROBE_EVERY)) and paying.declined == 0


class StepClock:
    """A clock the test moves on by each step's seconds (full or plain) as a decoding loop would spend them."""

    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def clocked_run(gate: StepGate, clock: StepClock, steps: int, full_s: float, plain_s: float,
                tokens: int = 2, pass_tokens: int = 4) -> list[bool]:
    decisions = []
    for _ in range(steps):
        full = gate.take_full()
        clock.now += full_s if full else plain_s
        if full:
            gate.record(tokens, pass_tokens)
        decisions.append(full)
    return decisions


def test_a_timed_step_gate_prices_full_steps_by_what_they_measured():
    clock = StepClock()  # the model says a 4-token pass costs 1.3 one-token passes; they measure 3x a plain step
    gate = StepGate([1.0, 1.1, 1.2, 1.3], clock=clock)
    decisions = clocked_run(gate, clock, 4 * PROBE_EVERY, full_s=0.6, plain_s=0.2)
    assert decisions[:3] == [True, True, False]  # the third step is plain: the one the full ones are priced against
    assert gate.plain_s == pytest.approx(0.2) and gate.scale() == pytest.approx(0.6 / 1.3 / 0.2)
    later = decisions[TRIAL_STEPS + 1:]
    assert later.count(True) <= 3  # 2 tokens for 3 plain steps' time: declined, probes only
    untimed = StepGate([1.0, 1.1, 1.2, 1.3], clock=StepClock())  # the model alone: 2 tokens for 1.3 pays
    assert all(clocked_run(untimed, StepClock(), 4 * PROBE_EVERY, full_s=0.6, plain_s=0.2))


def test_a_timed_step_gate_keeps_cheap_full_steps_and_retimes_a_plain_one_now_and_then():
    clock = StepClock()  # the model says 2.5; they measure 1.25 plain steps: 2 tokens for 1.25 pays
    gate = StepGate([1.0, 1.5, 2.0, 2.5], clock=clock)
    decisions = clocked_run(gate, clock, TRIAL_STEPS + 3 * CALIBRATE_EVERY, full_s=0.25, plain_s=0.2)
    plain = [i for i, full in enumerate(decisions) if not full]
    assert plain[0] == 2 and len(plain) == 4  # the first timing and one in every CALIBRATE_EVERY full steps
    assert gate.scale() == pytest.approx(0.25 / 2.5 / 0.2, rel=1e-6)


def test_a_step_gate_leaves_fast_steps_to_its_cost_model():
    clock = StepClock()  # steps of a tiny model or a GPU: their clocks are noise, nothing is timed
    gate = StepGate([1.0, 1.1, 1.2, 1.3], clock=clock)
    fast = TIMED_STEP_S / 10
    assert all(clocked_run(gate, clock, 3 * PROBE_EVERY, full_s=fast * 3, plain_s=fast))
    assert gate.scale() == 1.0 and gate.declined == 0


def test_a_step_gate_follows_a_text_that_changes():
    gate = StepGate([1.0, 2.0, 2.5, 3.0])
    for _ in range(20):
        gate.record(1, 4)
    assert not gate.take_full()
    for _ in range(8):
        gate.record(5, 4)  # the text starts repeating: full steps give 5 tokens for 3
    assert gate.take_full()


@pytest.mark.parametrize("costs", [FLAT, STEEP])
def test_lookahead_output_is_the_baseline_s_whatever_the_gate_decides(tiny_qwen, costs, monkeypatch):
    # the tiny model's steps are left to the cost model: on a loaded machine one can take over TIMED_STEP_S, and
    # the gate would then price them by their noisy clocks
    monkeypatch.setattr("tools.engine.gate.TIMED_STEP_S", float("inf"))
    settings = GenerationSettings(max_new_tokens=48)
    params = LookaheadParams(window=3, ngram=3, guess=2, prompt_lookup=1, pass_costs=costs)
    got = lookahead.generate(tiny_qwen, PROMPT, settings, params)
    assert got.output_ids == autoregressive.generate(tiny_qwen, PROMPT, settings).output_ids
    assert (got.extra["declined_steps"] > 0) == (costs is STEEP)
    assert got.extra["pass_costs"] == costs


def test_sizing_gives_lookahead_the_pass_costs_of_its_step():
    machine = MachineCost("cpu", "test cpu", dict(CPU_FALLBACK_CURVE), "a test curve")
    sizing = size_params("lookahead", machine)
    costs = sizing.params["pass_costs"]
    assert costs[0] == 1.0 and len(costs) == LookaheadParams(**sizing.params).tokens_per_step


def test_a_fixed_k_drafts_every_step_whatever_the_costs(tiny_qwen):
    settings = GenerationSettings(max_new_tokens=20)
    got = speculative.generate(tiny_qwen, tiny_qwen, PROMPT, settings, k=4, adaptive_k=False,
                               pass_costs=[1.0, 50.0], draft_cost=1.0)
    assert got.tokens_drafted > 0 and got.extra["declined_steps"] == 0


def test_a_run_says_how_many_steps_the_gate_kept_plain():
    from agent.render import gated_steps

    assert gated_steps({"method_extra": {"declined_steps": 0}, "steps": 10}) == ""
    text = gated_steps({"method_extra": {"declined_steps": 7}, "steps": 10})
    assert text.startswith("cost gate: 7 of 10 steps were plain")
    assert gated_steps({"method_extra": {"declined_drafts": 3}}).startswith("cost gate: 3 steps")


def test_a_full_step_that_could_not_gain_enough_even_when_all_is_accepted_is_never_taken():
    costs = [1.0, 1.594, 1.871]  # llama.cpp here: lookahead W=1, N=2, G=1 verifies 3 tokens for at most 2
    never = StepGate(costs, best_tokens=2, step_tokens=3)
    assert not any(never.take_full() for _ in range(3 * PROBE_EVERY)) and never.declined == 3 * PROBE_EVERY
    assert StepGate(costs + [2.0] * 10, best_tokens=11, step_tokens=13).take_full()  # with a 10-token draft: tried


@pytest.mark.parametrize("drafts", [0, 1])
def test_lookahead_sized_for_a_steep_curve_takes_no_full_step(tiny_qwen, drafts):
    """The gate prices the window alone: a prompt-lookup draft (verified on declined steps where it pays) does not
    make the window worth a trial."""
    settings = GenerationSettings(max_new_tokens=24)
    params = LookaheadParams(window=1, ngram=2, guess=1, prompt_lookup=drafts, pass_costs=[1.0, 1.594, 1.871])
    got = lookahead.generate(tiny_qwen, PROMPT, settings, params)
    assert got.output_ids == autoregressive.generate(tiny_qwen, PROMPT, settings).output_ids
    assert got.extra["declined_steps"] == got.steps - 1  # the last step is plain anyway
    if not drafts:
        assert got.tokens_drafted == 0


def test_lookahead_with_a_fitted_prior_that_cannot_pay_only_probes(tiny_qwen, monkeypatch):
    from tools.engine import params as params_module

    settings = GenerationSettings(max_new_tokens=50)
    costs = [1.0, 2.0, 2.05, 2.1, 2.15, 2.2, 2.25, 2.3, 2.35]  # 3 tokens could gain 25% over the 9-token pass
    params = LookaheadParams(window=3, ngram=3, guess=1, prompt_lookup=0, pass_costs=costs)
    assert params.step_prior is None or params.step_prior > 0
    monkeypatch.setitem(params_module.LOOKAHEAD_STEP_PRIOR, (3, 3, 1, 0), 1.2)  # 1.2 tokens for 2.35: never pays
    assert params.step_prior == 1.2 and LookaheadParams(window=3, ngram=3, guess=2).step_prior is None
    got = lookahead.generate(tiny_qwen, PROMPT, settings, params)
    assert got.output_ids == autoregressive.generate(tiny_qwen, PROMPT, settings).output_ids
    full = got.steps - got.extra["declined_steps"] - got.extra["warmup_steps"] - 1  # the last step is plain anyway
    assert 0 < full <= got.steps // PROBE_EVERY + 1  # the probes, no trial


def test_each_run_of_one_decoder_starts_the_gate_from_its_prior(tiny_qwen):
    decoder = speculative.SpeculativeDecoder(tiny_qwen, tiny_qwen, k=4, adaptive_k=True, pass_costs=[1.0, 50.0],
                                             draft_cost=1.0)
    settings = GenerationSettings(max_new_tokens=12)
    first, second = decoder.run(PROMPT, settings), decoder.run(PROMPT, settings)
    assert first.extra["declined_steps"] == second.extra["declined_steps"] == first.steps - 1
