"""Options shared by the ``specpilot`` commands: generation settings, the methods' own options (read from
the method table, tools.engine.params) and the prompt.

Parsers made by :class:`Parser` (the ``specpilot`` command's) add the options read from the table only
when a command that has them is parsed or its help printed, so ``specpilot --help`` and the commands
without them do not even read the table.
"""

from __future__ import annotations

import argparse
import json
import sys
import types
import typing
from collections.abc import Callable, Iterable
from pathlib import Path

from tools.bench.inputs import BACKENDS, DEMO_PROMPT, PEERS_DESCRIPTION, read_prompt_file
from tools.engine import params as method_params_table
from tools.errors import ParameterError

# parameter-model fields that have no command-line flag (set them in memory or through the tools)
NOT_ON_CLI = frozenset({"pool_from_prompt", "min_ngram_size", "max_candidate_tokens", "max_draft_tokens", "pass_costs",
                        "acceptance_prior", "draft_cost", "gguf_draft_until"})
# fields whose flag is not named after the field, so it is written by hand: field -> (flag, argparse options)
def int_list(text: str) -> list[int]:
    """A comma-separated list of whole numbers (``1,4,16``), for argparse."""
    try:
        values = [int(v) for v in str(text).replace(" ", "").split(",") if v]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number or a comma-separated list such as 1,4,16") from None
    if not values:
        raise argparse.ArgumentTypeError("give at least one number, e.g. 4, or a list such as 1,4,16")
    return values


def k_values(text: str) -> int | list[int]:
    """``--k 4`` (one K) or ``--k 1,2,4,8`` (a K sweep, measured per concurrency level on --backend vllm)."""
    values = int_list(text)
    return values[0] if len(values) == 1 else values


HAND_WRITTEN = {
    "k": ("--k", {"type": k_values, "help": "draft tokens per step (1-16); on --backend vllm a list such as 1,2,4,8 "
                                            "sweeps K at every concurrency level"}),
    "prompt_lookup": ("--prompt-lookup-drafts", {
        "type": int, "help": "prompt-lookup drafts verified with the pool each step (0: lookahead alone)"}),
}
# the command line's own help where it says more than the field's description (or something else)
CLI_HELP = {
    "k": "draft tokens per step (1-16)",
    "adaptive_k": "adapt K to acceptance and to this machine's costs, no draft where a plain step is cheaper "
                  "(default on; --no-adaptive-k for a fixed K every step)",
    "draft_vocab": "draft over the N lowest token ids",
    "draft_quant": "a cheaper draft on a CPU: int8 (an int8 copy) or gguf (its GGUF file on llama.cpp); default auto "
                   "(the one this machine runs faster); the output is unchanged",
    "tree": "tree name or JSON file of choices",
    "window": "W",
    "ngram": "N",
    "guess": "G",
    "num_candidates": "drafts verified per step (a token tree)",
}
DTYPE_CHOICES = ("auto", "float32", "bfloat16", "float16")  # --dtype of run, compare, bench and guide
GROUP_TITLES = {"draft": "draft model", "ngram": "prompt lookup (ngram)"}  # default: the method's name


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose slow-to-build options (see :func:`when_used`) are added just before it
    parses or prints help. Its subparsers are Parsers too."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._deferred: list[Callable[[argparse.ArgumentParser], None]] = []

    def defer(self, build: Callable[[argparse.ArgumentParser], None]) -> None:
        self._deferred.append(build)

    def _build(self) -> None:
        while self._deferred:
            self._deferred.pop(0)(self)

    def parse_known_args(self, args=None, namespace=None):
        self._build()
        self._parsing = list(sys.argv[1:] if args is None else args)  # a subparser gets the words after its name
        return super().parse_known_args(args, namespace)

    def error(self, message: str):
        """Print ``error: MESSAGE`` and where the help is (not the usage: run's is ~45 lines) and exit 2;
        with ``--json`` among the arguments, also ``{"error": ...}`` on stdout, as every command's errors."""
        words = getattr(self, "_parsing", [])
        text = f"{message}\n  what to do: see `{self._named_command(words).prog} --help`"
        if "--json" in words:
            print_json_error(text)
        self.exit(2, f"error: {text}\n")

    def _named_command(self, words: list[str]) -> argparse.ArgumentParser:
        """The deepest subcommand ``words`` name (``runs list --bogus``: runs list's parser, whose help is
        the one to read; the unrecognized arguments are reported by the top parser)."""
        parser = self
        for word in words:
            found = [a.choices[word] for a in parser._actions
                     if isinstance(a, argparse._SubParsersAction) and word in a.choices]
            parser = found[0] if found else parser
        return parser

    def format_help(self) -> str:
        self._build()
        return super().format_help()

    def format_usage(self) -> str:
        self._build()
        return super().format_usage()


def print_json_error(message: str) -> None:
    """Write ``{"error": MESSAGE}`` to stdout, the one JSON document of a ``--json`` command that failed
    (the shape ``specpilot tool`` prints)."""
    sys.stdout.write(json.dumps({"error": message}, ensure_ascii=False, default=str) + "\n")
    sys.stdout.flush()


def when_used(p: argparse.ArgumentParser, build: Callable[[argparse.ArgumentParser], None]) -> None:
    """``build(p)`` now, or, when ``p`` is a :class:`Parser`, just before ``p`` is used."""
    if isinstance(p, Parser):
        p.defer(build)
    else:
        build(p)


def method_table():
    """The method table module (METHODS, METHOD_NAMES, ACCELERATED)."""
    return method_params_table


def add_method_argument(p: argparse.ArgumentParser, *flags: str, names: Callable[[], Iterable[str]] | None = None,
                        **kwargs) -> argparse.Action:
    """An argument whose choices are method names: ``names()`` (default: every method in the table)."""
    action = p.add_argument(*flags, **kwargs)

    def fill(_: argparse.ArgumentParser) -> None:
        action.choices = list(names() if names else method_table().METHOD_NAMES)

    when_used(p, fill)
    return action


# ---------------------------------------------------------------------------- the methods' own options
def _field_options(name: str, info) -> dict:
    """argparse options for one parameter-model field, from its type (``None`` stays "not given")."""
    annotation = info.annotation
    union = typing.get_origin(annotation) in (typing.Union, types.UnionType)
    kinds = [a for a in typing.get_args(annotation) if a is not type(None)] if union else [annotation]
    if kinds == [bool]:
        options = {"action": argparse.BooleanOptionalAction}
    elif len(kinds) == 1 and typing.get_origin(kinds[0]) is typing.Literal:
        options = {"choices": list(typing.get_args(kinds[0]))}
    elif kinds in ([int], [float]):
        options = {"type": kinds[0]}
    elif str in kinds:
        options = {}  # a string (a union such as the Medusa tree's is given on the command line as its name)
    else:
        raise TypeError(f"parameter {name!r} ({annotation}) has no command-line form: "
                        "add it to HAND_WRITTEN or NOT_ON_CLI in agent/cli/options.py")
    return {**options, "default": None, "help": CLI_HELP.get(name, info.description)}


def cli_fields(method: str) -> list[str]:
    """The parameter-model fields of ``method`` that the command line sets."""
    spec = method_table().METHODS.get(method)  # auto: the method is picked later, with its own sizing
    return [f for f in spec.params.model_fields if f not in NOT_ON_CLI] if spec is not None else []


def _add_method_options_now(p: argparse.ArgumentParser) -> None:
    added: set[str] = set()
    for name, spec in method_table().METHODS.items():
        fields = cli_fields(name)
        if not fields and not spec.needs_heads:
            continue
        g = p.add_argument_group(GROUP_TITLES.get(name, name))
        if spec.needs_heads:
            g.add_argument("--medusa-heads", default=None, help="heads folder (default: shipped heads for the target)")
        for field in fields:
            if field in added:  # a field two methods share has one flag
                continue
            added.add(field)
            if field in HAND_WRITTEN:
                flag, options = HAND_WRITTEN[field]
                g.add_argument(flag, default=None, **options)
            else:
                g.add_argument("--" + field.replace("_", "-"),
                               **_field_options(field, spec.params.model_fields[field]))


def add_method_options(p: argparse.ArgumentParser) -> None:
    """One option group per method, a flag per parameter-model field (read from the method table)."""
    when_used(p, _add_method_options_now)


def method_params(args) -> dict:
    """The method's own options from the command line (unset ones are left to the defaults); for auto, every
    method option given (the picked method keeps its own)."""
    if args.method not in method_table().METHODS:
        every = {f for name in method_table().METHODS for f in cli_fields(name)}
        given = method_params_of(args, every)
        return {k: v for k, v in given.items() if v is not None}
    return method_params_of(args, cli_fields(args.method))


def refuse_other_methods_options(args) -> None:
    """A ParameterError naming the options of other methods given to a run of ``args.method`` (none for auto,
    which may pick any): they would be ignored without a word."""
    table = method_table()
    if args.method not in table.METHODS:
        return
    own = set(cli_fields(args.method))
    others = {f: name for name in table.METHODS for f in cli_fields(name) if f not in own}
    given = {f: name for f, name in others.items() if method_params_of(args, [f])[f] is not None}
    if given:
        flags = ", ".join(f"{HAND_WRITTEN[f][0] if f in HAND_WRITTEN else '--' + f.replace('_', '-')} ({name})"
                          for f, name in given.items())
        raise ParameterError(f"{args.method} does not take {flags}",
                             hint=f"leave them out, or run the method they belong to (`specpilot run --help` lists "
                                  f"each method's options)")


def method_params_of(args, fields) -> dict:
    """The values of the method options ``fields`` on the command line (None where not given)."""
    params = {}
    for field in fields:
        dest = HAND_WRITTEN[field][0].lstrip("-").replace("-", "_") if field in HAND_WRITTEN else field
        params[field] = getattr(args, dest)
        if isinstance(params[field], list):
            raise ParameterError(f"--{field.replace('_', '-')} takes one value here; a list sweeps K on --backend vllm only",
                                 hint=f"give one value, or sweep it with `specpilot tune --method {args.method}`")
    return params


# ---------------------------------------------------------------------------- generation and prompt
def prompt_text(args) -> str:
    """The prompt of run / compare: the --prompt-file's text (UTF-8), else --prompt, else (neither given)
    the demo prompt. An empty or whitespace-only prompt is refused, never replaced by the demo prompt, and so are
    both options at once (neither would be the one run without a word)."""
    if args.prompt_file is not None and args.prompt is not None:
        raise ParameterError("--prompt and --prompt-file were both given",
                             hint="give the prompt one way: --prompt TEXT or --prompt-file FILE")
    if args.prompt_file is not None:
        text, source = read_prompt_file(args.prompt_file), f"the prompt file {Path(args.prompt_file).expanduser()}"
    elif args.prompt is not None:
        text, source = args.prompt, "--prompt"
    else:
        return DEMO_PROMPT
    if not text.strip():
        raise ParameterError(f"{source} is empty" + (" (only whitespace)" if text else ""),
                             hint="give the text to run on (leave out --prompt and --prompt-file for the demo prompt)")
    return text


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
    p.add_argument("--dtype", default="auto", choices=DTYPE_CHOICES)
    p.add_argument("--device-map", default=None, help="passed to transformers/accelerate, e.g. auto")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--repeats", type=int, default=1, help="timed repeats after a warm-up (median reported)")
    p.add_argument("--json", action="store_true", help="print one JSON object with all digits")


PEERS_HELP = PEERS_DESCRIPTION  # the run and compare input models' own description of --peers
BACKEND_CHOICES = (*BACKENDS, "vllm")
BACKEND_HELP = ("the engine: transformers (default), llamacpp (the GGUF files of `specpilot models fetch`, or a "
                ".gguf --target, run by llama.cpp without dequantising; Medusa and EAGLE do not run there) or vllm "
                "(vLLM's own speculative modes under --concurrency, after `specpilot peers setup vllm`)")


def add_backend_option(p: argparse.ArgumentParser, repeatable: bool = False) -> None:
    """``--backend transformers|llamacpp``; ``repeatable``: given more than once, one table with every engine."""
    if repeatable:
        p.add_argument("--backend", action="append", choices=BACKEND_CHOICES, default=None,
                       help=BACKEND_HELP + "; give it twice (--backend transformers --backend llamacpp) for both "
                                           "engines in one table")
    else:
        p.add_argument("--backend", choices=BACKEND_CHOICES, default="transformers", help=BACKEND_HELP)
