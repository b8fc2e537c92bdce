"""Short answers (agent.replies): a guidance answer names what was measured in one readable line."""

from __future__ import annotations

from agent.replies import format_result
from tools.agent_tools.registry import ToolResult


def guidance(measured: list[dict]) -> ToolResult:
    content = {"method": "draft", "target": "qwen2.5-coder-1.5b-instruct", "hardware": {"name": "a 2-core CPU"},
               "suggested_params": {"k": 3, "k_max": 9, "pass_costs": [1.0, 1.01]}, "source": "sized here",
               "measured": measured,
               "measured_best": "no stored runs of this method on this target: the suggestion is not measured yet"}
    return ToolResult(name="guidance", content=content)


def test_the_measured_line_shows_the_speedup_the_setting_and_the_run():
    text = format_result(guidance([{"params": {"k": 3, "pass_costs": [1.0, 1.01]}, "median_speedup": 2.82,
                                    "runs": 1, "run_ids": ["99787923"]}]))
    line = next(li for li in text.splitlines() if li.startswith("Measured here"))
    assert line == "Measured here: 2.82x median over 1 run(s) with k=3 (run 99787923)."
    assert len(text.splitlines()) <= 6


def test_without_runs_it_says_not_measured():
    assert "not measured yet" in format_result(guidance([]))


def test_a_draft_sized_to_a_measured_curve_says_what_it_should_give_here():
    result = guidance([])
    result.content["expected"] = {"low": 1.69, "high": 2.51, "acceptance": [0.8, 0.95], "draft_cost": 0.237,
                                  "measured_curve": True}
    text = format_result(result)
    assert ("Expected here: about 1.69x where 80% of drafted tokens are accepted, up to 2.51x at 95% (this machine's "
            "pass costs; a guess until a run measures it).") in text.splitlines()
    assert len(text.splitlines()) <= 6
    result.content["expected"]["measured_curve"] = False  # the stand-in curve is no figure of this machine
    assert "Expected here" not in format_result(result)


def test_the_expected_range_comes_from_the_pass_costs_and_the_draft_cost():
    from tools.bench.machine_cost import MachineCost
    from tools.bench.sizing import expected_range, expected_speedup, size_params

    curve = {1: 1.0, 2: 1.04, 4: 1.05, 8: 1.08, 16: 1.2}
    machine = MachineCost("cpu", "test cpu", curve, "a test curve")
    machine.draft_ratio = 0.24
    sizing = size_params("draft", machine)
    k, k_max = sizing.params["k"], sizing.params["k_max"]
    assert sizing.expected == expected_range(machine, sizing.params)
    assert sizing.expected["low"] == round(expected_speedup(k, 0.8, 0.24, curve), 2)
    assert sizing.expected["high"] == round(expected_speedup(k_max, 0.95, 0.24, curve), 2)
    assert 1.0 < sizing.expected["low"] < sizing.expected["high"]
    assert size_params("lookahead", machine).expected is None


def test_the_measuring_step_does_not_promise_a_minute():
    result = guidance([])
    result.content["next_step"] = {"tool": "measure_cost_curve", "input": {"target": "qwen2.5-coder-1.5b-instruct"}}
    line = format_result(result).splitlines()[-1]
    assert line.startswith("Next: /measure sizes it to this machine")
    assert "a few minutes on a small CPU" in line and "a minute" not in line  # the 1.5B target takes minutes there
