"""Benchmark: lookahead decoding and prompt lookup (default target, bfloat16) over all 13 Spec-Bench
categories, both measured against one baseline per prompt and next to transformers' prompt lookup,
alternating in one process.

    .venv/bin/python benchmarks/lookahead.py --limit 2 --out /tmp/la_bench.json
    .venv/bin/python benchmarks/lookahead.py --methods ngram --ngram-params '{"num_candidates": 1}'

``--out`` makes the run resumable: rerun the same command after an interruption.
"""

import json

from common import base_parser, run_benchmark_methods

if __name__ == "__main__":
    parser = base_parser(__doc__, "all")
    parser.add_argument("--methods", default="lookahead,ngram", help="comma-separated: lookahead, ngram")
    parser.add_argument("--lookahead-params", default="{}", help="JSON of lookahead's parameters")
    parser.add_argument("--ngram-params", default="{}", help="JSON of prompt lookup's parameters")
    args = parser.parse_args()
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    bad = [m for m in methods if m not in ("lookahead", "ngram")]
    if bad:
        parser.error(f"unknown method(s) {', '.join(bad)}: use lookahead and/or ngram")
    run_benchmark_methods(methods, args, {"lookahead": json.loads(args.lookahead_params),
                                          "ngram": json.loads(args.ngram_params)})
