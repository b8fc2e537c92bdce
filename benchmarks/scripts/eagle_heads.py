"""EAGLE heads side by side on the same held-out text: how often each head's first choice is the
target's greedy token at depths 1-3, on the last chunks of the default target's distillation answers
(the chunks `specpilot eagle train --max-tokens N` holds out; features cached as training caches them).

    .venv/bin/python benchmarks/scripts/eagle_heads.py shipped                       # the shipped head
    .venv/bin/python benchmarks/scripts/eagle_heads.py shipped HEAD_DIR --max-tokens 250000 --dtype bfloat16

A head trained with a smaller --max-tokens never saw these chunks either, so the heads are compared on
text none of them learned from. --data names the files as they were trained (a head trained before
distill_mixed.txt was shipped: the other three, in the order `eagle train` reads them).

--answers N compares them instead on the target's greedy answers (96 tokens) to the first eval-half
prompt of each of N categories, which nothing was fitted on: top-1 by depth on the answer, the head fed
the target's features as in training, and the tokens per target pass of a run drafting a fixed 10-node
tree (depth 5, top-4, no cost gate) for 64 new tokens:

    .venv/bin/python benchmarks/scripts/eagle_heads.py OLD_HEAD_DIR shipped --answers 7

(--half fit takes the prompts from the fit half instead, where a choice between heads is made.)
"""

from __future__ import annotations

import argparse
import json

import torch

from tools import models
from tools.bench.context import prompt_ids_for
from tools.bench.suite import load_prompt_set
from tools.engine import eagle
from tools.engine.params import EagleParams
from tools.engine.types import GenerationSettings
from tools.medusa import eagle_train
from tools.medusa.features import cache_chunk_features, chunk_features, load_chunk_features
from tools.medusa.train import tokenize_files

TARGET = "qwen2.5-coder-1.5b-instruct"
FIXED_TREE = EagleParams(pass_costs=None, depth=5, topk=4, tree_nodes=10)


def fused_layers(heads) -> tuple[int, ...]:
    """The inner layers any of ``heads`` fuses (their states are cached with the features)."""
    return tuple(sorted({i for head in heads for i in head.config.fuse_layers}))


def on_answers(target, heads: dict, categories: int, half: str = "eval") -> dict:
    """{category: {head: {"top1_by_depth", "tokens_per_pass"}}} on the target's answers to prompts of ``half``."""
    model = target.model
    embed = model.get_input_embeddings().weight.detach().float()
    lm_head = model.get_output_embeddings().weight.detach().float()
    firsts: dict[str, dict] = {}
    for row in load_prompt_set(half):
        firsts.setdefault(row["category"], row)
    out = {}
    for category, row in list(firsts.items())[:categories]:
        ids = prompt_ids_for(target.tokenizer, row["prompt"], True)
        with torch.no_grad():
            answer = model.generate(torch.tensor([ids]), max_new_tokens=96, do_sample=False)[0].tolist()
        shard = {k: v[len(ids) - 1:] for k, v in chunk_features(model, answer, fused_layers(heads.values())).items()}
        out[category] = {}
        for name, head in heads.items():
            top1 = eagle_train.top1_by_depth(head.float(), [shard], embed, lm_head)
            run = eagle.generate(target, head, ids, GenerationSettings(max_new_tokens=64), FIXED_TREE)
            per_pass = 1 + sum(run.accepted_per_step) / len(run.accepted_per_step)
            out[category][name] = {"top1_by_depth": top1, "tokens_per_pass": round(per_pass, 3)}
            print(f"{category} {name}: top-1 by depth {' '.join(f'{x:.3f}' for x in top1)}, "
                  f"{per_pass:.2f} tokens per pass", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("heads", nargs="+", help="head folders; `shipped` for the one shipped for the target")
    parser.add_argument("--target", default=TARGET)
    parser.add_argument("--data", nargs="*", default=None,
                        help="the training text files, in the order trained (default: those `eagle train` reads)")
    parser.add_argument("--max-tokens", type=int, default=250000, help="the training text's length (as trained)")
    parser.add_argument("--held-out", type=int, default=4, help="chunks at the end of that text")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--answers", type=int, default=0, help="compare on answers to N categories' prompts")
    parser.add_argument("--half", default="eval", choices=["fit", "eval"],
                        help="the Spec-Bench half those prompts come from (fit: to choose a head; eval: to report)")
    args = parser.parse_args()
    torch.set_num_threads(2)
    target = models.load(args.target, dtype=args.dtype)
    model = target.model
    if args.answers:
        heads = {n: eagle_train.load_eagle_for(target, None if n == "shipped" else n) for n in args.heads}
        print(json.dumps({"answers": on_answers(target, heads, args.answers, args.half)}))
        return
    files = args.data or eagle_train.default_data_files(args.target)
    chunks = tokenize_files(target.tokenizer, files, 512, args.max_tokens, 8)
    held = chunks[-args.held_out:]
    heads = {n: eagle_train.load_eagle_for(target, None if n == "shipped" else n) for n in args.heads}
    shards = load_chunk_features(cache_chunk_features(model, held, eagle_train.features_folder(model),
                                                      layers=fused_layers(heads.values())))
    embed = model.get_input_embeddings().weight.detach().float()
    lm_head = model.get_output_embeddings().weight.detach().float()
    out = {}
    for name, head in heads.items():
        out[name] = eagle_train.top1_by_depth(head, shards, embed, lm_head)
        print(f"{name}: top-1 by depth {' '.join(f'{x:.3f}' for x in out[name])}", flush=True)
    print(json.dumps({"held_out_chunks": len(held), "tokens": sum(map(len, held)), "top1_by_depth": out}))


if __name__ == "__main__":
    main()
