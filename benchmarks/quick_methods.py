"""Quick side-by-side check of every method on one prompt, straight through the engine (no store, no peers):
warm-up, then rounds that run the methods in turn; prints each run and the speedups of the fastest runs.
Run it in two checkouts to compare engine versions on one machine.

    .venv/bin/python benchmarks/quick_methods.py --max-new-tokens 64 --dtype float32
"""

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PROMPT = ("Write a Python function that checks whether a string is a palindrome, ignoring case and "
          "punctuation. Include tests.")
SIZED = {"lookahead": {"window": 5, "ngram": 4, "guess": 2, "prompt_lookup": 1}}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--methods", default="baseline,draft,medusa,lookahead,ngram")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--dtype", default="auto")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--prompt", default=PROMPT)
    args = p.parse_args()

    import torch

    from tools import models
    from tools.bench.run import prompt_ids_for
    from tools.engine.methods import MethodContext, parse_params, run
    from tools.engine.types import GenerationSettings
    from tools.medusa.checkpoint import load_medusa_heads

    torch.set_num_threads(2)
    methods = args.methods.split(",")
    target = models.load(models.DEFAULT_TARGET, dtype=args.dtype)
    ctx = MethodContext(target=target)
    if "draft" in methods:
        ctx.draft = models.load(models.DEFAULT_DRAFT, dtype=args.dtype)
    if "medusa" in methods:
        ctx.medusa_heads = load_medusa_heads(target, None)
    ids = prompt_ids_for(target.tokenizer, args.prompt, chat=True)
    settings = GenerationSettings(max_new_tokens=args.max_new_tokens, eos_token_ids=[target.tokenizer.eos_token_id])
    params = {m: parse_params(m, SIZED.get(m, {})) for m in methods}
    for m in methods:
        run(m, ctx, ids, settings.model_copy(update={"max_new_tokens": 16}), params[m])
    times: dict[str, list[float]] = {}
    outputs = {}
    for _ in range(args.rounds):
        for m in methods:
            res = run(m, ctx, ids, settings, params[m])
            times.setdefault(m, []).append(res.wall_time_s)
            outputs[m] = res.output_ids
            print(f"{m}: {res.wall_time_s:.2f} s (prefill {res.prefill_s:.2f} s), {res.new_tokens} tokens, "
                  f"{res.mean_accepted_per_step:.2f} tokens/step", flush=True)
    base = min(times["baseline"]) if "baseline" in times else None
    print(json.dumps({"dtype": target.dtype, "speedup": {m: round(base / min(t), 2) for m, t in times.items()} if base else None,
                      "identical": {m: outputs[m] == outputs.get("baseline") for m in methods}}))


if __name__ == "__main__":
    main()
