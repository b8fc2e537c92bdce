"""Benchmark: EAGLE (the shipped head for the default target) vs the baseline on Spec-Bench prompts
of the eval half: speedup, mean accepted tokens per step and acceptance rate per category, with
transformers' prompt lookup beside it in the same run.

    .venv/bin/python benchmarks/eagle.py                                  # coding + math, eval half
    .venv/bin/python benchmarks/eagle.py --categories all --limit 2       # every category
    .venv/bin/python benchmarks/eagle.py --params '{"tree_nodes": 6}'     # another draft tree
    .venv/bin/python benchmarks/eagle.py --prompts prompts/spec_bench_fit.jsonl   # the fit half
"""

from common import base_parser, run_benchmark

if __name__ == "__main__":
    parser = base_parser(__doc__, "coding,math")
    parser.set_defaults(dtype="auto")
    args = parser.parse_args()
    run_benchmark("eagle", args)
