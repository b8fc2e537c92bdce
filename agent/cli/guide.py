"""``specpilot guide METHOD``: parameter guidance for this hardware (optionally measuring the cost curve).

With ``--backend llamacpp`` the cost curve is llama.cpp's (the target's GGUF file run by llama.cpp), stored
apart from transformers' curve, and the method's parameters are shown sized to it, as run and compare
on that backend size them.
"""

from __future__ import annotations

import json
import sys

from rich.markup import escape

from agent.cli.eval import bench_modules
from agent.cli.options import BACKEND_CHOICES, BACKEND_HELP, DTYPE_CHOICES, add_method_argument, method_table
from agent.loop import host_call
from agent.render import err, out
from memory import Store


def cmd_guide_llamacpp(args) -> int:
    """``guide METHOD --backend llamacpp [--measure]``: llama.cpp's cost curve and the method sized to it."""
    with Store() as store, err.status("guide: starting…") as status:
        result = bench_modules().context.engine_sizing(store, args.method, args.target, "llamacpp",
                                                        measure=args.measure, repeats=args.repeats,
                                                        progress=status.update)
    if args.json:
        print(json.dumps(result, default=str))
        return 0
    measured = result["measured"]
    if measured and measured["curve_ms"]:
        out.print("forward-pass cost on llama.cpp on this machine (ms, new tokens → time): "
                  + ", ".join(f"{n}: {t}" for n, t in measured["curve_ms"].items()))
    if measured:
        out.print(escape(measured["source"]), highlight=False)
    out.print(f"[bold]{result['method']}[/bold] on {result['target']} on llama.cpp ({result['dtype']}):")
    for line in result["lines"]:
        out.print(f"  • {escape(line)}", highlight=False)
    return 0


def cmd_guide(args) -> int:
    if args.backend == "llamacpp":
        return cmd_guide_llamacpp(args)
    with Store() as store:
        if args.measure:
            measured = host_call(store, "measure_cost_curve",
                                 json.dumps({"target": args.target, "dtype": args.dtype, "repeats": args.repeats}))
            if measured.is_error:
                return _tool_error(measured.content, args.json, 2)
            if not args.json:
                curve = measured.content["curve_ms"]
                out.print("forward-pass cost on this machine (ms, new tokens → time): "
                          + ", ".join(f"{n}: {t}" for n, t in curve.items()))
        result = host_call(store, "guidance", json.dumps({"method": args.method, "target": args.target}))
    if result.is_error:
        return _tool_error(result.content, args.json, 1)
    if args.json:
        print(json.dumps(result.content, default=str))
        return 0
    g = result.content
    out.print(f"[bold]{g['method']}[/bold] on {g['target']} — {g['hardware']['name']}")
    out.print(f"suggested: {', '.join(f'{k}={v}' for k, v in g['suggested_params'].items())}")
    for reason in g["reasons"]:
        out.print(f"  • {reason}")
    out.print(f"source: {g['source']}")
    out.print(f"measured: {g['measured_best']}")
    out.print(f"[dim]{g['advice']}[/dim]")
    return 0


def _tool_error(content: dict, as_json: bool, code: int) -> int:
    """A tool's error as the CLI shows errors: ``error: ...`` on stderr, and with ``--json`` the tool's
    ``{"error": ...}`` on stdout, as ``specpilot tool`` prints it; returns ``code``."""
    print(f"error: {content.get('error', content)}", file=sys.stderr)
    if as_json:
        print(json.dumps(content, default=str))
    return code


def add_guide_commands(sub) -> None:
    p = sub.add_parser("guide", help="parameter guidance for a method on this hardware")
    add_method_argument(p, "method", names=lambda: method_table().ACCELERATED)
    p.add_argument("--target", default="qwen2.5-coder-1.5b-instruct")
    p.add_argument("--measure", action="store_true",
                   help="first measure how the target's forward time grows with the tokens per pass, and store it")
    p.add_argument("--dtype", default="auto", choices=DTYPE_CHOICES,
                   help="the dtype --measure loads the target in (the advice is sized to the dtype runs load)")
    p.add_argument("--backend", choices=BACKEND_CHOICES, default="transformers",
                   help=BACKEND_HELP + "; llamacpp: its own cost curve, and the method sized to it")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_guide)
