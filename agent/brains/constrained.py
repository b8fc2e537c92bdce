"""Constrained greedy decoding for the local brain, over the engine's Backend seam (llama.cpp or
transformers) and its KV cache.

The context is one token list (``ids``): a fixed prefix (system prompt and tool list, whose KV cache
is saved to disk and reloaded by later processes), then a *segment* held as text (conversation
history, this turn, and what the assistant has committed so far). Tokens are fed lazily: text that
is decided but not yet run is *pending* and goes through the model with the next pass that needs
logits, so forced text (``", "arguments": {``) costs no pass of its own.

- :meth:`ConstrainedLM.choose` appends one of several strings (tool names, argument keys, enum
  values): masked greedy decoding over the strings' text, one pass per real decision. The token at
  the boundary with the committed text is taken back and chosen again (token healing), so tokens
  that run across the boundary (``",`` ``"}}``) compete as the model would write them.
- :meth:`ConstrainedLM.generate` decodes free text greedily with prompt-lookup drafts (n-grams copied
  from the context and verified in the same pass: the model's own greedy text, in fewer passes when
  it copies the user's words into an argument).
- :meth:`ConstrainedLM.generate_number` decodes digits until the model prefers to end the number.

The committed text is re-tokenized at each step; where its canonical tokens differ from those in the
cache, the cache is cropped to the common prefix and the rest is fed again.
"""

from __future__ import annotations

import bisect
import ctypes
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from tools.engine.backend import as_backend
from tools.engine.draft_tree import DraftTree, build_draft_tree
from tools.engine.llamacpp import LlamaCppBackend
from tools.engine.params import PromptLookupParams
from tools.engine.prompt_lookup import find_candidate_set

PREFILL_CHUNK = 256  # prompt tokens per forward pass when the prefix is computed
# one draft of up to 6 tokens after a 2- or 3-gram match: rejected drafts cost time here (a pass over 8
# tokens costs 3-4 one-token passes on a busy 2-core CPU), so only fairly sure ones are tried
LOOKUP = PromptLookupParams(max_ngram_size=3, min_ngram_size=2, num_candidate_tokens=6, num_candidates=1)
NUMBER_TOKEN = re.compile(r"[0-9.\-]+")
NUMBER_END = re.compile(r"[\s,}\]\"]")  # what may follow a number in JSON


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token lists."""
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def _byte_decoder() -> dict[str, int]:
    """The inverse of GPT-2's byte-to-character table (byte-level BPE spells byte b as chr(table[b]))."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), 256))
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[chr(b)] = b
        else:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


class TokenTexts:
    """The text of every token, to match tokens against the text a grammar allows: the tokens whose
    text is a prefix of a given text, and those whose text runs past it."""

    def __init__(self, tokenizer, size: int):
        self.pieces = token_pieces(tokenizer, size)
        self.by_text: dict[str, list[int]] = {}
        for token, piece in enumerate(self.pieces):
            if piece:
                self.by_text.setdefault(piece, []).append(token)
        self.longest = max((len(p) for p in self.by_text), default=0)
        self.sorted = sorted(self.by_text)

    def prefixes_of(self, text: str, longer_than: int = 0) -> list[tuple[int, str]]:
        """(token, its text) for each token whose text is a prefix of ``text`` longer than ``longer_than``."""
        return [(token, text[:k]) for k in range(longer_than + 1, min(len(text), self.longest) + 1)
                for token in self.by_text.get(text[:k], ())]

    def extending(self, text: str) -> list[int]:
        """The tokens whose text starts with ``text`` and is longer."""
        out, i = [], bisect.bisect_right(self.sorted, text)
        while i < len(self.sorted) and self.sorted[i].startswith(text):
            out += self.by_text[self.sorted[i]]
            i += 1
        return out


def token_pieces(tokenizer, size: int) -> list[str]:
    """Every token's text: through the byte-level table when the tokenizer is byte-level BPE (fast),
    else decoded one by one. Partial UTF-8 sequences become ''."""
    names = tokenizer.convert_ids_to_tokens(list(range(size)))
    table = _byte_decoder()
    pieces = []
    for name in names:
        try:
            pieces.append(bytes(table[c] for c in name).decode("utf-8") if name else "")
        except (KeyError, UnicodeDecodeError):
            pieces.append(None)
    sample = [i for i in range(0, size, max(1, size // 200)) if pieces[i] is not None]
    if any(pieces[i] != tokenizer.decode([i]) for i in sample):
        return tokenizer.batch_decode([[i] for i in range(size)])  # not byte-level BPE
    return [p or "" for p in pieces]


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
        self._number_masks: tuple[torch.Tensor, torch.Tensor] | None = None
        self._last: torch.Tensor | None = None  # logits after the last token of ids, once computed
        self._texts: TokenTexts | None = None
        self.lookup = LOOKUP  # prompt-lookup drafting of free text

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
            self._last = self._forward(ids[start: start + PREFILL_CHUNK], start, None)[-1]
        self.ids, self.base, self.text = ids, len(ids), ""

    def begin(self, text: str) -> None:
        """Start a new segment (history + this turn) after the prefix; it is fed by the next pass."""
        self.text = text

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
        if is_llamacpp(self.backend):
            llamacpp_save(self.backend, tmp, self.ids[:n])
        else:
            layers = [(layer.keys[..., :n, :].clone(), layer.values[..., :n, :].clone())
                      for layer in self.cache.layers]
            torch.save({"ids": self.ids[:n], "layers": layers}, tmp)
        os.replace(tmp, path)

    def load_prefix(self, path: Path, text: str) -> bool:
        """Load a prefix saved by :meth:`save_prefix` for exactly ``text``; False when it does not fit."""
        ids = self.encode(text)
        try:
            if is_llamacpp(self.backend):
                cache, saved = llamacpp_load(self.backend, path, len(ids))
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

    def _forward(self, tokens: list[int], start: int, tree: DraftTree | None, rows: int = 1) -> torch.Tensor:
        device = self.backend.device
        ids = torch.tensor([tokens], dtype=torch.long, device=device)
        depths = tree.depths if tree is not None else range(len(tokens))
        positions = (torch.tensor(list(depths), device=device) + start)[None]
        visible = None if tree is None or tree.is_chain else tree.visible().to(device)
        self.passes += 1
        self.fed += len(tokens)
        with torch.no_grad():
            return self.backend.forward(ids, self.cache, positions, visible, rows=rows).float()

    def _logits(self) -> torch.Tensor:
        """The model's logits after the last token of ``ids`` (one pass over the pending tokens)."""
        if self._last is not None:
            return self._last
        cached = self._cached()
        if cached >= len(self.ids):  # nothing pending: run the last token again
            cached = len(self.ids) - 1
            self.backend.crop(self.cache, cached)
        self._last = self._forward(self.ids[cached:], cached, None)[-1]
        return self._last

    # ---- the operations ------------------------------------------------------------------------------

    def choose(self, options: Sequence[str]) -> int:
        """Append the option the model prefers and return its index: masked greedy decoding at the
        level of text. At each decision the committed text is tokenized and its last token taken back
        (token healing), so a token that runs across the boundary (``",`` after a string, ``}}``
        closing two objects) is allowed: every token whose text continues a remaining option, or
        runs past its end, competes by its logit. Text all remaining options share costs no pass; so
        one pass per real decision. The chosen option's text is committed."""
        done, heal = self.text, True
        left = dict(enumerate(options))
        while len(left) > 1:
            common = os.path.commonprefix(list(left.values()))
            done, left = done + common, {i: o[len(common):] for i, o in left.items()}
            anchor = self._heal(done, list(left.values())) if heal else self._align_text(done)
            tail = done[len(anchor):]
            token, piece, ended = self._best_token(self._logits(), {i: tail + o for i, o in left.items()}, len(tail))
            if ended is not None or token < 0:
                left = {ended if ended is not None else next(iter(left)): ""}
                break
            self.ids.append(token)
            self._last = None
            heal = piece != tail  # the healed token itself won: decide the next one after it, as it is
            step = piece[len(tail):]
            done, left = done + step, {i: o[len(step):] for i, o in left.items() if (tail + o).startswith(piece)}
        index = next(iter(left))
        self.text += options[index]
        return index

    def _align_text(self, text: str) -> str:
        self._align(self.ids[: self.base] + self.encode(text))
        return text

    def _heal(self, text: str, following: Sequence[str] | None = None) -> str:
        """Align the context with ``text`` less its last token (which the next token may replace by
        one running further into one of the ``following`` texts; when no token does, nothing is taken
        back); return the text of what is aligned."""
        ids = self.encode(text)
        anchor = ids[:-1] if ids else ids
        anchor_text = self.decode(anchor)
        tail, texts = text[len(anchor_text):], self.token_texts()
        merges = following is None or any(texts.prefixes_of(tail + f, longer_than=len(tail)) or
                                          texts.extending(tail + f) for f in following)
        if not text.startswith(anchor_text) or not merges:
            anchor, anchor_text = ids, text
        self._align(self.ids[: self.base] + anchor)
        return anchor_text

    def _best_token(self, row: torch.Tensor, rest: dict[int, str], healed: int) -> tuple[int, str, int | None]:
        """The best token consistent with the texts still to come (option -> text, whose first
        ``healed`` characters were taken back): (token, its text, the option it completes or runs past,
        None while options remain open). A token reaches past the healed text, or is the token taken
        back itself."""
        texts = self.token_texts()
        best: tuple[float, int, str, int | None] = (float("-inf"), -1, "", None)
        if healed:  # the token taken back, as it was
            piece = next(iter(rest.values()))[:healed]
            for token in texts.by_text.get(piece, ()):
                if float(row[token]) > best[0]:
                    best = (float(row[token]), token, piece, None)
        for option, text in rest.items():
            for token, piece in texts.prefixes_of(text, longer_than=healed):
                if float(row[token]) > best[0]:
                    others = any(t.startswith(piece) for o, t in rest.items() if o != option and t != piece)
                    best = (float(row[token]), token, piece, option if piece == text and not others else None)
            longer = [t for t in texts.extending(text) if not any(r.startswith(texts.pieces[t]) for r in rest.values())]
            if longer:
                scores = row[torch.tensor(longer)]
                k = int(scores.argmax())
                if float(scores[k]) > best[0]:
                    best = (float(scores[k]), longer[k], texts.pieces[longer[k]], option)
        return best[1], best[2], best[3]

    def token_texts(self) -> TokenTexts:
        if self._texts is None:
            self._texts = TokenTexts(self.tokenizer, min(self.backend.vocab_size, len(self.tokenizer)))
        return self._texts

    def generate(self, max_tokens: int, stop: Callable[[str], int | None] | None = None) -> str:
        """Greedy free text appended to the segment, with prompt-lookup drafts verified in the same
        pass; ends at a stop token, after ``max_tokens``, or where ``stop(text)`` returns a cut
        position. The first token may run across the boundary with the committed text (token
        healing). Returns the text (the committed text grows by it)."""
        out, skip = self._heal_first()
        text = self.decode(out)[skip:]
        while len(out) < max_tokens:
            new = self._step(max_tokens - len(out))
            cut = next((i for i, t in enumerate(new) if t in self.stop_ids), len(new))
            out += new[:cut]
            text = self.decode(out)[skip:]
            at = stop(text) if stop is not None else None
            if at is not None:
                text = text[:at]
                break
            if cut < len(new):
                break
        self.text += text
        return text

    def _heal_first(self) -> tuple[list[int], int]:
        """Take back the committed text's last token and choose the best token that starts with its
        text (one pass). Returns ([that token], characters of it already committed), or ([], 0) when
        the context is aligned as it is."""
        anchor = self._heal(self.text)
        tail = self.text[len(anchor):]
        texts = self.token_texts()
        allowed = texts.by_text.get(tail, []) + texts.extending(tail) if tail else []
        if not allowed:
            self._align(self.segment_ids())
            return [], 0
        scores = self._logits()[torch.tensor(allowed)]
        token = allowed[int(scores.argmax())]
        self.ids.append(token)
        self._last = None
        return [token], len(tail)

    def _step(self, budget: int) -> list[int]:
        """One greedy step: the pending tokens and a prompt-lookup draft in one pass; returns the new
        tokens (accepted draft tokens and the model's next token), appended to ``ids``."""
        if self._last is not None:  # the logits after the last token are known already
            token = int(self._last.argmax())
            self.ids.append(token)
            self._last = None
            return [token]
        cached = min(self._cached(), len(self.ids) - 1)
        self.backend.crop(self.cache, cached)
        pending = self.ids[cached:]
        drafts = find_candidate_set(torch.tensor(self.ids, dtype=torch.long), self.lookup, limit=budget - 1)
        tree = build_draft_tree(pending[0], [pending[1:] + d for d in drafts] or [pending[1:]])
        logits = self._forward(tree.tokens, cached, tree, rows=tree.size - len(pending) + 1)
        node = _walk_to(tree, pending[1:])
        offset = node  # the chain's nodes come first: node i's logits are row i - offset
        while True:
            choice = int(logits[node - offset].argmax())
            child = next((c for c in tree.children[node] if tree.tokens[c] == choice), None)
            if child is None:
                break
            node = child
        path = tree.path_to(node)
        self.backend.keep_positions(self.cache, cached, torch.tensor(path, device=self.backend.device))
        new = [tree.tokens[i] for i in path[len(pending):]] + [choice]
        self.ids = self.ids[:cached] + [tree.tokens[i] for i in path] + [choice]
        self._last = None
        return new

    def generate_number(self, max_tokens: int = 8) -> str:
        """Digits (and a point or minus) until the model prefers to end the number; appended to the
        committed text and returned ("" when the model cannot start one)."""
        self._align(self.segment_ids())
        digits, enders = self._number_vocab()
        out: list[int] = []
        while len(out) < max_tokens:
            row = self._logits()[: digits.numel()]
            best_digit = row.masked_fill(~digits, float("-inf"))
            best_end = float(row.masked_fill(~enders, float("-inf")).max())
            if not torch.isfinite(best_digit.max()) or (out and best_end >= float(best_digit.max())):
                break
            token = int(best_digit.argmax())
            self.ids.append(token)
            self._last = None
            out.append(token)
        text = self.decode(out)
        self.text += text
        return text

    def _number_vocab(self) -> tuple[torch.Tensor, torch.Tensor]:
        """bool masks over the vocabulary: tokens made of number characters, tokens that end one."""
        if self._number_masks is None:
            pieces = self.token_texts().pieces
            digits = torch.tensor([NUMBER_TOKEN.fullmatch(p) is not None for p in pieces])
            enders = torch.tensor([NUMBER_END.match(p) is not None for p in pieces])
            self._number_masks = digits, enders
        return self._number_masks


def is_llamacpp(backend) -> bool:
    return isinstance(backend, LlamaCppBackend)


# llama.cpp keeps its KV cache inside its context: its sequence state files save and restore it. The
# backend (tools.engine.llamacpp) holds one context and one cache; these two functions use them.


def llamacpp_save(backend, path: Path, ids: list[int]) -> None:
    lib = backend._lib
    tokens = (lib.llama_token * max(1, len(ids)))(*ids)
    if not lib.llama_state_seq_save_file(backend._ctx, str(path).encode(), 0, tokens, len(ids)):
        raise OSError(f"llama.cpp could not write {path}")


def llamacpp_load(backend, path: Path, capacity: int):
    """(a fresh cache holding the saved state, its token ids), or (None, None)."""
    lib = backend._lib
    cache = backend.new_cache()
    tokens = (lib.llama_token * (capacity + 1))()
    count = ctypes.c_size_t(0)
    if not path.is_file() or not lib.llama_state_seq_load_file(backend._ctx, str(path).encode(), 0, tokens,
                                                                capacity + 1, ctypes.byref(count)):
        backend.new_cache()
        return None, None
    cache.length = int(count.value)
    return cache, list(tokens[: cache.length])


def _walk_to(tree: DraftTree, tokens: Sequence[int]) -> int:
    """The node reached from the root by ``tokens``."""
    node = 0
    for token in tokens:
        node = next(c for c in tree.children[node] if tree.tokens[c] == token)
    return node


