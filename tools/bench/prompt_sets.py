"""Prompt sets and prompt ids, with no torch behind them: the shipped Spec-Bench halves and JSONL prompt
files (what bench, the vLLM backend and the agent's tools read), and the exact ids a prompt becomes."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from prompts.spec_bench import EVAL_PATH, HALVES
from tools.bench.inputs import read_prompt_file
from tools.errors import ParameterError

BOTH_HALVES = "both"  # --prompts both: the fit half, then the eval half, side by side


def default_prompts_path() -> Path:
    """The eval half of the Spec-Bench prompts shipped with specpilot (prompts.spec_bench): benchmarks
    measure on it, while everything fitted or tuned reads only the fit half."""
    return EVAL_PATH


def prompt_set_path(path: str | Path | None) -> Path:
    """The file of a prompt set: a path, or "fit" / "eval" for the shipped halves (default: eval)."""
    if not path:
        return default_prompts_path()
    if str(path) in HALVES:
        return HALVES[str(path)]
    return Path(path).expanduser()


def load_prompt_set(path: str | Path | None, category: str | None = None, limit: int | None = None) -> list[dict]:
    """Read a JSONL prompt set; keep ``category`` only and at most ``limit`` prompts per category.

    Each row comes back with ``question_id`` (the line number when missing), ``category`` and ``prompt``.
    """
    if str(path) == BOTH_HALVES:
        raise ParameterError("'both' names two prompt sets, not one", hint="read 'fit' and 'eval' one at a time")
    file = prompt_set_path(path)
    if not file.is_file():
        raise ParameterError(f"prompt file {file} does not exist",
                             hint="pass --prompts FILE.jsonl with question_id, category and prompt per line")
    rows, per_category = [], defaultdict(int)
    for number, line in enumerate(read_prompt_file(file).splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ParameterError(f"{file} line {number} is not JSON: {exc.msg}", hint="one JSON object per line") from None
        if not isinstance(row, dict) or not isinstance(row.get("prompt"), str) or not row["prompt"].strip():
            raise ParameterError(f"{file} line {number} has no 'prompt' text",
                                 hint="each line needs question_id, category and prompt")
        row = {"question_id": row.get("question_id", number), "category": str(row.get("category") or "uncategorised"),
               "prompt": row["prompt"]}
        if category is not None and row["category"] != category:
            continue
        if limit is not None and per_category[row["category"]] >= limit:
            continue
        per_category[row["category"]] += 1
        rows.append(row)
    if not rows:
        raise ParameterError(f"no prompts selected from {file}" + (f" in category {category!r}" if category else ""),
                             hint="check --category against the file's categories")
    return rows


def prompt_ids_for(tokenizer, prompt: str, chat: bool) -> list[int]:
    """The exact ids fed to the model: the chat template applied unless ``chat`` is False."""
    if chat and getattr(tokenizer, "chat_template", None):
        ids = tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=True, return_dict=False
        )
        if isinstance(ids, dict) or hasattr(ids, "keys"):
            ids = ids["input_ids"]
        return [int(t) for t in ids]
    ids = tokenizer(prompt, add_special_tokens=True)["input_ids"]
    if not ids:
        raise ParameterError("the prompt gives no tokens", hint="give a non-empty prompt")
    return [int(t) for t in ids]
