"""EAGLE-1 / EAGLE-2 draft heads in upstream's checkpoint format (SafeAILab/EAGLE), read as specpilot heads.

Upstream's EAGLE-1 and EAGLE-2 heads (``use_eagle3=False``: the Vicuna, LLaMA2-Chat, LLaMA3-Instruct
and Qwen2 heads published by the EAGLE authors) are a folder with ``config.json`` (a Llama config:
``hidden_size``, ``num_attention_heads``, ``num_key_value_heads``, ``intermediate_size``,
``rope_theta``, ``rms_norm_eps``, ``vocab_size``, ``num_hidden_layers`` = 1, optional ``bias`` for fc
and ``qkv_bias``) and ``pytorch_model.bin`` or ``model.safetensors`` with ``fc.*`` and ``layers.0.*``.
Their head is the one specpilot's is: fc over [embedding, feature] (the target's final, normed hidden
state), one decoder layer without the input norm, and the target's own LM head over the predicted
feature (the full vocabulary). Their head's positions start at 0 where ours start at 1; rotary
attention depends only on the difference, so the output is the same.

Not read (a clear error says so): EAGLE-3 heads (``midlayer.*``, ``d2t``: they read three of the
target's layers, which the engine does not hand over), heads of more than one layer, and RoPE scaling.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file

from tools.engine.eagle import EagleConfig, EagleHead
from tools.errors import ParameterError

CONFIG, WEIGHTS = "config.json", ("model.safetensors", "pytorch_model.bin")
# upstream's name -> ours; the biases may be absent (Llama: no q/k/v bias; ``bias: false``: no fc bias)
NAMES = {"fc.weight": "fc.weight", "fc.bias": "fc.bias",
         **{f"layers.0.self_attn.{p}_proj.{w}": f"{p}_proj.{w}" for p in "qkv" for w in ("weight", "bias")},
         "layers.0.self_attn.o_proj.weight": "o_proj.weight",
         "layers.0.post_attention_layernorm.weight": "post_norm.weight",
         **{f"layers.0.mlp.{p}_proj.weight": f"{p}_proj.weight" for p in ("gate", "up", "down")}}
OPTIONAL = {"fc.bias", "q_proj.bias", "k_proj.bias", "v_proj.bias"}
HINT = "use a specpilot head (`specpilot eagle train`) or an EAGLE-1/EAGLE-2 checkpoint folder"


def is_upstream(folder: Path) -> bool:
    """Whether ``folder`` looks like an upstream EAGLE checkpoint (config.json and its weights)."""
    return (folder / CONFIG).is_file() and any((folder / name).is_file() for name in WEIGHTS)


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    if (folder / WEIGHTS[0]).is_file():
        return load_file(str(folder / WEIGHTS[0]))
    state = torch.load(folder / WEIGHTS[1], map_location="cpu", weights_only=True)
    if not isinstance(state, dict):
        raise ParameterError(f"{folder / WEIGHTS[1]} holds no state dict", hint=HINT)
    return state


def _config(folder: Path, cfg: dict) -> EagleConfig:
    if cfg.get("rope_scaling"):
        raise ParameterError(f"{folder} uses RoPE scaling ({cfg['rope_scaling']}), which specpilot's head does not "
                             "implement", hint=HINT)
    if int(cfg.get("num_hidden_layers", 1)) != 1:
        raise ParameterError(f"{folder} is a {cfg['num_hidden_layers']}-layer EAGLE head; specpilot runs one layer",
                             hint=HINT)
    try:
        h, heads = int(cfg["hidden_size"]), int(cfg["num_attention_heads"])
        return EagleConfig(hidden_size=h, num_heads=heads, num_kv_heads=int(cfg.get("num_key_value_heads") or heads),
                           head_dim=int(cfg.get("head_dim") or h // heads),
                           intermediate_size=int(cfg["intermediate_size"]),
                           rope_theta=float(cfg.get("rope_theta") or 10000.0),
                           rms_eps=float(cfg.get("rms_norm_eps", 1e-6)), draft_vocab=int(cfg["vocab_size"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise ParameterError(f"{folder / CONFIG} is not an EAGLE head config ({exc!r} missing or wrong)",
                             hint=HINT) from exc


def load_upstream_head(folder: str | Path) -> EagleHead:
    """An EagleHead (float32, the full vocabulary) from an upstream EAGLE-1/EAGLE-2 checkpoint folder."""
    folder = Path(folder).expanduser()
    try:
        cfg = json.loads((folder / CONFIG).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ParameterError(f"cannot read {folder / CONFIG}: {exc}", hint=HINT) from exc
    state = _weights(folder)
    if "d2t" in state or any(k.startswith("midlayer.") for k in state):
        raise ParameterError(f"{folder} is an EAGLE-3 head: it reads three of the target's layers, which specpilot's "
                             "engine does not hand over; EAGLE-1/EAGLE-2 heads are read", hint=HINT)
    config = _config(folder, cfg if isinstance(cfg, dict) else {})
    head = EagleHead(config, torch.arange(config.draft_vocab))
    ours = {mine: state[theirs].float() for theirs, mine in NAMES.items() if theirs in state}
    missing = [theirs for theirs, mine in NAMES.items() if mine not in ours and mine not in OPTIONAL]
    if missing:
        raise ParameterError(f"{folder} lacks {', '.join(missing)}: not an EAGLE-1/EAGLE-2 head", hint=HINT)
    own = head.state_dict()
    for name in OPTIONAL - ours.keys():
        ours[name] = torch.zeros_like(own[name])  # absent bias: none
    wrong = [n for n, t in ours.items() if t.shape != own[n].shape]
    if wrong:
        raise ParameterError(f"{folder}: {', '.join(wrong)} do not have the shapes its config.json gives", hint=HINT)
    head.load_state_dict({**ours, "draft_ids": own["draft_ids"]})
    head.training_info = {"format": "upstream EAGLE-1/EAGLE-2", "folder": folder.name,
                          "base_model": cfg.get("_name_or_path") or cfg.get("base_model")}
    return head.eval()
