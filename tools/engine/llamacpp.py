"""llama.cpp behind the Backend seam, through llama-cpp-python's low-level API (no dequantising).

``LlamaCppBackend`` runs a GGUF file with llama.cpp: one context, one reusable ``llama_batch`` with
explicit positions and sequence ids, logits copied out only for the rows a decoder asks for (the
other rows are not even computed: their ``logits`` flag stays 0), and the KV cache edited with
``llama_memory_seq_rm`` / ``seq_cp`` / ``seq_keep``. Every decoder that needs only ``forward`` (the
baseline, prompt lookup, lookahead, draft-model decoding) runs on it unchanged.

What maps exactly:

- chains (``visible`` None): one batch, causal, at positions ``cache_length ..``;
- token trees (``visible`` where every node sees exactly itself and its ancestors, positions =
  prefix + depth, parents before children: prompt lookup's draft trees, lookahead's window + drafts,
  Medusa trees): every root-to-leaf path becomes a sequence id. The prefix is shared by
  ``seq_cp`` (metadata only in the unified KV cache), a node shared by several paths is one KV cell
  carrying all their ids, and llama.cpp's mask (same sequence, position <= own) is then exactly the
  tree mask. Path 0 (first child at every node) is sequence 0 itself; ``keep_positions`` / ``crop``
  copy the accepted path into sequence 0 and ``seq_keep(0)`` drops the rest. Any other pattern is
  a ParameterError, never a silently different attention.

Not supported (ParameterError saying so): ``hidden`` and ``lm_head`` (llama.cpp gives final hidden
states only in embeddings mode and its LM head is a quantized matmul that a dequantised copy would
not reproduce bit for bit), so Medusa/EAGLE heads do not run here; ``head_rows`` is None, so a
``draft_vocab`` drafts over the full vocabulary (output unchanged). One cache per backend at a time.

Numerics: the baseline (prompt in one batch, then one token per ``llama_decode``) is bit-identical to
llama.cpp's own greedy decoding. A verification pass over several tokens runs llama.cpp's batched
quantized kernels, which round differently (logits move by ~0.01-0.1 on a Q4_K_M model), so at a
near-tie a method may pick the other token: ``diagnose_divergence`` shows which case it is.
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from tools.engine.backend import Backend
from tools.engine.cpu_info import cpu_flags
from tools.engine.loop import decode
from tools.engine.params import DraftParams
from tools.engine.replay import diagnose_divergence  # noqa: F401 - part of this backend's API
from tools.engine.speculative import DraftStep, _Drafter, cost_gate, validate_k, validate_tree
from tools.engine.types import DecodeResult, GenerationSettings
from tools.errors import DependencyError, ModelIntegrityError, ModelNotFoundError, ParameterError

log = logging.getLogger(__name__)

LLAMA_CPP_PYTHON = "0.3.36"
_INSTALL_HINT = ('pip install -e ".[llamacpp]" (builds llama.cpp from source: several minutes the first time, '
                 "then pip's wheel cache makes it seconds)")
_NO_HIDDEN = ("the llama.cpp backend does not expose final hidden states or the LM head (llama.cpp gives hidden "
              "states only in embeddings mode, and its quantized LM head is not reproducible outside it)")


def _lib():
    """The llama_cpp module (imported on first use), llama.cpp logging only its errors."""
    try:
        import llama_cpp
    except ImportError as exc:
        raise DependencyError(f"llama-cpp-python is not installed ({exc})", hint=_INSTALL_HINT) from exc
    if not getattr(_lib, "ready", False):
        @llama_cpp.llama_log_callback
        def errors_only(level, text, user_data):  # ggml_log_level: 3 warn, 4 error
            if level == 4:
                sys.stderr.write(text.decode("utf-8", "replace"))

        _lib.log = errors_only  # llama.cpp keeps the pointer: keep the callback alive
        llama_cpp.llama_log_set(errors_only, ctypes.c_void_p(0))
        llama_cpp.llama_backend_init()
        _lib.ready = True
    return llama_cpp


def extra_buffers_work() -> bool:
    """Whether llama.cpp may use its extra weight buffers (repacked weights, AMX). Not on a CPU with AMX: the
    llama-cpp-python 0.3.36 build here picks AMX for quantized matmuls and dies of a general protection
    fault on its first tile instruction (``ldtilecfg`` in ``ggml_backend_amx_mul_mat``), killing the process."""
    return "amx_int8" not in cpu_flags()


library = _lib  # the llama_cpp module, quiet: for llama.cpp's other entry points (tools.engine.gguf_requant)


@dataclass
class _Tree:
    """The token tree of the last ``forward`` until ``crop``/``keep_positions`` picks its path."""

    start: int  # cache length before the tree
    parents: list[int]  # -1 for a root
    seqs: list[list[int]]  # sequence ids of each node (the paths through it); path 0 is sequence 0


@dataclass
class LlamaCppCache:
    """A llama.cpp KV cache (sequence 0 of the backend's context), as the decoders see it."""

    generation: int
    length: int = 0
    tree: _Tree | None = None
    branches: list[list[int]] = field(default_factory=list)  # per branch row: [sequence id, position, children]


def tree_of(visible: torch.Tensor, positions: list[int], start: int, max_paths: int) -> _Tree:
    """The tree behind ``visible`` [n, n], or ParameterError when it is not an ancestor pattern that
    sequence ids reproduce exactly (each node sees itself and its ancestors, parents first, positions
    = ``start`` + depth, at most ``max_paths`` root-to-leaf paths)."""
    vis = visible.to("cpu", torch.bool)
    n = vis.shape[0]
    eye = torch.eye(n, dtype=torch.bool)
    depth = vis.sum(1) - 1
    score = torch.where(vis & ~eye, depth[None, :], torch.full_like(vis, -1, dtype=depth.dtype))
    best, parent = score.max(1)
    parent = torch.where(best < 0, torch.full_like(parent, -1), parent)
    rebuilt = eye.clone()
    has = parent >= 0
    rebuilt[has] |= vis[parent[has]]
    ok = (bool(vis.diagonal().all()) and torch.equal(rebuilt, vis) and bool((parent < torch.arange(n)).all())
          and positions == (depth + start).tolist())
    if not ok:
        raise ParameterError("this attention pattern is not a token tree with positions = prefix + depth, the only "
                             "non-causal pattern the llama.cpp backend reproduces exactly (through sequence ids)",
                             hint="use --backend transformers for this method or parameter set")
    parents = parent.tolist()
    children: list[list[int]] = [[] for _ in range(n)]
    for i, p in enumerate(parents):
        if p >= 0:
            children[p].append(i)
    first = 0
    while children[first]:
        first = children[first][0]
    leaves = [first] + [i for i in range(n) if not children[i] and i != first]
    if len(leaves) > max_paths:
        raise ParameterError(f"the token tree has {len(leaves)} leaves; this llama.cpp context holds {max_paths} "
                             "sequences", hint="load the backend with a larger n_seq_max, or use a smaller tree")
    seqs: list[list[int]] = [[] for _ in range(n)]
    for s, leaf in enumerate(leaves):
        node = leaf
        while node >= 0:
            seqs[node].append(s)
            node = parents[node]
    return _Tree(start, parents, seqs)


class LlamaCppBackend(Backend):
    """A GGUF model run by llama.cpp (CPU) behind the Backend seam. See the module docstring."""

    engine = "llamacpp"

    def __init__(self, path: str | Path, *, n_ctx: int = 4096, n_threads: int | None = None, n_batch: int = 512,
                 n_seq_max: int = 64, flash_attn: bool = False):
        lib = self._lib = _lib()
        self.path = Path(path).expanduser()
        if not self.path.is_file():
            raise ModelNotFoundError(f"GGUF file {self.path} does not exist", hint="check the path")
        self.n_threads = n_threads or max(1, torch.get_num_threads())
        model_params = lib.llama_model_default_params()
        model_params.use_extra_bufts = extra_buffers_work()
        self._model = lib.llama_model_load_from_file(str(self.path).encode(), model_params)
        if not self._model:
            raise ModelIntegrityError(f"llama.cpp could not load {self.path}",
                                      hint="check that it is a complete GGUF file of an architecture llama.cpp knows")
        params = lib.llama_context_default_params()
        params.n_ctx, params.n_batch, params.n_ubatch = n_ctx, n_batch, n_batch
        params.n_seq_max = n_seq_max = min(n_seq_max, lib.llama_max_parallel_sequences())
        params.n_threads = params.n_threads_batch = self.n_threads
        params.kv_unified = True  # one KV store: sequences share prefix cells, a cell may carry several ids
        params.flash_attn_type = lib.LLAMA_FLASH_ATTN_TYPE_ENABLED if flash_attn else lib.LLAMA_FLASH_ATTN_TYPE_DISABLED
        params.no_perf = True
        self._ctx = lib.llama_init_from_model(self._model, params)
        if not self._ctx:
            lib.llama_model_free(self._model)
            self._model = None
            raise ParameterError(f"llama.cpp could not create a {n_ctx}-token context for {self.path}",
                                 hint="lower n_ctx")
        self._mem = lib.llama_get_memory(self._ctx)
        self._vocab = lib.llama_model_get_vocab(self._model)
        # llama.cpp may lower n_batch (to n_ctx) and round n_ctx: use what the context has
        self.n_ctx, self.n_batch, self.n_seq_max = lib.llama_n_ctx(self._ctx), lib.llama_n_batch(self._ctx), n_seq_max
        self.vocab_size = int(lib.llama_vocab_n_tokens(self._vocab))
        self.n_ctx_train = int(lib.llama_model_n_ctx_train(self._model))
        self.hidden_size = int(lib.llama_model_n_embd(self._model))
        self.device, self.dtype = torch.device("cpu"), torch.float32
        self._init_batch(self.n_batch, n_seq_max)
        self._generation = 0
        self._tokenizer = None

    def _init_batch(self, n: int, n_seq_max: int) -> None:
        lib = self._lib
        self._batch = lib.llama_batch_init(n, 0, n_seq_max)
        b = self._batch
        self._tok = np.ctypeslib.as_array(b.token, shape=(n,))
        self._pos = np.ctypeslib.as_array(b.pos, shape=(n,))
        self._nseq = np.ctypeslib.as_array(b.n_seq_id, shape=(n,))
        self._flags = np.ctypeslib.as_array(b.logits, shape=(n,))
        self._seq = [b.seq_id[i] for i in range(n)]
        self._nseq[:] = 1
        for ids in self._seq:
            ids[0] = 0
        self._dirty = 0  # batch rows whose sequence ids a tree changed

    def close(self) -> None:
        """Free the batch, the context and the model (also done when the backend is collected)."""
        lib = getattr(self, "_lib", None)
        if lib is None:
            return
        if getattr(self, "_batch", None) is not None:
            lib.llama_batch_free(self._batch)
            self._batch = None
        if getattr(self, "_ctx", None):
            lib.llama_free(self._ctx)
            self._ctx = None
        if getattr(self, "_model", None):
            lib.llama_model_free(self._model)
            self._model = None

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown may have torn ctypes down already
            pass

    # ------------------------------------------------------------------ cache
    def new_cache(self) -> LlamaCppCache:
        self._lib.llama_memory_clear(self._mem, False)
        self._generation += 1
        return LlamaCppCache(self._generation)

    def save_state(self, path: Path, ids: list[int]) -> None:
        """Write the cache (sequence 0, holding ``ids``) to ``path`` as llama.cpp's sequence state file."""
        tokens = (self._lib.llama_token * max(1, len(ids)))(*ids)
        if not self._lib.llama_state_seq_save_file(self._ctx, str(path).encode(), 0, tokens, len(ids)):
            raise OSError(f"llama.cpp could not write {path}")

    def load_state(self, path: Path, capacity: int) -> tuple[LlamaCppCache | None, list[int] | None]:
        """(a fresh cache holding the state saved at ``path``, its token ids; at most ``capacity``), or
        (None, None) where there is none that fits."""
        cache = self.new_cache()
        tokens = (self._lib.llama_token * (capacity + 1))()
        count = ctypes.c_size_t(0)
        if not path.is_file() or not self._lib.llama_state_seq_load_file(self._ctx, str(path).encode(), 0, tokens,
                                                                         capacity + 1, ctypes.byref(count)):
            self.new_cache()
            return None, None
        cache.length = int(count.value)
        return cache, list(tokens[: cache.length])

    def _check(self, cache) -> None:
        if not isinstance(cache, LlamaCppCache) or cache.generation != self._generation:
            raise ParameterError("this cache is not this llama.cpp backend's current cache (a backend holds one "
                                 "cache at a time: a later new_cache() replaced it)")

    def cache_length(self, cache) -> int:
        return cache.length

    def crop(self, cache, length: int) -> None:
        self._check(cache)
        if cache.branches:
            for s in sorted({row[0] for row in cache.branches}):
                self._lib.llama_memory_seq_rm(self._mem, s, -1, -1)
            cache.branches = []
        if cache.tree is not None:
            self.keep_positions(cache, cache.tree.start, torch.arange(max(0, length - cache.tree.start)))
            return
        if length < cache.length:
            self._lib.llama_memory_seq_rm(self._mem, 0, length, -1)
            cache.length = length

    def keep_positions(self, cache, start: int, keep: torch.Tensor) -> None:
        self._check(cache)
        keep = [int(k) for k in keep.tolist()]
        tree = cache.tree
        if tree is None:
            if keep != list(range(len(keep))):
                raise ParameterError("the llama.cpp backend keeps only a leading run of a causal chain, or a "
                                     "root-to-node path of the token tree it just verified")
            self.crop(cache, start + len(keep))
            return
        if start != tree.start or any(not 0 <= k < len(tree.parents) or tree.parents[k] != (keep[i - 1] if i else -1)
                                      for i, k in enumerate(keep)):
            raise ParameterError("keep_positions after a tree forward must keep a root-to-node path of that tree")
        lib, mem, end = self._lib, self._mem, start + len(keep)
        s = tree.seqs[keep[-1]][0] if keep else 0
        if s == 0:
            lib.llama_memory_seq_rm(mem, 0, end, -1)
        else:
            lib.llama_memory_seq_rm(mem, 0, start, -1)
            lib.llama_memory_seq_cp(mem, s, 0, start, end)
        lib.llama_memory_seq_keep(mem, 0)
        cache.length, cache.tree = end, None

    # ------------------------------------------------------------------ forward
    branches = True

    def forward_branches(self, ids, cache, positions, parents, bases) -> torch.Tensor:
        """Each branch is a sequence id of its own: a copy of the sequence's first ``base`` cells (or of its parent
        branch's cells up to the parent) that its rows are decoded into. A parent's first child continues its
        sequence; another child gets a new one, which the parent and its ancestors decoded in the same call carry
        too (a cell may hold several sequence ids)."""
        self._check(cache)
        if cache.tree is not None:
            raise ParameterError("after a tree forward, crop or keep_positions must pick its path first")
        lib, rows, n = self._lib, cache.branches, int(ids.shape[-1])
        first = len(rows)
        pos = [int(p) for p in positions.reshape(-1).tolist()]
        used = max((row[0] for row in rows), default=0)
        seqs: list[list[int]] = []
        for r, (parent, base) in enumerate(zip(parents, bases)):
            if parent >= first + r:
                raise ParameterError(f"branch row {first + r} cannot follow row {parent}, which comes after it")
            if parent >= 0 and not rows[parent][2]:
                s = rows[parent][0]  # the parent's first child: the same sequence, one position on
            else:
                used += 1
                if used >= self.n_seq_max:
                    raise ParameterError(f"this llama.cpp context holds {self.n_seq_max} sequences: too many branches",
                                         hint="grow fewer branches")
                s, above = used, parent
                while above >= first:  # ancestors decoded in this call carry the new sequence too
                    seqs[above - first].append(s)
                    above = rows[above][3]
                stem = base if parent < 0 else rows[parent][4]
                src, end = (0, stem) if above < 0 else (rows[above][0], rows[above][1] + 1)
                lib.llama_memory_seq_cp(self._mem, src, s, 0, end)
            if parent >= 0:
                rows[parent][2] += 1
            rows.append([s, pos[r], 0, parent, base if parent < 0 else rows[parent][4]])
            seqs.append([s])
        out = torch.empty(n, self.vocab_size, dtype=torch.float32)
        self._fill(ids.reshape(-1).cpu().numpy(), np.asarray(pos), seqs)
        self._run(out, list(range(n)), 0, n)
        return out

    def forward(self, ids, cache, positions, visible=None, rows=0) -> torch.Tensor:
        self._check(cache)
        if cache.tree is not None:
            raise ParameterError("after a tree forward, crop or keep_positions must pick its path first")
        if cache.branches:
            raise ParameterError("after forward_branches, crop must drop the branches first")
        n = int(ids.shape[-1])
        want = (list(range(n)) if isinstance(rows, int) and rows == 0 else
                list(range(max(0, n - rows), n)) if isinstance(rows, int) else [int(r) for r in rows.tolist()])
        out = torch.empty(len(want), self.vocab_size, dtype=torch.float32)
        tokens = ids.reshape(-1).cpu().numpy()
        if visible is None:
            pos0 = int(positions.reshape(-1)[0])
            if pos0 != cache.length:
                raise ParameterError(f"a causal forward must start at the cache length {cache.length}, got {pos0}")
            for lo in range(0, n, self.n_batch):
                hi = min(n, lo + self.n_batch)
                self._fill(tokens[lo:hi], np.arange(pos0 + lo, pos0 + hi), None)
                self._run(out, want, lo, hi)
                cache.length = pos0 + hi
            return out
        if n > self.n_batch:
            raise ParameterError(f"a token tree of {n} nodes exceeds this backend's batch of {self.n_batch}")
        pos = [int(p) for p in positions.reshape(-1).tolist()]
        tree = tree_of(visible, pos, cache.length, self.n_seq_max)
        for s in range(1, max(max(ss) for ss in tree.seqs) + 1):
            self._lib.llama_memory_seq_cp(self._mem, 0, s, -1, -1)
        self._fill(tokens, np.asarray(pos), tree.seqs)
        cache.tree = tree  # set before decoding: a failed decode leaves the cache to crop/keep
        self._run(out, want, 0, n)
        cache.length = tree.start + n
        return out

    def forward_hidden(self, ids, cache, positions) -> tuple[torch.Tensor, np.ndarray]:
        """A causal forward that also reads each token's last hidden state (llama.cpp's embeddings mode, on for
        this pass only): (the last token's logits, hidden states as tokens x hidden size). One batch at most."""
        n = int(ids.shape[-1])
        if n > self.n_batch:
            raise ParameterError(f"{n} tokens exceed this backend's batch of {self.n_batch} for hidden states")
        self._check(cache)
        pos0 = int(positions.reshape(-1)[0])
        if cache.tree is not None or cache.branches or pos0 != cache.length:
            raise ParameterError(f"hidden states are read by a causal forward at the cache length {cache.length}")
        lib = self._lib
        self._fill(ids.reshape(-1).cpu().numpy(), np.arange(pos0, pos0 + n), None)
        self._flags[:n] = 1  # every token an output: its hidden state is kept (only the last one's logits are read)
        lib.llama_set_embeddings(self._ctx, True)
        try:
            code = lib.llama_decode(self._ctx, self._batch)
            if code != 0:
                raise ParameterError(f"llama_decode failed with code {code} ({n} tokens, context {self.n_ctx})")
            cache.length = pos0 + n
            hidden = np.ctypeslib.as_array(lib.llama_get_embeddings(self._ctx),  # every row an output, in order
                                           shape=(n, self.hidden_size)).copy()
            last = torch.from_numpy(np.ctypeslib.as_array(lib.llama_get_logits_ith(self._ctx, n - 1),
                                                          shape=(self.vocab_size,)).copy())
        finally:
            lib.llama_set_embeddings(self._ctx, False)
        return last, hidden

    def _fill(self, tokens: np.ndarray, pos: np.ndarray, seqs: list[list[int]] | None) -> None:
        n = len(tokens)
        self._batch.n_tokens = n
        self._tok[:n] = tokens
        self._pos[:n] = pos
        if self._dirty:
            self._nseq[: self._dirty] = 1
            for i in range(self._dirty):
                self._seq[i][0] = 0
            self._dirty = 0
        if seqs is not None:
            for i, ss in enumerate(seqs):
                row = self._seq[i]
                for j, s in enumerate(ss):
                    row[j] = s
                self._nseq[i] = len(ss)
            self._dirty = n

    def _run(self, out: torch.Tensor, want: list[int], lo: int, hi: int) -> None:
        """Decode the filled batch (rows lo..hi of the forward) and copy the wanted rows' logits to ``out``."""
        lib = self._lib
        here = [(k, r - lo) for k, r in enumerate(want) if lo <= r < hi]
        flags = self._flags
        flags[: hi - lo] = 0
        for _, r in here:
            flags[r] = 1
        code = lib.llama_decode(self._ctx, self._batch)
        if code != 0:
            raise ParameterError(f"llama_decode failed with code {code} ({hi - lo} tokens, context {self.n_ctx})",
                                 hint="1 means the KV cache is full: load the backend with a larger n_ctx")
        if not here:
            return
        rows = sorted({r for _, r in here})
        block = np.ctypeslib.as_array(lib.llama_get_logits(self._ctx), shape=(len(rows), self.vocab_size))
        dest = out.numpy()
        ks = [k for k, _ in here]
        if ks == list(range(ks[0], ks[0] + len(ks))) and [r for _, r in here] == rows:
            dest[ks[0]: ks[0] + len(ks)] = block  # the usual case: wanted rows ascending, one copy
        else:
            index = {r: j for j, r in enumerate(rows)}
            dest[ks] = block[[index[r] for _, r in here]]

    # ------------------------------------------------------------------ what llama.cpp does not expose
    def hidden(self, ids, cache, positions, visible=None) -> torch.Tensor:
        raise ParameterError(_NO_HIDDEN, hint="Medusa and EAGLE heads run on --backend transformers")

    def lm_head(self, hidden: torch.Tensor) -> torch.Tensor:
        raise ParameterError(_NO_HIDDEN, hint="Medusa and EAGLE heads run on --backend transformers")

    def head_rows(self, token_ids: torch.Tensor) -> torch.Tensor | None:
        return None  # a trimmed draft vocabulary falls back to the full one (output unchanged)

    @property
    def tokenizer(self) -> GGUFTokenizer:
        """llama.cpp's own tokenizer of this GGUF file (built on first use)."""
        if self._tokenizer is None:
            self._tokenizer = GGUFTokenizer(self)
        return self._tokenizer

    def meta(self, key: str) -> str | None:
        """A GGUF metadata value as a string (None when absent)."""
        buf = ctypes.create_string_buffer(4096)
        n = self._lib.llama_model_meta_val_str(self._model, key.encode(), buf, len(buf))
        return buf.value.decode("utf-8", "replace") if n >= 0 else None


class GGUFTokenizer:
    """The few tokenizer calls specpilot makes (``tok(text)["input_ids"]``, ``decode``, ``eos_token_id``,
    ``len``, ``get_vocab``), answered by llama.cpp's tokenizer of the GGUF file. No chat template: for
    chat prompts use the transformers tokenizer of the same model (same ids for the Qwen and SmolLM2 files)."""

    chat_template = None

    def __init__(self, backend: LlamaCppBackend):
        self._lib, self._vocab = backend._lib, backend._vocab
        self._backend = backend  # keeps the vocabulary's model alive
        self.eos_token_id = int(self._lib.llama_vocab_eos(self._vocab))
        self.model_max_length = backend.n_ctx
        self._pieces: dict[str, int] | None = None

    def __len__(self) -> int:
        return int(self._lib.llama_vocab_n_tokens(self._vocab))

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        data = text.encode("utf-8")
        size = len(data) + 16
        buf = (self._lib.llama_token * size)()
        n = self._lib.llama_tokenize(self._vocab, data, len(data), buf, size, add_special_tokens, True)
        if n < 0:
            size = -n
            buf = (self._lib.llama_token * size)()
            n = self._lib.llama_tokenize(self._vocab, data, len(data), buf, size, add_special_tokens, True)
        return list(buf[:n])

    def __call__(self, text: str, add_special_tokens: bool = True) -> dict:
        return {"input_ids": self.encode(text, add_special_tokens)}

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        ids = [int(t) for t in ids]
        arr = (self._lib.llama_token * max(1, len(ids)))(*ids)
        size = 16 * len(ids) + 16
        for _ in range(2):
            buf = ctypes.create_string_buffer(size)
            n = self._lib.llama_detokenize(self._vocab, arr, len(ids), buf, size, skip_special_tokens,
                                           not skip_special_tokens)
            if n >= 0:
                return buf.raw[:n].decode("utf-8", "replace")
            size = -n
        raise ParameterError("llama.cpp could not detokenize these ids")

    def pieces(self, saved: Path | None = None) -> list[bytes]:
        """Each token's bytes as llama.cpp writes it, a control token (or a user-defined one written ``<...>``)
        marked by a leading 0xff byte, as llguidance marks special tokens. Reading 150k tokens one call at a
        time takes a fraction of a second, so ``saved`` (a file named for this model's state) keeps them once read."""
        kept = _read_pieces(saved, len(self)) if saved is not None else None
        if kept is not None:
            return kept
        lib, buf, out = self._lib, ctypes.create_string_buffer(16 * 1024), []
        special = lib.LLAMA_TOKEN_ATTR_CONTROL
        for token in range(len(self)):
            n = lib.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, True)
            piece = buf[:n] if n > 0 else b""  # only the piece's bytes, not a copy of the whole buffer
            attr = lib.llama_vocab_get_attr(self._vocab, token)
            if attr & special or (attr & lib.LLAMA_TOKEN_ATTR_USER_DEFINED and piece[:1] == b"<" and piece[-1:] == b">"):
                piece = b"\xff" + piece
            out.append(piece)
        if saved is not None:
            _write_pieces(saved, out)
        return out

    def grammar_tokenizer(self, saved: Path | None = None, n_vocab: int | None = None):
        """llguidance's tokenizer over this vocabulary, tokenizing with llama.cpp (:meth:`pieces`, ``saved``)."""
        from llguidance import LLTokenizer

        pieces = self.pieces(saved)
        pieces += [b""] * max(0, (n_vocab or 0) - len(pieces))
        tokenize = ctypes.cast(self._lib.llama_cpp._lib.llama_tokenize, ctypes.c_void_p).value
        return LLTokenizer.from_llamacpp(tokens=pieces, vocab_ptr=self._vocab, tokenize_fptr=tokenize,
                                         eos_token=self.eos_token_id, slices=[])

    def stop_ids(self) -> list[int]:
        """Every end-of-generation id of the vocabulary (EOS, EOT, <|im_end|>, ...)."""
        is_eog = self._lib.llama_vocab_is_eog
        return [i for i in range(len(self)) if is_eog(self._vocab, i)]

    def get_vocab(self) -> dict[str, int]:
        if self._pieces is None:
            text = self._lib.llama_vocab_get_text
            self._pieces = {text(self._vocab, i).decode("utf-8", "replace"): i for i in range(len(self))}
        return self._pieces


def _read_pieces(path: Path, count: int) -> list[bytes] | None:
    """The token pieces saved in ``path`` (GGUFTokenizer.pieces), or None where there are none of ``count``
    tokens to read (no file, or one that is partial or of another vocabulary: they are read again)."""
    try:
        with np.load(path) as data:
            ends, blob = data["ends"], data["blob"].tobytes()
    except (OSError, ValueError, KeyError):
        return None
    if len(ends) != count:
        return None
    return [blob[a:b] for a, b in zip([0, *ends[:-1].tolist()], ends.tolist())]


def _write_pieces(path: Path, pieces: list[bytes]) -> None:
    """Save token pieces to ``path`` (each process writes its own partial file, then renames it); a folder that
    cannot be written leaves them to be read again next time."""
    tmp = path.with_name(f"{path.stem}.{os.getpid()}.partial.npz")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        np.savez(tmp, ends=np.cumsum([len(p) for p in pieces]), blob=np.frombuffer(b"".join(pieces), np.uint8))
        tmp.replace(path)
    except OSError as exc:
        log.warning("could not save the token pieces to %s: %s", path, exc)
        tmp.unlink(missing_ok=True)


def load_gguf(path: str | Path, n_ctx: int = 4096, n_threads: int | None = None, **options) -> LlamaCppBackend:
    """A LlamaCppBackend for a GGUF file (``options``: n_batch, n_seq_max, flash_attn)."""
    return LlamaCppBackend(path, n_ctx=n_ctx, n_threads=n_threads, **options)


@dataclass
class LlamaCppModel:
    """What tools.engine.methods.MethodContext and tools.bench read from a loaded model (the fields of
    tools.models.LoadedModel), with ``model`` a LlamaCppBackend: the decoders take it as their Backend."""

    ref: str
    model: LlamaCppBackend
    tokenizer: object
    dtype: str = "gguf"
    dtype_reason: str = "llama.cpp runs the GGUF file's own quantized weights"
    device: str = "cpu"
    source: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def vocab_size(self) -> int:
        return self.model.vocab_size


def as_loaded(backend: LlamaCppBackend, ref: str | None = None, tokenizer=None) -> LlamaCppModel:
    """Wrap a backend as a LoadedModel-like object (``tokenizer`` default: llama.cpp's own)."""
    return LlamaCppModel(ref=ref or str(backend.path), model=backend, tokenizer=tokenizer or backend.tokenizer,
                         source=str(backend.path), extra={"threads": backend.n_threads, "backend": "llamacpp",
                                                          "n_ctx": backend.n_ctx})


def draft_generate(target: LlamaCppBackend, draft: LlamaCppBackend, prompt_ids, settings: GenerationSettings,
                   params: DraftParams | None = None) -> DecodeResult:
    """Draft-model speculative decoding with both models on llama.cpp (the engine's DraftStep, chain
    drafting). ``draft_quant`` and ``draft_vocab`` do not apply (the GGUF files are already quantized;
    no LM-head rows): the run records them as "none"/None."""
    p = params or DraftParams()
    k = validate_k(p.k)
    k_max = validate_k(p.k_max) if p.k_max is not None else min(16, 2 * k)
    if target.vocab_size != draft.vocab_size:
        raise ParameterError(f"the target's vocabulary has {target.vocab_size} tokens, the draft's {draft.vocab_size}",
                             hint="choose a draft GGUF of the same model family")
    n_vocab = target.vocab_size
    drafter = _Drafter(draft, n_vocab, n_vocab, lookup=p.draft_lookup)
    step = DraftStep(target, drafter, n_vocab, settings, k=k, k_max=max(k, k_max),
                     adaptive_k=p.adaptive_k, confidence=p.draft_confidence, draft_vocab=None, draft_quant="none",
                     gate=cost_gate(p.pass_costs, p.draft_cost), tree=validate_tree(p.draft_tree),
                     tree_lookup=p.tree_lookup)
    return decode(target, prompt_ids, settings, step, "draft")


class LlamaReference:
    """llama.cpp's own decoding through llama-cpp-python's high-level ``Llama``: plain (the reference the
    backend's outputs and speed are checked against, and the "llama.cpp plain" peer), or with
    ``prompt_lookup`` = (max n-gram size, draft tokens) its ``LlamaPromptLookupDecoding`` draft mode (which
    needs logits for every position: ``logits_all``, an n_ctx x vocabulary float32 array). llama.cpp's other
    speculative modes (draft-simple, ngram-simple, ...) live in its ``common`` library, which llama-cpp-python
    does not bind (only libllama): they cannot be run from Python."""

    def __init__(self, path: str | Path, n_ctx: int = 4096, n_threads: int | None = None, n_batch: int = 512,
                 prompt_lookup: tuple[int, int] | None = None):
        lib = _lib()
        threads = n_threads or max(1, torch.get_num_threads())
        drafter = lib.llama_speculative.LlamaPromptLookupDecoding(*prompt_lookup) if prompt_lookup else None
        self.n_ctx = n_ctx
        self.llm = lib.Llama(model_path=str(path), n_ctx=n_ctx, n_batch=n_batch, n_ubatch=n_batch, n_threads=threads,
                             n_threads_batch=threads, draft_model=drafter, logits_all=drafter is not None,
                             verbose=False)

    def greedy(self, prompt_ids, max_new_tokens: int, eos_token_ids=(), temperature: float = 0.0, top_p: float = 1.0,
               top_k: int = 0, seed: int = 0) -> tuple[list[int], float]:
        """(new token ids, wall seconds from the start to the last token), stopping after an EOS id; greedy
        unless ``temperature`` > 0 (then llama.cpp's top-k / top-p / temperature sampler, seeded)."""
        eos, out = set(eos_token_ids), []
        self.llm.reset()  # no prompt reuse from the previous call: every call processes the whole prompt
        self.llm.set_seed(seed)
        sampling = (dict(top_k=1, temp=0.0) if temperature == 0 else
                    dict(top_k=top_k, top_p=top_p, min_p=0.0, temp=temperature))
        t0 = time.perf_counter()
        for token in self.llm.generate(list(prompt_ids), reset=True, repeat_penalty=1.0, **sampling):
            out.append(int(token))
            if len(out) >= max_new_tokens or token in eos:
                break
        return out, time.perf_counter() - t0
