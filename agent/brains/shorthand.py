"""Shorthand written out: the terse notation of people who work in the field, rewritten into the words the rule
planner reads ("SD --k 6" -> "speculative decoding k=6", "w/n/g=5/3/2" -> "window=5 ngram=3 guess=2", "γ=5" -> "k=5",
"Li et al." -> eagle, "tl;dr on" -> "explain"). Only the instruction is rewritten, never the prompt it carries.

A request that chains two asks ("run it, then save those as my defaults") is acted on for its first: ``first_ask``
gives where the second begins.
"""

from __future__ import annotations

import re

from agent.brains.param_words import field_of

I = re.IGNORECASE
NUMBER = r"-?\d+(?:\.\d+)?"
LETTERS = {"w": "window", "n": "ngram", "g": "guess"}

# "--k 6", "--window=9", "-k 4": a known parameter given as a command-line flag
FLAG = re.compile(rf"(?<!\S)--?(?P<name>[A-Za-z][\w-]*)(?:\s*=\s*|\s+)(?P<value>{NUMBER}(?![\w.])|true|false|"
                  r"on|off)\b", I)
# "w/n/g=5/3/2", "W,N,G = 5,3,2", "(W, N, G) = (7, 4, 4)": lookahead's three sizes at once
WNG = re.compile(r"\(?\b(?P<names>[WNG](?:\s*[/,]\s*[WNG]){1,2})\)?\s*[=:]?\s*\(?\s*"
                 r"(?P<values>\d+(?:\s*[/,]\s*\d+){1,2})\)?", I)
WNG_ALONE = re.compile(r"\b[WNG](?:\s*/\s*[WNG]){1,2}\b(?!\s*[=:(\d])", I)  # "sane W/N/G?": the three named
# both alternatives start at a word's start: a regex free to start anywhere in one long word is quadratic
PATH = re.compile(r"((?<!\S)(?:[a-z]+://|~|\.{0,2}/)\S+|(?<!\S)\S+/\S+/\S*)", I)
# (pattern, replacement) in order; the method names read by agent.brains.phrases.METHOD_SYNONYMS
REWRITES = (
    (re.compile(r"γ|\bgamma\b", I), "k"),
    (re.compile(r"\bT\s*=\s*(?=\d|\.\d)"), "temperature="),  # "T=0.7" (a capital T: "t=3" is no temperature)
    (re.compile(r"(?<![\w.])\.(\d+)\b"), r"0.\1"),  # "top_p .95"
    (re.compile(r"\b(\d+)k\s+(steps|tokens|samples)\b", I), lambda m: f"{int(m.group(1)) * 1000} {m.group(2)}"),
    (re.compile(r"\btoks?\b", I), "tokens"),
    (re.compile(r"\bcand(?:idate)?s?\b(?= tokens)", I), "candidate"),
    (re.compile(r"\bthresh\b", I), "threshold"),
    (re.compile(r"\b(?:TPS|t/s)\b", I), "tokens/s"),
    (re.compile(r"\b(?:vanilla|plain|classic|standard)\s+(?=SD\b|spec\b)", I), ""),  # "vanilla SD" is no baseline
    (re.compile(r"\bspec\.?\s?dec(?:oding)?\b|\bSD\b|(?<![\w-])sd(?![\w-])", I), "speculative decoding"),
    (re.compile(r"\bChen(?: et al\.?)?(?:'s)?(?:[- ]style)?(?![\w-])"), "speculative decoding"),
    (re.compile(r"\bLeviathan(?: et al\.?)?(?:'s)?[- ]style\b"), "leviathan"),
    (re.compile(r"\bLi et al\.?(?:'s)?"), "eagle"),
    (re.compile(r"\bFu(?: et al\.?)?(?![\w-])"), "lookahead"),
    (re.compile(r"\bCai(?: et al\.?)?(?:'s)?(?:[- ]style)?(?![\w-])"), "medusa"),
    (re.compile(r"^\W*(?:tl;?dr|eli5|gist|summary|rundown)\b(?: (?:on|of|for))?", I), "explain"),
    (re.compile(r"\b(?:env(?:ironment)?|dep(?:endenc(?:y|ies))?|sanity)[- ]check\b|\bpre-?flight(?: check)?\b", I),
     "check the dependencies"),
    (re.compile(r"\bknobs?\b|\bstarting (?:point|values|config)\b", I), "recommended settings"),
    (re.compile(r"\bsane\b", I), "good"),
    (re.compile(r"\b(?:this|my|the) (?:box|host|rig|node)\b", I), "this machine"),
    (re.compile(r"\bmd\b(?= (?:table|file|report))", I), "markdown"),
    (re.compile(r"^\W*dump\b(?!\s+(?:my\s+|your\s+|the\s+)?memory)", I), "write a report of"),
)
# a command line half-remembered into the chat ("specpilot run --methd medusa --max-tokens 256", "runs ls --limit 3",
# "guide medusa --hardware cpu"): the flags and subcommands written out as the words the planner reads
CLI = (
    (re.compile(r"^\W*specpilot\s+", I), ""),
    (re.compile(r"(?<!\S)--?(?:methods?|methd|meth|m)(?:\s*=\s*|\s+)(?=[a-z])", I), ""),
    (re.compile(r"(?<!\S)--?(?:max[-_]?(?:new[-_]?)?tokens|new[-_]tokens|tokens)(?:\s*=\s*|\s+)(\d+)\b", I),
     r"\1 new tokens"),
    (re.compile(r"(?<!\S)--?draft[-_]quant(?:\s*=\s*|\s+)(int8|gguf|none|auto)\b", I), r"draft_quant=\1"),
    (re.compile(r"(?<!\S)--(bf16|fp16|fp32|bfloat16|float16|float32)\b", I), r"\1"),
    (re.compile(r"(?<!\S)--no[-_]default\b", I), "but don't make it the default"),
    (re.compile(r"(?<!\S)--replace\b", I), "and drop the rest"),
    (re.compile(r"(?<!\S)--include[-_]done(?:[-_]tasks)?\b", I), "including finished tasks"),
    (re.compile(r"(?<!\S)--hardware(?:\s*=\s*|\s+)(\w+)", I), r"on a \1"),
    (re.compile(r"(?<!\S)--backend(?:\s*=\s*|\s+)(\S+)", I), r"on \1"),
    (re.compile(r"(?<!\S)--limit(?:\s*=\s*|\s+)(\d+)", I), r"last \1"),
    (re.compile(r"(?<!\S)--num[-_]heads(?:\s*=\s*|\s+)(\d+)", I), r"\1 heads"),
    (re.compile(r"(?<!\S)--steps(?:\s*=\s*|\s+)(\d+)", I), r"\1 steps"),
    (re.compile(r"(?<!\S)--target(?:\s*=\s*|\s+)(?=\S)", I), "target="),
    (re.compile(r"^\W*runs?\s+(?:ls|list)\b", I), "list my runs"),
    (re.compile(r"^\W*recall\b", I), "what is in memory,"),
    (re.compile(r"^\W*guide\b", I), "recommended settings for"),
    (re.compile(r"^\W*doctor\b", I), "check the dependencies of"),
    (re.compile(r"^\W*train[-_]medusa\b", I), "train medusa heads"),
)
# where a second ask begins: "..., then write it up", "After that save ...", "; once done run them on ..."
NEXT_ASK = re.compile(r"(?:[,;.]\s*|\s+)(?:and\s+)?(?:then|after that|afterwards|once (?:done|finished|"
                      r"that'?s done|it'?s done)|when (?:done|finished))\W+(?:please\s+)?"
                      r"(?:save|store|remember|persist|keep|make|set|"
                      r"write|report|export|share|send|post|upload|e-?mail|plot|summari[sz]e|tell|show|give|"
                      r"(?:run|use|try|time|benchmark) (?:it|them|those|these|the heads))\b", I)


def _flag(match: re.Match) -> str:
    name = field_of(match.group("name").replace("-", "_"))
    return f"{name}={match.group('value')}" if name else match.group(0)


def _sizes(match: re.Match) -> str:
    names = re.split(r"\s*[/,]\s*", match.group("names").lower())
    values = re.split(r"\s*[/,]\s*", match.group("values"))
    if len(names) != len(values) or len(set(names)) != len(names):
        return match.group(0)
    return " ".join(f"{LETTERS[n]}={v}" for n, v in zip(names, values))


def expand(text: str) -> str:
    """``text`` with its shorthand written out (see the module docstring)."""
    for pattern, replacement in CLI:
        text = pattern.sub(replacement, text)
    text = WNG.sub(_sizes, FLAG.sub(_flag, text))
    text = WNG_ALONE.sub("lookahead's W, N and G", text)
    parts = PATH.split(text)  # paths and addresses stay as written ("/mnt/share/specdec")
    for pattern, replacement in REWRITES:
        parts = [part if i % 2 else pattern.sub(replacement, part) for i, part in enumerate(parts)]
    return "".join(parts)


def expand_around(text: str, prompt: str | None) -> str:
    """``text`` expanded everywhere but in ``prompt`` (its first occurrence), which stays as written."""
    at = text.find(prompt) if prompt else -1
    if at < 0:
        return expand(text)
    return expand(text[:at]) + prompt + expand(text[at + len(prompt):])


def first_ask(text: str, prompt: str | None = None) -> int | None:
    """Where a second ask ("then save those", "once done run them") begins in ``text``, after at least three words of
    the first and outside ``prompt``, or None."""
    at = text.find(prompt) if prompt else -1
    inside = range(at, at + len(prompt)) if at >= 0 else range(0)
    found = next((m for m in NEXT_ASK.finditer(text) if len(text[:m.start()].split()) >= 3 and m.start() not in inside),
                 None)
    return found.start() if found else None
