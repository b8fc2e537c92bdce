"""What a measurement runs on, loaded once and shared by run, compare, bench, tune and the demo: the
models (each loaded once per process), the Medusa heads, the prompt ids, the stop tokens, the
generation settings, and the transformers peers timed beside our methods.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel

from tools import models
from tools.bench import peers
from tools.bench.protocol import Runner
from tools.engine import quantize
from tools.engine.methods import METHODS, MethodContext
from tools.engine.types import GenerationSettings
from tools.errors import ParameterError, SpecpilotError
from tools.medusa.checkpoint import default_medusa_heads_path, load_medusa_heads

_LOADED: dict[tuple, models.LoadedModel] = {}


def load_cached(ref: str, dtype: str, device_map: str | None, threads: int | None = None) -> models.LoadedModel:
    """Load a model once per process (compare and bench reuse it across methods)."""
    key = (ref, dtype, device_map)
    if key not in _LOADED:
        _LOADED[key] = models.load(ref, dtype=dtype, device_map=device_map, threads=threads)
    return _LOADED[key]


def prompt_ids_for(tokenizer, prompt: str, chat: bool) -> list[int]:
    """The exact ids fed to the model: the chat template applied unless ``chat`` is False."""
    if chat and getattr(tokenizer, "chat_template", None):
        ids = tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=True, return_dict=False
        )
        if isinstance(ids, dict) or hasattr(ids, "keys"):
            ids = ids["input_ids"]
        return [int(t) for t in ids]
    ids = tokenizer(prompt, add_special_tokens=True)["input_ids"]
    if not ids:
        raise ParameterError("the prompt gives no tokens", hint="give a non-empty prompt")
    return [int(t) for t in ids]


def eos_ids_for(loaded: models.LoadedModel) -> list[int]:
    """Stop tokens: the generation config's EOS ids and the tokenizer's EOS."""
    ids: list[int] = []
    gen = getattr(loaded.model, "generation_config", None)
    eos = getattr(gen, "eos_token_id", None) if gen is not None else None
    for value in (eos if isinstance(eos, list) else [eos]) + [loaded.tokenizer.eos_token_id]:
        if value is not None and int(value) not in ids:
            ids.append(int(value))
    return ids


def generation_settings(inp: BaseModel, ctx: MethodContext) -> GenerationSettings:
    """The generation settings every method runs with (EOS ids from the target)."""
    return GenerationSettings(max_new_tokens=inp.max_new_tokens, temperature=inp.temperature, top_p=inp.top_p,
                              top_k=inp.top_k, seed=inp.seed, eos_token_ids=eos_ids_for(ctx.target))


# ---------------------------------------------------------------------------- Medusa heads
def trained_heads_path(store, target: str) -> str | None:
    """Heads trained here for ``target`` (recorded by the train tool), if the folder still exists."""
    path = store.trained_heads_path(target)
    return path if path and Path(path).is_dir() else None


def medusa_heads_for(store, target: str, given: str | None) -> str | None:
    """The Medusa heads to use: the given folder, else heads trained here, else the shipped ones."""
    if given:
        return given
    shipped = default_medusa_heads_path(target)
    return trained_heads_path(store, target) or (str(shipped) if shipped else None)


# ---------------------------------------------------------------------------- models
@dataclass
class Prepared:
    """Loaded models and what could not be loaded."""

    ctx: MethodContext
    unavailable: dict[str, str]  # method -> reason it cannot run here
    heads_path: str | None


def prepare(inp: BaseModel, methods: list[str], heads_path: str | None, progress=None,
            strict: bool = False) -> Prepared:
    """Load the target (errors propagate), the draft when a method needs it or peers are asked (the
    given draft, else the built-in one), and the Medusa heads when a method needs them.

    A draft or heads that cannot be loaded make the methods needing them "not run" (``unavailable``),
    or, with ``strict`` (a single run), raise. Without ``heads_path`` a strict load tries the shipped
    heads. A draft wanted only for the peers never raises: the assisted peer is then left out.
    """
    if progress:
        progress(f"loading target {inp.target}")
    target = load_cached(inp.target, inp.dtype, inp.device_map, inp.threads)
    ctx = MethodContext(target=target)
    unavailable: dict[str, str] = {}
    draft_methods = [m for m in methods if METHODS[m].needs_draft]
    if draft_methods or getattr(inp, "peers", False):
        ref = inp.draft or models.DEFAULT_DRAFT
        if progress:
            progress(f"loading draft {ref}")
        try:
            ctx.draft = load_cached(ref, inp.dtype, inp.device_map, inp.threads)
        except SpecpilotError as exc:
            if strict and draft_methods:
                raise
            for method in draft_methods:
                unavailable[method] = f"draft model not available: {ref}: {exc.user_message()}"
    for method in (m for m in methods if METHODS[m].needs_heads):
        if heads_path is None and not strict:
            unavailable[method] = (f"no Medusa heads for this target: train them with `specpilot medusa train "
                                   f"--target {inp.target}` (asks first) or pass --medusa-heads PATH")
            continue
        if progress and heads_path:
            progress(f"loading Medusa heads {heads_path}")
        try:
            ctx.medusa_heads = load_medusa_heads(target, heads_path)
        except SpecpilotError as exc:
            if strict:
                raise
            unavailable[method] = f"Medusa heads unusable: {heads_path}: {exc.user_message()}"
    return Prepared(ctx=ctx, unavailable=unavailable, heads_path=heads_path)


# ---------------------------------------------------------------------------- peers
def uses_int8_draft(method: str, params: BaseModel, ctx: MethodContext) -> bool:
    """Whether ``method`` drafts with the int8 copy of the draft model (draft_quant resolved here)."""
    return (METHODS[method].needs_draft and ctx.draft is not None
            and quantize.resolve(params.draft_quant, ctx.draft.device) == "int8")


def peer_runners(ctx: MethodContext, prompt_ids: list[int], int8_draft: bool = False) -> dict[str, Runner]:
    """transformers' assisted generation (when a draft is loaded; also with the int8 copy of the draft
    when ``int8_draft``, the same one our decoder uses, so the comparison is like for like) and
    prompt lookup."""
    out: dict[str, Runner] = {}
    if ctx.draft is not None:
        out["hf_assisted"] = lambda s: peers.hf_assisted(ctx.target.model, ctx.draft.model, prompt_ids, s)
        if int8_draft:
            q = quantize.int8_draft(ctx.draft.model)
            out["hf_assisted_int8"] = lambda s: peers.hf_assisted(ctx.target.model, q, prompt_ids, s)
    out["hf_prompt_lookup"] = lambda s: peers.hf_prompt_lookup(ctx.target.model, prompt_ids, s)
    return out
