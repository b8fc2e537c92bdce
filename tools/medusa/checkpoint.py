"""Medusa head checkpoints: our format (save and load) and upstream's (load, and save for medusa-llm).

Our format is a folder with
- ``medusa_config.json``: ``format`` ("specpilot-medusa"), ``format_version``, ``medusa_num_heads``,
  ``medusa_num_layers``, ``hidden_size``, ``vocab_size``, ``shared_projection``,
  ``base_model_name_or_path``, ``dtype`` and optional ``training`` details;
- ``medusa_heads.safetensors``: the MedusaHeads state (``blocks.{head}.{layer}.linear.weight|bias``
  and, unless the projection is shared with the target's lm_head, ``projections.{head}.weight``).
  Shared (compact) checkpoints hold only the ResBlocks: a few tens of MB for a 1.5B target;
- optionally ``medusa_tree.json``: ``{"choices": [...], ...}``, a tree fitted to these heads
  (tools.medusa.tree_fit); ``tree="auto"`` uses it on a CPU. Any folder format may carry one.

Upstream's format (FasterDecoding/Medusa, e.g. FasterDecoding/medusa-vicuna-7b-v1.3) is a folder or
hub id with ``config.json`` (``base_model_name_or_path``, ``medusa_num_heads``,
``medusa_num_layers``) and ``medusa_lm_head.pt`` (or ``.safetensors``): the state dict of an
``nn.ModuleList`` of ``nn.Sequential(ResBlock x L, Linear(hidden, vocab, bias=False))``, so keys are
``{head}.{layer}.linear.weight|bias`` for layer < L and ``{head}.{L}.weight`` for the projection.
Upstream's v0.1 configs under-report the head count (its loader forces 5), so the number of heads
is read from the weights when the two disagree.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import re
from dataclasses import dataclass, field
from pathlib import Path

import torch

from tools import models
from tools.engine.medusa import MedusaHeads
from tools.engine.medusa_trees import load_choices, validate_choices
from tools.errors import ModelIntegrityError, ModelNotFoundError, ParameterError

log = logging.getLogger(__name__)

FORMAT = "specpilot-medusa"
FORMAT_VERSION = 1
CONFIG_NAME = "medusa_config.json"
WEIGHTS_NAME = "medusa_heads.safetensors"
TREE_NAME = "medusa_tree.json"
UPSTREAM_CONFIG = "config.json"
UPSTREAM_WEIGHTS = ("medusa_lm_head.pt", "medusa_lm_head.safetensors")
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class MedusaCheckpoint:
    """Loaded heads with where they came from: ``format`` is "specpilot" or "upstream"."""

    heads: MedusaHeads
    format: str
    source: str
    base_model: str | None
    config: dict = field(default_factory=dict)


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def save_heads(heads: MedusaHeads, folder: str | Path, base_model: str | None = None, dtype: str | None = None,
               training: dict | None = None) -> Path:
    """Write ``heads`` to ``folder`` in our format (compact when the projection is shared); return the folder.

    ``dtype`` ("float32", "bfloat16", "float16") converts the stored weights; default: as they are.
    """
    from safetensors.torch import save_file

    if dtype is not None and dtype not in _DTYPES:
        raise ParameterError(f"unknown dtype {dtype!r}", hint=f"use one of {', '.join(_DTYPES)}")
    out = Path(folder).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().to("cpu", _DTYPES[dtype] if dtype else v.dtype).contiguous()
             for k, v in heads.state_dict().items()}
    stored = dtype or (_dtype_name(next(iter(state.values())).dtype) if state else "float32")
    config = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "medusa_num_heads": heads.num_heads,
        "medusa_num_layers": heads.num_layers,
        "hidden_size": heads.hidden_size,
        "vocab_size": heads.vocab_size,
        "shared_projection": heads.shared_projection,
        "base_model_name_or_path": base_model,
        "dtype": stored,
    }
    if training:
        config["training"] = training
    (out / TREE_NAME).unlink(missing_ok=True)  # a tree fitted to earlier weights no longer applies
    tmp = out / (WEIGHTS_NAME + ".tmp")
    save_file(state, str(tmp), metadata={"format": FORMAT})
    os.replace(tmp, out / WEIGHTS_NAME)  # an interrupted save never leaves a half-written checkpoint
    (out / CONFIG_NAME).write_text(json.dumps(config, indent=2) + "\n")
    return out


def _resolve_folder(ref: str | Path) -> Path:
    """A local folder for ``ref``; hub ids are downloaded only when the hub is allowed."""
    path = Path(str(ref)).expanduser()
    if path.is_dir():
        return path
    text = str(ref)
    if text.count("/") != 1 or text.startswith((".", "/", "~")):
        raise ModelNotFoundError(f"Medusa heads folder {ref} does not exist", hint="check the path")
    offline = models.hub_offline()  # then only the hub cache on this machine, without a minute of retries
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(text, allow_patterns=[UPSTREAM_CONFIG, CONFIG_NAME, WEIGHTS_NAME,
                                                             *UPSTREAM_WEIGHTS], local_files_only=offline))
    except Exception as exc:  # network, auth, missing repo, not cached: all mean "not available here"
        why = f"{models.offline_reason()} and the hub cache on this machine does not hold it" if offline else \
            str(exc).splitlines()[0][:200]
        raise ModelNotFoundError(f"could not load Medusa heads {ref}: {why}",
                                 hint="this machine may be offline: pass a local checkpoint folder") from exc


def load_checkpoint(ref: str | Path, model=None, dtype: torch.dtype | None = None) -> MedusaCheckpoint:
    """Load Medusa heads from a folder (or hub id) in our format or upstream's.

    With ``model`` the heads are checked against it, attached (shared projection), and moved to its
    device and dtype; ``dtype`` overrides the dtype.
    """
    folder = _resolve_folder(ref)
    if (folder / CONFIG_NAME).exists():
        ckpt = _load_ours(folder)
    elif (folder / UPSTREAM_CONFIG).exists() and any((folder / n).exists() for n in UPSTREAM_WEIGHTS):
        ckpt = _load_upstream(folder, model)
    else:
        raise ModelNotFoundError(
            f"{folder} holds no Medusa heads",
            hint=f"expected {CONFIG_NAME} + {WEIGHTS_NAME}, or upstream's config.json + medusa_lm_head.pt",
        )
    heads = ckpt.heads
    heads.tree_choices = load_tree(folder)
    heads.tree_tokens = fitted_tree_tokens(folder) if heads.tree_choices is not None else None
    if model is not None:
        heads.to(device=model.device, dtype=dtype or model.dtype)
        heads.attach(model)
        _check_base(ckpt.base_model, model)
    elif dtype is not None:
        heads.to(dtype=dtype)
    heads.eval().requires_grad_(False)
    return ckpt


def fitted_tree_tokens(folder: Path) -> float | None:
    """Tokens a step of the fitted tree gave where it was fitted (1 + its ``fit_mean_accepted``: the fit half's
    accepted guesses per step), the prior of Medusa's cost gate; None where the tree file does not say."""
    try:
        accepted = json.loads((folder / TREE_NAME).read_text()).get("fit_mean_accepted")
    except (OSError, ValueError, AttributeError):
        return None
    return 1.0 + float(accepted) if isinstance(accepted, (int, float)) and accepted >= 0 else None


def load_tree(folder: Path) -> list[list[int]] | None:
    """The tree fitted to the heads in ``folder`` (``medusa_tree.json``), or None when there is none."""
    path = folder / TREE_NAME
    if not path.exists():
        return None
    try:
        return load_choices(path)
    except ParameterError as exc:
        raise ModelIntegrityError(f"{path} is not a valid Medusa tree: {exc}",
                                  hint=f"delete {TREE_NAME} or fit the tree again") from None


def save_tree(folder: str | Path, choices: list[list[int]], info: dict | None = None) -> Path:
    """Write a tree fitted to the heads in ``folder``; ``info`` records how it was fitted."""
    path = Path(folder).expanduser() / TREE_NAME
    path.write_text(json.dumps({"choices": validate_choices(choices), **(info or {})}, indent=1) + "\n")
    return path


def load_heads(ref: str | Path, model=None, dtype: torch.dtype | None = None) -> MedusaHeads:
    """Load Medusa heads (either format) ready for tools.engine.medusa.generate; see load_checkpoint."""
    return load_checkpoint(ref, model, dtype).heads


def _check_base(base: str | None, model) -> None:
    name = getattr(model.config, "_name_or_path", "") or getattr(model, "name_or_path", "")
    if base and name and Path(str(base)).name.lower() not in str(name).lower():
        log.warning("Medusa heads were trained for %s; the loaded target is %s", base, name)


def read_weights(path: Path) -> dict:
    """The tensors of a Medusa weights file (safetensors, or upstream's ``.pt``); a ModelIntegrityError
    naming the file when it is corrupt or partial."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        if path.suffix == ".pt":
            return torch.load(path, map_location="cpu", weights_only=True)
        return load_file(str(path))
    except (SafetensorError, OSError, RuntimeError, EOFError, ValueError, pickle.UnpicklingError) as exc:
        reason = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        raise ModelIntegrityError(
            f"cannot read the Medusa weights {path}: the file is corrupt or partial ({reason})",
            hint="download or copy the heads folder again, or train new heads: "
                 "`specpilot medusa train --target TARGET --out FOLDER` (asks first)") from exc


def _load_ours(folder: Path) -> MedusaCheckpoint:
    try:
        cfg = json.loads((folder / CONFIG_NAME).read_text())
        num_heads, num_layers = int(cfg["medusa_num_heads"]), int(cfg["medusa_num_layers"])
        hidden, vocab, shared = int(cfg["hidden_size"]), int(cfg["vocab_size"]), bool(cfg["shared_projection"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ModelIntegrityError(f"{folder / CONFIG_NAME} is not a valid Medusa config: {exc}",
                                  hint="re-save the heads or re-run `specpilot medusa train`") from exc
    if cfg.get("format") != FORMAT or int(cfg.get("format_version", 0)) > FORMAT_VERSION:
        raise ModelIntegrityError(f"{folder} uses Medusa format {cfg.get('format')} v{cfg.get('format_version')}",
                                  hint="upgrade specpilot to read it")
    weights = folder / WEIGHTS_NAME
    if not weights.exists():
        raise ModelIntegrityError(f"{weights} is missing", hint="re-save the heads")
    state = read_weights(weights)
    heads = MedusaHeads(hidden, vocab, num_heads, num_layers, shared_projection=shared)
    _load_state(heads, state, folder)
    heads.to(_DTYPES.get(cfg.get("dtype"), torch.float32))
    return MedusaCheckpoint(heads, "specpilot", str(folder), cfg.get("base_model_name_or_path"), cfg)


_UPSTREAM_KEY = re.compile(r"^(\d+)\.(\d+)\.(linear\.weight|linear\.bias|weight)$")


def upstream_state_to_ours(state: dict, num_layers: int) -> tuple[dict, int, int, int, int, bool]:
    """Map an upstream ``medusa_lm_head`` state dict to MedusaHeads keys.

    Returns (state, num_heads, num_layers, hidden_size, vocab_size or 0, shared_projection); the
    layer count comes from the weights when ``num_layers`` (the config's) disagrees.
    """
    state = {k.removeprefix("medusa_head."): v for k, v in state.items()}
    parsed = {}
    for key, value in state.items():
        m = _UPSTREAM_KEY.match(key)
        if not m:
            raise ModelIntegrityError(f"unexpected key {key!r} in upstream Medusa weights",
                                      hint="expected keys like 0.0.linear.weight and 0.1.weight")
        parsed[(int(m.group(1)), int(m.group(2)), m.group(3))] = value
    num_heads = 1 + max(h for h, _, _ in parsed)
    layers_found = len({i for _, i, kind in parsed if kind.startswith("linear")})
    if layers_found != num_layers:
        log.warning("upstream config says %d ResBlock layers, the weights hold %d: using the weights",
                    num_layers, layers_found)
        num_layers = layers_found
    projections = {h: v for (h, i, kind), v in parsed.items() if kind == "weight" and i == num_layers}
    shared = not projections
    if not shared and len(projections) != num_heads:
        raise ModelIntegrityError(f"upstream Medusa weights have projections for {len(projections)} of {num_heads} heads")
    ours = {}
    for (h, i, kind), value in parsed.items():
        if kind.startswith("linear"):
            ours[f"blocks.{h}.{i}.{kind}"] = value
        elif i != num_layers:
            raise ModelIntegrityError(f"upstream Medusa head {h} has a projection at layer {i}, expected {num_layers}")
    for h, value in projections.items():
        ours[f"projections.{h}.weight"] = value
    any_block = next((v for k, v in ours.items() if k.endswith("linear.weight")), None)
    hidden = int(any_block.shape[0]) if any_block is not None else int(next(iter(projections.values())).shape[1])
    vocab = int(next(iter(projections.values())).shape[0]) if projections else 0
    return ours, num_heads, num_layers, hidden, vocab, shared


def ours_state_to_upstream(heads: MedusaHeads) -> dict:
    """MedusaHeads' state under upstream's keys (the inverse of :func:`upstream_state_to_ours`). Heads with
    a shared projection get no projection keys: upstream's MedusaModel starts every head's projection as a
    copy of the target's lm_head and loads the rest non-strictly, so it computes the same logits."""
    out = {}
    for key, value in heads.state_dict().items():
        kind, head, rest = key.split(".", 2)
        if kind == "blocks":  # blocks.{h}.{i}.linear.weight -> {h}.{i}.linear.weight
            out[f"{head}.{rest}"] = value.detach().clone()
        else:  # projections.{h}.weight -> {h}.{num_layers}.weight
            out[f"{head}.{heads.num_layers}.weight"] = value.detach().clone()
    return out


def save_upstream(heads: MedusaHeads, folder: str | Path, base_model_dir: str | Path,
                  dtype: torch.dtype = torch.float32) -> Path:
    """Write ``heads`` in upstream medusa-llm's format (``config.json`` naming ``base_model_dir``, and
    ``medusa_lm_head.pt``) so that ``MedusaModel.from_pretrained(folder)`` loads them; return the folder."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    config = {"medusa_num_heads": heads.num_heads, "medusa_num_layers": heads.num_layers,
              "base_model_name_or_path": str(base_model_dir), "hidden_size": heads.hidden_size,
              "vocab_size": heads.vocab_size}
    torch.save({k: v.to(dtype) for k, v in ours_state_to_upstream(heads).items()}, folder / UPSTREAM_WEIGHTS[0])
    (folder / UPSTREAM_CONFIG).write_text(json.dumps(config, indent=2) + "\n")
    return folder


def _load_upstream(folder: Path, model=None) -> MedusaCheckpoint:
    try:
        cfg = json.loads((folder / UPSTREAM_CONFIG).read_text())
        cfg_heads, cfg_layers = int(cfg["medusa_num_heads"]), int(cfg["medusa_num_layers"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ModelIntegrityError(f"{folder / UPSTREAM_CONFIG} lacks medusa_num_heads / medusa_num_layers: {exc}",
                                  hint="is this an upstream Medusa checkpoint?") from exc
    pt, st = folder / UPSTREAM_WEIGHTS[0], folder / UPSTREAM_WEIGHTS[1]
    state = read_weights(pt if pt.exists() else st)
    ours, num_heads, num_layers, hidden, vocab, shared = upstream_state_to_ours(state, cfg_layers)
    if num_heads != cfg_heads:
        log.warning("upstream config says %d Medusa heads, the weights hold %d: using the weights", cfg_heads, num_heads)
    if shared:  # heads without their own projection use the target's lm_head
        vocab = int(cfg.get("vocab_size") or 0) or (model.get_output_embeddings().weight.shape[0] if model else 0)
        if not vocab:
            raise ModelIntegrityError(f"{folder} has no projections and no vocab_size",
                                      hint="load it together with its target model")
    heads = MedusaHeads(hidden, vocab, num_heads, num_layers, shared_projection=shared)
    _load_state(heads, ours, folder)
    dtype = next(iter(ours.values())).dtype
    heads.to(dtype)
    return MedusaCheckpoint(heads, "upstream", str(folder), cfg.get("base_model_name_or_path"), cfg)


def _load_state(heads: MedusaHeads, state: dict, folder: Path) -> None:
    expected = heads.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        raise ModelIntegrityError(f"Medusa weights in {folder} do not match their config "
                                  f"(missing {missing[:3]}, unexpected {unexpected[:3]})",
                                  hint="the checkpoint may be partial: re-save or re-download it")
    for key, value in state.items():
        if tuple(value.shape) != tuple(expected[key].shape):
            raise ModelIntegrityError(f"{key} in {folder} has shape {tuple(value.shape)}, "
                                      f"expected {tuple(expected[key].shape)}")
    heads.load_state_dict({k: v.to(expected[k].dtype) for k, v in state.items()})


def default_medusa_heads_path(target_ref: str) -> Path | None:
    """The Medusa heads shipped in the repo for a built-in target, if any."""
    folder = Path(__file__).resolve().parents[1] / "data" / "medusa" / target_ref.lower()
    return folder if (folder / "medusa_config.json").exists() else None


def load_medusa_heads(target, heads_ref: str | None):
    """Load Medusa heads for a LoadedModel target from ``heads_ref`` or the shipped default."""
    ref = heads_ref or default_medusa_heads_path(target.ref)
    if ref is None:
        raise ModelNotFoundError(
            f"no Medusa heads for {target.ref}",
            hint="pass --medusa-heads PATH, or train them: specpilot medusa train --target "
            f"{target.ref} --out PATH (asks for approval first)",
        )
    return load_heads(ref, target.model)
