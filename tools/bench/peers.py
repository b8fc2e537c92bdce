"""The engines' own generation, timed the same way as our methods: the peers our decoders must beat.

On transformers: assisted generation (same draft model) and prompt-lookup decoding. On llama.cpp
(through llama-cpp-python's high-level ``Llama``, tools.engine.llamacpp.LlamaReference): plain decoding
and its ``LlamaPromptLookupDecoding`` draft mode. llama.cpp's draft-simple and n-gram modes are in its
``common`` library, which llama-cpp-python does not bind: they run in llama-server, built once by
``specpilot peers setup llama.cpp`` (tools.bench.llamacpp_server)."""

from __future__ import annotations

import time

import torch

from tools.engine.autoregressive import as_input_ids, sync
from tools.engine.llamacpp import LlamaReference
from tools.engine.types import DecodeResult, GenerationSettings


# LlamaPromptLookupDecoding's own defaults: n-grams of up to 2 tokens, 10 draft tokens
LLAMACPP_PROMPT_LOOKUP = (2, 10)


def _hf_generate(method: str, model, prompt_ids, settings: GenerationSettings, **extra) -> DecodeResult:
    ids = as_input_ids(prompt_ids, model.device)
    kwargs = dict(
        attention_mask=torch.ones_like(ids),
        max_new_tokens=settings.max_new_tokens,
        do_sample=not settings.greedy,
        eos_token_id=list(settings.eos_token_ids) or None,
        pad_token_id=(settings.eos_token_ids or [0])[0],
    )
    if not settings.greedy:
        kwargs.update(temperature=settings.temperature, top_p=settings.top_p, top_k=settings.top_k or None)
        torch.manual_seed(settings.seed)
    t0 = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(ids, **kwargs, **extra)
    sync(model.device)
    elapsed = time.perf_counter() - t0
    new = out[0, ids.shape[1]:].tolist()
    # transformers pads after EOS only in batches; trim anything past the first EOS to be safe
    eos = set(settings.eos_token_ids)
    for i, t in enumerate(new):
        if t in eos:
            new = new[: i + 1]
            break
    return DecodeResult(method=method, output_ids=new, prefill_s=0.0, decode_s=elapsed, steps=0,
                        target_forwards=0, extra=extra_summary(extra))


def extra_summary(extra: dict) -> dict:
    return {k: (v if isinstance(v, (int, float, str, bool)) else type(v).__name__) for k, v in extra.items()}


def hf_assisted(model, draft_model, prompt_ids, settings: GenerationSettings) -> DecodeResult:
    """transformers' assisted generation with ``draft_model`` as the assistant."""
    return _hf_generate("hf_assisted", model, prompt_ids, settings, assistant_model=draft_model)


def hf_prompt_lookup(model, prompt_ids, settings: GenerationSettings, num_tokens: int = 10) -> DecodeResult:
    """transformers' prompt-lookup decoding (``prompt_lookup_num_tokens``)."""
    return _hf_generate("hf_prompt_lookup", model, prompt_ids, settings, prompt_lookup_num_tokens=num_tokens)


def hf_plain(model, prompt_ids, settings: GenerationSettings) -> DecodeResult:
    """transformers' plain ``generate``: the yardstick for our baseline's speed."""
    return _hf_generate("hf_generate", model, prompt_ids, settings)


def llamacpp_generate(method: str, reference: LlamaReference, prompt_ids, settings: GenerationSettings) -> DecodeResult:
    """One generation by llama-cpp-python's ``Llama`` (plain, or the draft mode ``reference`` was made with):
    the whole prompt processed again (no reuse of the previous call's cache), stopping at an EOS id."""
    out, took = reference.greedy(prompt_ids, settings.max_new_tokens, settings.eos_token_ids,
                                 temperature=settings.temperature, top_p=settings.top_p, top_k=settings.top_k,
                                 seed=settings.seed)
    eos = bool(out) and out[-1] in set(settings.eos_token_ids)
    return DecodeResult(method=method, output_ids=out, prefill_s=0.0, decode_s=took, steps=0, target_forwards=0,
                        stopped_by="eos" if eos else "length", extra={"engine": "llama-cpp-python Llama"})
