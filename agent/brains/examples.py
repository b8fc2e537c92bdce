"""Worked examples for the local model, retrieved per turn: the labelled requests of the fitted chat sets
(prompts/tool_examples.jsonl, written by benchmarks/scripts/tool_examples.py; the held-out sets are not in
it) are embedded once as TF-IDF vectors over words and word pairs, and the few nearest to the user's
message are shown to the model before it decides. The model learns the wording from them; the
grammar and the tools' validation still hold the rules.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from collections import Counter
from dataclasses import asdict, dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path

POOL = "tool_examples.jsonl"
TYPICAL_FORMAT = 1  # bump when ExampleIndex.typical chooses differently
log = logging.getLogger(__name__)
NEAREST = 4  # examples per turn: each costs its tokens on every turn (they are after the cached prefix)


@dataclass(frozen=True)
class Example:
    """One labelled request: the tool a good assistant calls with its key arguments, or a reply."""

    text: str
    tool: str | None
    args: dict
    reply: str = ""
    kind: str = ""  # an answer in words: its kind (agent.brains.local_prompt.ANSWERS)


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

    def nearest(self, text: str, k: int = NEAREST, tool: str | None = None) -> list[Example]:
        """The ``k`` examples most similar to ``text``, most similar first (``tool``: only examples of that
        tool; the empty string: only answers in words)."""
        return [e for e, _ in self.scored(text, k, tool)]

    def scored(self, text: str, k: int = NEAREST, tool: str | None = None) -> list[tuple[Example, float]]:
        """:meth:`nearest` with each example's cosine similarity to ``text``."""
        query = self._vector(terms(text))
        scores: dict[int, float] = {}
        for t, w in query.items():
            for i in self.postings.get(t, ()):
                scores[i] = scores.get(i, 0.0) + w * self.vectors[i][t]
        if tool is not None:
            scores = {i: v for i, v in scores.items() if (self.examples[i].tool or "") == tool}
        best = sorted(scores, key=lambda i: -scores[i])[:k]
        return [(self.examples[i], scores[i]) for i in best]

    def typical(self, per_class: int, overlap: float = 0.5) -> list[Example]:
        """For each tool (and for answers in words), the ``per_class`` examples most similar to the rest of their
        class, skipping one too close to an example already picked (cosine above ``overlap``): worked examples
        that stand for their class, chosen by the data, not by hand."""
        picked: list[Example] = []
        classes: dict[str, list[int]] = {}
        for i, e in enumerate(self.examples):
            classes.setdefault(e.tool or "", []).append(i)
        for members in classes.values():
            centre: dict[str, float] = {}
            for i in members:
                for t, w in self.vectors[i].items():
                    centre[t] = centre.get(t, 0.0) + w
            ranked = sorted(members, key=lambda i: -sum(w * centre.get(t, 0.0) for t, w in self.vectors[i].items()))
            chosen: list[int] = []
            for i in ranked:
                if len(chosen) == per_class:
                    break
                if all(self._cosine(i, j) <= overlap for j in chosen):
                    chosen.append(i)
            picked += [self.examples[i] for i in chosen]
        return picked

    def _cosine(self, i: int, j: int) -> float:
        a, b = self.vectors[i], self.vectors[j]
        return sum(w * b.get(t, 0.0) for t, w in a.items())


def load_examples(text: str) -> list[Example]:
    """The examples of a JSONL text (fields text, tool, args, reply, kind)."""
    rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    return [Example(r["text"], r.get("tool"), r.get("args") or {}, r.get("reply") or "", r.get("kind") or "")
            for r in rows]


@lru_cache(maxsize=1)
def pool_text() -> str:
    return resources.files("prompts").joinpath(POOL).read_text(encoding="utf-8")


@lru_cache(maxsize=1)
def default_index() -> ExampleIndex:
    """The index over the shipped pool (built once per process; about 2,000 requests)."""
    return ExampleIndex(load_examples(pool_text()))


def typical_examples(per_class: int, cache: Path) -> list[Example]:
    """``default_index().typical(per_class)``, kept in the folder ``cache`` under a hash of the pool: a new
    process reads the choice back rather than building the index to make it again (about half a second)."""
    digest = hashlib.sha256(f"{TYPICAL_FORMAT}\0{per_class}\0{pool_text()}".encode()).hexdigest()[:16]
    path = cache / f"typical-{digest}.json"
    try:
        return [Example(**row) for row in json.loads(path.read_text(encoding="utf-8"))]
    except (OSError, ValueError, TypeError):
        chosen = default_index().typical(per_class)
    try:
        cache.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps([asdict(e) for e in chosen]), encoding="utf-8")
        tmp.replace(path)
    except OSError as exc:
        log.warning("could not keep the worked examples in %s: %s", path, exc)
    return chosen
