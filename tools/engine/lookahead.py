"""Lookahead decoding (Fu et al., "Break the Sequential Dependency of LLM Inference Using Lookahead
Decoding", ICML 2024, arXiv 2402.02057): no draft model, no training.

Each step is ONE forward pass of the target over three parts, laid out in this order:

- the current token ``c`` (the last accepted token, not yet in the KV cache) at position p;
- the lookahead branch: a 2-D window of N-1 levels x W columns. Level l, column i sits at position
  p + 1 + l + i and sees the prefix, ``c``, level 0's columns 0..i and its own column in levels
  1..l, so every column is a contiguous diagonal sequence (the paper's 2-D window). The argmax
  outputs of the newest level form the next level (Jacobi iteration); each column then yields one
  n-gram (level 0..N-2 tokens and the new output) for the pool;
- the verification branch: up to G n-grams from the pool whose first token equals ``c`` and, with
  ``prompt_lookup`` > 0, that many prompt-lookup drafts (what followed earlier occurrences of the
  text's last 3 tokens, up to 10 tokens; tools.engine.prompt_lookup). The drafts are merged into
  a token tree (shared prefixes verified once); each node sits at position p + its depth and sees
  the prefix, ``c`` and its ancestors only.

The pool keys n-grams by their first token and keeps at most G per key, replacing the least
recently used. The first N-2 steps fill the window level by level (warm-up) and verify only
prompt-lookup drafts. With ``pool_from_prompt`` the pool also starts with the prompt's n-grams and
takes in the generated output's n-grams (lade's POOL_FROM_PROMPT).

Why prompt-lookup drafts in the verification branch: the Jacobi pool guesses well on repetitive
output, prompt lookup on output that copies its input (summaries, RAG answers); both are
deterministic guesses verified by the same pass, so a step is worth the better of the two at the
cost of a few more tokens in the pass (nearly free on hardware whose cost curve is flat there).
``prompt_lookup=0`` is lookahead decoding as published. With a priced pass (``pass_costs``, set by the
sizing) those tokens are not free: the draft is then one branch (tools.engine.lookup_branch) cut each
step to the length whose expected tokens (this run's acceptance of such drafts by match length, from
prompt lookup's prior fitted on the fit half) pay for the longer pass, and a step the cost gate declines
verifies that branch alone (where it pays against a plain step) instead of being plain.

Acceptance keeps the output exact (tools.engine.draft_tree):

- greedy: the deepest tree node whose every token equals the target's argmax after its parent is
  kept with its ancestors, then the target's next token (the tokens greedy decoding produces);
- sampling: at each node the children's distinct tokens x are tried in turn, x kept with
  probability p(x); on rejection p(x) is zeroed and p renormalised before the next child; when
  every child is rejected the token is sampled from what is left of p. Each draft is a
  deterministic proposal (q = one-hot), so this is rejection sampling with the residual
  max(0, p - q) renormalised, repeated: lossless in distribution.

After each step the KV cache keeps only ``c`` and the accepted draft tokens.

Counters: ``tokens_drafted`` = draft-tree nodes verified, ``tokens_accepted`` = accepted draft
tokens, so the acceptance rate is accepted guessed tokens / guessed tokens verified. Mean tokens
per step (the compression ratio) is new tokens / target forward passes
(``DecodeResult.mean_accepted_per_step``); ``extra["tokens_per_decode_step"]`` leaves the prefill
out.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from dataclasses import dataclass

import torch

from tools.engine.backend import Backend, as_backend
from tools.engine.loop import DecodeStep, decode, next_token, prefill
from tools.engine.draft_tree import DraftTree, accept_greedy_tree, accept_sampling_tree, add_draft, build_draft_tree
from tools.engine.gate import StepGate
from tools.engine.lookup_branch import LookupBranch, shared_prefix
from tools.engine.prompt_lookup import find_candidate_set
from tools.engine.sampling import greedy_tokens, make_generator, warp_probs
from tools.engine.types import DecodeResult, GenerationSettings, StepTally
from tools.engine.params import MAX_STEP_TOKENS, LookaheadParams  # noqa: F401  (re-exported: part of this module's API)


# ---------------------------------------------------------------------------------------- n-gram pool
class NgramPool:
    """N-grams keyed by their first token: at most ``per_key`` continuations (N-1 tokens each) per
    key, the least recently used replaced when a key is full."""

    def __init__(self, n: int, per_key: int):
        self.n = n
        self.per_key = per_key
        self._grams: dict[int, OrderedDict[tuple[int, ...], None]] = {}

    def __len__(self) -> int:
        return sum(len(v) for v in self._grams.values())

    def add(self, key: int, continuation: tuple[int, ...]) -> None:
        """Insert (or refresh) one n-gram ``key, *continuation``."""
        if self.per_key <= 0:
            return
        slot = self._grams.get(key)
        if slot is None:
            slot = self._grams[key] = OrderedDict()
        if continuation in slot:
            slot.move_to_end(continuation)
            return
        slot[continuation] = None
        if len(slot) > self.per_key:
            slot.popitem(last=False)

    def add_rows(self, rows: list[list[int]]) -> None:
        """Insert n-grams given as rows ``[key, t1, ..., t_{N-1}]``."""
        for row in rows:
            self.add(row[0], tuple(row[1:]))

    def add_sequence(self, tokens: list[int], start: int = 0) -> None:
        """Insert every n-gram of ``tokens`` whose last token has index >= ``start``."""
        n = self.n
        for end in range(max(start, n - 1), len(tokens)):
            self.add(tokens[end - n + 1], tuple(tokens[end - n + 2: end + 1]))

    def touch(self, key: int, continuation: tuple[int, ...]) -> None:
        """Mark an n-gram as just used."""
        slot = self._grams.get(key)
        if slot is not None and continuation in slot:
            slot.move_to_end(continuation)

    def candidates(self, key: int) -> list[tuple[int, ...]]:
        """Continuations stored for ``key``, most recently used first."""
        slot = self._grams.get(key)
        return list(reversed(slot)) if slot else []


# ---------------------------------------------------------------------------------------- layout
@dataclass(frozen=True)
class StepLayout:
    """The lookahead branch's fixed layout: [c, level 0 .. level N-2 (W tokens each)].

    ``visible`` [size, size] says which step token sees which; ``offsets`` [size] are positions
    relative to ``c``. Fewer levels (warm-up) use a leading slice of both.
    """

    window: int
    ngram: int
    visible: torch.Tensor
    offsets: torch.Tensor

    @property
    def size(self) -> int:
        return self.visible.shape[0]

    def level_start(self, level: int) -> int:
        return 1 + level * self.window


def build_layout(window: int, ngram: int) -> StepLayout:
    """Build the attention pattern and position offsets of the lookahead branch (pure, on the CPU)."""
    W, levels = window, ngram - 1
    size = 1 + levels * W
    visible = torch.zeros(size, size, dtype=torch.bool)
    offsets = torch.zeros(size, dtype=torch.long)
    visible[:, 0] = True  # everything sees the current token
    col = torch.arange(W)
    causal_w = torch.tril(torch.ones(W, W, dtype=torch.bool))
    for level in range(levels):
        rows = 1 + level * W + col
        offsets[rows] = 1 + level + col
        visible[rows[:, None], (1 + col)[None, :]] = causal_w  # level 0 up to its own column
        for lower in range(1, level + 1):  # its own column in levels 1..level
            visible[rows, 1 + lower * W + col] = True
    return StepLayout(window, ngram, visible, offsets)


def step_pattern(layout: StepLayout, n_look: int, tree: DraftTree) -> tuple[torch.Tensor, torch.Tensor]:
    """(visible [n, n], offsets [n]) of a step: the first ``n_look`` tokens of the lookahead branch,
    then the draft tree's nodes (node 0 is ``c`` itself), each seeing ``c`` and its ancestors only."""
    n = n_look + tree.size - 1
    visible = torch.zeros(n, n, dtype=torch.bool)
    visible[:n_look, :n_look] = layout.visible[:n_look, :n_look]
    offsets = torch.empty(n, dtype=torch.long)
    offsets[:n_look] = layout.offsets[:n_look]
    if tree.size > 1:
        visible[n_look:, 0] = True
        visible[n_look:, n_look:] = tree.visible()[1:, 1:]
        offsets[n_look:] = torch.tensor(tree.depths[1:])
    return visible, offsets


# ---------------------------------------------------------------------------------------- decoder
class LookaheadStep(DecodeStep):
    """The window, pool and layout of one generate call; ``step`` runs one forward pass."""

    def __init__(self, backend: Backend, params: LookaheadParams, settings: GenerationSettings):
        self.backend = backend
        self.params = params
        self.settings = settings
        self.W, self.N, self.G = params.window, params.ngram, params.guess
        self.device = backend.device
        self.layout = build_layout(self.W, self.N)
        self.rng = random.Random(settings.seed)
        self.pool = NgramPool(self.N, self.G)
        self.lookup = params.lookup_params()
        self.generator = make_generator(settings, self.device)
        self.verify_steps = 0
        self.prompt: list[int] = []
        self.seq: list[int] = []  # prompt + output: the cache holds all but the last token
        self.pooled = 0  # tokens of ``seq`` whose n-grams are in the pool (pool_from_prompt)
        self.cache = self.text = self.window = None
        self.filled = 1  # levels holding real Jacobi tokens
        # with a priced pass the prompt-lookup draft is one branch cut to what pays (tools.engine.lookup_branch), also
        # on the steps the gate declines: the gate prices the window and the pool's n-grams alone
        self.branch = (LookupBranch(self.lookup.num_candidate_tokens, params.pass_costs)
                       if self.lookup is not None and params.pass_costs else None)
        drafts = self.lookup is not None and self.branch is None
        longest = max(self.N - 1, self.lookup.num_candidate_tokens if drafts else 0)
        window_tokens = params.tokens_per_step - (params.lookup_tokens if self.branch is not None else 0)
        self.gate = (StepGate(params.pass_costs, 1 + longest, window_tokens, prior_tokens=params.step_prior)
                     if params.pass_costs else None)
        self.expected = params.step_prior or 1.0  # tokens the window and pool are expected to give a full step

    def prefill(self, input_ids: torch.Tensor) -> int:
        self.prompt = input_ids[0].tolist()
        # level 0 starts as tokens copied from the prompt (as the reference implementation does)
        self.window = torch.tensor([[self.rng.choice(self.prompt) for _ in range(self.W)]] * (self.N - 1),
                                   dtype=torch.long, device=self.device)
        self.cache = self.backend.new_cache()
        first = next_token(prefill(self.backend, input_ids, self.cache), self.settings, self.generator)
        self.seq = self.prompt + [first]
        if self.params.pool_from_prompt:
            self.pool.add_sequence(self.seq)
            self.pooled = len(self.seq)
        # the whole text in one buffer for the prompt-lookup matcher
        if self.lookup is not None and self.branch is None:  # uncut drafts; a branch keeps its own searched text
            self.text = torch.empty(len(self.seq) + self.settings.max_new_tokens + 1, dtype=torch.long,
                                    device=self.device)
            self.text[: len(self.seq)] = torch.tensor(self.seq, dtype=torch.long, device=self.device)
        return first

    def _filler(self, count: int) -> torch.Tensor:
        return torch.tensor([self.rng.choice(self.prompt) for _ in range(count)], dtype=torch.long, device=self.device)

    def _drafts(self, current: int, remaining: int, text: torch.Tensor | None) -> list[list[int]]:
        """Prompt-lookup drafts (uncut: without a branch), then the pool's n-grams for ``current`` once the window is
        full."""
        drafts: list[list[int]] = []
        if text is not None:
            drafts += find_candidate_set(text, self.lookup, limit=remaining - 1)
        if self.filled == self.N - 1:
            drafts += [list(c[: remaining - 1]) for c in self.pool.candidates(current)]
        return drafts

    def step(self, out: list[int], remaining: int) -> tuple[list[int], int, list[int]]:
        """One forward pass; return (new tokens, accepted draft tokens, depths of the verified nodes)."""
        if self.params.pool_from_prompt and self.pooled < len(self.seq):  # the last step's n-grams
            self.pool.add_sequence(self.seq, start=self.pooled)
            self.pooled = len(self.seq)
        length = len(self.seq) - 1  # the cache length: the position of ``current``
        full = self.gate is None or self.filled < self.N - 1 or remaining <= 1 or self.gate.take_full()
        new, m, depths = self._forward_and_accept(self.seq[-1], length, remaining, full)
        self.verify_steps += bool(depths)
        if self.text is not None:
            self.text[length + 1: length + 1 + len(new)] = torch.tensor(new, dtype=torch.long, device=self.device)
        self.seq.extend(new)
        return new, m, depths

    def _plain(self, current: int, length: int) -> list[int]:
        """A step the cost gate declined: ``current`` alone, as plain decoding takes it (the window waits)."""
        ids = torch.tensor([[current]], dtype=torch.long, device=self.device)
        logits = self.backend.forward(ids, self.cache, torch.tensor([[length]], device=self.device))
        return [next_token(logits[-1], self.settings, self.generator)]

    def _graft(self, tree: DraftTree, pass_tokens: int, room: int, full: bool) -> tuple[int, list[int], int] | None:
        """Merge the lookup branch into ``tree``, cut to what pays against a pass over ``pass_tokens`` (a declined step:
        against a plain step); return (the match length, the tokens merged, how many the tree held), None without one."""
        n, draft = self.branch.draft(self.seq, room)
        if not draft:
            return None
        shared = shared_prefix(tree.children.__getitem__, tree.tokens.__getitem__, draft)
        draft = draft[: self.branch.length(draft, n, shared, self.expected if full else 1.0, pass_tokens, 0.0)]
        if not draft:
            return None
        add_draft(tree, draft)
        return n, draft, shared

    def _forward_and_accept(self, current: int, length: int, remaining: int, full: bool = True
                            ) -> tuple[list[int], int, list[int]]:
        """Verify the drafts and advance the window in one pass; afterwards the cache holds ``current``
        and the accepted tokens. A declined step (``full`` False) verifies the lookup branch alone, or is plain."""
        W, device = self.W, self.device
        use_window = full and remaining > 1  # the last token needs no lookahead and no drafts
        text = self.text[: length + 1] if self.text is not None else None
        tree = build_draft_tree(current, self._drafts(current, remaining, text) if use_window else [])
        n_look = 1 + self.filled * W if use_window else 1
        timing = self.gate is not None and self.gate.timing  # the plain step the gate times: nothing else in it
        branch = (self._graft(tree, n_look + tree.size - 1, remaining - 1, use_window)
                  if self.branch is not None and remaining > 1 and not timing else None)
        if not use_window and branch is None:
            return self._plain(current, length), 0, []
        n = n_look + tree.size - 1
        ids = torch.empty(1, n, dtype=torch.long, device=device)
        ids[0, 0] = current
        if use_window:
            ids[0, 1:n_look] = self.window[: self.filled].reshape(-1)
        if tree.size > 1:
            ids[0, n_look:] = torch.tensor(tree.tokens[1:], dtype=torch.long, device=device)
        visible, offsets = step_pattern(self.layout, n_look, tree)
        positions = (offsets.to(device) + length)[None]
        newest = list(range(1 + (self.filled - 1) * W, 1 + self.filled * W)) if use_window else []
        rows = torch.tensor([0, *newest, *range(n_look, n)], dtype=torch.long, device=device)
        logits = self.backend.forward(ids, self.cache, positions, visible.to(device), rows)  # [rows, vocab]
        choice = greedy_tokens(logits)
        node_row = [0, *range(1 + len(newest), logits.shape[0])]  # logits row of each tree node
        if self.settings.greedy:
            choices = choice.tolist()
            node, nxt = accept_greedy_tree(tree, [choices[r] for r in node_row])
        else:
            node, nxt = accept_sampling_tree(
                tree, lambda i: warp_probs(logits[node_row[i]], self.settings), self.generator)
        path = tree.path_to(node)
        accepted = [tree.tokens[i] for i in path[1:]]
        if accepted:
            keep = torch.tensor([0, *(n_look + i - 1 for i in path[1:])], dtype=torch.long, device=device)
            self.backend.keep_positions(self.cache, length, keep)
            self._touch(current, tuple(accepted))
        else:
            self.backend.crop(self.cache, length + 1)
        if use_window:
            self._advance_window(choice[1: 1 + W])
        self._record(branch, accepted, n, use_window)
        return [*accepted, nxt], len(accepted), tree.depths[1:]

    def _record(self, branch: tuple[int, list[int], int] | None, accepted: list[int], pass_tokens: int,
                full: bool) -> None:
        """What a verified step tells the branch's record and the gate's."""
        if branch is not None:
            self.branch.record(*branch, accepted)
        if self.gate is not None and full:
            self.gate.record(len(accepted) + 1, pass_tokens)
        elif self.gate is not None and branch is not None:
            self.gate.untimed()  # a declined step that verified the branch: neither a plain step nor a full one

    def _touch(self, current: int, accepted: tuple[int, ...]) -> None:
        """Mark the pool n-gram that the accepted tokens came from as just used."""
        m = len(accepted)
        for cand in self.pool.candidates(current):
            if cand[:m] == accepted:
                self.pool.touch(current, cand)
                break

    def _advance_window(self, newest: torch.Tensor) -> None:
        """Jacobi update with the newest level's outputs [W]: harvest n-grams, shift the levels."""
        if self.filled < self.N - 1:
            # warm-up: exactly one token was accepted, so every level moves one column left
            k = self.filled
            self.window[:k, :-1] = self.window[:k, 1:].clone()
            self.window[:k, -1] = self._filler(k)
            self.window[k, :-1] = newest[1:]
            self.window[k, -1] = self._filler(1)[0]
            self.filled += 1
            return
        if self.G > 0:
            grams = torch.cat([self.window, newest[None]], dim=0)  # [N, W]: one n-gram per column
            self.pool.add_rows(grams.T.tolist())
        self.window = torch.cat([self.window[1:], newest[None]], dim=0)

    def extra(self, out: list[int], tally: StepTally, stopped: str) -> dict:
        if self.params.pool_from_prompt and stopped == "length":  # the last step's tokens, as cut
            self.pool.add_sequence(self.prompt + out, start=self.pooled)
        p, steps = self.params, tally.steps
        return {
            "window": p.window,
            "ngram": p.ngram,
            "guess": p.guess,
            "pool_from_prompt": p.pool_from_prompt,
            "prompt_lookup": p.prompt_lookup,
            "tokens_per_step": p.tokens_per_step,
            "warmup_steps": min(steps, p.ngram - 2),
            "verify_steps": self.verify_steps,
            "pool_ngrams": len(self.pool),
            "tokens_per_decode_step": (len(out) - 1) / steps if steps else 0.0,
            "pass_costs": p.pass_costs,
            "declined_steps": self.gate.declined if self.gate is not None else 0,
            "lookup_steps": self.branch.steps if self.branch is not None else 0,
            "looked_up": self.branch.looked_up if self.branch is not None else 0,
        }


def generate(model, prompt_ids, settings: GenerationSettings, params: LookaheadParams | None = None) -> DecodeResult:
    """Lookahead decoding of ``prompt_ids``; returns a DecodeResult with method "lookahead".

    ``model`` is a transformers causal LM, a LoadedModel or a Backend. Greedy output equals
    ``autoregressive.generate``; sampling is lossless in distribution.
    """
    params = (params or LookaheadParams()).check()
    backend = as_backend(model)
    return decode(backend, prompt_ids, settings, LookaheadStep(backend, params, settings), "lookahead")
