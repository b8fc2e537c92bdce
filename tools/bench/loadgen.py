"""A closed-loop load generator for OpenAI-compatible servers (vLLM, SGLang, llama-server): the figures
serving engineers decide with, measured per concurrency level.

``run_level`` keeps ``concurrency`` streams busy: each stream sends its next request as soon as its
previous reply has finished, until every request of the level has been answered (closed loop, no
arrival rate). Every request streams (``/v1/completions`` with ``stream: true``), so the client sees
when the first token arrives and the gap between chunks. Per level:

- throughput: output tokens of all requests / wall time from the first send to the last reply;
- TTFT: time to first token (send to the first chunk that carries text or token ids);
- TPOT: time per output token after the first, per request: (end - first token) / (tokens - 1);
- ITL: inter-token latency, the gaps between chunks (with speculation a chunk may carry several
  tokens, as in vLLM's own ``vllm bench serve``);
- p50 and p99 of each, over the level's requests (ITL over all gaps).

Token ids come back where the server gives them (vLLM's ``return_token_ids``); ``logprobs`` asks for
the top-2 per position (the near-tie diagnosis of a divergent greedy output). The HTTP client is httpx
(already a dependency of the anthropic SDK); nothing here imports torch.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from tools.errors import DependencyError

REQUEST_TIMEOUT_S = 1800.0  # one reply on a busy 2-core CPU with a 1.5B target stays far below


@dataclass(frozen=True)
class RequestSpec:
    """One request of a level: ``key`` names its prompt (the same key on every server, for comparison)."""

    key: str
    prompt: list[int] | str  # token ids (vLLM, SGLang) or text
    max_tokens: int


@dataclass
class RequestResult:
    key: str
    ok: bool = False
    error: str | None = None
    sent_at: float = 0.0  # seconds after the level started
    ttft_s: float | None = None
    e2e_s: float | None = None
    chunk_gaps_s: list[float] = field(default_factory=list)
    output_tokens: int = 0
    token_ids: list[int] | None = None
    text: str = ""
    top_logprobs: list[dict[str, float]] | None = None  # per position, token -> logprob (when asked)
    finish_reason: str | None = None

    @property
    def tpot_s(self) -> float | None:
        if not self.ok or self.ttft_s is None or self.e2e_s is None or self.output_tokens < 2:
            return None
        return (self.e2e_s - self.ttft_s) / (self.output_tokens - 1)


@dataclass
class LevelResult:
    concurrency: int
    requests: list[RequestResult]
    wall_s: float

    def summary(self) -> dict[str, Any]:
        """The level's figures (milliseconds for latencies, tokens/s for throughput)."""
        done = [r for r in self.requests if r.ok]
        tokens = sum(r.output_tokens for r in done)
        gaps = [g for r in done for g in r.chunk_gaps_s]
        out = {"concurrency": self.concurrency, "requests": len(self.requests), "completed": len(done),
               "failed": len(self.requests) - len(done), "output_tokens": tokens, "wall_s": self.wall_s,
               "throughput_tok_s": tokens / self.wall_s if self.wall_s > 0 else None,
               "request_throughput_s": len(done) / self.wall_s if self.wall_s > 0 else None}
        for name, values in (("ttft", [r.ttft_s for r in done if r.ttft_s is not None]),
                             ("tpot", [r.tpot_s for r in done if r.tpot_s is not None]),
                             ("itl", gaps), ("e2e", [r.e2e_s for r in done if r.e2e_s is not None])):
            for q in (50, 99):
                p = percentile(values, q)
                out[f"{name}_p{q}_ms"] = p * 1000 if p is not None else None
        errors = sorted({r.error for r in self.requests if r.error})
        if errors:
            out["errors"] = errors[:3]
        return out


def percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile with linear interpolation between ranks (numpy's default), None when empty."""
    if not values:
        return None
    xs = sorted(values)
    rank = (len(xs) - 1) * q / 100
    lo, hi = math.floor(rank), math.ceil(rank)
    return xs[lo] + (xs[hi] - xs[lo]) * (rank - lo)


def request_body(model: str, spec: RequestSpec, sampling: dict[str, Any], logprobs: int | None) -> dict[str, Any]:
    """The streamed ``/v1/completions`` body: the prompt, the sampling settings, token ids and usage back."""
    body = {"model": model, "prompt": spec.prompt, "max_tokens": spec.max_tokens, "stream": True,
            "stream_options": {"include_usage": True}, "return_token_ids": True, **sampling}
    if logprobs:
        body["logprobs"] = logprobs
    return body


def _read_chunk(result: RequestResult, chunk: dict[str, Any], now: float, last: list[float]) -> None:
    """Fold one streamed chunk into ``result``; ``last`` holds the time of the previous token chunk."""
    usage = chunk.get("usage")
    if usage and usage.get("completion_tokens") is not None:
        result.output_tokens = int(usage["completion_tokens"])
    for choice in chunk.get("choices") or []:
        text, ids = choice.get("text") or "", choice.get("token_ids")
        if text or ids:
            if result.ttft_s is None:
                result.ttft_s = now
            else:
                result.chunk_gaps_s.append(now - last[0])
            last[0] = now
        result.text += text
        if ids:  # appended in place: the client's own work per chunk stays small while it times the stream
            if result.token_ids is None:
                result.token_ids = []
            result.token_ids.extend(int(t) for t in ids)
        lp = choice.get("logprobs") or {}
        if lp.get("top_logprobs"):
            if result.top_logprobs is None:
                result.top_logprobs = []
            result.top_logprobs.extend(dict(d or {}) for d in lp["top_logprobs"])
        if choice.get("finish_reason"):
            result.finish_reason = choice["finish_reason"]


async def _send(client: httpx.AsyncClient, url: str, body: dict, spec: RequestSpec, t0: float) -> RequestResult:
    result = RequestResult(key=spec.key, sent_at=time.perf_counter() - t0)
    start, last = time.perf_counter(), [0.0]
    try:
        async with client.stream("POST", url, json=body) as reply:
            if reply.status_code != 200:
                detail = (await reply.aread())[:300].decode(errors="replace")
                result.error = f"HTTP {reply.status_code}: {detail}"
                return result
            async for line in reply.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                _read_chunk(result, json.loads(data), time.perf_counter() - start, last)
    except (httpx.HTTPError, OSError, ValueError) as exc:
        result.error = f"{type(exc).__name__}: {exc}"[:300]
        return result
    result.e2e_s = time.perf_counter() - start
    if not result.output_tokens:  # a server that sends no usage: count ids, else chunks
        result.output_tokens = len(result.token_ids or []) or (len(result.chunk_gaps_s) + (result.ttft_s is not None))
    result.ok = True
    return result


async def _run_level(base_url: str, model: str, specs: list[RequestSpec], concurrency: int,
                     sampling: dict[str, Any], logprobs: int | None, timeout_s: float) -> LevelResult:
    url = base_url.rstrip("/") + "/v1/completions"
    pending = list(enumerate(specs))
    results: list[RequestResult | None] = [None] * len(specs)
    limits = httpx.Limits(max_connections=concurrency + 2, max_keepalive_connections=concurrency + 2)
    async with httpx.AsyncClient(timeout=httpx.Timeout(timeout_s, connect=30.0), limits=limits) as client:
        t0 = time.perf_counter()

        async def stream() -> None:
            while pending:
                i, spec = pending.pop(0)
                results[i] = await _send(client, url, request_body(model, spec, sampling, logprobs), spec, t0)

        await asyncio.gather(*(stream() for _ in range(max(1, min(concurrency, len(specs))))))
        wall = time.perf_counter() - t0
    return LevelResult(concurrency=concurrency, requests=[r for r in results if r is not None], wall_s=wall)


def run_level(base_url: str, model: str, specs: list[RequestSpec], concurrency: int, sampling: dict[str, Any],
              logprobs: int | None = None, timeout_s: float = REQUEST_TIMEOUT_S) -> LevelResult:
    """Send ``specs`` over ``concurrency`` closed-loop streams to the server at ``base_url``; every reply timed."""
    if concurrency < 1:
        raise ValueError("concurrency must be at least 1")
    return asyncio.run(_run_level(base_url, model, specs, concurrency, sampling, logprobs, timeout_s))


def level_specs(prompts: list[tuple[str, list[int] | str]], concurrency: int, max_tokens: int,
                requests: int | None = None) -> list[RequestSpec]:
    """The requests of one level: the prompts in turn until ``requests`` are listed (default: every prompt
    once and at least two per stream, so each stream is busy for more than its first request)."""
    n = requests or max(len(prompts), 2 * concurrency)
    return [RequestSpec(key=prompts[i % len(prompts)][0], prompt=prompts[i % len(prompts)][1], max_tokens=max_tokens)
            for i in range(n)]


def served_model(base_url: str, timeout_s: float = 30.0) -> str:
    """The first model id a server lists at ``/v1/models`` (what an endpoint serves)."""
    try:
        reply = httpx.get(base_url.rstrip("/") + "/v1/models", timeout=timeout_s)
        reply.raise_for_status()
        return reply.json()["data"][0]["id"]
    except (httpx.HTTPError, OSError, ValueError, KeyError, IndexError) as exc:
        raise DependencyError(f"{base_url} does not answer /v1/models as an OpenAI-compatible server does: {exc}",
                              hint="check the URL (e.g. http://127.0.0.1:8000) and that the server is up") from None
