"""Short answers (agent.brains.format): a guidance answer names what was measured in one readable line."""

from __future__ import annotations

from agent.brains.format import format_result
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
