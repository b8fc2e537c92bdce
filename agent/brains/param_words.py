"""The parameter values a message sets, read by the rule planner ("k=6", "a window of 7", "top_p 0.9", "W to 7",
"64 new tokens", "k four", "turn off adaptive K", "8 threads"): plain text processing, as in agent.brains.phrases."""

from __future__ import annotations

import re

from agent.brains.number_words import digits
from tools.agent_tools.saved_params import run_fields
from tools.engine.medusa_trees import TREES
from tools.engine.params import PARAM_MODELS
from tools.models import BUILTIN_MODELS

I = re.IGNORECASE

# run settings in words: the engine's own modes beside ours, no chat template, a dtype, a built-in model as the
# target, the llama.cpp backend
PEERS = re.compile(r"\b(?:hf|hugging ?face|transformers)(?:'s|')? (?:own |built-?in )?(?:assisted|prompt[- ]lookup|"
                   r"implementation|"
                   r"generate)|\bpeers?\b|\bupstream\b|"
                   r"\breference implementations?\b|\bown (?:modes?|implementations?) of (?:transformers|hf|"
                   r"hugging ?face)\b|"
                   r"\b\w+(?:'s|s') own (?:built-?in )?(?:modes?|implementations?|versions?|speculative|assisted|"
                   r"prompt[- ]lookup)", I)
RAW_PROMPT = re.compile(r"\b(?:no|without (?:the |a )?) ?chat template|\braw (?:prompt|completion|mode|text)\b|"
                        r"\bchat template off\b", I)
DTYPE_WORDS = {"bfloat16": r"bf16|bfloat16", "float16": r"fp16|float16|half precision", "float32": r"fp32|float32"}
AS_TARGET = re.compile(rf"(?:^|\s)({'|'.join(map(re.escape, BUILTIN_MODELS))}|[~.]?/\S+)"
                       r"\s+(?:as (?:the |my |a )?)?target\b(?! model\b)", I)  # "X as the target", "the X target"
BACKEND_WORDS = re.compile(r"\bllama[. -]?cpp\b(?!-python)|\bgguf\b", I)  # not the package llama-cpp-python

# ---- parameter values ("k=6", "window of 7", "top_p 0.9", "lookahead W to 7") -----------------
PARAM_ALIASES = {
    "k_max": r"k[_ ]max|max(?:imum)? k", "adaptive_k": r"adaptive[_ ]k", "k": r"k|draft length",
    "window": r"w|window(?: size)?", "ngram": r"n|n-?gram(?: size)?", "guess": r"g|guess(?: set(?: size)?)?(?:es)?",
    "posterior_threshold": r"(?:posterior[_ ])?threshold", "posterior_alpha": r"(?:posterior[_ ])?alpha",
    "max_new_tokens": r"max[_ ]new(?:[_ ]tokens)?|max(?:imum)? tokens|new tokens", "temperature": r"temperature|temp",
    "top_p": r"top[_ -]?p", "top_k": r"top[_ -]?k", "target": r"target(?: model)?", "draft": r"draft model",
    "num_candidate_tokens": r"candidate tokens", "num_candidates": r"candidates", "max_draft_tokens": r"draft tokens",
    "tree_nodes": r"tree nodes|nodes|tree size", "max_ngram_size": r"max(?:imum)? n-?gram(?: size)?",
    "min_ngram_size": r"min(?:imum)? n-?gram(?: size)?",
    "topk": r"top[_ -]?k children|children per node", "repeats": r"repats|repeates|repets|reps",
}
QUANT_MODES = ("int8", "gguf", "none", "auto")
CONNECTOR = r"[ \t]*(?:=|:|\bset to\b|\bto\b|\bof\b|\bat\b|\bis\b|\bas\b)?[ \t]*"  # on one line
NUMBER = r"-?\d+(?:\.\d+)?"
VALUE = rf"(?P<value>{NUMBER}(?!\w|\.\d)|true|false|yes|no|on|off|[\w./~][\w.:/~-]*)"
MODEL_FIELDS = ("target", "draft", "medusa_heads", "dtype", "device_map", "tree", "draft_quant")
BOOL_WORDS = {"true": True, "yes": True, "on": True, "false": False, "no": False, "off": False, "enabled": True,
              "disabled": False}


def _param_names() -> dict[str, str]:
    """{regex: field} for every alias and every exact field name, longest first (so top_k wins over k)."""
    names = {alias: name for name, alias in PARAM_ALIASES.items()}
    for model in PARAM_MODELS.values():
        names.update({re.escape(f): f for f in model.model_fields})
    names.update({re.escape(f): f for f in run_fields()})
    return dict(sorted(names.items(), key=lambda kv: -len(kv[0])))


PARAM_NAMES = _param_names()
ASSIGNMENT = re.compile(rf"(?<![\w-])(?P<name>{'|'.join(f'(?:{a})' for a in PARAM_NAMES)})(?![\w-]){CONNECTOR}{VALUE}",
                        I)
# "draft" before a parameter's name names no method ("draft depth 6": EAGLE's depth)
DRAFT_PARAMETER = re.compile(r"\bdraft(?=[- ](?:depth|lengths?|vocab\w*|trees?|heads?(?! to)|tokens?)\b)", I)
# "keep K fixed", "don't let it adapt": the draft method's K stays as given
FIXED_K = re.compile(r"\b(?:keep|hold) k (?:fixed|constant)|\bk (?:fixed|constant)\b|"
                     r"\b(?:do ?n[o']?t|not|never) (?:let (?:it|k) )?adapt|"
                     r"\bfixed k\b|\b(?:no|without(?: the)?) adaptive k\b", I)
# "seed the n-gram pool from the prompt": lookahead's pool_from_prompt, in words
POOL_FROM_PROMPT = re.compile(r"\b(?:seed|fill|prime|start)\w* (?:the )?(?:n-?gram )?pool from the prompt\b", I)
FIXED_AT = re.compile(r"\bk (?:fixed|constant|held) at (\d+)\b", I)


def field_of(alias: str) -> str | None:
    """The parameter field an alias names ("W" -> window, "top-p" -> top_p)."""
    return next((name for pattern, name in PARAM_NAMES.items() if re.fullmatch(pattern, alias, I)), None)


BOOL_FIELDS = {f for model in PARAM_MODELS.values() for f, info in model.model_fields.items()
               if info.annotation is bool} | {"chat"}


def typed(name: str, raw: str):
    """A parameter value as its type: int, float, bool (for a yes/no field only: "64 new tokens on ..." sets no
    flag), or text for model references and names."""
    low = raw.lower()
    if re.fullmatch(NUMBER, raw):
        return float(raw) if "." in raw or name in ("temperature", "top_p", "posterior_threshold",
                                                    "posterior_alpha", "draft_confidence") else int(raw)
    if low in BOOL_WORDS:
        return BOOL_WORDS[low] if name in BOOL_FIELDS else None
    if name in ("target", "draft", "medusa_heads") and re.fullmatch(r"[A-Za-z]+", raw):
        return None  # "the default target: what depth ...": a model reference has a digit, a dash, a dot or a slash
    return raw.rstrip(".,;:") if name in MODEL_FIELDS else None  # "target X." ends the sentence


def assignments(text: str) -> list[tuple[re.Match, str, object]]:
    """The parameter assignments in ``text``: (match, field, typed value). A one-letter name needs a
    number after it; a model field (target, draft) needs "=", ":", "to" or "is" before its reference."""
    found, pos = [], 0
    while match := ASSIGNMENT.search(text, pos):
        name = field_of(match.group("name"))
        raw = match.group("value")
        value = typed(name, raw) if name else None
        connector = text[match.end("name"):match.start("value")].strip().lower()
        line_start = not text[:match.start()].strip(" \t") or text[:match.start()].rstrip(" \t").endswith("\n")
        if value is None or (len(match.group("name")) == 1 and not re.fullmatch(NUMBER, raw)) or \
                (name in MODEL_FIELDS and connector not in ("=", ":", "to", "is", "set to") and not line_start and
                 raw.lower().rstrip(".,;:") not in BUILTIN_MODELS and "/" not in raw and
                 not (name == "tree" and raw.lower().rstrip(".,;:") in TREES) and  # "tree chain4" names a tree
                 not (name == "draft_quant" and raw.lower().rstrip(".,;:") in QUANT_MODES)):  # "draft_quant gguf"
            pos = match.start() + 1
            continue
        found.append((match, name, value))
        pos = match.end()
    return found


# "64 new tokens" (not "15 tokens per candidate")
TOKENS_FIRST = re.compile(r"\b(\d+)\s+(?:(?:new|max(?:imum)?|output)\s+){0,2}tok(?:en)?s?\b(?!/|\s+per\b)", I)
# "15 candidate tokens": a parameter named after its number
NAME_AFTER = re.compile(r"\b(\d+)[\s-]+(candidate tokens|candidates|draft tokens|tree nodes|(?:cpu )?threads?|guesses|"
                        r"warm-?ups?(?: runs?)?|children(?: per node)?|tokens per candidate|wide window)\b"
                        r"(?!\s*[=:]?\s*\d)", I)
AFTER_NAMES = {"thread": "threads", "warm": "warmup", "children": "topk",
               "tokens per candidate": "num_candidate_tokens", "wide window": "window"}
# "n-grams up to 4 long, at least 2": prompt lookup's n-gram sizes
NGRAM_BOUNDS = {"max_ngram_size": re.compile(r"\b(?:up to|at most|max(?:imum)?(?: of)?)\s+(\d+)", I),
                "min_ngram_size": re.compile(r"\b(?:at least|min(?:imum)?(?: of)?)\s+(\d+)", I)}
DEVICE_MAP = re.compile(r"\bdevice[_ -]?map\s*[=:]?\s*(auto|balanced|sequential)\b", I)
REPEATS_FIRST = re.compile(r"\b(\d+)\s+(?:timed |measured )?(?:repeats?|reps|repetitions|repeates|repats|repets|"
                           r"runs each|times each|"
                           r"timed runs)\b|"
                           r"\b(?:repeat\w*|measure\w*|time|run)\b[^.:'\"]{0,25}?\b(\d+) times\b", I)
SWITCHED = re.compile(r"\b(?:turned|switched|set)\s+(on|off)\b", I)
# "turn off adaptive K", "disable trim": a yes/no parameter switched before its name
SWITCH_BEFORE = re.compile(r"\b(?:(?:turn|switch)(?:ed)?\s+(?P<state>on|off)|(?P<verb>disable|enable|deactivate|"
                           r"activate)d?)\s+(?:the\s+)?(?P<name>"
                           + "|".join(alias for alias, name in PARAM_NAMES.items() if name in BOOL_FIELDS)
                           + r")(?![\w-])", I)


def switched_before(text: str) -> str:
    """``text`` with "turn off NAME" / "disable NAME" written as "NAME off" (and "on" alike)."""
    def put(m: re.Match) -> str:
        state = m.group("state") or ("off" if m.group("verb").lower().startswith(("dis", "deact")) else "on")
        return f"{m.group('name')} {state.lower()}"
    return SWITCH_BEFORE.sub(put, text)
NOT_THIS = re.compile(r"\b(?:not|no|instead of|rather than|avoid|without|than)\s+$", I)
BLAMED = re.compile(r"\s+(?:gave|gives|was|is|broke|breaks|caused|had)\b", I)
GREEDY = re.compile(r"\bgreedy\b(?! (?:acceptance|verification|tree|path))", I)  # "greedy only": temperature 0
NO_WARMUP = re.compile(r"\bno warm-?ups?\b|\bwithout (?:a |any )?warm-?ups?\b", I)
KEY_TOKENS = re.compile(r"(?<![\w-])tokens(?=\s*[:=]\s*\d)", I)
# "at 0.6 temperature": the temperature named after its value
TEMPERATURE_AFTER = re.compile(r"\b(\d*\.\d+|\d+)\s+(?:temperature|temp)\b(?!\s*[=:]?\s*\d)", I)
TREE_FIRST = re.compile(rf"\b({'|'.join(map(re.escape, TREES))})\s+tree\b|"  # "the cpu16 tree"
                        rf"(?<![\w/.-])({'|'.join(map(re.escape, TREES))})(?![\w/.-])", I)  # a tree's name alone
HEADS_IN = re.compile(r"\bheads?\s+(?:in|at|from|under)\s+((?:~|\.{1,2})?/[\w./-]*[\w-])", I)  # "the heads in ./h"
DRAFT_QUANT = re.compile(r"\bquanti[sz](?:e|ed|ing)\s+(?:to\s+|in\s+|as\s+)?(int8|none|gguf)\b|"
                         r"\b(int8|gguf|unquanti[sz]ed)\s+draft\b|"
                         r"\bdraft(?: model)? (?:unquanti[sz]ed|in int8|in gguf|from (?:its|the) gguf(?: file)?)\b",
                         I)  # "the draft model quantised to int8", "a gguf draft"


def find_params(text: str) -> dict:
    """Parameter values a message sets ("k=6", "a window of 7", "top_p 0.9", "W to 7", "64 new tokens", "k four")."""
    text = SWITCHED.sub(r"\1", switched_before(digits(text)))  # "adaptive K turned off" -> "adaptive K off"
    text = KEY_TOKENS.sub("max_new_tokens", text)  # "tokens: 256"
    found, repeats = TOKENS_FIRST.search(text), REPEATS_FIRST.search(text)
    params = {name: value for _, name, value in assignments(text)}
    params |= {"max_new_tokens": int(found.group(1))} if found else {}  # "3 repeats at 512 new tokens": the number
    params |= {"repeats": int(repeats.group(1) or repeats.group(2))} if repeats else {}  # wins over "repeats at 512"
    params |= {"tree": (tree.group(1) or tree.group(2)).lower()} if (tree := TREE_FIRST.search(text)) else {}
    params |= {"medusa_heads": heads.group(1)} if (heads := HEADS_IN.search(text)) else {}
    params |= {"temperature": float(hot.group(1))} if (hot := TEMPERATURE_AFTER.search(text)) else {}
    params |= {"temperature": 0.0} if "temperature" not in params and GREEDY.search(text) else {}
    params |= {"warmup": 0} if NO_WARMUP.search(text) else {}
    if quant := DRAFT_QUANT.search(text):
        said = quant.group(0).lower()
        params["draft_quant"] = "none" if "unquanti" in said or "none" in said else "gguf" if "gguf" in said else "int8"
    params |= {"target": named.group(1)} if (named := AS_TARGET.search(text)) else {}  # "smollm2-... as the target"
    params |= {after_name(m.group(2)): int(m.group(1)) for m in NAME_AFTER.finditer(text)}
    if grams := re.search(r"\bn-?grams?\b", text, I):  # "n-grams up to 4 long, at least 2"
        near = re.split(r"[.;:]", text[grams.end(): grams.end() + 50])[0]
        params |= {f: int(m.group(1)) for f, bound in NGRAM_BOUNDS.items() if (m := bound.search(near))}
    params |= {"device_map": found.group(1).lower()} if (found := DEVICE_MAP.search(text)) else {}
    params |= {"chat": False} if RAW_PROMPT.search(text) else {}
    params |= {"adaptive_k": False} if FIXED_K.search(text) else {}
    params |= {"pool_from_prompt": True} if POOL_FROM_PROMPT.search(text) else {}
    params |= {"k": int(fixed.group(1))} if (fixed := FIXED_AT.search(text)) else {}  # "K fixed at 3"
    params |= {"peers": True} if PEERS.search(text) else {}
    engine = re.sub(r"\bgguf\b", " ", text, flags=I) if params.get("draft_quant") == "gguf" else text  # the draft's
    params |= {"backend": "llamacpp"} if BACKEND_WORDS.search(engine) else {}
    params |= asked_dtype(text)
    if "top_k" in params and re.search(r"\beagle\b", text, I) and re.search(r"\btopk\b", text, I):
        params["topk"] = params.pop("top_k")  # EAGLE's children per node, not sampling's top-k
    return params


def asked_dtype(text: str) -> dict:
    """The dtype a message asks for: the first it names and does not rule out ("not bf16", "bf16 gave odd results")."""
    named = sorted((m.start(), d) for d, words in DTYPE_WORDS.items() for m in re.finditer(rf"\b(?:{words})\b", text, I)
                   if not NOT_THIS.search(text[max(0, m.start() - 14):m.start()]) and
                   not BLAMED.match(text[m.end():]))
    return {"dtype": named[0][1]} if named else {}


def after_name(name: str) -> str:
    """The field a name after a number names ("8 threads", "2 warmup runs", "8 children per node")."""
    low = name.lower()
    return next((f for key, f in AFTER_NAMES.items() if key in low), None) or field_of(name)


def count_before(pattern: str, text: str) -> int | None:
    """The number before ``pattern`` ("three medusa heads", "500 steps") or after it as a key ("heads: 5"), or None."""
    text = digits(text)
    found = re.search(rf"\b(?:{pattern})[ \t]*[:=][ \t]*(\d+)\b", text, I) or \
        re.search(rf"\b(\d+)[ \t]+(?:\w+[ \t]+)?(?:{pattern})\b", text, I)
    return int(found.group(1)) if found else None


def without_values(text: str) -> str:
    """``text`` without its parameter assignments (so "ngram=4 for lookahead" names only lookahead); "the draft model
    X" without "=" still names the draft method."""
    for match, name, _ in reversed(assignments(text)):
        if name in MODEL_FIELDS and not text[match.end("name"):match.start("value")].strip():
            continue
        text = text[:match.start()] + " " + text[match.end():]
    return text


def method_of_params(params: dict) -> str | None:
    """The one method whose own parameters these are (window -> lookahead), or None."""
    owners = {m for m, model in PARAM_MODELS.items() for p in params if p in model.model_fields}
    return owners.pop() if len(owners) == 1 else None
