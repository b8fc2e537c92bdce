"""EAGLE heads side by side on the same held-out text: how often each head's first choice is the
target's greedy token at depths 1-3, on the last chunks of the default target's distillation answers
(the chunks `specpilot eagle train --max-tokens N` holds out; features cached as training caches them).

    .venv/bin/python benchmarks/eagle_heads.py shipped                       # the shipped head
    .venv/bin/python benchmarks/eagle_heads.py shipped HEAD_DIR --max-tokens 250000 --dtype bfloat16

A head trained with a smaller --max-tokens never saw these chunks either, so the heads are compared on
text none of them learned from. --data names the files as they were trained (a head trained before
distill_mixed.txt was shipped: the other three, in the order `eagle train` reads them).
"""

from __future__ import annotations

import argparse
import json

import torch

from tools import models
from tools.medusa import eagle_train
from tools.medusa.features import cache_chunk_features, load_chunk_features
from tools.medusa.train import tokenize_files

TARGET = "qwen2.5-coder-1.5b-instruct"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("heads", nargs="+", help="head folders; `shipped` for the one shipped for the target")
    parser.add_argument("--target", default=TARGET)
    parser.add_argument("--data", nargs="*", default=None,
                        help="the training text files, in the order trained (default: those `eagle train` reads)")
    parser.add_argument("--max-tokens", type=int, default=250000, help="the training text's length (as trained)")
    parser.add_argument("--held-out", type=int, default=4, help="chunks at the end of that text")
    parser.add_argument("--dtype", default="bfloat16")
    args = parser.parse_args()
    torch.set_num_threads(2)
    target = models.load(args.target, dtype=args.dtype)
    model = target.model
    files = args.data or eagle_train.default_data_files(args.target)
    chunks = tokenize_files(target.tokenizer, files, 512, args.max_tokens, 8)
    held = chunks[-args.held_out:]
    shards = load_chunk_features(cache_chunk_features(model, held, eagle_train.features_folder(model)))
    embed = model.get_input_embeddings().weight.detach().float()
    lm_head = model.get_output_embeddings().weight.detach().float()
    out = {}
    for name in args.heads:
        head = eagle_train.load_eagle_for(target, None if name == "shipped" else name)
        out[name] = eagle_train.top1_by_depth(head, shards, embed, lm_head)
        print(f"{name}: top-1 by depth {' '.join(f'{x:.3f}' for x in out[name])}", flush=True)
    print(json.dumps({"held_out_chunks": len(held), "tokens": sum(map(len, held)), "top1_by_depth": out}))


if __name__ == "__main__":
    main()
