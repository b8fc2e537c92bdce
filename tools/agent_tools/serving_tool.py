"""The measure_serving tool: vLLM's own speculative modes (or a running OpenAI-compatible server) measured
against speculation off at each concurrency level, for the agent (tools.bench.vllm_bench does the work)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from tools import models
from tools.agent_tools.registry import ToolContext, tool
from tools.bench.prompt_sets import load_prompt_set
from tools.bench.vllm_bench import ServeBenchInput, serve_bench, summary_lines

ServingMethod = Literal["ngram", "draft", "eagle", "eagle3", "medusa", "mtp"]


class ServingInput(BaseModel):
    """Which speculative modes to measure on vLLM, at which loads, on which prompts."""

    model_config = ConfigDict(extra="forbid")

    methods: list[ServingMethod] = Field(default_factory=lambda: ["ngram"], min_length=1, max_length=6,
                                         description="vLLM speculative modes: ngram (prompt lookup), draft (a draft "
                                                     "model), eagle/eagle3 (an upstream head), medusa, mtp")
    concurrency: list[int] = Field(default_factory=lambda: [1], min_length=1, max_length=16,
                                   description="concurrent request streams per level, e.g. [1, 4, 16]")
    k: list[int] | None = Field(None, description="K values (speculative tokens) to sweep, e.g. [1, 2, 4, 8]; "
                                                  "default 4")
    prompt: str | None = Field(None, max_length=100_000, description="one prompt; default: one prompt per "
                                                                     "category of the shipped eval half")
    target: str = models.DEFAULT_TARGET
    draft: str | None = None
    max_new_tokens: int = Field(128, ge=1, le=8192)
    endpoint: str | None = Field(None, description="an OpenAI-compatible server already running to measure instead")
    baseline_endpoint: str | None = Field(None, description="the same model served with speculation off")


@tool("measure_serving", ServingInput)
def measure_serving(inp: ServingInput, ctx: ToolContext) -> dict:
    """Measure speculative decoding where people serve: start vLLM on 127.0.0.1 (needs `specpilot peers setup
    vllm`) once with speculation off and once per method and K, send closed-loop load at each concurrency
    level, and return per level: output tokens/s, speedup over speculation off, TPOT/ITL/TTFT p50/p99,
    acceptance length from vLLM's own counters, whether greedy output matched, the best K per level and
    run ids. With endpoint, measures that running server instead. Report the figures exactly, with run ids."""
    prompts = ([{"question_id": "prompt", "category": "prompt", "prompt": inp.prompt}] if inp.prompt
               else load_prompt_set("eval", None, 1))
    bench_input = ServeBenchInput(target=inp.target, draft=inp.draft, methods=list(inp.methods), k=inp.k,
                                  concurrency=inp.concurrency, max_new_tokens=inp.max_new_tokens,
                                  endpoint=inp.endpoint, baseline_endpoint=inp.baseline_endpoint, prompts=prompts,
                                  prompt_set=None if inp.prompt else "eval")
    ctx.report(f"measuring {', '.join(inp.methods)} on {inp.endpoint or 'vLLM'} at concurrency "
               f"{', '.join(map(str, bench_input.concurrency))}")
    result = serve_bench(bench_input, store=ctx.store, progress=ctx.progress)
    result["statement"] = summary_lines(result)
    result["source"] = f"measured now on this machine; stored as task {result['task_id']}"
    return result
