"""llama.cpp's own plain decoding against specpilot's decoders on the llama.cpp backend.

    .venv/bin/python benchmarks/scripts/llamacpp_speed.py [--categories coding,summarization,math] [--repeats 2]

Default target GGUF (Qwen2.5-Coder-1.5B-Instruct Q4_K_M) on 2 threads, 128 new tokens, greedy, one
prompt per category from the shipped Spec-Bench eval prompts (chat template applied by the model's
transformers tokenizer, so every engine gets the same prompt ids). Per prompt, after a warm-up, the
runs alternate: llama.cpp plain (high-level ``llama_cpp.Llama``, temperature 0), our baseline on
``LlamaCppBackend``, prompt lookup and draft-model decoding (0.5B GGUF draft) on the backend. Prints
the median tokens/s (new tokens / wall time, prefill included), speedups and whether each output
equals llama.cpp's own.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from common import DEFAULT_PROMPTS, load_prompts  # noqa: E402

METHODS = ("llama.cpp plain", "baseline", "ngram", "ngram-short", "ngram-sized", "draft", "draft-sized", "lookahead",
           "lookahead-sized", "lookahead-sized-alone")
SIZED = ("ngram-sized", "draft-sized", "lookahead-sized")  # sized as run and compare size them on this backend
# prompt lookup sized for llama.cpp on a CPU, where a verification pass over n tokens costs far more than
# one token (measured: ~2x at 4 tokens, ~5-6x at 16): one draft of up to 4 tokens, growing to 8
SHORT_NGRAM = '{"num_candidates": 1, "num_candidate_tokens": 4, "max_candidate_tokens": 8, "max_draft_tokens": 8}'


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--prompts", default=str(DEFAULT_PROMPTS))
    p.add_argument("--categories", default="coding,summarization,math")
    p.add_argument("--limit", type=int, default=1, help="prompts per category")
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--n-ctx", type=int, default=4096)
    p.add_argument("--repeats", type=int, default=2, help="timed runs of each method per prompt (after a warm-up)")
    p.add_argument("--methods", default="llama.cpp plain,baseline,ngram,ngram-short,draft",
                   help=f"from: {', '.join(METHODS)}")
    p.add_argument("--draft-params", default='{"k": 4, "adaptive_k": true, "k_max": 8, "draft_confidence": 0.5}')
    p.add_argument("--ngram-params", default="{}", help="prompt lookup's parameters (default: its defaults)")
    p.add_argument("--ngram-short-params", default=SHORT_NGRAM)
    p.add_argument("--out", default=None, help="write the per-run records as JSON here")
    return p.parse_args()


def setup(args):
    import torch
    from transformers import AutoTokenizer

    from tools import models
    from tools.engine.llamacpp import LlamaReference, load_gguf

    torch.set_num_threads(args.threads)
    paths = [models.gguf_path(models.builtin(n)) for n in (models.DEFAULT_TARGET, models.DEFAULT_DRAFT)]
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        sys.exit(f"missing {', '.join(missing)}: run `specpilot models fetch`")
    hf = models.converted_path(models.builtin(models.DEFAULT_TARGET))
    tok = (AutoTokenizer.from_pretrained(str(hf)) if (hf / "tokenizer.json").exists()
           else AutoTokenizer.from_pretrained(str(paths[0].parent), gguf_file=paths[0].name))
    target = load_gguf(paths[0], n_ctx=args.n_ctx, n_threads=args.threads)
    draft = load_gguf(paths[1], n_ctx=args.n_ctx, n_threads=args.threads)
    reference = LlamaReference(paths[0], n_ctx=args.n_ctx, n_threads=args.threads)
    return tok, target, draft, reference


def sized(target, draft, methods: list[str]) -> dict:
    """The "-sized" methods' parameters as run and compare size them on llama.cpp: this machine's cost
    curve measured on the backend now (tools.bench.machine_cost.backend_cost_curve; the draft's one-token
    time beside it), then tools.bench.sizing.size_params, which sets the sizes and the cost gates
    (``pass_costs``: no speculation where a plain step is cheaper)."""
    from tools.bench.machine_cost import MachineCost, backend_cost_curve, one_token_time
    from tools.bench.sizing import size_params
    from tools.engine.params import parse_params

    wanted = [m for m in SIZED if m in methods]
    if not wanted:
        return {}
    curve = backend_cost_curve(target)
    print("llama.cpp cost curve (s): " + ", ".join(f"{n}: {t:.4f}" for n, t in curve.items()), flush=True)
    machine = MachineCost("cpu", "this CPU", curve, "measured now", backend="llamacpp")
    if "draft-sized" in wanted:
        machine.draft_ratio = one_token_time(backend_cost_curve(draft, sizes=(1, 2))) / one_token_time(curve)
        machine.draft_source = "the draft GGUF's one-token pass, measured now"
    out = {}
    for name in wanted:
        method = name.removesuffix("-sized")
        sizing = size_params(method, machine)
        for line in sizing.lines():
            print(f"  {name} {line}", flush=True)
        out[name] = parse_params(method, sizing.params)
    return out


def runners(args, target, draft, reference, eos):
    """(method -> run(prompt_ids, max_new_tokens) -> (tokens, wall seconds, tokens per target forward, acceptance),
    rerun(method, prompt_ids) -> the diagnosis's replay of that method, None for llama.cpp's own)."""
    from tools.engine import autoregressive, lookahead, prompt_lookup
    from tools.engine.llamacpp import draft_generate
    from tools.engine.params import DraftParams, LookaheadParams, PromptLookupParams
    from tools.engine.types import GenerationSettings

    draft_params = DraftParams(**json.loads(args.draft_params))
    ngram_params = PromptLookupParams(**json.loads(args.ngram_params))
    short_params = PromptLookupParams(**json.loads(args.ngram_short_params))
    sized_params = sized(target, draft, args.methods.split(","))

    decoders = {"baseline": lambda b, ids, s: autoregressive.generate(b, ids, s),
                "ngram": lambda b, ids, s: prompt_lookup.generate(b, ids, s, ngram_params),
                "ngram-short": lambda b, ids, s: prompt_lookup.generate(b, ids, s, short_params),
                "ngram-sized": lambda b, ids, s: prompt_lookup.generate(b, ids, s, sized_params["ngram-sized"]),
                "draft": lambda b, ids, s: draft_generate(b, draft, ids, s, draft_params),
                "draft-sized": lambda b, ids, s: draft_generate(b, draft, ids, s, sized_params["draft-sized"]),
                "lookahead": lambda b, ids, s: lookahead.generate(b, ids, s, LookaheadParams()),
                "lookahead-sized": lambda b, ids, s: lookahead.generate(b, ids, s, sized_params["lookahead-sized"]),
                # the sized window without its prompt-lookup draft: what the draft adds, side by side
                "lookahead-sized-alone": lambda b, ids, s: lookahead.generate(
                    b, ids, s, sized_params["lookahead-sized"].model_copy(update={"prompt_lookup": 0}))}

    def ours(fn):
        def run(ids, n):
            r = fn(target, ids, GenerationSettings(max_new_tokens=n, eos_token_ids=eos))
            return r.output_ids, r.wall_time_s, r.mean_accepted_per_step, r.acceptance_rate
        return run

    def plain(ids, n):
        out, wall = reference.greedy(ids, n, eos)
        return out, wall, 1.0, None

    def rerun(method, ids):  # the divergence diagnosis replays a method through a recording backend
        fn = decoders.get(method)
        return None if fn is None else (
            lambda backend: fn(backend, ids, GenerationSettings(max_new_tokens=args.max_new_tokens,
                                                                eos_token_ids=eos)).output_ids)

    table = {"llama.cpp plain": plain, **{m: ours(fn) for m, fn in decoders.items()}}
    return {m: table[m] for m in args.methods.split(",")}, rerun


def measure(args, run, prompts_ids, diagnose) -> list[dict]:
    records = []
    for fn in run.values():  # warm-up: every method once, short
        fn(prompts_ids[0][1], 8)
    for row, ids in prompts_ids:
        print(f"[{row['category']}] {len(ids)} prompt tokens", flush=True)
        walls = {m: [] for m in run}
        outs = {}
        order = list(run)
        for rep in range(args.repeats):
            for m in order[rep % len(order):] + order[: rep % len(order)]:  # rotate who goes first
                out, wall, per_fwd, acc = run[m](ids, args.max_new_tokens)
                walls[m].append(wall)
                outs[m] = (out, per_fwd, acc)
                print(f"  {m:16s} {len(out) / wall:6.2f} tok/s  ({len(out)} tokens, {wall:.2f} s)", flush=True)
        ref = outs.get("llama.cpp plain", outs.get("baseline"))[0]
        for m in run:
            out, per_fwd, acc = outs[m]
            why = diagnose(m, ids, ref, out) if out != ref else None
            records.append({"category": row["category"], "question_id": row.get("question_id"), "method": m,
                            "prompt_tokens": len(ids), "new_tokens": len(out), "wall_s": statistics.median(walls[m]),
                            "walls": walls[m], "tokens_per_forward": per_fwd, "acceptance": acc,
                            "identical": out == ref, "divergence": why})
    return records


def report(records: list[dict], methods: list[str]) -> None:
    cats = list(dict.fromkeys(r["category"] for r in records))
    head = "| category | prompt tokens | " + " | ".join(f"{m} tok/s" for m in methods) + " | " + \
        " | ".join(f"{m} vs llama.cpp" for m in methods[1:]) + " | identical |"
    print("\n" + head + "\n|" + "---|" * (head.count("|") - 1))
    for cat in cats:
        rows = {r["method"]: r for r in records if r["category"] == cat}
        ref = rows[methods[0]]["wall_s"] / rows[methods[0]]["new_tokens"]
        tps = [rows[m]["new_tokens"] / rows[m]["wall_s"] for m in methods]
        speed = [ref / (rows[m]["wall_s"] / rows[m]["new_tokens"]) for m in methods[1:]]
        same = ", ".join(f"{m}: " + ("yes" if rows[m]["identical"] else
                                     f"{rows[m]['divergence']['kind']} at token {rows[m]['divergence']['position']}")
                         for m in methods[1:])
        extra = "; ".join(f"{m} {rows[m]['tokens_per_forward']:.2f} tok/fwd"
                          + (f", acc {rows[m]['acceptance']:.0%}" if rows[m]["acceptance"] is not None else "")
                          for m in methods if m not in ("llama.cpp plain", "baseline"))
        print(f"| {cat} | {rows[methods[0]]['prompt_tokens']} | " + " | ".join(f"{t:.2f}" for t in tps) + " | "
              + " | ".join(f"{s:.2f}x" for s in speed) + f" | {same} |  {extra}")


def overall(records: list[dict], methods: list[str]) -> None:
    """The geometric mean over categories of each method's speed over the first column's (and the worst)."""
    import math

    cats = list(dict.fromkeys(r["category"] for r in records))
    per = {m: [] for m in methods[1:]}
    for cat in cats:
        rows = {r["method"]: r for r in records if r["category"] == cat}
        ref = rows[methods[0]]["wall_s"] / rows[methods[0]]["new_tokens"]
        for m in methods[1:]:
            per[m].append(ref / (rows[m]["wall_s"] / rows[m]["new_tokens"]))
    print(f"\nover {len(cats)} categories, against {methods[0]}: " + "; ".join(
        f"{m} geomean {math.exp(sum(map(math.log, v)) / len(v)):.2f}x (worst {min(v):.2f}x)" for m, v in per.items()))


def main() -> None:
    args = parse_args()
    from tools.bench.context import prompt_ids_for

    tok, target, draft, reference = setup(args)
    eos = sorted({tok.eos_token_id, target.tokenizer.eos_token_id})
    rows = load_prompts(args.prompts, args.categories, args.limit)
    prompts_ids = [(row, prompt_ids_for(tok, row["prompt"], True)) for row in rows]
    run, rerun = runners(args, target, draft, reference, eos)
    from tools.engine.llamacpp import diagnose_divergence

    records = measure(args, run, prompts_ids,
                      lambda m, ids, ref, out: diagnose_divergence(target, ids, ref, out, rerun=rerun(m, ids)))
    report(records, list(run))
    overall(records, list(run))
    if args.out:
        Path(args.out).write_text(json.dumps(records, indent=1))


if __name__ == "__main__":
    main()
