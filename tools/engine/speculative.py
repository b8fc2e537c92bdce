"""Draft-model speculative decoding (Leviathan et al. 2022, arXiv 2211.17192; Chen et al. 2023,
arXiv 2302.01318).

Each step the draft proposes up to K tokens with its own KV cache, the target scores them in one
forward pass, and acceptance keeps the output exact:

- greedy: the longest prefix equal to the target's argmax is kept, then the target's own next token;
- sampling: draft token x is kept with probability min(1, p(x)/q(x)); on the first rejection the
  replacement is drawn from max(0, p - q) renormalised; when all K are kept a bonus token is
  drawn from p. Temperature / top-k / top-p warp p and q identically.

Both caches are cropped back to the accepted tokens after every step.

Levers for CPUs (where the draft costs a large share of a target token): ``draft_vocab`` drafts
over the N lowest token ids only (BPE ids are roughly ordered by merge frequency; the prompt's own
tokens and the stop tokens are always added) so the draft's LM head reads fewer bytes — the target
still verifies over its full vocabulary, so output is unchanged; ``draft_quant="int8"`` drafts with
an int8 copy of the draft (half the bytes of bfloat16 per token; see tools/decoding/quantize.py);
``adaptive_k`` grows K after a
fully accepted step and shrinks it after an early rejection; ``draft_confidence`` stops drafting
when the draft's top probability falls below a threshold.

``SpeculativeDecoder`` also offers the Lugh::Speculative API (inference/main, draft/draft_inference,
k/depth; generate, step, draft_tokens, verify_tokens, init_caches; statistics).
"""

from __future__ import annotations

import time

import torch

from tools.engine import kv
from tools.engine import quantize
from tools.engine.autoregressive import as_input_ids, sync
from tools.engine.sampling import greedy_tokens, make_generator, residual, sample, warp_probs
from tools.engine.types import DecodeResult, GenerationSettings
from pydantic import ValidationError

from tools.errors import ParameterError, VocabularyMismatchError

K_MIN, K_MAX = 1, 16


def _unwrap(model_or_loaded):
    """Accept a transformers model or a tools.models.LoadedModel; return (model, tokenizer or None)."""
    if hasattr(model_or_loaded, "model") and hasattr(model_or_loaded, "tokenizer"):
        return model_or_loaded.model, model_or_loaded.tokenizer
    return model_or_loaded, None


def lm_head_rows(model) -> int:
    return int(model.get_output_embeddings().weight.shape[0])


def shared_vocab_size(target, draft, target_tok=None, draft_tok=None) -> int:
    """Return the number of token ids target and draft share, or raise VocabularyMismatchError.

    LM heads may differ by padding rows (common in Qwen pairs) when the tokenizers agree.
    """
    vt, vd = lm_head_rows(target), lm_head_rows(draft)
    if target_tok is not None and draft_tok is not None:
        if target_tok.get_vocab() != draft_tok.get_vocab():
            raise VocabularyMismatchError(
                "the target and draft tokenizers map tokens to different ids",
                hint="choose a draft from the same model family (same tokenizer) as the target",
            )
        n = len(target_tok)
        if n > min(vt, vd):
            raise VocabularyMismatchError(f"tokenizer has {n} tokens but an LM head has only {min(vt, vd)} rows")
        return min(vt, vd)
    if vt != vd:
        raise VocabularyMismatchError(
            f"target vocabulary has {vt} rows, draft has {vd}",
            hint="pass models with the same vocabulary, or give their tokenizers so padding rows can be checked",
        )
    return vt


def validate_k(k: int) -> int:
    if not isinstance(k, int) or isinstance(k, bool) or not (K_MIN <= k <= K_MAX):
        raise ParameterError(f"k must be an integer from {K_MIN} to {K_MAX}, got {k!r}", hint="try k=4")
    return k


class _Drafter:
    """The draft model with its cache; proposes tokens, optionally over a trimmed vocabulary."""

    def __init__(self, model, shared_vocab: int, target_vocab: int):
        self.model = model
        self.shared_vocab = shared_vocab
        self.target_vocab = target_vocab
        self.cache = None
        self.length = 0  # positions held in the cache
        self.subset: torch.Tensor | None = None  # token ids the draft may propose (sorted)
        self.head: torch.Tensor | None = None  # LM head rows for ``subset``

    def can_trim(self) -> bool:
        head = self.model.get_output_embeddings()
        cfg = self.model.config
        return (
            isinstance(head, torch.nn.Linear)
            and head.bias is None
            and getattr(cfg, "final_logit_softcapping", None) is None
            and getattr(cfg, "logit_scale", None) is None
        )

    def set_vocab(self, draft_vocab: int | None, always: list[int]) -> None:
        if not draft_vocab or draft_vocab >= self.shared_vocab or not self.can_trim():
            self.subset, self.head = None, None
            return
        dev = self.model.device
        ids = torch.cat([torch.arange(draft_vocab), torch.as_tensor(always, dtype=torch.long)])
        ids = torch.unique(ids[ids < self.shared_vocab]).to(dev)
        self.subset = ids
        self.head = self.model.get_output_embeddings().weight.index_select(0, ids).contiguous()

    def reset(self, prompt: torch.Tensor) -> None:
        """Prefill the draft cache with the prompt [1, n]."""
        self.cache = kv.new_cache(self.model)
        self.length = 0
        self._forward(prompt[0].tolist(), want_logits=False)

    def _forward(self, tokens: list[int], want_logits: bool = True) -> torch.Tensor | None:
        dev = self.model.device
        ids = torch.tensor([tokens], device=dev)
        pos = torch.arange(self.length, self.length + len(tokens), device=dev)[None]
        self.length += len(tokens)
        if self.head is not None:
            hidden = kv.hidden_forward(self.model, ids, self.cache, position_ids=pos)
            return hidden[-1] @ self.head.T if want_logits else None
        logits = kv.forward(self.model, ids, self.cache, position_ids=pos, logits_to_keep=1)
        return logits[-1, : self.shared_vocab] if want_logits else None

    def propose(self, seq: list[int], k: int, settings: GenerationSettings, generator, confidence: float | None,
                eos: set[int]) -> tuple[list[int], torch.Tensor | None]:
        """Propose up to k tokens after ``seq``; return (tokens, q) with q [m, target_vocab] when sampling."""
        feed = seq[self.length:]
        tokens: list[int] = []
        qs: list[torch.Tensor] = []
        for i in range(k):
            logits = self._forward(feed)
            if settings.greedy:
                j = int(greedy_tokens(logits))
                if confidence is not None and i > 0 and float(logits.softmax(-1)[j]) < confidence:
                    break
            else:
                q_local = warp_probs(logits, settings)
                if confidence is not None and i > 0 and float(q_local.max()) < confidence:
                    break
                j = int(sample(q_local, generator))
                q = torch.zeros(self.target_vocab, dtype=q_local.dtype, device=q_local.device)
                if self.subset is not None:
                    q.scatter_(0, self.subset, q_local)
                else:
                    q[: q_local.shape[0]] = q_local
                qs.append(q)
            token = int(self.subset[j]) if self.subset is not None else j
            tokens.append(token)
            feed = [token]
            if token in eos:
                break
        # the last proposed token was not fed: the cache holds seq + tokens[:-1]
        return tokens, (torch.stack(qs) if qs else None)

    def rollback(self, length: int) -> None:
        if self.length > length:
            kv.crop(self.cache, length)
            self.length = length


def accept_greedy(target_logits: torch.Tensor, drafts: list[int]) -> tuple[int, int]:
    """Return (number of drafts accepted, next token) for greedy verification.

    ``target_logits`` [m + 1, vocab] are the target's logits after the last committed token and
    after each draft token.
    """
    choice = greedy_tokens(target_logits).tolist()
    n = 0
    while n < len(drafts) and drafts[n] == choice[n]:
        n += 1
    return n, choice[n]


def accept_sampling(p: torch.Tensor, q: torch.Tensor | None, drafts: list[int], generator) -> tuple[int, int]:
    """Rejection sampling: return (number of drafts accepted, next token).

    p [m + 1, vocab] target probabilities, q [m, vocab] draft probabilities the drafts were drawn from.
    """
    m = len(drafts)
    if m:
        idx = torch.tensor(drafts, device=p.device)
        rows = torch.arange(m, device=p.device)
        px, qx = p[rows, idx], q[rows, idx]
        u = torch.rand(m, generator=generator, device=p.device)
        rejected = (u * qx > px).tolist()  # accept when u < p(x)/q(x)
        n = rejected.index(True) if True in rejected else m
    else:
        n = 0
    dist = residual(p[n], q[n]) if n < m else p[m]
    return n, int(sample(dist, generator))


class SpeculativeDecoder:
    """Draft-model speculative decoder with the Lugh::Speculative API.

    ``SpeculativeDecoder(inference=target, draft=draft, k=4, temperature=0.8, top_p=0.95)``;
    aliases: ``main`` for inference, ``draft_inference`` for draft, ``depth`` for k. Models are
    transformers causal LMs or ``tools.models.LoadedModel`` objects (then tokenizers are checked).
    """

    def __init__(self, inference=None, draft=None, k: int | None = None, temperature: float = 0.0,
                 top_p: float = 1.0, top_k: int = 0, seed: int = 0, *, main=None, draft_inference=None,
                 depth: int | None = None, adaptive_k: bool = False, k_max: int | None = None,
                 draft_confidence: float | None = None, draft_vocab: int | None = None,
                 draft_quant: str = "none", eos_token_ids: list[int] | None = None):
        target = inference if inference is not None else main
        drafter = draft if draft is not None else draft_inference
        if target is None or drafter is None:
            raise ParameterError("both a target (inference/main) and a draft (draft/draft_inference) model are needed")
        if k is not None and depth is not None and k != depth:
            raise ParameterError(f"k={k} and depth={depth} disagree", hint="give one of them")
        k = validate_k(k if k is not None else depth if depth is not None else 4)
        if not (0.0 < top_p <= 1.0):
            raise ParameterError(f"top_p must be in (0, 1], got {top_p}")
        if temperature < 0:
            raise ParameterError(f"temperature must be >= 0, got {temperature}")
        if draft_confidence is not None and not (0.0 <= draft_confidence < 1.0):
            raise ParameterError(f"draft_confidence must be in [0, 1), got {draft_confidence}")
        if draft_vocab is not None and draft_vocab < 1:
            raise ParameterError(f"draft_vocab must be a positive number of token ids, got {draft_vocab}")
        self.target, self.target_tokenizer = _unwrap(target)
        self.draft_model, self.draft_tokenizer = _unwrap(drafter)
        self._n_vocab = shared_vocab_size(self.target, self.draft_model, self.target_tokenizer, self.draft_tokenizer)
        self._k = k
        self.k_max = validate_k(k_max) if k_max is not None else min(K_MAX, 2 * k)
        if self.k_max < k:
            raise ParameterError(f"k_max={self.k_max} is below k={k}")
        self.adaptive_k = adaptive_k
        self.draft_confidence = draft_confidence
        self.draft_vocab = draft_vocab
        try:
            self.settings = GenerationSettings(
                temperature=temperature, top_p=top_p, top_k=top_k, seed=seed, eos_token_ids=list(eos_token_ids or [])
            )
        except ValidationError as exc:
            raise ParameterError(f"invalid generation settings: {_first_error(exc)}") from None
        self.draft_quant = quantize.resolve(draft_quant, self.draft_model.device)
        proposer = quantize.int8_draft(self.draft_model) if self.draft_quant == "int8" else self.draft_model
        self._drafter = _Drafter(proposer, self._n_vocab, lm_head_rows(self.target))
        self.reset_stats()
        self._seq: list[int] = []
        self._cache = None
        self._generator = None
        self._current_k = k
        self._q = None

    # ------------------------------------------------------------------ accessors
    @property
    def k(self) -> int:
        return self._k

    @property
    def temperature(self) -> float:
        return self.settings.temperature

    @property
    def top_p(self) -> float:
        return self.settings.top_p

    @property
    def n_vocab(self) -> int:
        """Token ids shared by target and draft."""
        return self._n_vocab

    # ------------------------------------------------------------------ statistics
    def reset_stats(self) -> None:
        self.tokens_drafted = 0
        self.tokens_accepted = 0
        self.total_steps = 0
        self.accepted_per_step: list[int] = []
        self.drafted_by_position = [0] * K_MAX
        self.accepted_by_position = [0] * K_MAX

    @property
    def acceptance_rate(self) -> float:
        """tokens_accepted / tokens_drafted (0.0 before any draft)."""
        return self.tokens_accepted / self.tokens_drafted if self.tokens_drafted else 0.0

    # ------------------------------------------------------------------ steps
    @torch.no_grad()
    def init_caches(self, prompt_ids, settings: GenerationSettings | None = None) -> int:
        """Prefill both models with the prompt; return the first new token (from the target)."""
        if settings is not None:
            self.settings = settings
        ids = as_input_ids(prompt_ids, self.target.device)
        self._generator = make_generator(self.settings, self.target.device)
        self._cache = kv.new_cache(self.target)
        self._current_k = self._k
        n = ids.shape[1]
        logits = self._real(kv.forward(self.target, ids, self._cache, torch.arange(n, device=ids.device)[None], logits_to_keep=1)[-1])
        first = int(greedy_tokens(logits)) if self.settings.greedy else int(sample(warp_probs(logits, self.settings), self._generator))
        self._drafter.set_vocab(self.draft_vocab, ids[0].tolist() + self.settings.eos_token_ids)
        self._drafter.reset(ids.to(self.draft_model.device))
        self._seq = ids[0].tolist() + [first]
        return first

    @torch.no_grad()
    def draft_tokens(self, n: int | None = None) -> list[int]:
        """Let the draft propose up to n (default: current K) tokens after the committed sequence."""
        self._require_init()
        n = self._current_k if n is None else validate_k(n)
        self._drafter.rollback(len(self._seq) - 1)  # a second call proposes again from the committed sequence
        tokens, self._q = self._drafter.propose(
            self._seq, n, self.settings, self._generator, self.draft_confidence, set(self.settings.eos_token_ids)
        )
        return tokens

    @torch.no_grad()
    def verify_tokens(self, drafts: list[int]) -> list[int]:
        """Score ``drafts`` with the target in one forward pass; commit and return the new tokens
        (the accepted drafts followed by the target's correction or bonus token)."""
        self._require_init()
        if any(not (0 <= t < self._n_vocab) for t in drafts):
            raise ParameterError(f"draft token ids must be in [0, {self._n_vocab})")
        if not self.settings.greedy and drafts and (self._q is None or self._q.shape[0] != len(drafts)):
            raise ParameterError("sampling verification needs the drafts proposed by draft_tokens()")
        m = len(drafts)
        L = len(self._seq)
        dev = self.target.device
        ids = torch.tensor([[self._seq[-1], *drafts]], device=dev)
        pos = torch.arange(L - 1, L + m, device=dev)[None]
        logits = self._real(kv.forward(self.target, ids, self._cache, position_ids=pos))
        if self.settings.greedy:
            n, nxt = accept_greedy(logits, drafts)
        else:
            n, nxt = accept_sampling(warp_probs(logits, self.settings), self._q, drafts, self._generator)
        new = drafts[:n] + [nxt]
        self._seq.extend(new)
        kv.crop(self._cache, L + n)
        self._drafter.rollback(L + n)
        self._q = None
        # statistics
        self.total_steps += 1
        self.tokens_drafted += m
        self.tokens_accepted += n
        self.accepted_per_step.append(n)
        for i in range(m):
            self.drafted_by_position[i] += 1
            if i < n:
                self.accepted_by_position[i] += 1
        if self.adaptive_k and m:
            if n == m and m == self._current_k:
                self._current_k = min(self._current_k + 1, self.k_max)
            elif n < m:
                self._current_k = max(K_MIN, self._current_k - 1)
        return new

    def step(self, limit: int | None = None) -> list[int]:
        """One speculative step: draft, verify, commit; return the new tokens (at least one)."""
        n = self._current_k if limit is None else min(self._current_k, limit)
        drafts = self.draft_tokens(n) if n >= 1 else []
        return self.verify_tokens(drafts)

    def _real(self, logits: torch.Tensor) -> torch.Tensor:
        """Mask the target's padding rows (ids the draft does not have) so they are never emitted."""
        if logits.shape[-1] > self._n_vocab:
            logits = logits.clone()
            logits[..., self._n_vocab:] = float("-inf")
        return logits

    def _require_init(self) -> None:
        if self._cache is None:
            raise ParameterError("call init_caches(prompt_ids) (or generate) first")

    # ------------------------------------------------------------------ generate
    @torch.inference_mode()
    def run(self, prompt_ids, settings: GenerationSettings) -> DecodeResult:
        """Generate with speculative decoding; return a DecodeResult with timings and counters."""
        self.reset_stats()
        eos = set(settings.eos_token_ids)
        t0 = time.perf_counter()
        first = self.init_caches(prompt_ids, settings)
        t1 = time.perf_counter()
        out = [first]
        stopped = "eos" if first in eos else "length"
        while stopped == "length" and len(out) < settings.max_new_tokens:
            new = self.step(limit=settings.max_new_tokens - len(out) - 1)
            for t in new:
                out.append(t)
                if t in eos:
                    stopped = "eos"
                    break
            del out[settings.max_new_tokens:]
        sync(self.target.device)
        t2 = time.perf_counter()
        return DecodeResult(
            method="draft",
            output_ids=out,
            prefill_s=t1 - t0,
            decode_s=t2 - t1,
            steps=self.total_steps,
            target_forwards=self.total_steps + 1,
            tokens_drafted=self.tokens_drafted,
            tokens_accepted=self.tokens_accepted,
            accepted_per_step=list(self.accepted_per_step),
            drafted_by_position=_trim_zeros(self.drafted_by_position),
            accepted_by_position=self.accepted_by_position[: len(_trim_zeros(self.drafted_by_position))],
            stopped_by=stopped,
            extra={"k": self._k, "adaptive_k": self.adaptive_k, "k_max": self.k_max,
                   "draft_confidence": self.draft_confidence, "draft_quant": self.draft_quant,
                   "draft_vocab": int(self._drafter.subset.numel()) if self._drafter.subset is not None else None},
        )

    def generate(self, prompt, max_tokens: int = 128):
        """Lugh-style generate: token ids in, token ids out; a string prompt returns text."""
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
            raise ParameterError(f"max_tokens must be a positive integer, got {max_tokens!r}")
        tok = self.target_tokenizer
        if isinstance(prompt, str):
            if tok is None:
                raise ParameterError("a text prompt needs a tokenizer", hint="pass LoadedModel objects or token ids")
            ids = tok(prompt)["input_ids"]
        else:
            ids = list(prompt)
        eos = list(self.settings.eos_token_ids)
        if not eos and tok is not None and tok.eos_token_id is not None:
            eos = [tok.eos_token_id]
        settings = self.settings.model_copy(update={"max_new_tokens": max_tokens, "eos_token_ids": eos})
        result = self.run(ids, settings)
        if isinstance(prompt, str):
            return tok.decode(result.output_ids, skip_special_tokens=True)
        return result.output_ids


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    return f"{'.'.join(str(x) for x in err['loc'])}: {err['msg']}"


def _trim_zeros(values: list[int]) -> list[int]:
    end = len(values)
    while end and values[end - 1] == 0:
        end -= 1
    return values[:end]


def generate(target, draft, prompt_ids, settings: GenerationSettings, k: int = 4, *, adaptive_k: bool = False,
             k_max: int | None = None, draft_confidence: float | None = None,
             draft_vocab: int | None = None, draft_quant: str = "none") -> DecodeResult:
    """Speculative decoding of ``prompt_ids`` with ``draft`` proposing for ``target``; returns a DecodeResult."""
    decoder = SpeculativeDecoder(
        inference=target, draft=draft, k=k, temperature=settings.temperature, top_p=settings.top_p,
        top_k=settings.top_k, seed=settings.seed, adaptive_k=adaptive_k, k_max=k_max,
        draft_confidence=draft_confidence, draft_vocab=draft_vocab, draft_quant=draft_quant,
        eos_token_ids=settings.eos_token_ids,
    )
    return decoder.run(prompt_ids, settings)
