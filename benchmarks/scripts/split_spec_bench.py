"""Split the Spec-Bench development prompts into the fit half and the eval half shipped in prompts/.

Deterministic and stratified by category (prompts.spec_bench.split_rows): rerunning it on the same
prompts writes the same two files. Without ``--source`` it reads ../shared/data/spec_bench_dev.jsonl
when that file is beside the checkout, else the union of the two shipped halves (so the split can
be checked, and regenerated, from the repository alone).

    .venv/bin/python benchmarks/scripts/split_spec_bench.py            # rewrite prompts/spec_bench_{fit,eval}.jsonl
    .venv/bin/python benchmarks/scripts/split_spec_bench.py --check    # fail if the shipped files differ
"""

from __future__ import annotations

import argparse
import shutil
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from prompts.spec_bench import EVAL_PATH, FIT_PATH, read_jsonl, shipped_union, split_rows, write_jsonl  # noqa: E402

SHARED_SOURCE = REPO.parent / "shared" / "data" / "spec_bench_dev.jsonl"
SHARED_LICENSE = SHARED_SOURCE.parent / "SPEC_BENCH_LICENSE"
LICENSE_COPY = FIT_PATH.parent / "SPEC_BENCH_LICENSE.txt"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--source", default=None, help="Spec-Bench style JSONL (default: ../shared's dev file, "
                                                  "else the shipped halves)")
    p.add_argument("--check", action="store_true", help="compare with the shipped files instead of writing them")
    args = p.parse_args(argv)
    if args.source:
        rows, source = read_jsonl(args.source), args.source
    elif SHARED_SOURCE.is_file():
        rows, source = read_jsonl(SHARED_SOURCE), str(SHARED_SOURCE)
    else:
        rows, source = shipped_union(), "the shipped halves"
    fit, evaluation = split_rows(rows)
    fit_cats, eval_cats = Counter(r["category"] for r in fit), Counter(r["category"] for r in evaluation)
    for cat in sorted(set(fit_cats) | set(eval_cats)):
        print(f"{cat:>16}: fit {fit_cats[cat]:2d}  eval {eval_cats[cat]:2d}")
    print(f"{len(rows)} prompts from {source}: fit {len(fit)}, eval {len(evaluation)}")
    if args.check:
        same = read_jsonl(FIT_PATH) == fit and read_jsonl(EVAL_PATH) == evaluation
        print("shipped files match" if same else "shipped files DIFFER from this split")
        return 0 if same else 1
    print("wrote", write_jsonl(fit, FIT_PATH), "and", write_jsonl(evaluation, EVAL_PATH))
    if SHARED_LICENSE.is_file() and not LICENSE_COPY.is_file():
        shutil.copyfile(SHARED_LICENSE, LICENSE_COPY)
        print("copied the Spec-Bench licence to", LICENSE_COPY)
    return 0


if __name__ == "__main__":
    sys.exit(main())
