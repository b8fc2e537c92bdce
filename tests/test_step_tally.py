"""StepTally: the per-step counters the drafting decoders share."""

from __future__ import annotations

from tools.engine.types import StepTally


def test_counts_steps_guesses_and_positions():
    t = StepTally()
    t.record(2, [1, 2, 3, 1, 2])  # a tree: two guesses at depths 1 and 2, one at 3; two kept
    t.record(0)  # a step with nothing to verify
    t.record(1, [1])
    assert (t.steps, t.drafted, t.accepted, t.accepted_per_step) == (3, 6, 3, [2, 0, 1])
    assert t.drafted_by_position == [3, 2, 1] and t.accepted_by_position == [2, 1, 0]
    r = t.result("x", [5, 6, 7, 8], (1.0, 1.5, 3.0), "length", {"k": 1})
    assert (r.prefill_s, r.decode_s, r.target_forwards, r.tokens_drafted, r.tokens_accepted) == (0.5, 1.5, 4, 6, 3)
    assert r.acceptance_rate == 0.5 and r.extra == {"k": 1}


def test_fixed_width_positions_stay_that_wide():
    t = StepTally(positions=4)
    t.record(1, range(1, 3))
    assert t.drafted_by_position == [1, 1, 0, 0] and t.accepted_by_position == [1, 0, 0, 0]
