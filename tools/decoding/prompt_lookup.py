"""Prompt lookup decoding (Saxena 2023, github.com/apoorvumang/prompt-lookup-decoding): a model-free
drafter. The last n tokens (n from ``max_ngram_size`` down to ``min_ngram_size``) are searched for
earlier in the prompt and the output; the tokens that followed the match become the draft, and the
target verifies them in one forward pass like draft-model tokens. Cheap, and strong where the
output copies from the prompt (summarisation, RAG, code editing).

Match choice: the longest n-gram that occurs earlier wins; among its occurrences the most recent
one with a full ``num_candidate_tokens`` continuation is used, else the earliest (which has the
longest continuation). transformers' ``PromptLookupCandidateGenerator`` takes the earliest match
with ``max_matching_ngram_size=2`` by default and ``prompt_lookup_num_tokens`` chosen by the user
(10 in its docs). Here the defaults are 3 and 10: a 3-gram match is a stronger signal, which
matters on a CPU where a rejected 10-token draft still costs a wider forward pass (about 1.2x a
one-token pass for 11 tokens), while a match that holds gains up to 10 tokens.

Acceptance keeps the output exact:

- greedy: the longest draft prefix equal to the target's argmax, then the target's next token;
- sampling: the draft is a deterministic proposal (q = one-hot), so draft token x is kept with
  probability p(x); on the first rejection the token is drawn from the residual
  max(0, p - q) renormalised, which is p with x zeroed; after a fully kept draft a bonus token is
  drawn from p. Lossless in distribution.

The KV cache is cropped back to the kept tokens after every step.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
from pydantic import BaseModel, ConfigDict, Field

from tools.decoding import cache as kv
from tools.decoding.autoregressive import as_input_ids, next_token, prefill, sync
from tools.decoding.sampling import make_generator, sample, warp_probs
from tools.decoding.speculative import accept_greedy
from tools.decoding.types import DecodeResult, GenerationSettings
from tools.errors import ParameterError

MAX_CANDIDATE_TOKENS = 64


class PromptLookupParams(BaseModel):
    """Prompt lookup parameters: n-gram sizes to match and the draft length."""

    model_config = ConfigDict(extra="forbid")

    max_ngram_size: int = Field(3, description="longest suffix n-gram searched for earlier in the text")
    min_ngram_size: int = Field(1, description="shortest suffix n-gram tried before giving up on a draft")
    num_candidate_tokens: int = Field(10, description="tokens copied after the match as the draft")

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
        return self


def find_candidates(tokens: torch.Tensor, params: PromptLookupParams, limit: int | None = None) -> torch.Tensor:
    """Return the draft for the text ``tokens`` [L] (LongTensor, maybe empty): the tokens that
    followed an earlier occurrence of its last n tokens, at most ``limit`` (default
    ``num_candidate_tokens``)."""
    k = params.num_candidate_tokens if limit is None else min(limit, params.num_candidate_tokens)
    length = tokens.shape[0]
    if k <= 0:
        return tokens[:0]
    for n in range(min(params.max_ngram_size, length - 1), params.min_ngram_size - 1, -1):
        # occurrences that start before the suffix itself: windows of tokens[:-1]
        windows = tokens[:-1].unfold(0, n, 1)  # [L - n, n]
        hits = (windows == tokens[length - n:]).all(dim=1).nonzero().flatten()
        if hits.numel() == 0:
            continue
        starts = hits + n  # where each continuation starts (< L)
        full = starts[starts + k <= length]
        start = int(full[-1]) if full.numel() else int(starts[0])
        return tokens[start: min(start + k, length)]
    return tokens[:0]


def accept_sampling_onehot(p_at: Callable[[int], torch.Tensor], drafts: list[int], generator) -> tuple[int, int]:
    """Rejection sampling of deterministic drafts: return (drafts kept, next token).

    ``p_at(j)`` returns the target's probabilities [vocab] after the last kept token (j = 0) and
    after draft token j (called only up to the first rejection, so only those rows are warped).
    Draft token x is kept with probability p(x) (= min(1, p(x)/q(x)) for q one-hot); the
    replacement after a rejection comes from max(0, p - q) renormalised, i.e. p with x zeroed.
    """
    u = torch.rand(len(drafts), generator=generator, device=generator.device).tolist() if drafts else []
    for j, x in enumerate(drafts):
        p = p_at(j)
        if u[j] >= float(p[x]):
            dist = p.clone()
            dist[x] = 0.0
            return j, int(sample(dist, generator))
    return len(drafts), int(sample(p_at(len(drafts)), generator))


@torch.inference_mode()
def generate(model, prompt_ids, settings: GenerationSettings, params: PromptLookupParams | None = None) -> DecodeResult:
    """Prompt lookup decoding of ``prompt_ids``; returns a DecodeResult with method "ngram".

    Greedy output equals ``autoregressive.generate``; sampling is lossless in distribution.
    """
    params = (params or PromptLookupParams()).check()
    device = model.device
    eos = set(settings.eos_token_ids)
    input_ids = as_input_ids(prompt_ids, device)
    prompt_len = input_ids.shape[1]
    generator = make_generator(settings, device)
    cache = kv.new_cache(model)
    # the whole text (prompt + output) in one buffer, searched with tensor ops each step
    text = torch.empty(prompt_len + settings.max_new_tokens + params.num_candidate_tokens + 1,
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
    steps = drafted = accepted = draft_steps = 0
    accepted_per_step: list[int] = []
    drafted_by_position = [0] * params.num_candidate_tokens
    accepted_by_position = [0] * params.num_candidate_tokens
    while stopped == "length" and len(out) < settings.max_new_tokens:
        remaining = settings.max_new_tokens - len(out)
        draft = find_candidates(text[:length], params, limit=remaining - 1)
        m = draft.shape[0]
        ids = torch.cat([text[length - 1: length], draft])[None]
        positions = torch.arange(length - 1, length + m, device=device)[None]
        logits = kv.forward(model, ids, cache, position_ids=positions)
        drafts = ids[0, 1:].tolist()
        if settings.greedy:
            n, nxt = accept_greedy(logits, drafts)
        else:
            n, nxt = accept_sampling_onehot(lambda j, rows=logits: warp_probs(rows[j], settings), drafts, generator)
        new = drafts[:n] + [nxt]
        for i, t in enumerate(new):
            if t in eos:
                new, stopped = new[: i + 1], "eos"
                break
        kv.crop(cache, length + n)
        text[length: length + len(new)] = torch.tensor(new, dtype=torch.long, device=device)
        length += len(new)
        out.extend(new)
        steps += 1
        drafted += m
        accepted += len(new) - 1
        accepted_per_step.append(len(new) - 1)
        if m:
            draft_steps += 1
            for j in range(m):
                drafted_by_position[j] += 1
                accepted_by_position[j] += int(j < len(new) - 1)
    sync(device)
    t2 = time.perf_counter()
    used = max((j + 1 for j, d in enumerate(drafted_by_position) if d), default=0)
    return DecodeResult(
        method="ngram",
        output_ids=out,
        prefill_s=t1 - t0,
        decode_s=t2 - t1,
        steps=steps,
        target_forwards=steps + 1,
        tokens_drafted=drafted,
        tokens_accepted=accepted,
        accepted_per_step=accepted_per_step,
        drafted_by_position=drafted_by_position[:used],
        accepted_by_position=accepted_by_position[:used],
        stopped_by=stopped,
        extra={
            "max_ngram_size": params.max_ngram_size,
            "min_ngram_size": params.min_ngram_size,
            "num_candidate_tokens": params.num_candidate_tokens,
            "draft_steps": draft_steps,
            "tokens_per_decode_step": (len(out) - 1) / steps if steps else 0.0,
        },
    )
