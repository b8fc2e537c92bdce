"""``--backend vllm`` (and ``--endpoint URL``) for ``run``, ``compare`` and ``bench``: vLLM's own speculative
modes measured against vLLM with speculation off, per concurrency level (tools.bench.vllm_bench).

The options here are added to those three commands; they mean something only with ``--backend vllm``
or ``--endpoint``. Tables go to stdout, progress to stderr; ``--json`` prints one JSON object.
"""

from __future__ import annotations

import argparse
import json

from rich.table import Table

from agent.cli.options import int_list, prompt_text
from agent.render import err, fmt, out
from tools.bench import vllm_bench
from tools.bench.vllm_bench import ServeBenchInput
from tools.bench.vllm_methods import check_methods
from tools.report.results import save_result
from tools.report.serving import throughput_latency_chart
from tools import models
from tools.errors import ParameterError

SERVING_BACKEND = "vllm"


def add_serving_options(p: argparse.ArgumentParser) -> None:
    """The serving options of run, compare and bench (used with --backend vllm or --endpoint)."""
    g = p.add_argument_group("serving (--backend vllm, --endpoint)")
    g.add_argument("--concurrency", type=int_list, default=None, metavar="N[,N...]",
                   help="concurrent request streams per level, e.g. 1,4,16,64 (default 1)")
    g.add_argument("--requests-per-level", type=int, default=None, metavar="N",
                   help="requests sent at each level (default: every prompt once, and at least two per stream)")
    g.add_argument("--endpoint", default=None, metavar="URL",
                   help="measure an OpenAI-compatible server already running (vLLM or SGLang, any size) instead of "
                        "starting vLLM")
    g.add_argument("--baseline-endpoint", default=None, metavar="URL",
                   help="the same model served with speculation off, for --endpoint's speedup")
    g.add_argument("--tensor-parallel-size", type=int, default=1, help="passed to vllm serve")
    g.add_argument("--pipeline-parallel-size", type=int, default=1, help="passed to vllm serve")
    g.add_argument("--distributed-executor-backend", choices=["mp", "ray"], default=None,
                   help="passed to vllm serve (ray: several nodes)")
    g.add_argument("--max-model-len", type=int, default=None,
                   help="the server's context (default: the longest prompt plus the new tokens, rounded up)")
    g.add_argument("--bracket", action="store_true",
                   help="measure speculation off again after the methods: speedups against the mean of both, and "
                        "the drift between them reported (one more server start)")
    g.add_argument("--kv-cache-gib", type=int, default=None,
                   help="KV cache of a CPU server in GiB (VLLM_CPU_KVCACHE_SPACE; default 4)")


def wants_serving(args) -> bool:
    """Whether the command goes to vLLM or an endpoint rather than the in-process engines."""
    backends = args.backend if isinstance(args.backend, list) else [args.backend]
    if getattr(args, "endpoint", None):
        return True
    if SERVING_BACKEND in (backends or []):
        if len(backends) > 1:
            raise ParameterError("--backend vllm is measured on its own, not beside other engines in one table",
                                 hint="run the command once with --backend vllm and once with the other engine")
        return True
    if getattr(args, "concurrency", None) and args.concurrency != [1]:
        raise ParameterError("--concurrency needs a server: --backend vllm, or --endpoint URL",
                             hint="add --backend vllm (after `specpilot peers setup vllm`)")
    return False


def serving_methods(values: list[str] | None, default: list[str]) -> list[str]:
    """``--methods a b`` or ``a,b`` checked against what vLLM runs (eagle3 and mtp too; lookahead refused)."""
    names = [n.strip() for v in values or [] for n in v.split(",") if n.strip()] or list(default)
    return check_methods(names) or list(default)


def single_prompt(args) -> dict:
    """The one prompt of run / compare as a prompt-set row."""
    return {"question_id": "prompt", "category": "prompt", "prompt": prompt_text(args)}


def k_values(args) -> list[int] | None:
    k = getattr(args, "k", None)
    if k is None:
        return None
    return list(k) if isinstance(k, (list, tuple)) else [int(k)]


def method_params(args, methods: list[str]) -> dict[str, dict]:
    """The vLLM-relevant method options given on the command line (n-gram bounds)."""
    params = {}
    if "ngram" in methods and getattr(args, "max_ngram_size", None) is not None:
        params["ngram"] = {"max_ngram_size": args.max_ngram_size}
    return params


def serve_input(args, methods: list[str], prompts: list[dict], prompt_set: str | None):
    return ServeBenchInput(
        target=args.target or models.DEFAULT_TARGET, draft=args.draft, methods=methods,
        params=method_params(args, methods), k=k_values(args), concurrency=args.concurrency or [1],
        requests_per_level=args.requests_per_level, max_new_tokens=args.max_new_tokens, temperature=args.temperature,
        top_p=args.top_p, top_k=args.top_k, seed=args.seed, chat=args.chat, dtype=args.dtype,
        max_model_len=args.max_model_len, threads=args.threads, kv_cache_gib=args.kv_cache_gib,
        tensor_parallel_size=args.tensor_parallel_size, pipeline_parallel_size=args.pipeline_parallel_size,
        distributed_executor_backend=args.distributed_executor_backend, eagle_heads=getattr(args, "eagle_heads", None),
        medusa_heads=getattr(args, "medusa_heads", None), endpoint=args.endpoint,
        baseline_endpoint=args.baseline_endpoint, bracket=args.bracket, prompts=prompts, prompt_set=prompt_set)


def run_serving(args, methods: list[str], prompts: list[dict], prompt_set: str | None, command: str) -> int:
    """Measure, print the table (or JSON), draw the throughput/latency chart; 0 on success."""
    inp = serve_input(args, methods or ["ngram"], prompts, prompt_set)
    with err.status("starting…") as status:
        result = vllm_bench.serve_bench(inp, progress=lambda msg: status.update(msg))
    chart = throughput_latency_chart(result, command)
    if chart is not None:
        result["chart"] = str(chart)
    if getattr(args, "save_result", None):
        result["result_file"] = str(save_serving_result(args.save_result, result))
    if args.json:
        print(json.dumps(result, default=str))
        return 0
    out.print(serving_table(result))
    for line in result.get("summary") or []:
        out.print(line, highlight=False)
    if chart is not None:
        out.print(f"chart: {chart}", highlight=False)
    return 0


def save_serving_result(name: str, result: dict):
    """``benchmarks/results/NAME.json`` of kind ``vllm_sweep`` (tools.report.results)."""
    rows = [{k: v for k, v in r.items() if k not in ("first_divergence",)} for r in result["rows"]]
    summary = {"lines": result.get("summary"), "best_k": result.get("best_k"), "target": result.get("target"),
               "prompts": result.get("prompts"),
               "prompt_set": result.get("prompt_set"), "versions": result.get("versions"),
               "settings": result.get("settings")}
    return save_result(name, "vllm_sweep", rows, summary, hardware=result.get("hardware") or {},
                       dtype=result.get("dtype"), threads=None)


def serving_table(result: dict) -> Table:
    hw = result.get("hardware") or {}
    where = "an endpoint" if result.get("backend") == "endpoint" else "vLLM"
    table = Table(title=f"speculation on {where} by concurrency — task {result['task_id']}",
                  caption=f"{hw.get('name', '?')} · {result.get('dtype')} · {result['prompts']} prompt(s) · "
                          f"{result['settings']['max_new_tokens']} new tokens max · speedup: output tokens/s against "
                          "speculation off at the same concurrency")
    right = ("streams", "tok/s", "speedup", "TPOT p50", "ITL p99", "TTFT p50", "TTFT p99", "accept len")
    for col in ("method", "K", "streams", "tok/s", "speedup", "TPOT p50", "ITL p99", "TTFT p50", "TTFT p99",
                "accept len", "output vs baseline", "run id"):
        table.add_column(col, justify="right" if col in right else "left", no_wrap=col in ("method", "run id"))
    for r in result["rows"]:
        same = r.get("matches_baseline")
        if same is None:
            text = "—"
        elif same:
            text = "identical"
        else:
            kinds = r.get("outputs") or {}
            text = ", ".join(f"{n} {kind.replace('_', ' ')}" for kind, n in kinds.items() if n)
        table.add_row(r["method"], str(r["k"] or "—"), str(r["concurrency"]), fmt(r["throughput_tok_s"], 1),
                      fmt(r["speedup"], 2, "x"), fmt(r["tpot_p50_ms"], 0, " ms"), fmt(r["itl_p99_ms"], 0, " ms"),
                      fmt(r["ttft_p50_ms"], 0, " ms"), fmt(r["ttft_p99_ms"], 0, " ms"),
                      fmt(r["acceptance_length"], 2), text, r["run_id"])
    return table
