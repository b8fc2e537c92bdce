"""Fit a Medusa tree to a set of heads: which top-k paths are worth verifying on this hardware.

Upstream's trees (e.g. ``mc_sim_7b_63``) were chosen for Vicuna-7B's heads on an A100: their
nodes are ordered by how often each path was accepted *with those heads*, and 64 nodes cost
nothing extra on that GPU. Other heads, and a CPU whose forward cost steps up past ~32 tokens,
want a different tree. Here:

1. ``rank_hits`` marks, at every position of text the target produced greedily, whether head d's
   rank-r guess is the token that actually came d + 1 places after the next one;
2. ``fit_tree`` grows a prefix-closed tree greedily: each added node is the child (of a node
   already in the tree) that most increases the mean accepted length over those positions,
   the exact quantity verification keeps (the deepest path whose every guess hit);
3. ``best_size`` picks how many nodes to keep from a forward-cost function: the size maximising
   (1 + mean accepted) / cost(nodes + 1), i.e. tokens per unit of target time.

The fitted tree is stored with the heads (``medusa_tree.json``, see tools.medusa.checkpoint) and
``tree="auto"`` uses it on a CPU. Fit it on text unlike the prompts you evaluate on:
``benchmarks/scripts/fit_medusa_tree.py`` fits on the fit half of the shipped Spec-Bench prompts
(prompts/spec_bench_fit.jsonl) and never on the eval half the benchmarks measure.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from tools.engine.cost_curve import monotone
from tools.errors import ParameterError


def rank_hits(topk: torch.Tensor, tokens: list[int]) -> torch.Tensor:
    """bool [L - 1, heads, k]: ``topk`` [L, heads, k] holds the heads' top-k ids computed from the
    hidden state that produced ``tokens[j]``; head d's guesses there are for ``tokens[j + 1 + d]``.
    Positions whose target lies past the text count as misses."""
    length, heads, k = topk.shape
    if length != len(tokens):
        raise ParameterError(f"topk covers {length} positions but there are {len(tokens)} tokens")
    out = torch.tensor(tokens, dtype=torch.long)
    hits = torch.zeros(max(0, length - 1), heads, k, dtype=torch.bool)
    for d in range(heads):
        n = length - 1 - d
        if n > 0:
            hits[:n, d] = topk[:n, d] == out[1 + d: 1 + d + n, None]
    return hits


def fit_tree(hits: torch.Tensor, max_nodes: int) -> tuple[list[list[int]], list[float]]:
    """Grow a tree greedily from ``hits`` [positions, heads, k]; return (choices in the order they
    were added, mean accepted length after each addition). Every prefix of the choices is itself
    a prefix-closed tree, so ``choices[:n]`` is the fitted tree of n nodes."""
    if hits.dim() != 3 or hits.shape[0] == 0:
        raise ParameterError("no positions to fit a tree on", hint="give the fit some generated text")
    if max_nodes < 1:
        raise ParameterError(f"max_nodes must be at least 1, got {max_nodes}")
    n, heads, k = hits.shape
    matched: dict[tuple[int, ...], torch.Tensor] = {(): torch.ones(n, dtype=torch.bool)}
    depth = torch.zeros(n)
    choices: list[list[int]] = []
    means: list[float] = []
    for _ in range(min(max_nodes, sum(k ** (d + 1) for d in range(heads)))):
        best, best_gain, best_vec = None, -1.0, None
        for parent, where in matched.items():
            d = len(parent)
            if d >= heads:
                continue
            for rank in range(k):
                node = (*parent, rank)
                if node in matched:
                    continue
                vec = where & hits[:, d, rank]
                gain = float(torch.clamp(vec.float() * (d + 1) - depth, min=0).sum())
                if gain > best_gain:
                    best, best_gain, best_vec = node, gain, vec
        matched[best] = best_vec
        depth = torch.maximum(depth, best_vec.float() * len(best))
        choices.append(list(best))
        means.append(float(depth.mean()))
    return choices, means


def best_size(means: list[float], cost: Callable[[int], float]) -> int:
    """The number of nodes n (1..len(means)) maximising (1 + means[n-1]) / cost(n + 1), where
    ``cost(t)`` is the relative time of a forward over t tokens (the root plus n nodes)."""
    if not means:
        raise ParameterError("nothing fitted yet")
    return max(range(1, len(means) + 1), key=lambda n: (1 + means[n - 1]) / cost(n + 1))


def curve_cost(curve: dict[int, float]) -> Callable[[int], float]:
    """A cost function relative to one token, linearly interpolated in a measured cost curve
    ({tokens: seconds}, see tools.engine.cost_curve) made non-decreasing first (``monotone``: a noisy
    dip must not make a size look cheap), extrapolated proportionally past its end."""
    if 1 not in {int(t) for t in curve}:
        raise ParameterError("the cost curve needs a measurement for 1 token")
    points = list(monotone(curve).items())
    t1 = points[0][1]

    def cost(tokens: int) -> float:
        for (a, ta), (b, tb) in zip(points, points[1:]):
            if a <= tokens <= b:
                return (ta + (tb - ta) * (tokens - a) / (b - a)) / t1
        last, tl = points[-1]
        return tl / t1 * max(1.0, tokens / last)

    return cost
