"""Grammar-constrained greedy decoding for the local brain, over the engine's Backend seam (llama.cpp or
transformers) and its KV cache; the grammar is llguidance's, compiled from a JSON schema.

The context is one token list (``ids``): a fixed prefix (system prompt and tool list, whose KV cache
is saved to disk and reloaded by later processes), then a *segment* held as text (conversation
history, this turn, and what the assistant has committed so far). Tokens are fed lazily: text that
is decided but not yet run is *pending* and goes through the model with the next pass that needs
logits, so text the grammar forces (``", "arguments": {``, a value fixed by the schema) costs no pass
of its own.

:meth:`ConstrainedLM.decode_json` appends one JSON value under a schema: the grammar's forced tokens are
fed with the next pass, the rest is the model's greedy choice among the tokens the grammar allows, with a
prompt-lookup draft (an n-gram copied from the context: the user's words copied into an argument) checked
against the grammar and verified in the same pass, so the text is the model's own constrained greedy text
in fewer passes.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from tools.engine.backend import as_backend
from tools.engine.draft_tree import DraftTree, add_draft
from tools.engine.llamacpp import LlamaCppBackend
from tools.engine.params import PromptLookupParams
from tools.engine.prompt_lookup import find_candidate_set

log = logging.getLogger(__name__)

PREFILL_CHUNK = 256  # prompt tokens per forward pass when the prefix is computed
# one draft of up to 6 tokens after a 2- or 3-gram match: rejected drafts cost time here (a pass over 8
# tokens costs 3-4 one-token passes on a busy 2-core CPU), so only fairly sure ones are tried
LOOKUP = PromptLookupParams(max_ngram_size=3, min_ngram_size=2, num_candidate_tokens=6, num_candidates=1)
SEPARATORS = {"item_separator": ", ", "key_separator": ": ", "whitespace_flexible": False}  # as json.dumps
TRIED_FIRST = 4  # the model's best tokens checked against the grammar one at a time before the whole mask


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token lists."""
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


class ConstrainedLM:
    """A causal LM (a transformers model or a Backend) with its tokenizer, a KV cache over a prefix
    and a text segment, and the constrained operations above. Greedy only."""

    def __init__(self, model, tokenizer, stop_ids: Sequence[int] = ()):
        self.backend = as_backend(model)
        self.tokenizer = tokenizer
        self.stop_ids = set(int(i) for i in stop_ids)
        self.cache = self.backend.new_cache()
        self.ids: list[int] = []
        self.base = 0  # tokens of the fixed prefix; the segment starts here
        self.text = ""  # the segment's committed text
        self.passes = 0  # forward passes run (for tests and benchmarks)
        self.fed = 0  # tokens fed through the model
        self._last: torch.Tensor | None = None  # logits after the last token of ids, once computed
        self._grammar_tokenizer = None  # llguidance's view of the vocabulary, built on the first decode
        self.lookup = LOOKUP  # prompt-lookup drafting of free text
        self.saved_pieces: Path | None = None  # where a llama.cpp model's token pieces are kept for the grammar

    # ---- context --------------------------------------------------------------------------------

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=False)

    def set_prefix(self, text: str) -> None:
        """Make ``text`` the fixed prefix and compute its KV cache (in chunks)."""
        ids = self.encode(text)
        self.cache, self._last = self.backend.new_cache(), None
        for start in range(0, len(ids), PREFILL_CHUNK):
            self._last = self._forward(ids[start: start + PREFILL_CHUNK], start)[-1]
        self.ids, self.base, self.text = ids, len(ids), ""

    def begin(self, text: str) -> None:
        """Start a new segment (history + this turn) after the prefix; it is fed by the next pass."""
        self.text = text

    def read(self, text: str) -> np.ndarray | None:
        """The model's reading of ``text`` as the segment after the prefix: its last hidden state at each of the
        text's tokens (tokens x hidden size), from the pass that feeds them (the cache keeps them: a segment that
        begins with ``text`` goes on from there). None where the backend gives no hidden states, or the text
        exceeds a batch."""
        ids = self.ids[: self.base] + self.encode(text)
        new = ids[self.base:]
        if not hasattr(self.backend, "forward_hidden") or not new or len(new) > self.backend.n_batch:
            return None
        self._align(ids[: self.base])
        self.passes += 1
        self.fed += len(new)
        with torch.no_grad():
            self._last, hidden = self.backend.forward_hidden(
                torch.tensor([new]), self.cache, torch.arange(self.base, len(ids))[None])
        self.ids = ids
        return hidden

    def offsets(self, text: str) -> list[tuple[int, int]]:
        """Each token of ``text`` as the characters it spans (the tokens :meth:`encode` gives)."""
        return [tuple(span) for span in self.tokenizer.backend_tokenizer.encode(text, add_special_tokens=False).offsets]

    def segment_ids(self, extra: str = "") -> list[int]:
        return self.ids[: self.base] + self.encode(self.text + extra)

    # ---- the prefix cache on disk ----------------------------------------------------------------

    def save_prefix(self, path: Path) -> None:
        """Save the prefix tokens and their KV cache to ``path`` (written atomically): the KV tensors
        of a transformers model, or llama.cpp's own sequence state file."""
        n = min(self._cached(), self.base)
        self.backend.crop(self.cache, n)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + f".{os.getpid()}.partial")
        if isinstance(self.backend, LlamaCppBackend):  # llama.cpp keeps its KV cache inside its context
            self.backend.save_state(tmp, self.ids[:n])
        else:
            layers = [(layer.keys[..., :n, :].clone(), layer.values[..., :n, :].clone())
                      for layer in self.cache.layers]
            torch.save({"ids": self.ids[:n], "layers": layers}, tmp)
        os.replace(tmp, path)

    def load_prefix(self, path: Path, text: str) -> bool:
        """Load a prefix saved by :meth:`save_prefix` for exactly ``text``; False when it does not fit."""
        ids = self.encode(text)
        try:
            if isinstance(self.backend, LlamaCppBackend):
                cache, saved = self.backend.load_state(path, len(ids))
            else:
                cache, saved = self._torch_load(path)
        except (OSError, RuntimeError, EOFError, ValueError, KeyError):
            return False
        if cache is None or not saved or saved != ids[: len(saved)]:
            return False
        self.cache, self.ids, self.base, self.text, self._last = cache, ids, len(ids), "", None
        return True

    def _torch_load(self, path: Path):
        saved = torch.load(path, map_location=self.backend.device, weights_only=True)
        if len(saved["layers"]) != len(self.backend.new_cache().layers):
            return None, None
        cache = self.backend.new_cache()
        for i, (keys, values) in enumerate(saved["layers"]):
            cache.update(keys.to(self.backend.dtype), values.to(self.backend.dtype), i)
        return cache, list(saved["ids"])

    # ---- feeding ---------------------------------------------------------------------------------

    def _cached(self) -> int:
        return self.backend.cache_length(self.cache)

    def _align(self, wanted: list[int]) -> None:
        """Make ``ids`` equal ``wanted``: keep the common prefix (cropping the cache to it), append the
        rest as pending tokens (fed by the next pass)."""
        keep = common_prefix(wanted, self.ids)
        if keep < len(self.ids):
            self.ids = self.ids[:keep]
            self._last = None
        if self._cached() > keep:
            self.backend.crop(self.cache, keep)
            self._last = None
        if len(wanted) > keep:
            self.ids += wanted[keep:]
            self._last = None

    def _forward(self, tokens: list[int], start: int, rows: int = 1) -> torch.Tensor:
        device = self.backend.device
        ids = torch.tensor([tokens], dtype=torch.long, device=device)
        positions = torch.arange(start, start + len(tokens), device=device)[None]
        self.passes += 1
        self.fed += len(tokens)
        with torch.no_grad():
            return self.backend.forward(ids, self.cache, positions, None, rows=rows).float()

    def _logits(self) -> torch.Tensor:
        """The model's logits after the last token of ``ids`` (one pass over the pending tokens)."""
        if self._last is not None:
            return self._last
        cached = self._cached()
        if cached >= len(self.ids):  # nothing pending: run the last token again
            cached = len(self.ids) - 1
            self.backend.crop(self.cache, cached)
        self._last = self._forward(self.ids[cached:], cached)[-1]
        return self._last

    def score(self, continuations: Sequence[str]) -> list[float]:
        """The model's log-probability of each continuation of the committed text, from the token where they
        part. One pass: the pending text and the last common token, with the continuations as a draft tree
        below it (tools.engine.draft_tree: shared tokens are one node); the cache is left at the common part."""
        ids = [self.segment_ids(c) for c in continuations]
        common = min(common_prefix(ids[0], other) for other in ids)
        self._align(ids[0][:common])
        cached = min(self._cached(), common - 1)
        self.backend.crop(self.cache, cached)
        tree = DraftTree([self.ids[common - 1]], [-1], [0], [[]])
        nodes = [add_draft(tree, own[common:-1]) for own in ids]  # a continuation's last token is only scored
        chain = self.ids[cached: common - 1]
        if len(chain) + tree.size > PREFILL_CHUNK:  # a long turn goes first, as a chain (a tree is one batch)
            self._forward(chain, cached)
            cached, chain = common - 1, []
        n = len(chain) + tree.size
        visible = torch.ones(n, n, dtype=torch.bool).tril()
        visible[len(chain):, len(chain):] = tree.visible()
        positions = [cached + i for i in range(len(chain))] + [cached + len(chain) + d for d in tree.depths]
        device = self.backend.device
        self.passes += 1
        self.fed += n
        with torch.no_grad():
            logits = self.backend.forward(torch.tensor([chain + tree.tokens], device=device), self.cache,
                                          torch.tensor([positions], device=device), visible.to(device))
        self.backend.crop(self.cache, common)
        self._last = logits[len(chain)]
        rows = torch.log_softmax(logits[len(chain):, : self.backend.vocab_size].float(), -1)
        return [sum(float(rows[node, token]) for node, token in zip([0, *path], own[common:]))
                for path, own in zip(nodes, ids)]

    # ---- decoding under a grammar --------------------------------------------------------------------

    def matcher(self, schema: dict):
        """llguidance's matcher of ``schema`` (JSON written as json.dumps writes it), over this vocabulary."""
        from llguidance import LLMatcher, LLTokenizer

        if self._grammar_tokenizer is None and isinstance(self.backend, LlamaCppBackend):  # tokens read once, saved
            self._grammar_tokenizer = self.backend.tokenizer.grammar_tokenizer(self.saved_pieces, self.backend.vocab_size)
        elif self._grammar_tokenizer is None:
            self._grammar_tokenizer = LLTokenizer(self.tokenizer.backend_tokenizer.to_str(),
                                                  n_vocab=self.backend.vocab_size, slices=[])
        matcher = LLMatcher(self._grammar_tokenizer, LLMatcher.grammar_from_json_schema(schema, overrides=SEPARATORS),
                            log_level=0)
        if matcher.is_error():
            raise ValueError(f"the grammar of {json.dumps(schema)[:200]} does not compile: {matcher.get_error()}")
        return matcher

    def decode_json(self, schema: dict, max_tokens: int):
        """The model's greedy JSON value under ``schema`` after the committed text, appended to it; None when
        it did not close within ``max_tokens`` (then nothing is appended). Tokens the grammar forces are fed
        with the next pass; a prompt-lookup draft is cut where the grammar stops allowing it and verified in
        the same pass."""
        matcher = self.matcher(schema)
        self._align(self.segment_ids())
        start = len(self.ids)
        while len(self.ids) - start < max_tokens and not matcher.is_accepting():
            forced = matcher.compute_ff_tokens()
            if forced:
                matcher.consume_tokens(forced)
                self.ids += forced
                self._last = None
                continue
            new = self._verified(matcher, max_tokens - (len(self.ids) - start))
            if not new:
                break
        out = self.ids[start:]
        text = self.decode(out)
        try:
            value = json.loads(text)
        except ValueError:
            log.info("no JSON value within %d tokens: %r", max_tokens, text[:200])
            self._align(self.segment_ids())
            return None
        self.text += text
        return value

    def _verified(self, matcher, budget: int) -> list[int]:
        """One pass: the pending tokens and a prompt-lookup draft; the model's allowed greedy tokens while they
        follow the draft are appended to ``ids`` (and returned)."""
        cached = min(self._cached(), len(self.ids) - 1)
        self.backend.crop(self.cache, cached)
        pending = self.ids[cached:]
        drafts = find_candidate_set(torch.tensor(self.ids, dtype=torch.long), self.lookup, limit=budget - 1) \
            if budget > 1 else []
        guess = drafts[0][: matcher.validate_tokens(drafts[0])] if drafts else []
        logits = self._forward(pending + guess, cached, rows=len(guess) + 1)
        new: list[int] = []
        for i in range(len(guess) + 1):
            token = _pick(matcher, logits[i][: self.backend.vocab_size])
            if token < 0 or token in self.stop_ids:
                break
            new.append(token)
            if i == len(guess) or token != guess[i] or matcher.is_accepting():
                break
        # the cache holds the pending tokens and the draft tokens kept; the newest token is fed next pass
        self.backend.crop(self.cache, cached + len(pending) + max(0, len(new) - 1))
        self.ids += new
        self._last = None
        return new


def _pick(matcher, row: torch.Tensor) -> int:
    """The best token the grammar allows next, consumed by the matcher; -1 when none is. The model's best few
    are tried first (the usual case), the whole mask only when none of them fits."""
    for token in torch.topk(row, TRIED_FIRST).indices.tolist():
        if matcher.validate_tokens([token]) == 1:
            matcher.consume_token(token)
            return token
    mask = np.zeros((len(row) + 31) // 32, dtype=np.int32)
    matcher.unsafe_compute_mask_ptr(mask.ctypes.data, mask.nbytes)
    allowed = torch.from_numpy(np.unpackbits(mask.view(np.uint8), bitorder="little")[: len(row)].astype(bool))
    if not allowed.any():
        return -1
    token = int(row.masked_fill(~allowed, float("-inf")).argmax())
    matcher.consume_token(token)
    return token
