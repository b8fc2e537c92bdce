"""The narrow seam between the decoders and a model: everything a decoding method asks of a model.

Decoders (tools.engine.autoregressive, prompt_lookup, lookahead, speculative, medusa) and the loop
(tools.engine.loop) talk to a model only through ``Backend``: a KV cache they can create, measure,
crop and compact, and one forward over new tokens at explicit positions, optionally under a tree
visibility pattern, returning logits (all rows, the last few or chosen rows) or final hidden states.
``TransformersBackend`` implements it over a transformers causal LM (tools.engine.kv); a second
backend (llama.cpp, say) implements the same methods and every decoder runs on it unchanged.

``as_backend`` accepts a Backend, a transformers model or a ``tools.models.LoadedModel`` (anything
with ``.model`` and ``.tokenizer``), so existing callers keep passing models.
"""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from functools import lru_cache
from typing import Any

import torch

from tools.engine import kv
from tools.errors import ParameterError


class Backend(ABC):
    """What the decoders need from a model. Caches are opaque objects owned by the backend.

    ``visible`` (bool [n, n], on ``device``) says which of the n new tokens each new token attends
    to; every new token also sees the whole cached prefix. None means causal. ``rows`` picks logits
    rows: 0 all, an int the last that many, a LongTensor those rows (in that order).
    """

    device: torch.device
    dtype: torch.dtype
    vocab_size: int  # rows of the LM head (logits width)
    engine = "transformers"  # what runs the model ("llamacpp": tools.engine.llamacpp)

    @abstractmethod
    def new_cache(self) -> Any: ...

    @abstractmethod
    def cache_length(self, cache) -> int: ...

    @abstractmethod
    def crop(self, cache, length: int) -> None:
        """Drop cached positions past ``length``."""

    @abstractmethod
    def keep_positions(self, cache, start: int, keep: torch.Tensor) -> None:
        """Keep positions [0, start) and then ``start + keep`` (ascending offsets), dropping the rest."""

    @abstractmethod
    def forward(self, ids: torch.Tensor, cache, positions: torch.Tensor, visible: torch.Tensor | None = None,
                rows: int | torch.Tensor = 0) -> torch.Tensor:
        """Run ids [1, n] at positions [1, n] into ``cache``; return logits [rows kept, vocab]."""

    branches = False  # whether ``forward_branches`` works

    def forward_branches(self, ids: torch.Tensor, cache, positions: torch.Tensor, parents: list[int],
                         bases: list[int]) -> torch.Tensor:
        """Grow branches beside the cached sequence (a draft tree's other paths) without changing it: new row r
        follows the cache's first ``bases[r]`` positions when ``parents[r]`` < 0, else the branch row ``parents[r]``
        (rows numbered over every call since the last ``crop``, this call's earlier rows included); ids [1, n] at
        positions [1, n]. Returns logits [n, vocab]. ``crop`` drops every branch (and must come before the next
        ``forward``)."""
        raise ParameterError("this backend does not grow branches beside its cache")

    @abstractmethod
    def hidden(self, ids: torch.Tensor, cache, positions: torch.Tensor,
               visible: torch.Tensor | None = None) -> torch.Tensor:
        """Like ``forward`` but return the final hidden states [n, hidden] (after the final norm)."""

    def hidden_layers(self, ids: torch.Tensor, cache, positions: torch.Tensor, visible: torch.Tensor | None,
                      layers: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
        """Like ``hidden``, and also the states entering decoder ``layers`` (0: the embeddings) side by side
        [n, len(layers) * hidden], for a head that fuses them."""
        raise ParameterError("this backend does not give its inner layers' hidden states",
                             hint="run a head that fuses inner layers on --backend transformers")

    @abstractmethod
    def lm_head(self, hidden: torch.Tensor) -> torch.Tensor:
        """The model's logits [rows, vocab] for final hidden states [rows, hidden]."""

    def head_rows(self, token_ids: torch.Tensor) -> torch.Tensor | None:
        """LM-head weight rows [len(token_ids), hidden] when logits are exactly ``hidden @ rows.T``
        (so a caller may score a subset of the vocabulary); None when the head is not that simple."""
        return None

    def embed(self, ids: torch.Tensor) -> torch.Tensor | None:
        """The model's input embeddings [1, n, hidden] of ids [1, n]; None when the backend has none to give."""
        return None

    def sync(self) -> None:
        """Wait for queued device work, so wall-clock timings are honest (no-op on a CPU)."""
        if self.device.type == "cuda":
            torch.cuda.synchronize()


@lru_cache(maxsize=None)
def _takes_logit_rows(forward_cls: type) -> bool:
    return "logits_to_keep" in inspect.signature(forward_cls.forward).parameters


class TransformersBackend(Backend):
    """A transformers causal LM behind the Backend seam (DynamicCache, public forward, 4-D masks)."""

    def __init__(self, model):
        self.model = model
        self.device = torch.device(model.device)
        self.dtype = getattr(model, "dtype", None) or next(model.parameters()).dtype
        head = model.get_output_embeddings()
        rows = getattr(head, "out_features", None)  # also on an int8 (dynamically quantized) head
        self.vocab_size = int(rows if rows is not None else head.weight.shape[0])
        self._row_select = _takes_logit_rows(type(model))

    def new_cache(self):
        return kv.new_cache(self.model)

    def cache_length(self, cache) -> int:
        return kv.cache_length(cache)

    branches = True

    def crop(self, cache, length: int) -> None:
        grown = getattr(cache, "_branches", None)
        if grown is not None:  # branch rows sit after the sequence: drop them with whatever else goes
            length = min(length, grown[0])
            cache._branches = None
        kv.crop(cache, length)

    def keep_positions(self, cache, start: int, keep: torch.Tensor) -> None:
        kv.keep_positions(cache, start, keep)

    def forward_branches(self, ids, cache, positions, parents, bases) -> torch.Tensor:
        grown = getattr(cache, "_branches", None)
        if grown is None:  # (the sequence's length, per branch row: the sequence positions it follows, its rows)
            grown = cache._branches = (kv.cache_length(cache), [])
        stem, rows = grown
        first, n = len(rows), int(ids.shape[-1])
        allowed = torch.zeros(n, stem + first + n, dtype=torch.bool)
        for r, (parent, base) in enumerate(zip(parents, bases)):
            if parent >= first + r:
                raise ParameterError(f"branch row {first + r} cannot follow row {parent}, which comes after it")
            base, path = (base, []) if parent < 0 else rows[parent]
            rows.append((base, path + [first + r]))
            allowed[r, :base] = True
            allowed[r, [stem + j for j in rows[-1][1]]] = True
        mask = kv.tree_mask(stem + first, allowed.to(self.device), self.dtype)
        return kv.forward(self.model, ids, cache, position_ids=positions, attention_mask=mask)

    def _mask(self, cache, visible: torch.Tensor | None) -> torch.Tensor | None:
        return None if visible is None else kv.tree_mask(kv.cache_length(cache), visible, self.dtype)

    def forward(self, ids, cache, positions, visible=None, rows=0) -> torch.Tensor:
        if getattr(cache, "_branches", None) is not None:
            raise ParameterError("after forward_branches, crop must drop the branches first")
        mask = self._mask(cache, visible)
        if self._row_select or (isinstance(rows, int) and rows == 0):
            return kv.forward(self.model, ids, cache, position_ids=positions, attention_mask=mask, logits_to_keep=rows)
        logits = kv.forward(self.model, ids, cache, position_ids=positions, attention_mask=mask)
        return logits[-rows:] if isinstance(rows, int) else logits.index_select(0, rows)

    def hidden(self, ids, cache, positions, visible=None) -> torch.Tensor:
        return kv.hidden_forward(self.model, ids, cache, position_ids=positions,
                                 attention_mask=self._mask(cache, visible))

    def hidden_layers(self, ids, cache, positions, visible, layers) -> tuple[torch.Tensor, torch.Tensor]:
        return kv.hidden_forward(self.model, ids, cache, position_ids=positions,
                                 attention_mask=self._mask(cache, visible), layers=layers)

    def lm_head(self, hidden: torch.Tensor) -> torch.Tensor:
        logits = self.model.get_output_embeddings()(hidden)
        cap = getattr(self.model.config, "final_logit_softcapping", None)
        return torch.tanh(logits / cap) * cap if cap else logits

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        return self.model.get_input_embeddings()(ids)

    def head_rows(self, token_ids: torch.Tensor) -> torch.Tensor | None:
        head = self.model.get_output_embeddings()
        cfg = self.model.config
        if not (isinstance(head, torch.nn.Linear) and head.bias is None
                and getattr(cfg, "final_logit_softcapping", None) is None
                and getattr(cfg, "logit_scale", None) is None):
            return None
        kept = getattr(head, "_picked_rows", None)  # a packed head rebuilds its dense weight to be read (0.3 s)
        if kept is not None and kept[0].shape == token_ids.shape and torch.equal(kept[0], token_ids):
            return kept[1]
        rows = head.weight.index_select(0, token_ids).contiguous()
        head._picked_rows = (token_ids.clone(), rows)  # the next run's rows (an EAGLE head's vocabulary) are the same
        return rows


def unwrap(model_or_loaded):
    """Accept a transformers model or a LoadedModel (``.model`` and ``.tokenizer``); return (model, tokenizer)."""
    if hasattr(model_or_loaded, "model") and hasattr(model_or_loaded, "tokenizer"):
        return model_or_loaded.model, model_or_loaded.tokenizer
    return model_or_loaded, None


def as_backend(model_or_loaded_or_backend) -> Backend:
    """A Backend for a Backend (returned as is), a transformers model or a LoadedModel."""
    if isinstance(model_or_loaded_or_backend, Backend):
        return model_or_loaded_or_backend
    return TransformersBackend(unwrap(model_or_loaded_or_backend)[0])
