"""The Medusa heads' training loss (a sampled softmax over the shared lm_head) and their held-out accuracy."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from tools.engine.medusa import MedusaHeads

__all__ = ["sample_candidates", "head_losses", "evaluate_heads"]


def sample_candidates(labels: torch.Tensor, vocab: int, candidate_tokens: int,
                      generator: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Token ids a sampled softmax scores: the P distinct labels (sorted) then uniformly drawn others.

    Returns (ids [<= candidate_tokens], logit correction per id, P). Each of the m drawn tokens
    stands for (V - P) / m tokens, so its logit is raised by log((V - P) / m).
    """
    positives = torch.unique(labels)  # sorted
    m = max(min(candidate_tokens - positives.numel(), vocab - positives.numel()), 1)
    is_pos = torch.zeros(vocab, dtype=torch.bool)
    is_pos[positives.cpu()] = True
    perm = torch.randperm(vocab, generator=generator)
    negatives = perm[~is_pos[perm]][:m].to(labels.device)
    ids = torch.cat([positives, negatives])
    correction = torch.zeros(ids.numel(), device=labels.device)
    if negatives.numel():
        correction[positives.numel():] = math.log((vocab - positives.numel()) / negatives.numel())
    return ids, correction, positives.numel()


def head_losses(feats: torch.Tensor, labels: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                candidate_tokens: int, generator: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Cross-entropy per head for features [H, B, h] against labels [B, H] with projection ``weight`` [V, h].

    Returns (loss per head [H], top-1 hit rate per head [H] among the scored tokens). When V exceeds
    ``candidate_tokens`` only ``sample_candidates`` are scored (sampled softmax), so no step
    projects onto the full vocabulary.
    """
    vocab = weight.shape[0]
    targets = labels.T.contiguous()  # [H, B]
    if vocab <= candidate_tokens:
        logits = feats @ weight.float().T
        if bias is not None:
            logits = logits + bias.float()
    else:
        ids, correction, n_pos = sample_candidates(labels, vocab, candidate_tokens, generator)
        logits = feats @ weight.index_select(0, ids).float().T + correction
        if bias is not None:
            logits = logits + bias.index_select(0, ids).float()
        targets = torch.searchsorted(ids[:n_pos], targets)
    losses = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none").view(targets.shape).mean(dim=1)
    hits = (logits.argmax(dim=-1) == targets).float().mean(dim=1)
    return losses, hits


@torch.no_grad()
def evaluate_heads(heads: MedusaHeads, hidden: torch.Tensor, labels: torch.Tensor, weight: torch.Tensor,
                   bias: torch.Tensor | None = None, rows_per_chunk: int = 64) -> tuple[list[float], list[float]]:
    """Top-1 and top-5 accuracy per head over the full vocabulary on held-out (hidden [P, h], labels [P, H])."""
    if hidden.shape[0] == 0:
        return [], []
    top1 = torch.zeros(heads.num_heads)
    top5 = torch.zeros(heads.num_heads)
    for i in range(0, hidden.shape[0], rows_per_chunk):
        feats = heads.features(hidden[i: i + rows_per_chunk].float())  # [H, b, h]
        logits = feats.to(weight.dtype) @ weight.T  # in the target's dtype: no float32 copy of the lm_head
        if bias is not None:
            logits = logits + bias
        best = logits.topk(min(5, logits.shape[-1]), dim=-1).indices  # [H, b, 5]
        y = labels[i: i + rows_per_chunk].T.to(best.device)  # [H, b]
        top1 += (best[..., 0] == y).float().sum(dim=1).cpu()
        top5 += (best == y[..., None]).any(dim=-1).float().sum(dim=1).cpu()
    n = hidden.shape[0]
    return (top1 / n).tolist(), (top5 / n).tolist()
