"""Which tool a free-text request asks for, learned from labelled requests: a multinomial logistic regression
over TF-IDF features of the message (lower-cased words, adjacent word pairs and character 4-grams).

It is fitted by benchmarks/scripts/train_tool_classifier.py on the fitted chat sets only (the held-out sets of
benchmarks/data/MANIFEST.md are never shown to it) and shipped as ``prompts/tool_classifier.npz``: the
vocabulary with its inverse document frequencies, one weight column per class and a bias. The classes are the
registry's tool names and :data:`NO_TOOL` (ask a question, decline, chat). The same file holds one more head
per choice-valued argument (an enum or a boolean such as ``method``, ``backend``, ``chat``), over the same
features: which value the request gives it, or :data:`ABSENT`. Nothing here reads words by rule:
spelling, language and phrasing are what the weights absorb, and the model and the tools' schemas do the rest.
"""

from __future__ import annotations

import difflib
import io
import math
import re
from collections import Counter
from dataclasses import dataclass, field, replace
from functools import cached_property, lru_cache
from importlib import resources

import numpy as np

WEIGHTS = "tool_classifier.npz"
NO_TOOL = "<none>"  # the class of a request that gets an answer in words
ABSENT = "<absent>"  # an argument head's class for a request that does not set the argument
CHAR_N = 4
MAX_CHARS = 2000  # a pasted prompt beyond this adds nothing to which tool is asked for
TOKEN = re.compile(r"[^\W_]+(?:[._\-][^\W_]+)*", re.UNICODE)


def features(text: str) -> Counter:
    """Counts of the message's words, word pairs and character 4-grams (case folded)."""
    text = text.casefold()[:MAX_CHARS]
    words = TOKEN.findall(text)
    counts = Counter(words)
    counts.update(f"{a} {b}" for a, b in zip(words, words[1:]))
    padded = f" {' '.join(text.split())} "
    counts.update("#" + padded[i:i + CHAR_N] for i in range(len(padded) - CHAR_N + 1))
    return counts


NUMBER = re.compile(r"\d+(?:\.\d+)?|(?<![\w.])\.\d+")  # ".9" too: a decimal without its leading zero
NUMBER_CONTEXT = 4  # words each side of a number that its head reads
VALUE_KINDS = ("number", "reference")  # the value heads: which argument a written number, or a name, sets
NO_FIELD = "<none>"  # the number head's class for a number that sets no argument (part of a prompt, a name)
MORE_LIKELY = 0.5  # a head's value is taken from this probability on (more likely than not)
NAMED = 2  # words each side of a value read for an argument's name (:func:`naming`)
TIED = 4 * NAMED  # naming's indicators: the whole name or a word of it, at each distance, before or after


# a written word that may name a model, a file, a folder, a URL or a run: it has a path separator, a file
# extension, or letters, digits and a dash or point together (qwen2.5-coder-0.5b-instruct), or is hexadecimal
REFERENCE = re.compile(r"\S*[/\\]\S*|[\w.~-]+\.[A-Za-z]\w{0,5}|(?=\S*\d)(?=\S*[A-Za-z])[\w.]+-[\w.-]+|[0-9a-f]{6,}")
WORD_EDGES = "'\"`,;()[]{}<>"


def _context(text: str, start: int, end: int, raw: str) -> Counter:
    """The features of the value written at text[start:end]: the shape of the word holding it (digits as 0),
    the characters either side, its length and whether it has a point, and the words around it by distance."""
    left = TOKEN.findall(text[:start].casefold())[-NUMBER_CONTEXT:]
    right = TOKEN.findall(text[end:].casefold())[:NUMBER_CONTEXT]
    word_start = max(text.rfind(" ", 0, start), text.rfind("\n", 0, start)) + 1
    word_end = min([i for i in (text.find(" ", end), text.find("\n", end)) if i >= 0] or [len(text)])
    shape = re.sub(r"\d+", "0", text[word_start:word_end].casefold())
    feats = Counter({f"word={shape}": 1, f"before={text[start - 1:start]}": 1, f"after={text[end:end + 1]}": 1,
                     f"digits={min(len(raw), 4)}": 1, f"point={'.' in raw}": 1})
    feats.update({f"L{len(left) - i}={w}": 1 for i, w in enumerate(left)})
    feats.update({f"R{i + 1}={w}": 1 for i, w in enumerate(right)})
    feats.update({f"L={w}": 1 for w in left} | {f"R={w}": 1 for w in right})
    return feats


@lru_cache(maxsize=64)
def spelled_out(text: str) -> str:
    """``text`` with the numbers written as words in digits ("ten repeats" -> "10 repeats", "two hundred fifty
    six" -> "256"), by text2num; a lone "one" stays a word (it is more often "this one" than a value)."""
    try:
        from text_to_num import alpha2digit
    except ImportError:
        return text
    return alpha2digit(text, "en", threshold=1.5)


def numbers(text: str) -> list[tuple[str, Counter]]:
    """Each number written in ``text``, with the features its head reads (:func:`_context`)."""
    return [(raw, feats) for raw, feats, *_ in _numbers(text)]


Value = tuple[str, Counter, tuple[list[str], list[str]], tuple[int, int]]  # as written, features, beside, span


def _numbers(text: str) -> list[Value]:
    """Each number of ``text`` (numbers in words read as digits), its features, the words beside it and the
    characters it spans in ``text`` as written (a number in words spans its words)."""
    written = text[:MAX_CHARS]
    text = spelled_out(written)
    where = _written_span(written, text)
    return [(m.group(), _context(text, *m.span(), m.group()), _beside(text, *m.span()), where(*m.span()))
            for m in NUMBER.finditer(text)]


def _written_span(written: str, text: str):
    """A function from a span of ``text`` (``written`` with its numbers in words as digits) to the span of
    ``written`` it was read from."""
    if written == text:
        return lambda start, end: (start, end)
    blocks = _blocks(written, text)

    def where(start: int, end: int) -> tuple[int, int]:
        first = next(b for b in blocks if b[3] <= start < b[4])
        last = next(b for b in reversed(blocks) if b[3] < end <= b[4])
        return (first[1] + start - first[3] if first[0] == "equal" else first[1],
                last[1] + end - last[3] if last[0] == "equal" else last[2])
    return where


@lru_cache(maxsize=16)
def _blocks(written: str, text: str) -> tuple[tuple[str, int, int, int, int], ...]:
    """How ``text`` is made from ``written``, as difflib's opcodes (each head reads a message's numbers: once)."""
    return tuple(difflib.SequenceMatcher(None, written, text, autojunk=False).get_opcodes())


# between two numbers of an enumeration ("1, 4, 16 and 64"): punctuation, or one short word
LIST_GAP = re.compile(r"[\s,;/&+-]*|[\s,;/&+-]+([^\W\d_]{1,3})[\s,;/&+-]+")


def _runs(text: str, labels: list[str]) -> list[tuple[list[int], Counter, tuple[list[str], list[str]]]]:
    """The enumerations of ``text``: runs of two or more numbers with only punctuation and at most one short
    word between neighbours (not an argument's name: "conc 1,8 k 2,4" is two runs; a digit inside a word, as in
    "v1", joins none), each as the indices of its numbers and the features of the whole run read as one value
    (the words before its first number and after its last): "2, 8, 32 and 128 parallel clients" reads every
    number beside "parallel clients"."""
    text = spelled_out(text[:MAX_CHARS])
    matches = list(NUMBER.finditer(text))
    names = {word for whole, _, parts in _label_names(tuple(labels)) for word in (whole, *parts)}
    runs, run = [], [0] if matches else []
    alone = [not (text[m.start() - 1:m.start()].isalpha() or text[m.end():m.end() + 1].isalpha()) for m in matches]
    for i in range(1, len(matches) + 1):
        gap = LIST_GAP.fullmatch(text, matches[i - 1].end(), matches[i].start()) \
            if i < len(matches) and alone[i - 1] and alone[i] else None
        if gap and not (gap.group(1) and _stem(gap.group(1).casefold()) in names):
            run.append(i)
            continue
        if len(run) > 1:
            start, end = matches[run[0]].start(), matches[run[-1]].end()
            runs.append((run, _context(text, start, end, matches[run[0]].group()), _beside(text, start, end)))
        run = [i]
    return runs


def _beside(text: str, start: int, end: int) -> tuple[list[str], list[str]]:
    """The NAMED words either side of text[start:end], nearest first."""
    return (TOKEN.findall(text[:start].casefold())[::-1][:NAMED], TOKEN.findall(text[end:].casefold())[:NAMED])


def _stem(word: str) -> str:
    word = word.replace("-", "_")
    return word[:-1] if len(word) > 3 and word.endswith("s") else word


def naming(beside: tuple[list[str], list[str]], labels: list[str]) -> np.ndarray:
    """Which labels (argument names) the words beside a value name, as TIED indicators per label: a word at
    distance 1 or 2 before the value or after it that is the argument's whole name ("repeats 5", "k=4", "8
    threads") or one of the words of its name ("256 new tokens" for max_new_tokens). The schema's own names,
    not a word list: the head learns one weight per indicator, shared by every argument, so it learns on which
    side a name is more often its value's ("depth 6 and k 4": 6 is depth's)."""
    out = np.zeros((len(labels), TIED), dtype=np.float32)
    names = _label_names(tuple(labels))
    for side, words_beside in enumerate(beside):
        for distance, word in enumerate(words_beside[:NAMED]):
            column = 2 * (NAMED * side + distance)
            stem = _stem(word)
            for i, (whole, joined, parts) in enumerate(names):
                if stem == whole or (joined and stem.replace("_", "") == joined):
                    out[i, column] = 1.0
                elif stem in parts:
                    out[i, column + 1] = 1.0
    return out


@lru_cache(maxsize=8)
def _label_names(labels: tuple[str, ...]) -> list[tuple[str, str, set[str]]]:
    """Each label's whole name, stemmed; that name with its words joined ("warm-ups" names warmup, "max new
    tokens" does not), or "" where another label joins to the same (topk, top_k); and the words of a name with
    underscores (three letters or more), stemmed."""
    stems = [_stem(label) for label in labels]
    joined = Counter(stem.replace("_", "") for stem in stems)
    return [(stem, stem.replace("_", "") if joined[stem.replace("_", "")] == 1 else "",
             {_stem(part) for part in label.split("_") if len(part) >= 3} if "_" in label else set())
            for label, stem in zip(labels, stems)]


def references(text: str) -> list[tuple[str, Counter]]:
    """Each word of ``text`` that may name a model, file, folder, URL or run (without quotes, brackets and
    closing punctuation), with the features its head reads (:func:`_context`, and its own shape)."""
    return [(raw, feats) for raw, feats, *_ in _references(text)]


def _bare_word(word: str) -> str:
    """``word`` without the quotes, brackets and closing punctuation around it ("(ap-7731)." -> ap-7731)."""
    while True:
        bare = word.strip(WORD_EDGES).rstrip(".:!?,;")
        if bare == word:
            return word
        word = bare


def _references(text: str) -> list[Value]:
    text = text[:MAX_CHARS]
    out = []
    for match in re.finditer(r"\S+", text):
        word = _bare_word(match.group())
        if not word or not REFERENCE.fullmatch(word):
            continue
        start = match.start() + match.group().index(word)
        feats = _context(text, start, start + len(word), word)
        feats.update({f"ext={word.rsplit('.', 1)[-1].casefold()[:6]}": 1} if "." in word else {"ext=": 1})
        feats.update({f"slash={'/' in word or chr(92) in word}": 1, f"scheme={'://' in word}": 1,
                      f"home={word.startswith(('~', '/', '.'))}": 1})
        out.append((word, feats, _beside(text, start, start + len(word)), (start, start + len(word))))
    return out


READ_AFTER = 2  # a value's reading: its last token's hidden state and the mean of the next READ_AFTER tokens'


def value_reading(states: np.ndarray, offsets: np.ndarray, start: int, end: int) -> np.ndarray:
    """The model's reading of the value written at ``start:end`` of a request: the last hidden state of its last
    token (the words before it read) and the mean over the READ_AFTER tokens after it (the words after it:
    "five times", "64 tokens"), from ``states`` (tokens x hidden size) and ``offsets`` (tokens x 2, the
    characters of the request each token spans)."""
    inside = np.nonzero((offsets[:, 0] < end) & (offsets[:, 1] > start))[0]
    last = int(inside[-1]) if len(inside) else max(int(np.searchsorted(offsets[:, 1], start, "right")) - 1, 0)
    after = states[last + 1: last + 1 + READ_AFTER]
    return np.concatenate([states[last], (after if len(after) else states[last:last + 1]).mean(0)]).astype(np.float32)


@dataclass(frozen=True)
class NumberHead:
    """Which argument a written value sets (by its name, wherever the tool takes it), or NO_FIELD: logistic
    regression over the features of :func:`numbers` (``kind`` number) or :func:`references` (``kind``
    reference) and the tool's name, plus ``tied`` weights over :func:`naming`'s indicators."""

    vocab: list[str]
    weights: np.ndarray
    bias: np.ndarray
    labels: list[str]
    kind: str = "number"
    tied: np.ndarray | None = None
    hidden: np.ndarray | None = None  # a head of the model's reading: weights over a value's (value_reading) ...
    hidden_mean: np.ndarray | None = None  # ... standardised by the pool's mean
    hidden_scale: np.ndarray | None = None  # ... and scale
    read: tuple[str, np.ndarray, np.ndarray] | None = None  # the request read: (text, states, offsets)

    @cached_property
    def index(self) -> dict[str, int]:
        return {term: i for i, term in enumerate(self.vocab)}

    def fields(self, text: str, tool: str, lists: frozenset[str] = frozenset()) -> list[tuple[str, dict[str, float]]]:
        """Each value of ``text`` (as written) with the probability of each argument name it may set. The
        numbers of an enumeration (:func:`_runs`) set one argument of ``lists`` (those taking a list:
        concurrency levels) where the run read as one value, or the numbers its reader is sure of, name one;
        where those are sure of two arguments, the run sets the list argument most of them are sure of (a number
        at the run's edge reads the next argument's name: "1, 2, 4 and 8, and k 1, 3"), else each number keeps
        its own reading."""
        values = (_numbers if self.kind == "number" else _references)(text)
        readings = [self._reading(text, span) for *_, span in values]
        out = [(value, self._probabilities(feats, beside, tool, reading))
               for (value, feats, beside, _), reading in zip(values, readings)]
        for run, feats, beside in _runs(text, self.labels) if lists and self.kind == "number" else ():
            probs = self._probabilities(feats, beside, tool, readings[run[-1]])
            votes = Counter(max(out[i][1], key=out[i][1].get) for i in run if max(out[i][1].values()) >= MORE_LIKELY)
            votes.pop(NO_FIELD, None)  # what its numbers alone are read as setting
            # the argument most of them are sure of (ties: the most probable over the run)
            top = max(votes, key=lambda name: (votes[name], sum(out[i][1].get(name, 0.0) for i in run)), default=None)
            if top is not None and (len(votes) == 1 or top in lists) and max(probs, key=probs.get) != top:
                probs = max((out[i][1] for i in run), key=lambda p: p.get(top, 0.0))
            best = max(probs, key=probs.get)
            if best in lists and (len(votes) <= 1 or best == top):
                out[run[0]:run[-1] + 1] = [(out[i][0], probs) for i in run]
        if self.kind == "number":  # digits glued to a word's letters name something ("eagle3", "fp16", "v1"): no value
            out = [(value, {NO_FIELD: 1.0}) if start and text[start - 1].isalpha() else (value, probs)
                   for (value, probs), (*_, (start, _end)) in zip(out, values)]
        return out

    def _reading(self, text: str, span: tuple[int, int]) -> np.ndarray | None:
        """The standardised reading of the value at ``span``, where this head weighs the model's reading and
        ``text`` is the request read."""
        if self.hidden is None or self.read is None or self.read[0] != text:
            return None
        return ((value_reading(self.read[1], self.read[2], *span) - self.hidden_mean) / self.hidden_scale)

    def _probabilities(self, feats: Counter, beside: tuple[list[str], list[str]], tool: str,
                       reading: np.ndarray | None = None) -> dict[str, float]:
        index = self.index
        cols = np.array([index[t] for t in [*feats, f"tool={tool}"] if t in index], dtype=np.int64)
        values = np.full(len(cols), 1.0 / math.sqrt(max(1, len(cols))), dtype=np.float32)
        bias = self.bias if self.tied is None else self.bias + naming(beside, self.labels) @ self.tied
        return _softmax((cols, values), self.weights, bias, self.labels,
                        None if reading is None else (reading, self.hidden))


@dataclass(frozen=True)
class Head:
    """One argument's head: ``weights`` (terms x values), ``bias``, ``labels`` (the values and ABSENT), and
    a bias per tool that takes the argument (``tools``, ``tool_weights``: tools x values); a head of the
    model's reading (:class:`Reading`) also has ``hidden`` weights (hidden size x values)."""

    weights: np.ndarray
    bias: np.ndarray
    labels: list[str]
    tools: list[str] = ()
    tool_weights: np.ndarray | None = None
    hidden: np.ndarray | None = None


TOOL_HEAD = "<tool>"  # the tool head's name among a Reading's heads


@dataclass(frozen=True)
class Reading:
    """Heads over the TF-IDF features and the local model's own reading of the request: the mean of its last
    hidden states over the request's user turn, read after its cached prompt (LocalBrain reads them in the
    pass that feeds the turn). They hold only for the model and prompt they were fitted under (``state``,
    :func:`agent.brains.local.reading_state`); the TF-IDF heads serve any other. ``mean`` and ``scale``
    standardise a hidden vector (the pool's), ``heads`` are the tool head (:data:`TOOL_HEAD`) and the
    argument heads."""

    state: str
    mean: np.ndarray
    scale: np.ndarray
    heads: dict[str, Head]
    values: dict[str, NumberHead] = field(default_factory=dict)  # the value heads of the reading ("number", ...)

    def features(self, hidden: np.ndarray) -> np.ndarray:
        return ((hidden - self.mean) / self.scale).astype(np.float32)


def _softmax(vector: tuple[np.ndarray, np.ndarray], weights: np.ndarray, bias: np.ndarray,
             labels: list[str], hidden: tuple[np.ndarray, np.ndarray] | None = None) -> dict[str, float]:
    """The labels' probabilities from a sparse ``vector`` (columns, values) and, where given, (the standardised
    hidden vector, its weights)."""
    cols, values = vector
    logits = bias + (values @ weights[cols].astype(np.float32) if len(cols) else 0.0)
    if hidden is not None:
        logits = logits + hidden[0] @ np.asarray(hidden[1], dtype=np.float32)
    exp = np.exp(logits - logits.max())
    return {label: float(p) for label, p in zip(labels, exp / exp.sum())}


@dataclass(frozen=True)
class Choice:
    """The classifier's pick: a tool name or None (answer in words), its probability, and the runner-up."""

    tool: str | None
    probability: float
    second: str | None
    second_probability: float


class ToolClassifier:
    """Inference over the fitted weights: ``vocab`` term -> column, ``idf`` per column, ``weights``
    (terms x classes), ``bias`` (classes), ``labels`` (class names)."""

    def __init__(self, vocab: list[str], idf: np.ndarray, weights: np.ndarray, bias: np.ndarray, labels: list[str],
                 heads: dict[str, Head] | None = None, number_head: NumberHead | None = None):
        self.index = {term: i for i, term in enumerate(vocab)}
        self.idf = idf.astype(np.float32)
        self.weights = weights.astype(np.float32)
        self.bias = bias.astype(np.float32)
        self.labels = labels
        self.heads = heads or {}  # argument name -> its head
        self.number_head = number_head  # which argument each written number sets
        self.reference_head: NumberHead | None = None  # ... and each written model, file, folder, URL or run
        self.reading: Reading | None = None  # heads that also weigh the local model's reading of the request
        self._vector: tuple[str, tuple[np.ndarray, np.ndarray]] | None = None  # the last message's, for all heads
        self._read: tuple[str, np.ndarray] | None = None  # a message and the model's reading of it (standardised)
        self._tokens: tuple[str, np.ndarray, np.ndarray] | None = None  # ... and its hidden state at each token
        self._bound: dict[str, NumberHead] = {}  # the value heads of the reading, bound to the message read

    def read(self, text: str, hidden: np.ndarray | None, tokens: tuple[np.ndarray, np.ndarray] | None = None) -> None:
        """The local model's reading of ``text`` (its mean hidden state over the turn, under the prompt of
        ``reading.state``; ``tokens``: its hidden state at each token of ``text`` and the characters the token
        spans): the heads of :attr:`reading` answer for ``text`` from now on; None: the TF-IDF heads."""
        self._read = (text, self.reading.features(hidden)) if hidden is not None and self.reading else None
        self._tokens = (text, *tokens) if self._read is not None and tokens is not None else None
        self._bound = {}  # the value heads of the reading, bound to this reading

    def value_head(self, kind: str, text: str) -> NumberHead | None:
        """The head of the values of ``kind`` (number, reference) written in ``text``: the head of the model's
        reading, bound to its reading of ``text``, where the model read ``text``; else the TF-IDF head."""
        head = self.reading.values.get(kind) if self.reading is not None else None
        if head is not None and self._tokens is not None and self._tokens[0] == text:
            if kind not in self._bound:
                self._bound[kind] = replace(head, read=self._tokens)
            return self._bound[kind]
        return getattr(self, f"{kind}_head", None)

    def _reading(self, text: str, name: str) -> tuple[Head, np.ndarray] | None:
        if self._read is None or self._read[0] != text or name not in self.reading.heads:
            return None
        return self.reading.heads[name], self._read[1]

    def vector(self, text: str) -> tuple[np.ndarray, np.ndarray]:
        """(columns, values) of the message's L2-normalised TF-IDF vector (sublinear term frequency); the tool
        head and every argument head read one message's vector, computed once."""
        if self._vector is None or self._vector[0] != text:
            self._vector = (text, self._tfidf(text))
        return self._vector[1]

    def _tfidf(self, text: str) -> tuple[np.ndarray, np.ndarray]:
        cols, vals = [], []
        for term, count in features(text).items():
            col = self.index.get(term)
            if col is not None:
                cols.append(col)
                vals.append((1.0 + math.log(count)) * self.idf[col])
        values = np.asarray(vals, dtype=np.float32)
        norm = float(np.linalg.norm(values)) or 1.0
        return np.asarray(cols, dtype=np.int64), values / norm

    def probabilities(self, text: str) -> dict[str, float]:
        read = self._reading(text, TOOL_HEAD)
        if read is not None:
            head, hidden = read
            return _softmax(self.vector(text), head.weights, head.bias, head.labels, (hidden, head.hidden))
        return _softmax(self.vector(text), self.weights, self.bias, self.labels)

    def argument(self, name: str, text: str, tool: str | None = None) -> dict[str, float]:
        """The probability of each value a request to ``tool`` gives argument ``name`` (booleans as
        ``true``/``false``, :data:`ABSENT` for none); empty where no head was fitted for it."""
        read = self._reading(text, name)
        head = read[0] if read is not None else self.heads.get(name)
        if head is None:
            return {}
        bias = head.bias + (head.tool_weights[head.tools.index(tool)] if tool in head.tools else 0.0)
        return _softmax(self.vector(text), head.weights, bias, head.labels,
                        (read[1], head.hidden) if read is not None else None)

    def choose(self, text: str, allowed: set[str] | None = None) -> Choice:
        """The most probable class among ``allowed`` tools (default: all) and no tool."""
        ranked = sorted(((p, label) for label, p in self.probabilities(text).items()
                         if label == NO_TOOL or allowed is None or label in allowed), reverse=True)
        (p1, first), (p2, second) = ranked[0], ranked[1] if len(ranked) > 1 else (0.0, NO_TOOL)
        name = lambda label: None if label == NO_TOOL else label  # noqa: E731
        return Choice(name(first), p1, name(second), p2)


def _head_arrays(prefix: str, head: Head) -> dict[str, np.ndarray]:
    arrays = {f"{prefix}.weights": head.weights.astype(np.float16), f"{prefix}.bias": head.bias.astype(np.float32),
              f"{prefix}.labels": np.array(head.labels)}
    if head.tools:
        arrays |= {f"{prefix}.tools": np.array(head.tools),
                   f"{prefix}.tool_weights": np.asarray(head.tool_weights, dtype=np.float32)}
    if head.hidden is not None:
        arrays[f"{prefix}.hidden"] = head.hidden.astype(np.float16)
    return arrays


def _head(z, prefix: str) -> Head:
    tools = f"{prefix}.tools" in z.files
    return Head(z[f"{prefix}.weights"], z[f"{prefix}.bias"].astype(np.float32), [str(v) for v in z[f"{prefix}.labels"]],
                [str(v) for v in z[f"{prefix}.tools"]] if tools else [], z[f"{prefix}.tool_weights"] if tools else None,
                z[f"{prefix}.hidden"].astype(np.float32) if f"{prefix}.hidden" in z.files else None)


def _value_arrays(prefix: str, head: NumberHead) -> dict[str, np.ndarray]:
    arrays = {f"{prefix}.vocab": np.array(head.vocab), f"{prefix}.weights": head.weights.astype(np.float16),
              f"{prefix}.bias": head.bias.astype(np.float32), f"{prefix}.labels": np.array(head.labels)}
    if head.tied is not None:
        arrays[f"{prefix}.tied"] = np.asarray(head.tied, dtype=np.float32)
    if head.hidden is not None:
        arrays |= {f"{prefix}.hidden": head.hidden.astype(np.float16),
                   f"{prefix}.hidden_mean": head.hidden_mean.astype(np.float32),
                   f"{prefix}.hidden_scale": head.hidden_scale.astype(np.float32)}
    return arrays


def _value_head(z, prefix: str, kind: str) -> NumberHead:
    optional = {name: z[f"{prefix}.{name}"].astype(np.float32) if f"{prefix}.{name}" in z.files else None
                for name in ("tied", "hidden", "hidden_mean", "hidden_scale")}
    return NumberHead([str(v) for v in z[f"{prefix}.vocab"]], z[f"{prefix}.weights"].astype(np.float32),
                      z[f"{prefix}.bias"].astype(np.float32), [str(v) for v in z[f"{prefix}.labels"]], kind, **optional)


def save(path, vocab: list[str], idf: np.ndarray, weights: np.ndarray, bias: np.ndarray, labels: list[str],
         heads: dict[str, Head] | None = None, *value_heads: NumberHead, reading: Reading | None = None) -> None:
    """Write the fitted classifier, its argument heads, its value heads (number, reference) and the heads of the
    model's reading (float16 weights: the file ships with the package)."""
    arrays = {}
    if reading is not None:
        arrays |= {"reading.state": np.array(reading.state), "reading.mean": reading.mean.astype(np.float32),
                   "reading.scale": reading.scale.astype(np.float32)}
        for name, head in reading.heads.items():
            arrays |= _head_arrays(f"reading.{name}", head)
    for head in value_heads:
        arrays |= _value_arrays(head.kind, head)
    for head in (reading.values.values() if reading is not None else ()):
        arrays |= _value_arrays(f"reading-value.{head.kind}", head)
    for name, head in (heads or {}).items():
        arrays |= _head_arrays(f"head.{name}", head)
    np.savez_compressed(path, vocab=np.array(vocab), idf=idf.astype(np.float32), weights=weights.astype(np.float16),
                        bias=bias.astype(np.float32), labels=np.array(labels), **arrays)


def load_bytes(data: bytes) -> ToolClassifier:
    with np.load(io.BytesIO(data), allow_pickle=False) as z:
        names = sorted({key.split(".")[1] for key in z.files if key.startswith("head.")})
        heads = {name: _head(z, f"head.{name}") for name in names}
        value_heads = {kind: _value_head(z, kind, kind) for kind in VALUE_KINDS if f"{kind}.vocab" in z.files}
        model = ToolClassifier([str(v) for v in z["vocab"]], z["idf"], z["weights"], z["bias"],
                               [str(v) for v in z["labels"]], heads, value_heads.get("number"))
        model.reference_head = value_heads.get("reference")
        if "reading.state" in z.files:
            names = sorted({key.split(".")[1] for key in z.files if key.startswith("reading.") and key.count(".") == 2})
            model.reading = Reading(str(z["reading.state"]), z["reading.mean"], z["reading.scale"],
                                    {name: _head(z, f"reading.{name}") for name in names},
                                    {kind: _value_head(z, f"reading-value.{kind}", kind) for kind in VALUE_KINDS
                                     if f"reading-value.{kind}.vocab" in z.files})
        return model


@lru_cache(maxsize=1)
def default_classifier() -> ToolClassifier | None:
    """The shipped classifier, or None when the package was built without it."""
    try:
        data = resources.files("prompts").joinpath(WEIGHTS).read_bytes()
    except (FileNotFoundError, OSError):
        return None
    return load_bytes(data)
