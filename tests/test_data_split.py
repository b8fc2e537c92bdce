"""The fit/eval split of the Spec-Bench prompts (prompts/spec_bench_{fit,eval}.jsonl): disjoint,
stratified by category, all 13 categories in both halves, deterministic, and read by what fits
(tuning, the Medusa tree fit) and what measures (the benchmarks) from the right half. That the Medusa
distillation prompts share nothing with either half is tested beside the other distillation-prompt tests
(tests/test_medusa_data.py), in the one process that parses the standard library for them."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from prompts.spec_bench import EVAL_PATH, FIT_PATH, load_half, read_jsonl, shipped_union, split_rows

REPO = Path(__file__).resolve().parents[1]
CATEGORIES = {"coding", "extraction", "humanities", "math", "math_reasoning", "qa", "rag", "reasoning", "roleplay",
              "stem", "summarization", "translation", "writing"}


def test_the_halves_are_disjoint_and_cover_all_13_categories():
    fit, evaluation = load_half("fit"), load_half("eval")
    fit_ids, eval_ids = {r["question_id"] for r in fit}, {r["question_id"] for r in evaluation}
    assert len(fit_ids) == len(fit) and len(eval_ids) == len(evaluation)  # no prompt twice in a half
    assert not fit_ids & eval_ids
    assert not {r["prompt"] for r in fit} & {r["prompt"] for r in evaluation}
    assert {r["category"] for r in fit} == CATEGORIES == {r["category"] for r in evaluation}
    assert len(fit) + len(evaluation) == 115
    assert all(set(r) == {"question_id", "category", "prompt"} and r["prompt"].strip() for r in fit + evaluation)


def test_each_category_is_split_in_half_with_the_odd_prompt_in_eval():
    fit = Counter(r["category"] for r in load_half("fit"))
    evaluation = Counter(r["category"] for r in load_half("eval"))
    for category in CATEGORIES:
        total = fit[category] + evaluation[category]
        assert fit[category] == total // 2 and evaluation[category] == total - total // 2


def test_the_split_is_deterministic_and_regenerates_the_shipped_files():
    union = shipped_union()
    assert split_rows(union) == (read_jsonl(FIT_PATH), read_jsonl(EVAL_PATH))
    shuffled = list(reversed(union))  # the input's order does not move a prompt to the other half
    fit, evaluation = split_rows(shuffled)
    assert {r["question_id"] for r in fit} == {r["question_id"] for r in load_half("fit")}
    assert {r["question_id"] for r in evaluation} == {r["question_id"] for r in load_half("eval")}


def test_the_split_needs_unique_question_ids():
    with pytest.raises(ValueError, match="question_id repeats"):
        split_rows([{"question_id": 1, "category": "a", "prompt": "x"}] * 2)


def test_the_halves_are_exactly_the_shared_development_file(spec_bench_path):
    source = [json.loads(line) for line in spec_bench_path.read_text().splitlines() if line.strip()]
    assert sorted(source, key=lambda r: r["question_id"]) == shipped_union()


def test_the_script_checks_the_shipped_files():
    import subprocess
    import sys

    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "scripts" / "split_spec_bench.py"), "--check"],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "shipped files match" in done.stdout


def test_fitting_reads_the_fit_half_and_benchmarks_the_eval_half():
    from tools.bench.tune import TuneInput, pick_prompts

    fit_ids = {r["question_id"] for r in load_half("fit")}
    picked = pick_prompts(TuneInput(method="draft").prompts, None, 13)
    assert {r["question_id"] for r in picked} <= fit_ids and len({r["category"] for r in picked}) == 13
    fit_script = (REPO / "benchmarks" / "scripts" / "fit_medusa_tree.py").read_text()
    assert "FIT_PROMPTS" in fit_script and "DEFAULT_PROMPTS" not in fit_script
    common = (REPO / "benchmarks" / "scripts" / "common.py").read_text()
    assert "EVAL_PATH" in common and "shared" not in common.split("DEFAULT_PROMPTS =", 1)[1].splitlines()[0]
