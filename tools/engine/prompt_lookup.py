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

from collections.abc import Callable

import torch

from tools.engine.backend import Backend, as_backend
from tools.engine.loop import DecodeStep, decode, next_token, prefill
from tools.engine.draft_tree import accept_greedy_tree, accept_sampling_tree, build_draft_tree
from tools.engine.gate import best_length, pass_cost
from tools.engine.sampling import greedy_tokens, make_generator, warp_probs
from tools.engine.types import DecodeResult, GenerationSettings, StepTally
from tools.engine.params import (MAX_CANDIDATE_TOKENS, MAX_CANDIDATES, PRIOR_WEIGHT,  # noqa: F401  (re-exported)
                                 PromptLookupParams)

LONG_MATCH = 8  # a match is measured up to this many tokens (the last acceptance prior covers this and longer)





def find_candidate_set(tokens: torch.Tensor, params: PromptLookupParams, limit: int | None = None,
                       length: int | None = None) -> list[list[int]]:
    """Return up to ``num_candidates`` drafts for the text ``tokens`` [L] (LongTensor): what followed
    earlier occurrences of its longest repeated suffix n-gram, each at most ``length`` (default
    ``num_candidate_tokens``) and ``limit`` tokens, best first. Empty when nothing repeats."""
    return _search(tokens, params, limit, length)[2]


def match_candidates(tokens: torch.Tensor, params: PromptLookupParams, limit: int | None = None,
                     length: int | None = None) -> tuple[int, list[list[int]]]:
    """(how many tokens the best draft's occurrence matches, its drafts) as ``find_candidate_set`` finds
    them; (0, []) when nothing repeats. The match is the n-gram searched for, extended backwards up to
    ``LONG_MATCH`` tokens: a long one means the output is copying a passage."""
    n, start, drafts = _search(tokens, params, limit, length)
    return (matched_length(tokens, start, n) if drafts else 0), drafts


def _search(tokens: torch.Tensor, params: PromptLookupParams, limit: int | None,
            length: int | None) -> tuple[int, int, list[list[int]]]:
    """(n-gram size matched, where the best draft starts, the drafts); (0, 0, []) when nothing repeats."""
    k = params.num_candidate_tokens if length is None else length
    k = k if limit is None else min(limit, k)
    size = tokens.shape[0]  # tokens in the text
    if k <= 0:
        return 0, 0, []
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
        return n, order[0], drafts
    return 0, 0, []


def matched_length(tokens: torch.Tensor, start: int, n: int, cap: int = LONG_MATCH) -> int:
    """How many tokens before ``start`` equal the text's last ones (at least the ``n`` matched), up to ``cap``."""
    span = min(cap, start)
    if span <= n:
        return n
    earlier, last = tokens[start - span: start].flip(0), tokens[tokens.shape[0] - span:].flip(0)
    differ = (earlier != last).nonzero()
    return span if differ.numel() == 0 else max(n, int(differ[0, 0]))


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


class DraftGate:
    """The cost-aware drafting policy (with ``pass_costs``): how many draft tokens a step verifies.

    A draft whose occurrence matches the last n tokens (n up to ``LONG_MATCH``: a long match means the
    output copies a passage) is accepted token by token with probability a_n (geometric
    model), so L draft tokens yield 1 + a + ... + a^L tokens for one pass over L + 1 tokens, which
    costs ``pass_costs[L]`` one-token passes. The gate keeps the L (0 = no draft, a plain step) with
    the most tokens per unit of cost. a_n starts at the fitted ``acceptance_prior`` and moves to what
    this run's own drafts of n-token matches got (accepted tokens / (accepted + rejections), the prior
    weighing ``PRIOR_WEIGHT`` tokens)."""

    def __init__(self, params: PromptLookupParams):
        self.costs, self.prior = list(params.pass_costs or [1.0]), list(params.acceptance_prior)
        self.accepted: dict[int, float] = {}
        self.rejected: dict[int, float] = {}
        self.declined = 0

    def acceptance(self, n: int) -> float:
        prior = self.prior[min(n, len(self.prior)) - 1]
        acc = self.accepted.get(n, 0.0) + PRIOR_WEIGHT * prior
        return acc / (acc + self.rejected.get(n, 0.0) + PRIOR_WEIGHT * (1.0 - prior))

    def cost(self, tokens: int) -> float:
        """A pass over ``tokens`` relative to one token (past the curve: its last slope carried on)."""
        return pass_cost(self.costs, tokens)

    def length(self, n: int, longest: int) -> int:
        """Draft tokens worth verifying (0..``longest``) after an n-token match."""
        best, _ = best_length(self.acceptance(n), longest, lambda length: self.cost(length + 1))
        self.declined += best == 0 and longest > 0
        return best

    def update(self, n: int, drafted: int, kept: int) -> None:
        if n and drafted:
            self.accepted[n] = self.accepted.get(n, 0.0) + kept
            self.rejected[n] = self.rejected.get(n, 0.0) + (kept < drafted)


class PromptLookupStep(DecodeStep):
    """Prompt lookup's state: the whole text (prompt + output) in one device buffer, searched with
    tensor ops each step, and the current draft length (doubles after a fully accepted draft)."""

    def __init__(self, backend: Backend, settings: GenerationSettings, params: PromptLookupParams):
        self.backend, self.settings, self.params = backend, settings, params
        self.generator = make_generator(settings, backend.device)
        self.k = params.num_candidate_tokens
        self.draft_steps = self.multi_steps = 0
        self.cache, self.text, self.length = None, None, 0
        self.gate = DraftGate(params) if params.pass_costs else None

    def prefill(self, input_ids: torch.Tensor) -> int:
        prompt_len = input_ids.shape[1]
        self.cache = self.backend.new_cache()
        self.text = torch.empty(prompt_len + self.settings.max_new_tokens + self.params.max_candidate_tokens + 1,
                                dtype=torch.long, device=self.backend.device)
        self.text[:prompt_len] = input_ids[0]
        first = next_token(prefill(self.backend, input_ids, self.cache), self.settings, self.generator)
        self.text[prompt_len] = first
        self.length = prompt_len + 1  # tokens in ``text``; the cache holds all but the last
        return first

    def step(self, out: list[int], remaining: int) -> tuple[list[int], int, list[int]]:
        params, backend, length = self.params, self.backend, self.length
        text, budget, n_match = self.text[:length], params.max_draft_tokens, 0
        if self.gate is None:  # no policy: the match's length is not needed (no extra work per step)
            drafts = find_candidate_set(text, params, limit=remaining - 1, length=self.k)
        else:
            n_match, drafts = match_candidates(text, params, limit=remaining - 1, length=self.k)
            if drafts:
                budget = self.gate.length(n_match, min(budget, max(len(d) for d in drafts)))
        drafts = fit_budget(drafts, budget)
        tree = build_draft_tree(out[-1], drafts)
        prefix = length - 1
        ids = torch.tensor([tree.tokens], dtype=torch.long, device=backend.device)
        positions = (torch.tensor(tree.depths, device=backend.device) + prefix)[None]
        visible = None if tree.is_chain else tree.visible().to(backend.device)
        logits = backend.forward(ids, self.cache, positions, visible)
        if self.settings.greedy:
            node, nxt = accept_greedy_tree(tree, greedy_tokens(logits).tolist())
        else:
            node, nxt = accept_sampling_tree(tree, lambda i: warp_probs(logits[i], self.settings), self.generator)
        path = tree.path_to(node)
        n = len(path) - 1
        if self.gate is not None and drafts:  # the first (best) draft's outcome: its tokens kept in a row
            kept = [tree.tokens[i] for i in path[1:]]
            self.gate.update(n_match, len(drafts[0]), next((i for i, (x, y) in enumerate(zip(kept, drafts[0]))
                                                             if x != y), min(len(kept), len(drafts[0]))))
        self.k = (min(2 * self.k, params.max_candidate_tokens) if drafts and n >= self.k
                  else params.num_candidate_tokens)
        if tree.is_chain:
            backend.crop(self.cache, length + n)
        else:
            backend.keep_positions(self.cache, prefix, torch.tensor(path, device=backend.device))
        new = [tree.tokens[i] for i in path[1:]] + [nxt]
        self.text[length: length + len(new)] = torch.tensor(new, dtype=torch.long, device=backend.device)
        self.length += len(new)
        self.draft_steps += bool(drafts)
        self.multi_steps += len(drafts) > 1
        return new, n, tree.depths[1:]

    def extra(self, out: list[int], tally: StepTally, stopped: str) -> dict:
        p = self.params
        return {
            "max_ngram_size": p.max_ngram_size,
            "min_ngram_size": p.min_ngram_size,
            "num_candidate_tokens": p.num_candidate_tokens,
            "num_candidates": p.num_candidates,
            "max_candidate_tokens": p.max_candidate_tokens,
            "max_draft_tokens": p.max_draft_tokens,
            "pass_costs": p.pass_costs,
            "declined_drafts": self.gate.declined if self.gate is not None else 0,
            "draft_steps": self.draft_steps,
            "multi_draft_steps": self.multi_steps,
            "tokens_per_decode_step": (len(out) - 1) / tally.steps if tally.steps else 0.0,
        }


def generate(model, prompt_ids, settings: GenerationSettings, params: PromptLookupParams | None = None) -> DecodeResult:
    """Prompt lookup decoding of ``prompt_ids``; returns a DecodeResult with method "ngram".

    ``model`` is a transformers causal LM, a LoadedModel or a Backend. Greedy output equals
    ``autoregressive.generate``; sampling is lossless in distribution.
    """
    params = (params or PromptLookupParams()).check()
    backend = as_backend(model)
    return decode(backend, prompt_ids, settings, PromptLookupStep(backend, settings, params), "ngram")
