"""KV-cache helpers over transformers' DynamicCache, and the model-forward calls: the transformers
side of tools.engine.backend.TransformersBackend (decoders go through the backend, not through here).

Methods only use the public forward: ``model(input_ids, attention_mask (2-D or 4-D), position_ids,
cache, use_cache=True)``. Older transformers name the cache argument ``past_key_values``.
"""

from __future__ import annotations

import inspect
from functools import lru_cache
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:  # transformers is imported where a cache is made: the llama.cpp path never loads it
    from transformers import DynamicCache


@lru_cache(maxsize=None)
def _cache_kwarg_for(forward_cls: type) -> str:
    params = inspect.signature(forward_cls.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def new_cache(model) -> DynamicCache:
    """Return an empty DynamicCache for ``model``."""
    from transformers import DynamicCache

    return DynamicCache(config=model.config)


def cache_length(cache: DynamicCache) -> int:
    """Number of positions held in the cache."""
    return cache.get_seq_length()


def crop(cache: DynamicCache, length: int) -> None:
    """Drop cached positions past ``length`` (in place)."""
    extra = cache.get_seq_length() - length
    if extra > 0:
        cache.crop(-extra)


def keep_positions(cache: DynamicCache, start: int, keep: torch.Tensor) -> None:
    """Keep positions [0, start) and then ``start + keep`` (ascending offsets), dropping the rest.

    Used after tree or multi-branch verification, where the accepted path is scattered. The kept
    entries are moved down in place (``keep[i] >= i``), so the cost is that of the few kept
    positions, not a copy of the whole cache.
    """
    n = keep.numel()
    for layer in cache.layers:
        if not getattr(layer, "is_initialized", True) or layer.keys is None or layer.keys.numel() == 0:
            continue
        idx = keep.to(layer.keys.device) + start
        kept_k = layer.keys.index_select(-2, idx)  # gathered first: the writes below may overlap the sources
        kept_v = layer.values.index_select(-2, idx)
        layer.keys[..., start: start + n, :] = kept_k
        layer.values[..., start: start + n, :] = kept_v
        layer.keys = layer.keys[..., : start + n, :]
        layer.values = layer.values[..., : start + n, :]


def forward(
    model,
    input_ids: torch.Tensor,
    cache: DynamicCache,
    position_ids: torch.Tensor | None = None,
    attention_mask: torch.Tensor | None = None,
    logits_to_keep: int | torch.Tensor = 0,
) -> torch.Tensor:
    """Run the causal LM over ``input_ids`` [1, n] with ``cache``; return logits [rows kept, vocab].

    ``logits_to_keep``: 0 keeps every row, an int the last that many, a LongTensor those rows.
    """
    kwargs = {_cache_kwarg_for(type(model)): cache}
    if not (isinstance(logits_to_keep, int) and logits_to_keep == 0):
        kwargs["logits_to_keep"] = logits_to_keep
    out = model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids,
        use_cache=True,
        **kwargs,
    )
    return out.logits[0]


def hidden_forward(
    model,
    input_ids: torch.Tensor,
    cache: DynamicCache,
    position_ids: torch.Tensor | None = None,
    attention_mask: torch.Tensor | None = None,
    layers: tuple[int, ...] = (),
):
    """Run the model's base (no LM head) and return the final hidden states [n, hidden]; with ``layers``,
    (those, the states entering those decoder layers side by side [n, len(layers) * hidden])."""
    base = model.base_model
    kwargs = {_cache_kwarg_for(type(base)): cache}
    out = base(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=True,
               output_hidden_states=bool(layers), **kwargs)
    if not layers:
        return out.last_hidden_state[0]
    return out.last_hidden_state[0], torch.cat([out.hidden_states[i][0] for i in layers], dim=-1)


def tree_mask(prefix_len: int, visible: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """4-D float attention mask [1, 1, n, prefix_len + n]: the prefix is visible to every new token,
    and new token i sees new token j where ``visible[i, j]`` (bool [n, n]) is True. A ``visible`` of
    [n, prefix_len + n] says it for the cached positions too."""
    n = visible.shape[0]
    if visible.shape[1] == prefix_len + n and prefix_len:
        allowed = visible
    else:
        allowed = torch.ones(n, prefix_len + n, dtype=torch.bool, device=visible.device)
        allowed[:, prefix_len:] = visible
    mask = torch.zeros(n, prefix_len + n, dtype=dtype, device=visible.device)
    mask.masked_fill_(~allowed, torch.finfo(dtype).min)
    return mask[None, None]
