"""Fit a Medusa tree to a set of heads on this machine (tools.medusa.tree_fit) and store it with them.

1. Answers: the target's own greedy answers to prompts of a JSONL file (Spec-Bench style; default:
   the fit half, prompts/spec_bench_fit.jsonl, so the eval half the benchmarks measure is never
   fitted on), written by specpilot's draft-model decoder (greedy, so the target's output) and cached
   in ``--answers``; categories in ``--exclude`` are left out of the fit and only simulated, and
   ``--held-out FILE`` (e.g. prompts/spec_bench_eval.jsonl) adds prompts that are only simulated.
2. The target reads each prompt + answer once; the heads' top-k at every answer position are
   compared with the tokens that followed (rank_hits).
3. A tree is grown greedily over those positions (fit_tree) and cut to the size that maximises
   tokens per unit of forward time on this machine's cost curve for tree-masked passes.

    .venv/bin/python benchmarks/scripts/fit_medusa_tree.py --answers /tmp/answers.jsonl --write
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from common import FIT_PROMPTS, REPO

CURVE_SIZES = (1, 4, 8, 12, 16, 20, 24, 28, 32, 36, 40, 48)


def simulate_tokens_per_step(tables, tree) -> float:
    """Greedy Medusa along each answer with ``tree``: new tokens per decoding step (prefill excluded)."""
    tokens = steps = 0
    for hits in tables:
        length, j = hits.shape[0] + 1, 0
        while j < length - 1:
            accepted = max((len(c) for c in tree if all(hits[j, d, r] for d, r in enumerate(c))), default=0)
            j += min(accepted, length - 2 - j) + 1
            steps += 1
        tokens += length - 1
    return tokens / max(1, steps)


def _portable(arg: str) -> str:
    """A command-line argument as recorded in the tree file: absolute paths shortened to the file's
    name (the file travels with the repo; the machine's folders do not)."""
    return Path(arg).name if Path(arg).is_absolute() else arg


def main() -> None:
    import argparse

    import torch

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", default="qwen2.5-coder-1.5b-instruct")
    p.add_argument("--heads", default=str(REPO / "tools/data/medusa/qwen2.5-coder-1.5b-instruct"))
    p.add_argument("--prompts", default=str(FIT_PROMPTS), help="prompts to fit on (default: the fit half)")
    p.add_argument("--exclude", default="", help="categories left out of the fit (only simulated)")
    p.add_argument("--held-out", default=None, help="JSONL of prompts only simulated, never fitted on "
                                                   "(e.g. prompts/spec_bench_eval.jsonl)")
    p.add_argument("--limit", type=int, default=None, help="at most this many prompts per category")
    p.add_argument("--answers", required=True, help="JSONL cache of the target's answers (made when missing)")
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--max-nodes", type=int, default=40)
    p.add_argument("--nodes", type=int, default=None, help="keep this many nodes (default: the most tokens "
                                                             "per unit of forward time)")
    p.add_argument("--write", action="store_true", help="store the fitted tree with the heads")
    args = p.parse_args()

    from tools import models
    from tools.engine.cost_curve import forward_cost_curve
    from tools.engine import kv
    from tools.engine.speculative import SpeculativeDecoder
    from tools.engine.types import GenerationSettings
    from tools.medusa.checkpoint import load_heads, save_tree
    from tools.medusa.tree_fit import best_size, curve_cost, fit_tree, rank_hits
    from tools.bench.run import eos_ids_for, prompt_ids_for

    target = models.load(args.target, dtype="bfloat16")
    heads = load_heads(args.heads, target.model)
    excluded = set(filter(None, args.exclude.split(",")))
    rows = [json.loads(line) for line in Path(args.prompts).read_text().splitlines() if line.strip()]
    per_cat: dict[str, int] = {}
    wanted = []
    for row in rows:
        if row["category"] in excluded or per_cat.get(row["category"], 0) >= (args.limit or 10 ** 9):
            continue
        per_cat[row["category"]] = per_cat.get(row["category"], 0) + 1
        wanted.append(row)

    cache_file = Path(args.answers)
    answers = {}
    if cache_file.is_file():
        for line in cache_file.read_text().splitlines():
            rec = json.loads(line)
            answers[rec["question_id"]] = rec
    held_rows = [r for r in rows if r["category"] in excluded]  # simulated with the fitted tree, never fitted on
    if args.held_out:
        lines = Path(args.held_out).read_text().splitlines()
        held_rows += [{**r, "category": f"held-out {r['category']}"} for r in (json.loads(x) for x in lines if x.strip())]
    todo = [r for r in wanted + held_rows if r["question_id"] not in answers]
    if todo:
        draft = models.load("qwen2.5-coder-0.5b-instruct", dtype="bfloat16")
        eos = eos_ids_for(target)
        dec = SpeculativeDecoder(inference=target, draft=draft, k=8, adaptive_k=True, k_max=16, draft_confidence=0.4,
                                 draft_quant="auto", eos_token_ids=eos)
        with cache_file.open("a") as fh:
            for i, row in enumerate(todo):
                ids = prompt_ids_for(target.tokenizer, row["prompt"], True)
                res = dec.run(ids, GenerationSettings(max_new_tokens=args.max_new_tokens, eos_token_ids=eos))
                rec = {"question_id": row["question_id"], "category": row["category"], "prompt_ids": ids,
                       "output_ids": res.output_ids}
                answers[row["question_id"]] = rec
                fh.write(json.dumps(rec) + "\n")
                fh.flush()
                print(f"answer {i + 1}/{len(todo)}: {row['category']} q{row['question_id']}", file=sys.stderr)

    hits = []
    k = 10
    held_out = {}  # evaluation categories: simulated tokens per step with the fitted tree, for information
    with torch.inference_mode():
        for row, fitted in [(r, True) for r in wanted] + [(r, False) for r in held_rows]:
            rec = answers[row["question_id"]]
            P, out = len(rec["prompt_ids"]), rec["output_ids"]
            seq = torch.tensor([rec["prompt_ids"] + out])
            hidden = kv.hidden_forward(target.model, seq, kv.new_cache(target.model),
                                       position_ids=torch.arange(seq.shape[1])[None])
            topk = torch.topk(heads(hidden[P - 1: P - 1 + len(out)]), k, dim=-1).indices.permute(1, 0, 2)
            table = rank_hits(topk.contiguous(), out)
            if fitted:
                hits.append(table)
            else:
                held_out.setdefault(row["category"], []).append(table)
    hits = torch.cat(hits)
    choices, means = fit_tree(hits, args.max_nodes)
    # tree-masked passes after 800 cached tokens, timed in 8 interleaved rounds
    curve = forward_cost_curve(target.model, CURVE_SIZES, cache_len=800, repeats=8, masked=True)
    cost = curve_cost(curve)
    n = args.nodes or best_size(means, cost)
    for size in range(1, len(means) + 1):  # the fit's own table: what each size buys on this machine
        print(f"nodes {size:3d}: accepted {means[size - 1]:.3f}/step, forward {cost(size + 1):.3f}x, "
              f"tokens per unit time {(1 + means[size - 1]) / cost(size + 1):.3f}"
              + (" <- chosen" if size == n else ""), file=sys.stderr)
    tree = choices[:n]
    top1 = [round(float(hits[:, d, 0].float().mean()), 3) for d in range(hits.shape[1])]
    simulated = {cat: round(simulate_tokens_per_step(tables, tree), 3) for cat, tables in held_out.items()}
    info = {"nodes": n, "fit_mean_accepted": round(means[n - 1], 4), "positions": int(hits.shape[0]),
            "fit_prompts": Path(args.prompts).name, "fit_categories": sorted(per_cat), "excluded": sorted(excluded),
            "head_top1": top1,
            "curve_ms": {str(t): round(s * 1000, 1) for t, s in curve.items()},
            "simulated_tokens_per_step_excluded": simulated,
            "command": "benchmarks/scripts/fit_medusa_tree.py " + " ".join(_portable(a) for a in sys.argv[1:])}
    print(json.dumps({"choices": tree, **info}, indent=1))
    if args.write:
        print("wrote", save_tree(args.heads, tree, info))


if __name__ == "__main__":
    main()
