"""Numbers written as words, read as digits ("two hundred fifty six" -> 256, "zero point eight" -> 0.8), for the
rule planner (agent.brains.phrases): plain text processing."""

from __future__ import annotations

import re

I = re.IGNORECASE

UNIT_WORDS = {w: i for i, w in enumerate("zero one two three four five six seven eight nine ten eleven twelve thirteen "
                                         "fourteen fifteen sixteen seventeen eighteen nineteen".split())}
TENS_WORDS = {w: 10 * i for i, w in enumerate("twenty thirty forty fifty sixty seventy eighty ninety".split(), start=2)}
TENS_WORDS |= {"fourty": 40, "ninty": 90}  # misspelt as often as not
NUMBER_TOKEN = re.compile(rf"\b(?:{'|'.join([*UNIT_WORDS, *TENS_WORDS, 'hundred', 'thousand', 'and', 'point'])})\b", I)
# which word may follow which inside one number ("two hundred and fifty six", "zero point eight", "twenty-five")
FOLLOWS = {None: {"unit", "teen", "tens"}, "unit": {"hundred", "thousand", "point"},
           "teen": {"hundred", "thousand", "point"}, "tens": {"digit", "hundred", "thousand", "point"},
           "hundred": {"and", "unit", "teen", "tens", "thousand"}, "thousand": {"and", "unit", "teen", "tens"},
           "and": {"unit", "teen", "tens"}, "point": {"decimal"}, "decimal": {"decimal"}}
SCALED = re.compile(r"\b(\d+)\s+(hundred|thousand)\b", I)


def _kind(word: str, last: str | None) -> str:
    word = word.lower()
    if word in ("hundred", "thousand", "and", "point"):
        return word
    if word in TENS_WORDS:
        return "tens"
    value = UNIT_WORDS[word]
    if last in ("point", "decimal"):
        return "decimal" if value < 10 else "teen"
    return "digit" if last == "tens" and 0 < value < 10 else "unit" if value < 10 else "teen"


def _number_runs(text: str) -> list[tuple[int, int, list[str]]]:
    """Maximal runs of number words that form one number: (start, end, words); runs ending in "and" or
    "point" give those words back."""
    runs, run, last, end = [], [], None, -1
    for match in NUMBER_TOKEN.finditer(text):
        kind = _kind(match.group(0), last)
        joined = run and re.fullmatch(r"[\s-]+", text[end:match.start()])
        if not (joined and kind in FOLLOWS[last]):
            runs.append(run)
            run, last = [], None
            kind = _kind(match.group(0), None)
            if kind not in FOLLOWS[None]:
                continue
        run.append((match.start(), match.end(), match.group(0).lower()))
        last, end = kind, match.end()
    runs.append(run)
    out = []
    for run in runs:
        while run and run[-1][2] in ("and", "point"):
            run = run[:-1]
        if run:
            out.append((run[0][0], run[-1][1], [w for _, _, w in run]))
    return out


def _number_value(words: list[str]) -> str:
    total = current = 0
    decimals = None
    for word in words:
        if decimals is not None:
            decimals += str(UNIT_WORDS[word])
        elif word == "point":
            decimals = ""
        elif word == "hundred":
            current = (current or 1) * 100
        elif word == "thousand":
            total, current = total + (current or 1) * 1000, 0
        elif word != "and":
            current += TENS_WORDS.get(word, UNIT_WORDS.get(word, 0))
    whole = total + current
    return f"{whole}.{decimals}" if decimals else str(whole)


def digits(text: str) -> str:
    """Numbers written as words in digits ("k four" -> "k 4", "two hundred fifty six" -> "256", "zero point
    eight" -> "0.8", "three thousand" -> "3000")."""
    for start, end, words in reversed(_number_runs(text)):
        text = text[:start] + _number_value(words) + text[end:]
    return SCALED.sub(lambda m: str(int(m.group(1)) * (100 if m.group(2).lower() == "hundred" else 1000)), text)
