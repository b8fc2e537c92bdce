"""specpilot tune: a measured sweep stored as runs of a tune_sweep task, a recommendation, and saving to
memory only when the user agrees."""

from __future__ import annotations

import argparse
import json

import pytest

from memory import Store
from tools.bench import protocol as measure
from tools.bench.machine_cost import MachineCost
from tools.bench.sizing import size_params
from tools.engine.lookahead import LookaheadParams
from tools.bench.tune import SWEEP_KIND, TuneInput, best_measured_params, draft_grid, lookahead_grid, tune

GRID = [{"k": 1, "adaptive_k": False}, {"k": 2, "adaptive_k": False}]


def tiny_tune(model_dir, **overrides) -> TuneInput:
    fields = dict(method="draft", limit=2, grid=GRID, target=str(model_dir), draft=str(model_dir), max_new_tokens=8,
                  chat=False, dtype="float32")
    fields.update(overrides)
    return TuneInput(**fields)


def test_a_declined_sweep_is_stored_but_not_saved(tiny_model_dir):
    store = Store()
    store.save_params("draft", {"draft_vocab": 60, "k": 5})
    asked = []
    result = tune(tiny_tune(tiny_model_dir), store=store, confirm=lambda q: asked.append(q) or False)
    assert result["saved"] is False and len(asked) == 1 and result["best"]["label"] in asked[0]
    assert store.get_params("draft") == {"draft_vocab": 60, "k": 5}  # unchanged
    task = store.get_task(result["task_id"])
    assert task["kind"] == SWEEP_KIND and task["status"] == "done" and len(task["run_ids"]) == 4
    runs = store.list_runs(task_id=task["id"])
    assert {r["sweep"]["label"] for r in runs} == {"K=1", "K=2"}
    assert all(r["params"]["draft_vocab"] == 60 for r in runs)  # unswept saved parameters are kept
    labels = [r["label"] for r in result["rows"]]
    assert sorted(labels) == ["K=1", "K=2"]
    speedups = [r["speedup"] for r in result["rows"]]
    assert speedups == sorted(speedups, reverse=True) and result["best"] == result["rows"][0]
    assert result["best"]["speedup"] == pytest.approx(
        sum(r["baseline_wall_time_s"] for r in runs if r["sweep"]["label"] == result["best"]["label"])
        / sum(r["wall_time_s"] for r in runs if r["sweep"]["label"] == result["best"]["label"]), rel=1e-12)

    hardware = measure.hardware_info("cpu")["name"]
    best = best_measured_params(store, "draft", str(tiny_model_dir), hardware)
    assert best["label"] == result["best"]["label"] and best["speedup"] == pytest.approx(result["best"]["speedup"])
    assert best["task_id"] == result["task_id"] and best["prompts"] == 2
    assert best_measured_params(store, "draft", str(tiny_model_dir), "another machine") is None
    assert best_measured_params(store, "medusa", str(tiny_model_dir), hardware) is None


def test_an_accepted_sweep_saves_the_best_setting(tiny_model_dir):
    store = Store()
    store.save_params("draft", {"draft_vocab": 60, "max_new_tokens": 64})
    result = tune(tiny_tune(tiny_model_dir, limit=1), store=store, confirm=lambda q: True)
    assert result["saved"] is True
    saved = store.get_params("draft")
    assert saved["k"] == result["best"]["params"]["k"] and saved["draft_vocab"] == 60 and saved["max_new_tokens"] == 64


def test_no_question_means_nothing_saved(tiny_model_dir):
    store = Store()
    result = tune(tiny_tune(tiny_model_dir, limit=1), store=store)
    assert result["saved"] is False and store.get_params("draft") is None


def eval_parser() -> argparse.ArgumentParser:
    from agent.cli.eval import add_eval_commands

    parser = argparse.ArgumentParser(prog="specpilot")
    add_eval_commands(parser.add_subparsers(dest="command", required=True))
    return parser


def cli_args(model_dir, *extra):
    return eval_parser().parse_args([
        "tune", "--method", "draft", "--grid", json.dumps(GRID), "--limit", "1", "--target", str(model_dir),
        "--draft", str(model_dir), "--max-new-tokens", "6", "--raw", "--dtype", "float32", *extra])


def test_the_command_without_a_terminal_saves_only_with_yes(tiny_model_dir, capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin.isatty", lambda: False)
    args = cli_args(tiny_model_dir)
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert "not saved" in out and "--yes" in out and Store().get_params("draft") is None

    args = cli_args(tiny_model_dir, "--from-last-sweep", "--yes")
    assert args.func(args) == 0
    assert "saved to memory" in capsys.readouterr().out
    assert Store().get_params("draft")["k"] in (1, 2)


def test_the_command_asks_on_a_terminal(tiny_model_dir, capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin.isatty", lambda: True)
    answers = iter(["n"])
    monkeypatch.setattr("builtins.input", lambda prompt: next(answers))
    args = cli_args(tiny_model_dir)
    assert args.func(args) == 0
    assert "not saved" in capsys.readouterr().out and Store().get_params("draft") is None


def test_the_sweeps_cover_the_documented_settings():
    assert [(g["k"], g["adaptive_k"]) for g in draft_grid()] == [(2, False), (3, False), (4, False), (6, False),
                                                                  (8, False), (4, True)]
    cpu_like = {1: 0.10, 2: 0.10, 4: 0.105, 8: 0.12, 16: 0.15, 32: 0.20, 64: 0.30}
    grid = lookahead_grid(cpu_like)
    suggested = size_params("lookahead", MachineCost("cpu", "cpu", cpu_like, "a curve")).params  # as run sizes it
    assert grid[0] == {k: suggested[k] for k in ("window", "ngram", "guess", "prompt_lookup")}
    assert 2 <= len(grid) <= 6 and len({json.dumps(g, sort_keys=True) for g in grid}) == len(grid)
    for g in grid:
        LookaheadParams(**g).check()


def test_the_demos_lookahead_setting_is_the_whole_suggestion_with_its_drafts():
    from types import SimpleNamespace

    from tools.agent_tools.advice import COST_CURVE_KEY, detect_hardware
    from tools.bench.tune import sized_lookahead_params

    # flat to 32 tokens, a step past it: one prompt-lookup draft beside the window (cut each step to what pays)
    curve = {1: 0.184, 8: 0.203, 16: 0.205, 32: 0.236, 36: 0.302, 48: 0.309}
    store = Store()
    hw = detect_hardware("cpu")["name"]
    store.save_answer(COST_CURVE_KEY, {f"tiny|{hw}": {"curve": {str(n): t for n, t in curve.items()},
                                                      "dtype": "float32", "measured_at": "2026-01-01T00:00:00"}})
    target = SimpleNamespace(ref="tiny", device="cpu", dtype="float32", model=None)  # nothing loaded or measured
    params, reasoning = sized_lookahead_params(store, target, allow_measure=False)
    suggested = size_params("lookahead", MachineCost("cpu", hw, curve, "stored")).params  # as run sizes it
    assert params == {k: suggested[k] for k in ("window", "ngram", "guess", "prompt_lookup")}
    assert params["prompt_lookup"] == 1
    assert "prompt_lookup=1 (sized): one prompt-lookup draft of up to 10 tokens, cut each step" in reasoning
    assert "stored on 2026-01-01" in reasoning
