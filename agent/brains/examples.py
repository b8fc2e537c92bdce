"""Worked examples for the local model, retrieved per turn: the labelled requests of the fitted chat sets
(prompts/tool_examples.jsonl, written by benchmarks/scripts/tool_examples.py; the held-out sets are not in
it) are embedded once as TF-IDF vectors over words and word pairs, and the few nearest to the user's
message are shown to the model before it decides. The model learns the wording from them; the
grammar and the tools' validation still hold the rules.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

POOL = "tool_examples.jsonl"
NEAREST = 4  # examples per turn: each costs its tokens on every turn (they are after the cached prefix)


@dataclass(frozen=True)
class Example:
    """One labelled request: the tool a good assistant calls with its key arguments, or a reply."""

    text: str
    tool: str | None
    args: dict
    reply: str = ""


def terms(text: str) -> Counter:
    """Lower-cased words and adjacent word pairs of ``text`` (punctuation splits words)."""
    words = "".join(ch if ch.isalnum() else " " for ch in text.casefold()).split()
    return Counter(words + [f"{a} {b}" for a, b in zip(words, words[1:])])


class ExampleIndex:
    """TF-IDF vectors (sublinear term frequency, L2-normalised) of the examples, searched by cosine."""

    def __init__(self, examples: list[Example]):
        self.examples = examples
        counts = [terms(e.text) for e in examples]
        df = Counter(t for c in counts for t in c)
        self.idf = {t: math.log((1 + len(examples)) / (1 + n)) + 1.0 for t, n in df.items()}
        self.vectors = [self._vector(c) for c in counts]
        self.postings: dict[str, list[int]] = {}
        for i, vector in enumerate(self.vectors):
            for t in vector:
                self.postings.setdefault(t, []).append(i)

    def _vector(self, counts: Counter) -> dict[str, float]:
        weights = {t: (1 + math.log(n)) * self.idf[t] for t, n in counts.items() if t in self.idf}
        norm = math.sqrt(sum(w * w for w in weights.values())) or 1.0
        return {t: w / norm for t, w in weights.items()}

    def nearest(self, text: str, k: int = NEAREST) -> list[Example]:
        """The ``k`` examples most similar to ``text``, most similar first."""
        query = self._vector(terms(text))
        scores: dict[int, float] = {}
        for t, w in query.items():
            for i in self.postings.get(t, ()):
                scores[i] = scores.get(i, 0.0) + w * self.vectors[i][t]
        best = sorted(scores, key=lambda i: -scores[i])[:k]
        return [self.examples[i] for i in best]


def load_examples(text: str) -> list[Example]:
    """The examples of a JSONL text (fields text, tool, args, reply)."""
    rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    return [Example(r["text"], r.get("tool"), r.get("args") or {}, r.get("reply") or "") for r in rows]


@lru_cache(maxsize=1)
def default_index() -> ExampleIndex:
    """The index over the shipped pool (built once per process; about 2,000 requests)."""
    return ExampleIndex(load_examples(resources.files("prompts").joinpath(POOL).read_text(encoding="utf-8")))
