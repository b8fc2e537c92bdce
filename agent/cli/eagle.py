"""``specpilot eagle train``: train an EAGLE draft head on a frozen target (asks for approval first).

The same gate as ``specpilot medusa train`` (agent.approval): an approval holding the exact command
is recorded and the person approves it on the controlling terminal by typing ``train TARGET``; with
no terminal it stays pending, to be approved with ``specpilot tool approve ID`` and used with
``--approval-id ID``. Feature caching resumes chunk by chunk and training from its last checkpoint,
so an interrupted run loses at most a few minutes; the exact command is recorded with the head.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from agent.approval import approve_command
from agent.cli.medusa import _medusa, check_out_folder, check_target, check_training_files, training_command
from memory import Store
from tools import models
from tools.errors import ParameterError

TRAIN_ACTION = "train"
TRAIN_OPTIONS = ("target", "out", "data", "max_tokens", "epochs", "passes", "draft_vocab", "intermediate_size",
                 "learning_rate", "cls_weight", "fuse_layers", "start", "no_autocast", "dtype")


def cmd_eagle_train(args) -> int:
    eagle_train = _medusa().eagle  # loads torch: when the command runs, not for --help
    # bad input fails before anything is asked or loaded: a person never approves a run that cannot start
    fuse = _layers(args.fuse_layers)
    files = [Path(f) for f in args.data] if args.data else eagle_train.default_data_files(args.target)
    if not files:
        raise ParameterError(f"no training text for {args.target}",
                             hint=f"give --data FILES (self-distillation answers of {args.target}, e.g. from "
                                  "`specpilot medusa make-data --generator TARGET`)")
    check_training_files(files)
    if args.max_tokens < eagle_train.MIN_CHUNK_TOKENS:
        raise ParameterError(f"--max-tokens {args.max_tokens} is too few: training takes chunks of at least "
                             f"{eagle_train.MIN_CHUNK_TOKENS} tokens",
                             hint="leave --max-tokens out for the default")
    overrides = {"epochs": args.epochs, "passes": args.passes, "draft_vocab": args.draft_vocab,
                 "intermediate_size": args.intermediate_size, "learning_rate": args.learning_rate,
                 "cls_weight": args.cls_weight, "fuse_layers": fuse, "autocast": False if args.no_autocast else None}
    config = eagle_train.EagleTrainConfig(**{k: v for k, v in overrides.items() if v is not None})
    check_target(args.target)
    check_out_folder(args.out)
    start = None
    if args.start:
        start = eagle_train.load_head(args.start if args.start != "shipped" else _shipped(eagle_train, args.target))
    arguments = {"tool": "specpilot eagle train", "input": {n: getattr(args, n) for n in TRAIN_OPTIONS}}
    command = training_command(args, ("specpilot", "eagle", "train"), TRAIN_OPTIONS)
    what = (f"{command}  (loads {args.target}, caches its hidden states over the training text, trains the head "
            f"and writes it to {args.out}; this takes a long time on a CPU)")
    with Store() as store:
        approval = approve_command(store, TRAIN_ACTION, arguments, what, approval_id=args.approval_id)
    print(f"approved: approval {approval['id']}, by {approval['decided_by']}", file=sys.stderr)
    target = models.load(args.target, dtype=args.dtype)
    summary = eagle_train.train_eagle(target, files, Path(args.out).expanduser(), config, max_tokens=args.max_tokens,
                                      log=lambda line: print(line, file=sys.stderr, flush=True),
                                      command=command, start=start)
    print(json.dumps(summary, default=str, indent=None if args.json else 1))
    return 0


def _layers(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ParameterError(f"--fuse-layers {text!r} is not a list of layer numbers",
                             hint="give them comma-separated, e.g. --fuse-layers 2,14") from None


def _shipped(eagle_train, target: str) -> Path:
    folder = eagle_train.default_head_path(target)
    if folder is None:
        raise ParameterError(f"no EAGLE head is shipped for {target} to continue from",
                             hint="give the folder of a head with --start DIR")
    return folder


def add_eagle_commands(sub) -> None:
    p = sub.add_parser("eagle", help="EAGLE draft heads: train one for a target")
    esub = p.add_subparsers(dest="eagle_command", required=True)
    t = esub.add_parser("train", help="train an EAGLE draft head on a frozen target (asks for approval)")
    t.add_argument("--target", required=True)
    t.add_argument("--out", required=True, help="folder for the head and its checkpoint")
    t.add_argument("--data", nargs="*", default=None,
                   help="self-distillation text (default: the answers shipped for a built-in target)")
    t.add_argument("--max-tokens", type=int, default=60000,
                   help="training text used, in tokens (the default is a CPU-sized job; the shipped head used all "
                        "261k tokens of its four files: --max-tokens 400000 --epochs 2, 38 minutes here with the "
                        "features cached)")
    t.add_argument("--epochs", type=float, default=None)
    t.add_argument("--passes", type=int, default=None, help="training-time test depth")
    t.add_argument("--draft-vocab", type=int, default=None)
    t.add_argument("--intermediate-size", type=int, default=None)
    t.add_argument("--learning-rate", type=float, default=None)
    t.add_argument("--cls-weight", type=float, default=None,
                   help="weight of the token loss against the feature regression (EAGLE-1's 0.1 is the default)")
    t.add_argument("--fuse-layers", default=None, help="inner layers whose hidden states the head fuses with the "
                   "final feature (EAGLE-3's idea), comma-separated, e.g. 2,14 (default: none)")
    t.add_argument("--start", default=None, help="continue from this head (a folder, or 'shipped'): its draft "
                   "vocabulary and weights; fused layers it lacks start as the final feature alone")
    t.add_argument("--no-autocast", action="store_true", help="train the head's matrix products in float32 (default: "
                   "bfloat16 autocast, about 1.5x faster on a CPU with bfloat16 units)")
    t.add_argument("--dtype", default="auto", help="the dtype EAGLE will run the target in (auto: as `run` does)")
    t.add_argument("--approval-id", default=None,
                   help="an approval a person gave with `specpilot tool approve ID` for exactly this command")
    t.add_argument("--json", action="store_true")
    t.set_defaults(func=cmd_eagle_train, interrupted_hint="the cached features and the last checkpoint in --out are "
                   "kept; the same command (a new approval) resumes from them")
