"""A lower-precision copy of the draft model for CPUs: int8 dynamic quantization of its Linear layers.

On a CPU a forward pass of a small draft is bound by reading its weights; int8 weights halve the
bytes of bfloat16 (a quarter of float32). Only the draft is quantized: the target still verifies
every token at its own precision, so the output is unchanged; only the acceptance rate can move.

``gguf`` is the other way to a cheaper draft: the draft's GGUF file run by llama.cpp with its own
quantized weights (the built-in drafts are Q4_K_M files; transformers reads them dequantised). The
decoder is then given that llama.cpp backend as its draft (tools.bench.context loads it); a draft
loaded with transformers cannot be turned into one here.
"""

from __future__ import annotations

import copy
import logging
import warnings
import weakref

import torch

from tools.engine.cpu_gemm import plain_copy_memo
from tools.errors import ParameterError

log = logging.getLogger(__name__)

DRAFT_QUANT = ("auto", "none", "int8", "gguf")
_QUANTIZED: "weakref.WeakKeyDictionary[torch.nn.Module, torch.nn.Module]" = weakref.WeakKeyDictionary()


def int8_available() -> bool:
    """True when this torch build has a CPU int8 engine for dynamic quantization."""
    engines = torch.backends.quantized.supported_engines
    return hasattr(torch.ao.quantization, "quantize_dynamic") and any(e in engines for e in ("x86", "fbgemm"))


def resolve(mode: str, device: torch.device | str, engine: str = "transformers") -> str:
    """Map ``auto`` to ``int8`` on CPUs with an int8 engine, else ``none``, for a draft loaded with transformers;
    for one on llama.cpp (``engine``), ``auto`` and ``gguf`` are ``gguf`` (its own quantized weights)."""
    if mode not in DRAFT_QUANT:
        raise ParameterError(f"draft_quant must be one of {', '.join(DRAFT_QUANT)}, got {mode!r}")
    if engine == "llamacpp":
        if mode == "int8":
            raise ParameterError("an int8 copy is made of a draft loaded with transformers; this draft runs on "
                                 "llama.cpp with its GGUF file's own quantized weights",
                                 hint="leave draft_quant at auto (or gguf)")
        return "none" if mode == "none" else "gguf"
    if mode == "gguf":
        raise ParameterError("draft_quant=gguf drafts with the draft's GGUF file on llama.cpp, and this draft was "
                             "loaded with transformers",
                             hint="use `specpilot run`/`compare` with a built-in draft or a .gguf draft and "
                                  "llama-cpp-python installed (`specpilot deps`), or draft_quant auto/int8/none")
    if mode == "auto":
        return "int8" if torch.device(device).type == "cpu" and int8_available() else "none"
    if mode == "int8" and torch.device(device).type != "cpu":
        raise ParameterError("int8 draft quantization runs on the CPU only", hint="use draft_quant='none' on a GPU")
    if mode == "int8" and not int8_available():
        raise ParameterError("this torch build has no CPU int8 engine", hint="use draft_quant='none'")
    return mode


def int8_draft(model: torch.nn.Module) -> torch.nn.Module:
    """Return (and cache per model) an int8 dynamically quantized float32 copy of ``model``."""
    if model in _QUANTIZED:
        return _QUANTIZED[model]
    engines = torch.backends.quantized.supported_engines
    torch.backends.quantized.engine = "x86" if "x86" in engines else "fbgemm"
    clone = copy.deepcopy(model, plain_copy_memo(model))  # oneDNN layers copied as plain ones
    # nn.Module's own float(): transformers refuses .float() on a model it read from a GGUF file (it calls it
    # quantized), though its weights are dequantised ones like any other
    clone = torch.nn.Module.float(clone).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the eager quantization API warns that it is deprecated
        quantized = torch.ao.quantization.quantize_dynamic(clone, {torch.nn.Linear}, dtype=torch.qint8)
    _QUANTIZED[model] = quantized
    log.info("quantized the draft's Linear layers to int8")
    return quantized
