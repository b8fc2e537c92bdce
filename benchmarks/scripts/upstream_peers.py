"""Benchmark: our Medusa and lookahead beside the upstream packages (medusa-llm, lade) in their own venvs,
on the built-in Llama (SmolLM2-135M, float32), eval-half Spec-Bench prompts, one baseline per prompt.

    .venv/bin/specpilot peers setup medusa-llm && .venv/bin/specpilot peers setup lade   # once, approved
    .venv/bin/python benchmarks/scripts/upstream_peers.py --categories coding,summarization,math_reasoning,writing

Each method is timed with its peers in alternating rounds (tools.bench.protocol): the baseline,
transformers' prompt lookup, the upstream package, plain generate in the package's venv
(transformers 4.34), and ours. Medusa uses the heads shipped for SmolLM2 (written in upstream's
format for medusa-llm); lade uses the same W, N, G as ours
(the ones `run` sizes on this CPU).
"""

from common import base_parser, run_benchmark

from tools.bench import upstream  # noqa: E402  (common puts the repo on sys.path)

if __name__ == "__main__":
    parser = base_parser(__doc__, "coding,summarization,math_reasoning,writing")
    parser.add_argument("--methods", default="medusa,lookahead", help="comma-separated: medusa, lookahead")
    parser.add_argument("--medusa-heads", default=None, help="heads folder (default: the shipped SmolLM2 heads)")
    parser.add_argument("--medusa-params", default='{"tree": "auto"}', help="JSON of our Medusa's parameters")
    # what run sizes lookahead to on this 2-core CPU (specpilot run --method lookahead --target smollm2-135m-instruct)
    parser.add_argument("--lookahead-params", default='{"window": 3, "ngram": 4, "guess": 1, "prompt_lookup": 0}',
                        help="JSON of lookahead's parameters, given to lade as well (W, N, G)")
    parser.set_defaults(target="smollm2-135m-instruct", dtype="float32", limit=1)
    args = parser.parse_args()
    for name in upstream.UPSTREAM_PEERS:
        state = upstream.status(name)
        print(f"{name}: {'ready ' + str(state['versions']) if state['ready'] else state['reason']}")
    try:
        for method in [m.strip() for m in args.methods.split(",") if m.strip()]:
            args.params = args.medusa_params if method == "medusa" else args.lookahead_params
            run_benchmark(method, args, medusa_heads=args.medusa_heads if method == "medusa" else None)
    finally:
        upstream.close_all()
