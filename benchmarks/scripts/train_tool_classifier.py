"""Fit the tool classifier (agent.brains.classifier) on the labelled requests of the fitted chat sets and write
prompts/tool_classifier.npz.

    .venv/bin/python benchmarks/scripts/train_tool_classifier.py            # fit, write, report
    .venv/bin/python benchmarks/scripts/train_tool_classifier.py --check    # report only, write nothing

The training pool is prompts/tool_examples.jsonl (benchmarks/scripts/tool_examples.py: the fitted sets, without
the held-out ones). The L2 penalty is chosen by leave-sets-out cross-validation inside the pool (five folds of
whole sets, so a fold's wording was never seen by its model); the held-out sets are only scored, after the fit,
per set.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from agent.brains.classifier import NO_TOOL, WEIGHTS, features, load_bytes, save  # noqa: E402
from benchmarks.scripts.tool_examples import held_out_sets  # noqa: E402

POOL = ROOT / "prompts" / "tool_examples.jsonl"
OUT = ROOT / "prompts" / WEIGHTS
MIN_DF = 2
PENALTIES = (1e-5, 3e-5, 1e-4, 3e-4)
FOLDS = 5


def load_pool() -> list[dict]:
    return [json.loads(line) for line in POOL.read_text(encoding="utf-8").splitlines() if line.strip()]


def label(row: dict) -> str:
    return row.get("tool") or NO_TOOL


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


def fit(x: torch.Tensor, y: torch.Tensor, classes: int, penalty: float) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    w = torch.zeros(x.shape[1], classes, requires_grad=True)
    b = torch.zeros(classes, requires_grad=True)
    opt = torch.optim.LBFGS([w, b], max_iter=500, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(x @ w + b, y) + penalty * (w ** 2).sum()
        loss.backward()
        return loss

    opt.step(closure)
    return w.detach(), b.detach()


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
    args = parser.parse_args(argv)
    rows = load_pool()
    labels = sorted({label(r) for r in rows})
    print(f"{len(rows)} labelled requests from {len({r['set'] for r in rows})} fitted sets, {len(labels)} classes")
    scores = cross_validate(rows, labels)
    penalty = max(scores, key=lambda p: (scores[p], -p))
    vocab, idf = vocabulary(rows)
    w, b = fit(matrix(rows, vocab, idf), torch.tensor([labels.index(label(r)) for r in rows]), len(labels), penalty)
    if not args.check:
        save(OUT, vocab, idf, w.numpy(), b.numpy(), labels)
        print(f"wrote {OUT.relative_to(ROOT)} ({OUT.stat().st_size // 1024} KiB, {len(vocab)} terms, penalty {penalty:g})")
        model = load_bytes(OUT.read_bytes())
    else:
        from agent.brains.classifier import ToolClassifier
        model = ToolClassifier(vocab, idf, w.numpy(), b.numpy(), labels)
    for path in held_out_sets():
        held = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        right = sum((model.choose(r["text"]).tool or NO_TOOL) == label(r) for r in held)
        print(f"  held out {path.name}: {right}/{len(held)} = {100 * right / len(held):.1f}% right tool")
    return 0


if __name__ == "__main__":
    sys.exit(main())
