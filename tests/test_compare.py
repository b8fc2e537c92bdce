"""specpilot compare: every method on one prompt against one baseline, stored with its task; Ctrl-C keeps
what finished; a method that cannot run is reported, not a crash."""

from __future__ import annotations

import argparse
import json

import pytest

from memory import Store
from tools.bench.compare import CompareInput, compare
from tools.errors import ParameterError

LOOKAHEAD = {"window": 2, "ngram": 3, "guess": 2}


def tiny_input(model_dir, **overrides) -> CompareInput:
    fields = dict(prompt="def x return x", target=str(model_dir), draft=str(model_dir), max_new_tokens=10,
                  chat=False, dtype="float32", params={"lookahead": LOOKAHEAD})
    fields.update(overrides)
    return CompareInput(**fields)


def test_compare_runs_every_method_and_stores_each_run_with_its_task(tiny_model_dir, tiny_heads_dir):
    store = Store()
    store.save_params("draft", {"k": 3, "target": "ignored-here"})  # saved parameters are used
    messages: list[str] = []
    result = compare(tiny_input(tiny_model_dir, medusa_heads=str(tiny_heads_dir), repeats=2), store=store,
                     progress=messages.append)

    assert [r["method"] for r in result["rows"]] == ["baseline", "draft", "medusa", "lookahead", "eagle", "ngram"]
    eagle_row = next(r for r in result["rows"] if r["method"] == "eagle")  # no EAGLE head for this target
    assert eagle_row["status"] != "measured" and "eagle train" in json.dumps(eagle_row)
    assert all(r["status"] == "measured" for r in result["rows"] if r["method"] != "eagle")
    task = store.get_task(result["task_id"])
    assert task["status"] == "done" and task["left"] == []
    assert sorted(task["done"]) == sorted(m for m in task["plan"] if m != "eagle")
    assert sorted(task["run_ids"]) == sorted(result["run_ids"]) and len(result["run_ids"]) == 5
    rows = {r["method"]: r for r in result["rows"]}
    for run_id in result["run_ids"]:
        run = store.get_run(run_id)
        assert run["task_id"] == result["task_id"] and run["settings_key"]
        assert run["matches_baseline"] is True and run["first_divergence"] is None
        assert run["speedup"] == run["baseline_wall_time_s"] / run["wall_time_s"]
        assert rows[run["method"]]["speedup"] == run["speedup"]  # the table shows the stored figure
        assert rows[run["method"]]["steps"] == run["steps"] and rows[run["method"]]["method_extra"] == run["method_extra"]
        assert len(run["times"]) == 2 and len(run["baseline_times"]) == 2
    # one baseline for the whole comparison: every method's record holds the same baseline timings
    assert len({tuple(store.get_run(r)["baseline_times"]) for r in result["run_ids"]}) == 1
    assert sum(m.startswith("baseline: repeat") for m in messages) == 2
    assert rows["draft"]["params"]["k"] == 3 and rows["draft"]["params_source"] == "memory"
    assert rows["lookahead"]["params_source"] == "given"
    assert rows["medusa"]["training_required"] == "Medusa heads (found)"
    assert rows["draft"]["draft_required"].startswith("yes") and rows["ngram"]["draft_required"] == "no"
    assert rows["ngram"]["quality"] == "identical to baseline (10 tokens)"


def test_ctrl_c_keeps_the_finished_method_and_leaves_the_task_unfinished(tiny_model_dir):
    store = Store()
    seen_stored = []

    def progress(text: str) -> None:
        if seen_stored:
            raise KeyboardInterrupt
        if "stored as run" in text:
            seen_stored.append(text)

    with pytest.raises(KeyboardInterrupt):
        compare(tiny_input(tiny_model_dir, methods=["draft", "lookahead", "ngram"]), store=store, progress=progress)

    task = store.list_tasks()[0]
    assert task["status"] == "unfinished"
    assert task["done"] == ["draft"] and task["left"] == ["lookahead", "ngram"]
    runs = store.list_runs(task_id=task["id"])
    assert [r["method"] for r in runs] == ["draft"] and task["run_ids"] == [runs[0]["run_id"]]
    assert "interrupted" in task["notes"][-1]["text"]


def test_a_method_that_cannot_run_is_reported_not_a_crash(tiny_model_dir):
    store = Store()
    result = compare(tiny_input(tiny_model_dir, methods=["baseline", "medusa", "ngram"]), store=store)
    rows = {r["method"]: r for r in result["rows"]}
    assert rows["medusa"]["status"] == "not run" and "no Medusa heads" in rows["medusa"]["reason"]
    assert rows["medusa"]["training_required"] == "Medusa heads (none for this target)"
    assert rows["baseline"]["status"] == rows["ngram"]["status"] == "measured"
    assert set(result["not_run"]) == {"medusa"}
    task = store.get_task(result["task_id"])
    assert task["status"] == "done" and "medusa" not in task["done"] and task["left"] == []
    assert any(n["text"].startswith("medusa: not run:") for n in task["notes"])
    assert len(store.list_runs(task_id=task["id"])) == 2


def test_bad_given_parameters_are_refused_before_anything_runs(tiny_model_dir):
    store = Store()
    with pytest.raises(ParameterError, match="k"):
        compare(tiny_input(tiny_model_dir, methods=["draft"], params={"draft": {"k": 99}}), store=store)
    with pytest.raises(ParameterError, match="unknown method"):
        compare(tiny_input(tiny_model_dir, params={"warp": {}}), store=store)
    assert store.list_tasks() == [] and store.list_runs() == []


def eval_parser() -> argparse.ArgumentParser:
    from agent.cli.eval import add_eval_commands

    parser = argparse.ArgumentParser(prog="specpilot")
    add_eval_commands(parser.add_subparsers(dest="command", required=True))
    return parser


def test_the_compare_command_prints_every_digit_as_json(tiny_model_dir, capsys):
    args = eval_parser().parse_args([
        "compare", "--methods", "draft,ngram", "--target", str(tiny_model_dir), "--draft", str(tiny_model_dir),
        "--prompt", "def x return x", "--max-new-tokens", "8", "--raw", "--dtype", "float32", "--k", "2", "--json"])
    assert args.func(args) == 0
    result = json.loads(capsys.readouterr().out)
    assert [r["method"] for r in result["rows"]] == ["draft", "ngram"]
    draft = Store().get_run(result["rows"][0]["run_id"])
    assert result["rows"][0]["speedup"] == draft["speedup"] and draft["params"]["k"] == 2


def test_the_compare_table_states_requirements_and_quality(tiny_model_dir, capsys):
    args = eval_parser().parse_args([
        "compare", "--methods", "baseline", "medusa", "--target", str(tiny_model_dir), "--prompt", "def x",
        "--max-new-tokens", "6", "--raw", "--dtype", "float32", "--report"])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert "medusa: not run: no Medusa heads for this target" in out and "identical to" in out
    assert "Medusa heads" in out
    assert "report:" in out and ".md" in out
    assert "recommended here: " in out  # the fastest lossless method, or plain decoding and why


def test_bench_on_both_halves_prints_the_fit_half_beside_the_eval_half(tiny_model_dir, capsys):
    args = eval_parser().parse_args([
        "bench", "--prompts", "both", "--category", "math", "--limit", "1", "--methods", "ngram",
        "--target", str(tiny_model_dir), "--max-new-tokens", "4", "--raw", "--dtype", "float32"])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert "eval half, task" in out and "fit half against eval half" in out
    assert "the fit half's pick per category" in out and "recommended here" in out
    assert "baseline timed before and after the methods on each prompt" in out  # the noise the figures carry


def test_the_demo_compares_every_method_and_writes_the_report(tiny_model_dir):
    from tools.agent_tools.demo import demo

    store = Store()
    result = demo(store=store, max_new_tokens=8, dtype="float32", target=str(tiny_model_dir),
                  draft=str(tiny_model_dir))
    rows = {r["method"]: r for r in result["compare"]["rows"]}
    assert list(rows) == ["baseline", "draft", "medusa", "lookahead", "eagle", "ngram"]
    assert rows["medusa"]["status"] == rows["eagle"]["status"] == "not run"  # no heads ship for the tiny model
    assert all(rows[m]["status"] == "measured" for m in ("baseline", "draft", "lookahead", "ngram"))
    assert rows["lookahead"]["params_source"] == "sized"  # to this machine's cost curve, each field with its reason
    assert rows["lookahead"]["sizing"]["window"].startswith("sized: the widest window")
    report = result["report"]
    text = open(report["markdown"]).read()
    assert all(run_id in text for run_id in result["compare"]["run_ids"])
    assert set(report["charts"]) >= {"speedup"}


def test_the_agent_compare_fills_unset_settings_from_saved_params(tmp_path):
    from tools.bench.compare import CompareInput, with_saved_settings

    store = Store()
    store.save_params("draft", {"target": "my-target", "max_new_tokens": 32, "k": 3})
    store.save_params("lookahead", {"target": "my-target", "window": 2})
    filled = with_saved_settings(CompareInput(prompt="p", methods=["baseline", "draft", "lookahead"]), store)
    assert filled.target == "my-target" and filled.max_new_tokens == 32
    given = with_saved_settings(CompareInput(prompt="p", methods=["draft"], target="given"), store)
    assert given.target == "given"
    store.save_params("lookahead", {"target": "other"})
    assert with_saved_settings(CompareInput(prompt="p", methods=["draft", "lookahead"]), store).target != "other"


def test_an_eagle_run_key_follows_the_head_weights_not_only_the_folder(tmp_path):
    """A head retrained in the same folder (or a new shipped one) makes its runs new measurements:
    stored runs of the old head are not reused for it."""
    from tools.bench.compare import run_key

    folder = tmp_path / "head"
    folder.mkdir()
    weights = folder / "eagle_head.safetensors"
    weights.write_bytes(b"first head")
    common = {"target": "some-target", "max_new_tokens": 8}
    params = {"eagle_heads": str(folder), "tree_nodes": 6}
    first = run_key("eagle", params, "a prompt", common)
    assert run_key("eagle", dict(params), "a prompt", common) == first
    weights.write_bytes(b"the retrained head, other weights")
    assert run_key("eagle", params, "a prompt", common) != first
    # other methods' keys do not read any head
    assert run_key("ngram", {}, "a prompt", common) == run_key("ngram", {}, "a prompt", dict(common))


def test_a_method_revision_makes_its_runs_new_measurements(monkeypatch):
    """A change to a method's code that changes its figures at the same parameters raises its revision: runs stored
    before are measured again; a method at revision 0 keeps the key its runs were stored under."""
    import dataclasses

    from memory.store import settings_key
    from tools.bench.compare import run_key
    from tools.engine.params import METHODS

    common = {"target": "some-target", "max_new_tokens": 8}
    assert run_key("ngram", {}, "a prompt", common) == settings_key({"method": "ngram", "params": {}, **common},
                                                                    "a prompt")
    now = run_key("draft", {"k": 4}, "a prompt", common)
    monkeypatch.setitem(METHODS, "draft", dataclasses.replace(METHODS["draft"], revision=METHODS["draft"].revision + 1))
    assert run_key("draft", {"k": 4}, "a prompt", common) != now
