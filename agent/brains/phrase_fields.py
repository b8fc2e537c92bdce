"""What the rule planner reads beyond the kind of request: the arguments of a tool call in words (run
settings, guidance's hardware, training sizes and files, a report's selection, the topic of "what is X",
packages named for an upgrade), and run_method's input built from them. Plain text processing, as in
agent.brains.phrases.
"""

from __future__ import annotations

import re

from agent.brains.number_words import digits
from agent.brains.param_words import BACKEND_WORDS, count_before, find_params
from agent.brains.phrases import (NOT_A_PROMPT, PROMPT_MENTIONS, QUOTED, RUN_ID, TOPIC_WORDS, URL_OR_PATH, find_draft,
                                  find_methods)
from tools.agent_tools.deps import PACKAGES
from tools.agent_tools.saved_params import run_fields
from tools.engine.params import METHOD_NAMES, PARAM_MODELS

I = re.IGNORECASE

# the packages check_deps knows, by pip or import name (an import name that is also a method's names no package)
KNOWN_PACKAGES = {**{p.module.lower(): p.dist for p in PACKAGES if p.module not in METHOD_NAMES},
                  **{p.dist.lower(): p.dist for p in PACKAGES}}
TEXT_LABELS = re.compile(r"\b(?:(?:own|text'?s?) tokens|text labels|labels? (?:taken )?(?:from|=|:) ?(?:the )?text|"
                         r"(?:not|no|rather than|instead of) self-?distill\w*)\b", I)
SELF_LABELS = re.compile(r"\bself-?distil\w*|\blabels? (?:from|by) the (?:target|model) itself\b", I)
GPU_WORDS = re.compile(r"\b(?:gpus?|cuda|nvidia)\b", I)
MODEL_SIZE = re.compile(r"\b(\d+(?:\.\d+)?)\s?(?:b\b(?! ?(?:ytes?|its?))|billion\b|bn\b)", I)
BARE_FILE = re.compile(r"(?<![\w/.~-])([\w-]+\.(?:txt|jsonl?|md|csv|tsv|parquet))\b", I)  # "notes.txt"
SHORT_IDS = re.compile(r"\bruns?\b((?:[\s,]+(?:and\s+)?(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{4,12}\b)+)", I)
TASK_ID = re.compile(r"\btask\s*(?:#|number|no\.?|nr\.?|id)?\s*(\d+)\b", I)
REPORT_JSON = re.compile(r"\bjson\b", I)
NEWEST_N = re.compile(r"\b(?:last|latest|newest|recent|past)\s+(\d+)\b|"
                      r"\b(\d+)\s+(?:newest|latest|most recent|last)\b", I)
LAST_ONE = re.compile(r"(?<!as )\b(?:the|my|our|that) (?:very )?(?:last|latest|newest|most recent|previous) "
                      r"(?:\w+ )?run\b(?!s)|\bthe run (?:you|we|i) just (?:did|ran|made|measured)\b", I)
CPU_WORDS = re.compile(r"\bcpus?\b|\bprocessor\b", I)
OUT_FOLDER = re.compile(r"\b(?:put (?:them|it|the heads) (?:in|into)|"
                        r"save (?:them |it |the heads )?(?:in|to|into|under)(?: the folder| the directory)?|"
                        r"write (?:them|it) (?:to|into)|"
                        r"out(?:put)?(?: to| in|\s*=)|"
                        r"into)\s*((?:~|\.{0,2})/\S+)", I)


def known_packages(text: str) -> list[str]:
    """The packages check_deps knows that a message names ("upgrade transformers"), as pip names."""
    found = re.findall(r"([A-Za-z0-9_.-]+)((?:[=<>!~]=?[\w.*]+)?)", text)  # with a version spec: "torch==2.3.1"
    found = [(w.lower().rstrip("."), spec) for w, spec in found]  # "Upgrade transformers."
    names = [KNOWN_PACKAGES[w] + spec for w, spec in found if w in KNOWN_PACKAGES]
    return list(dict.fromkeys(names))


# a parameter named for one method that means another's own for this one ("4 draft tokens per step" of draft: k)
SAME_MEANING = {("draft", "max_draft_tokens"): "k"}


def run_input(method: str, prompt: str, target: str | None, options: dict) -> dict:
    """run_method's input: the method's own parameters under ``params``, run fields (target,
    max_new_tokens, ...) at the top; what is not given comes from memory in the tool."""
    options = {SAME_MEANING.get((method, k), k): v for k, v in options.items()}
    own = {k: v for k, v in options.items() if k in PARAM_MODELS[method].model_fields}
    top = {k: v for k, v in options.items() if k in run_fields() and k not in own}
    if target:
        top["target"] = target
    return {"method": method, "prompt": prompt, **top, **({"params": own} if own else {})}


PARAM_HINTS = {"lookahead": r"\b(?:window|w|guess|g|n-?gram size)\b", "draft": r"\b(?:k|draft length)\b",
               "medusa": r"\b(?:threshold|alpha|tree|heads?)\b", "eagle": r"\b(?:depth|topk|tree_nodes)\b"}


def method_of_words(text: str) -> str | None:
    """The method whose parameter a message names ("the window" -> lookahead), or None."""
    return next((m for m, words in PARAM_HINTS.items() if re.search(words, text, re.IGNORECASE)), None)


def compare_params(text: str, methods: list[str]) -> dict:
    """compare_methods' ``params``: each method parameter a message sets, given to the compared method that owns it
    ("lookahead (window 7) against draft (k=5)": {"lookahead": {"window": 7}, "draft": {"k": 5}})."""
    found = {k: v for k, v in find_params(text).items() if k not in run_fields()}
    routed = {m: {k: v for k, v in found.items() if k in PARAM_MODELS[m].model_fields} for m in methods
              if m in PARAM_MODELS}
    return {"params": {m: p for m, p in routed.items() if p}} if any(routed.values()) else {}


def run_options(text: str) -> dict:
    """The run settings a message gives (repeats, new tokens, dtype, chat template off, peers beside, the draft model
    named as such: "with the 0.5b drafting")."""
    draft = find_draft(text)
    return {k: v for k, v in find_params(text).items() if k in run_fields()} | ({"draft": draft} if draft else {})


def guidance_fields(text: str) -> dict:
    """guidance's hardware and model size from words ("on a gpu", "a 7B target")."""
    size = MODEL_SIZE.search(text)
    no_gpu = re.search(r"\b(?:no|without(?: a| any)?)\s+(?:gpu|graphics card|dedicated gpu)\b|\bcpu[- ]only\b", text, I)
    hardware = "cpu" if no_gpu else "gpu" if GPU_WORDS.search(text) else "cpu" if CPU_WORDS.search(text) else None
    return {**({"hardware": hardware} if hardware else {}), **({"target_size_b": float(size.group(1))} if size else {}),
            **({"backend": "llamacpp"} if BACKEND_WORDS.search(text) else {})}


def train_fields(text: str) -> dict:
    """train_medusa's sizes, data files and labels from words ("5 heads, 1000 steps", "on my file F")."""
    out = OUT_FOLDER.search(text)
    of_them = re.search(r"\b(?:train|fit|make|build|create)\s+(\d+)\s+of them\b", text, I)  # heads named before
    fields = {"num_heads": count_before(r"(?:medusa )?heads?", text) or (int(of_them.group(1)) if of_them else None),
              "steps": count_before(r"(?:training )?steps?", text),
              "out": out.group(1).rstrip(".,;:!?)'\"") if out else None,
              "data_files": [m.group(1).rstrip(".,;:!?)'\"") for m in (*URL_OR_PATH.finditer(text),
                                                                        *BARE_FILE.finditer(text))
                             if not m.group(1).startswith("http") and not (out and m.start(1) == out.start(1))] or None,
              "labels": "text" if TEXT_LABELS.search(text) else "self" if SELF_LABELS.search(text) else None,
              "dtype": find_params(text).get("dtype")}
    return {k: v for k, v in fields.items() if v}


WHEN_WORDS = {"yesterday", "today", "earlier", "last", "before", "this", "that", "morning", "tonight", "week"}


def prompt_filter(text: str, last_prompt: str | None) -> dict:
    """lookup_runs' prompt filter from words: a quoted phrase, "the palindrome prompt", "the runs whose prompt
    mentions quicksort", or "that same prompt" (the session's last prompt, else the last run's)."""
    quoted, mentions = QUOTED.search(text), PROMPT_MENTIONS.search(text)
    if quoted:
        return {"prompt_contains": next(g for g in quoted.groups() if g)}
    if mentions:
        return {"prompt_contains": re.sub(r"^(?:the|a|an)\s+", "", mentions.group(1), flags=I)}
    named = re.search(r"\b(?:the|my|that) (\w{4,}) (?:prompt|one)\b", text, I)
    if named and named.group(1).lower() not in NOT_A_PROMPT:
        return {"prompt_contains": named.group(1)}  # "the runs with the palindrome prompt"
    inside = re.search(r"\bwith ((?:\w+ ){0,3}\w+) in (?:the|its|their) prompts?\b", text, I)
    if inside:
        return {"prompt_contains": inside.group(1)}  # "any runs with bubble sort in the prompt"
    named = re.search(r"\b(?:on|for|with|of) the ((?:\w+ ){1,4}\w+) (?:runs|prompts?)\b", text, I)
    if named and not find_methods(named.group(1)) and named.group(1).split()[0].lower() not in NOT_A_PROMPT:
        return {"prompt_contains": named.group(1)}  # "on the capital of France runs"
    did = re.search(r"\b(?:did|ran|tried|timed|measured|benchmarked) (?:something|some runs|a few runs|stuff|a run|"
                    r"runs) (?:with|on|about|for) (?:a |the |some )?([\w+#-]{4,}(?: [\w+#-]+)?)\b", text, I)
    words = [w for w in (did.group(1).split() if did else []) if w.lower() not in WHEN_WORDS]
    if words and words[0].lower() not in NOT_A_PROMPT:
        return {"prompt_contains": " ".join(words)}  # "I did something with quicksort yesterday"
    if re.search(r"\b(?:(?:that|the) same|same|that|this|last|previous) prompt\b", text, I):
        return {"prompt_contains": last_prompt} if last_prompt else {"same_prompt_as_last_run": True}
    return {}


def newest_n(text: str) -> int | None:
    """N of "the last N runs", "the N newest runs" (1 of "the last run"), or None."""
    found = NEWEST_N.search(digits(text))
    return int(found.group(1) or found.group(2)) if found else 1 if LAST_ONE.search(text) else None


def report_fields(text: str) -> dict:
    """write_report's and share_results' selection and format from words ("json", "last 5", "task 12", ids)."""
    newest, task = newest_n(text), TASK_ID.search(digits(text))
    ids = list(dict.fromkeys(RUN_ID.findall(text.lower()) + [i for m in SHORT_IDS.finditer(text.lower())
                                                             for i in re.findall(r"[0-9a-f]{4,12}", m.group(1))]))
    form = "json" if REPORT_JSON.search(text) else "markdown" if re.search(r"\bmarkdown\b|\bmd\b", text, I) else None
    return {**({"format": form} if form else {}),
            **({"limit": min(newest_n(text), 100)} if newest else {}),
            **({"task_id": int(task.group(1))} if task else {}), **({"run_ids": ids} if ids else {})}


def explained_topic(text: str) -> str | None:
    """The topic of "what is X ...", "explain X ..." where X is the first thing named after those words."""
    asked = re.search(r"\b(?:what(?:'s| is| are)|whats|explain|describe|eli5)\b(.*)", text, I)
    if not asked:
        return None
    found = [(m.start(), topic) for topic, words in TOPIC_WORDS.items() if topic != "tradeoffs"
             for m in [re.search(words, asked.group(1), I)] if m]
    return min(found)[1] if found else None  # "what is EAGLE and how is it different from a draft model": eagle
