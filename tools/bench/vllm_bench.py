"""Measure vLLM's own speculative modes against vLLM with speculation off, per concurrency level.

For each configuration (the baseline, then every method at every K asked) one server is started
(tools.bench.vllm_server), used for every prompt and level, and stopped before the next one loads.
On each server:

1. a correctness pass, which is also the warm-up and is not timed: every prompt once, one at a time,
   greedy outputs kept as token ids (the baseline's with its top-2 log-probabilities per position);
2. per concurrency level, a closed loop of ``requests_per_level`` requests over that many streams
   (tools.bench.loadgen), vLLM's spec-decode counters read from ``/metrics`` before and after it.

Every method's correctness-pass output is compared token by token with the baseline's; at the first
differing token the baseline's top-1/top-2 log-probability margin says whether it is a floating-point
near-tie (see :func:`diagnose`). Speedup at a level is the method's output throughput over the
baseline's at the same level. Each (method, K, level) is stored as a run (backend ``vllm``) linked to
one task; the result names the K with the highest throughput per method and level.

``endpoint`` measures a server somebody else started (vLLM or SGLang, one node or many) with the same
load generator: its figures, and a speedup where ``baseline_endpoint`` names the same model served
with speculation off.
"""

from __future__ import annotations

import json
import logging
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

from memory import Store
from tools import models
from tools.bench import loadgen, vllm_metrics, vllm_server
from tools.bench.prompt_sets import prompt_ids_for
from tools.engine import cpu_info
from tools.bench.record import RunRecord
from tools.bench.vllm_methods import DEFAULT_K, check_methods, spec_config
from tools.errors import DependencyError, ParameterError, interruption

log = logging.getLogger(__name__)

NEAR_TIE_ULPS = 8  # as tools.bench.protocol: a margin within this many units of the dtype's resolution
LOGIT_SCALE = 20.0  # the order of a top logit of these models: the resolution is taken at that magnitude
EPS = {"bfloat16": 2 ** -7, "float16": 2 ** -10, "float32": 2 ** -23}
CONTEXT_ROUND = 256


class ServeBenchInput(BaseModel):
    """A measurement on vLLM (or an OpenAI-compatible endpoint): methods x K x concurrency levels."""

    model_config = ConfigDict(extra="forbid")

    target: str = models.DEFAULT_TARGET
    draft: str | None = Field(None, description="draft model for 'draft' (default: the built-in draft of the target)")
    methods: list[str] = Field(default_factory=lambda: ["ngram"], min_length=1, max_length=8)
    params: dict[str, dict] = Field(default_factory=dict, description="each method's own parameters")
    k: list[int] | None = Field(None, description="K values (num_speculative_tokens) to sweep; default 4")
    concurrency: list[int] = Field(default_factory=lambda: [1], min_length=1, max_length=16)
    requests_per_level: int | None = Field(None, ge=1, le=10_000)
    max_new_tokens: int = Field(128, ge=1, le=8192)
    temperature: float = Field(0.0, ge=0.0, le=100.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = Field(0, ge=0)
    seed: int = 0
    chat: bool = True
    dtype: str = "auto"
    max_model_len: int | None = Field(None, ge=64, le=1_048_576)
    threads: int | None = Field(None, ge=1, le=1024)
    kv_cache_gib: int | None = Field(None, ge=1, le=4096)
    tensor_parallel_size: int = Field(1, ge=1, le=1024)
    pipeline_parallel_size: int = Field(1, ge=1, le=1024)
    distributed_executor_backend: Literal["mp", "ray"] | None = None
    eagle_heads: str | None = None
    medusa_heads: str | None = None
    endpoint: str | None = Field(None, description="an OpenAI-compatible server to measure instead of starting vLLM")
    baseline_endpoint: str | None = Field(None, description="the same model served with speculation off (speedup)")
    bracket: bool = Field(False, description="measure speculation off again after the methods: speedups against the "
                                             "mean of both, and the drift between them reported per level")
    prompts: list[dict] = Field(default_factory=list, description="question_id, category, prompt")
    prompt_set: str | None = None

    @field_validator("k")
    @classmethod
    def _k_range(cls, ks):
        if ks is not None and (not ks or any(not 1 <= k <= 16 for k in ks)):
            raise ValueError("each K must be 1-16")
        return sorted(set(ks)) if ks else ks

    @field_validator("concurrency")
    @classmethod
    def _levels(cls, levels):
        if any(not 1 <= c <= 1024 for c in levels):
            raise ValueError("each concurrency level must be 1-1024")
        return sorted(set(levels))

    @field_validator("endpoint", "baseline_endpoint")
    @classmethod
    def _url(cls, url):
        if url is None:
            return url
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"{url!r} is not an http(s) URL such as http://127.0.0.1:8000")
        return url.rstrip("/")


# ------------------------------------------------------------------------------------------ models
def model_folder(ref: str, what: str) -> Path:
    """A transformers folder vLLM can load for ``ref`` (a built-in model's safetensors cache, or a folder)."""
    folder, gguf = models.resolve_ref(ref)
    if gguf is not None or not isinstance(folder, Path):
        raise ParameterError(f"the {what} {ref} is not a transformers folder on this machine, which vLLM loads here",
                             hint="give a folder with config.json and safetensors, or a built-in model after "
                                  "`specpilot models fetch` (which converts it once)")
    return folder


def server_dtype(dtype: str, cuda: bool) -> str:
    """What ``--dtype`` the server gets: ``auto`` is bfloat16 on a CPU with fast bfloat16, float32 on one
    without (vLLM's own auto would take the checkpoint's bfloat16 and run 5x slower on AVX2)."""
    if dtype != "auto":
        return dtype
    if cuda:
        return "auto"
    return "bfloat16" if models.cpu_supports_fast_bf16() else "float32"


def sized_context(prompt_lengths: list[int], max_new_tokens: int, k: int) -> int:
    """The server's max model length: the longest prompt, the new tokens and a draft's K, rounded up (sized
    to the job: the KV cache of a CPU server is a few GiB, not a GPU's 32k-token default)."""
    need = max(prompt_lengths or [512]) + max_new_tokens + k + 16
    return int(math.ceil(need / CONTEXT_ROUND) * CONTEXT_ROUND)


def tokenized_prompts(inp: ServeBenchInput, folder: Path | None) -> list[tuple[str, list[int] | str]]:
    """(key, prompt) per prompt: token ids through the target's tokenizer (chat template unless raw), or the
    text where there is no local tokenizer (an endpoint serving a model not on this machine)."""
    if folder is None:
        return [(str(p["question_id"]), p["prompt"]) for p in inp.prompts]
    from transformers import AutoTokenizer  # slow to import: only once a measurement starts

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    return [(str(p["question_id"]), prompt_ids_for(tokenizer, p["prompt"], inp.chat)) for p in inp.prompts]


# ------------------------------------------------------------------------------------------ equality
def diagnose(baseline: loadgen.RequestResult, method: loadgen.RequestResult, dtype: str) -> dict | None:
    """Where ``method``'s greedy output leaves ``baseline``'s (None when identical), with the baseline's
    top-1/top-2 log-probability margin there and ``kind``: near_tie, mismatch or length."""
    a, b = baseline.token_ids, method.token_ids
    if a is None or b is None:  # a server that returns no ids: text
        if baseline.text == method.text:
            return None
        pos = next((i for i, (x, y) in enumerate(zip(baseline.text, method.text)) if x != y),
                   min(len(baseline.text), len(method.text)))
        return {"position": pos, "unit": "character", "kind": "text", "explanation": "texts differ (no token ids)"}
    pos = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
    if pos is None:
        if len(a) == len(b):
            return None
        return {"position": min(len(a), len(b)), "kind": "length", "margin": None,
                "explanation": "one output stopped earlier (EOS or length)"}
    out = {"position": pos, "baseline_token": a[pos], "method_token": b[pos], "kind": "mismatch", "margin": None}
    tops = (baseline.top_logprobs or [])[pos:pos + 1]
    values = sorted(tops[0].values(), reverse=True)[:2] if tops else []
    if len(values) == 2:
        margin = values[0] - values[1]
        resolution = EPS.get(dtype, EPS["float32"]) * LOGIT_SCALE
        near = margin <= NEAR_TIE_ULPS * resolution
        out.update(margin=margin, resolution=resolution, kind="near_tie" if near else "mismatch",
                   explanation=(f"floating-point near-tie: the baseline's top-1/top-2 margin {margin:.4g} is within "
                                f"{NEAR_TIE_ULPS} units of {dtype} resolution at a logit of {LOGIT_SCALE:g}"
                                if near else f"real mismatch: margin {margin:.4g} is far above {dtype} resolution"))
    else:
        out["explanation"] = "the server gave no log-probabilities to tell a near-tie from a mismatch"
    return out


def equality(baseline: dict[str, loadgen.RequestResult], method: dict[str, loadgen.RequestResult],
             dtype: str) -> tuple[bool, dict | None, dict[str, int]]:
    """(every output identical, the divergence to show: the first real mismatch, else the first other one, with
    its prompt key, and how many prompts were identical / near-ties / mismatches / other)."""
    found, kinds = [], {"identical": 0}
    for key, base in baseline.items():
        d = diagnose(base, method[key], dtype) if key in method else {"kind": "missing", "position": 0}
        if d is None:
            kinds["identical"] += 1
            continue
        kinds[d["kind"]] = kinds.get(d["kind"], 0) + 1
        found.append({"prompt": key, **d})
    shown = next((d for d in found if d["kind"] == "mismatch"), found[0] if found else None)
    return not found, shown, kinds


# ------------------------------------------------------------------------------------------ one server
@dataclass
class Measured:
    method: str
    k: int | None = None
    spec_config: dict | None = None
    outputs: dict = field(default_factory=dict)  # prompt key -> RequestResult (correctness pass)
    levels: dict = field(default_factory=dict)  # concurrency -> summary with acceptance
    server: str | None = None


def measure_server(base_url: str, served: str, prompts: list[tuple[str, list[int] | str]], inp: ServeBenchInput,
                   logprobs: bool, progress=None, label: str = "") -> tuple[dict, dict]:
    """The correctness pass and every level on one running server: (outputs by prompt key, level figures)."""
    sampling = {"temperature": inp.temperature, "top_p": inp.top_p, "seed": inp.seed}
    if inp.top_k:
        sampling["top_k"] = inp.top_k
    if progress:
        progress(f"{label}: correctness pass and warm-up ({len(prompts)} prompts, one at a time)")
    specs = [loadgen.RequestSpec(key, prompt, inp.max_new_tokens) for key, prompt in prompts]
    first = loadgen.run_level(base_url, served, specs, 1, {**sampling, **({"return_tokens_as_token_ids": True}
                                                                           if logprobs else {})},
                              logprobs=2 if logprobs else None)
    failed = [r for r in first.requests if not r.ok]
    if failed:
        raise DependencyError(f"{label}: the server failed a request: {failed[0].error}",
                              hint="the server's log says why; check the model and its max length")
    outputs = {r.key: r for r in first.requests}
    levels = {}
    for c in inp.concurrency:
        if progress:
            progress(f"{label}: {c} concurrent stream{'s' if c > 1 else ''}")
        before = vllm_metrics.read_spec_counters(base_url)
        level = loadgen.run_level(base_url, served, loadgen.level_specs(prompts, c, inp.max_new_tokens,
                                                                        inp.requests_per_level), c, sampling)
        after = vllm_metrics.read_spec_counters(base_url)
        figures = level.summary()
        figures.update((after - before).figures() if after is not None and before is not None else
                       {"acceptance_rate": None, "acceptance_length": None})
        levels[c] = figures
    return outputs, levels


# ------------------------------------------------------------------------------------------ the sweep
def configurations(inp: ServeBenchInput, methods: list[str], draft_folder, heads: dict) -> list[tuple[str, int | None, dict | None]]:
    """(method, K, vLLM speculative config) for the baseline and each method at each K."""
    out = [("baseline", None, None)]
    for method in methods:
        for k in inp.k or [DEFAULT_K]:
            config = spec_config(method, k, inp.params.get(method, {}), draft_folder=draft_folder,
                                 heads_folder=heads.get(method))
            k = config.get("num_speculative_tokens", k)  # Medusa: at most one token per head
            if (method, k) not in [(m, kk) for m, kk, _ in out]:
                out.append((method, k, config))
    return out


def serve_bench(inp: ServeBenchInput, store: Store | None = None, progress=None) -> dict:
    """Measure every configuration of ``inp`` (see the module docstring); store the runs; return the rows."""
    store = store if store is not None else Store()
    if not inp.prompts:
        raise ParameterError("no prompts to measure", hint="give --prompt, --prompt-file or --prompts")
    methods = check_methods(inp.methods)
    if inp.endpoint:
        return endpoint_bench(inp, store, progress)
    state = vllm_server.require_ready()
    cuda = state.get("device") == "cuda"
    target = model_folder(inp.target, "target")
    draft_folder = None
    if "draft" in methods:
        draft_ref = inp.draft or models.builtin_draft_for(inp.target)
        if draft_ref is None:
            raise ParameterError(f"no built-in draft model shares {inp.target}'s tokenizer",
                                 hint="give --draft with a smaller model of the same family")
        draft_folder = model_folder(draft_ref, "draft")
    heads = {m: Path(inp.eagle_heads).expanduser().resolve() for m in ("eagle", "eagle3") if inp.eagle_heads}
    if "medusa" in methods:
        heads["medusa"] = medusa_folder(inp, target, store)
    dtype = server_dtype(inp.dtype, cuda)
    prompts = tokenized_prompts(inp, target)
    configs = configurations(inp, methods, draft_folder, heads)
    if inp.bracket:
        configs.append((AFTER, None, None))
    max_len = inp.max_model_len or sized_context([len(p) for _, p in prompts if isinstance(p, list)],
                                                 inp.max_new_tokens, max(inp.k or [DEFAULT_K]))
    task_id = store.create_task(task_request(inp, methods), "bench-vllm", [config_name(m, k) for m, k, _ in configs])
    measured: list[Measured] = []
    try:
        for method, k, config in configs:
            name = config_name(method, k)
            argv = lambda port, c=config: vllm_server.serve_argv(  # noqa: E731
                str(target), port, dtype=dtype, max_model_len=max_len, spec_config=c,
                tensor_parallel_size=inp.tensor_parallel_size, pipeline_parallel_size=inp.pipeline_parallel_size,
                distributed_executor_backend=inp.distributed_executor_backend, enforce_eager=not cuda, seed=inp.seed)
            if progress:
                progress(f"{name}: starting vLLM")
            with vllm_server.VllmServer(argv, f"vLLM ({name})", env=vllm_server.server_env(
                    inp.kv_cache_gib or (None if cuda else 4), inp.threads)) as server:
                outputs, levels = measure_server(server.base_url, vllm_server.SERVED_NAME, prompts, inp,
                                                 logprobs=method == "baseline", progress=progress, label=name)
                measured.append(Measured(method=method, k=k, spec_config=config, outputs=outputs, levels=levels,
                                         server=" ".join(server.argv[1:])))
            store.update_task(task_id, done=[name])
    except KeyboardInterrupt as exc:
        store.update_task(task_id, status="unfinished", note=f"{interruption(exc)}; measured: "
                          f"{', '.join(config_name(m.method, m.k) for m in measured) or 'nothing'}")
        raise
    except Exception as exc:
        store.update_task(task_id, status="failed", note=f"stopped by an error: {exc}")
        raise
    result = assemble(inp, measured, dtype, store, task_id, versions={**state.get("versions", {}),
                                                                      "device": state.get("device")})
    result["summary"] = summary_lines(result)
    store.update_task(task_id, status="done", run_ids=[r["run_id"] for r in result["rows"]])
    return result


def endpoint_bench(inp: ServeBenchInput, store: Store, progress=None) -> dict:
    """The load generator against ``inp.endpoint`` (and ``baseline_endpoint`` for the speedup)."""
    try:
        folder = model_folder(inp.target, "target")
    except SpecpilotErrors:
        folder = None  # a model that lives only on the server: prompts go as text
    prompts = tokenized_prompts(inp, folder)
    task_id = store.create_task(task_request(inp, ["endpoint"]), "bench-endpoint", ["endpoint"])
    measured = []
    try:
        for method, url in (("baseline", inp.baseline_endpoint), ("endpoint", inp.endpoint)):
            if url is None:
                continue
            outputs, levels = measure_server(url, loadgen.served_model(url), prompts, inp, logprobs=method == "baseline",
                                             progress=progress, label=f"{method} {url}")
            measured.append(Measured(method=method, outputs=outputs, levels=levels, server=url))
    except KeyboardInterrupt as exc:
        store.update_task(task_id, status="unfinished", note=interruption(exc))
        raise
    result = assemble(inp, measured, inp.dtype, store, task_id, versions={"endpoint": inp.endpoint})
    result["summary"] = summary_lines(result)
    store.update_task(task_id, status="done", done=["endpoint"], run_ids=[r["run_id"] for r in result["rows"]])
    return result


SpecpilotErrors = (ParameterError, models.ModelNotFoundError)


def medusa_folder(inp: ServeBenchInput, target: Path, store: Store) -> Path:
    """Medusa heads for the target in vLLM's format (exported once beside specpilot's peers)."""
    from tools.bench.vllm_medusa import export_for_vllm  # loads torch: only when Medusa is asked

    return export_for_vllm(inp.target, inp.medusa_heads, target, store)


AFTER = "baseline_after"  # the baseline measured again after the methods (bracket)


def config_name(method: str, k: int | None) -> str:
    if method == AFTER:
        return "baseline (again, after the methods)"
    return method if k is None else f"{method} K={k}"


def reference_level(base: Measured | None, after: Measured | None, c: int) -> tuple[dict | None, float | None]:
    """The baseline's figures at level ``c`` (throughput the mean of both measurements where bracketed) and the
    drift between the two (|after - before| / before), None without a second measurement."""
    ref = base.levels.get(c) if base else None
    again = after.levels.get(c) if after else None
    if not ref or not again or not ref.get("throughput_tok_s") or not again.get("throughput_tok_s"):
        return ref, None
    before, later = ref["throughput_tok_s"], again["throughput_tok_s"]
    return {**ref, "throughput_tok_s": (before + later) / 2}, abs(later - before) / before


def task_request(inp: ServeBenchInput, methods: list[str]) -> str:
    where = inp.endpoint or "vLLM"
    return (f"bench on {where}: {', '.join(methods)} at concurrency {', '.join(map(str, inp.concurrency))}"
            + (f", K {', '.join(map(str, inp.k))}" if inp.k else "") + f", {len(inp.prompts)} prompt(s)")


# ------------------------------------------------------------------------------------------ rows
def assemble(inp: ServeBenchInput, measured: list[Measured], dtype: str, store: Store, task_id: int,
             versions: dict) -> dict:
    """Rows per (method, K, level) with speedups against the baseline at the same level; runs stored."""
    hardware = ({"device": "cpu", "cpu": cpu_info.cpu_model_name(), "cpu_cores": os.cpu_count(),
                 "isa": cpu_info.cpu_isa(), "name": cpu_info.cpu_name(inp.threads)}
                if versions.get("device") != "cuda" else {"device": "cuda", "name": versions.get("gpu") or "CUDA GPU"})
    base = next((m for m in measured if m.method == "baseline"), None)
    after = next((m for m in measured if m.method == AFTER), None)
    rows = []
    for m in measured:
        if m is after:
            continue
        same, first, kinds = equality(base.outputs, m.outputs, dtype) if base and m is not base else (None, None, None)
        for c, lv in m.levels.items():
            ref, drift = reference_level(base, after, c)
            speedup = (lv["throughput_tok_s"] / ref["throughput_tok_s"]
                       if ref and ref.get("throughput_tok_s") and lv.get("throughput_tok_s") else None)
            row = {"method": m.method, "k": m.k, "concurrency": c, "speedup": speedup,
                   **{key: lv.get(key) for key in ("throughput_tok_s", "tpot_p50_ms", "tpot_p99_ms", "itl_p50_ms",
                                                   "itl_p99_ms", "ttft_p50_ms", "ttft_p99_ms", "e2e_p50_ms",
                                                   "acceptance_rate", "acceptance_length", "requests", "failed")},
                   "baseline_throughput_tok_s": ref.get("throughput_tok_s") if ref else None,
                   "matches_baseline": (True if m is base else same), "outputs": kinds,
                   "first_divergence": first, "baseline_drift": drift}
            if m is base and ref:  # the reference itself: bracketed, the mean of its two measurements
                row.update(speedup=1.0, throughput_tok_s=ref["throughput_tok_s"])
            row["run_id"] = store.add_run(run_record(inp, m, row, lv, ref, dtype, hardware, versions, task_id))
            rows.append(row)
    return {"backend": "vllm" if not inp.endpoint else "endpoint", "task_id": task_id, "rows": rows,
            "best_k": best_k(rows), "hardware": hardware, "dtype": dtype, "versions": versions,
            "settings": {"max_new_tokens": inp.max_new_tokens, "temperature": inp.temperature, "top_p": inp.top_p,
                         "top_k": inp.top_k, "seed": inp.seed, "chat": inp.chat,
                         "requests_per_level": inp.requests_per_level, "concurrency": inp.concurrency},
            "target": inp.target, "prompts": len(inp.prompts), "prompt_set": inp.prompt_set,
            "servers": {config_name(m.method, m.k): m.server for m in measured}}


def run_record(inp, m: Measured, row: dict, level: dict, ref: dict | None, dtype: str, hardware: dict,
               versions: dict, task_id: int) -> dict:
    """The stored run of one (method, K, level): the typed record's fields, the level's figures in method_extra."""
    record = RunRecord(
        method=m.method, task_id=task_id, backend="vllm" if not inp.endpoint else "endpoint", target=inp.target,
        draft=inp.draft if m.method == "draft" else None,
        params={"k": m.k, **inp.params.get(m.method, {})} if m.k else dict(inp.params.get(m.method, {})),
        params_source="given" if inp.k else "default",
        settings={"max_new_tokens": inp.max_new_tokens, "temperature": inp.temperature, "top_p": inp.top_p,
                  "top_k": inp.top_k, "seed": inp.seed, "concurrency": row["concurrency"],
                  "requests": level.get("requests")},
        prompt=inp.prompts[0]["prompt"] if len(inp.prompts) == 1 else None, chat=inp.chat,
        prompt_set=inp.prompt_set, new_tokens=level.get("output_tokens"),
        matches_baseline=row["matches_baseline"], first_divergence=row["first_divergence"],
        wall_time_s=level.get("wall_s"), tokens_per_s=level.get("throughput_tok_s"),
        baseline_wall_time_s=ref.get("wall_s") if ref else None,
        baseline_tokens_per_s=ref.get("throughput_tok_s") if ref else None, speedup=row["speedup"],
        acceptance_rate=level.get("acceptance_rate"), tokens_drafted=level.get("draft_tokens"),
        tokens_accepted=level.get("accepted_tokens"), steps=level.get("drafts"),
        mean_accepted_per_step=level.get("acceptance_length"),
        method_extra={"level": level, "spec_config": m.spec_config, "server": m.server,
                      "baseline_drift": row.get("baseline_drift")},
        hardware=hardware, dtype=dtype, versions=versions, sweep={"concurrency": row["concurrency"], "k": m.k},
    )
    return record.to_store()


def best_k(rows: list[dict]) -> dict[str, dict[str, int]]:
    """Per method and level, the K with the highest throughput (only where more than one K was measured)."""
    out: dict[str, dict[str, int]] = {}
    for method in dict.fromkeys(r["method"] for r in rows if r["k"] is not None):
        for c in dict.fromkeys(r["concurrency"] for r in rows):
            cands = [r for r in rows if r["method"] == method and r["concurrency"] == c and r["throughput_tok_s"]]
            if len({r["k"] for r in cands}) > 1:
                out.setdefault(method, {})[str(c)] = max(cands, key=lambda r: r["throughput_tok_s"])["k"]
    return out


def summary_lines(result: dict) -> list[str]:
    """A few lines a person reads: per level, the best configuration against the baseline."""
    lines = []
    for c in dict.fromkeys(r["concurrency"] for r in result["rows"]):
        at = [r for r in result["rows"] if r["concurrency"] == c and r["method"] != "baseline" and r["speedup"]]
        if not at:
            continue
        best = max(at, key=lambda r: r["speedup"])
        verdict = "faster" if best["speedup"] > 1.0 else "slower"
        lines.append(f"concurrency {c}: best {config_name(best['method'], best['k'])} at {best['speedup']:.2f}x "
                     f"throughput ({best['throughput_tok_s']:.1f} against {best['baseline_throughput_tok_s']:.1f} "
                     f"tokens/s with speculation off): {verdict} than speculation off here, in one measurement "
                     f"(run {best['run_id']})")
    drifts = {r["concurrency"]: r["baseline_drift"] for r in result["rows"] if r.get("baseline_drift") is not None}
    if drifts:
        lines.append("speculation off measured before and after the methods differed by " + ", ".join(
            f"{d:.0%} at concurrency {c}" for c, d in drifts.items()) + ": a speedup closer to 1.00x than that is "
            "within this run's own drift")
    for method, by_level in result.get("best_k", {}).items():
        lines.append(f"{method}: best K by level " + ", ".join(f"{c}: K={k}" for c, k in by_level.items()))
    return lines


def dumps(result: dict) -> str:
    return json.dumps(result, default=str)


def stored_sweep_lines(store: Store, target: str, method: str | None = None, limit: int = 500) -> list[str]:
    """What the newest stored vLLM measurement of ``target`` says per concurrency level: the best K of each
    method (or of ``method``) and its speedup over speculation off, with the run id. Empty when none is stored."""
    runs = [r for r in store.find_runs(limit=limit, backend="vllm", target=target)
            if r.get("method") != "baseline" and (method is None or r.get("method") == method) and r.get("speedup")]
    if not runs:
        return []
    newest = runs[0].get("task_id")
    runs = [r for r in runs if r.get("task_id") == newest]
    hw = (runs[0].get("hardware") or {}).get("name", "this machine")
    lines = []
    for m in dict.fromkeys(r["method"] for r in runs):
        levels = sorted({(r.get("settings") or {}).get("concurrency") for r in runs if r["method"] == m} - {None})
        for c in levels:
            at = [r for r in runs if r["method"] == m and (r.get("settings") or {}).get("concurrency") == c]
            best = max(at, key=lambda r: r.get("tokens_per_s") or 0)
            k = (best.get("params") or {}).get("k")
            lines.append(f"vLLM, {hw}: at concurrency {c}, {m}" + (f" K={k}" if k else "") +
                         (" was best" if len(at) > 1 else "") + f": {best['speedup']:.2f}x throughput against "
                         f"speculation off (run {best['run_id']}, task {newest})")
    return lines
