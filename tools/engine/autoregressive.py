"""The baseline: a plain KV-cached autoregressive loop (greedy, temperature, top-p, top-k, seed, EOS).

Its speed is checked against transformers' own ``generate`` (benchmarks/baseline.py), so the
speedups specpilot reports never come from a handicapped baseline.
"""

from __future__ import annotations

import time

import torch

from tools.engine import kv
from tools.engine.sampling import greedy_tokens, make_generator, sample, warp_probs
from tools.engine.types import DecodeResult, GenerationSettings
from tools.errors import ParameterError


def as_input_ids(prompt_ids, device) -> torch.Tensor:
    """Return prompt ids as a LongTensor [1, n] on ``device``; an empty prompt is a ParameterError."""
    ids = torch.as_tensor(prompt_ids, dtype=torch.long, device=device).reshape(1, -1)
    if ids.shape[1] == 0:
        raise ParameterError("the prompt is empty", hint="give at least one token")
    return ids


def next_token(logits: torch.Tensor, settings: GenerationSettings, generator) -> int:
    """Pick the next token from one row of logits: argmax when greedy, else a warped sample."""
    if settings.greedy:
        return int(greedy_tokens(logits))
    return int(sample(warp_probs(logits, settings), generator))


def sync(device) -> None:
    """Wait for queued GPU work so wall-clock timings are honest (no-op on CPU)."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def prefill(model, input_ids: torch.Tensor, cache) -> torch.Tensor:
    """Run the prompt through the model into ``cache``; return the last position's logits [vocab]."""
    n = input_ids.shape[1]
    positions = torch.arange(n, device=input_ids.device)[None]
    return kv.forward(model, input_ids, cache, position_ids=positions, logits_to_keep=1)[-1]


def decode_one_token(model, token: int, position: int, cache) -> torch.Tensor:
    """Feed one token at ``position``; return the logits [vocab] for the next one."""
    device = model.device
    ids = torch.tensor([[token]], device=device)
    pos = torch.tensor([[position]], device=device)
    return kv.forward(model, ids, cache, position_ids=pos)[-1]


@torch.inference_mode()
def generate(model, prompt_ids, settings: GenerationSettings) -> DecodeResult:
    """Generate up to ``settings.max_new_tokens`` tokens one at a time; return a DecodeResult."""
    device = model.device
    generator = make_generator(settings, device)
    eos = set(settings.eos_token_ids)
    input_ids = as_input_ids(prompt_ids, device)
    cache = kv.new_cache(model)

    t0 = time.perf_counter()
    logits = prefill(model, input_ids, cache)
    token = next_token(logits, settings, generator)
    t1 = time.perf_counter()

    out = [token]
    position = input_ids.shape[1]
    stopped = "eos" if token in eos else "length"
    while stopped == "length" and len(out) < settings.max_new_tokens:
        logits = decode_one_token(model, token, position, cache)
        token = next_token(logits, settings, generator)
        out.append(token)
        position += 1
        if token in eos:
            stopped = "eos"
    sync(device)
    t2 = time.perf_counter()
    return DecodeResult(
        method="baseline",
        output_ids=out,
        prefill_s=t1 - t0,
        decode_s=t2 - t1,
        steps=len(out) - 1,
        target_forwards=len(out),
        accepted_per_step=[1] * (len(out) - 1),
        stopped_by=stopped,
    )
