"""Fit ``auto`` (tools.bench.auto) from a fit-half bench result and write the shipped table of its dtype,
prompts/auto_methods.json (bfloat16) or prompts/auto_methods_<dtype>.json: each fit prompt's measured speedup
per method, the CPU and dtype they were measured on, and the kernel width chosen by leave-one-out over the fit
prompts (each prompt's pick predicted from the others, scored by the speedup that method measured on it).
Nothing from the eval half is read.

    .venv/bin/python benchmarks/scripts/fit_auto_methods.py benchmarks/results/NAME.json

Prints, per width, the leave-one-out mean speedup of auto's picks beside the best single method and the
per-prompt best (the ceiling).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from prompts.spec_bench import FIT_PATH, read_jsonl  # noqa: E402
from tools.bench.auto import FIT_SET, FitPrompt, predict, prompt_features, table_file  # noqa: E402

WIDTHS = (0.5, 0.75, 1.0, 1.5, 2.0, 4.0)


def fit_prompts_of(result: dict) -> list[FitPrompt]:
    """The fit prompts of a suite result: each measured method's speedup per prompt (auto's rows and peers
    left out)."""
    texts = {row["question_id"]: row for row in read_jsonl(FIT_PATH)}
    by_id: dict[int, FitPrompt] = {}
    for row in result["rows"]:
        if row.get("peer") or row.get("method") in (None, "auto", "baseline") or row.get("speedup") is None:
            continue
        if row.get("matches_baseline") is False and row.get("divergence") != "near_tie":
            continue  # not the target's output: no figure to learn from
        if row.get("prompt_set") not in (None, FIT_SET) or row["question_id"] not in texts:
            raise SystemExit(f"row q{row['question_id']} is not from the fit half ({row.get('prompt_set')}): "
                             "fit auto on `specpilot bench --prompts fit` only")
        text = texts[row["question_id"]]["prompt"]
        fit = by_id.setdefault(row["question_id"], FitPrompt(row["question_id"], row["category"],
                                                             prompt_features(text), {}, text))
        fit.speedups[row["method"]] = row["speedup"]
    return list(by_id.values())


def leave_one_out(fits: list[FitPrompt], width: float) -> float:
    """The mean measured speedup of auto's picks, each fit prompt's pick predicted from the others."""
    picked = []
    for i, p in enumerate(fits):
        predicted, _ = predict(p.features, fits[:i] + fits[i + 1:], width, list(p.speedups))
        if predicted:  # a prompt whose methods no other prompt has predicts nothing
            picked.append(p.speedups[max(predicted, key=predicted.get)])
    if not picked:
        raise SystemExit("too few fit prompts to leave one out: bench more of the fit half")
    return statistics.mean(picked)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("result", type=Path, help="a suite result of `specpilot bench --prompts fit --save-result`")
    parser.add_argument("--check", action="store_true", help="report only; write nothing")
    args = parser.parse_args(argv)
    result = json.loads(args.result.read_text(encoding="utf-8"))
    fits = fit_prompts_of(result)
    methods = sorted({m for p in fits for m in p.speedups})
    print(f"{len(fits)} fit prompts, methods {', '.join(methods)} ({result['hardware'].get('name')}, {result['dtype']})")
    for m in methods:
        print(f"  {m}: mean speedup {statistics.mean(p.speedups[m] for p in fits if m in p.speedups):.2f}x")
    print(f"  per-prompt best (ceiling): {statistics.mean(max(p.speedups.values()) for p in fits):.2f}x")
    scores = {w: leave_one_out(fits, w) for w in WIDTHS}
    for w, score in scores.items():
        print(f"  auto, kernel width {w:g}: {score:.2f}x mean (leave one out)")
    width = max(scores, key=lambda w: (round(scores[w], 4), w))
    table = {"hardware": result["hardware"].get("name"), "dtype": result["dtype"], "source": args.result.name,
             "command": result.get("command"), "commit": result.get("commit"), "date": result.get("date"),
             "kernel_width": width, "leave_one_out_speedup": round(scores[width], 3),
             "prompts": [{"question_id": p.question_id, "category": p.category, "prompt": p.prompt,
                          "speedups": {m: round(s, 3) for m, s in sorted(p.speedups.items())}} for p in fits]}
    if not args.check:
        out = ROOT / "prompts" / table_file(result["dtype"])  # one table per dtype
        out.write_text(json.dumps(table, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"wrote {out.relative_to(ROOT)} (kernel width {width:g})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
