"""Fit prompt lookup's drafting policy: per-token acceptance of a draft by the length of the match behind it.

    .venv/bin/python benchmarks/scripts/ngram_policy.py [--prompts prompts/spec_bench_fit.jsonl] [--limit 2]

Runs prompt lookup (greedy, its default drafts) on the default target's GGUF through the llama.cpp
backend over the FIT half of the shipped Spec-Bench prompts (every category), and counts, for drafts
whose occurrence matches the last 1, 2, ..., 8+ tokens (tools.engine.prompt_lookup.matched_length),
how many of the best draft's tokens were kept in a row and how often a draft was cut short. The
geometric per-token acceptance accepted / (accepted + rejections) per match length, a bucket with
fewer than ``--min-drafts`` drafts pooled with the shorter ones before it, is what
``tools.engine.params.ACCEPTANCE_PRIOR`` holds (printed as a tuple); ``--eval`` prints the same
figures on the eval half beside it, so overfitting shows. Acceptance is a property of the model's
predictions, not of the engine: the llama.cpp backend is used because it is the fast one here.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from common import DEFAULT_PROMPTS, FIT_PROMPTS, load_prompts  # noqa: E402


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--prompts", default=str(FIT_PROMPTS))
    p.add_argument("--eval", action="store_true", help="also count on the eval half")
    p.add_argument("--limit", type=int, default=2, help="prompts per category")
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--min-drafts", type=int, default=20, help="pool a match length with fewer drafts into the one before")
    return p.parse_args()


def count(path: str, args, target, tok) -> dict[int, list[float]]:
    """{match size: [accepted tokens, rejections, drafts]} over the prompts of ``path``."""
    from tools.bench.context import prompt_ids_for
    from tools.engine import prompt_lookup
    from tools.engine.params import PromptLookupParams
    from tools.engine.types import GenerationSettings

    stats: dict[int, list[float]] = {}
    flat = PromptLookupParams(pass_costs=[1.0] * 80)  # a flat curve: the gate always drafts the longest

    class Counting(prompt_lookup.DraftGate):
        def update(self, n, drafted, kept):
            row = stats.setdefault(n, [0.0, 0.0, 0])
            row[0] += kept
            row[1] += kept < drafted
            row[2] += 1

    original = prompt_lookup.DraftGate
    prompt_lookup.DraftGate = Counting
    try:
        for row in load_prompts(path, "all", args.limit):
            ids = prompt_ids_for(tok, row["prompt"], True)
            settings = GenerationSettings(max_new_tokens=args.max_new_tokens, eos_token_ids=[tok.eos_token_id])
            prompt_lookup.generate(target, ids, settings, flat)
            print(f"  {row['category']:22s} {len(ids):5d} prompt tokens", flush=True)
    finally:
        prompt_lookup.DraftGate = original
    return stats


def show(name: str, stats: dict[int, list[float]], min_drafts: int) -> None:
    from tools.engine.prompt_lookup import LONG_MATCH

    print(f"\n{name}: | match length | drafts | accepted tokens | rejections | per-token acceptance | pooled |")
    pooled, acc_sum, rej_sum, drafts_sum = [], 0.0, 0.0, 0
    for n in range(1, LONG_MATCH + 1):
        acc, rej, drafts = stats.get(n, [0.0, 0.0, 0])
        if drafts >= min_drafts or not pooled:
            acc_sum, rej_sum, drafts_sum = acc, rej, drafts
        else:  # too few drafts of this length: pool it with the lengths before it
            acc_sum, rej_sum, drafts_sum = acc_sum + acc, rej_sum + rej, drafts_sum + drafts
        rate = acc_sum / (acc_sum + rej_sum) if acc_sum + rej_sum else 0.0
        pooled.append(round(rate, 2))
        own = acc / (acc + rej) if acc + rej else 0.0
        label = f"{n}+" if n == LONG_MATCH else str(n)
        print(f"| {label} | {drafts} | {acc:.0f} | {rej:.0f} | {own:.3f} | {rate:.3f} |")
    print(f"ACCEPTANCE_PRIOR = {tuple(pooled)}")


def main() -> None:
    args = parse_args()
    import torch
    from transformers import AutoTokenizer

    from tools import models
    from tools.engine.llamacpp import load_gguf

    torch.set_num_threads(args.threads)
    path = models.gguf_path(models.builtin(models.DEFAULT_TARGET))
    if not path.exists():
        sys.exit(f"missing {path}: run `specpilot models fetch`")
    tok = AutoTokenizer.from_pretrained(str(models.converted_path(models.builtin(models.DEFAULT_TARGET))))
    target = load_gguf(path, n_ctx=4096, n_threads=args.threads)
    show("fit half" if args.prompts == str(FIT_PROMPTS) else args.prompts, count(args.prompts, args, target, tok),
         args.min_drafts)
    if args.eval:
        show("eval half", count(str(DEFAULT_PROMPTS), args, target, tok), args.min_drafts)


if __name__ == "__main__":
    main()
