"""specpilot's methods as vLLM's ``--speculative-config``: which of them vLLM runs, and with what.

| ours     | vLLM ``method``          | what it needs                                                       |
|----------|--------------------------|---------------------------------------------------------------------|
| baseline | (speculation off)        |                                                                     |
| ngram    | ``ngram``                | K; ``min_ngram_size``/``max_ngram_size`` as prompt_lookup_min/max   |
| draft    | ``draft_model``          | a draft folder with the target's tokenizer (built-in: the 0.5B)     |
| eagle    | ``eagle``                | an upstream EAGLE-1/2 head folder (``eagle_heads``)                  |
| eagle3   | ``eagle3``               | an upstream EAGLE-3 head folder (``eagle_heads``)                    |
| medusa   | ``medusa``               | Medusa heads; ours are exported to vLLM's Medusa format              |
| mtp      | ``mtp``                  | a target with multi-token-prediction layers (DeepSeek-V3, Qwen3-Next) |
| lookahead| none                     | vLLM has no Jacobi/lookahead mode                                    |

K is ``num_speculative_tokens`` (Medusa: the number of heads). Nothing here imports torch or vLLM.
"""

from __future__ import annotations

import json
from pathlib import Path

from tools.errors import ParameterError

VLLM_METHODS = ("baseline", "ngram", "draft", "eagle", "eagle3", "medusa", "mtp")
NOT_IN_VLLM = {"lookahead": "vLLM has no lookahead (Jacobi) decoding; measure it with --backend transformers"}
DEFAULT_K = 4  # vLLM's documented examples use 3-5; `--k 1,2,4,8` sweeps it per concurrency level


def check_methods(methods: list[str]) -> list[str]:
    """The methods in order, each once, baseline left out (it always runs); ParameterError for one vLLM lacks."""
    out = []
    for name in methods:
        if name in NOT_IN_VLLM:
            raise ParameterError(f"{name} does not run on vLLM: {NOT_IN_VLLM[name]}",
                                 hint=f"choose from: {', '.join(VLLM_METHODS[1:])}")
        if name not in VLLM_METHODS:
            raise ParameterError(f"unknown method {name!r} for --backend vllm", hint=f"choose from: {', '.join(VLLM_METHODS[1:])}")
        if name != "baseline" and name not in out:
            out.append(name)
    return out


def eagle_kind(folder: Path) -> str:
    """``eagle3`` when the head folder's config names an EAGLE-3 architecture, else ``eagle``."""
    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return "eagle"
    names = " ".join(config.get("architectures") or []) + " " + str(config.get("model_type", ""))
    return "eagle3" if "eagle3" in names.lower() else "eagle"


def spec_config(method: str, k: int, params: dict, *, draft_folder: Path | None = None,
                heads_folder: Path | None = None) -> dict | None:
    """vLLM's speculative config for ``method`` with K = ``k`` (None for the baseline); ParameterError with
    what to give where a method lacks what it needs."""
    if method == "baseline":
        return None
    if method == "ngram":
        config = {"method": "ngram", "num_speculative_tokens": k}
        lo, hi = params.get("min_ngram_size"), params.get("max_ngram_size")
        if hi is not None:
            config["prompt_lookup_max"] = int(hi)
        if lo is not None:
            config["prompt_lookup_min"] = int(lo)
        return config
    if method == "draft":
        if draft_folder is None:
            raise ParameterError("the draft model has no transformers folder vLLM can load",
                                 hint="give --draft a folder with config.json, safetensors and the tokenizer, or a "
                                      "built-in model name (fetched with `specpilot models fetch`)")
        return {"method": "draft_model", "model": str(draft_folder), "num_speculative_tokens": k}
    if method in ("eagle", "eagle3"):
        if heads_folder is None:
            raise ParameterError(f"{method} on vLLM needs an upstream EAGLE head folder (config.json and weights, as "
                                 "the EAGLE authors and vLLM publish them); specpilot's own head format does not load there",
                                 hint="pass --eagle-heads FOLDER with a head trained for this target")
        kind = method if method == "eagle3" else eagle_kind(heads_folder)
        return {"method": kind, "model": str(heads_folder), "num_speculative_tokens": k}
    if method == "medusa":
        if heads_folder is None:
            raise ParameterError("medusa on vLLM needs heads in vLLM's Medusa format",
                                 hint="train or ship heads for this target (specpilot exports them)")
        heads = int(json.loads((heads_folder / "config.json").read_text()).get("num_heads", k))
        return {"method": "medusa", "model": str(heads_folder), "num_speculative_tokens": min(k, heads)}
    if method == "mtp":
        return {"method": "mtp", "num_speculative_tokens": k}
    raise ParameterError(f"unknown method {method!r} for --backend vllm", hint=f"choose from: {', '.join(VLLM_METHODS)}")
