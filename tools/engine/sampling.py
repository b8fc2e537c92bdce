"""Shared sampling pieces: logits to a warped distribution, sampling, and the residual max(0, p - q).

Notation: p is the target's distribution, q the draft's. The same warping (temperature, top-k,
top-p) must be applied to p and q for rejection sampling to stay lossless.
"""

from __future__ import annotations

import torch

from tools.engine.types import GenerationSettings


def warp_probs(logits: torch.Tensor, settings: GenerationSettings) -> torch.Tensor:
    """Return float32 probabilities over the last dim after temperature, top-k and top-p.

    Rows of ``logits`` are independent positions. Greedy settings are not handled here:
    callers take the argmax of the logits instead.
    """
    scores = logits.float() / settings.temperature
    if settings.top_k and settings.top_k < scores.shape[-1]:
        kth = torch.topk(scores, settings.top_k, dim=-1).values[..., -1:]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if settings.top_p < 1.0:
        sorted_scores, order = torch.sort(scores, dim=-1, descending=True)
        sorted_probs = sorted_scores.softmax(dim=-1)
        # drop a token when the mass before it already reaches top_p (the top token always stays)
        drop_sorted = (sorted_probs.cumsum(dim=-1) - sorted_probs) >= settings.top_p
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        scores = scores.masked_fill(drop, float("-inf"))
    return scores.softmax(dim=-1)


def greedy_tokens(logits: torch.Tensor) -> torch.Tensor:
    """The argmax of every row of ``logits`` (LongTensor of shape logits.shape[:-1]).

    ``max(dim=-1).indices`` keeps argmax's rule (the first of tied maxima) and on a CPU runs about
    4x faster than ``argmax`` on bfloat16 logits (31 rows x 152k vocabulary: 1.7 ms vs 7.8 ms),
    which is a few percent of every verification step. Every decoder and the baseline pick greedy
    tokens through this one function, so their ties break alike.
    """
    return logits.max(dim=-1).indices


def sample(probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """Draw one token id per row of ``probs``; returns a LongTensor of shape probs.shape[:-1]."""
    flat = probs.reshape(-1, probs.shape[-1])
    return torch.multinomial(flat, 1, generator=generator).reshape(probs.shape[:-1])


def residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Return max(0, p - q) renormalised; falls back to p when p <= q everywhere (measure zero)."""
    r = (p - q).clamp_min_(0.0)
    total = r.sum(dim=-1, keepdim=True)
    return torch.where(total > 0, r / total.clamp_min(1e-30), p)


def make_generator(settings: GenerationSettings, device: torch.device | str = "cpu") -> torch.Generator | None:
    """A seeded generator for sampling runs (None for greedy)."""
    if settings.greedy:
        return None
    g = torch.Generator(device=device)
    g.manual_seed(settings.seed)
    return g


def uniform(n: int, generator: torch.Generator | None, device) -> torch.Tensor:
    """n uniform draws in [0, 1) from the run's generator."""
    return torch.rand(n, generator=generator, device=device)
