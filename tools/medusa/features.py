"""The target's final hidden states over training text, cached one chunk at a time (resumable).

EAGLE's draft head learns from the target's own features: at every position of the training text,
the final hidden state (after the last norm, what the LM head reads) and the target's greedy next
token. Running a 1.5B target over tens of thousands of tokens takes the better part of an hour on a
small CPU, so each chunk is written to its own shard as soon as it is done; a run that is stopped
and started again computes only the missing chunks. A shard is named by a hash of its chunk's token
ids and the folder by a fingerprint of the model, so a run over more (or fewer) chunks of the same
text reuses every shard it shares with an earlier run, and another model never does.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file



def shard_name(chunk: list[int], layers: tuple[int, ...] = ()) -> str:
    h = hashlib.sha256(torch.tensor(chunk, dtype=torch.int64).numpy().tobytes())
    if layers:  # shards that also hold inner layers are other files (the final-state-only ones stay valid)
        h.update(("layers" + ",".join(map(str, layers))).encode())
    return f"chunk-{h.hexdigest()[:20]}.safetensors"


@torch.inference_mode()
def chunk_features(model, chunk: list[int], layers: tuple[int, ...] = ()) -> dict[str, torch.Tensor]:
    """One shard: the target's final hidden states over ``chunk``, its greedy next token at each position, and
    the tokens themselves; with ``layers``, also the hidden states entering those decoder layers
    (``layer{i}``: transformers' ``hidden_states[i]``, 0 the embeddings) in bfloat16, for fused heads."""
    head = model.get_output_embeddings()
    ids = torch.tensor([chunk], device=model.device)
    out = model.base_model(input_ids=ids, use_cache=False, output_hidden_states=bool(layers))
    hidden = out.last_hidden_state[0]
    greedy = torch.cat([head(hidden[i: i + 128]).argmax(-1) for i in range(0, hidden.shape[0], 128)])
    shard = {"hidden": hidden.float().cpu().contiguous(), "greedy": greedy.cpu(),
             "tokens": torch.tensor(chunk, dtype=torch.long)}
    for i in layers:
        shard[f"layer{i}"] = out.hidden_states[i][0].to(torch.bfloat16).cpu().contiguous()
    return shard


def cache_chunk_features(model, chunks: list[list[int]], folder: Path,
                         progress: Callable[[int, int], None] | None = None, layers: tuple[int, ...] = ()) -> list[Path]:
    """Make sure ``folder`` holds one shard per chunk (hidden [n, h] float32, greedy [n], tokens [n]);
    compute only the missing ones. ``progress(done, total)`` is called after each chunk."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / shard_name(chunk, layers) for chunk in chunks]
    for i, (chunk, path) in enumerate(zip(chunks, paths)):
        if not path.exists():
            tmp = path.with_suffix(".tmp")
            save_file(chunk_features(model, chunk, layers), str(tmp))
            os.replace(tmp, path)
        if progress:
            progress(i + 1, len(chunks))
    return paths


def load_chunk_features(paths: list[Path]) -> list[dict[str, torch.Tensor]]:
    """The shards written by :func:`cache_chunk_features`, in order."""
    return [load_file(str(p)) for p in paths]
