"""Does fusing the target's inner layers (EAGLE-3's idea) help the EAGLE head here? A side-by-side probe.

Two heads continue from the shipped one for the same steps on the same chunks of its training text
(the first ``--chunks`` chunks, features cached with the inner layers' states): one as it is, one also
fusing ``--fuse`` layers (its fusion starts as the final feature alone, so both start as the shipped
head). Each is then scored, beside the shipped head, on the 4 held-out chunks and on the target's
greedy answers (96 tokens) to the first eval-half prompt of every category: how often the head's
first choice is the target's token at depths 1-3. Continuing alone is the control: what the fused
head gains beyond it is what fusion gives.

    .venv/bin/python benchmarks/eagle_fusion_probe.py --out DIR            # ~16 min of features, 2 x 11 min
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from tools import models
from tools.bench.context import prompt_ids_for
from tools.bench.suite import load_prompt_set
from tools.medusa import eagle_train
from tools.medusa.features import cache_chunk_features, chunk_features, load_chunk_features
from tools.medusa.train import tokenize_files

TARGET = "qwen2.5-coder-1.5b-instruct"


def answers(target, layers: tuple[int, ...]) -> dict[str, dict]:
    """Feature shards of the target's greedy answers to the first eval-half prompt of each category."""
    firsts: dict[str, dict] = {}
    for row in load_prompt_set("eval"):
        firsts.setdefault(row["category"], row)
    out = {}
    for category, row in firsts.items():
        ids = prompt_ids_for(target.tokenizer, row["prompt"], True)
        with torch.no_grad():
            answer = target.model.generate(torch.tensor([ids]), max_new_tokens=96, do_sample=False)[0].tolist()
        out[category] = {k: v[len(ids) - 1:] for k, v in chunk_features(target.model, answer, layers).items()}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="folder for the two heads")
    parser.add_argument("--fuse", default="2,14", help="the inner layers the fused head reads")
    parser.add_argument("--chunks", type=int, default=160)
    parser.add_argument("--steps", type=int, default=240)
    parser.add_argument("--learning-rate", type=float, default=3e-4)
    args = parser.parse_args()
    torch.set_num_threads(2)
    layers = tuple(int(x) for x in args.fuse.split(","))
    target = models.load(TARGET, dtype="bfloat16")
    model = target.model
    files = [f for f in eagle_train.default_data_files(TARGET) if f.name != "distill_chat.txt"]  # as measured
    chunks = tokenize_files(target.tokenizer, files, 512, 400000, 8)
    paths = cache_chunk_features(model, chunks[: args.chunks] + chunks[-4:], eagle_train.features_folder(model),
                                 lambda done, total: print(f"features {done}/{total}", flush=True), layers=layers)
    shards = load_chunk_features(paths)
    embed = model.get_input_embeddings().weight.detach().float()
    lm_head = model.get_output_embeddings().weight.detach().float()
    on_answers = answers(target, layers)
    shipped = eagle_train.load_head(eagle_train.default_head_path(TARGET))
    heads = {"shipped": shipped}
    for name, fuse in (("continued", []), ("fused", list(layers))):
        config = eagle_train.EagleTrainConfig(fuse_layers=fuse, learning_rate=args.learning_rate,
                                              epochs=args.steps / args.chunks)
        out = Path(args.out) / name
        eagle_train.train_head(shards, embed, lm_head, model.config, out, config, f"probe-{name}", None, {},
                               start=shipped)
        heads[name] = eagle_train.load_head(out)
    result = {}
    for name, head in heads.items():
        per = {c: eagle_train.top1_by_depth(head, [s], embed, lm_head) for c, s in on_answers.items()}
        result[name] = {"held_out": eagle_train.top1_by_depth(head, shards[-4:], embed, lm_head),
                        "answers_mean": [round(sum(v[d] for v in per.values()) / len(per), 4) for d in range(3)],
                        "answers": per}
        print(name, result[name]["held_out"], result[name]["answers_mean"], flush=True)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
