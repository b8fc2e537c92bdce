"""Train an EAGLE draft head on a frozen target, on a CPU, with training-time test; save and load it.

1. The target runs once over self-distillation text (tools.medusa.data's chat answers; the same
   files Medusa learns from) and every chunk's final hidden states and greedy next tokens are cached
   (tools.medusa.features: resumable, one shard per chunk).
2. The draft vocabulary is the ``draft_vocab`` most frequent tokens of that text (the target's
   answers), so drafting projects onto a fraction of the 151,936-row LM head.
3. Pass 1 (EAGLE-1): row i reads the feature f_i and the embedding of token t_{i+1} and predicts
   f_{i+1}; its draft logits learn the target's greedy token after i + 1. Pass p > 1 (EAGLE-3's
   training-time test) feeds the head its own pass p-1 prediction, as drafting at depth p does,
   with the attention pattern drafting has: the real rows up to i, then the row's own earlier
   predictions. Loss per pass: smooth-L1 on the feature plus ``cls_weight`` x cross-entropy,
   weighted ``pass_decay ** (p-1)``.
   With ``fuse_layers`` the features also hold those inner layers' states and pass 1 reads them fused
   (EAGLE-3's idea; the fusion starts as the final feature alone). ``start`` continues a trained head.
4. Checkpoints every ``checkpoint_every`` steps and on Ctrl-C; a later call with the same ``out``
   resumes. The held-out tail of the chunks gives top-1 accuracy per depth.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field
from safetensors.torch import load_file, save_file

from tools.engine.eagle import EagleConfig, EagleHead, config_for
from tools.errors import ParameterError
from tools.models import EAGLE_HEAD_FILE, EAGLE_SHIPPED, shipped_eagle_head
from tools.medusa.eagle_upstream import WEIGHTS as UPSTREAM_WEIGHTS, is_upstream, load_upstream_head
from tools.medusa.features import cache_chunk_features, load_chunk_features
from tools.medusa.train import _fingerprint, default_cache_dir, describe_data, read_text, tokenize_files

HEAD_FILE, CONFIG_FILE, STATE_FILE = EAGLE_HEAD_FILE, "eagle_config.json", "eagle_train_state.pt"
FORMAT = "specpilot-eagle"
SHIPPED = EAGLE_SHIPPED
MIN_CHUNK_TOKENS = 8  # a shorter chunk of training text is dropped


class EagleTrainConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    intermediate_size: int = Field(2048, ge=16, description="MLP width of the head's decoder layer")
    draft_vocab: int = Field(8192, ge=16, description="tokens the head may propose (the most frequent ones)")
    passes: int = Field(3, ge=1, le=6, description="training-time test depth (1: EAGLE-1 teacher forcing)")
    epochs: float = Field(2.0, gt=0, description="passes over the training chunks")
    learning_rate: float = 1e-3
    warmup_steps: int = 10
    cls_weight: float = Field(0.1, gt=0, description="token loss weight against the feature regression (EAGLE-1's)")
    pass_decay: float = 0.8
    fuse_layers: list[int] = Field(default_factory=list, description="inner layers fused with the final feature "
                                   "at real positions (EAGLE-3's low and middle layers; empty: the final feature only)")
    autocast: bool = Field(True, description="bfloat16 autocast for the head's matrix products (about 1.5x faster "
                           "on a CPU with bfloat16 units; weights, gradients and optimizer stay float32)")
    held_out_chunks: int = Field(4, ge=1)
    checkpoint_every: int = 25
    seed: int = 0


def draft_vocabulary(token_lists, size: int, vocab: int) -> torch.Tensor:
    """The ``size`` most frequent ids in ``token_lists`` (ties by id), topped up with the lowest unused ids."""
    counts = Counter(t for tokens in token_lists for t in tokens)
    ranked = [t for t, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))][:size]
    chosen = set(ranked)
    ranked += [t for t in range(vocab) if t not in chosen][: size - len(ranked)]
    return torch.tensor(sorted(ranked), dtype=torch.long)


def _pass_masks(n: int, passes: int) -> list[torch.Tensor]:
    """Attention masks of the training-time test: pass p's row i sees pass-1 rows <= i and its own
    row i in every later pass (rows of pass p: n - p)."""
    masks = []
    for p in range(1, passes + 1):
        rows = n - p
        blocks = [torch.ones(rows, n - 1, dtype=torch.bool).tril()[:, : n - 1]]
        blocks += [torch.eye(rows, n - q, dtype=torch.bool) for q in range(2, p + 1)]
        masks.append(torch.cat(blocks, dim=1))
    return masks


def chunk_loss(head: EagleHead, shard: dict, embed: torch.Tensor, rows: torch.Tensor, to_draft: torch.Tensor,
               config: EagleTrainConfig) -> tuple[torch.Tensor, list[float]]:
    """Loss of one chunk over ``config.passes`` passes, and top-1 accuracy per pass."""
    hidden, greedy, tokens = shard["hidden"], shard["greedy"], shard["tokens"]
    n = hidden.shape[0]
    passes = min(config.passes, n - 1)
    masks = [m.to(hidden.device) for m in _pass_masks(n, passes)]
    feats = hidden[: n - 1]
    layers = head.config.fuse_layers
    inner = torch.cat([shard[f"layer{i}"][: n - 1] for i in layers], -1).float() if layers else None
    past_k = past_v = None
    total, hits = hidden.new_zeros(()), []
    for p in range(1, passes + 1):
        m = n - p
        idx = torch.arange(m, device=hidden.device)
        emb = embed[tokens[idx + p]]
        if past_k is None:
            past_k, past_v = head.empty_kv(hidden.device, hidden.dtype)
        out, k, v = head(feats[:m][None], emb[None], idx + p, past_k, past_v, masks[p - 1],
                         inner[:m][None] if p == 1 and inner is not None else None)
        pred = out[0]
        labels = to_draft[greedy[idx + p]]
        logits = pred @ rows.T
        reg = F.smooth_l1_loss(pred, hidden[idx + p])
        cls = F.cross_entropy(logits, labels, ignore_index=-100)
        total = total + config.pass_decay ** (p - 1) * (reg + config.cls_weight * cls)
        valid = labels >= 0
        hits.append(float((logits.argmax(-1)[valid] == labels[valid]).float().mean()) if valid.any() else 0.0)
        past_k, past_v = torch.cat([past_k, k], 2), torch.cat([past_v, v], 2)
        feats = pred
    return total, hits


def _lr(step: int, total: int, config: EagleTrainConfig) -> float:
    if step < config.warmup_steps:
        return config.learning_rate * (step + 1) / config.warmup_steps
    span = max(total - config.warmup_steps, 1)
    return config.learning_rate * 0.5 * (1 + math.cos(math.pi * min(step - config.warmup_steps, span) / span))


def data_key(shard_paths: list[Path]) -> str:
    h = hashlib.sha256()
    for p in shard_paths:
        h.update(p.parent.name.encode() + p.name.encode())
    return h.hexdigest()[:16]


def draft_rows(lm_head: torch.Tensor, draft_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The LM head's rows of the draft vocabulary (float32) and the map from target ids to draft positions
    (-100, ignored by the loss, for a token outside it)."""
    draft_ids = draft_ids.to(lm_head.device)
    to_draft = torch.full((lm_head.shape[0],), -100, dtype=torch.long, device=lm_head.device)
    to_draft[draft_ids] = torch.arange(draft_ids.numel(), device=lm_head.device)
    return lm_head[draft_ids].float(), to_draft


def train_head(shards: list[dict], embed: torch.Tensor, lm_head: torch.Tensor, target_config, out: Path,
               config: EagleTrainConfig, key: str, vocab_tokens, meta: dict,
               progress: Callable[[int, int, float, list[float]], None] | None = None,
               start: EagleHead | None = None) -> dict:
    """Train (or resume) a head on cached shards; save it in ``out``; return the training summary. ``start``:
    a trained head to continue from (its draft vocabulary and weights; fused layers it lacks start as
    the identity), else a new head."""
    torch.manual_seed(config.seed)
    draft_ids = (start.draft_ids if start is not None
                 else draft_vocabulary(vocab_tokens, config.draft_vocab, lm_head.shape[0]))
    head = EagleHead(config_for(target_config, draft_ids.numel(), config.intermediate_size,
                                tuple(config.fuse_layers)), draft_ids.cpu())
    head.init_identity()
    if start is not None:
        own, theirs = head.state_dict(), start.state_dict()
        if any(k not in own or own[k].shape != v.shape for k, v in theirs.items()):
            raise ParameterError("the head to continue from has another shape than these settings",
                                 hint="give the same --intermediate-size as the head was trained with")
        head.load_state_dict(theirs, strict=False)
    head.to(embed.device)
    optimizer = torch.optim.AdamW(head.parameters(), lr=config.learning_rate, weight_decay=0.0)
    train, held = shards[: -config.held_out_chunks], shards[-config.held_out_chunks:]
    if not train:
        raise ParameterError(f"{len(shards)} chunks leave none for training after {config.held_out_chunks} held out",
                             hint="cache more text, or hold out fewer chunks")
    total_steps, step, history = max(1, round(config.epochs * len(train))), 0, []
    state_path = out / STATE_FILE
    if state_path.exists():
        state = torch.load(state_path, map_location=embed.device, weights_only=True)
        if state["key"] != key or _saved_config(state["config"]) != config.model_dump():
            raise ParameterError(f"{out} holds a checkpoint for other data or settings",
                                 hint="choose another output folder, or delete its eagle_train_state.pt")
        head.load_state_dict(state["head"])
        optimizer.load_state_dict(state["optimizer"])
        step, history = state["step"], state["history"]
    rows, to_draft = draft_rows(lm_head, draft_ids)
    order = torch.randperm(len(train) * max(1, math.ceil(config.epochs)), generator=torch.Generator().manual_seed(
        config.seed)) % len(train)
    head.train()
    try:
        while step < total_steps:
            for group in optimizer.param_groups:
                group["lr"] = _lr(step, total_steps, config)
            with torch.autocast(embed.device.type, dtype=torch.bfloat16, enabled=config.autocast):
                loss, hits = chunk_loss(head, train[int(order[step])], embed, rows, to_draft, config)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
            optimizer.step()
            step += 1
            history.append((step, float(loss.detach()), hits))
            if progress:
                progress(step, total_steps, float(loss.detach()), hits)
            if step % config.checkpoint_every == 0:
                _checkpoint(state_path, head, optimizer, step, key, config, history)
    except KeyboardInterrupt:
        _checkpoint(state_path, head, optimizer, step, key, config, history)
        raise
    _checkpoint(state_path, head, optimizer, step, key, config, history)
    head.eval()
    held_top1 = top1_by_depth(head, held, embed, lm_head, config.passes)
    coverage = float((to_draft[torch.cat([s["greedy"] for s in held]).to(to_draft.device)] >= 0).float().mean())
    summary = {**meta, "steps": step, "config": config.model_dump(), "held_out": {
        "chunks": len(held), "top1_by_depth": held_top1, "draft_vocab_coverage": round(coverage, 4)},
        "final_loss": history[-1][1] if history else None}
    save_head(head, out, summary)
    return summary


def top1_by_depth(head: EagleHead, shards: list[dict], embed: torch.Tensor, lm_head: torch.Tensor,
                  passes: int = 3) -> list[float]:
    """How often the head's first choice is the target's greedy token at depths 1..``passes``, averaged
    over ``shards`` (cached chunks, tools.medusa.features), drafting as it does at run time."""
    rows, to_draft = draft_rows(lm_head, head.draft_ids)
    config = EagleTrainConfig(passes=passes)
    head.eval()
    with torch.no_grad():
        per_chunk = [chunk_loss(head, s, embed, rows, to_draft, config)[1] for s in shards]
    return [round(sum(c[p] for c in per_chunk) / len(per_chunk), 4) for p in range(len(per_chunk[0]))]


def _saved_config(saved: dict) -> dict:
    """A checkpoint's settings with those added since it was written at the value they had then
    (``autocast``: checkpoints from before it trained in float32)."""
    return {"autocast": False, **saved}


def _checkpoint(path: Path, head, optimizer, step, key, config, history) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save({"head": head.state_dict(), "optimizer": optimizer.state_dict(), "step": step, "key": key,
                "config": config.model_dump(), "history": history}, tmp)
    os.replace(tmp, path)


def save_head(head: EagleHead, folder: Path, training: dict, dtype: torch.dtype = torch.bfloat16) -> Path:
    """Write the head (weights in ``dtype``, the draft ids as int64) and its config in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    state = {k: (v if k == "draft_ids" else v.to(dtype)).cpu().contiguous() for k, v in head.state_dict().items()}
    save_file(state, str(folder / HEAD_FILE))
    meta = {"format": FORMAT, "format_version": 1, "head": asdict(head.config), "training": training}
    (folder / CONFIG_FILE).write_text(json.dumps(meta, indent=2) + "\n")
    return folder


def load_head(folder: str | Path) -> EagleHead:
    """An EagleHead from a folder written by :func:`save_head`, or from an upstream EAGLE-1/EAGLE-2
    checkpoint folder (tools.medusa.eagle_upstream), in float32."""
    folder = Path(folder).expanduser()
    if not (folder / CONFIG_FILE).is_file() and is_upstream(folder):
        return load_upstream_head(folder)
    if not (folder / CONFIG_FILE).is_file() or not (folder / HEAD_FILE).is_file():
        raise ParameterError(f"{folder} holds no EAGLE head ({CONFIG_FILE} and {HEAD_FILE}, or an upstream "
                             "EAGLE-1/EAGLE-2 checkpoint: config.json and its weights)",
                             hint="train one with `specpilot eagle train`, or give the folder of one")
    meta = json.loads((folder / CONFIG_FILE).read_text())
    if meta.get("format") != FORMAT:
        raise ParameterError(f"{folder / CONFIG_FILE} is not a specpilot EAGLE head (format {meta.get('format')!r})",
                             hint="give a specpilot head or an upstream EAGLE-1/EAGLE-2 checkpoint folder (config.json "
                                  "and model.safetensors or pytorch_model.bin); or train one with `specpilot eagle train`")
    state = load_file(str(folder / HEAD_FILE))
    head = EagleHead(EagleConfig(**meta["head"]), state["draft_ids"])
    head.load_state_dict({k: v.float() if k != "draft_ids" else v for k, v in state.items()})
    head.training_info = meta.get("training", {})
    return head.eval()


default_head_path = shipped_eagle_head  # the head shipped for a built-in target, when there is one


@functools.lru_cache(maxsize=8)
def _file_digest(path: str, size: int, mtime_ns: int) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()[:16]


def head_fingerprint(given: str | None, target_ref: str | None) -> str | None:
    """A digest of the weights of the EAGLE head a run loads (``given``, else the one shipped for
    ``target_ref``), so that a run measured with another head (a retrained one in the same folder, a
    new shipped one) is not taken for this one's; None where there is no head to read."""
    folder = Path(given).expanduser() if given else default_head_path(target_ref or "")
    if folder is None:
        return None
    for name in (HEAD_FILE, *UPSTREAM_WEIGHTS):
        path = folder / name
        if path.is_file():
            stat = path.stat()
            return _file_digest(str(path), stat.st_size, stat.st_mtime_ns)
    return None


def check_layers(layers, target_config) -> None:
    """Refuse inner layers the target does not have (0: the embeddings; the last one's output is the feature)."""
    count = int(getattr(target_config, "num_hidden_layers", 0))
    bad = [i for i in layers if not 0 <= int(i) < count]
    if bad:
        raise ParameterError(f"layer {bad[0]} is not an inner layer of this target (it has {count} decoder layers)",
                             hint=f"give layers from 0 (the embeddings) to {count - 1}, e.g. EAGLE-3's low and middle "
                                  f"ones: {min(2, count - 1)},{count // 2}")


def check_head_fits(head: EagleHead, target_config, vocab_size: int) -> None:
    """Refuse a head made for another model shape."""
    check_layers(head.config.fuse_layers, target_config)
    c = head.config
    if c.hidden_size != target_config.hidden_size or int(head.draft_ids.max()) >= vocab_size:
        raise ParameterError(f"this EAGLE head was trained for a model with hidden size {c.hidden_size}; the "
                             f"target has {target_config.hidden_size} and {vocab_size} tokens",
                             hint="use the head trained for this target, or train one with `specpilot eagle train`")


def elapsed(t0: float) -> str:
    return f"{time.perf_counter() - t0:.0f}s"


def default_data_files(target_ref: str) -> list[Path]:
    """The self-distillation answers shipped beside the Medusa heads of a built-in target (its own
    answers first, the mixed-style and chat-style ones included where shipped), else none."""
    folder = Path(__file__).resolve().parents[1] / "data" / "medusa" / Path(str(target_ref)).name.lower()
    names = ("distill_target.txt", "distill_target2.txt", "distill_data.txt", "distill_mixed.txt", "distill_chat.txt")
    return [folder / n for n in names if (folder / n).is_file()]


def features_folder(model, cache_root: Path | None = None) -> Path:
    """Where the target's cached features over training text live (one folder per model)."""
    return (cache_root or default_cache_dir().parent / "eagle-features") / _fingerprint(model, [])


def train_eagle(target, files: list[Path], out: Path, config: EagleTrainConfig, *, max_tokens: int,
                chunk_tokens: int = 512, cache_root: Path | None = None, log: Callable[[str], None] = print,
                command: str | None = None, start: EagleHead | None = None) -> dict:
    """Cache the target's features over ``files`` (resumable), train a head on them and save it in ``out``.

    ``target`` is a tools.models.LoadedModel. Returns the training summary (also in eagle_config.json)."""
    model, tokenizer = target.model, target.tokenizer
    check_layers(config.fuse_layers, model.config)
    chunks = tokenize_files(tokenizer, files, chunk_tokens, max_tokens, MIN_CHUNK_TOKENS)
    key = _fingerprint(model, chunks)
    folder = features_folder(model, cache_root)
    t0 = time.perf_counter()
    log(f"caching the target's features over {sum(map(len, chunks))} tokens in {len(chunks)} chunks ({folder})")
    paths = cache_chunk_features(model, chunks, folder,
                                 lambda done, total: log(f"  features {done}/{total} ({elapsed(t0)})"),
                                 layers=tuple(config.fuse_layers))
    shards = [{k: v.to(model.device) for k, v in s.items()} for s in load_chunk_features(paths)]
    vocab_tokens = [tokenizer.encode(read_text(f), add_special_tokens=False) for f in files]
    meta = {"command": command, "base_model": getattr(target, "ref", None), "data": describe_data(files), "tokens": sum(map(len, chunks)),
            "chunks": len(chunks), "chunk_tokens": chunk_tokens, "feature_seconds": round(time.perf_counter() - t0)}
    t1 = time.perf_counter()

    def progress(step, total, loss, hits):
        if step % 10 == 0 or step == total:
            log(f"  step {step}/{total} loss {loss:.3f} top-1 by depth {' '.join(f'{h:.2f}' for h in hits)} "
                f"({elapsed(t1)})")

    summary = train_head(shards, model.get_input_embeddings().weight.detach().float(),
                         model.get_output_embeddings().weight.detach().float(), model.config, out, config, key,
                         vocab_tokens, meta, progress, start)
    summary["train_seconds"] = round(time.perf_counter() - t1)
    save_head(load_head(out), out, summary)
    return summary


def load_eagle_for(target, given: str | None) -> EagleHead:
    """The EAGLE head for a loaded target: ``given`` (a folder), else the one shipped for it; checked
    against the target's shape."""
    ref = getattr(target, "ref", None) or ""
    folder = Path(given).expanduser() if given else default_head_path(ref)
    if folder is None:
        raise ParameterError(f"no EAGLE head is shipped for {ref or 'this target'}",
                             hint="train one with `specpilot eagle train --target TARGET --out DIR` (asks for "
                                  "approval) and pass it with --eagle-heads DIR")
    head = load_head(folder)
    model = target.model
    check_head_fits(head, model.config, model.get_output_embeddings().weight.shape[0])
    return head
