"""Benchmark: Medusa (shipped heads, default target, bfloat16) vs the baseline on the coding and math
prompts of Spec-Bench: speedup, mean accepted tokens per step and acceptance rate per category.

    .venv/bin/python benchmarks/scripts/medusa.py                                   # greedy (exact)
    .venv/bin/python benchmarks/scripts/medusa.py --params '{"tree": "cpu16"}'
    .venv/bin/python benchmarks/scripts/medusa.py --temperature 0.7                 # typical acceptance (lossy)
    .venv/bin/python benchmarks/scripts/medusa.py --medusa-heads /path/to/heads     # heads trained elsewhere
"""

from common import base_parser, run_benchmark

if __name__ == "__main__":
    parser = base_parser(__doc__, "coding,math")
    parser.add_argument("--medusa-heads", default=None, help="heads folder (default: the shipped heads)")
    args = parser.parse_args()
    args.no_peers = True  # transformers has no Medusa: the baseline is the reference
    run_benchmark("medusa", args, medusa_heads=args.medusa_heads)
