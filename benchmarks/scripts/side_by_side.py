"""Two or more settings of one method timed side by side on the same prompts, in ABBA order.

On a shared CPU whose speed drifts by 10% over minutes, a settings comparison run one after the
other measures the drift. Here, per prompt (the first of each category asked, from the fit half by
default: choices are made there), the baseline is timed first and last, and the variants in order
and then in reverse (A B B A), each variant's time the mean of its two runs: a steady drift weighs on
every variant alike. Parameters not given are sized as `run` sizes them.

    .venv/bin/python benchmarks/scripts/side_by_side.py eagle '{"trim": {}, "full": {"trim": false}}' \\
        --categories coding,math,writing,qa,summarization

The draft method loads the target's built-in draft model, also on llama.cpp where it runs here (`{"sized": {}}`
times the sized default; `{"int8": {"draft_quant": "int8"}}` the int8 copy).
An EAGLE variant may name its head (`"head": FOLDER`; the shipped one otherwise), to time two heads:

    .venv/bin/python benchmarks/scripts/side_by_side.py eagle '{"shipped": {}, "new": {"head": "HEAD_DIR"}}' --half eval

A variant may also set environment variables while it runs (`"env": {"SPECPILOT_EAGLE_HEAD": "float32"}`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from contextlib import contextmanager

import torch

from memory import Store
from prompts.spec_bench import half_path, read_jsonl
from tools.bench.context import eos_ids_for, load_cached, load_gguf_draft, prompt_ids_for, sized_params
from tools.engine.methods import MethodContext, parse_params, run
from tools.engine.types import GenerationSettings
from tools.medusa.checkpoint import default_medusa_heads_path, load_medusa_heads
from tools.medusa.eagle_train import load_eagle_for
from tools.models import builtin_draft_for

TARGET = "qwen2.5-coder-1.5b-instruct"


def first_of_each(half: str, categories: list[str]) -> list[dict]:
    rows: dict[str, dict] = {}
    for row in read_jsonl(half_path(half)):
        if row["category"] in categories:
            rows.setdefault(row["category"], row)
    return [rows[c] for c in categories if c in rows]


def variant_context(ctx: MethodContext, target, head: str | None) -> MethodContext:
    """``ctx``, or a copy of it drafting with the EAGLE head in folder ``head``."""
    if head is None or head == "shipped":
        return ctx
    return MethodContext(**{**vars(ctx), "eagle_head": load_eagle_for(target, head)})


@contextmanager
def environment(values: dict[str, str]):
    """``values`` set in the environment while the block runs, the old ones back after."""
    old = {key: os.environ.get(key) for key in values}
    os.environ.update({key: str(value) for key, value in values.items()})
    try:
        yield
    finally:
        for key, value in old.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("method", choices=["eagle", "lookahead", "ngram", "medusa", "draft"])
    parser.add_argument("variants", help='JSON: {"name": {parameters}, ...}')
    parser.add_argument("--half", default="fit", choices=["fit", "eval"])
    parser.add_argument("--categories", default="coding,math,writing,qa,summarization")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--dtype", default="bfloat16")
    args = parser.parse_args()
    torch.set_num_threads(2)
    target = load_cached(TARGET, args.dtype, None, 2)
    ctx = MethodContext(target=target, eagle_head=load_eagle_for(target, None) if args.method == "eagle" else None)
    if args.method == "draft":  # the built-in draft, and on llama.cpp too (draft_quant gguf) where it runs here
        ctx.draft = load_cached(builtin_draft_for(TARGET), args.dtype, None, 2)
        ctx.gguf_draft = load_gguf_draft(argparse.Namespace(draft=None, threads=2), ctx.draft, ["draft"])
    if args.method == "medusa":
        ctx.medusa_heads = load_medusa_heads(target, str(default_medusa_heads_path(TARGET)))
    variants = json.loads(args.variants)
    contexts = {name: variant_context(ctx, target, given.pop("head", None)) for name, given in variants.items()}
    envs = {name: given.pop("env", {}) for name, given in variants.items()}
    # sized as `run` sizes them: from this machine's stored curve, measured first (and stored) where there is none
    sizings = {name: sized_params([args.method], {args.method: given}, Store(), contexts[name])[args.method]
               for name, given in variants.items()}
    for name, sizing in sizings.items():
        print(f"{name}: {'; '.join(sizing.lines())}", file=sys.stderr, flush=True)
    sized = {name: parse_params(args.method, sizing.params) for name, sizing in sizings.items()}
    settings = GenerationSettings(max_new_tokens=args.max_new_tokens, eos_token_ids=eos_ids_for(target))
    names, total = list(sized), {name: [0.0, 0.0] for name in sized}
    for row in first_of_each(args.half, args.categories.split(",")):
        ids = prompt_ids_for(target.tokenizer, row["prompt"], chat=True)
        run("baseline", ctx, ids, settings.model_copy(update={"max_new_tokens": 8}), None)  # warm-up
        first = run("baseline", ctx, ids, settings, None)
        times, per_step = {name: [] for name in names}, {}
        for name in names + names[::-1]:
            with environment(envs[name]):
                result = run(args.method, contexts[name], ids, settings, sized[name])
            times[name].append(result.wall_time_s)
            per_step[name] = round(result.mean_accepted_per_step, 2)
        last = run("baseline", ctx, ids, settings, None)
        base = (first.wall_time_s + last.wall_time_s) / 2
        drift = round(abs(first.wall_time_s - last.wall_time_s) / base, 2)
        line = {"category": row["category"], "baseline_drift": drift}
        for name in names:
            mean = sum(times[name]) / 2
            line[name] = {"speedup": round(base / mean, 2), "tokens_per_step": per_step[name]}
            total[name][0] += base
            total[name][1] += mean
        print(json.dumps(line), flush=True)
    print(json.dumps({"total_speedup": {name: round(b / t, 3) for name, (b, t) in total.items()}}))


if __name__ == "__main__":
    main()
