"""choose_method: a choice between methods for a kind of request, from this machine's runs, else the shipped
fit-half results, else the methods' known properties; the pick first, each line with its source."""

from __future__ import annotations

import json

import pytest

from memory import Store
from tools.agent_tools import registry
from tools.agent_tools import choose
from tools.agent_tools.registry import ToolContext
from tools.engine.cpu_info import cpu_name


@pytest.fixture
def store():
    with Store() as s:
        yield s


def choose_for(store, **tool_input) -> dict:
    tool = registry.get_tool("choose_method")
    result = registry.execute(tool, registry.parse_input(tool, tool_input), ToolContext(store=store))
    assert not result.is_error, result.content
    return result.content


def test_with_nothing_measured_the_properties_decide_and_say_so(store, monkeypatch, tmp_path):
    monkeypatch.setattr(choose, "default_results_dir", lambda: tmp_path)
    summary = choose_for(store, category="summarization")
    assert summary["pick"] == "ngram" and "not measured" in summary["lines"][0]
    assert choose_for(store, category="coding")["pick"] == "draft"
    assert summary["next_step"]["tool"] == "compare_methods"


def test_runs_measured_here_for_the_category_decide_first(store, monkeypatch, tmp_path):
    monkeypatch.setattr(choose, "default_results_dir", lambda: tmp_path)
    here = {"name": cpu_name(2)}
    for method, speedups in {"ngram": [1.2, 1.3], "draft": [1.9, 2.1], "lookahead": [1.1]}.items():
        for s in speedups:
            store.add_run({"method": method, "target": "qwen2.5-coder-1.5b-instruct", "category": "summarization",
                           "speedup": s, "hardware": here})
    store.add_run({"method": "eagle", "target": "qwen2.5-coder-1.5b-instruct", "category": "summarization",
                   "speedup": 9.0, "hardware": {"name": "Another CPU (64 cores)"}})  # not this machine
    out = choose_for(store, category="summarization")
    assert [c["method"] for c in out["candidates"]] == ["draft", "ngram", "lookahead"]
    assert out["lines"][0].startswith("draft: 2.00x (measured on this machine, runs ")


def test_the_shipped_fit_half_is_read_with_its_machine(store, monkeypatch, tmp_path):
    rows = [{"category": "rag", "method": m, "speedup": s, "prompt_set": "fit"}
            for m, s in (("ngram", 1.4), ("draft", 1.1), ("ngram", 1.6))]
    (tmp_path / "suite_fit.json").write_text(json.dumps({
        "name": "suite_fit", "kind": "suite", "date": "2026-12-05T00:00:00+00:00", "rows": rows,
        "hardware": {"name": "Test CPU (2 cores, AVX2)"}, "extra": {"prompt_set": "fit"}}))
    monkeypatch.setattr(choose, "default_results_dir", lambda: tmp_path)
    out = choose_for(store, category="rag")
    assert out["pick"] == "ngram" and out["candidates"][0]["speedup"] == pytest.approx(1.5)
    assert "the fit half measured on Test CPU (2 cores, AVX2)" in out["lines"][0]


def test_an_unknown_category_is_refused_with_the_list():
    tool = registry.get_tool("choose_method")
    with pytest.raises(Exception, match="summarization"):
        registry.parse_input(tool, {"category": "long documents"})


@pytest.mark.parametrize("words,category", [
    ("which method would you suggest for summarising long documents on this laptop, and why?", "summarization"),
    ("code", "coding"), ("rag", "rag"), ("translating manuals", "translation"), ("mathematics homework", "math"),
    ("what should I use here?", None)])
def test_a_kind_of_work_in_words_is_matched_to_a_category_by_the_categories_names(words, category):
    assert choose.category_of(words) == category


def guidance_for(store, **tool_input) -> dict:
    tool = registry.get_tool("guidance")
    result = registry.execute(tool, registry.parse_input(tool, tool_input), ToolContext(store=store))
    assert not result.is_error, result.content
    return result.content


def test_guidance_without_a_method_is_a_choice_between_methods_not_the_default_methods_advice(store, monkeypatch,
                                                                                               tmp_path):
    monkeypatch.setattr(choose, "default_results_dir", lambda: tmp_path)
    store.save_answer("default_method", "draft")
    out = guidance_for(store, task="summarising long documents")
    assert out["method"] is None and out["category"] == "summarization" and out["pick"] == "ngram"
    assert "suggested_params" not in out and out["default_method"] == "draft"
    every = guidance_for(store)  # no task named: over every kind of request
    assert every["category"] is None and every["pick"] == "draft"
    both = guidance_for(store, method="lookahead", task="rag", measure=False)  # the method's advice, and the choice
    assert both["method"] == "lookahead" and "window" in both["suggested_params"] and both["choice"]["pick"] == "ngram"


def test_guide_without_a_method_answers_which_method_as_a_choice_in_a_few_lines(store, monkeypatch, tmp_path):
    from agent.brains.offline import OfflineBrain
    from agent.loop import Session

    monkeypatch.setattr(choose, "default_results_dir", lambda: tmp_path)
    store.save_answer("default_method", "draft")  # onboarded with draft: still a choice, not draft's advice
    reply = Session(store, OfflineBrain()).handle("/guide summarising long documents").text
    lines = reply.splitlines()
    assert lines[0] == "For summarization: ngram first." and len(lines) <= 6
    assert [line.split(":")[0] for line in lines[1:4]] == ["- ngram", "- draft", "- eagle"]
    assert lines[-1] == "(Parameters for your default method draft: /guide draft.)"
    assert store.list_tasks()[0]["status"] == "done"
