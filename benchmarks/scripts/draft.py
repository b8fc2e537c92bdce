"""Benchmark: draft-model speculative decoding (default pair, bfloat16) vs the baseline, transformers'
assisted generation (same draft) and prompt lookup, on the coding and math prompts of Spec-Bench.

    .venv/bin/python benchmarks/scripts/draft.py                     # speed, bfloat16
    .venv/bin/python benchmarks/scripts/draft.py --dtype float32 --no-peers --max-new-tokens 64   # exactness
"""

from common import base_parser, run_benchmark

if __name__ == "__main__":
    parser = base_parser(__doc__, "coding,math")
    parser.add_argument("--draft", default="qwen2.5-coder-0.5b-instruct")
    args = parser.parse_args()
    run_benchmark("draft", args, draft=args.draft)
