"""How the target's forward time grows with the number of tokens in one pass, and lookahead
parameters sized to it.

On a GPU a forward over tens of tokens costs about as much as over one, which is what lookahead
decoding spends; on a CPU the cost starts to grow past a handful of tokens (docs: DESIGN.md, "CPU
physics"). ``forward_cost_curve`` measures the curve on this machine; ``suggest_lookahead_params``
picks W/N/G whose tokens per step stay on the near-flat part of it.
"""

from __future__ import annotations

import statistics
import time

import torch

from tools.engine import kv
from tools.engine.autoregressive import sync
from tools.engine.lookahead import MAX_STEP_TOKENS, LookaheadParams
from tools.engine.prompt_lookup import PromptLookupParams
from tools.errors import ParameterError

# 24/40/48 catch a step that CPU matmul kernels can take between 32 and 36 tokens (measured here:
# 32 tokens 1.25x a one-token pass, 36 tokens 1.64x), which 32 -> 64 alone would interpolate away
DEFAULT_SIZES = (1, 2, 4, 8, 16, 24, 32, 40, 48, 64)
FLAT_BUDGET = 1.3  # a step may cost up to this many one-token forwards
MAX_SUGGESTED_NGRAM = 5


@torch.inference_mode()
def forward_cost_curve(model, sizes=DEFAULT_SIZES, cache_len: int = 512, repeats: int = 5,
                       seed: int = 0, masked: bool = False, stop_ratio: float | None = None,
                       stop_from: int = 16, raw: dict[int, list[float]] | None = None,
                       last_row: bool = False) -> dict[int, float]:
    """Return {n: median seconds of one forward over n new tokens with ``cache_len`` cached tokens}.

    Timed in rounds: each round times every size once, so a drift in the machine's speed (a GPU's
    clocks ramping up, a neighbour's load) touches all sizes alike; round 0 is an untimed warm-up,
    then ``repeats`` timed rounds. The cache is cropped back to ``cache_len`` before every pass and
    logits are computed for all n rows (as verification does). With ``masked`` the n tokens go
    through an explicit 4-D mask (a chain), as tree verification does, rather than the causal path.
    With ``stop_ratio`` the warm-up round times the sizes in increasing order and the sizes after the
    first one of at least ``stop_from`` tokens costing more than ``stop_ratio`` x the smallest are
    left out of the timed rounds (a CPU whose cost climbs early is not made to time 64-token passes
    nothing will use; the small sizes are always timed, so one slow warm-up pass cuts little).
    ``raw``, when given, receives every timed pass ({n: [seconds, ...]}), to judge the spread. With ``last_row``
    only the last row's logits are computed, as reading a prompt does (a draft's prefill).
    """
    sizes = sorted({int(n) for n in sizes})
    if not sizes or sizes[0] < 1:
        raise ParameterError("sizes must be positive token counts", hint="try sizes=(1, 2, 4, 8, 16, 32, 64)")
    if cache_len < 1 or repeats < 1:
        raise ParameterError("cache_len and repeats must be at least 1")
    device = model.device
    vocab = _vocab_size(model)
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, vocab, (1, cache_len + max(sizes)), generator=g).to(device)
    cache = kv.new_cache(model)
    kv.forward(model, tokens[:, :cache_len], cache, torch.arange(cache_len, device=device)[None], logits_to_keep=1)
    passes = {}
    for n in sizes:
        chain = torch.tril(torch.ones(n, n, dtype=torch.bool, device=device))
        passes[n] = (tokens[:, cache_len: cache_len + n], torch.arange(cache_len, cache_len + n, device=device)[None],
                     kv.tree_mask(cache_len, chain, model.dtype) if masked else None)
    times: dict[int, list[float]] = {n: [] for n in sizes}
    for r in range(repeats + 1):
        for n, (ids, positions, mask) in list(passes.items()):
            kv.crop(cache, cache_len)
            sync(device)
            t0 = time.perf_counter()
            kv.forward(model, ids, cache, positions, attention_mask=mask, logits_to_keep=1 if last_row else 0)
            sync(device)
            took = time.perf_counter() - t0
            if r:  # round 0 warms up
                times[n].append(took)
            elif n == sizes[0]:
                first = took
            elif stop_ratio is not None and n >= stop_from and took > stop_ratio * first:
                for m in [m for m in passes if m > n]:
                    del passes[m], times[m]
                break
    kv.crop(cache, cache_len)
    if raw is not None:
        raw.update(times)
    return {n: statistics.median(ts) for n, ts in times.items()}


def _vocab_size(model) -> int:
    """Rows of the output projection (the config's vocab_size when the head is quantized)."""
    weight = getattr(model.get_output_embeddings(), "weight", None)
    if isinstance(weight, torch.Tensor):
        return int(weight.shape[0])
    return int(model.config.vocab_size)


def isotonic(values: list[float]) -> list[float]:
    """The non-decreasing sequence closest to ``values`` in least squares (pool adjacent violators):
    a measured forward-time curve with the noise dips taken out, since more tokens never cost less."""
    blocks: list[list[float]] = []  # [mean, count]
    for v in values:
        blocks.append([float(v), 1.0])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            (m2, c2), (m1, c1) = blocks.pop(), blocks.pop()
            blocks.append([(m1 * c1 + m2 * c2) / (c1 + c2), c1 + c2])
    return [m for m, c in blocks for _ in range(int(c))]


def monotone(curve: dict[int, float]) -> dict[int, float]:
    """``curve`` ({tokens: seconds}) sorted by size and made non-decreasing (``isotonic``)."""
    points = sorted((int(n), float(t)) for n, t in curve.items())
    return dict(zip([n for n, _ in points], isotonic([t for _, t in points])))


def flat_tokens(curve: dict[int, float], budget: float = FLAT_BUDGET) -> int:
    """Most tokens per forward whose time stays within ``budget`` x the one-token time, linearly
    interpolated between measured sizes (never past the largest size measured), on the curve made
    non-decreasing (``monotone``: a noisy one-token time must not make larger passes look cheaper)."""
    if 1 not in {int(n) for n in curve}:
        raise ParameterError("the cost curve needs a measurement for 1 token", hint="measure sizes starting at 1")
    points = list(monotone(curve).items())
    limit = budget * points[0][1]
    best = 1
    for (n0, t0), (n1, t1) in zip(points, points[1:]):
        if t1 <= limit:
            best = n1
            continue
        if t0 <= limit < t1:
            best = max(best, int(n0 + (n1 - n0) * (limit - t0) / (t1 - t0)))
        break
    return best


def _widest_window(room: int, ngram: int) -> int:
    """The widest W >= N-1 whose 1 + (N-1)*(W + G) tokens, G = max(1, W // 2), fit in ``room`` (0 if none)."""
    width = 0
    w = ngram - 1
    while 1 + (ngram - 1) * (w + max(1, w // 2)) <= room:
        width = w
        w += 1
    return width


def suggest_lookahead_params(curve: dict[int, float], budget: float = FLAT_BUDGET) -> tuple[LookaheadParams, str]:
    """Pick W/N/G and the prompt-lookup drafts whose tokens per step fit the near-flat part of ``curve``.

    Rule: reserve one 10-token prompt-lookup draft when at least 21 tokens fit;
    then the largest N (up to 5, the paper's choice) whose window W >= N-1 fits with a pool guess
    set G = W // 2 (at least 1: on most steps few pool n-grams start with the current token, the
    window is what finds new ones); failing that N=2 with the widest W. Returns the parameters and
    a sentence of reasoning with the measured numbers (of the curve made non-decreasing).
    """
    tokens = min(flat_tokens(curve, budget), MAX_STEP_TOKENS)
    measured_t1 = float(curve[min(curve)])
    curve = monotone(curve)
    t1 = curve[min(curve)]
    lookup = 1 if tokens >= 21 else 0
    room = tokens - lookup * PromptLookupParams().num_candidate_tokens
    for ngram in range(MAX_SUGGESTED_NGRAM, 1, -1):
        width = _widest_window(room, ngram)
        if width:
            break
    else:
        ngram, width = 2, max(1, _widest_window(room, 2))
    params = LookaheadParams(window=width, ngram=ngram, guess=max(1, width // 2), prompt_lookup=lookup).check()
    cost = _interpolate(curve, params.tokens_per_step) / t1
    drafts = f" and {lookup} prompt-lookup draft{'s' if lookup > 1 else ''}" if lookup else ""
    pooled = (f" (measured {measured_t1 * 1000:.1f} ms, pooled with larger passes that timed faster)"
              if abs(measured_t1 - t1) > 1e-12 else "")
    reasoning = (
        f"one forward pass costs {t1 * 1000:.1f} ms for 1 token{pooled}; up to about {tokens} tokens it stays "
        f"within {budget:.2f}x of that. W={width}, N={ngram}, G={params.guess}{drafts} put at most "
        f"{params.tokens_per_step} tokens in each step (about {cost:.2f}x a one-token pass), so each step must "
        f"accept about {max(0.0, cost - 1):.2f} extra tokens to pay off."
    )
    if tokens < 4:
        reasoning += " The curve rises almost at once here: lookahead decoding is unlikely to pay off on this hardware."
    return params, reasoning


def _interpolate(curve: dict[int, float], n: int) -> float:
    points = sorted(curve.items())
    if n <= points[0][0]:
        return points[0][1]
    for (n0, t0), (n1, t1) in zip(points, points[1:]):
        if n <= n1:
            return t0 + (t1 - t0) * (n - n0) / (n1 - n0)
    (n0, t0), (n1, t1) = points[-2:] if len(points) > 1 else (points[0], points[0])
    slope = (t1 - t0) / (n1 - n0) if n1 != n0 else 0.0
    return t1 + slope * (n - n1)
