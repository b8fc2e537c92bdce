"""specpilot bench: a prompt set, per-category and overall figures, and resuming without re-measuring."""

from __future__ import annotations

import json

import pytest

from memory import Store
from tools.bench.suite import BenchInput, bench, default_prompts_path, load_prompt_set, method_stats, summarise
from tools.bench.summary import fit_vs_eval, recommend
from tools.errors import ParameterError

PROMPTS = [
    {"question_id": 1, "category": "coding", "prompt": "def x return x"},
    {"question_id": 2, "category": "coding", "prompt": "print the value of x"},
    {"question_id": 3, "category": "writing", "prompt": "write a function for the list"},
]


@pytest.fixture
def prompt_file(tmp_path):
    path = tmp_path / "prompts.jsonl"
    path.write_text("\n".join(json.dumps(p) for p in PROMPTS) + "\n")
    return path


def tiny_bench(model_dir, prompt_file, **overrides) -> BenchInput:
    fields = dict(prompts=str(prompt_file), methods=["draft", "ngram"], target=str(model_dir), draft=str(model_dir),
                  max_new_tokens=8, chat=False, dtype="float32", peers=True)
    fields.update(overrides)
    return BenchInput(**fields)


def test_bench_summarises_per_category_and_a_rerun_measures_nothing_new(tiny_model_dir, prompt_file):
    store = Store()
    first = bench(tiny_bench(tiny_model_dir, prompt_file), store=store)
    assert first["measured"] == 6 and first["reused"] == 0
    runs = store.list_runs(limit=100)
    assert len(runs) == 6 and {r["category"] for r in runs} == {"coding", "writing"}
    assert all(r["settings_key"] and r["task_id"] == first["task_id"] for r in runs)
    summary = first["summary"]
    assert set(summary["categories"]) == {"coding", "writing"}
    coding = [r for r in runs if r["category"] == "coding" and r["method"] == "draft"]
    expected = sum(r["baseline_wall_time_s"] for r in coding) / sum(r["wall_time_s"] for r in coding)
    assert summary["categories"]["coding"]["draft"]["speedup"] == pytest.approx(expected, rel=1e-12)
    assert summary["overall"]["ngram"]["prompts"] == 3 and summary["overall"]["draft"]["identical"] == 3
    assert set(summary["peers"]["overall"]) == {"hf_assisted", "hf_prompt_lookup"}
    assert store.get_task(first["task_id"])["status"] == "done"
    # each prompt's baseline is timed before and after the methods; the reference is their median
    assert all(len(r["baseline_times"]) == 2 for r in runs)
    assert all(r["baseline_wall_time_s"] == pytest.approx(sum(r["baseline_times"]) / 2) for r in runs)
    assert summary["baseline_drift"]["prompts"] == 3 and summary["baseline_drift"]["max"] >= 0

    second = bench(tiny_bench(tiny_model_dir, prompt_file), store=store)
    assert second["measured"] == 0 and second["reused"] == 6
    assert len(store.list_runs(limit=100)) == 6
    assert second["summary"]["overall"] == summary["overall"]
    task = store.get_task(second["task_id"])
    assert task["status"] == "done" and task["left"] == [] and sorted(task["run_ids"]) == sorted(first["run_ids"])

    changed = bench(tiny_bench(tiny_model_dir, prompt_file, max_new_tokens=6, methods=["ngram"]), store=store)
    assert changed["measured"] == 3  # other settings: measured again, not reused


def test_fresh_measures_again_and_a_later_rerun_reuses_the_fresh_runs(tiny_model_dir, prompt_file):
    store = Store()
    first = bench(tiny_bench(tiny_model_dir, prompt_file, methods=["ngram"], peers=False), store=store)
    fresh = bench(tiny_bench(tiny_model_dir, prompt_file, methods=["ngram"], peers=False, fresh=True), store=store)
    assert fresh["measured"] == 3 and fresh["reused"] == 0  # identical settings, stored before: measured again
    assert not set(fresh["run_ids"]) & set(first["run_ids"])
    again = bench(tiny_bench(tiny_model_dir, prompt_file, methods=["ngram"], peers=False), store=store)
    assert again["measured"] == 0 and sorted(again["run_ids"]) == sorted(fresh["run_ids"])  # the newest runs


def test_a_method_added_later_does_not_time_the_peers_again(tiny_model_dir, prompt_file):
    store = Store()
    bench(tiny_bench(tiny_model_dir, prompt_file, methods=["ngram"]), store=store)
    added = bench(tiny_bench(tiny_model_dir, prompt_file, methods=["ngram", "draft"]), store=store)
    assert added["measured"] == 3 and added["reused"] == 3
    new_runs = [r for r in store.list_runs(limit=100) if r["method"] == "draft"]
    assert len(new_runs) == 3 and not any(r.get("peers") for r in new_runs)  # the stored peers stand
    assert set(added["summary"]["peers"]["overall"]) == {"hf_assisted", "hf_prompt_lookup"}
    assert added["summary"]["peers"]["overall"]["hf_assisted"]["prompts"] == 3


def test_an_interrupted_bench_resumes_with_what_is_left(tiny_model_dir, prompt_file):
    store = Store()

    def progress(text: str) -> None:  # the first prompt is finished (its baseline timed after the methods)
        if text.startswith("[2/3]") and "ngram: repeat" in text:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        bench(tiny_bench(tiny_model_dir, prompt_file, peers=False), store=store, progress=progress)
    task = store.list_tasks()[0]
    done = len(store.list_runs(limit=100))
    assert task["status"] == "unfinished" and done >= 1
    assert len(task["left"]) == 6 - done and len(task["done"]) == done

    resumed = bench(tiny_bench(tiny_model_dir, prompt_file, peers=False), store=store)
    assert resumed["reused"] == done and resumed["measured"] == 6 - done


def test_prompt_sets_are_read_with_category_and_limit(tmp_path):
    rows = load_prompt_set(None)
    assert default_prompts_path().name == "spec_bench_eval.jsonl"  # the eval half: nothing is fitted on it
    categories = {r["category"] for r in rows}
    assert {"coding", "math_reasoning", "summarization", "rag", "writing", "translation"} <= categories
    assert len(categories) == 13 and len({r["question_id"] for r in rows}) == len(rows)
    one_each = load_prompt_set(None, limit=1)
    assert len(one_each) == len(categories)
    assert all(r["category"] == "coding" for r in load_prompt_set(None, category="coding"))
    with pytest.raises(ParameterError, match="does not exist"):
        load_prompt_set(tmp_path / "missing.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "ok", "category": "c"}\n{not json}\n')
    with pytest.raises(ParameterError, match="line 2"):
        load_prompt_set(bad)
    with pytest.raises(ParameterError, match="no prompts selected"):
        load_prompt_set(None, category="nope")


def run_record(method, category, base, wall, tokens=10, steps=4, drafted=8, accepted=6, same=True, **extra):
    return {"run_id": f"{method}-{category}-{base}", "method": method, "category": category, "prompt": f"p{base}",
            "baseline_wall_time_s": base, "wall_time_s": wall, "speedup": base / wall, "new_tokens": tokens,
            "steps": steps, "tokens_drafted": drafted, "tokens_accepted": accepted, "matches_baseline": same, **extra}


def test_pooled_figures_are_total_time_ratios_and_tokens_per_forward():
    runs = [run_record("draft", "a", 2.0, 1.0), run_record("draft", "a", 4.0, 4.0, same=False),
            run_record("draft", "b", 3.0, 1.5)]
    stats = method_stats(runs)
    assert stats["speedup"] == (2.0 + 4.0 + 3.0) / (1.0 + 4.0 + 1.5)
    assert stats["speedup_min"] == 1.0 and stats["speedup_max"] == 2.0
    assert stats["mean_accepted_per_step"] == 30 / 15 and stats["acceptance_rate"] == 18 / 24
    assert stats["identical"] == 2 and stats["compared"] == 3
    summary = summarise(runs)
    assert summary["categories"]["a"]["draft"]["speedup"] == 6.0 / 5.0
    assert summary["overall"]["draft"]["prompts"] == 3


def test_baseline_drift_is_each_prompts_spread_of_baseline_timings_counted_once():
    runs = [run_record("draft", "a", 1.0, 0.5, baseline_times=[0.9, 1.1]),
            run_record("ngram", "a", 1.0, 0.8, baseline_times=[0.9, 1.1]),
            run_record("draft", "b", 2.0, 1.0, baseline_times=[2.0, 2.0]),
            run_record("draft", "c", 3.0, 1.0)]  # timed once: no spread to read
    drift = summarise(runs)["baseline_drift"]
    assert drift == {"prompts": 2, "mean": pytest.approx(0.1), "max": pytest.approx(0.2)}
    assert summarise(runs[3:])["baseline_drift"] is None


def test_the_recommendation_is_the_fastest_lossless_method_else_plain_decoding():
    runs = [run_record("draft", "a", 2.0, 1.0), run_record("ngram", "a", 3.0, 1.0, same=False),
            run_record("medusa", "a", 2.0, 0.8, same=False, first_divergence={"kind": "near_tie", "position": 3}),
            run_record("eagle", "b", 2.0, 2.5), run_record("lookahead", "b", 2.0, 1.0, lossy=True)]
    summary = summarise(runs)
    rec = summary["recommended"]["categories"]
    assert rec["a"]["method"] == "medusa" and rec["a"]["speedup"] == 2.5  # ngram is faster but its output differs
    assert rec["b"]["method"] == "baseline" and rec["b"]["speedup"] == 1.0  # slower, or lossy
    assert "lossless" in rec["b"]["reason"]
    assert summary["recommended"]["overall"]["method"] == "medusa"
    assert summary["categories"]["a"]["ngram"]["lossless"] == 0
    sampled = run_record("draft", "c", 2.0, 1.0, same=None)
    assert recommend(summarise([sampled])["categories"]["c"])["method"] == "draft"  # lossless in distribution


def test_fit_against_eval_picks_on_the_fit_half_and_measures_the_pick_on_the_eval_half():
    fit = summarise([run_record("draft", "a", 2.0, 1.0), run_record("ngram", "a", 2.0, 1.6),
                     run_record("draft", "b", 2.0, 2.2), run_record("ngram", "b", 2.0, 2.1)])
    held_out = summarise([run_record("draft", "a", 3.0, 2.0), run_record("ngram", "a", 3.0, 1.0),
                          run_record("draft", "b", 2.0, 1.0), run_record("ngram", "b", 2.0, 1.9),
                          run_record("draft", "c", 1.0, 1.0)])
    both = fit_vs_eval(fit, held_out)
    assert both["picks"]["a"]["method"] == "draft" and both["picks"]["a"]["eval_speedup"] == 1.5
    assert both["picks"]["a"]["eval_best"]["method"] == "ngram"  # the eval half's own best, after the fact
    assert both["picks"]["b"]["method"] == "baseline" and both["picks"]["b"]["eval_speedup"] == 1.0
    assert "c" not in both["picks"]  # no fit-half prompt in that category: nothing was picked for it
    assert both["picked_mean"] == (1.5 + 1.0) / 2 and both["best_after_mean"] == (3.0 + 2.0) / 2
    draft = both["methods"]["draft"]
    assert draft["fit_speedup"] == 4.0 / 3.2 and draft["eval_speedup"] == 6.0 / 4.0
    assert draft["ratio"] == pytest.approx(draft["eval_speedup"] / draft["fit_speedup"])


def test_the_shipped_halves_are_named_prompt_sets_and_both_runs_fit_then_eval(tiny_model_dir):
    assert {r["question_id"] for r in load_prompt_set("fit")}.isdisjoint({r["question_id"] for r in load_prompt_set("eval")})
    with pytest.raises(ParameterError, match="two prompt sets"):
        load_prompt_set("both")
    store = Store()
    said = []
    result = bench(tiny_bench(tiny_model_dir, "both", category="coding", limit=1, methods=["ngram"], peers=False),
                   store=store, progress=said.append)
    assert set(result["halves"]) == {"fit", "eval"} and result["prompt_set"] == "both"
    assert result["measured"] == 2 and len(result["run_ids"]) == 2 and len(result["task_ids"]) == 2
    assert result["summary"] == result["halves"]["eval"]["summary"]
    assert [t["status"] for t in store.list_tasks()] == ["done", "done"]
    assert any(s.startswith("fit half ") for s in said) and any(s.startswith("eval half ") for s in said)
    assert set(result["fit_vs_eval"]["picks"]) == {"coding"} and "ngram" in result["fit_vs_eval"]["methods"]
