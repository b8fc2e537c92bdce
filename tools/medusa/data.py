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
from functools import lru_cache
from pathlib import Path

import torch

from tools.errors import ParameterError
from tools.medusa.chat_prompts import chat_prompt

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


# --------------------------------------------------------------------------- the "wide" variety
LANGUAGES = ("Python", "Python", "Python", "C++", "JavaScript", "Java", "Go", "Rust")
WIDE_CODE_TEMPLATES = (
    "Write a {lang} function `{name}` that {doc}",
    "Implement `{name}` in {lang}: {doc} Explain the approach briefly.",
    "Write a {lang} program that {doc} Include a short usage example.",
    "How would you {verb} in {lang}? The function `{name}` {doc} Show the code.",
    "Write {lang} code for `{name}`, which {doc} Then describe its time complexity.",
)
WIDE_MATH_TEMPLATES = (
    "A rectangle is {a} cm long and {b} cm wide. What are its area and perimeter? Show your steps.",
    "The points ({x1}, {y1}), ({x2}, {y2}) and ({x3}, {y3}) form a triangle. Find its area step by step.",
    "If {a}% of a number is {b}, what is the number? Explain.",
    "Solve the system: {a}x + {c}y = {b}, {d}x - y = {e}. Show each step.",
    "A bag holds {c} red and {d} blue marbles. Two are drawn without replacement. What is the probability "
    "that both are red? Show the calculation.",
    "What is the sum of the first {a} positive integers that are multiples of {c}? Explain how you get it.",
    "An account earns {c}% interest a year, compounded yearly. How much do {a}00 dollars grow to in {d} years?",
    "Find all real x with {quad} = 0. Show your work.",
    "A car uses {c} liters of fuel per 100 km. How much fuel does a {a}{b} km trip need? Explain.",
    "What is the remainder when {a}{b} is divided by {c}? Show the reasoning.",
    "Two workers finish a job in {c} and {d} hours alone. How long do they take together? Explain.",
    "A sequence starts {a}, {a2}, {a3}, ... (adding {c} each time). What is term number {d}{c}? Show steps.",
)
WIDE_PROSE_TEMPLATES = (
    "Summarize the following documentation in a few sentences:\n\n{doc}",
    "Explain the following text to a beginner, with an example:\n\n{doc}",
    "Write a short, friendly email to a colleague about {subject}.",
    "Give five practical tips for {activity}, one sentence each.",
    "Write a short blog paragraph about {subject}.",
    "Compare {thing1} and {thing2} in a short answer with pros and cons.",
)
SUBJECTS = ("a code review next week", "moving the team meeting", "a new build pipeline", "a bug in the release",
            "learning a new programming language", "writing good documentation", "a hiking trip", "a book club",
            "remote work habits", "a conference talk", "cleaning up old files", "a recipe swap",
            "an office plant rota", "a charity bike ride", "switching to a new editor", "a database migration",
            "a team lunch", "an outage post-mortem", "onboarding a new colleague", "a budget review",
            "a city museum visit", "a volunteering day", "the history of the printing press", "solar panels at home")
ACTIVITIES = ("debugging a program", "learning math", "writing unit tests", "giving a presentation",
              "saving money", "studying for an exam", "keeping a garden", "running a small project")
THINGS = ("lists and tuples", "SQL and NoSQL databases", "recursion and iteration", "tabs and spaces",
          "unit tests and integration tests", "threads and processes", "arrays and linked lists",
          "compiled and interpreted languages", "trains and planes for travel", "paper and e-books")


@lru_cache(maxsize=4)
def _stdlib_functions(limit_files: int = 400) -> tuple[tuple[str, str], ...]:
    """(name, first docstring line) of public functions across the standard library's modules (parsed
    once per process: ~10 s of ``ast.parse``)."""
    root = _stdlib()
    skip = ("test", "idlelib", "tkinter", "turtledemo", "lib2to3", "site-packages", "ensurepip", "__phello__")
    found = []
    files = sorted(p for p in root.rglob("*.py") if not any(part.startswith(skip) for part in p.relative_to(root).parts))
    for path in files[:limit_files]:
        try:
            tree = ast.parse(path.read_text(errors="replace"))
        except (SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
                doc = (ast.get_docstring(node) or "").strip().split("\n")[0].strip()
                if 20 <= len(doc) <= 160 and doc[0].isalpha():
                    doc = doc[0].lower() + doc[1:]
                    found.append((node.name, doc if doc.endswith(".") else doc + "."))
    return tuple(found)


@lru_cache(maxsize=1)
def _module_docs() -> tuple[str, ...]:
    """First paragraphs (100-700 characters) of standard-library module docstrings (parsed once per process)."""
    docs = []
    for path in sorted(_stdlib().glob("*.py")):
        try:
            doc = ast.get_docstring(ast.parse(path.read_text(errors="replace"))) or ""
        except (SyntaxError, ValueError):
            continue
        para = doc.strip().split("\n\n")[0].strip()
        if 100 <= len(para) <= 700:
            docs.append(para)
    return tuple(docs)


def _wide_math(rng: random.Random) -> str:
    a, b, c, d = rng.randint(3, 60), rng.randint(2, 40), rng.randint(2, 9), rng.randint(2, 9)
    r1, r2 = rng.randint(-6, 9), rng.randint(-6, 9)
    pts = [rng.randint(-5, 8) for _ in range(6)]
    s, p = -(r1 + r2), r1 * r2  # x^2 + s x + p = (x - r1)(x - r2)
    quad = "x^2" + (f" {'+' if s > 0 else '-'} {abs(s)}x" if s else "") + (f" {'+' if p > 0 else '-'} {abs(p)}" if p else "")
    return rng.choice(WIDE_MATH_TEMPLATES).format(
        a=a, b=b, c=c, d=d, e=rng.randint(1, 30), quad=quad, a2=a + c, a3=a + 2 * c,
        x1=pts[0], y1=pts[1], x2=pts[2], y2=pts[3], x3=pts[4], y3=pts[5])


def _wide_prompts(n: int, rng: random.Random) -> list[str]:
    """40% code in several languages from stdlib function docs, 30% varied math, 30% prose."""
    funcs = list(_stdlib_functions())
    rng.shuffle(funcs)
    docs = _module_docs()
    verbs = ("do this", "solve this", "write this", "build this")
    n_code, n_math = (4 * n) // 10, (3 * n) // 10
    out: list[str] = []
    for name, doc in funcs[:n_code]:
        out.append(rng.choice(WIDE_CODE_TEMPLATES).format(lang=rng.choice(LANGUAGES), name=name, doc=doc,
                                                          verb=rng.choice(verbs)))
    seen = set(out)
    while len(out) < n_code + n_math:
        p = _wide_math(rng)
        if p not in seen:
            seen.add(p)
            out.append(p)
    _fill_unique(out, seen, n, lambda: rng.choice(WIDE_PROSE_TEMPLATES).format(
        doc=rng.choice(docs) if docs else "Python is a programming language.", subject=rng.choice(SUBJECTS),
        activity=rng.choice(ACTIVITIES), thing1=(t := rng.choice(THINGS)).split(" and ")[0],
        thing2=t.split(" and ")[1]))
    rng.shuffle(out)
    return out


def _fill_unique(out: list[str], seen: set[str], n: int, make) -> None:
    """Append prompts from ``make()`` that are not in ``seen`` until ``out`` holds ``n`` (at most 50 n tries)."""
    tries = 0
    while len(out) < n and tries < 50 * n:
        tries += 1
        p = make()
        if p not in seen:
            seen.add(p)
            out.append(p)


# --------------------------------------------------------------------------- the "mixed" variety
ROLES = ("a ship's captain", "a museum guide", "a detective", "a chef", "a medieval knight", "a travel agent",
         "a patient math tutor", "a sports coach", "a librarian", "a startup founder", "a park ranger", "a poet")
ROLE_TASKS = ("Introduce yourself and describe a typical day", "Give advice to someone starting out",
              "Tell a short story about your most memorable day", "Answer: what do you value most, and why?",
              "Explain your job to a ten-year-old", "Persuade a visitor to stay one more day")
PHRASES = ("The meeting has been moved to Thursday afternoon.", "Please keep the door closed when you leave.",
           "The library opens at nine and closes at six.", "We walked along the river until the sun went down.",
           "Could you send me the report by Friday?", "The train was late because of the snow.",
           "My grandmother grows tomatoes and beans in her garden.", "This recipe needs two eggs and a cup of flour.")
TARGET_LANGUAGES = ("French", "German", "Spanish", "Italian", "Portuguese", "Dutch")
GENERAL_QUESTIONS = ("Why is the sky blue?", "How do vaccines train the immune system?",
                     "What causes the seasons on Earth?", "Who invented the printing press, and why did it matter?",
                     "How does a bill become a law in a parliamentary democracy?", "What is inflation?",
                     "Why do cats purr?", "How do airplanes stay in the air?", "What was the Silk Road?",
                     "How does composting work?", "What is the difference between weather and climate?",
                     "Why did the Roman Empire split in two?", "How do noise-cancelling headphones work?",
                     "What is a black hole?", "Why do we dream?", "How are rainbows formed?")
PUZZLES = ("{a} people shake hands, each with each other once. How many handshakes are there? Reason it out.",
           "If all bloops are razzies and some razzies are lazzies, must some bloops be lazzies? Explain.",
           "A clock shows {c}:00. What is the angle between its hands? Think step by step.",
           "Anna is older than Ben, Ben is older than Cara, and Dan is younger than Cara. Who is the youngest? Why?",
           "You have {c} boxes and {a} balls. Must some box hold at least two balls? Explain the principle.")
MIXED_PROSE_TEMPLATES = (
    "Pretend you are {role}. {role_task}.", "Translate into {language}: \"{phrase}\"",
    "{question} Answer in a short paragraph.", "{question}", "Write a short story of about 150 words about {subject}.",
    "Write a persuasive paragraph about {subject}.", "Extract the key facts from this text as a bullet list:\n\n{doc}",
    "Read the passage and answer: what is it mainly about, and who would use it?\n\n{doc}",
    "Write a short poem about {subject}.", "Give a balanced overview of the pros and cons of {thing1} versus {thing2}.",
)


def _mixed_prose(rng: random.Random) -> str:
    docs = _module_docs()
    t = rng.choice(THINGS)
    if rng.random() < 0.2:
        return rng.choice(PUZZLES).format(a=rng.randint(4, 30), c=rng.randint(2, 11))
    return rng.choice(MIXED_PROSE_TEMPLATES).format(
        role=rng.choice(ROLES), role_task=rng.choice(ROLE_TASKS), language=rng.choice(TARGET_LANGUAGES),
        phrase=rng.choice(PHRASES), question=rng.choice(GENERAL_QUESTIONS), subject=rng.choice(SUBJECTS),
        doc=rng.choice(docs) if docs else "Python is a programming language.", thing1=t.split(" and ")[0],
        thing2=t.split(" and ")[1])


def _mixed_prompts(n: int, rng: random.Random) -> list[str]:
    """The fit half of the shipped Spec-Bench prompts (never the eval half), then prose in many styles (role
    play, translation, general questions, stories, poems, extraction and reading of module docs, puzzles):
    the complement of the code-and-math ``basic`` files."""
    from prompts.spec_bench import half_path, read_jsonl

    out = [row["prompt"] for row in read_jsonl(half_path("fit"))][:n]
    _fill_unique(out, set(out), n, lambda: _mixed_prose(rng))
    rng.shuffle(out)
    return out


def _chat_prompts(n: int, rng: random.Random) -> list[str]:
    out: list[str] = []
    _fill_unique(out, set(), n, lambda: chat_prompt(rng))
    return out


VARIETIES = ("basic", "wide", "mixed", "chat")


def build_prompts(n: int = 240, seed: int = 0, variety: str = "basic") -> list[str]:
    """About ``n`` prompts. ``basic``: half coding (stdlib functions and their docstrings), a third
    Python concepts (the language reference's topics), the rest small math word problems.
    ``wide``: code tasks in several languages from functions across the whole standard library,
    twelve kinds of templated math problems, and prose (summaries of module docs, emails, tips,
    comparisons). ``mixed``: the fit half of the shipped Spec-Bench prompts and prose in many styles (role
    play, translation, general questions, stories, poems, extraction, puzzles). ``chat``: requests of every kind
    a chat assistant gets, combined from lists (tools.medusa.chat_prompts), tens of thousands distinct."""
    if variety not in VARIETIES:
        raise ParameterError(f"unknown prompt variety {variety!r}", hint=f"use one of {', '.join(VARIETIES)}")
    rng = random.Random(seed)
    if variety == "wide":
        return _wide_prompts(n, rng)
    if variety == "mixed":
        return _mixed_prompts(n, rng)
    if variety == "chat":
        return _chat_prompts(n, rng)
    code, topics = _function_prompts(rng), _topic_prompts(rng)
    rng.shuffle(code)
    rng.shuffle(topics)
    n_code, n_topic = n // 2, n // 3
    prompts = code[:n_code] + topics[:n_topic] + _math_prompts(rng, n - min(n_code, len(code)) - min(n_topic, len(topics)))
    rng.shuffle(prompts)
    return prompts


def render_prompt(tokenizer, prompt: str) -> str:
    """``prompt`` as one user turn in the chat template, up to where the answer starts."""
    return tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                         tokenize=False)


def check_skip(n_prompts: int, skip: int) -> None:
    """Refuse a ``skip`` that leaves no prompt of the ``n_prompts`` (before any model loads)."""
    if not 0 <= skip < n_prompts:
        raise ParameterError(f"--skip {skip} must be at least 0 and below --prompts ({n_prompts})",
                             hint="ask for more prompts than you skip (--prompts N --skip M with M < N)")


@torch.inference_mode()
def generate_answers(generator, prompts: list[str], max_new_tokens: int = 192, batch_size: int = 16,
                     progress=None, on_batch=None) -> list[str]:
    """Greedy chat answers to ``prompts`` from ``generator`` (a LoadedModel), batched with left padding;
    returns each conversation rendered with the chat template (prompt and answer). ``on_batch(texts)``
    gets each batch's conversations as soon as they are written."""
    tok = generator.tokenizer
    model = generator.model
    tok.padding_side = "left"
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    texts = []
    for start in range(0, len(prompts), batch_size):
        batch = prompts[start: start + batch_size]
        chats = [render_prompt(tok, p) for p in batch]
        enc = tok(chats, return_tensors="pt", padding=True, add_special_tokens=False).to(model.device)
        out = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=pad)
        done = [chat + tok.decode(row, skip_special_tokens=True) + (tok.eos_token or "") + "\n"
                for chat, row in zip(chats, out[:, enc["input_ids"].shape[1]:])]
        texts += done
        if on_batch:
            on_batch(done)
        if progress:
            progress(f"generated {min(start + batch_size, len(prompts))}/{len(prompts)} answers")
    return texts


def write_distill_data(generator, out: str | Path, n_prompts: int = 240, max_new_tokens: int = 192,
                       batch_size: int = 16, seed: int = 0, progress=None, variety: str = "basic",
                       restart: bool = False, skip: int = 0) -> Path:
    """Build prompts, generate answers and append them to ``out`` batch by batch (one conversation after
    another), so an interrupted run keeps what it wrote; a later call with the same settings answers only
    the prompts ``out`` does not hold yet, each as its whole rendered chat turn, so a prompt that only appears
    inside another prompt or an answer is still answered (``restart``: start the file again). ``skip``: leave
    out the first ``skip`` prompts of the list (answered in another file), so a second file continues the
    first's list."""
    check_skip(n_prompts, skip)
    prompts = build_prompts(n_prompts, seed, variety)[skip:]
    path = Path(out).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    if restart or not path.is_file():
        path.write_text("")
    held = path.read_text()
    todo = [p for p in prompts if render_prompt(generator.tokenizer, p) not in held]  # the whole rendered turn
    if progress and len(todo) < len(prompts):
        progress(f"resuming: {len(prompts) - len(todo)} of {len(prompts)} prompts already answered in {path.name}")

    def append(texts: list[str]) -> None:
        with path.open("a") as f:
            f.write("".join(texts))

    generate_answers(generator, todo, max_new_tokens, batch_size, progress, on_batch=append)
    return path
