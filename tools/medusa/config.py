"""Medusa training's settings and default text, with no torch behind them: the train_medusa tool's
schema and its approval text read these when tools are listed; tools.medusa.train does the training.
"""

from __future__ import annotations

import sysconfig
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class TrainConfig(BaseModel):
    """Settings of one Medusa training run; every default is defined here."""

    model_config = ConfigDict(extra="forbid")

    num_heads: int = Field(4, ge=1, le=16, description="number of Medusa heads (head k predicts token t+k+2)")
    num_layers: int = Field(1, ge=1, le=8, description="ResBlocks per head")
    steps: int = Field(2000, ge=1, description="optimizer steps in total (a resumed run continues up to this)")
    batch_size: int = Field(256, ge=1, description="positions per step")
    learning_rate: float = Field(1e-3, gt=0.0)
    weight_decay: float = Field(0.0, ge=0.0)
    warmup_steps: int = Field(50, ge=0)
    head_decay: float = Field(0.8, gt=0.0, le=1.0, description="loss weight of head k is head_decay**k")
    labels: Literal["self", "text"] = Field("self", description="self-distillation or the text's own tokens")
    seq_len: int = Field(512, ge=8, description="tokens per cached sequence")
    max_tokens: int = Field(200_000, ge=16, description="training text used, in tokens")
    candidate_tokens: int = Field(8192, ge=16, description="softmax size per step; full softmax when the vocabulary fits")
    checkpoint_every: int = Field(200, ge=1)
    eval_positions: int = Field(512, ge=0, description="held-out positions for the final accuracy")
    seed: int = 0
    save_dtype: Literal["float32", "bfloat16", "float16"] = "bfloat16"



# Text that ships with every Python install (never the Spec-Bench prompts used for evaluation):
# stdlib modules (code with docstrings and comments) and pydoc_data/topics.py (the language
# reference as English prose).
DEFAULT_STDLIB_FILES = (
    "pydoc_data/topics.py", "argparse.py", "dataclasses.py", "textwrap.py", "difflib.py", "functools.py",
    "heapq.py", "csv.py", "statistics.py", "fractions.py", "calendar.py", "shutil.py", "tempfile.py",
    "random.py", "json/encoder.py", "json/decoder.py", "collections/__init__.py", "logging/__init__.py",
    "email/message.py", "urllib/parse.py", "unittest/case.py", "string.py", "bisect.py", "queue.py",
)


def stdlib_dir() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def default_training_files() -> list[Path]:
    """The default training text: DEFAULT_STDLIB_FILES that exist in this Python's standard library."""
    root = stdlib_dir()
    return [root / name for name in DEFAULT_STDLIB_FILES if (root / name).is_file()]
