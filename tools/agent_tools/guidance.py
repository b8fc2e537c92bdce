"""The guidance and measure_cost_curve tools: their input models and registration. The work (cost
curves, quantization, the hardware, sizing) loads torch, so it lives in tools.agent_tools.advice and is
imported when a tool runs: listing the tools (the MCP server, the JSON CLI, the chat) stays fast.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from tools.agent_tools.choose import CATEGORIES, category_of, ranking
from tools.agent_tools.registry import ToolContext, tool
from tools.agent_tools.saved_params import resolve_target
from tools.bench.vllm_bench import stored_sweep_lines
from tools.engine.params import AcceleratedName


class GuidanceInput(BaseModel):
    """The method, the model and the hardware to tailor advice to."""

    model_config = ConfigDict(extra="forbid")

    method: AcceleratedName | None = Field(None, description="the method the person named; leave it out when they "
                                                             "did not name one: the answer is then a choice "
                                                             "between methods (for the task, when one is given)")
    task: str | None = Field(None, max_length=200, examples=list(CATEGORIES),
                             description="the kind of work to speed up, in the person's words or as Spec-Bench names "
                                         "it (the examples): the methods are ranked for it from what was measured")
    target: str | None = Field(None, description="the target model reference (default: the target saved in "
                                                 "memory, else the built-in default target)")
    target_size_b: float | None = Field(None, gt=0, description="target size in billions of parameters "
                                                                 "(read from the model name when not given)")
    hardware: Literal["auto", "cpu", "gpu"] = Field("auto", description="auto detects a CUDA GPU")
    backend: Literal["transformers", "llamacpp"] = Field(
        "transformers", description="the engine the runs use: llamacpp sizes to llama.cpp's cost curve of the GGUF "
                                    "file stored here (`specpilot guide METHOD --backend llamacpp --measure`)")
    measure: bool = Field(True, description="where no cost curve of the target is stored for this CPU, measure it "
                                            "first (loads the target: a few minutes on a small CPU) so the advice is "
                                            "this machine's; False: the method's starting values, said to be "
                                            "unmeasured")


class CostCurveInput(BaseModel):
    """The model whose forward-pass cost curve to measure on this machine."""

    model_config = ConfigDict(extra="forbid")

    target: str | None = Field(None, description="the target model reference (default: the target saved in "
                                                 "memory, else the built-in default target)")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    repeats: int = Field(5, ge=1, le=20)


def advice():
    """The module doing the work (tools.agent_tools.advice)."""
    # it loads torch (cost curves, quantization, the hardware): imported when a tool runs, not when tools are listed
    from tools.agent_tools import advice as work

    return work


def detect_hardware(choice: str) -> dict:
    """The hardware to advise for: {'kind': cpu|gpu, 'name', 'gpu_memory_gb'?} (tools.agent_tools.advice)."""
    return advice().detect_hardware(choice)


@tool("guidance", GuidanceInput)
def guidance(inp: GuidanceInput, ctx: ToolContext) -> dict:
    """Suggest starting parameters for a method, tailored to the target's size and the hardware: a draft
    smaller than the target that shares its tokenizer (or none, said so); Medusa threshold 0.09, alpha
    0.3 and a tree sized to the hardware; lookahead (and draft's K, prompt lookup's draft sizes) sized as
    run and compare size them, to this machine's measured cost curve: on a CPU where none is stored it is
    measured first (measure=False declines: then the method's starting values, said to be unmeasured); on a
    GPU without one, the source's W=15, N=5, G=5 with measure_cost_curve as the next step; each parameter
    with its reason. The target saved in memory is used when none is given.
    Uses measured sweeps from memory when present, and the newest stored vLLM sweep of the target (best K per
    concurrency level) under 'serving'. This is advice to be measured, never a result.
    Without a method (the person named none: "which method for summarising documents?") the answer is a
    choice between methods, as choose_method gives it, for ``task`` (matched to a Spec-Bench category); with a
    method and a task, the method's advice and that choice under 'choice'."""
    if inp.method is None:
        return method_choice(inp, ctx)
    result = advice().guidance(inp, ctx)
    if inp.task:
        result["choice"] = method_choice(inp, ctx)
    serving = stored_sweep_lines(ctx.store, result.get("target") or inp.target or "", inp.method)
    if serving and isinstance(result, dict):
        result["serving"] = serving
    return result


def method_choice(inp: GuidanceInput, ctx: ToolContext) -> dict:
    """guidance's answer when no method was named: choose_method's ranking for the task's category (every
    kind of request when the task names none), with the default method saved in memory, if any."""
    target, target_source = resolve_target(ctx.store, None, inp.target)
    category = category_of(inp.task)
    out = {"method": None, "task": inp.task, **ranking(ctx.store, category, target), "target_source": target_source}
    default = ctx.store.get_answer("default_method")
    if default:
        out["default_method"] = default
    return out


@tool("measure_cost_curve", CostCurveInput)
def measure_cost_curve(inp: CostCurveInput, ctx: ToolContext) -> dict:
    """Measure on this machine how one forward pass of the target costs with 1, 2, 4 ... 64 new tokens,
    store the curve, and size lookahead W/N/G to it (the target saved in memory when none is given).
    Loads the target model (can take a while)."""
    return advice().measure_cost_curve(inp, ctx)
