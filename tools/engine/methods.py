"""The decoding methods specpilot runs, each with its parameter model and how to call it.

One table maps a method name to its pydantic parameter model and runner, so the CLI, the agent's
tools, compare and bench all run methods the same way. Defaults live in the parameter models.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel

from tools.engine import autoregressive, eagle, lookahead, medusa, prompt_lookup
from tools.engine.params import (ACCELERATED, DESCRIPTIONS, METHOD_NAMES, METHODS, PARAM_MODELS, AcceleratedName,
                                 BaselineParams, DraftParams, LookaheadParams, MedusaParams, MethodName, MethodSpec,
                                 PromptLookupParams, parse_params)
from tools.engine.speculative import SpeculativeDecoder
from tools.engine.types import DecodeResult, GenerationSettings
from tools.errors import ParameterError

__all__ = ["AcceleratedName", "LookaheadParams", "MedusaParams", "MethodName", "PromptLookupParams", "ACCELERATED", "DESCRIPTIONS", "METHODS", "METHOD_NAMES", "PARAM_MODELS", "BaselineParams", "DraftParams",
           "MethodContext", "MethodSpec", "needs_draft", "parse_params", "run"]

@dataclass
class MethodContext:
    """Loaded models a method may need."""

    target: object  # tools.models.LoadedModel
    draft: object | None = None  # LoadedModel
    gguf_draft: object | None = None  # the same draft on llama.cpp (tools.engine.llamacpp), for draft_quant="gguf"
    medusa_heads: object | None = None  # MedusaHeads
    eagle_head: object | None = None  # EagleHead


def needs_draft(method: str) -> bool:
    return METHODS[method].needs_draft


def run(method: str, ctx: MethodContext, prompt_ids: list[int], settings: GenerationSettings,
        params: BaseModel) -> DecodeResult:
    """Run one method on prompt ids; return its DecodeResult. ``params`` is the method's parameter model."""
    target = ctx.target.model
    if method == "baseline":
        return autoregressive.generate(target, prompt_ids, settings)
    if method == "draft":
        options = params.model_dump()
        if params.draft_quant == "gguf" and ctx.gguf_draft is not None:
            until = params.gguf_draft_until
            if until is None or ctx.draft is None or len(prompt_ids) <= until * settings.max_new_tokens:
                draft = ctx.gguf_draft
            else:  # a long prompt: the int8 copy reads it faster than llama.cpp
                draft, options["draft_quant"] = ctx.draft, "auto"
        else:
            draft = ctx.draft
        decoder = SpeculativeDecoder.for_settings(ctx.target, draft, settings, **options)
        return decoder.run(prompt_ids, settings)
    if method == "medusa":
        return medusa.generate(target, ctx.medusa_heads, prompt_ids, settings, params)
    if method == "eagle":
        if ctx.eagle_head is None:
            raise ParameterError("EAGLE needs a draft head for this target", hint="train one with `specpilot eagle train`")
        return eagle.generate(target, ctx.eagle_head, prompt_ids, settings, params)
    if method == "lookahead":
        return lookahead.generate(target, prompt_ids, settings, params)
    if method == "ngram":
        return prompt_lookup.generate(target, prompt_ids, settings, params)
    raise ParameterError(f"unknown method {method!r}", hint=f"choose one of: {', '.join(METHOD_NAMES)}")
