"""Branches grown beside a cached sequence (Backend.forward_branches, what a draft tree's grown branches are
drafted with): each branch row's logits equal a fresh causal forward over the sequence's first ``base`` tokens and
the row's path, on the transformers backend and on llama.cpp (sequence ids); a crop drops every branch and the
cached sequence is as it was."""

from __future__ import annotations

import pytest
import torch
from conftest import make_tiny_model

from tools.engine.backend import TransformersBackend
from tools.errors import ParameterError

SEQ = [5, 6, 7, 40, 41, 42, 43, 9, 10, 11]
CACHED = 8  # positions of SEQ in the cache before branching
# (token, parent row or -1, base): rows over two calls; row 2 is row 0's second child, rows 4-6 one call's chain of
# rows with a second child of its own earlier row (5 follows 4, 6 follows 4 again)
CALLS = [[(50, -1, 3), (51, 0, 0), (52, 0, 0), (53, -1, 8)],
         [(54, 1, 0), (55, 4, 0), (56, 4, 0), (57, 3, 0), (58, -1, 5)]]


def _paths(calls):
    """Per row in order: the stem's length and the row's tokens from the stem on."""
    rows = []
    for call in calls:
        for token, parent, base in call:
            rows.append((base, [token]) if parent < 0 else (rows[parent][0], rows[parent][1] + [token]))
    return rows


def _check(backend, atol):
    cache = backend.new_cache()
    backend.forward(torch.tensor([SEQ[:CACHED]]), cache, torch.arange(CACHED)[None])
    before = backend.forward(torch.tensor([[SEQ[CACHED]]]), cache, torch.tensor([[CACHED]]))[-1]
    backend.crop(cache, CACHED)
    got, done = [], 0
    for call in CALLS:
        paths = _paths(CALLS)[done: done + len(call)]
        positions = [base + len(tokens) - 1 for base, tokens in paths]
        got += list(backend.forward_branches(torch.tensor([[t for t, _, _ in call]]), cache, torch.tensor([positions]),
                                             [p for _, p, _ in call], [b for _, _, b in call]))
        done += len(call)
    with pytest.raises(ParameterError, match="crop"):
        backend.forward(torch.tensor([[SEQ[CACHED]]]), cache, torch.tensor([[CACHED]]))
    for (base, tokens), logits in zip(_paths(CALLS), got):
        fresh = backend.new_cache()
        ids = SEQ[:base] + tokens
        want = backend.forward(torch.tensor([ids]), fresh, torch.arange(len(ids))[None], rows=1)[-1]
        torch.testing.assert_close(logits, want, atol=atol, rtol=1e-4)
    # a fresh cache above replaced llama.cpp's one: build the sequence again, branch, crop, and read on
    cache = backend.new_cache()
    backend.forward(torch.tensor([SEQ[:CACHED]]), cache, torch.arange(CACHED)[None])
    backend.forward_branches(torch.tensor([[50, 51]]), cache, torch.tensor([[3, 4]]), [-1, 0], [3, 0])
    backend.crop(cache, CACHED)
    after = backend.forward(torch.tensor([[SEQ[CACHED]]]), cache, torch.tensor([[CACHED]]))[-1]
    torch.testing.assert_close(after, before, atol=atol, rtol=1e-4)
    assert backend.cache_length(cache) == CACHED + 1


def test_transformers_branches_match_fresh_forwards():
    _check(TransformersBackend(make_tiny_model("qwen2", layers=2, seed=3)), atol=1e-4)


def test_llamacpp_branches_match_fresh_forwards(tmp_path):
    pytest.importorskip("gguf")
    pytest.importorskip("llama_cpp")
    from gguf_tiny import write_tiny_llama

    from tools.engine.llamacpp import load_gguf

    write_tiny_llama(tmp_path / "tiny.gguf", seed=0)
    _check(load_gguf(tmp_path / "tiny.gguf", n_ctx=256, n_threads=1), atol=2e-3)


def test_a_row_cannot_follow_a_later_one():
    backend = TransformersBackend(make_tiny_model("qwen2", layers=1, seed=3))
    cache = backend.new_cache()
    backend.forward(torch.tensor([SEQ[:4]]), cache, torch.arange(4)[None])
    with pytest.raises(ParameterError, match="after it"):
        backend.forward_branches(torch.tensor([[1, 2]]), cache, torch.tensor([[4, 5]]), [1, -1], [0, 4])
