"""Shared benchmark driver: one method against the baseline and transformers' peers over Spec-Bench
prompts, measured side by side in one process (ratios, not absolute times, are what carry over)."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
# the figures, not transformers' progress bars and notices (read when transformers is first imported, later)
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
# the eval half of the shipped Spec-Bench prompts (prompts/spec_bench.py): the figures in docs/ are measured on
# prompts nothing was fitted on; pass --prompts prompts/spec_bench_fit.jsonl for the fit half beside them
from prompts.spec_bench import EVAL_PATH, FIT_PATH  # noqa: E402

DEFAULT_PROMPTS = EVAL_PATH
FIT_PROMPTS = FIT_PATH


def base_parser(description: str, categories: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--prompts", default=str(DEFAULT_PROMPTS), help="Spec-Bench style JSONL (question_id, category, prompt)")
    p.add_argument("--categories", default=categories, help="comma-separated categories, or 'all'")
    p.add_argument("--limit", type=int, default=None, help="at most this many prompts per category")
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--target", default="qwen2.5-coder-1.5b-instruct")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--params", default="{}", help="JSON of the method's parameters")
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--no-peers", action="store_true")
    p.add_argument("--out", default=None, help="write all records as JSON here")
    return p


def load_prompts(path: str, categories: str, limit: int | None) -> list[dict]:
    file = Path(path)
    if not file.is_file():
        sys.exit(f"prompt file {file} not found: pass --prompts FILE.jsonl")
    rows = [json.loads(line) for line in file.read_text().splitlines() if line.strip()]
    wanted = None if categories == "all" else set(categories.split(","))
    picked, per_cat = [], defaultdict(int)
    for row in rows:
        if wanted is not None and row["category"] not in wanted:
            continue
        if limit is not None and per_cat[row["category"]] >= limit:
            continue
        per_cat[row["category"]] += 1
        picked.append(row)
    return picked


def run_benchmark(method: str, args, draft: str | None = None, extra_runners=None, medusa_heads: str | None = None) -> list[dict]:
    """Measure ``method`` with baseline and peers on every prompt; print a table; return the records."""
    import torch

    from tools.bench import protocol as measure
    from tools.bench.run import RunInput, build_context, measure_method, prompt_ids_for, settings_for

    torch.manual_seed(0)
    prompts = load_prompts(args.prompts, args.categories, args.limit)
    records = []
    ctx = None
    for i, row in enumerate(prompts):
        inp = RunInput(method=method, prompt=row["prompt"], target=args.target, draft=draft, medusa_heads=medusa_heads,
                       params=json.loads(args.params), max_new_tokens=args.max_new_tokens, dtype=args.dtype,
                       temperature=args.temperature,
                       repeats=args.repeats, peers=not args.no_peers)
        ctx = ctx or build_context(inp)
        ids = prompt_ids_for(ctx.target.tokenizer, inp.prompt, True)
        rec = measure_method(inp, ctx, ids, settings_for(inp, ctx),
                             progress=lambda m: print(f"  [{i + 1}/{len(prompts)}] {m}", file=sys.stderr, flush=True))
        rec.question_id, rec.category = row.get("question_id"), row["category"]
        rec = rec.to_store()
        records.append(rec)
        peers = rec["peers"]
        print(f"{row['category']:>15} q{row.get('question_id')}: {method} {rec['speedup']:.2f}x "
              f"(tok/step {rec['mean_accepted_per_step']:.2f}, acc {_pct(rec['acceptance_rate'])}, "
              f"same={rec['matches_baseline']})"
              + "".join(f" | {k} {v['speedup']:.2f}x" for k, v in peers.items()), flush=True)
    print_summary(method, records)
    if args.out:
        Path(args.out).write_text(json.dumps(records, default=str, indent=1))
    hw = measure.hardware_info(ctx.target.device) if ctx else {}
    print(f"\nhardware: {hw.get('name')} · dtype {args.dtype} · {args.max_new_tokens} new tokens · "
          f"median of {args.repeats} after warm-up · {measure.versions()}")
    return records


def _pct(x):
    return "—" if x is None else f"{100 * x:.0f}%"


def print_summary(method: str, records: list[dict]) -> None:
    by_cat = defaultdict(list)
    for r in records:
        by_cat[r["category"]].append(r)
    by_cat["overall"] = records
    peer_names = sorted({k for r in records for k in r["peers"]})
    head = f"| category | n | {method} speedup | tokens/step | acceptance | identical |" + "".join(
        f" {p} speedup |" for p in peer_names) + "".join(f" {method} / {p} |" for p in peer_names)
    print("\n" + head)
    print("|" + "---|" * (head.count("|") - 1))
    for cat, rows in by_cat.items():
        sp = statistics.mean(r["speedup"] for r in rows)
        tps = statistics.mean(r["mean_accepted_per_step"] for r in rows)
        accs = [r["acceptance_rate"] for r in rows if r["acceptance_rate"] is not None]
        compared = [r for r in rows if r["matches_baseline"] is not None]  # None: sampled, no single right output
        same = f"{sum(1 for r in compared if r['matches_baseline'])}/{len(compared)}" if compared else "n/a (sampled)"
        line = f"| {cat} | {len(rows)} | {sp:.2f}x | {tps:.2f} | {_pct(statistics.mean(accs)) if accs else '—'} | {same} |"
        for p in peer_names:
            line += f" {statistics.mean(r['peers'][p]['speedup'] for r in rows):.2f}x |"
        for p in peer_names:
            # ratio of total wall time, prompt by prompt in the same run
            ratio = statistics.mean(r["peers"][p]["wall_time_s"] / r["wall_time_s"] for r in rows)
            line += f" {ratio:.2f}x |"
        print(line)
