"""Self-distillation data for Medusa heads: chat-formatted answers written by a model of the target's
family to prompts built from text that ships with Python (never the Spec-Bench evaluation prompts).

Medusa heads must predict what the target generates, so they learn best from text in the form
the target produces at inference: assistant answers inside its chat template. Heads trained on raw
library source see a different distribution. Here a generator (by default the target's small
sibling, which shares its tokenizer and agrees with it on most tokens) answers prompts in batches;
training then labels every position with the target's own greedy predictions (labels="self"), so
the heads learn the target's behaviour on in-distribution text.
"""

from __future__ import annotations

import ast
import random
import sysconfig
from pathlib import Path

import torch

STDLIB_MODULES = (
    "textwrap.py", "difflib.py", "heapq.py", "bisect.py", "statistics.py", "fractions.py", "calendar.py",
    "string.py", "shutil.py", "csv.py", "json/encoder.py", "functools.py", "random.py", "base64.py",
    "colorsys.py", "fnmatch.py", "glob.py", "ipaddress.py", "locale.py", "posixpath.py", "quopri.py",
    "shlex.py", "sched.py", "secrets.py", "smtplib.py", "tabnanny.py", "uu.py", "wave.py", "zipapp.py",
)
EXPLAIN_TEMPLATES = (
    "Explain {topic} in Python with a short example.",
    "What is {topic} in Python, and when should I use it? Answer briefly.",
)
CODE_TEMPLATES = (
    "Write a Python function `{name}` that {doc} Include a docstring.",
    "Implement `{name}` in Python: {doc} Keep it short and add one usage example.",
)
MATH_TEMPLATES = (
    "A shop sells pencils at {a} cents each and notebooks at {b} cents each. How much do {c} pencils and "
    "{d} notebooks cost? Show the steps.",
    "A train travels {a} km in {c} hours and then {b} km in {d} hours. What is its average speed? Explain.",
    "Solve for x: {a}x + {b} = {c}x + {d}. Show your work.",
)


def _stdlib() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def _function_prompts(rng: random.Random) -> list[str]:
    prompts = []
    for name in STDLIB_MODULES:
        path = _stdlib() / name
        if not path.is_file():
            continue
        tree = ast.parse(path.read_text(errors="replace"))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
                doc = (ast.get_docstring(node) or "").strip().split("\n")[0].strip()
                if 20 <= len(doc) <= 160:
                    doc = doc[0].lower() + doc[1:]
                    if not doc.endswith("."):
                        doc += "."
                    prompts.append(rng.choice(CODE_TEMPLATES).format(name=node.name, doc=doc))
    return prompts


def _topic_prompts(rng: random.Random) -> list[str]:
    try:
        from pydoc_data.topics import topics
    except ImportError:
        return []
    names = sorted(t for t in topics if t.isidentifier() and len(t) > 3)
    return [rng.choice(EXPLAIN_TEMPLATES).format(topic=f"`{t}`" if t.islower() else t) for t in names]


def _math_prompts(rng: random.Random, n: int) -> list[str]:
    return [rng.choice(MATH_TEMPLATES).format(a=rng.randint(2, 90), b=rng.randint(2, 90), c=rng.randint(2, 12),
                                              d=rng.randint(2, 12)) for _ in range(n)]


def build_prompts(n: int = 240, seed: int = 0) -> list[str]:
    """About ``n`` prompts: half coding (stdlib functions and their docstrings), a third Python concepts
    (the language reference's topics), the rest small math word problems."""
    rng = random.Random(seed)
    code, topics = _function_prompts(rng), _topic_prompts(rng)
    rng.shuffle(code)
    rng.shuffle(topics)
    n_code, n_topic = n // 2, n // 3
    prompts = code[:n_code] + topics[:n_topic] + _math_prompts(rng, n - min(n_code, len(code)) - min(n_topic, len(topics)))
    rng.shuffle(prompts)
    return prompts


@torch.inference_mode()
def generate_answers(generator, prompts: list[str], max_new_tokens: int = 192, batch_size: int = 16,
                     progress=None) -> list[str]:
    """Greedy chat answers to ``prompts`` from ``generator`` (a LoadedModel), batched with left padding;
    returns each conversation rendered with the chat template (prompt and answer)."""
    tok = generator.tokenizer
    model = generator.model
    tok.padding_side = "left"
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    texts = []
    for start in range(0, len(prompts), batch_size):
        batch = prompts[start: start + batch_size]
        chats = [tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True, tokenize=False)
                 for p in batch]
        enc = tok(chats, return_tensors="pt", padding=True, add_special_tokens=False).to(model.device)
        out = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=pad)
        for chat, row in zip(chats, out[:, enc["input_ids"].shape[1]:]):
            texts.append(chat + tok.decode(row, skip_special_tokens=True) + (tok.eos_token or "") + "\n")
        if progress:
            progress(f"generated {min(start + batch_size, len(prompts))}/{len(prompts)} answers")
    return texts


def write_distill_data(generator, out: str | Path, n_prompts: int = 240, max_new_tokens: int = 192,
                       batch_size: int = 16, seed: int = 0, progress=None) -> Path:
    """Build prompts, generate answers and write them to ``out`` (one conversation after another)."""
    prompts = build_prompts(n_prompts, seed)
    texts = generate_answers(generator, prompts, max_new_tokens, batch_size, progress)
    path = Path(out).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(texts))
    return path
