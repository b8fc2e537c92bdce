"""Benchmark: our baseline loop vs transformers' own `generate` on the same model, prompt and dtype.

The speedups specpilot reports must not come from a slow baseline: this checks that our plain
KV-cached loop runs within 5% of transformers' `generate` (tokens/s, median of alternating repeats).

    .venv/bin/python benchmarks/scripts/baseline.py [--dtype bfloat16] [--repeats 3] [--max-new-tokens 128]
"""

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--target", default="qwen2.5-coder-1.5b-instruct")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()

    from tools.bench import peers
    from tools.bench import protocol as measure
    from tools.engine import autoregressive
    from tools.bench.run import eos_ids_for, load_cached, prompt_ids_for
    from tools.engine.types import GenerationSettings

    target = load_cached(args.target, args.dtype, None)
    ids = prompt_ids_for(target.tokenizer, "Write a Python class for a binary search tree with insert, "
                         "delete and in-order traversal, with docstrings.", True)
    settings = GenerationSettings(max_new_tokens=args.max_new_tokens, eos_token_ids=eos_ids_for(target))
    runners = {
        "specpilot baseline": lambda s: autoregressive.generate(target.model, ids, s),
        "transformers generate": lambda s: peers.hf_plain(target.model, ids, s),
    }
    timed = measure.alternate(runners, settings, repeats=args.repeats, warmup=1,
                              progress=lambda m: print(f"  {m}", file=sys.stderr, flush=True))
    ours, hf = timed["specpilot baseline"], timed["transformers generate"]
    same = ours.result.output_ids == hf.result.output_ids
    tps = {k: v.result.new_tokens / v.median for k, v in timed.items()}
    print("| loop | tokens/s (median) | runs (s) |\n|---|---|---|")
    for k, v in timed.items():
        print(f"| {k} | {tps[k]:.2f} | {', '.join(f'{t:.2f}' for t in v.times)} |")
    ratio = tps["specpilot baseline"] / tps["transformers generate"]
    print(f"\nours / transformers = {ratio:.3f} (within 5%: {ratio >= 0.95}); identical output: {same}; "
          f"{ours.result.new_tokens} tokens; {measure.hardware_info(target.device)['name']}; {args.dtype}; "
          f"spread of ours {statistics.pstdev(ours.times):.2f}s")


if __name__ == "__main__":
    main()
