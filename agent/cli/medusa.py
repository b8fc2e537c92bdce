"""``specpilot medusa train``: train Medusa heads on a frozen target (asks for approval first).

Training goes through the same gate as the agent's train_medusa tool (agent.approval): an approval
holding the exact command is recorded, and the person approves it on the controlling terminal by
typing ``train TARGET``; with no terminal it stays pending, to be approved with ``specpilot tool
approve ID`` and used with ``--approval-id ID``. ``--yes`` skips nothing: it is accepted for old
scripts and goes through the same gate.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import types
from pathlib import Path

from agent.approval import approve_command
from agent.render import err
from memory import Store
from tools import models
from tools.errors import ParameterError
from tools.medusa.config import TrainConfig, default_training_files

TRAIN_ACTION = "train"
TRAIN_COMMAND = "specpilot medusa train"
TRAIN_OPTIONS = ("target", "out", "heads", "layers", "data", "self_distill", "steps", "max_tokens", "batch_size",
                 "learning_rate", "dtype", "device_map", "restart")


def _medusa() -> types.SimpleNamespace:
    """tools.medusa: the training (train), the self-distillation data (data) and EAGLE's training (eagle)."""
    # they load torch and transformers: imported when a command runs, not for `specpilot --help`
    from tools.medusa import data, eagle_train, train

    return types.SimpleNamespace(data=data, train=train, eagle=eagle_train)


def training_arguments(args) -> dict:
    """What an approval of this training covers: the command and every option that shapes it."""
    return {"tool": TRAIN_COMMAND, "input": {name: getattr(args, name) for name in TRAIN_OPTIONS}}


def training_command(args, words: tuple[str, ...] = ("specpilot", "medusa", "train"),
                     options: tuple[str, ...] = TRAIN_OPTIONS) -> str:
    """The command as the person would type it (shown before they approve): ``words`` and the set ``options``."""
    words = list(words)
    for name in options:
        value = getattr(args, name)
        flag = "--" + name.replace("_", "-")
        if value is True:
            words.append(flag)
        elif isinstance(value, list):
            words += [flag, *map(str, value)]
        elif value not in (None, False):
            words += [flag, str(value)]
    return shlex.join(words)


def check_training_files(files: list[Path]) -> None:
    """Refuse training text that is missing or unreadable (before a person is asked to approve the run)."""
    bad = [str(f) for f in files if not f.expanduser().is_file() or not os.access(f.expanduser(), os.R_OK)]
    if bad:
        raise ParameterError(f"training file(s) not found or not readable: {', '.join(bad)}",
                             hint="check the paths given to --data (text files)")


def check_target(ref: str) -> None:
    """Refuse a target that is a local path that does not exist, or a built-in model not fetched yet, without
    loading it (a hub id is only checked when it loads)."""
    if ref.lower() in models.BUILTIN_MODELS:
        models.resolve_ref(ref)
    else:
        models.local_ref(ref)


def check_out_folder(out: str) -> None:
    """Refuse an output folder that is a file."""
    folder = Path(out).expanduser()
    if folder.exists() and not folder.is_dir():
        raise ParameterError(f"--out {out} is a file", hint="give a folder (new or existing) for --out")


def approve_training(args) -> dict:
    """The person's approval of exactly this training (asked on the terminal, or given by --approval-id)."""
    if args.yes:
        print("note: --yes no longer skips the approval; training is approved on the terminal "
              "(or with --approval-id after `specpilot tool approve ID`)", file=sys.stderr)
    what = (f"{training_command(args)}  (loads {args.target}, caches its hidden states, trains the heads and "
            f"writes them to {args.out}; this can take a long time on a CPU)")
    with Store() as store:
        return approve_command(store, TRAIN_ACTION, training_arguments(args), what, approval_id=args.approval_id)


def cmd_medusa_train(args) -> int:
    # what can be checked without loading anything is checked first: a person is never asked to
    # approve a run that cannot start
    files = [Path(f) for f in args.data] if args.data else default_training_files()
    check_training_files(files)
    overrides = {"num_heads": args.heads, "num_layers": args.layers, "steps": args.steps,
                 "max_tokens": args.max_tokens, "batch_size": args.batch_size,
                 "learning_rate": args.learning_rate, "labels": "text" if args.data and not args.self_distill else "self"}
    config = TrainConfig(**{k: v for k, v in overrides.items() if v is not None})
    check_target(args.target)
    check_out_folder(args.out)
    approval = approve_training(args)  # before anything loads: nothing runs without a person's approval
    train = _medusa().train
    target = models.load(args.target, dtype=args.dtype, device_map=args.device_map)

    def approved(plan: str) -> bool:  # the person approved exactly this command above
        print(f"{plan}\n(approved: approval {approval['id']}, by {approval['decided_by']})", file=sys.stderr)
        return True

    report = train.train_heads(target, files, args.out, config, confirm=approved, resume=not args.restart)
    summary = report.as_dict()
    summary.pop("loss_history", None)
    print(json.dumps(summary, default=str, indent=None if args.json else 1))
    return 0


def cmd_medusa_make_data(args) -> int:
    if args.prompts < 1:  # first: --skip is checked against --prompts, and torch is not imported for a typo
        raise ParameterError(f"--prompts {args.prompts} must be at least 1",
                             hint="give how many prompts to answer, e.g. --prompts 240 (the default)")
    data = _medusa().data
    data.check_skip(args.prompts, args.skip)  # before the generator loads (minutes for a large one)
    write_distill_data = data.write_distill_data
    generator = models.load(args.generator, dtype=args.dtype)
    path = write_distill_data(generator, args.out, n_prompts=args.prompts, max_new_tokens=args.max_new_tokens,
                              batch_size=args.batch_size, seed=args.seed, progress=lambda m: err.print(m),
                              variety=args.variety, restart=args.restart, skip=args.skip)
    print(json.dumps({"out": str(path), "bytes": path.stat().st_size, "generator": args.generator,
                      "prompts": args.prompts, "skip": args.skip, "max_new_tokens": args.max_new_tokens,
                      "seed": args.seed, "variety": args.variety}))
    return 0


def add_medusa_commands(sub) -> None:
    p = sub.add_parser("medusa", help="Medusa heads: train them for a target")
    msub = p.add_subparsers(dest="medusa_command", required=True)
    t = msub.add_parser("train", help="train Medusa-1 heads on a frozen target (asks for approval)")
    t.add_argument("--target", required=True)
    t.add_argument("--out", required=True, help="folder for the heads (compact format) and checkpoints")
    t.add_argument("--heads", type=int, default=None)
    t.add_argument("--layers", type=int, default=None)
    t.add_argument("--data", nargs="*", default=None, help="text files (default: Python standard-library code and docs)")
    t.add_argument("--self-distill", action="store_true", help="train on the target's own predictions (default)")
    t.add_argument("--steps", type=int, default=None)
    t.add_argument("--max-tokens", type=int, default=None, help="training text used, in tokens")
    t.add_argument("--batch-size", type=int, default=None)
    t.add_argument("--learning-rate", type=float, default=None)
    t.add_argument("--dtype", default="bfloat16")
    t.add_argument("--device-map", default=None)
    t.add_argument("--restart", action="store_true", help="ignore an existing checkpoint in --out")
    t.add_argument("--yes", action="store_true",
                   help="kept for old scripts: training is still approved on the terminal (or with --approval-id)")
    t.add_argument("--approval-id", default=None,
                   help="an approval a person gave with `specpilot tool approve ID` for exactly this command")
    t.add_argument("--json", action="store_true")
    t.set_defaults(func=cmd_medusa_train, interrupted_hint="the last checkpoint in --out is kept; the same command "
                   "(a new approval) resumes from it")
    d = msub.add_parser("make-data", help="write self-distillation text: chat answers to prompts built from "
                                          "Python's own library and docs")
    d.add_argument("--out", required=True)
    d.add_argument("--generator", default="qwen2.5-coder-0.5b-instruct",
                   help="model that writes the answers (same tokenizer as the target)")
    d.add_argument("--prompts", type=int, default=240)
    d.add_argument("--max-new-tokens", type=int, default=192)
    d.add_argument("--batch-size", type=int, default=16)
    d.add_argument("--seed", type=int, default=0)
    d.add_argument("--variety", choices=["basic", "wide", "mixed", "chat"], default="basic",
                   help="basic: Python functions, topics, simple math; wide: several languages, more math, prose; "
                        "mixed: the fit half of the Spec-Bench prompts and prose in many styles; chat: requests of "
                        "every kind a chat assistant gets (code, word problems, essays, reading, translation)")
    d.add_argument("--restart", action="store_true",
                   help="write --out again from the start (default: answers are appended batch by batch and a "
                        "later call answers only the prompts --out does not hold yet)")
    d.add_argument("--skip", type=int, default=0,
                   help="leave out the first N prompts of the list (answered in another file): --prompts 1000 "
                        "--skip 600 answers prompts 601-1000 of the list --prompts 600 began")
    d.add_argument("--dtype", default="bfloat16")
    d.set_defaults(func=cmd_medusa_make_data, interrupted_hint="the answers written so far are kept in --out; the "
                   "same command answers only the prompts it does not hold yet")
