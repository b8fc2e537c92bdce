"""The decoding methods specpilot runs, each with its parameter model and how to call it.

One table maps a method name to its pydantic parameter model and runner, so the CLI, the agent's
tools, compare and bench all run methods the same way. Defaults live in the parameter models.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tools.engine.lookahead import LookaheadParams
from tools.engine.medusa import MedusaParams
from tools.engine.prompt_lookup import PromptLookupParams
from tools.engine.types import DecodeResult, GenerationSettings
from tools.errors import ModelNotFoundError, ParameterError



class BaselineParams(BaseModel):
    """The baseline has no parameters of its own."""

    model_config = ConfigDict(extra="forbid")


class DraftParams(BaseModel):
    """Draft-model speculative decoding parameters.

    Defaults chosen from a sweep on a 2-core CPU with the default pair (README, "Measured"): start
    at K=8, adapt K up to 16, stop a draft early when the draft's top probability is below 0.4, and
    draft with an int8 copy of the draft model on a CPU. None of them changes the output.
    """

    model_config = ConfigDict(extra="forbid")

    k: int = Field(8, ge=1, le=16, description="draft tokens per step (the starting K when adaptive)")
    adaptive_k: bool = Field(True, description="grow K after a fully accepted step, shrink it after a rejection")
    k_max: int | None = Field(16, ge=1, le=16, description="upper bound for adaptive K (None: 2k)")
    draft_confidence: float | None = Field(
        0.4, ge=0.0, lt=1.0, description="stop drafting when the draft's top probability falls below this"
    )
    draft_quant: Literal["auto", "none", "int8"] = Field(
        "auto", description="int8 copy of the draft on CPUs (auto: int8 on a CPU, none on a GPU); output unchanged"
    )
    draft_vocab: int | None = Field(
        None, ge=1, description="draft over the N lowest token ids only (output unchanged; cheaper draft LM head)"
    )


@dataclass(frozen=True)
class MethodSpec:
    """Everything specpilot knows about one method, in one place: the CLI options, the tool schemas,
    the report colours and the dependency check are all read from ``METHODS``."""

    name: str
    params: type[BaseModel]
    description: str
    colour: str  # chart colour
    lossless: str  # what stays exact, in words
    needs_draft: bool = False
    needs_heads: bool = False
    training: str = "none"  # what has to be trained before the method can run


METHODS: dict[str, MethodSpec] = {spec.name: spec for spec in (
    MethodSpec("baseline", BaselineParams, "plain KV-cached autoregressive generation", "#7f7f7f", "reference"),
    MethodSpec("draft", DraftParams, "draft-model speculative decoding (rejection sampling, exact)", "#1f77b4",
               "greedy: identical; sampling: lossless (rejection sampling)", needs_draft=True),
    MethodSpec("medusa", MedusaParams, "Medusa heads with tree attention (greedy exact; typical acceptance lossy)",
               "#d62728", "greedy: identical; typical acceptance: lossy by design", needs_heads=True,
               training="Medusa heads"),
    MethodSpec("lookahead", LookaheadParams, "lookahead decoding: Jacobi iteration + n-gram pool verification (exact)",
               "#2ca02c", "greedy: identical; sampling: lossless"),
    MethodSpec("ngram", PromptLookupParams, "prompt lookup: n-gram candidates copied from the prompt/output (exact)",
               "#9467bd", "greedy: identical; sampling: lossless"),
)}
METHOD_NAMES = tuple(METHODS)
ACCELERATED = tuple(name for name in METHOD_NAMES if name != "baseline")  # the methods that speed up decoding
MethodName = Literal[METHOD_NAMES]  # type: ignore[valid-type]  (the schema's enum, built from the table)
AcceleratedName = Literal[ACCELERATED]  # type: ignore[valid-type]
PARAM_MODELS: dict[str, type[BaseModel]] = {name: spec.params for name, spec in METHODS.items()}
DESCRIPTIONS = {name: spec.description for name, spec in METHODS.items()}


def parse_params(method: str, params: dict | None) -> BaseModel:
    """Validate a method's parameters; raise ParameterError naming the bad field."""
    if method not in PARAM_MODELS:
        raise ParameterError(f"unknown method {method!r}", hint=f"choose one of: {', '.join(METHOD_NAMES)}")
    clean = {k: v for k, v in (params or {}).items() if v is not None}
    try:
        model = PARAM_MODELS[method](**clean)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(x) for x in err["loc"])
        allowed = ", ".join(PARAM_MODELS[method].model_fields)
        raise ParameterError(
            f"bad {method} parameter {field}: {err['msg']}", hint=f"{method} takes: {allowed or 'no parameters'}"
        ) from None
    check = getattr(model, "check", None)
    if callable(check):
        check()
    return model


@dataclass
class MethodContext:
    """Loaded models a method may need."""

    target: object  # tools.models.LoadedModel
    draft: object | None = None  # LoadedModel
    medusa_heads: object | None = None  # MedusaHeads


def needs_draft(method: str) -> bool:
    return METHODS[method].needs_draft


def run(method: str, ctx: MethodContext, prompt_ids: list[int], settings: GenerationSettings,
        params: BaseModel) -> DecodeResult:
    """Run one method on prompt ids; return its DecodeResult."""
    model = ctx.target.model
    if method == "baseline":
        from tools.engine.autoregressive import generate

        return generate(model, prompt_ids, settings)
    if method == "draft":
        from tools.engine.speculative import SpeculativeDecoder

        p: DraftParams = params  # type: ignore[assignment]
        decoder = SpeculativeDecoder(
            inference=ctx.target, draft=ctx.draft, k=p.k, temperature=settings.temperature, top_p=settings.top_p,
            top_k=settings.top_k, seed=settings.seed, adaptive_k=p.adaptive_k, k_max=p.k_max,
            draft_confidence=p.draft_confidence, draft_vocab=p.draft_vocab, draft_quant=p.draft_quant,
            eos_token_ids=settings.eos_token_ids,
        )
        return decoder.run(prompt_ids, settings)
    if method == "medusa":
        from tools.engine.medusa import generate

        return generate(model, ctx.medusa_heads, prompt_ids, settings, params)
    if method == "lookahead":
        from tools.engine.lookahead import generate

        return generate(model, prompt_ids, settings, params)
    if method == "ngram":
        from tools.engine.prompt_lookup import generate

        return generate(model, prompt_ids, settings, params)
    raise ParameterError(f"unknown method {method!r}", hint=f"choose one of: {', '.join(METHOD_NAMES)}")
