"""Prompt lookup decoding (Saxena 2023, github.com/apoorvumang/prompt-lookup-decoding): a model-free
drafter. The last n tokens (n from ``max_ngram_size`` down to ``min_ngram_size``) are searched for
earlier in the prompt and the output; the tokens that followed a match become a draft, and the
target verifies the drafts in one forward pass like draft-model tokens. Cheap, and strong where the
output copies from the prompt (summarisation, RAG, code editing).

Match choice: the longest n-gram that occurs earlier wins. Its occurrences give up to
``num_candidates`` different drafts: the most recent occurrences with a full
``num_candidate_tokens`` continuation first, then the earliest of the rest (longest
continuations); a draft that repeats or is a prefix of one already taken is skipped. Several drafts
are merged into a token tree (shared prefixes verified once) and verified with a 4-D attention
mask in which every node sees the prefix and its ancestors; a single draft is a plain causal chain.

Why several drafts: the same n-gram often occurs more than once in a long prompt with different
continuations (RAG documents, repeated names), and on a CPU a forward over ~30 tokens costs about
1.2x a one-token forward, so trying 3 continuations at once is nearly free. transformers'
``PromptLookupCandidateGenerator`` takes one draft, the earliest match, with
``max_matching_ngram_size=2`` by default. Defaults here: 3-gram matches (a stronger signal),
10-token drafts, 3 drafts per step, at most 31 draft tokens per pass (the flat part of a CPU's
cost curve; later drafts are cut to fit). After a fully accepted draft the next draft is twice as
long, up to ``max_candidate_tokens`` (20): when the output is copying a passage, longer drafts pay.

Acceptance keeps the output exact:

- greedy: the deepest tree node whose every token equals the target's argmax after its parent is
  kept with its ancestors, then the target's next token (the tokens greedy decoding produces);
- sampling: each draft is a deterministic proposal (q = one-hot). At a node the children's
  (distinct) tokens x are tried in turn and x is kept with probability p(x); a rejected x is zeroed
  out of p and p renormalised before the next child (rejection sampling with the residual
  max(0, p - q), repeated); if every child is rejected the token is sampled from what is left of p,
  and after a kept leaf from p after it. Lossless in distribution.

The KV cache keeps only the accepted path after every step. Counters: ``tokens_drafted`` = tree
nodes verified, ``tokens_accepted`` = accepted nodes, so the acceptance rate is accepted draft
tokens / draft tokens verified.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
from pydantic import BaseModel, ConfigDict, Field

from tools.engine import kv
from tools.engine.autoregressive import as_input_ids, next_token, prefill, sync
from tools.engine.draft_tree import accept_greedy_tree, accept_sampling_tree, build_draft_tree
from tools.engine.sampling import greedy_tokens, make_generator, warp_probs
from tools.engine.types import DecodeResult, GenerationSettings, StepTally
from tools.errors import ParameterError

MAX_CANDIDATE_TOKENS = 64
MAX_CANDIDATES = 16


class PromptLookupParams(BaseModel):
    """Prompt lookup parameters: n-gram sizes to match, the draft length and the drafts per step."""

    model_config = ConfigDict(extra="forbid")

    max_ngram_size: int = Field(3, description="longest suffix n-gram searched for earlier in the text")
    min_ngram_size: int = Field(1, description="shortest suffix n-gram tried before giving up on a draft")
    num_candidate_tokens: int = Field(10, description="tokens copied after the match as a draft")
    num_candidates: int = Field(3, description="different drafts (from different matches) verified per step")
    max_candidate_tokens: int = Field(20, description="a fully accepted draft doubles the next one's length, "
                                                      "up to this (copying runs on)")
    max_draft_tokens: int = Field(31, description="draft tokens verified per step at most (later drafts are "
                                                  "cut to fit; ~32 tokens per pass is nearly free on a CPU)")

    def check(self) -> PromptLookupParams:
        """Return self, or raise ParameterError naming the parameter to change."""
        if self.min_ngram_size < 1:
            raise ParameterError(f"min_ngram_size must be at least 1, got {self.min_ngram_size}",
                                 hint="try min_ngram_size=1")
        if self.max_ngram_size < self.min_ngram_size:
            raise ParameterError(
                f"max_ngram_size ({self.max_ngram_size}) is below min_ngram_size ({self.min_ngram_size})",
                hint="raise max_ngram_size or lower min_ngram_size (defaults 3 and 1)")
        if not 1 <= self.num_candidate_tokens <= MAX_CANDIDATE_TOKENS:
            raise ParameterError(
                f"num_candidate_tokens must be from 1 to {MAX_CANDIDATE_TOKENS}, got {self.num_candidate_tokens}",
                hint="try num_candidate_tokens=10")
        if not self.num_candidate_tokens <= self.max_candidate_tokens <= MAX_CANDIDATE_TOKENS:
            raise ParameterError(
                f"max_candidate_tokens must be from num_candidate_tokens ({self.num_candidate_tokens}) to "
                f"{MAX_CANDIDATE_TOKENS}, got {self.max_candidate_tokens}",
                hint="set it equal to num_candidate_tokens for a fixed draft length")
        if self.max_draft_tokens < 1:
            raise ParameterError(f"max_draft_tokens must be at least 1, got {self.max_draft_tokens}",
                                 hint="try max_draft_tokens=31")
        if not 1 <= self.num_candidates <= MAX_CANDIDATES:
            raise ParameterError(
                f"num_candidates must be from 1 to {MAX_CANDIDATES}, got {self.num_candidates}",
                hint="try num_candidates=3 (1 verifies a single draft, as transformers does)")
        return self


def find_candidate_set(tokens: torch.Tensor, params: PromptLookupParams, limit: int | None = None,
                       length: int | None = None) -> list[list[int]]:
    """Return up to ``num_candidates`` drafts for the text ``tokens`` [L] (LongTensor): what followed
    earlier occurrences of its longest repeated suffix n-gram, each at most ``length`` (default
    ``num_candidate_tokens``) and ``limit`` tokens, best first. Empty when nothing repeats."""
    k = params.num_candidate_tokens if length is None else length
    k = k if limit is None else min(limit, k)
    size = tokens.shape[0]  # tokens in the text
    if k <= 0:
        return []
    for n in range(min(params.max_ngram_size, size - 1), params.min_ngram_size - 1, -1):
        # occurrences that start before the suffix itself: windows of tokens[:-1]
        windows = tokens[:-1].unfold(0, n, 1)  # [size - n, n]
        hits = (windows == tokens[size - n:]).all(dim=1).nonzero().flatten()
        if hits.numel() == 0:
            continue
        starts = (hits + n).tolist()  # where each continuation starts (< size)
        full = [s for s in reversed(starts) if s + k <= size]  # most recent first
        order = full + [s for s in starts if s + k > size]  # then the earliest partial ones
        drafts: list[list[int]] = []
        for start in order[: 8 * params.num_candidates]:
            draft = tokens[start: min(start + k, size)].tolist()
            if any(d[: len(draft)] == draft for d in drafts):
                continue  # a repeat, or a prefix of a draft already taken
            drafts.append(draft)
            if len(drafts) == params.num_candidates:
                break
        return drafts
    return []


def fit_budget(drafts: list[list[int]], budget: int) -> list[list[int]]:
    """Cut drafts (best first) so their tokens add up to at most ``budget``; drop the ones left empty."""
    out = []
    for draft in drafts:
        draft = draft[:budget]
        if not draft:
            break
        out.append(draft)
        budget -= len(draft)
    return out


def find_candidates(tokens: torch.Tensor, params: PromptLookupParams, limit: int | None = None) -> torch.Tensor:
    """The best single draft for ``tokens`` [L] (LongTensor, maybe empty); see find_candidate_set."""
    drafts = find_candidate_set(tokens, params.model_copy(update={"num_candidates": 1}), limit)
    return torch.tensor(drafts[0], dtype=torch.long, device=tokens.device) if drafts else tokens[:0]


def accept_sampling_onehot(p_at: Callable[[int], torch.Tensor], drafts: list[int], generator) -> tuple[int, int]:
    """Rejection sampling of one deterministic draft: return (drafts kept, next token).

    ``p_at(j)`` returns the target's probabilities [vocab] after the last kept token (j = 0) and
    after draft token j. The single-draft case of ``accept_sampling_tree``.
    """
    tree = build_draft_tree(-1, [drafts])
    node, nxt = accept_sampling_tree(tree, p_at, generator)
    return tree.depths[node], nxt


@torch.inference_mode()
def generate(model, prompt_ids, settings: GenerationSettings, params: PromptLookupParams | None = None) -> DecodeResult:
    """Prompt lookup decoding of ``prompt_ids``; returns a DecodeResult with method "ngram".

    Greedy output equals ``autoregressive.generate``; sampling is lossless in distribution.
    """
    params = (params or PromptLookupParams()).check()
    device = model.device
    dtype = next(model.parameters()).dtype
    eos = set(settings.eos_token_ids)
    input_ids = as_input_ids(prompt_ids, device)
    prompt_len = input_ids.shape[1]
    generator = make_generator(settings, device)
    cache = kv.new_cache(model)
    # the whole text (prompt + output) in one buffer, searched with tensor ops each step
    text = torch.empty(prompt_len + settings.max_new_tokens + params.max_candidate_tokens + 1,
                       dtype=torch.long, device=device)
    text[:prompt_len] = input_ids[0]

    t0 = time.perf_counter()
    first = next_token(prefill(model, input_ids, cache), settings, generator)
    sync(device)
    t1 = time.perf_counter()

    out = [first]
    text[prompt_len] = first
    length = prompt_len + 1  # tokens in ``text``; the cache holds all but the last
    stopped = "eos" if first in eos else "length"
    tally, draft_steps, multi_steps = StepTally(), 0, 0
    k = params.num_candidate_tokens  # this step's draft length: doubles after a fully accepted draft
    while stopped == "length" and len(out) < settings.max_new_tokens:
        remaining = settings.max_new_tokens - len(out)
        drafts = fit_budget(find_candidate_set(text[:length], params, limit=remaining - 1, length=k),
                            params.max_draft_tokens)
        tree = build_draft_tree(out[-1], drafts)
        prefix = length - 1
        ids = torch.tensor([tree.tokens], dtype=torch.long, device=device)
        positions = (torch.tensor(tree.depths, device=device) + prefix)[None]
        mask = None if tree.is_chain else kv.tree_mask(prefix, tree.visible().to(device), dtype)
        logits = kv.forward(model, ids, cache, position_ids=positions, attention_mask=mask)
        if settings.greedy:
            node, nxt = accept_greedy_tree(tree, greedy_tokens(logits).tolist())
        else:
            node, nxt = accept_sampling_tree(tree, lambda i, rows=logits: warp_probs(rows[i], settings), generator)
        path = tree.path_to(node)
        n = len(path) - 1
        k = (min(2 * k, params.max_candidate_tokens) if drafts and n >= k
             else params.num_candidate_tokens)
        new = [tree.tokens[i] for i in path[1:]] + [nxt]
        for i, t in enumerate(new):
            if t in eos:
                new, stopped = new[: i + 1], "eos"
                break
        if tree.is_chain:
            kv.crop(cache, length + n)
        else:
            kv.keep_positions(cache, prefix, torch.tensor(path, device=device))
        text[length: length + len(new)] = torch.tensor(new, dtype=torch.long, device=device)
        length += len(new)
        out.extend(new)
        tally.record(len(new) - 1, tree.depths[1:])
        draft_steps += bool(drafts)
        multi_steps += len(drafts) > 1
    sync(device)
    t2 = time.perf_counter()
    return tally.result("ngram", out, (t0, t1, t2), stopped, extra={
        "max_ngram_size": params.max_ngram_size,
        "min_ngram_size": params.min_ngram_size,
        "num_candidate_tokens": params.num_candidate_tokens,
        "num_candidates": params.num_candidates,
        "max_candidate_tokens": params.max_candidate_tokens,
        "max_draft_tokens": params.max_draft_tokens,
        "draft_steps": draft_steps,
        "multi_draft_steps": multi_steps,
        "tokens_per_decode_step": (len(out) - 1) / tally.steps if tally.steps else 0.0,
    })
