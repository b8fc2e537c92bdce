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
``prompt_lookup=0`` is lookahead decoding as published.

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

import ast
import importlib
import importlib.util
import inspect
import random
import time
from collections import OrderedDict
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import torch
from pydantic import BaseModel, ConfigDict, Field

from tools.engine import kv
from tools.engine.autoregressive import as_input_ids, next_token, prefill, sync
from tools.engine.draft_tree import DraftTree, accept_greedy_tree, accept_sampling_tree, build_draft_tree
from tools.engine.prompt_lookup import MAX_CANDIDATES, PromptLookupParams, find_candidate_set
from tools.engine.sampling import greedy_tokens, make_generator, warp_probs
from tools.engine.types import DecodeResult, GenerationSettings, StepTally
from tools.errors import ParameterError

MAX_STEP_TOKENS = 512  # tokens in one forward pass (1 + lookahead branch + verification branch)


class LookaheadParams(BaseModel):
    """Lookahead decoding parameters: window W, n-gram size N, guess set size G."""

    model_config = ConfigDict(extra="forbid")

    window: int = Field(15, description="W: columns of the lookahead window (parallel Jacobi trajectories)")
    ngram: int = Field(5, description="N: n-gram size; the window has N-1 levels, candidates N-1 tokens")
    guess: int = Field(5, description="G: n-grams kept per first token and verified per step at most")
    pool_from_prompt: bool = Field(False, description="also seed the n-gram pool from the prompt and the output")
    prompt_lookup: int = Field(2, description="prompt-lookup drafts (3-gram match, up to 10 tokens) verified "
                                              "with the pool's n-grams each step; 0 for lookahead alone")

    def lookup_params(self) -> PromptLookupParams | None:
        """The prompt-lookup matcher used for the extra drafts (None when ``prompt_lookup`` is 0)."""
        return PromptLookupParams(num_candidates=self.prompt_lookup) if self.prompt_lookup else None

    @property
    def tokens_per_step(self) -> int:
        """Tokens in one step's forward pass at most: 1 + (N-1)*W + G*(N-1) + the prompt-lookup drafts."""
        extra = self.prompt_lookup * PromptLookupParams().num_candidate_tokens
        return 1 + (self.ngram - 1) * self.window + self.guess * (self.ngram - 1) + extra

    def check(self) -> LookaheadParams:
        """Return self, or raise ParameterError naming the parameter to change."""
        if self.ngram < 2:
            raise ParameterError(f"ngram (N) must be at least 2, got {self.ngram}", hint="try ngram=5 (the default)")
        if self.window < 1:
            raise ParameterError(f"window (W) must be at least 1, got {self.window}", hint="try window=15")
        if self.guess < 0:
            raise ParameterError(f"guess (G) must be 0 or more, got {self.guess}", hint="try guess=5")
        if not 0 <= self.prompt_lookup <= MAX_CANDIDATES:
            raise ParameterError(f"prompt_lookup must be from 0 to {MAX_CANDIDATES}, got {self.prompt_lookup}",
                                 hint="try prompt_lookup=2, or 0 for lookahead alone")
        if self.tokens_per_step > MAX_STEP_TOKENS:
            raise ParameterError(
                f"W={self.window}, N={self.ngram}, G={self.guess} put 1 + (N-1)*W + G*(N-1) (+ drafts) = "
                f"{self.tokens_per_step} tokens in each forward pass; the limit is {MAX_STEP_TOKENS}",
                hint="lower window or guess (or ngram, which multiplies both)",
            )
        return self


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


# ---------------------------------------------------------------------------------------- forward
@lru_cache(maxsize=None)
def _takes_logit_rows(forward_cls: type) -> bool:
    return "logits_to_keep" in inspect.signature(forward_cls.forward).parameters


def forward_rows(model, ids: torch.Tensor, cache, positions: torch.Tensor, mask: torch.Tensor,
                 rows: torch.Tensor) -> torch.Tensor:
    """Run the public forward over ``ids`` [1, n]; return logits [len(rows), vocab] for ``rows`` only
    (the LM head runs on those rows when the model takes a tensor ``logits_to_keep``)."""
    if not _takes_logit_rows(type(model)):
        return kv.forward(model, ids, cache, position_ids=positions, attention_mask=mask).index_select(0, rows)
    return kv.forward(model, ids, cache, position_ids=positions, attention_mask=mask, logits_to_keep=rows)


# ---------------------------------------------------------------------------------------- decoder
class _LookaheadState:
    """The window, pool and layout of one generate call; ``step`` runs one forward pass."""

    def __init__(self, model, params: LookaheadParams, settings: GenerationSettings, prompt: list[int]):
        self.model = model
        self.params = params
        self.settings = settings
        self.W, self.N, self.G = params.window, params.ngram, params.guess
        self.device = model.device
        self.dtype = next(model.parameters()).dtype
        self.layout = build_layout(self.W, self.N)
        self.rng = random.Random(settings.seed)
        self.prompt = prompt
        # level 0 starts as tokens copied from the prompt (as the reference implementation does)
        self.window = torch.tensor([[self.rng.choice(prompt) for _ in range(self.W)]] * (self.N - 1),
                                   dtype=torch.long, device=self.device)
        self.filled = 1  # levels holding real Jacobi tokens
        self.pool = NgramPool(self.N, self.G)
        self.lookup = params.lookup_params()
        self.generator = make_generator(settings, self.device)

    def _filler(self, count: int) -> torch.Tensor:
        return torch.tensor([self.rng.choice(self.prompt) for _ in range(count)], dtype=torch.long, device=self.device)

    def step(self, current: int, cache, length: int, remaining: int,
             text: torch.Tensor) -> tuple[list[int], int, list[int]]:
        """One forward pass; return (new tokens, accepted draft tokens, depths of the verified nodes).

        ``length`` is the cache length (the position of ``current``), ``text`` the whole text so far
        ending with ``current``; afterwards the cache holds ``current`` and the accepted tokens.
        """
        lay, W = self.layout, self.W
        full = self.filled == self.N - 1
        use_window = remaining > 1  # the last token needs no lookahead and no drafts
        drafts: list[list[int]] = []
        if use_window:
            if self.lookup is not None:
                drafts += find_candidate_set(text, self.lookup, limit=remaining - 1)
            if full:
                drafts += [list(c[: remaining - 1]) for c in self.pool.candidates(current)]
        tree = build_draft_tree(current, drafts)
        n_look = 1 + self.filled * W if use_window else 1
        n = n_look + tree.size - 1
        ids = torch.empty(1, n, dtype=torch.long, device=self.device)
        ids[0, 0] = current
        if use_window:
            ids[0, 1:n_look] = self.window[: self.filled].reshape(-1)
        if tree.size > 1:
            ids[0, n_look:] = torch.tensor(tree.tokens[1:], dtype=torch.long, device=self.device)
        visible, offsets = step_pattern(lay, n_look, tree)
        positions = (offsets.to(self.device) + length)[None]
        mask = kv.tree_mask(length, visible.to(self.device), self.dtype)
        newest = list(range(1 + (self.filled - 1) * W, 1 + self.filled * W)) if use_window else []
        rows = torch.tensor([0, *newest, *range(n_look, n)], dtype=torch.long, device=self.device)
        logits = forward_rows(self.model, ids, cache, positions, mask, rows)  # [rows, vocab]
        choice = greedy_tokens(logits)
        node_row = [0, *range(1 + len(newest), logits.shape[0])]  # logits row of each tree node

        if self.settings.greedy:
            choices = choice.tolist()
            node, nxt = accept_greedy_tree(tree, [choices[r] for r in node_row])
        else:
            node, nxt = accept_sampling_tree(
                tree, lambda i: warp_probs(logits[node_row[i]], self.settings), self.generator)
        path = tree.path_to(node)
        m = len(path) - 1
        if m:
            keep = torch.tensor([0, *(n_look + i - 1 for i in path[1:])], dtype=torch.long, device=self.device)
            kv.keep_positions(cache, length, keep)
            accepted = tuple(tree.tokens[i] for i in path[1:])
            for cand in self.pool.candidates(current):
                if cand[:m] == accepted:
                    self.pool.touch(current, cand)
                    break
        else:
            kv.crop(cache, length + 1)
        if use_window:
            self._advance_window(choice[1: 1 + W])
        return [*(tree.tokens[i] for i in path[1:]), nxt], m, tree.depths[1:]

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


@torch.inference_mode()
def generate(model, prompt_ids, settings: GenerationSettings, params: LookaheadParams | None = None) -> DecodeResult:
    """Lookahead decoding of ``prompt_ids``; returns a DecodeResult with method "lookahead".

    Greedy output equals ``autoregressive.generate``; sampling is lossless in distribution.
    """
    params = (params or LookaheadParams()).check()
    device = model.device
    eos = set(settings.eos_token_ids)
    input_ids = as_input_ids(prompt_ids, device)
    prompt = input_ids[0].tolist()
    cache = kv.new_cache(model)

    t0 = time.perf_counter()
    state = _LookaheadState(model, params, settings, prompt)
    logits = prefill(model, input_ids, cache)
    first = next_token(logits, settings, state.generator)
    if params.pool_from_prompt:
        state.pool.add_sequence(prompt + [first])
    sync(device)
    t1 = time.perf_counter()

    out = [first]
    seq = prompt + [first]
    # the whole text in one buffer for the prompt-lookup matcher
    text = torch.empty(len(seq) + settings.max_new_tokens + 1, dtype=torch.long, device=device)
    text[: len(seq)] = torch.tensor(seq, dtype=torch.long, device=device)
    stopped = "eos" if first in eos else "length"
    tally, verify_steps = StepTally(), 0
    while stopped == "length" and len(out) < settings.max_new_tokens:
        remaining = settings.max_new_tokens - len(out)
        new, _, depths = state.step(out[-1], cache, len(seq) - 1, remaining, text[: len(seq)])
        new = new[:remaining]
        for i, t in enumerate(new):
            if t in eos:
                new, stopped = new[: i + 1], "eos"
                break
        # tokens past the limit or an EOS are dropped; the last kept token counts as the target's own
        tally.record(len(new) - 1, depths)
        verify_steps += bool(depths)
        text[len(seq): len(seq) + len(new)] = torch.tensor(new, dtype=torch.long, device=device)
        out.extend(new)
        seq.extend(new)
        if params.pool_from_prompt and stopped == "length":
            state.pool.add_sequence(seq, start=len(seq) - len(new))
    sync(device)
    t2 = time.perf_counter()
    steps = tally.steps
    return tally.result("lookahead", out, (t0, t1, t2), stopped, extra={
        "window": params.window,
        "ngram": params.ngram,
        "guess": params.guess,
        "pool_from_prompt": params.pool_from_prompt,
        "prompt_lookup": params.prompt_lookup,
        "tokens_per_step": params.tokens_per_step,
        "warmup_steps": min(steps, params.ngram - 2),
        "verify_steps": verify_steps,
        "pool_ngrams": len(state.pool),
        "tokens_per_decode_step": (len(out) - 1) / steps if steps else 0.0,
    })


# ---------------------------------------------------------------------------------------- lade check
def lade_status() -> tuple[bool, str]:
    """Say whether the PyPI package ``lade`` (the reference implementation) could run here.

    lade is not imported (importing it patches transformers); its sources are read instead and
    every ``from transformers... import name`` and ``GenerationMixin.<attr>`` it uses is looked up
    in the installed transformers. Returns (ok, reason); reason names the first missing attribute.
    """
    spec = importlib.util.find_spec("lade")
    if spec is None or not spec.submodule_search_locations:
        return False, "lade is not installed (specpilot's own lookahead decoder does not need it)"
    import transformers

    version = transformers.__version__
    missing: list[str] = []
    for folder in spec.submodule_search_locations:
        for path in sorted(Path(folder).rglob("*.py")):
            missing.extend(_missing_transformers_names(path, transformers))
    if missing:
        # the GenerationMixin methods lade patches come first: they are why it cannot work at all
        missing.sort(key=lambda item: "GenerationMixin" not in item[1])
        shown = ", ".join(f"{name} ({where})" for where, name in missing[:3])
        more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        return False, (f"lade cannot run with transformers {version}: it needs {shown}{more}, which this "
                       f"transformers no longer has; lade targets transformers 4.36 (GenerationMixin "
                       f"internals were removed in 4.41). Use specpilot's lookahead method instead.")
    return True, f"lade's transformers imports all resolve with transformers {version}"


def _missing_transformers_names(path: Path, transformers) -> list[tuple[str, str]]:
    """(file, 'module.name') for each transformers name ``path`` imports or patches that does not exist."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
    except SyntaxError:
        return []
    found: list[tuple[str, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "transformers":
            try:
                module = importlib.import_module(node.module)
            except Exception:  # a removed module
                found.append((path.name, node.module))
                continue
            for alias in node.names:
                if alias.name != "*" and not hasattr(module, alias.name):
                    found.append((path.name, f"{node.module}.{alias.name}"))
        elif (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
              and node.value.id == "GenerationMixin" and isinstance(node.ctx, ast.Load)):
            if not hasattr(transformers.GenerationMixin, node.attr):
                found.append((path.name, f"transformers.GenerationMixin.{node.attr}"))
    return found
