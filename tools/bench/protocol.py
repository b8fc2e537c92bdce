"""The measurement protocol: hardware and versions, alternating timed repeats, medians and spread,
and the token-by-token comparison with the baseline (with the divergence diagnosis).

Baseline and method run on the same model, prompt ids, settings, dtype, threads and hardware, in
the same process, alternating, after a warm-up of each. speedup = baseline time / method time.
:func:`measure_rounds` is the one timing loop: run, compare, bench, tune and the demo all go through it.
"""

from __future__ import annotations

import os
import platform
import statistics
import sys
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field

import torch

from tools.engine import cpu_gemm, kv
from tools.engine.cpu_info import CPU_ISA, cpu_isa, cpu_model_name, isa_of  # noqa: F401  (read here by callers)
from tools.engine.autoregressive import as_input_ids
from tools.engine.types import DecodeResult, GenerationSettings
from tools.errors import SpecpilotError

Runner = Callable[[GenerationSettings], DecodeResult]
Progress = Callable[[str], None] | None
# errors that drop one runner (it cannot run here) instead of stopping the measurement
RUNNER_ERRORS = (SpecpilotError, torch.OutOfMemoryError, MemoryError)


def hardware_info(device: str = "cpu") -> dict:
    """Name the hardware a run used, read from the machine itself."""
    info = {
        "cpu": cpu_model_name(),
        "cpu_cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "platform": platform.platform(),
    }
    if str(device).startswith("cuda") and torch.cuda.is_available():
        idx = torch.device(device).index or 0
        info.update(device="cuda", gpu=torch.cuda.get_device_name(idx), gpu_count=torch.cuda.device_count())
        info["name"] = f"{info['gpu']} (x{info['gpu_count']})" if info["gpu_count"] > 1 else info["gpu"]
    else:
        isa = cpu_isa()
        info.update(device="cpu", isa=isa, name=f"{info['cpu']} ({info['cpu_cores']} cores, {info['torch_threads']} "
                                                f"threads{', ' + isa if isa else ''})")
    return info


def hardware_name(device: str = "cpu") -> str:
    """The name measurements on ``device`` are stored under (cost curves, sweeps): the GPU's name on
    a GPU, else the CPU's as :func:`hardware_info` gives it (with its instruction set, so a curve measured on an
    AVX-512 host is not read on an AVX2-only one of the same model name)."""
    info = hardware_info(device)
    return info.get("gpu") or info["name"]


def versions(backend: str = "transformers") -> dict:
    """Versions of the libraries that affect the figures (on the llama.cpp backend, llama-cpp-python's too)."""
    import transformers  # imported here: slow to import, and only needed once a measurement is done
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": sys.version.split()[0], "torch": torch.__version__, "transformers": transformers.__version__}
    if backend == "transformers":  # which library multiplies float32 / bfloat16 layers on a CPU (tools.engine.cpu_gemm)
        out["cpu_float32_linear"] = cpu_gemm.expected_kernels("cpu", "float32") or "blas"
        out["cpu_bfloat16_linear"] = cpu_gemm.expected_kernels("cpu", "bfloat16") or "pytorch"
    for key, dist in (("specpilot", "specpilot"), *((("llama_cpp_python", "llama-cpp-python"),)
                                                     if backend == "llamacpp" else ())):
        try:
            out[key] = version(dist)
        except PackageNotFoundError:  # specpilot running from a source tree without metadata
            out[key] = "source" if key == "specpilot" else "not installed"
    return out


@dataclass
class Timed:
    """Repeated timings of one runner and the result of its last repeat."""

    times: list[float] = field(default_factory=list)
    result: DecodeResult | None = None

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    @property
    def spread(self) -> dict:
        return {"min": min(self.times), "max": max(self.times), "n": len(self.times)}


WARMUP_TOKENS = 16


def measure_rounds(runners: dict[str, Runner], settings: GenerationSettings, repeats: int = 3, warmup: int = 1, *,
                   lead: Sequence[str] = (), required: Collection[str] = (),
                   on_finished: Callable[[str, dict[str, Timed]], None] | None = None,
                   on_failed: Callable[[str, str], None] | None = None,
                   progress: Progress = None, bracket: Sequence[str] = (), rotate: int = 0) -> dict[str, Timed]:
    """The one measurement protocol: warm each runner up (``warmup`` short runs of WARMUP_TOKENS
    tokens), then time ``repeats`` rounds with ``settings``; return the timings of the runners that
    were not dropped.

    Each round times the ``lead`` runners first, in order (the reference every other runner is
    compared with: the baseline, then transformers' peers), then the others in an order that rotates
    from round to round (starting ``rotate`` places on: a benchmark passes the prompt's index, so that with
    one round per prompt no runner is always first), so none of them always goes first. Without a lead every
    runner rotates. The ``bracket`` runners (lead runners: the baseline) are timed again at the end of each
    round, so each round's reference is timed before and after the others: on a machine whose speed drifts
    over minutes (a shared CPU), the median of both is the reference the others ran beside, and their
    difference is the drift the figures carry.

    ``on_finished(name, timed)`` is called once per runner as soon as it and every lead runner have
    all their repeats; ``timed`` holds the lead runners and ``name``. A runner not in ``required``
    whose call raises one of RUNNER_ERRORS is dropped with ``on_failed(name, reason)``; the others go
    on. A required runner's error propagates.
    """
    rounds = _Rounds(runners, settings, lead, required, on_finished, on_failed, progress)
    rounds.bracket = [n for n in bracket if n in rounds.lead]
    rounds.warm_up(warmup)
    for r in range(repeats):
        rounds.time_round(r, repeats, rotate)
    return {name: rounds.timed[name] for name in rounds.alive}


class _Rounds:
    """The state of one :func:`measure_rounds` call: the runners still alive and their timings."""

    def __init__(self, runners: dict[str, Runner], settings: GenerationSettings, lead: Sequence[str],
                 required: Collection[str], on_finished: Callable[[str, dict[str, Timed]], None] | None,
                 on_failed: Callable[[str, str], None] | None, progress: Progress):
        self.alive = dict(runners)
        self.lead = [n for n in lead if n in self.alive]
        self.settings, self.required, self.progress = settings, required, progress
        self.on_finished, self.on_failed = on_finished, on_failed
        self.timed: dict[str, Timed] = {}
        self.finished: set[str] = set()
        self.bracket: list[str] = []  # lead runners timed again at the end of each round

    def say(self, text: str) -> None:
        if self.progress:
            self.progress(text)

    def attempt(self, name: str, s: GenerationSettings) -> DecodeResult | None:
        """Run ``name`` once; a failing runner that is not required is dropped (None)."""
        if name in self.required:
            return self.alive[name](s)
        try:
            return self.alive[name](s)
        except RUNNER_ERRORS as exc:
            reason = exc.user_message() if isinstance(exc, SpecpilotError) else f"{type(exc).__name__}: {exc}"
            del self.alive[name]
            if self.on_failed:
                self.on_failed(name, reason)
            return None

    def warm_up(self, warmup: int) -> None:
        """``warmup`` short runs of each runner (WARMUP_TOKENS tokens), before anything is timed."""
        warm = self.settings.model_copy(update={"max_new_tokens": min(WARMUP_TOKENS, self.settings.max_new_tokens)})
        for name in list(self.alive):
            for _ in range(warmup):
                self.say(f"warm-up: {name}")
                if self.attempt(name, warm) is None:
                    break
        self.timed = {name: Timed() for name in self.alive}

    def time_round(self, r: int, repeats: int, rotate: int = 0) -> None:
        """Round ``r``: the lead runners in order, then the others rotated by ``r + rotate``, then the
        bracket runners again."""
        rest = [n for n in self.alive if n not in self.lead]
        shift = (r + rotate) % len(rest) if rest else 0
        closing = self.bracket if rest else []
        order = [(n, "") for n in self.lead] + [(n, "") for n in rest[shift:] + rest[:shift]]
        order += [(n, " (again, after the others)") for n in closing]
        for name, again in order:
            if name not in self.alive:
                continue
            self.say(f"{name}: repeat {r + 1}/{repeats}{again}")
            result = self.attempt(name, self.settings)
            if result is not None:
                self.timed[name].times.append(result.wall_time_s)
                self.timed[name].result = result
            self.finish_ready(repeats)

    def wanted(self, name: str, repeats: int) -> int:
        """Timings ``name`` gets: one per round, two for a bracket runner (while there are others to bracket)."""
        bracketed = name in self.bracket and any(n not in self.lead for n in self.alive)
        return repeats * (2 if bracketed else 1)

    def finish_ready(self, repeats: int) -> None:
        """Report each runner that has all its repeats, once every lead runner has all of its."""
        reference = {n: self.timed[n] for n in self.lead if n in self.alive}
        if self.on_finished is None or any(len(t.times) < self.wanted(n, repeats) for n, t in reference.items()):
            return
        for name in list(self.alive):
            if name not in self.finished and len(self.timed[name].times) >= self.wanted(name, repeats):
                self.finished.add(name)
                self.on_finished(name, {**reference, name: self.timed[name]})


def alternate(runners: dict[str, Runner], settings: GenerationSettings, repeats: int = 3, warmup: int = 1,
              progress: Progress = None) -> dict[str, Timed]:
    """:func:`measure_rounds` with every runner rotating and every error propagating (the scripts
    under benchmarks/ time their own runners this way)."""
    return measure_rounds(runners, settings, repeats, warmup, required=list(runners), progress=progress)


def first_divergence(baseline_ids: list[int], method_ids: list[int]) -> int | None:
    """Index of the first differing new token (or the shorter length), None when equal."""
    for i, (a, b) in enumerate(zip(baseline_ids, method_ids)):
        if a != b:
            return i
    if len(baseline_ids) != len(method_ids):
        return min(len(baseline_ids), len(method_ids))
    return None


# a divergence is a floating-point near-tie when the baseline's top-1/top-2 margin is within this
# many units of the dtype's resolution at the logit's magnitude
NEAR_TIE_ULPS = 8


@torch.no_grad()
def diagnose_divergence(model, prompt_ids: list[int], baseline_ids: list[int], method_ids: list[int],
                        dtype: str) -> dict | None:
    """Describe where the method's output leaves the baseline's, and whether it is a near-tie.

    Returns None when outputs are identical, else a dict with position, both tokens, the baseline's
    top-1/top-2 logit margin at that position and ``kind``: "near_tie" or "mismatch".
    """
    pos = first_divergence(baseline_ids, method_ids)
    if pos is None:
        return None
    out = {
        "position": pos,
        "baseline_token": baseline_ids[pos] if pos < len(baseline_ids) else None,
        "method_token": method_ids[pos] if pos < len(method_ids) else None,
    }
    if out["baseline_token"] is None or out["method_token"] is None:
        out.update(kind="length", margin=None, explanation="one output stopped earlier (EOS or length)")
        return out
    ids = as_input_ids(list(prompt_ids) + list(baseline_ids[:pos]), model.device)
    logits = kv.forward(model, ids, kv.new_cache(model), logits_to_keep=1)[-1].float()
    top2 = torch.topk(logits, 2)
    margin = float(top2.values[0] - top2.values[1])
    eps = torch.finfo(getattr(torch, dtype)).eps if hasattr(torch, dtype) else torch.finfo(torch.float32).eps
    resolution = eps * max(1.0, abs(float(top2.values[0])))
    near_tie = margin <= NEAR_TIE_ULPS * resolution
    out.update(
        margin=margin,
        resolution=resolution,
        kind="near_tie" if near_tie else "mismatch",
        explanation=(
            f"floating-point near-tie: the baseline's top-1/top-2 margin {margin:.4g} is within "
            f"{NEAR_TIE_ULPS} units of {dtype} resolution ({resolution:.3g}); a different summation order "
            "(batched verification) can flip it — not an algorithm error"
            if near_tie
            else f"real mismatch: margin {margin:.4g} is far above {dtype} resolution ({resolution:.3g})"
        ),
    )
    return out
