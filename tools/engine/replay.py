"""Why a method's greedy output left the baseline's on a backend with batched kernels (llama.cpp).

When a method's greedy output leaves the baseline's on a backend whose batched kernels round
differently (llama.cpp's quantized matmuls), the question is whether the method picked the argmax of
the logits *it* computed (a near-tie the batch shape flipped) or not (a bug). ``RecordingBackend``
wraps a Backend, tracks which tokens its cache holds (through forward, crop and keep_positions) and,
for every logits row a forward returns, the exact token context that row predicts after, keeping the
rows computed for one watched context. ``diagnose_divergence`` uses it when recomputing the position
in plain passes of n tokens does not reproduce the method's token.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from tools.engine.backend import Backend


@dataclass
class RowSeen:
    """One logits row a forward returned for the watched context."""

    call: int  # which forward (0-based)
    pass_tokens: int  # tokens in that forward
    tree: bool  # whether it was a token-tree pass
    top1: int
    top2: int
    margin: float  # top-1 minus top-2 logit


class RecordingBackend(Backend):
    """A Backend that forwards everything to ``inner`` and records the rows predicting after ``context``."""

    def __init__(self, inner: Backend, context: list[int]):
        self.inner, self.context = inner, [int(t) for t in context]
        self.device, self.dtype, self.vocab_size = inner.device, inner.dtype, inner.vocab_size
        self.tokens: list[int] = []  # what the cache holds, by index (a tree's nodes in their order)
        self.seen: list[RowSeen] = []
        self.calls = 0

    def __getattr__(self, name):  # tokenizer, head_rows, meta, ...: the inner backend's
        return getattr(self.inner, name)

    def new_cache(self):
        self.tokens = []
        return self.inner.new_cache()

    def cache_length(self, cache) -> int:
        return self.inner.cache_length(cache)

    def crop(self, cache, length: int) -> None:
        self.inner.crop(cache, length)
        self.tokens = self.tokens[:length]

    def keep_positions(self, cache, start: int, keep: torch.Tensor) -> None:
        self.inner.keep_positions(cache, start, keep)
        self.tokens = self.tokens[:start] + [self.tokens[start + int(k)] for k in keep.tolist()]

    def forward(self, ids, cache, positions, visible=None, rows=0) -> torch.Tensor:
        prefix, new = list(self.tokens), [int(t) for t in ids.reshape(-1).tolist()]
        logits = self.inner.forward(ids, cache, positions, visible, rows)
        n = len(new)
        want = (list(range(n)) if isinstance(rows, int) and rows == 0 else
                list(range(max(0, n - rows), n)) if isinstance(rows, int) else [int(r) for r in rows.tolist()])
        vis = None if visible is None else visible.to("cpu", torch.bool)
        for k, r in enumerate(want):
            seen = new[: r + 1] if vis is None else [new[j] for j in range(n) if vis[r, j]]
            if prefix + seen == self.context:
                top = torch.topk(logits[k].float(), 2)
                self.seen.append(RowSeen(self.calls, n, vis is not None, int(top.indices[0]), int(top.indices[1]),
                                         float(top.values[0] - top.values[1])))
        self.tokens = prefix + new
        self.calls += 1
        return logits

    def hidden(self, ids, cache, positions, visible=None) -> torch.Tensor:
        return self.inner.hidden(ids, cache, positions, visible)

    def hidden_layers(self, ids, cache, positions, visible, layers):
        return self.inner.hidden_layers(ids, cache, positions, visible, layers)

    def lm_head(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.inner.lm_head(hidden)

    def embed(self, ids: torch.Tensor):
        return self.inner.embed(ids)

    def head_rows(self, token_ids: torch.Tensor):
        return self.inner.head_rows(token_ids)

    def sync(self) -> None:
        self.inner.sync()


def _logits_after(backend: Backend, prompt: list[int], generated: list[int], batch: int,
                  history: bool) -> torch.Tensor:
    """The logits after prompt + generated, the prompt in one forward and the last ``batch`` tokens in
    one forward; the tokens between one at a time (the baseline's way when ``batch`` is 1), or with
    ``history`` in passes of ``batch`` too (as a method's accepted tokens came from verification passes)."""
    chain = prompt + generated
    last = min(batch, len(chain) - 1) if generated or batch > 1 else 0
    head = min(len(prompt), len(chain) - last)
    middle, step = chain[head: len(chain) - last], batch if history else 1
    pieces = [chain[:head], *(middle[i: i + step] for i in range(0, len(middle), step)), chain[len(chain) - last:]]
    cache, length = backend.new_cache(), 0
    for piece in (p for p in pieces if p):
        logits = backend.forward(torch.tensor([piece]), cache, torch.arange(length, length + len(piece))[None], rows=1)
        length += len(piece)
    return logits[-1]


def diagnose_divergence(backend: Backend, prompt_ids, baseline_ids: list[int], method_ids: list[int],
                        batches=(2, 4, 8, 16), rerun=None) -> dict | None:
    """Where a method's greedy output leaves the baseline's on this backend, and why: None when equal.

    llama.cpp's quantized matmuls round differently for a batch of tokens than for one (other kernels,
    other summation order), so verification passes can flip a near-tie. The baseline's top-1/top-2
    margin at the first differing token is measured the baseline's way, then that position is recomputed
    as the last row of a pass of n tokens (n in ``batches``), the tokens before it one at a time or in
    passes of n. When none of these picks the method's token and ``rerun(backend) -> output ids`` is
    given, the method itself is run again with the same settings through a recording backend
    (tools.engine.replay) and the logits row its own pass computed for that context is read: ``near_tie``
    when a recomputation or the method's own pass picks the method's token, or the method run again
    picks the baseline's token at the same context (shown, not assumed),
    ``mismatch`` otherwise (the method did not take the argmax of what it computed: a bug)."""
    pos = next((i for i, (a, b) in enumerate(zip(baseline_ids, method_ids)) if a != b), None)
    if pos is None:
        return None if len(baseline_ids) == len(method_ids) else {"position": min(len(baseline_ids), len(method_ids)),
                                                                  "kind": "length", "margin": None}
    prompt, generated, token = list(prompt_ids), list(baseline_ids[:pos]), method_ids[pos]
    top2 = torch.topk(_logits_after(backend, prompt, generated, 1, False), 2)
    margin, second = float(top2.values[0] - top2.values[1]), int(top2.indices[1])
    picks = {}
    for n in batches:
        for history in (False, True):
            if second == token and not any(t == token for t in picks.values()):
                picks[f"{n} tokens" + (f" (earlier tokens in passes of {n} too)" if history else "")] = int(
                    _logits_after(backend, prompt, generated, n, history).argmax())
    flips = [k for k, t in picks.items() if t == token]
    out = {"position": pos, "baseline_token": baseline_ids[pos], "method_token": token, "margin": margin,
           "baseline_second": second, "batched_top1": picks}
    own = _own_pass(backend, prompt, generated, method_ids, token, rerun) if not flips and rerun else None
    if own:
        out["method_pass"] = own
    if flips:
        why = (f"near-tie: the baseline's top-1/top-2 margin is {margin:.4g}, and llama.cpp computing this position "
               f"in a pass of {flips[0]} picks the method's token itself (batched kernels round differently)")
    elif own and own.get("flipped"):
        why = (f"near-tie: the baseline's top-1/top-2 margin is {margin:.4g}; {own['note']}")
    elif own and own.get("replayed") and own.get("top1") == token:
        cause = ("its cached keys and values came from earlier multi-token passes, which round differently"
                 if own["pass"].endswith(" 1 token") else "batched kernels round differently")
        why = (f"near-tie: the baseline's top-1/top-2 margin is {margin:.4g}; the method's own {own['pass']} computed "
               f"this position with the method's token on top by {own['margin']:.4g} ({cause}), and the method took "
               "that argmax")
    else:
        why = (f"mismatch: margin {margin:.4g}; the method's token is "
               + ("the baseline's second choice" if second == token else "not even the baseline's second choice")
               + (", and the method's own pass did not put it on top" if own else ", and no batched recomputation "
                  "picks it"))
    out["kind"] = "near_tie" if why.startswith("near-tie") else "mismatch"
    out["explanation"] = why
    return out


def _own_pass(backend, prompt: list[int], generated: list[int], method_ids: list[int], token: int, rerun) -> dict:
    """The logits row the method's own run computed for prompt + generated, from running the method again
    with the same settings through a recording backend (a shorter run would end with other pass shapes)."""
    recorder = RecordingBackend(backend, prompt + generated)
    again, pos = list(rerun(recorder)), len(generated)
    rows = recorder.seen
    row = next((r for r in reversed(rows) if r.top1 == token), rows[-1] if rows else None)
    out = {"replayed": again[: pos + 1] == list(method_ids[: pos + 1])}
    if row is not None:
        out.update(top1=row.top1, top2=row.top2, margin=row.margin, rows_seen=len(rows),
                   **{"pass": f"{'token-tree pass' if row.tree else 'pass'} of {row.pass_tokens} token"
                              + ("s" if row.pass_tokens != 1 else "")})
    if out["replayed"]:
        if row is None:
            out["note"] = "no pass of the method computed this position's logits"
        return out
    left = next((i for i, (a, b) in enumerate(zip(again, method_ids)) if a != b), min(len(again), len(method_ids)))
    if left == pos and again[:pos] == list(generated) and row is not None and row.top2 == token:
        out["flipped"] = True
        out["note"] = (f"run again, the method took the baseline's token {again[pos]} here with the method's token "
                       f"second by {row.margin:.4g}: the same method on the same context picks either token from run "
                       "to run, a near-tie that the backend's rounding decides")
    else:
        out["note"] = f"running the method again left its first output at token {left}"
    return out
