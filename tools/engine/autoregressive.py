"""The baseline: a plain KV-cached autoregressive loop (greedy, temperature, top-p, top-k, seed, EOS).

Its speed is checked against transformers' own ``generate`` (benchmarks/scripts/baseline.py), so the
speedups specpilot reports never come from a handicapped baseline. It runs in the same loop as
every accelerated method (tools.engine.loop), so all are timed alike.
"""

from __future__ import annotations

import torch

from tools.engine.backend import Backend, as_backend
from tools.engine.loop import DecodeStep, as_input_ids, decode, next_token, prefill, sync
from tools.engine.sampling import make_generator
from tools.engine.types import DecodeResult, GenerationSettings

__all__ = ["BaselineStep", "as_input_ids", "decode_one_token", "generate", "next_token", "prefill", "sync"]


def decode_one_token(backend, token: int, position: int, cache) -> torch.Tensor:
    """Feed one token at ``position``; return the logits [vocab] for the next one."""
    backend = as_backend(backend)
    device = backend.device
    ids = torch.tensor([[token]], device=device)
    pos = torch.tensor([[position]], device=device)
    return backend.forward(ids, cache, pos)[-1]


class BaselineStep(DecodeStep):
    """One token per target forward."""

    def __init__(self, backend: Backend, settings: GenerationSettings):
        self.backend = backend
        self.settings = settings
        self.generator = make_generator(settings, backend.device)
        self.cache = None
        self.position = 0

    def prefill(self, input_ids: torch.Tensor) -> int:
        self.cache = self.backend.new_cache()
        self.position = input_ids.shape[1]
        return next_token(prefill(self.backend, input_ids, self.cache), self.settings, self.generator)

    def step(self, out: list[int], remaining: int) -> tuple[list[int], int, tuple]:
        logits = decode_one_token(self.backend, out[-1], self.position, self.cache)
        self.position += 1
        return [next_token(logits, self.settings, self.generator)], 0, ()


def generate(model, prompt_ids, settings: GenerationSettings) -> DecodeResult:
    """Generate up to ``settings.max_new_tokens`` tokens one at a time; return a DecodeResult.

    ``model`` is a transformers causal LM, a LoadedModel or a Backend.
    """
    backend = as_backend(model)
    result = decode(backend, prompt_ids, settings, BaselineStep(backend, settings), "baseline")
    result.accepted_per_step = [1] * result.steps  # the baseline reports one token per step
    return result
