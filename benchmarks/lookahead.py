"""Benchmark: lookahead decoding and prompt lookup (default target, bfloat16) over all 13 Spec-Bench
categories, next to transformers' prompt lookup measured in the same run.

    .venv/bin/python benchmarks/lookahead.py --method lookahead --params '{"window": 4, "ngram": 3, "guess": 4}'
    .venv/bin/python benchmarks/lookahead.py --method ngram
"""

from common import base_parser, run_benchmark

if __name__ == "__main__":
    parser = base_parser(__doc__, "all")
    parser.add_argument("--method", choices=["lookahead", "ngram"], default="lookahead")
    args = parser.parse_args()
    run_benchmark(args.method, args)
