"""Fit the tool classifier (agent.brains.classifier) and its argument heads on the labelled requests of the fitted
chat sets and write prompts/tool_classifier.npz.

    .venv/bin/python benchmarks/scripts/train_tool_classifier.py            # fit, write, report
    .venv/bin/python benchmarks/scripts/train_tool_classifier.py --check    # report only, write nothing
    .venv/bin/python benchmarks/scripts/train_tool_classifier.py --values-only    # refit the number and reference heads alone
    .venv/bin/python benchmarks/scripts/train_tool_classifier.py --values-only --reading DIR    # ... and their heads of the model's reading
    .venv/bin/python benchmarks/scripts/train_tool_classifier.py --reading DIR    # also the heads of the model's reading

With ``--reading DIR`` the tool head and the argument heads are also fitted over the local model's reading of each
request (agent.brains.classifier.Reading: its mean last hidden state over the request's turn, after the local
brain's cached prompt), beside the TF-IDF heads that serve any other model or prompt. The readings are computed
with the built-in model (about a second per request on two cores) and kept in DIR (``pool.npz``, one file per
held-out set) under the model and prompt they were read with; a file read under another prompt is read again.
The number and reference heads get heads of the model's reading too: each written value read as the model's
hidden state at its last token and the mean over the tokens after it (classifier.value_reading), from the
hidden state at every token of each request that writes a value (``tokens-pool.npz`` and ``tokens-SET.npz`` in
DIR, float16, about 120 MB for the pool).

The training pool is prompts/tool_examples.jsonl (benchmarks/scripts/tool_examples.py: the fitted sets, without
the held-out ones). The L2 penalty is chosen by leave-sets-out cross-validation inside the pool (five folds of
whole sets, so a fold's wording was never seen by its model), for the tool head and for each argument head (one
per enum or boolean argument the pool gives a value at least MIN_GIVEN times: which value the request gives it,
or none, learned from the requests of the tools that take it) and for the value heads (which argument each
written number, and each written model, file, folder, URL or run, sets, read from the words around it); the held-out sets are only scored, after the fit, per set.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import Counter
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from agent.brains.classifier import (ABSENT, MAX_CHARS, NO_FIELD, NO_TOOL, TOOL_HEAD, WEIGHTS, Head,  # noqa: E402
                                     VALUE_KINDS, NumberHead, Reading, _numbers, _references, features, load_bytes,
                                     naming, save, value_reading)
from agent.brains.tool_grammar import tool_args  # noqa: E402
from tools.agent_tools import registry  # noqa: E402
from benchmarks.scripts.tool_examples import held_out_sets  # noqa: E402

POOL = ROOT / "prompts" / "tool_examples.jsonl"
OUT = ROOT / "prompts" / WEIGHTS
MIN_DF = 2
PENALTIES = (1e-5, 3e-5, 1e-4, 3e-4)
VALUE_PENALTIES = (3e-6, 1e-5, 3e-5, 1e-4)
VALUE_READING_PENALTIES = (3e-7, 1e-6, 3e-6, 1e-5)


def _reader(rows: list[dict], path: Path):
    """(the local brain's engine, the state it reads under, ``rows``' requests as one text, the arrays of
    ``path`` where it holds readings of these requests under that state, else None)."""
    from agent.brains import local

    brain = local.LocalBrain(classifier=local.default_classifier())
    lm = brain.engine()
    state = local.reading_state(brain.model, brain._prefix)
    texts = json.dumps([r["text"] for r in rows])
    if path.exists():
        with np.load(path) as z:
            if str(z["state"]) == state and str(z["texts"]) == texts:
                return lm, state, texts, {key: z[key] for key in z.files}
    return lm, state, texts, None
FOLDS = 5
MIN_GIVEN = 8  # an argument gets a head when the pool gives it a value at least this often


def load_pool() -> list[dict]:
    return [json.loads(line) for line in POOL.read_text(encoding="utf-8").splitlines() if line.strip()]


def label(row: dict) -> str:
    return row.get("tool") or NO_TOOL


def choice_arguments() -> dict[str, set[str]]:
    """Argument name -> the tools whose schema gives it a choice of values (an enum or a boolean). A list of
    choices (compare_methods' ``methods``) has no head: one head per listed value, tried, got the whole list
    right on 7 of 20 held-out comparisons, where the model got 18."""
    out: dict[str, set[str]] = {}
    for name, tool in registry.load_tools().items():
        for arg in tool_args(tool):
            if arg.kind in ("enum", "bool"):
                out.setdefault(arg.name, set()).add(name)
    return out


def value_label(row: dict, argument: str) -> str:
    """The value a labelled request gives ``argument``, as the head's class (booleans ``true``/``false``)."""
    value = (row.get("args") or {}).get(argument)
    if value is None:
        return ABSENT
    return str(value).lower() if isinstance(value, bool) else str(value)


def with_tools(x: torch.Tensor, rows: list[dict], picked: list[int], tools: list[str]) -> torch.Tensor:
    """The picked rows' features, then one column per tool taking the argument (the row's tool set to 1)."""
    onehot = torch.zeros(len(picked), len(tools))
    for r, i in enumerate(picked):
        onehot[r, tools.index(rows[i]["tool"])] = 1.0
    return torch.cat([x[picked], onehot], dim=1)


def head_tasks(rows: list[dict]) -> dict[str, tuple[list[int], list[str], list[str]]]:
    """Argument -> (the pool rows of the tools taking it, its classes, those tools), for the arguments given
    often enough."""
    tasks = {}
    for argument, tools in sorted(choice_arguments().items()):
        picked = [i for i, r in enumerate(rows) if r.get("tool") in tools]
        given = [value_label(rows[i], argument) for i in picked]
        if sum(v != ABSENT for v in given) >= MIN_GIVEN:
            tasks[argument] = (picked, sorted(set(given)), sorted({rows[i]["tool"] for i in picked}))
    return tasks


def fit_heads(rows: list[dict], x: torch.Tensor, penalties: dict[str, float]) -> dict[str, Head]:
    heads = {}
    for argument, (picked, classes, tools) in head_tasks(rows).items():
        y = torch.tensor([classes.index(value_label(rows[i], argument)) for i in picked])
        w, b = fit(with_tools(x, rows, picked, tools), y, len(classes), penalties[argument])
        heads[argument] = Head(w[:x.shape[1]].numpy(), b.numpy(), classes, tools, w[x.shape[1]:].numpy())
    return heads


def cross_validate_heads(rows: list[dict]) -> dict[str, float]:
    """Each argument head's penalty, chosen as the tool head's is: by accuracy with whole sets left out."""
    tasks, sets = head_tasks(rows), sorted({r["set"] for r in rows})
    right = {(a, p): 0 for a in tasks for p in PENALTIES}
    for fold in range(FOLDS):
        out = set(sets[fold::FOLDS])
        train = [i for i, r in enumerate(rows) if r["set"] not in out]
        vocab, idf = vocabulary([rows[i] for i in train])
        x = matrix(rows, vocab, idf)
        for argument, (picked, classes, tools) in tasks.items():
            fit_rows = [i for i in picked if rows[i]["set"] not in out]
            test_rows = [i for i in picked if rows[i]["set"] in out]
            if not fit_rows or not test_rows:  # every request of the argument's tools is in this fold, or none
                continue
            y = torch.tensor([classes.index(value_label(rows[i], argument)) for i in fit_rows], dtype=torch.long)
            truth = [classes.index(value_label(rows[i], argument)) for i in test_rows]
            for penalty in PENALTIES:
                w, b = fit(with_tools(x, rows, fit_rows, tools), y, len(classes), penalty)
                pred = (with_tools(x, rows, test_rows, tools) @ w + b).argmax(1).tolist()
                right[(argument, penalty)] += sum(p == t for p, t in zip(pred, truth))
    chosen = {}
    for argument, (picked, _, _) in tasks.items():
        chosen[argument] = max(PENALTIES, key=lambda p: (right[(argument, p)], -p))
        print(f"  {argument}: {100 * right[(argument, chosen[argument])] / len(picked):.1f}% with sets left out "
              f"(penalty {chosen[argument]:g}, {len(picked)} requests)", flush=True)
    return chosen


def value_examples(rows: list[dict], kind: str = "number") -> list[tuple[Counter, str, str, tuple]]:
    """(features, the argument it sets or NO_FIELD, set, the words beside it) for each value written in a
    request to a tool: each
    number (``kind`` number) or each word that may name a model, file, folder, URL or run (``kind``
    reference). A value sets the first argument not yet matched whose labelled value (or list item) equals
    it, wherever in the arguments."""
    extract = _numbers if kind == "number" else _references
    out = []
    for row in rows:
        if not row.get("tool"):
            continue
        leaves: list[tuple[str, object]] = []

        def walk(args: dict) -> None:
            for key, value in args.items():
                if isinstance(value, dict):
                    walk(value)
                elif kind == "number" and isinstance(value, (int, float)) and not isinstance(value, bool):
                    leaves.append((key, float(value)))
                elif kind == "number" and isinstance(value, list):  # concurrency levels, K values to sweep
                    leaves.extend((key, float(v)) for v in value
                                  if isinstance(v, (int, float)) and not isinstance(v, bool))
                elif kind == "reference":
                    items = value if isinstance(value, list) else [value]
                    leaves.extend((key, v.casefold()) for v in items if isinstance(v, str))

        walk(row.get("args") or {})
        used: set[int] = set()
        for raw, feats, beside, _ in extract(row["text"]):
            want = float(raw) if kind == "number" else raw.casefold()
            match = next((i for i, (_, v) in enumerate(leaves) if i not in used and v == want), None)
            if match is not None:
                used.add(match)
            out.append((feats + Counter({f"tool={row['tool']}": 1}),
                        NO_FIELD if match is None else leaves[match][0], row.get("set", ""), beside))
    return out


def number_matrix(examples: list, vocab: list[str]) -> torch.Tensor:
    index = {t: i for i, t in enumerate(vocab)}
    x = np.zeros((len(examples), len(vocab)), dtype=np.float32)
    for r, (feats, *_) in enumerate(examples):
        cols = [index[t] for t in feats if t in index]
        x[r, cols] = 1.0 / math.sqrt(max(1, len(cols)))
    return torch.from_numpy(x)


def value_vocabulary(examples: list) -> list[str]:
    """The value features seen in at least MIN_DF of ``examples``."""
    df = Counter(t for e in examples for t in e[0])
    return sorted(t for t, n in df.items() if n >= MIN_DF)


def value_folds(examples: list, y: torch.Tensor, classes: int, named: torch.Tensor, penalty: float,
                dense: torch.Tensor | None = None) -> float:
    """The share of ``examples`` a value head fitted with ``penalty`` places right with whole sets left out
    (FOLDS folds), over their features, naming's indicators ``named`` and, where given, ``dense`` columns (the
    model's reading of each value)."""
    sets = sorted({e[2] for e in examples})
    right = 0
    for fold in range(FOLDS):
        out = set(sets[fold::FOLDS])
        train = [i for i, e in enumerate(examples) if e[2] not in out]
        test = [i for i, e in enumerate(examples) if e[2] in out]
        vocab = value_vocabulary([examples[i] for i in train])
        x, test_x = (number_matrix([examples[i] for i in part], vocab) for part in (train, test))
        if dense is not None:
            x, test_x = torch.cat([x, dense[train]], 1), torch.cat([test_x, dense[test]], 1)
        w, b, tied = fit(x, y[train], classes, penalty, named[train])
        right += int(((test_x @ w + b + named[test] @ tied).argmax(1) == y[test]).sum())
    return right / len(examples)


def fit_value_head(rows: list[dict], kind: str = "number") -> NumberHead:
    """The number or reference head, its penalty chosen with whole sets left out (FOLDS folds)."""
    examples = value_examples(rows, kind)
    labels = sorted({e[1] for e in examples})
    y = torch.tensor([labels.index(e[1]) for e in examples])
    named = torch.from_numpy(np.stack([naming(e[3], labels) for e in examples]))  # examples x labels x TIED
    scores = {}
    for penalty in VALUE_PENALTIES:
        for use_names in (False, True):  # with naming's indicators or without: whichever predicts left-out sets
            scores[penalty, use_names] = value_folds(examples, y, len(labels), named if use_names else named[:, :, :0],
                                                     penalty)
            print(f"  {kind}s, penalty {penalty:g}, {'with' if use_names else 'without'} names: "
                  f"{100 * scores[penalty, use_names]:.1f}% with sets left out "
                  f"({len(examples)} {kind}s, {len(labels)} classes)", flush=True)
    penalty, use_names = max(scores, key=lambda key: (scores[key], -key[0], not key[1]))
    vocab = value_vocabulary(examples)
    w, b, tied = fit(number_matrix(examples, vocab), y, len(labels), penalty, named if use_names else named[:, :, :0])
    print(f"  {kind}s: penalty {penalty:g}, tied weights {np.round(tied.numpy(), 2).tolist()}")
    return NumberHead(vocab, w.numpy(), b.numpy(), labels, kind, tied.numpy() if use_names else None)


def fit_value_reading(rows: list[dict], kind: str, tokens: dict[int, tuple[np.ndarray, np.ndarray]],
                      plain: NumberHead) -> NumberHead:
    """The value head of ``kind`` over its features (as ``plain``, with or without naming's indicators) and the
    model's reading of each value (classifier.value_reading, standardised), the penalty chosen with whole sets
    left out (FOLDS folds). ``tokens``: the model's hidden states and offsets per request with values."""
    extract = _numbers if kind == "number" else _references
    with_values = [(i, row) for i, row in enumerate(rows) if row.get("tool") and i in tokens]  # those read
    hidden = [value_reading(*tokens[i], *span) for i, row in with_values for *_, span in extract(row["text"])]
    examples = value_examples([row for _, row in with_values], kind)
    assert len(hidden) == len(examples)
    hidden = np.stack(hidden)
    mean, scale = hidden.mean(0), (hidden.std(0) + 1e-6) * math.sqrt(hidden.shape[1])
    read = torch.from_numpy(((hidden - mean) / scale).astype(np.float32))
    labels = plain.labels
    y = torch.tensor([labels.index(e[1]) for e in examples])
    named = torch.from_numpy(np.stack([naming(e[3], labels) for e in examples]))
    if plain.tied is None:
        named = named[:, :, :0]
    scores = {}
    for penalty in VALUE_READING_PENALTIES:
        scores[penalty] = value_folds(examples, y, len(labels), named, penalty, read)
        print(f"  {kind}s with the model's reading, penalty {penalty:g}: {100 * scores[penalty]:.1f}% with sets "
              f"left out", flush=True)
    penalty = max(scores, key=lambda p: (scores[p], -p))
    vocab = value_vocabulary(examples)
    w, b, tied = fit(torch.cat([number_matrix(examples, vocab), read], 1), y, len(labels), penalty, named)
    terms = len(vocab)
    return NumberHead(vocab, w[:terms].numpy(), b.numpy(), labels, kind, tied.numpy() if plain.tied is not None
                      else None, w[terms:].numpy(), mean, scale)


def read_tokens(rows: list[dict], path: Path) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """The local brain's model's hidden state at each token of each request that writes a value (a number, a
    name), with the characters each token spans (agent.brains.local.read_tokens), kept in ``path`` (float16)
    and read again only when the model, the prompt or the requests changed."""
    from agent.brains import local

    lm, state, texts, kept = _reader(rows, path)
    if kept is not None:
        return {int(k[1:]): (kept[k].astype(np.float32), kept[f"o{k[1:]}"]) for k in kept if k.startswith("h")}
    out = {}
    for i, row in enumerate(rows):
        read = local.read_tokens(lm, row["text"]) if _numbers(row["text"]) or _references(row["text"]) else None
        if read is not None:  # None: a request beyond one batch of the model, read by the word heads alone
            out[i] = read
        if i % 200 == 0:
            print(f"  read the tokens of {i}/{len(rows)} requests of {path.stem}", flush=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    arrays = {f"h{i}": h.astype(np.float16) for i, (h, _) in out.items()} | {f"o{i}": o for i, (_, o) in out.items()}
    np.savez(path, state=np.array(state), texts=np.array(texts), **arrays)
    return {i: (h.astype(np.float16).astype(np.float32), o) for i, (h, o) in out.items()}


def report_values(head: NumberHead, tokens: dict[str, dict] | None = None) -> dict[str, tuple[int, int]]:
    """Per held-out set, how many of its written values (numbers, or names) the value ``head`` places where the
    labels put them (right, of how many); ``tokens``: the model's reading per set, for a head of the model's
    reading."""
    out = {}
    for path in held_out_sets():
        held = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        right = total = 0
        for i, row in enumerate(held):
            if not row.get("tool"):
                continue
            read = (row["text"], *tokens[path.stem][i]) if tokens and i in tokens[path.stem] else None
            bound = head if read is None else replace(head, read=read)
            wanted = [e[1] for e in value_examples([row], head.kind)]
            placed = [max(p, key=p.get) for _, p in bound.fields(row["text"], row["tool"])]
            right += sum(a == b for a, b in zip(wanted, placed))
            total += len(wanted)
        print(f"  held out {path.name}: {head.kind}s {'with' if tokens else 'without'} the model's reading: "
              f"{right}/{total} placed right", flush=True)
        out[path.stem.removeprefix("conversations_fresh_")] = (right, total)
    return out


READING_PENALTIES = (3e-7, 1e-6, 3e-6, 1e-5)


def read_requests(rows: list[dict], path: Path) -> tuple[str, np.ndarray]:
    """(state, one reading per row): the local brain's model reading each request after its cached prompt,
    kept in ``path`` and read again only when the model, the prompt or the requests changed."""
    from agent.brains import local_prompt

    lm, state, texts, kept = _reader(rows, path)
    if kept is not None:
        return state, kept["mean"]
    out = []
    for i, row in enumerate(rows):
        read = lm.read(local_prompt.user_turn(row["text"][:MAX_CHARS]))
        out.append(None if read is None else read.mean(0))
        if i % 200 == 0:
            print(f"  read {i}/{len(rows)} requests of {path.stem}", flush=True)
    size = next(len(h) for h in out if h is not None)
    hidden = np.stack([np.full(size, np.nan) if h is None else h for h in out]).astype(np.float32)
    # a request beyond one batch of the model has no reading (the product reads it with the word heads): the
    # pool's mean reading stands for it, which the standardised features read as nothing
    hidden = np.where(np.isnan(hidden), np.nanmean(hidden, axis=0), hidden)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, mean=hidden, state=np.array(state), texts=np.array(texts))
    return state, hidden


def fit_reading(rows: list[dict], x: torch.Tensor, hidden: np.ndarray, state: str) -> Reading:
    """The tool head and the argument heads over the TF-IDF features ``x`` and the standardised readings, the
    penalty chosen for the tool head with whole sets left out (and used for the argument heads)."""
    mean = hidden.mean(0)
    scale = (hidden.std(0) + 1e-6) * math.sqrt(hidden.shape[1])  # a reading weighs about as much as the TF-IDF row
    reading = Reading(state, mean, scale, {})
    both = torch.cat([x, torch.from_numpy(reading.features(hidden))], dim=1)
    labels = sorted({label(r) for r in rows})
    y = torch.tensor([labels.index(label(r)) for r in rows])
    sets = sorted({r["set"] for r in rows})
    right = {}
    for penalty in READING_PENALTIES:
        right[penalty] = 0
        for fold in range(FOLDS):
            out = set(sets[fold::FOLDS])
            train = [i for i, r in enumerate(rows) if r["set"] not in out]
            test = [i for i, r in enumerate(rows) if r["set"] in out]
            w, b = fit(both[train], y[train], len(labels), penalty)
            right[penalty] += int(((both[test] @ w + b).argmax(1) == y[test]).sum())
        print(f"  reading: penalty {penalty:g}: {100 * right[penalty] / len(rows):.1f}% tools with sets left out",
              flush=True)
    penalty = max(READING_PENALTIES, key=lambda p: (right[p], -p))
    terms = x.shape[1]
    w, b = fit(both, y, len(labels), penalty)
    reading.heads[TOOL_HEAD] = Head(w[:terms].numpy(), b.numpy(), labels, hidden=w[terms:].numpy())
    for argument, (picked, classes, tools) in head_tasks(rows).items():
        ya = torch.tensor([classes.index(value_label(rows[i], argument)) for i in picked])
        w, b = fit(with_tools(both, rows, picked, tools), ya, len(classes), penalty)
        reading.heads[argument] = Head(w[:terms].numpy(), b.numpy(), classes, tools, w[both.shape[1]:].numpy(),
                                       w[terms:both.shape[1]].numpy())
    return reading


def vocabulary(rows: list[dict]) -> tuple[list[str], np.ndarray]:
    """Terms in at least MIN_DF requests, and their inverse document frequencies."""
    df = Counter(t for r in rows for t in features(r["text"]))
    vocab = sorted(t for t, n in df.items() if n >= MIN_DF)
    return vocab, np.array([math.log(len(rows) / df[t]) for t in vocab], dtype=np.float32)


def matrix(rows: list[dict], vocab: list[str], idf: np.ndarray) -> torch.Tensor:
    index = {t: i for i, t in enumerate(vocab)}
    x = np.zeros((len(rows), len(vocab)), dtype=np.float32)
    for r, row in enumerate(rows):
        for term, count in features(row["text"]).items():
            if term in index:
                x[r, index[term]] = (1.0 + math.log(count)) * idf[index[term]]
    x /= np.linalg.norm(x, axis=1, keepdims=True) + 1e-12
    return torch.from_numpy(x)


def fit(x: torch.Tensor, y: torch.Tensor, classes: int, penalty: float, named: torch.Tensor | None = None):
    """Multinomial logistic regression (L2 ``penalty`` on the term weights): (weights, bias), and with ``named``
    (examples x classes x k indicators) also k weights shared by every class, added to each class's logit."""
    torch.manual_seed(0)
    w = torch.zeros(x.shape[1], classes, requires_grad=True)
    b = torch.zeros(classes, requires_grad=True)
    tied = torch.zeros(named.shape[2] if named is not None else 0, requires_grad=True)
    opt = torch.optim.LBFGS([w, b, tied], max_iter=500, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        logits = x @ w + b + (named @ tied if named is not None else 0.0)
        loss = torch.nn.functional.cross_entropy(logits, y) + penalty * (w ** 2).sum()
        loss.backward()
        return loss

    opt.step(closure)
    if named is None:
        return w.detach(), b.detach()
    return w.detach(), b.detach(), tied.detach()


def cross_validate(rows: list[dict], labels: list[str]) -> dict[float, float]:
    """Accuracy per penalty, leaving out whole sets (FOLDS folds of the pool's sets)."""
    sets = sorted({r["set"] for r in rows})
    scores = {}
    for penalty in PENALTIES:
        right = 0
        for fold in range(FOLDS):
            out = set(sets[fold::FOLDS])
            train = [r for r in rows if r["set"] not in out]
            test = [r for r in rows if r["set"] in out]
            vocab, idf = vocabulary(train)
            w, b = fit(matrix(train, vocab, idf), torch.tensor([labels.index(label(r)) for r in train]),
                       len(labels), penalty)
            pred = (matrix(test, vocab, idf) @ w + b).argmax(1)
            right += sum(int(p) == labels.index(label(r)) for p, r in zip(pred, test))
        scores[penalty] = right / len(rows)
        print(f"  penalty {penalty:g}: {100 * scores[penalty]:.1f}% (sets left out in turn)", flush=True)
    return scores


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="report only; write nothing")
    parser.add_argument("--values-only", action="store_true",
                        help="refit the number and reference heads alone, keeping the shipped tool and argument heads")
    parser.add_argument("--reading", type=Path, metavar="DIR",
                        help="also fit heads over the local model's reading of each request, kept in DIR")
    parser.add_argument("--save-result", metavar="NAME",
                        help="with --reading: write the held-out accuracy of the heads to benchmarks/results/NAME.json "
                             "(and of the value heads to NAME_values.json)")
    parser.add_argument("--reading-only", action="store_true",
                        help="with --reading: fit the heads of the model's reading alone, keeping the shipped heads")
    args = parser.parse_args(argv)
    rows = load_pool()
    if args.reading_only:
        if not args.reading:
            parser.error("--reading-only needs --reading DIR")
        shipped = load_bytes(OUT.read_bytes())
        vocab = sorted(shipped.index, key=shipped.index.get)
        if not (args.check and shipped.reading):  # --check: report the shipped heads
            state, hidden = read_requests(rows, args.reading / "pool.npz")
            shipped.reading = fit_reading(rows, matrix(rows, vocab, shipped.idf), hidden, state)
            tokens = read_tokens(rows, args.reading / "tokens-pool.npz")
            shipped.reading.values.update({kind: fit_value_reading(rows, kind, tokens, getattr(shipped, f"{kind}_head"))
                                           for kind in VALUE_KINDS})
        if not args.check:
            save(OUT, vocab, shipped.idf, shipped.weights, shipped.bias, shipped.labels, shipped.heads,
                 shipped.number_head, shipped.reference_head, reading=shipped.reading)
            print(f"wrote {OUT.relative_to(ROOT)} ({OUT.stat().st_size // 1024} KiB)")
        report_reading(shipped, args.reading, args.save_result)
        report_value_readings(shipped, args.reading, args.save_result and f"{args.save_result}_values")
        return 0
    if args.values_only:  # with --reading DIR: their heads of the model's reading too
        shipped = load_bytes(OUT.read_bytes())
        value_heads = [fit_value_head(rows, kind) for kind in VALUE_KINDS]
        if args.reading and shipped.reading:
            tokens = read_tokens(rows, args.reading / "tokens-pool.npz")
            shipped.reading.values.update({kind: fit_value_reading(rows, kind, tokens, head)
                                           for kind, head in zip(VALUE_KINDS, value_heads)})
        elif shipped.reading and shipped.reading.values:
            print("  note: the value heads of the model's reading are kept as shipped; refit them with --reading DIR")
        vocab = sorted(shipped.index, key=shipped.index.get)
        if not args.check:
            save(OUT, vocab, shipped.idf, shipped.weights, shipped.bias, shipped.labels, shipped.heads, *value_heads,
                 reading=shipped.reading)
            print(f"wrote {OUT.relative_to(ROOT)} ({OUT.stat().st_size // 1024} KiB)")
        shipped.number_head, shipped.reference_head = value_heads
        if args.reading and shipped.reading:
            report_value_readings(shipped, args.reading)
        else:
            for head in value_heads:
                report_values(head)
        return 0
    labels = sorted({label(r) for r in rows})
    print(f"{len(rows)} labelled requests from {len({r['set'] for r in rows})} fitted sets, {len(labels)} classes")
    scores = cross_validate(rows, labels)
    penalty = max(scores, key=lambda p: (scores[p], -p))
    head_penalties = cross_validate_heads(rows)
    vocab, idf = vocabulary(rows)
    x = matrix(rows, vocab, idf)
    w, b = fit(x, torch.tensor([labels.index(label(r)) for r in rows]), len(labels), penalty)
    heads = fit_heads(rows, x, head_penalties)
    value_heads = [fit_value_head(rows, kind) for kind in ("number", "reference")]
    reading = None
    if args.reading:
        state, hidden = read_requests(rows, args.reading / "pool.npz")
        reading = fit_reading(rows, x, hidden, state)
        tokens = read_tokens(rows, args.reading / "tokens-pool.npz")
        reading.values.update({kind: fit_value_reading(rows, kind, tokens, head)
                               for kind, head in zip(VALUE_KINDS, value_heads)})
    if not args.check:
        save(OUT, vocab, idf, w.numpy(), b.numpy(), labels, heads, *value_heads, reading=reading)
        print(f"wrote {OUT.relative_to(ROOT)} ({OUT.stat().st_size // 1024} KiB, {len(vocab)} terms, penalty {penalty:g}, "
              f"{len(heads)} argument heads)")
        model = load_bytes(OUT.read_bytes())
    else:
        from agent.brains.classifier import ToolClassifier
        model = ToolClassifier(vocab, idf, w.numpy(), b.numpy(), labels, heads, value_heads[0])
        model.reference_head = value_heads[1]
        model.reading = reading
    tools_of = choice_arguments()
    for path in held_out_sets():
        held = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        right = sum((model.choose(r["text"]).tool or NO_TOOL) == label(r) for r in held)
        given = [(r, a) for r in held for a in model.heads if r.get("tool") in tools_of[a]]
        values = sum(max(p := model.argument(a, r["text"], r["tool"]), key=p.get) == value_label(r, a)
                     for r, a in given)
        print(f"  held out {path.name}: {right}/{len(held)} = {100 * right / len(held):.1f}% right tool; "
              f"{values}/{len(given)} = {100 * values / max(1, len(given)):.1f}% right choice arguments")

    report_values(model.number_head)
    report_values(model.reference_head)
    if reading is not None:
        report_reading(model, args.reading, args.save_result)
        report_value_readings(model, args.reading, args.save_result and f"{args.save_result}_values")
    return 0


def report_value_readings(model, folder: Path, save_as: str | None = None) -> None:
    """The value heads on the held-out sets, without and with the model's reading (kept in ``folder``);
    ``save_as``: also a result file of that name in benchmarks/results/."""
    tokens = {}
    for path in held_out_sets():
        held = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        tokens[path.stem] = read_tokens(held, folder / f"tokens-{path.stem}.npz")
    placed = {}
    for kind in VALUE_KINDS:
        placed[kind, "words"] = report_values(getattr(model, f"{kind}_head"))
        if kind in model.reading.values:
            placed[kind, "reading"] = report_values(model.reading.values[kind], tokens)
    if save_as and len(placed) == 2 * len(VALUE_KINDS):
        from agent.brains.local import DEFAULT_LOCAL_MODEL
        from tools.report.results import save_result

        rows = [{"set": name, **{f"{kind}s_{how}": placed[kind, how][name][0] for kind, how in placed},
                 **{f"{kind}s": placed[kind, "words"][name][1] for kind in VALUE_KINDS}}
                for name in placed[VALUE_KINDS[0], "words"]]
        summary = {key: sum(r[key] for r in rows) for key in rows[0] if key != "set"}
        path = save_result(save_as, "classifier_heads", rows, summary, hardware={}, dtype="Q4_K_M GGUF",
                           threads=None, command=[".venv/bin/python", *sys.argv],
                           extra={"model": DEFAULT_LOCAL_MODEL, "state": model.reading.state,
                                  "what": "the shipped number and reference heads on the held-out sets' written "
                                          "values: how many each places where the labels put them (an argument, "
                                          "or none), on word features alone and with the built-in model's "
                                          "reading of each value; fitted on the pool only"})
        print(f"result: {path}")


def report_reading(model, folder: Path, save_as: str | None = None) -> None:
    """Per held-out set, the tool head and the argument heads without and with the model's reading (readings
    kept in ``folder``); ``save_as``: also a result file of that name in benchmarks/results/."""
    from tools.report.results import save_result

    tools_of = choice_arguments()
    rows = []
    for path in held_out_sets():
        held = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        _, hidden = read_requests(held, folder / f"{path.stem}.npz")
        right = {"tfidf": [0, 0], "reading": [0, 0]}  # (tools, choice arguments) right
        given = 0
        for row, h in zip(held, hidden):
            asked = [a for a in model.heads if row.get("tool") in tools_of[a]]
            given += len(asked)
            for heads, reading in (("tfidf", None), ("reading", h)):
                model.read(row["text"], reading)
                right[heads][0] += (model.choose(row["text"]).tool or NO_TOOL) == label(row)
                right[heads][1] += sum(max(p := model.argument(a, row["text"], row["tool"]), key=p.get)
                                       == value_label(row, a) for a in asked)
        model.read("", None)
        rows.append({"set": path.stem.removeprefix("conversations_fresh_"), "requests": len(held),
                     "choice_arguments": given, "tool_right_tfidf": right["tfidf"][0],
                     "tool_right_reading": right["reading"][0], "arguments_right_tfidf": right["tfidf"][1],
                     "arguments_right_reading": right["reading"][1]})
        r = rows[-1]
        print(f"  held out {path.name}: tool {r['tool_right_tfidf']} -> {r['tool_right_reading']} of {len(held)} "
              f"with the model's reading; choice arguments {r['arguments_right_tfidf']} -> "
              f"{r['arguments_right_reading']} of {given}", flush=True)
    summary = {key: sum(r[key] for r in rows) for key in rows[0] if key != "set"}
    if save_as:
        from agent.brains.local import DEFAULT_LOCAL_MODEL

        path = save_result(save_as, "classifier_heads", rows, summary, hardware={}, dtype="Q4_K_M GGUF",
                           threads=None, command=[".venv/bin/python", *sys.argv],
                           extra={"model": DEFAULT_LOCAL_MODEL, "state": model.reading.state,
                                  "what": "the shipped heads on the held-out sets' labelled requests (the tool "
                                          "head's pick, each choice argument head's value), without and with the "
                                          "built-in model's reading of the request; fitted on the pool only"})
        print(f"result: {path}")


if __name__ == "__main__":
    sys.exit(main())
