"""The one decode loop every method runs; a method supplies only its step (``DecodeStep``).

``decode`` owns what all methods share: the prompt on the device, the clock, the budget, EOS, the
per-step tally and the DecodeResult. Timing is the same for every method and the baseline: the
clock starts once the prompt ids are on the device, the prefill (which picks the first token) is
timed as ``prefill_s``, the clock stops after the last token is synced; wall time = prefill_s +
decode_s. Setup that needs no prompt (building trees, quantizing a draft) happens before, when the
step object is made; everything a step does with the prompt is inside the clock.

Hot path: one ``step`` call per target forward; the loop adds a slice, a set-disjointness test for
EOS and the tally's few list updates per step, no syncs and no copies of device tensors.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import torch

from tools.engine.backend import Backend, as_backend
from tools.engine.sampling import greedy_tokens, sample, warp_probs
from tools.engine.types import DecodeResult, GenerationSettings, StepTally
from tools.errors import ParameterError


class DecodeStep:
    """One method's decoding state. ``prefill`` runs the prompt and returns the first new token;
    ``step`` runs one target forward and returns (new tokens, accepted guessed tokens, depths of the
    guesses it verified) — the new tokens may run past the budget or an EOS, the loop cuts them
    (after a cut the loop ends, so the step's own state may hold the uncut tokens). ``extra`` gives
    the method's DecodeResult.extra. ``positions`` presizes the tally's by-position lists."""

    positions: int = 0

    def prefill(self, input_ids: torch.Tensor) -> int:
        raise NotImplementedError

    def step(self, out: list[int], remaining: int) -> tuple[list[int], int, Sequence[int]]:
        raise NotImplementedError

    def extra(self, out: list[int], tally: StepTally, stopped: str) -> dict:
        return {}


def as_input_ids(prompt_ids, device) -> torch.Tensor:
    """Return prompt ids as a LongTensor [1, n] on ``device``; an empty prompt is a ParameterError."""
    ids = torch.as_tensor(prompt_ids, dtype=torch.long, device=device).reshape(1, -1)
    if ids.shape[1] == 0:
        raise ParameterError("the prompt is empty", hint="give at least one token")
    return ids


def sync(device) -> None:
    """Wait for queued GPU work so wall-clock timings are honest (no-op on CPU)."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def next_token(logits: torch.Tensor, settings: GenerationSettings, generator) -> int:
    """Pick the next token from one row of logits: argmax when greedy, else a warped sample."""
    if settings.greedy:
        return int(greedy_tokens(logits))
    return int(sample(warp_probs(logits, settings), generator))


def prefill(backend, input_ids: torch.Tensor, cache) -> torch.Tensor:
    """Run the prompt [1, n] into ``cache``; return the last position's logits [vocab]."""
    backend = as_backend(backend)
    positions = torch.arange(input_ids.shape[1], device=input_ids.device)[None]
    return backend.forward(input_ids, cache, positions, rows=1)[-1]


def cut(new: list[int], remaining: int, eos: set[int]) -> tuple[list[int], bool]:
    """``new`` cut to ``remaining`` tokens and after its first EOS; (tokens, whether an EOS ended it)."""
    new = new[:remaining]
    if eos.isdisjoint(new):
        return new, False
    end = next(i for i, t in enumerate(new) if t in eos)
    return new[: end + 1], True


def decode(backend: Backend, prompt_ids, settings: GenerationSettings, step: DecodeStep, method: str,
           tally: StepTally | None = None) -> DecodeResult:
    """Run ``step`` until ``settings.max_new_tokens`` tokens or an EOS; return the DecodeResult.

    ``tally`` (default: a fresh StepTally) collects the per-step counts; a tally's ``accepted`` for a
    step counts only guessed tokens that made it into the output.
    """
    backend = as_backend(backend)
    eos = set(settings.eos_token_ids)
    budget = settings.max_new_tokens
    tally = tally if tally is not None else StepTally(positions=step.positions)
    with torch.inference_mode():
        input_ids = as_input_ids(prompt_ids, backend.device)
        t0 = time.perf_counter()
        out = [step.prefill(input_ids)]
        backend.sync()
        t1 = time.perf_counter()
        stopped = "eos" if out[0] in eos else "length"
        while stopped == "length" and len(out) < budget:
            remaining = budget - len(out)
            new, accepted, depths = step.step(out, remaining)
            new, hit = cut(new, remaining, eos)
            stopped = "eos" if hit else stopped
            tally.record(min(accepted, len(new) - 1), depths)
            out.extend(new)
        backend.sync()
        t2 = time.perf_counter()
        return tally.result(method, out, (t0, t1, t2), stopped, step.extra(out, tally, stopped))
