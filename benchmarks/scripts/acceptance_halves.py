"""Benchmark: the fitted heads' acceptance on the fit half against the eval half of Spec-Bench.

Whatever was fitted (the Medusa heads and their tree, the EAGLE head, the defaults) is fitted on
prompts of the fit half or on distillation text, never on the eval half. This measures, per method
and category, the tokens each decoding step gives (accepted guesses + the target's own token) and the
share of the proposed path accepted, greedy, with the method's defaults (not sized to this machine: a
sized tree can be one node on a slow CPU, which says nothing about the heads).

The figures are replayed, not timed: the target decodes the prompt greedily once (one pass per token,
keeping every position's final hidden state), then each method's own drafting code proposes its tree
at every step start from those states (Medusa: the heads on the last accepted position's state;
EAGLE: the head's cache over every position read so far, then ``EagleStep.grow``) and the longest
path the target's greedy text confirms is accepted, as the decoder's verification pass would (greedy
decoding is exact, so the text is the same; only floating-point near-ties could differ). One greedy
pass serves every method, so this costs one plain decode per prompt instead of a run per method, and
it does not depend on how busy the machine is.

    .venv/bin/python benchmarks/scripts/acceptance_halves.py --out results/acceptance_halves.json
    .venv/bin/python benchmarks/scripts/acceptance_halves.py --methods medusa --categories coding,math --limit 2
    .venv/bin/python benchmarks/scripts/acceptance_halves.py --methods lookahead --halves fit --lookahead 3,3,1,0

Lookahead is not replayed: its window and n-gram pool follow its own steps, so the decoder itself runs
(every step a full step, the cost gate off) with the W,N,G and prompt-lookup drafts of --lookahead
(what `specpilot guide lookahead` suggests). Its fit-half mean is the gate's prior
(tools.engine.params.LOOKAHEAD_STEP_PRIOR).

Resumable: with --out, finished prompts are read back and skipped.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from common import FIT_PROMPTS, DEFAULT_PROMPTS, load_prompts

HALVES = {"fit": FIT_PROMPTS, "eval": DEFAULT_PROMPTS}


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--methods", default="medusa,eagle", help="comma-separated: medusa, eagle, lookahead")
    p.add_argument("--halves", default="fit,eval", help="comma-separated: fit, eval")
    p.add_argument("--lookahead", default=None,
                   help="W,N,G,prompt-lookup drafts (what `specpilot guide lookahead` suggests)")
    p.add_argument("--eagle-trees", default=None,
                   help="EAGLE trees to replay, comma-separated NODES:DEPTH:TOPK (default: the method's defaults)")
    p.add_argument("--categories", default="all")
    p.add_argument("--limit", type=int, default=1, help="prompts per category and half")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--dtype", default="float32")
    p.add_argument("--target", default="qwen2.5-coder-1.5b-instruct")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    p.add_argument("--out", default=None, help="JSON file of the per-prompt records (read back to resume)")
    return p.parse_args()


def greedy_trace(backend, ids: list[int], budget: int, eos: set[int]):
    """The target's greedy text after ``ids`` (at most ``budget`` tokens) and the final hidden state of
    every position (float32 [positions, hidden]), one pass per token as plain decoding takes it."""
    import torch

    from tools.engine.sampling import greedy_tokens

    cache = backend.new_cache()
    feats = [backend.hidden(torch.tensor([ids]), cache, torch.arange(len(ids))[None])]
    tokens = list(ids)
    for i in range(budget):
        tokens.append(int(greedy_tokens(backend.lm_head(feats[-1][-1:])[0])))
        if tokens[-1] in eos or i == budget - 1:
            break
        feats.append(backend.hidden(torch.tensor([[tokens[-1]]]), cache, torch.tensor([[len(tokens) - 1]])))
    return tokens, torch.cat(feats).float()


def confirmed(tokens: list[int], r: int, path_tokens: list[int]) -> int:
    """How many of a path's guesses after the root at position ``r`` the greedy text confirms."""
    n = 0
    while n < len(path_tokens) and r + n + 1 < len(tokens) and path_tokens[n] == tokens[r + n + 1]:
        n += 1
    return n


def replay_medusa(heads, choices, tokens: list[int], feats, start: int) -> tuple[int, int, int]:
    """(steps, proposed path lengths, accepted guesses) of Medusa over the greedy text from ``start``."""
    import torch

    from tools.engine.medusa import build_tree_buffers

    trees, budget, out, r = {}, len(tokens) - start, 1, start
    steps = drafted = accepted = 0
    while out < budget:
        depth = min(max(len(c) for c in choices), budget - out - 1)
        tree = trees.get(depth) or trees.setdefault(depth, build_tree_buffers([c for c in choices if len(c) <= depth]))
        proposals = heads.topk(feats[r - 1], tree.depth, tree.topk).flatten()
        tree_tokens = torch.cat([torch.tensor([tokens[r]]), proposals])[tree.tree_indices].tolist()
        best = max(confirmed(tokens, r, [tree_tokens[i] for i in path[1:] if i >= 0])
                   for path in tree.retrieve_indices.tolist())
        steps, drafted, accepted = steps + 1, drafted + tree.depth, accepted + best
        out, r = out + best + 1, r + best + 1
    return steps, drafted, accepted


def replay_eagle(step, tokens: list[int], feats, start: int) -> tuple[int, int, int]:
    """(steps, tree depths, accepted guesses) of EAGLE over the greedy text from ``start``: the head reads
    every position once in one causal pass (its cache rows are the same as when read step by step)."""
    import torch

    n = min(len(feats), len(tokens) - 1)  # head rows for positions 1..n
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    out_feats, k, v = step.head(feats[None, :n], step._embed(tokens[1: n + 1]), torch.arange(1, n + 1),
                                *step.head.empty_kv(feats.device, torch.float32), causal)
    budget, out, r = len(tokens) - start, 1, start
    steps = drafted = accepted = 0
    while out < budget:
        steps += 1
        if budget - out == 1:  # the last token: a plain step
            break
        step.tokens, step.dk, step.dv = tokens[: r + 1], k[:, :, :r], v[:, :, :r]
        tree = step.grow(out_feats[0, r - 1], min(step.params.depth, budget - out - 1))
        node, best = 0, 0
        while True:
            nxt = next((c for c in tree.children[node] if r + best + 1 < len(tokens)
                        and tree.tokens[c] == tokens[r + best + 1]), None)
            if nxt is None:
                break
            node, best = nxt, best + 1
        drafted, accepted = drafted + max(tree.depths), accepted + best
        out, r = out + best + 1, r + best + 1
    return steps, drafted, accepted


def lookahead_params(spec: str | None):
    """The lookahead parameters of --lookahead (no cost gate: full steps only)."""
    from tools.engine.params import LookaheadParams

    if not spec:
        sys.exit("give --lookahead W,N,G,L: the values `specpilot guide lookahead` suggests here")
    w, n, g, lookup = (int(v) for v in spec.split(","))
    return LookaheadParams(window=w, ngram=n, guess=g, prompt_lookup=lookup).check()


def run_lookahead(backend, params, ids: list[int], budget: int) -> tuple[int, int, int, int]:
    """(steps, drafted, accepted, new tokens) of one greedy lookahead run, every step a full one."""
    import torch

    from tools.engine.lookahead import generate
    from tools.engine.types import GenerationSettings

    res = generate(backend, torch.tensor([ids]), GenerationSettings(max_new_tokens=budget), params)
    return res.steps, res.tokens_drafted, res.tokens_accepted, res.new_tokens


def measure(args) -> list[dict]:
    import torch

    from tools.bench.context import eos_ids_for, prepare, prompt_ids_for
    from tools.bench.run import RunInput, settings_for
    from tools.engine.backend import as_backend
    from tools.engine.eagle import EagleStep
    from tools.engine.medusa_trees import resolve_tree
    from tools.engine.params import EagleParams, MedusaParams

    if args.threads:
        torch.set_num_threads(args.threads)
    methods = args.methods.split(",")
    out = Path(args.out) if args.out else None
    records = json.loads(out.read_text()) if out and out.is_file() else []
    done = {r["question_id"] for r in records}
    inp = RunInput(method=methods[0], prompt="x", target=args.target, dtype=args.dtype,
                   max_new_tokens=args.max_new_tokens, peers=False)
    ctx = prepare(inp, methods, None, strict=True).ctx
    backend = as_backend(ctx.target)
    eos = set(eos_ids_for(ctx.target))
    if "medusa" in methods:
        ctx.medusa_heads.attach(ctx.target.model)
        _, choices = resolve_tree(MedusaParams().tree, ctx.medusa_heads.num_heads, "cpu",
                                  getattr(ctx.medusa_heads, "tree_choices", None))
    trees = [tuple(int(v) for v in spec.split(":")) for spec in args.eagle_trees.split(",")] if args.eagle_trees else [None]
    eagles = {("eagle" if t is None else "eagle %d:%d:%d" % t):
              EagleStep(backend, ctx.eagle_head, settings_for(inp, ctx),
                        EagleParams() if t is None else EagleParams(tree_nodes=t[0], depth=t[1], topk=t[2]))
              for t in trees} if "eagle" in methods else {}
    look = lookahead_params(args.lookahead) if "lookahead" in methods else None
    for half, path in ((h, HALVES[h]) for h in args.halves.split(",")):
        for row in load_prompts(str(path), args.categories, args.limit):
            if row["question_id"] in done:
                continue
            ids = prompt_ids_for(ctx.target.tokenizer, row["prompt"], True)
            with torch.inference_mode():
                replayed = [m for m in methods if m != "lookahead"]
                tokens, feats = greedy_trace(backend, ids, args.max_new_tokens, eos) if replayed else (ids, None)
                labels = [m for m in methods if m != "eagle"] + list(eagles)
                for method in labels:
                    new = len(tokens) - len(ids)
                    if method == "lookahead":
                        steps, drafted, accepted, new = run_lookahead(backend, look, ids, new or args.max_new_tokens)
                    elif method == "medusa":
                        steps, drafted, accepted = replay_medusa(ctx.medusa_heads, choices, tokens, feats, len(ids))
                    else:
                        steps, drafted, accepted = replay_eagle(eagles[method], tokens, feats, len(ids))
                    rec = {"method": method, "half": half, "category": row["category"],
                           "question_id": row["question_id"], "prompt_tokens": len(ids),
                           "new_tokens": new, "steps": steps,
                           "tokens_per_step": round((new - 1) / max(1, steps), 3),
                           "drafted": drafted, "accepted": accepted}
                    if method == "lookahead":  # the settings its figures belong to (the gate's prior is keyed by them)
                        rec["settings"] = args.lookahead
                    records.append(rec)
                    print(f"{method:7s} {half:4s} {row['category']:15s} q{row['question_id']}: "
                          f"{rec['tokens_per_step']:.2f} tokens/step", file=sys.stderr, flush=True)
            if out:
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_text(json.dumps(records, indent=1))
    return records


def table(records: list[dict]) -> str:
    by = defaultdict(list)
    for r in records:
        by[(r["method"], r["category"], r["half"])].append(r)
    methods = sorted({r["method"] for r in records})
    cats = sorted({r["category"] for r in records})
    lines = ["| method | category | fit: tokens/step | eval: tokens/step | fit: accepted | eval: accepted |",
             "|---|---|---|---|---|---|"]

    def figures(rows):
        if not rows:
            return None, None
        tps = statistics.mean(r["tokens_per_step"] for r in rows)
        drafted = sum(r["drafted"] for r in rows)
        return tps, (sum(r["accepted"] for r in rows) / drafted if drafted else None)

    def cell(value, pct=False):
        return "-" if value is None else (f"{value:.0%}" if pct else f"{value:.2f}")

    for m in methods:
        for c in cats + ["mean of the categories"]:
            if c.startswith("mean"):
                per = {h: [figures(by[(m, k, h)])[0] for k in cats if by[(m, k, h)]] for h in HALVES}
                fit, ev = (statistics.mean(per[h]) if per[h] else None for h in HALVES)
                acc = [figures([r for r in records if r["method"] == m and r["half"] == h])[1] for h in HALVES]
                ratio = f" (eval/fit {ev / fit:.2f})" if fit and ev else ""
                lines.append(f"| {m} | **{c}** | {cell(fit)} | {cell(ev)}{ratio} | {cell(acc[0], True)} | "
                             f"{cell(acc[1], True)} |")
                continue
            (ft, fa), (et, ea) = figures(by[(m, c, "fit")]), figures(by[(m, c, "eval")])
            lines.append(f"| {m} | {c} | {cell(ft)} | {cell(et)} | {cell(fa, True)} | {cell(ea, True)} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table(measure(parse_args())))
