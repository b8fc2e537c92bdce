"""This machine's cost for the sizing (tools.bench.sizing): the target's forward-pass cost curve and
what one draft token costs, read from memory, measured once and stored, or, on a CPU where measuring
is not allowed (or the measurement was disturbed), a conservative curve measured on this project's
slowest CPU (``CPU_FALLBACK_CURVE``, below).

Measuring takes ``forward_cost_curve`` over ``MEASURE_SIZES`` with 256 cached tokens, three timed
rounds after a warm-up, and leaves out the sizes past the first of 16+ tokens costing 2x a one-token
pass: about half a minute for the default target in float32 on a 2-core CPU with the machine to
itself, seconds on a GPU. A curve in which a pass costs more than the work it does (``disturbed``)
was timed on a busy machine and is not stored.

Each engine has its own curve: a target on the llama.cpp backend (tools.engine.llamacpp) is timed through
that backend (:func:`backend_cost_curve`) and its curve stored under the dtype "gguf", which no
transformers model has, so sizing a method for llama.cpp reads llama.cpp's curve and never the
transformers one (and the other way round). ``specpilot guide METHOD --measure --backend llamacpp``
measures it on demand (:func:`measure_curve`).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch

from tools.bench.protocol import hardware_name
from tools.engine import cpu_gemm, quantize
from tools.engine.backend import Backend
from tools.engine.cost_curve import forward_cost_curve, monotone
from tools.engine.llamacpp import LlamaCppBackend
from tools.errors import ParameterError, StoreError

# Used only on a CPU where no curve is stored and measuring is not allowed (or was disturbed): the curve
# of this project's slowest machine, a 2-core AMD EPYC with AVX2 only (no AVX-512, no bfloat16
# instructions), where `--dtype auto` picks float32, seconds per pass over n new tokens (256 cached).
# Its two cores were shared with other jobs (load 5-8) the whole time it was measured, and two-thread
# passes of the 1.5B target then lost most of their time to thread synchronisation (minimum of 7
# interleaved rounds: 1.5 s for one token, 4.9 s for two), so the shape is the 0.5B draft's two-thread
# curve (minimum of 7 interleaved rounds: 196 ms for 1 token, 476 for 2, 588 for 4, 531 for 8, 607 for
# 16, 702 for 32; 4 and 8 pooled, as ``monotone`` does), scaled to the target's 0.5 s a token in float32
# there. Checks: the slowdowns measured there give about the same shape (Medusa's
# 16-token steps at 0.78x with ~2 tokens a step: a 16-token pass ~2.5x one token, here 3.1x; lookahead's
# 32-token steps at 0.5x with 1.58 tokens a step: ~3.2x, here 3.6x), and the target at one thread, whose
# times were steady (medians within 15% of the minimum), is steeper (0.88 s, 1.83 s, 2.81, 3.28, 3.83,
# 5.37 for 1, 2, 4, 8, 16, 32 tokens). The step from 1 to 2 tokens is float32's one-token fast path.
CPU_FALLBACK_CURVE: dict[int, float] = {1: 0.50, 2: 1.21, 4: 1.43, 8: 1.43, 16: 1.55, 32: 1.79}
# One draft token over one target token there: the int8 draft (the CPU default) took 516 ms a token
# against the float32 target's 2063 ms, both two threads, minimum of 9 and 7 rounds on the busy machine.
CPU_FALLBACK_DRAFT_RATIO = 0.25
MEASURE_SIZES = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64)
MEASURE_CACHE_LEN = 256
MEASURE_REPEATS = 3
MEASURE_ATTEMPTS = 2  # a curve that looks disturbed is measured once more before the conservative one is used
MEASURE_STOP_RATIO = 2.0  # sizes past the first of 16+ tokens costing 2x a one-token pass are not timed
MEASURE_STOP_FROM = 16
DISTURBED_RATIO = 1.4  # a measured pass over n tokens above 1.4 x n one-token passes: the machine was busy
DISTURBED_SPREAD = 1.3  # repeated passes whose median is 1.3x their fastest: the machine was busy
DISTURBED_MIN_S = 0.005
# a draft's prompt reading is timed over this many tokens (llama.cpp's against the int8 copy's, for draft_quant auto),
# the last row's logits only, as a prefill asks (curves stored at 256 tokens were timed with every row's: re-timed)
PROMPT_TOKENS = 250
# draft forwards per new token, the int8 draft's on the fit half (bfloat16, 128 new tokens: 0.83-0.94 in five runs)
DRAFT_FORWARDS_PER_TOKEN = 0.85
# a prompt is read in full whatever the answer's length, the drafting saved only per token the answer has: the
# threshold counts on this share of max_new_tokens, the lower quartile of the draft's answers on the fit half (3 of
# 13 stopped at 14-32 of 128 tokens; the eval half's rag and summarization answers at 39 and 64, where drafting
# their 722- and 612-token prompts on llama.cpp measured 1.05x and 1.30x against 1.30x and 1.56x with the int8 copy)
ANSWER_SHARE = 0.25
_DISTURBED: dict[tuple, str] = {}  # (target, hardware, dtype) -> why this process's measurement was not used


@dataclass
class MachineCost:
    """What the sizing knows of this machine: the target's cost curve and a draft token's cost."""

    kind: str  # "cpu" or "gpu"
    hardware: str
    curve: dict[int, float] | None  # {tokens: seconds} of one target forward pass; None: size nothing
    curve_source: str
    draft_ratio: float | None = None  # one draft token's time / one target token's time
    draft_source: str = ""
    backend: str = "transformers"  # the engine the curve was timed on: transformers or llamacpp
    draft_quant: tuple[str, str] | None = None  # (draft_quant, why) where the sizing picked the draft's engine
    gguf_until: tuple[float, str] | None = None  # (gguf_draft_until, why): where llama.cpp's slower prompt reading


# ---------------------------------------------------------------------------- the curve
def one_token_time(curve: dict[int, float]) -> float:
    mono = monotone(curve)
    return mono[min(mono)]


def relative_cost(curve: dict[int, float], n: int) -> float:
    """The (non-decreasing) curve's time for ``n`` tokens over its one-token time, interpolated
    linearly (and extended along the last slope past the largest size measured)."""
    points = sorted(monotone(curve).items())
    t1 = points[0][1]
    if n <= points[0][0]:
        return 1.0
    for (n0, a), (n1, b) in zip(points, points[1:]):
        if n <= n1:
            return (a + (b - a) * (n - n0) / (n1 - n0)) / t1
    if len(points) == 1:
        return 1.0
    (n0, a), (n1, b) = points[-2:]
    return (b + (b - a) / (n1 - n0) * (n - n1)) / t1


# ---------------------------------------------------------------------------- this machine
def machine_cost(store, target, draft=None, draft_quant: str = "auto", allow_measure: bool = True,
                 progress=None) -> MachineCost:
    """This machine's cost for a loaded target (and draft): the curve stored in memory for this
    target, hardware and dtype, else measured now (``allow_measure``; about half a minute on a 2-core
    CPU in float32, seconds on a GPU) and stored, else the conservative CPU curve (on a GPU: none,
    and the defaults stay). The draft's token cost is found the same way (its int8 copy on a CPU);
    beside the conservative curve it is the conservative ratio, never one timed against another curve."""
    device = str(target.device)
    kind = "gpu" if device.startswith("cuda") else "cpu"
    hardware = hardware_name(device)
    curve, source = _target_curve(store, target, hardware, kind, allow_measure, progress)
    machine = MachineCost(kind, hardware, curve, source, backend=_backend(target))
    if draft is not None and curve and curve != CPU_FALLBACK_CURVE:
        machine.draft_ratio, machine.draft_source = _draft_ratio(store, draft, draft_quant, hardware, curve,
                                                                 allow_measure, progress)
    return machine


def prefer_gguf(machine: MachineCost, store, draft, gguf_draft, draft_quant: str, allow_measure: bool = True,
                progress=None) -> None:
    """Where the draft also runs on llama.cpp from its GGUF file (``gguf_draft``) and ``draft_quant`` is auto or
    gguf: time one token of it (stored like any draft's) and size with it, for auto only where it costs less
    than the draft ``machine`` was sized with (its int8 copy on a CPU); ``machine.draft_quant`` then says so.
    For auto, llama.cpp also reads prompts slower than the int8 copy: both are timed over ``PROMPT_TOKENS`` and
    ``machine.gguf_until`` says past how many prompt tokens per new token the int8 copy costs less."""
    if (gguf_draft is None or draft_quant not in ("auto", "gguf") or not machine.curve
            or machine.curve == CPU_FALLBACK_CURVE):
        return
    sizes = (1,) if draft_quant == "gguf" else (1, PROMPT_TOKENS)
    found, where = _draft_curve(store, gguf_draft, False, machine.hardware, allow_measure, progress, sizes)
    if found is None:
        return
    t1 = one_token_time(found)
    ratio = t1 / one_token_time(machine.curve)
    if draft_quant == "auto" and machine.draft_ratio is not None and machine.draft_ratio <= ratio:
        return
    source = f"{_draft_name(gguf_draft, False)}: {t1 * 1000:.0f} ms a token, {where}"
    than = f", less than {machine.draft_source}" if machine.draft_source else ""
    if draft_quant == "auto" and machine.draft_ratio is not None:
        machine.gguf_until = _gguf_until(store, draft, found, machine, allow_measure, progress)
    machine.draft_ratio, machine.draft_source = ratio, source
    machine.draft_quant = ("gguf", f"the draft's GGUF file on llama.cpp ({source}{than})")


def _gguf_until(store, draft, gguf: dict[int, float], machine: MachineCost, allow_measure: bool,
                progress) -> tuple[float, str] | None:
    """(prompt tokens per new token past which the int8 copy's faster prompt reading outweighs llama.cpp's
    faster tokens, why); None where llama.cpp reads prompts as fast (or the int8 copy's cannot be timed)."""
    if not quantize.int8_available():
        return None
    int8, _ = _draft_curve(store, draft, True, machine.hardware, allow_measure, progress, (1, PROMPT_TOKENS))
    return prompt_threshold(gguf, int8) if int8 is not None else None


def prompt_threshold(gguf: dict[int, float], int8: dict[int, float]) -> tuple[float, str] | None:
    """From the two drafts' curves (one token and a ``PROMPT_TOKENS`` prompt each): (gguf_draft_until, why), or None
    where either lacks the prompt or llama.cpp reads prompts as fast or drafts no faster."""
    if PROMPT_TOKENS not in gguf or PROMPT_TOKENS not in int8:
        return None
    read_g, read_i = gguf[PROMPT_TOKENS] / PROMPT_TOKENS, int8[PROMPT_TOKENS] / PROMPT_TOKENS
    saved = one_token_time(int8) - one_token_time(gguf)
    if read_g <= read_i or saved <= 0:
        return None
    until = round(saved * DRAFT_FORWARDS_PER_TOKEN * ANSWER_SHARE / (read_g - read_i), 2)
    return until, (f"llama.cpp reads a prompt token in {read_g * 1000:.1f} ms, the int8 copy in {read_i * 1000:.1f}, "
                   f"and drafts {saved * 1000:.0f} ms faster, about {DRAFT_FORWARDS_PER_TOKEN} draft forwards a new "
                   f"token, over a quarter of the new tokens asked for (a short answer reads the whole prompt too): "
                   f"llama.cpp pays up to {until} prompt tokens per new token")


def _stored_curve(store, ref: str, hardware: str, dtype: str, kernels: str | None) -> dict | None:
    """The stored curve timed with ``kernels``, or None (also when there is no store or it cannot be read)."""
    try:
        return store.get_cost_curve(ref, hardware, dtype, kernels=kernels) if store is not None else None
    except StoreError:
        return None


def _save_curve(store, ref: str, hardware: str, curve: dict[int, float], dtype: str, kernels: str | None) -> str:
    """Store a measured curve; return how that went, in words."""
    if store is None:
        return "not stored (no memory)"
    try:
        store.save_cost_curve(ref, hardware, curve, dtype=dtype, kernels=kernels)
    except StoreError as exc:
        return f"not stored: {exc.user_message()}"
    return "stored"


def disturbed(curve: dict[int, float], raw: dict[int, list[float]] | None = None) -> str | None:
    """Why a measured curve cannot be this machine's own cost, or None. Two signs of a busy machine
    (other jobs, or threads waiting on each other): repeated passes over the same tokens that vary
    (the median over ``DISTURBED_SPREAD`` x the fastest; an idle machine repeats a pass within ~10%),
    and a pass over n tokens costing more than ``DISTURBED_RATIO`` x n one-token passes (float32's
    one-token fast path makes 2 tokens cost up to ~2.4x one on an idle AVX2 CPU, not more)."""
    points = sorted(curve.items())
    n1, t1 = points[0]
    if t1 < DISTURBED_MIN_S:  # sub-millisecond passes (tiny models): scheduler noise, nothing to judge
        return None
    for n, ts in sorted((raw or {}).items()):
        if len(ts) > 1 and statistics.median(ts) > DISTURBED_SPREAD * min(ts):
            return f"passes over {n} tokens took {min(ts):.2f} to {max(ts):.2f} s"
    for n, t in points[1:]:
        if t > DISTURBED_RATIO * (n / n1) * t1:
            return f"a pass over {n} tokens took {t / t1:.1f}x a pass over {n1}, more than the work it does"
    return None


def _backend(loaded) -> str:
    return "llamacpp" if isinstance(loaded.model, LlamaCppBackend) else "transformers"


def _engine(loaded) -> str:
    """How a curve's source names the model: "<ref> in <dtype>" (and the engine when it is llama.cpp)."""
    return f"{loaded.ref} in {loaded.dtype}" + (" on llama.cpp" if _backend(loaded) == "llamacpp" else "")


def _fallback(kind: str, why: str, backend: str = "transformers") -> tuple[dict[int, float] | None, str]:
    if kind == "cpu":
        if backend == "llamacpp":
            return dict(CPU_FALLBACK_CURVE), (f"{why}, so a conservative CPU curve (measured with transformers in "
                                              "float32 on a 2-core AVX2 CPU, not llama.cpp; `specpilot guide "
                                              "lookahead --measure --backend llamacpp` measures llama.cpp's)")
        return dict(CPU_FALLBACK_CURVE), (f"{why}, so a conservative CPU curve (2-core AVX2 CPU, float32; "
                                          "`specpilot guide lookahead --measure` measures this one)")
    return None, f"{why}: the GPU-sized defaults stay"


def _target_curve(store, target, hardware: str, kind: str, allow_measure: bool,
                  progress) -> tuple[dict[int, float] | None, str]:
    stored = _stored_curve(store, target.ref, hardware, target.dtype, cpu_gemm.kernels(target.model))
    if stored is not None:
        return stored["curve"], f"the cost curve of {_engine(target)} stored on {stored['measured_at'][:10]}"
    if not allow_measure:
        return _fallback(kind, "no cost curve measured here yet", _backend(target))
    key = (target.ref, hardware, target.dtype)
    if key in _DISTURBED:  # this process found the machine busy already: do not spend the time again
        return _fallback(kind, _DISTURBED[key], _backend(target))
    curve, source = measure_curve(store, target, progress)
    return (curve, source) if curve is not None else _fallback(kind, source, _backend(target))


def measure_curve(store, target, progress=None, repeats: int = MEASURE_REPEATS) -> tuple[dict[int, float] | None, str]:
    """Measure the loaded target's cost curve now, on its engine, and store it: (curve, what was done, in
    words); the curve is None when the timings show a busy machine (then nothing is stored)."""
    hardware = hardware_name(str(target.device))
    if progress:
        progress("measuring this machine's forward-pass cost curve (once: it is stored for later runs)")
    start = time.perf_counter()
    for attempt in range(MEASURE_ATTEMPTS):  # one spike (another job's burst) should not cost the whole curve
        # a quick probe first: a busy machine shows in the first two sizes, before the long passes are timed
        raw: dict[int, list[float]] = {}
        curve = _curve(target.model, MEASURE_SIZES[:2], 3, raw)
        if not disturbed(curve, raw):
            raw.clear()
            curve = _curve(target.model, MEASURE_SIZES, repeats, raw, stop_ratio=MEASURE_STOP_RATIO,
                           stop_from=MEASURE_STOP_FROM)
        problem = disturbed(curve, raw)
        if not problem:
            break
        if progress and attempt + 1 < MEASURE_ATTEMPTS:
            progress(f"the cost curve looks disturbed ({problem}): measuring it once more")
    took = time.perf_counter() - start
    if problem:
        why = f"the cost curve measured now ({took:.0f} s) looks disturbed ({problem}) and was not stored"
        _DISTURBED[(target.ref, hardware, target.dtype)] = why
        return None, why
    saved = _save_curve(store, target.ref, hardware, curve, target.dtype, cpu_gemm.kernels(target.model))
    return curve, f"the cost curve of {_engine(target)} measured now ({took:.0f} s), {saved}"


def _curve(model, sizes, repeats: int, raw: dict, **stop) -> dict[int, float]:
    """The cost curve of a transformers model (tools.engine.cost_curve) or of a llama.cpp backend."""
    if isinstance(model, LlamaCppBackend):
        return backend_cost_curve(model, sizes, cache_len=MEASURE_CACHE_LEN, repeats=repeats, raw=raw, **stop)
    return forward_cost_curve(model, sizes, cache_len=MEASURE_CACHE_LEN, repeats=repeats, raw=raw, **stop)


def backend_cost_curve(backend: Backend, sizes=MEASURE_SIZES, cache_len: int = MEASURE_CACHE_LEN,
                       repeats: int = MEASURE_REPEATS, seed: int = 0, stop_ratio: float | None = None,
                       stop_from: int = 16, raw: dict[int, list[float]] | None = None,
                       last_row: bool = False) -> dict[int, float]:
    """tools.engine.cost_curve.forward_cost_curve through the Backend seam (for the llama.cpp backend):
    {n: median seconds of one causal forward over n new tokens after ``cache_len`` cached ones, logits
    for all n rows as verification asks, or the last one's with ``last_row``}, timed in rounds (round 0
    warms up and, with ``stop_ratio``, drops the sizes past the first of ``stop_from``+ tokens costing
    ``stop_ratio`` x the smallest)."""
    sizes = sorted({int(n) for n in sizes})
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, backend.vocab_size, (1, cache_len + sizes[-1]), generator=g)
    cache = backend.new_cache()
    backend.forward(tokens[:, :cache_len], cache, torch.arange(cache_len)[None], rows=1)
    times: dict[int, list[float]] = {n: [] for n in sizes}
    for r in range(repeats + 1):
        for n in list(times):
            backend.crop(cache, cache_len)
            t0 = time.perf_counter()
            backend.forward(tokens[:, cache_len: cache_len + n], cache, torch.arange(cache_len, cache_len + n)[None],
                            rows=1 if last_row else 0)
            backend.sync()
            took = time.perf_counter() - t0
            if r:
                times[n].append(took)
            elif n == sizes[0]:
                first = took
            elif stop_ratio is not None and n >= stop_from and took > stop_ratio * first:
                for m in [m for m in times if m > n]:
                    del times[m]
                break
    backend.crop(cache, cache_len)
    if raw is not None:
        raw.update(times)
    return {n: statistics.median(ts) for n, ts in times.items()}


def _draft_ratio(store, draft, draft_quant: str, hardware: str, curve: dict[int, float], allow_measure: bool,
                 progress) -> tuple[float | None, str]:
    """(one draft token's time over one target token's, where it came from)."""
    try:
        int8 = _backend(draft) == "transformers" and quantize.resolve(draft_quant, draft.device) == "int8"
    except ParameterError:
        int8 = False
    found, where = _draft_curve(store, draft, int8, hardware, allow_measure, progress)
    if found is None:
        return None, ""
    t1 = one_token_time(found)
    return t1 / one_token_time(curve), f"{_draft_name(draft, int8)}: {t1 * 1000:.0f} ms a token, {where}"


def _draft_name(draft, int8: bool) -> str:
    engine = " on llama.cpp" if _backend(draft) == "llamacpp" else ""
    return f"{draft.ref} in {'int8' if int8 else draft.dtype}{engine}"


def _draft_curve(store, draft, int8: bool, hardware: str, allow_measure: bool, progress,
                 sizes: tuple[int, ...] = (1,)) -> tuple[dict[int, float] | None, str]:
    """The draft's stored curve (its int8 copy's with ``int8``) holding ``sizes``, else measured now over them and
    stored when ``allow_measure``: (curve, where it came from); None where neither."""
    dtype = "int8" if int8 else draft.dtype
    model_kernels = None if int8 else cpu_gemm.kernels(draft.model)
    stored = _stored_curve(store, draft.ref, hardware, dtype, model_kernels)
    if stored is not None and all(n in stored["curve"] for n in sizes):
        return stored["curve"], f"stored on {stored['measured_at'][:10]}"
    if not allow_measure or (draft.ref, hardware, dtype) in _DISTURBED:
        return None, ""
    if progress:
        progress("timing the draft (once: it is stored for later runs)")
    model = quantize.int8_draft(draft.model) if int8 else draft.model
    raw: dict[int, list[float]] = {}
    measured = _curve(model, sizes, MEASURE_REPEATS, raw, last_row=True)  # a draft reads a prompt for its last row
    problem = disturbed(measured, raw)
    if problem:  # as for the target: this process does not spend the time again (and sizes the same way)
        _DISTURBED[(draft.ref, hardware, dtype)] = problem
        return None, ""
    return measured, f"measured now, {_save_curve(store, draft.ref, hardware, measured, dtype, model_kernels)}"
