"""The Spec-Bench prompts shipped with specpilot, split once into a fit half and an eval half.

Everything that is fitted (Medusa trees and the heads' distillation checks, tuning sweeps, the
machine-sizing constants, prompt-lookup policies) reads only the fit half; every benchmark figure is
measured on the eval half, so a gap between the two halves shows overfitting.

The split is deterministic and stratified by category: within each category the prompts are
ordered by ``sha256(f"{SPLIT_SEED}:{question_id}")`` and the first ``n // 2`` go to the fit half,
the rest (``n - n // 2``, the larger half when ``n`` is odd) to the eval half. So every category
is in both halves, and rerunning the split on the same prompts (or on the union of the two
halves) gives the same files: ``benchmarks/scripts/split_spec_bench.py`` regenerates them.

Source: Spec-Bench (Xia et al. 2024, arXiv 2401.07851; Apache-2.0, ``SPEC_BENCH_LICENSE.txt``
beside the files): the 115 prompts of its 13 categories kept for development.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
FIT_PATH = HERE / "spec_bench_fit.jsonl"
EVAL_PATH = HERE / "spec_bench_eval.jsonl"
SPLIT_SEED = "specpilot-spec-bench-split-v1"
HALVES = {"fit": FIT_PATH, "eval": EVAL_PATH}


def read_jsonl(path: str | Path) -> list[dict]:
    """The rows of a JSONL file (blank lines skipped)."""
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]


def _order_key(row: dict) -> str:
    return hashlib.sha256(f"{SPLIT_SEED}:{row['question_id']}".encode()).hexdigest()


def split_rows(rows: list[dict]) -> tuple[list[dict], list[dict]]:
    """(fit, eval): each category's prompts ordered by the seeded hash of their question id, the first
    half (rounded down) to fit and the rest to eval; both halves keep the input's row order."""
    ids = [row["question_id"] for row in rows]
    if len(set(ids)) != len(ids):
        raise ValueError("question_id repeats: the split needs one row per question id")
    by_category: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        by_category[row["category"]].append(row)
    fit_ids = set()
    for category_rows in by_category.values():
        ordered = sorted(category_rows, key=_order_key)
        fit_ids.update(row["question_id"] for row in ordered[: len(ordered) // 2])
    return ([r for r in rows if r["question_id"] in fit_ids], [r for r in rows if r["question_id"] not in fit_ids])


def half_path(half: str) -> Path:
    """The shipped file of ``half`` ("fit" or "eval")."""
    if half not in HALVES:
        raise ValueError(f"unknown half {half!r}: use 'fit' or 'eval'")
    return HALVES[half]


def load_half(half: str) -> list[dict]:
    """The shipped prompts of ``half``: dicts with question_id, category and prompt."""
    return read_jsonl(half_path(half))


def shipped_union() -> list[dict]:
    """Both shipped halves together, ordered by question id (the source rows of a re-split)."""
    return sorted(load_half("fit") + load_half("eval"), key=lambda r: r["question_id"])


def write_jsonl(rows: list[dict], path: str | Path) -> Path:
    """Write ``rows`` one JSON object per line (keys question_id, category, prompt first)."""
    path = Path(path)
    lines = [json.dumps({"question_id": r["question_id"], "category": r["category"], "prompt": r["prompt"],
                         **{k: v for k, v in r.items() if k not in ("question_id", "category", "prompt")}},
                        ensure_ascii=False) for r in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path
