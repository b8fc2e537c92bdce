"""The measurement protocol: hardware and versions, alternating timed repeats, medians and spread,
and the token-by-token comparison with the baseline (with the divergence diagnosis).

Baseline and method run on the same model, prompt ids, settings, dtype, threads and hardware, in
the same process, alternating, after a warm-up of each. speedup = baseline time / method time.
"""

from __future__ import annotations

import contextlib
import os
import platform
import statistics
import sys
from dataclasses import dataclass, field
from typing import Callable

import torch

from tools.engine import kv
from tools.engine.autoregressive import as_input_ids
from tools.engine.types import DecodeResult, GenerationSettings


def cpu_model_name() -> str:
    """The CPU's model name as the OS reports it."""
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


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
        info.update(device="cpu", name=f"{info['cpu']} ({info['cpu_cores']} cores, {info['torch_threads']} threads)")
    return info


def versions() -> dict:
    """Versions of the libraries that affect the figures."""
    import transformers

    out = {"python": sys.version.split()[0], "torch": torch.__version__, "transformers": transformers.__version__}
    try:
        from importlib.metadata import version

        out["specpilot"] = version("specpilot")
    except Exception:  # noqa: BLE001 - running from a source tree without metadata
        out["specpilot"] = "source"
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


def alternate(runners: dict[str, Callable[[GenerationSettings], DecodeResult]], settings: GenerationSettings,
              repeats: int = 3, warmup: int = 1, progress: Callable[[str], None] | None = None) -> dict[str, Timed]:
    """Warm each runner up (``warmup`` short runs of WARMUP_TOKENS tokens), then run ``repeats`` rounds
    alternating between them with ``settings``; return their timings.

    The order rotates each round so no runner always goes first.
    """
    names = list(runners)
    warm = settings.model_copy(update={"max_new_tokens": min(WARMUP_TOKENS, settings.max_new_tokens)})
    for name in names:
        for _ in range(warmup):
            if progress:
                progress(f"warm-up: {name}")
            runners[name](warm)
    timed = {name: Timed() for name in names}
    for r in range(repeats):
        order = names[r % len(names):] + names[: r % len(names)]
        for name in order:
            if progress:
                progress(f"{name}: repeat {r + 1}/{repeats}")
            res = runners[name](settings)
            timed[name].times.append(res.wall_time_s)
            timed[name].result = res
    return timed


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
