"""The train_medusa tool (gated): train Medusa heads for a frozen target with tools.medusa.train."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from memory.migrations import LEGACY_HEADS_KEY
from memory.store import home_dir
from tools.medusa.config import TrainConfig, default_training_files
from tools import models
from tools.models import DEFAULT_TARGET
from tools.errors import ParameterError
from tools.agent_tools.registry import ToolContext, tool

HEADS_ANSWER_KEY = LEGACY_HEADS_KEY  # old answer key; heads folders are now rows of the trained_heads table
MAX_STEPS = 1_000_000  # optimizer steps; a CPU does a few per second, so this is already weeks
MAX_DATA_FILES = 1000


class TrainInput(BaseModel):
    """What to train: the target, where the heads go, on which text, and how long."""

    model_config = ConfigDict(extra="forbid")

    target: str = Field(DEFAULT_TARGET, description="the target model the heads are trained for")
    out: str | None = Field(None, description="folder for the heads (default: medusa/<target> in the specpilot folder)")
    data_files: list[str] | None = Field(None, max_length=MAX_DATA_FILES,
                                         description="training text files (default: Python standard library "
                                                     "sources, never the evaluation prompts)")
    num_heads: int = Field(TrainConfig.model_fields["num_heads"].default, ge=1, le=16)
    steps: int = Field(TrainConfig.model_fields["steps"].default, ge=1, le=MAX_STEPS)
    labels: Literal["self", "text"] = Field("self", description="self-distillation or the text's own tokens")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    approval_id: str | None = Field(None, description="the id of an approval the user gave for exactly this training")


def output_folder(inp: TrainInput) -> Path:
    """Where the heads are written."""
    if inp.out:
        return Path(inp.out).expanduser()
    return home_dir() / "medusa" / inp.target.replace("/", "--")


def resolve_training(inp: TrainInput, store) -> TrainInput:
    """The training as the person approves it: the heads folder and every data file as absolute paths
    (symlinks resolved). ParameterError when the folder is a file, or a data file is missing, not a
    regular file or not readable."""
    out = Path(os.path.realpath(output_folder(inp)))
    if out.exists() and not out.is_dir():
        raise ParameterError(f"the heads folder {out} is a file", hint="give a folder (new or existing) for out")
    files = None
    if inp.data_files:
        files = []
        for given in inp.data_files:
            path = Path(os.path.realpath(Path(given).expanduser()))
            if not path.is_file() or not os.access(path, os.R_OK):
                raise ParameterError(f"the training file {given!r} ({path}) is not a readable file",
                                     hint="give text files that exist, or leave data_files out for the default text")
            files.append(str(path))
    return inp.model_copy(update={"out": str(out), "data_files": files})


def describe_training(inp: TrainInput) -> str:
    """What the training will do, shown to the user before approval."""
    files = inp.data_files or [f"stdlib/{p.name}" for p in default_training_files()]
    shown = ", ".join(files[:4]) + (f" and {len(files) - 4} more" if len(files) > 4 else "")
    return (f"train {inp.num_heads} Medusa heads for the frozen target {inp.target} for {inp.steps} steps "
            f"(labels={inp.labels}) on {shown}; caches hidden states and writes the heads to {output_folder(inp)}. "
            "This loads the target and can take a long time on a CPU.")


@tool("train_medusa", TrainInput, gate="train", describe=describe_training, resolve=resolve_training)
def train_medusa(inp: TrainInput, ctx: ToolContext) -> dict:
    """Train Medusa heads for a target model (the target stays frozen) and save them, so the medusa
    method can run. Needs the user's approval: the first call returns approval_required (or asks in the
    terminal); only the exact approved training runs, once. Returns steps, losses and per-head accuracy."""
    out = output_folder(inp)
    files = [Path(f).expanduser() for f in inp.data_files] if inp.data_files else default_training_files()
    ctx.report(f"loading {inp.target}")
    loaded = models.load(inp.target, dtype=inp.dtype)
    config = TrainConfig(num_heads=inp.num_heads, steps=inp.steps, labels=inp.labels)

    def approved(plan: str) -> bool:  # the user already approved exactly this call through the gate
        ctx.report(plan)
        return True

    # tools.medusa.train loads torch: imported when a training runs, not when the tools are listed
    from tools.medusa.train import train_heads

    report = train_heads(loaded, files, out, config, confirm=approved, progress=False, base_model=inp.target)
    ctx.store.save_trained_heads(inp.target, out)
    return {"status": "trained", "heads_folder": str(out), **report.as_dict()}
