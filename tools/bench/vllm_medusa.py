"""specpilot's Medusa heads in vLLM's Medusa format (``model_type: medusa``), so ``--backend vllm`` runs
vLLM's own Medusa proposer with the heads specpilot trained or ships.

vLLM's Medusa model is the upstream one: per head, ``num_hidden_layers`` residual blocks ``x + SiLU(Wx + b)``
(``blocks.{h}.layers.{i}``, with bias: ``medusa_fc_bias``) and a vocabulary projection per head
(``lm_heads.{h}``), or one shared projection (``lm_head``, with ``original_lm_head``). specpilot's heads
with a shared projection use the target's lm_head: the export writes the target's output embedding as
that shared ``lm_head``, so the logits are the same. One difference vLLM documents: it proposes from each
head's top-1 token only (a chain of ``num_heads`` tokens), not a tree.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from tools.bench.upstream import peers_dir
from tools.medusa.checkpoint import default_medusa_heads_path, load_heads
from tools.errors import ParameterError


def export_for_vllm(target_ref: str, heads_ref: str | None, target_folder: Path, store) -> Path:
    """The heads for ``target_ref`` (given, trained here or shipped) as a vLLM Medusa folder (made once)."""
    shipped = default_medusa_heads_path(target_ref)
    ref = heads_ref or store.trained_heads_path(target_ref) or (str(shipped) if shipped else None)
    if ref is None:
        raise ParameterError(f"no Medusa heads for {target_ref}", hint="train them: `specpilot medusa train`, or give "
                                                                      "--medusa-heads FOLDER")
    heads = load_heads(ref)
    digest = hashlib.sha256()
    for name, value in sorted(heads.state_dict().items()):
        digest.update(name.encode())
        digest.update(value.float().numpy().tobytes())
    out = peers_dir() / "vllm-medusa" / digest.hexdigest()[:16]
    if (out / "config.json").exists():
        return out
    state = {}
    for key, value in heads.state_dict().items():
        kind, head, rest = key.split(".", 2)
        if kind == "blocks":  # blocks.{h}.{i}.linear.{weight,bias} -> blocks.{h}.layers.{i}.{weight,bias}
            layer, _, param = rest.split(".", 2)
            state[f"blocks.{head}.layers.{layer}.{param}"] = value.detach().to(torch.float32).contiguous()
        else:  # projections.{h}.weight -> lm_heads.{h}.weight
            state[f"lm_heads.{head}.weight"] = value.detach().to(torch.float32).contiguous()
    if heads.shared_projection:
        state["lm_head.weight"] = target_output_embedding(target_folder, load_file).contiguous()
    config = {"model_type": "medusa", "architectures": ["MedusaModel"], "hidden_size": heads.hidden_size,
              "vocab_size": heads.vocab_size, "num_heads": heads.num_heads, "num_hidden_layers": heads.num_layers,
              "medusa_fc_bias": True, "original_lm_head": bool(heads.shared_projection),
              "truncated_vocab_size": heads.vocab_size, "source": str(ref)}
    tmp = out.with_name(out.name + ".partial")
    tmp.mkdir(parents=True, exist_ok=True)
    save_file(state, str(tmp / "model.safetensors"))
    (tmp / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    tmp.replace(out)
    return out


def target_output_embedding(folder: Path, load_file):
    """The target's lm_head weight (its input embedding where the two are tied)."""
    tensors = {}
    for f in sorted(folder.glob("*.safetensors")):
        tensors.update(load_file(str(f)))
    for name in ("lm_head.weight", "model.embed_tokens.weight"):
        if name in tensors:
            return tensors[name].to(torch.float32)
    raise ParameterError(f"{folder} has neither lm_head.weight nor model.embed_tokens.weight",
                         hint="export Medusa heads for a Llama/Qwen-style transformers folder")
