"""The tool registry: one definition per tool, exported the same way everywhere; errors are results."""

from __future__ import annotations

import re

import json

import pytest
from pydantic import BaseModel, ConfigDict

from memory import Store
from tools.agent_tools import registry
from tools.errors import ParameterError
from tools.agent_tools.registry import ToolContext

PAPERS = {"2211.17192", "2302.01318", "2401.10774", "2402.02057", "2401.07851"}


@pytest.fixture
def store():
    with Store() as s:
        yield s


def stored_run(store, **overrides) -> str:
    record = {"method": "medusa", "target": "qwen2.5-coder-1.5b-instruct", "params": {"posterior_threshold": 0.09},
              "prompt": "def fib(n):", "new_tokens": 64, "wall_time_s": 4.0, "tokens_per_s": 16.0,
              "baseline_wall_time_s": 6.2, "baseline_tokens_per_s": 10.32, "speedup": 1.55, "acceptance_rate": 0.61,
              "matches_baseline": True, "hardware": {"name": "Test CPU (2 cores)"}, "dtype": "bfloat16"}
    record.update(overrides)
    return store.add_run(record)


def test_every_tool_has_a_strict_model_a_description_and_a_json_schema():
    tools = registry.load_tools()
    assert {"run_method", "lookup_runs", "check_deps", "install_packages", "guidance", "explain", "train_medusa",
            "share_results", "write_report", "recall", "save_params"} <= set(tools)
    for tool in tools.values():
        assert tool.input_model.model_config.get("extra") == "forbid", tool.name
        assert len(tool.description) > 40, tool.name
        json.dumps(tool.input_schema())  # serialisable
    assert {t.name for t in tools.values() if t.gate} == {"install_packages", "train_medusa", "share_results"}
    for tool in tools.values():
        if tool.gate:
            assert "approval_id" in tool.input_model.model_fields


def test_exports_agree_with_the_registry():
    names = list(registry.load_tools())
    anthropic = registry.anthropic_tools()
    assert [t["name"] for t in anthropic] == names
    assert all(set(t) == {"name", "description", "input_schema"} for t in anthropic)
    assert [t["name"] for t in registry.describe_tools()] == names


def test_registering_a_loose_model_or_an_undocumented_tool_is_refused():
    class Loose(BaseModel):
        x: int = 0

    class Strict(BaseModel):
        model_config = ConfigDict(extra="forbid")

    with pytest.raises(ValueError, match="extra='forbid'"):
        registry.tool("loose", Loose)
    with pytest.raises(ValueError, match="docstring"):
        registry.tool("undocumented_test_tool", Strict)(lambda inp, ctx: {})
    with pytest.raises(ValueError, match="approval_id"):
        registry.tool("gated_test_tool", Strict, gate="install", describe=str)


def test_bad_input_is_a_parameter_error_naming_the_field():
    tool = registry.get_tool("lookup_runs")
    with pytest.raises(ParameterError, match="no_such_field"):
        registry.parse_input(tool, {"no_such_field": 1})
    with pytest.raises(ParameterError, match="not valid JSON"):
        registry.parse_input(tool, "{not json")
    with pytest.raises(ParameterError, match="there is no tool named 'nope'"):
        registry.get_tool("nope")


def test_tool_errors_become_results_never_exceptions(store):
    tool = registry.get_tool("lookup_runs")
    missing = registry.execute(tool, registry.parse_input(tool, {"run_id": "abcd1234"}), ToolContext(store=store))
    assert missing.is_error and "no stored run has the id 'abcd1234'" in missing.content["error"]
    assert "what to do" in missing.content["error"]

    def broken(inp, ctx):
        raise RuntimeError("boom")

    crashing = registry.Tool(name="crash", func=broken, input_model=tool.input_model, description="d")
    result = registry.execute(crashing, registry.parse_input(tool, {}), ToolContext(store=store))
    assert result.is_error and result.content["error"] == "internal error in crash: RuntimeError: boom"


def test_a_gated_tool_refuses_to_run_without_a_consumed_approval(store, monkeypatch):
    import tools.agent_tools.install as install

    calls = []
    monkeypatch.setattr(install, "run_pip", lambda argv: calls.append(argv))
    tool = registry.get_tool("install_packages")
    inp = registry.parse_input(tool, {"packages": ["gguf"]})
    result = registry.execute(tool, inp, ToolContext(store=store))
    assert result.is_error and "needs the user's approval" in result.content["error"]
    # an approval row that was never consumed (or is for something else) does not count either
    approval_id = store.create_approval("install", registry.approval_arguments(tool, inp), reason="test")
    store.decide_approval(approval_id, True, by="test person")
    result = registry.execute(tool, inp, ToolContext(store=store, approval=store.get_approval(approval_id)))
    assert result.is_error
    other = store.get_approval(approval_id) | {"status": "consumed", "arguments": {"tool": "x", "input": {}}}
    assert registry.execute(tool, inp, ToolContext(store=store, approval=other)).is_error
    assert calls == []


def test_a_prompt_text_no_stored_run_holds_says_so_and_gives_the_runs_the_other_filters_match(store):
    from agent.replies import format_details, format_result

    medusa = stored_run(store)
    stored_run(store, method="draft", speedup=1.9)
    tool = registry.get_tool("lookup_runs")
    result = registry.execute(tool, registry.parse_input(tool, {"method": "medusa", "prompt_contains": "speedup"}),
                              ToolContext(store=store))
    assert not result.is_error and [r["run_id"] for r in result.content["runs"]] == [medusa]
    assert result.content["unmatched"].startswith("no stored run's prompt contains 'speedup'")
    assert format_result(result).startswith("Note: no stored run's prompt contains 'speedup'")
    assert format_details(result).startswith("Note: no stored run's prompt contains 'speedup'")
    # a text some prompt holds filters as before; no run of the other filters is still an error
    held = registry.execute(tool, registry.parse_input(tool, {"prompt_contains": "FIB"}), ToolContext(store=store))
    assert "unmatched" not in held.content and len(held.content["runs"]) == 2
    none = registry.execute(tool, registry.parse_input(tool, {"method": "eagle", "prompt_contains": "x"}),
                            ToolContext(store=store))
    assert none.is_error and "no stored run matches" in none.content["error"]


def test_lookup_restates_stored_figures_with_their_source(store):
    older = stored_run(store, prompt="other prompt", speedup=1.1)
    run_id = stored_run(store)
    stored_run(store, method="draft", speedup=1.9)  # newest run, same prompt, other method
    tool = registry.get_tool("lookup_runs")
    result = registry.execute(tool, registry.parse_input(tool, {"method": "medusa", "same_prompt_as_last_run": True}),
                              ToolContext(store=store))
    assert not result.is_error
    [run] = result.content["runs"]
    assert run["run_id"] == run_id and run["run_id"] != older
    assert run["speedup"] == 1.55 and run["tokens_per_s"] == 16.0 and run["baseline_tokens_per_s"] == 10.32
    assert run["hardware"] == "Test CPU (2 cores)" and run["target"] == "qwen2.5-coder-1.5b-instruct"
    assert run["prompt"] == "def fib(n):"
    assert f"run {run_id}" in run["statement"] and "speedup 1.55x" in run["statement"]
    assert "Test CPU (2 cores)" in run["statement"] and "'def fib(n):'" in run["statement"]


def test_run_tool_fills_what_the_caller_left_out_from_saved_params(store, monkeypatch):
    import tools.bench.run as bench_run  # the tool imports run_method from it when it runs

    seen = []

    def fake_run_method(inp, store=None, progress=None, task_id=None):
        seen.append(inp)
        record = {"method": inp.method, "target": inp.target, "prompt": inp.prompt, "params": inp.params,
                  "speedup": 1.25, "new_tokens": inp.max_new_tokens, "prompt_ids": [1, 2], "output_ids": [3]}
        record["run_id"] = store.add_run(record)
        return record

    monkeypatch.setattr(bench_run, "run_method", fake_run_method)
    store.save_params("lookahead", {"target": "/models/mine", "window": 4, "ngram": 3, "guess": 4,
                                    "max_new_tokens": 32})
    tool = registry.get_tool("run_method")
    inp = registry.parse_input(tool, {"method": "lookahead", "prompt": "hello", "params": {"window": 2}})
    result = registry.execute(tool, inp, ToolContext(store=store))
    assert not result.is_error, result.content
    [used] = seen
    assert used.target == "/models/mine" and used.max_new_tokens == 32
    # the caller's window is given; the saved ngram and guess stay in memory, where the run reads them as
    # "memory" values (not "given" ones: tests/test_sizing_paths.py)
    assert used.params == {"window": 2}
    assert "prompt_ids" not in result.content and result.run_ids == [result.content["run_id"]]
    assert result.content["statement"].startswith(f"run {result.content['run_id']} (lookahead, /models/mine")


def test_saved_params_are_validated_before_saving(store):
    tool = registry.get_tool("save_params")
    bad = registry.execute(tool, registry.parse_input(tool, {"method": "draft", "params": {"k": 99}}),
                           ToolContext(store=store))
    assert bad.is_error and "k" in bad.content["error"]
    assert store.get_params("draft") is None
    good = registry.execute(tool, registry.parse_input(tool, {"method": "draft", "params": {"k": 3, "target": "t"}}),
                            ToolContext(store=store))
    assert not good.is_error and store.get_params("draft") == {"k": 3, "target": "t"}
    assert store.get_answer("default_method") == "draft"


@pytest.mark.parametrize("topic,papers", [
    ("draft", {"2211.17192", "2302.01318", "2401.07851"}),
    ("medusa", {"2401.10774", "2401.07851"}),
    ("lookahead", {"2402.02057", "2401.07851"}),
    ("tradeoffs", PAPERS),
])
def test_explanations_cite_their_papers(store, topic, papers):
    tool = registry.get_tool("explain")
    result = registry.execute(tool, registry.parse_input(tool, {"topic": topic, "detail": "full"}), ToolContext(store=store))
    assert not result.is_error
    assert papers <= set(result.content["arxiv_ids"])
    assert "## References" in result.content["text"]


@pytest.mark.parametrize("topic", ["draft", "medusa", "lookahead", "eagle", "ngram", "tradeoffs"])
def test_an_explanation_is_short_unless_more_is_asked_and_honours_a_length(store, topic):
    tool = registry.get_tool("explain")

    def ask(**extra):
        return registry.execute(tool, registry.parse_input(tool, {"topic": topic, **extra}), ToolContext(store=store)).content

    short, two, full = ask(), ask(sentences=2), ask(detail="full")
    assert short["detail"] == "short" and len(short["text"]) < 700 and "\n" not in short["text"].strip()
    assert short["text"] in full["text"] and len(full["text"]) > 3 * len(short["text"])
    assert len(re.split(r"(?<=[.!?])\s+(?=[A-Z(])", two["text"])) <= 2 and short["text"].startswith(two["text"][:40])
    assert "ask for it in detail" in short["more"] and "more" not in full


def test_write_report_stays_in_the_user_folder(store, specpilot_home):
    run_id = stored_run(store)
    tool = registry.get_tool("write_report")
    assert tool.gate is None
    result = registry.execute(tool, registry.parse_input(tool, {}), ToolContext(store=store))
    assert not result.is_error
    path = result.content["path"]
    assert path.startswith(str(specpilot_home / "reports"))
    text = open(path, encoding="utf-8").read()
    assert run_id in text and "1.55" in text and "Test CPU (2 cores)" in text



def test_no_filters_on_an_empty_memory_says_plainly_that_no_run_is_stored_and_how_to_measure_one(store):
    from agent.replies import format_result

    tool = registry.get_tool("lookup_runs")
    for given in ({}, {"limit": 10}):  # a limit filters nothing
        empty = registry.execute(tool, registry.parse_input(tool, given), ToolContext(store=store))
        assert empty.is_error and empty.content["error"].startswith("No runs are stored yet.")
        answer = format_result(empty)
        assert answer.startswith("No runs are stored yet.") and "That did not work" not in answer
        assert '/run ngram "YOUR PROMPT"' in answer and "specpilot run --method ngram" in answer
    # with filters given, the filtered message names them (the limit is no filter)
    filtered = registry.execute(tool, registry.parse_input(tool, {"method": "medusa", "limit": 3}),
                                ToolContext(store=store))
    assert filtered.content["error"].startswith("no stored run matches method='medusa'\n")
    stored_run(store, method="draft")
    none = registry.execute(tool, registry.parse_input(tool, {"method": "medusa"}), ToolContext(store=store))
    assert none.is_error and none.content["error"].startswith("no stored run matches method='medusa'")
    assert format_result(none).startswith("That did not work: no stored run matches")


def test_a_statement_gives_the_time_to_the_minute_in_utc_and_acceptance_as_a_percent():
    from tools.agent_tools.lookup import percent, statement, stored_time

    assert stored_time("2026-12-07T18:11:24.615634+00:00") == "2026-12-07 18:11 UTC"
    assert stored_time("2026-12-07T20:11:24+02:00") == "2026-12-07 18:11 UTC"
    assert stored_time(None) == "time not recorded" and stored_time("yesterday") == "yesterday"
    assert percent(0.0) == "0.0%" and percent(0.725) == "72.5%" and percent(1) == "100.0%"
    run = {"run_id": "abcd1234", "method": "ngram", "target": "t", "prompt": "p", "hardware": {"name": "hw"},
           "dtype": "float32", "created_at": "2026-12-07T18:11:24.615634+00:00", "acceptance_rate": 0.0}
    assert "stored 2026-12-07 18:11 UTC)" in statement(run) and "acceptance 0.0%" in statement(run)


def test_a_stored_run_that_did_not_pay_says_why_and_a_list_names_the_fastest():
    """A run slower than plain generation says so with its own tokens per step and acceptance; one within 5% is
    "about as fast"; a faster one gets no verdict (its speedup says it); two or more runs name the fastest."""
    from agent.replies import format_result
    from tools.agent_tools.lookup import fastest, statement, verdict
    from tools.agent_tools.registry import ToolResult

    base = {"method": "ngram", "target": "t", "prompt": "p", "hardware": {"name": "hw"}, "dtype": "float32",
            "created_at": "2026-12-07T18:11:24+00:00"}
    slow = {**base, "run_id": "slow0001", "speedup": 0.52, "mean_accepted_per_step": 1.04, "acceptance_rate": 0.0}
    even = {**base, "run_id": "even0001", "speedup": 0.98}
    quick = {**base, "run_id": "fast0001", "method": "draft", "speedup": 1.85}
    assert verdict(slow) == ("slower than plain generation: 1.0 tokens per step, 0.0% of the proposed tokens "
                             "accepted, too few to pay for proposing and verifying them")
    assert statement(slow).endswith(verdict(slow)) and verdict(even) == "about as fast as plain generation"
    assert verdict(quick) is None and verdict({**base, "run_id": "x"}) is None
    assert fastest([slow, even, quick]) == {"run_id": "fast0001", "method": "draft", "speedup": 1.85}
    assert fastest([slow]) is None
    shown = format_result(ToolResult("lookup_runs", {"source": "memory", "runs": [
        {"statement": statement(r)} for r in (slow, quick)], "fastest": fastest([slow, quick])}))
    assert shown.endswith("Fastest of these: run fast0001 (draft, 1.85x).")
