"""Train Medusa heads on a frozen target (Medusa-1), fast enough for a CPU.

1. Tokenise the text files (each cut into ``seq_len`` chunks, files taking turns) and run the target
   once over them, caching its final hidden states and its greedy next token at every position
   (``cache_dir``, keyed by model and data, so a resumed or repeated run skips this).
2. Head k (0-based) at position t learns the token at t + k + 2: with ``labels="self"``
   (self-distillation, the default) that is the target's own greedy prediction made at position
   t + k + 1; with ``labels="text"`` it is the text's own token.
3. Only the ResBlocks train; the projection is the target's frozen lm_head (compact heads). When
   the vocabulary is larger than ``candidate_tokens``, each step's softmax runs over the batch's
   label tokens plus uniformly sampled other tokens whose logits get the sampled-softmax
   correction log((V - P) / m), so no step projects onto the full vocabulary. Head k's loss is
   weighted by ``head_decay ** k`` (upstream's 0.8).
4. A rich progress bar shows the loss; checkpoints (heads in our format plus ``train_state.pt``
   with the optimizer) are written every ``checkpoint_every`` steps and on Ctrl-C, and a later
   call with the same ``out`` resumes from the last one.
5. The held-out tail of the data measures each head's top-1 / top-5 accuracy over the full vocabulary.

Training costs time and writes files, so ``train_heads`` never starts without ``confirm(plan)``
returning True: the CLI asks y/n (or passes ``lambda plan: True`` for ``--yes``), the agent's
approval gate passes a callback that returns its stored decision.
"""

from __future__ import annotations

import hashlib
import json
import logging
import lzma
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from memory.store import home_dir

from tools.engine.medusa import MedusaHeads
from tools.errors import ParameterError, SpecpilotError
from tools.medusa.checkpoint import save_heads
from tools.medusa.config import TrainConfig, stdlib_dir
from tools.medusa.losses import evaluate_heads, head_losses, sample_candidates

log = logging.getLogger(__name__)

STATE_NAME = "train_state.pt"


class TrainingDeclined(SpecpilotError):
    """Training was not approved, so nothing was trained or written."""


@dataclass
class TrainReport:
    """What a training run did: steps, losses, held-out accuracy per head, where it wrote."""

    out: str
    steps_done: int
    resumed_from: int
    tokens: int
    positions: int
    final_loss: float | None
    loss_history: list[tuple[int, float]] = field(default_factory=list)
    head_top1: list[float] = field(default_factory=list)
    head_top5: list[float] = field(default_factory=list)
    train_seconds: float = 0.0
    cache_seconds: float = 0.0
    cache_path: str = ""
    config: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return asdict(self)


# ---------------------------------------------------------------------------------------- data
def default_cache_dir() -> Path:
    """Where cached hidden states live: ``$SPECPILOT_HOME/cache/medusa-train`` (default ~/.specpilot)."""
    return home_dir() / "cache" / "medusa-train"


def describe_data(files: Sequence[str | Path]) -> list[dict]:
    """Name, size and sha256 of each training file, without machine paths (stdlib files as ``stdlib/<name>``)."""
    root = stdlib_dir().resolve()
    out = []
    for f in files:
        path = Path(f).expanduser().resolve()
        name = f"stdlib/{path.relative_to(root).as_posix()}" if path.is_relative_to(root) else path.name
        data = path.read_bytes()
        out.append({"file": name, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()})
    return out


def read_text(path: str | Path) -> str:
    """A training text file's text; a file ending in ``.xz`` is decompressed first (the larger shipped texts)."""
    path = Path(path).expanduser()
    data = path.read_bytes()
    if path.suffix == ".xz":
        try:
            data = lzma.decompress(data)
        except lzma.LZMAError as exc:
            raise ParameterError(f"{path} is not a readable xz file ({exc})",
                                 hint="give the .xz file as shipped, or a plain text file") from exc
    return data.decode("utf-8", errors="replace")


def _encode(tokenizer, text: str) -> list[int]:
    if hasattr(tokenizer, "encode"):
        return list(tokenizer.encode(text, add_special_tokens=False))
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def tokenize_files(tokenizer, files: Sequence[str | Path], seq_len: int, max_tokens: int, min_len: int) -> list[list[int]]:
    """Token chunks of at most ``seq_len``, ``max_tokens`` in all, taken from the files in turn
    (one chunk of each file, then the next of each, ...) so a large file cannot crowd out the
    others; a file never shares a chunk with another, and chunks shorter than ``min_len`` are dropped."""
    if not files:
        raise ParameterError("no training text given", hint="pass one or more text files (code or prose)")
    per_file: list[list[list[int]]] = []
    for f in files:
        path = Path(f).expanduser()
        if not path.is_file():
            raise ParameterError(f"training text {path} does not exist", hint="check the path")
        ids = _encode(tokenizer, read_text(path))
        per_file.append([ids[i: i + seq_len] for i in range(0, len(ids), seq_len) if len(ids[i: i + seq_len]) >= min_len])
    chunks: list[list[int]] = []
    total = 0
    for i in range(max((len(c) for c in per_file), default=0)):
        for file_chunks in per_file:
            if i < len(file_chunks) and total < max_tokens:
                piece = file_chunks[i][: max_tokens - total]
                if len(piece) >= min_len:
                    chunks.append(piece)
                    total += len(piece)
    if not chunks:
        raise ParameterError(f"the training text has fewer than {min_len} tokens per file",
                             hint="give longer text files")
    return chunks


def _fingerprint(model, chunks: list[list[int]]) -> str:
    h = hashlib.sha256()
    h.update(model.config.to_json_string().encode())
    h.update(str(model.dtype).encode())
    for t in (model.get_output_embeddings().weight, next(model.parameters())):
        h.update(t.detach().flatten()[:4096].float().cpu().numpy().tobytes())
    for c in chunks:
        h.update(torch.tensor(c, dtype=torch.int64).numpy().tobytes())
    return h.hexdigest()[:20]


@torch.inference_mode()
def cache_hidden_states(model, chunks: list[list[int]], folder: Path, progress=None) -> dict[str, torch.Tensor]:
    """Run the target over each chunk once; return (and save to ``folder``) its final hidden states
    ``hidden`` [N, h], greedy next tokens ``greedy`` [N], the ``tokens`` [N] and chunk ``starts``."""
    from safetensors.torch import load_file, save_file

    path = folder / "hidden.safetensors"
    if path.exists():
        return load_file(str(path))
    head = model.get_output_embeddings()
    hidden_parts, greedy_parts = [], []
    task = progress.add_task("caching target hidden states", total=len(chunks), status="") if progress else None
    for chunk in chunks:
        ids = torch.tensor([chunk], device=model.device)
        hidden = model.base_model(input_ids=ids, use_cache=False).last_hidden_state[0]
        greedy = torch.cat([head(hidden[i: i + 128]).argmax(-1) for i in range(0, hidden.shape[0], 128)])
        hidden_parts.append(hidden.cpu())
        greedy_parts.append(greedy.cpu())
        if progress:
            progress.advance(task)
    starts = torch.tensor([0] + [len(c) for c in chunks], dtype=torch.long).cumsum(0)
    data = {"hidden": torch.cat(hidden_parts).contiguous(), "greedy": torch.cat(greedy_parts),
            "tokens": torch.tensor([t for c in chunks for t in c], dtype=torch.long), "starts": starts}
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / "hidden.safetensors.tmp"
    save_file(data, str(tmp))
    os.replace(tmp, path)
    return data


def build_examples(data: dict[str, torch.Tensor], num_heads: int, labels: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Training positions [P] (rows of ``hidden``) and their labels [P, num_heads].

    Head k at position t: ``greedy[t + k + 1]`` (self) or ``tokens[t + k + 2]`` (text); only
    positions where every head has a label inside the same chunk are used.
    """
    rows, targets = [], []
    starts = data["starts"].tolist()
    for a, b in zip(starts[:-1], starts[1:]):
        last = b - num_heads - 2  # last usable t: t + num_heads + 1 <= b - 1
        if last < a:
            continue
        t = torch.arange(a, last + 1)
        offs = torch.arange(num_heads)
        if labels == "self":
            y = data["greedy"][t[:, None] + offs[None] + 1]
        else:
            y = data["tokens"][t[:, None] + offs[None] + 2]
        rows.append(t)
        targets.append(y)
    if not rows:
        raise ParameterError(f"the training text is too short for {num_heads} heads", hint="give more text")
    return torch.cat(rows), torch.cat(targets)


def _lr_at(step: int, config: TrainConfig) -> float:
    if step < config.warmup_steps:
        return config.learning_rate * (step + 1) / config.warmup_steps
    span = max(config.steps - config.warmup_steps, 1)
    return config.learning_rate * 0.5 * (1 + math.cos(math.pi * min(step - config.warmup_steps, span) / span))


# ---------------------------------------------------------------------------------------- training
def _unwrap(target, tokenizer):
    if hasattr(target, "model") and hasattr(target, "tokenizer"):
        return target.model, tokenizer or target.tokenizer, getattr(target, "ref", None)
    return target, tokenizer, getattr(target.config, "_name_or_path", None) or None


def _progress(enabled: bool):
    if not enabled:
        return None
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("{task.fields[status]}"), TimeRemainingColumn(), console=Console(stderr=True))


def _save(out: Path, heads: MedusaHeads, optimizer, step: int, key: str, config: TrainConfig, base: str | None,
          history: list, data: list[dict]) -> None:
    training = {"steps": step, "data_key": key, "config": config.model_dump(), "data": data,
                "final_loss": history[-1][1] if history else None}
    save_heads(heads, out, base_model=base, dtype=config.save_dtype, training=training)
    state = {"step": step, "data_key": key, "num_heads": config.num_heads, "num_layers": config.num_layers,
             "labels": config.labels, "heads": heads.state_dict(), "optimizer": optimizer.state_dict(),
             "history": history}
    tmp = out / (STATE_NAME + ".tmp")
    torch.save(state, tmp)
    os.replace(tmp, out / STATE_NAME)


def train_heads(target, data_files: Sequence[str | Path], out: str | Path, config: TrainConfig | None = None, *,
                confirm: Callable[[str], bool], tokenizer=None, resume: bool = True,
                cache_dir: str | Path | None = None, progress: bool = True, base_model: str | None = None) -> TrainReport:
    """Train Medusa heads for the frozen ``target`` on ``data_files`` and save them (compact) in ``out``.

    ``target`` is a tools.models.LoadedModel (its tokenizer and ref are used) or a causal LM with
    ``tokenizer`` (anything with ``encode(text, add_special_tokens=False)``). ``confirm(plan)`` is
    called with a description of the run before anything is computed or written; unless it
    returns True, TrainingDeclined is raised. With ``resume`` a checkpoint in ``out`` from the same
    data and head shape is continued up to ``config.steps``. Returns a TrainReport.
    """
    config = config or TrainConfig()
    model, tokenizer, ref = _unwrap(target, tokenizer)
    if tokenizer is None:
        raise ParameterError("training needs the target's tokenizer", hint="pass a LoadedModel or tokenizer=")
    run = _TrainingRun(model, config, Path(out).expanduser(), base_model or ref)
    run.read_data(tokenizer, data_files, cache_dir)
    run.load_state(resume)
    if not confirm(run.plan(len(data_files))):
        raise TrainingDeclined("Medusa training was not approved; nothing was trained or written")
    bar = _progress(progress)
    if bar:
        bar.start()
    try:
        return run.train(bar)
    finally:
        if bar:
            bar.stop()


class _TrainingRun:
    """One call of :func:`train_heads`: the data, the checkpoint it resumes from, the loop, the evaluation."""

    def __init__(self, model, config: TrainConfig, out: Path, base_model: str | None):
        self.model, self.config, self.out, self.base_model = model, config, out, base_model
        self.head = model.get_output_embeddings()
        self.vocab, self.hidden_size = self.head.weight.shape
        self.state: dict | None = None

    def read_data(self, tokenizer, data_files: Sequence[str | Path], cache_dir: str | Path | None) -> None:
        """Tokenise the training files, check the ids, and name the hidden-state cache after the data."""
        c = self.config
        self.chunks = tokenize_files(tokenizer, data_files, c.seq_len, c.max_tokens, c.num_heads + 3)
        self.n_tokens = sum(len(chunk) for chunk in self.chunks)
        bad = [t for chunk in self.chunks for t in chunk if t >= self.vocab]
        if bad:
            raise ParameterError(f"token id {bad[0]} is outside the target's vocabulary ({self.vocab})",
                                 hint="tokenise with the target's own tokenizer")
        self.key = _fingerprint(self.model, self.chunks)
        self.data_info = describe_data(data_files)
        self.cache_folder = (Path(cache_dir).expanduser() if cache_dir else default_cache_dir()) / self.key

    def load_state(self, resume: bool) -> None:
        """The checkpoint in ``out`` to continue from (when resuming), refused if it is for other data."""
        c, state_path = self.config, self.out / STATE_NAME
        if not (resume and state_path.exists()):
            return
        self.state = torch.load(state_path, map_location="cpu", weights_only=True)
        if (self.state["data_key"], self.state["num_heads"], self.state["num_layers"], self.state["labels"]) != (
                self.key, c.num_heads, c.num_layers, c.labels):
            raise ParameterError(f"{self.out} holds a training checkpoint for other data or another head shape",
                                 hint="choose another output folder, or turn resuming off to start over")

    @property
    def start(self) -> int:
        return int(self.state["step"]) if self.state else 0

    def plan(self, n_files: int) -> str:
        """What the run will do, shown to the person who approves it."""
        c = self.config
        mb = self.n_tokens * self.hidden_size * self.head.weight.element_size() / 2**20
        return (f"Train {c.num_heads} Medusa heads ({c.num_layers} ResBlock layer(s) each, shared lm_head) "
                f"on the frozen target {self.base_model or 'model'}: {self.n_tokens} tokens from {n_files} file(s), "
                f"labels={c.labels}, steps {self.start}->{c.steps}, batch {c.batch_size}. "
                f"Hidden states are cached in {self.cache_folder} (~{mb:.0f} MB); heads are written to {self.out}.")

    def train(self, bar) -> TrainReport:
        """Cache the hidden states, train up to ``config.steps`` (checkpointing), evaluate on held-out rows."""
        c, start = self.config, self.start
        report = TrainReport(out=str(self.out), steps_done=start, resumed_from=start, tokens=self.n_tokens,
                             positions=0, final_loss=None, cache_path=str(self.cache_folder), config=c.model_dump())
        t0 = time.perf_counter()
        data = cache_hidden_states(self.model, self.chunks, self.cache_folder, bar)
        report.cache_seconds = time.perf_counter() - t0
        rows, labels = build_examples(data, c.num_heads, c.labels)
        n_eval = min(c.eval_positions, rows.numel() // 5)
        report.positions = int(rows.numel() - n_eval)
        heads, optimizer, history = self.new_heads()
        t1 = time.perf_counter()
        step = self.loop(heads, optimizer, history, data["hidden"], rows[: rows.numel() - n_eval],
                         labels[: rows.numel() - n_eval], bar)
        report.train_seconds = time.perf_counter() - t1
        if step == start and not (self.out / STATE_NAME).exists():
            self.save(heads, optimizer, step, history)
        heads.eval()
        bias = self.bias()
        report.head_top1, report.head_top5 = evaluate_heads(
            heads, data["hidden"][rows[rows.numel() - n_eval:]].to(self.head.weight.device),
            labels[rows.numel() - n_eval:], self.head.weight.detach(), bias)
        report.steps_done, report.loss_history = step, history
        report.final_loss = history[-1][1] if history else None
        meta = json.loads((self.out / "medusa_config.json").read_text())
        meta.setdefault("training", {})["held_out"] = {"positions": n_eval, "top1": report.head_top1,
                                                       "top5": report.head_top5}
        (self.out / "medusa_config.json").write_text(json.dumps(meta, indent=2) + "\n")
        return report

    def bias(self) -> torch.Tensor | None:
        return self.head.bias.detach() if getattr(self.head, "bias", None) is not None else None

    def new_heads(self) -> tuple[MedusaHeads, torch.optim.Optimizer, list]:
        """Seeded heads and their optimizer, restored from the checkpoint when resuming."""
        c, device = self.config, self.head.weight.device
        with torch.random.fork_rng(devices=[]):  # seeded biases without touching the caller's RNG
            torch.manual_seed(c.seed)
            heads = MedusaHeads(self.hidden_size, self.vocab, c.num_heads, c.num_layers, shared_projection=True)
        heads.to(device).float().train()
        optimizer = torch.optim.AdamW(heads.parameters(), lr=c.learning_rate, weight_decay=c.weight_decay)
        history: list = []
        if self.state:
            heads.load_state_dict(self.state["heads"])
            optimizer.load_state_dict(self.state["optimizer"])
            history = [tuple(h) for h in self.state["history"]]
        return heads, optimizer, history

    def loop(self, heads: MedusaHeads, optimizer, history: list, hidden: torch.Tensor, train_rows: torch.Tensor,
             train_labels: torch.Tensor, bar) -> int:
        """The optimisation steps; a checkpoint every ``checkpoint_every`` steps and on Ctrl-C."""
        c, weight, bias = self.config, self.head.weight.detach(), self.bias()
        weights = torch.tensor([c.head_decay ** k for k in range(c.num_heads)], device=weight.device)
        task = bar.add_task("training Medusa heads", total=c.steps, completed=self.start, status="") if bar else None
        step = self.start
        try:
            while step < c.steps:
                gen = torch.Generator().manual_seed(c.seed * 1_000_003 + step)  # same batches after a resume
                pick = torch.randint(train_rows.numel(), (c.batch_size,), generator=gen)
                x = hidden[train_rows[pick]].to(weight.device).float()
                for group in optimizer.param_groups:
                    group["lr"] = _lr_at(step, c)
                losses, hits = head_losses(heads.features(x), train_labels[pick].to(weight.device), weight, bias,
                                           c.candidate_tokens, gen)
                loss = (losses * weights).sum() / weights.sum()
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                step += 1
                history.append((step, loss.item()))
                if bar:
                    bar.update(task, completed=step, status=f"loss {loss.item():.3f}  "
                               f"hit@1 {' '.join(f'{h:.2f}' for h in hits.tolist())}")
                if step % c.checkpoint_every == 0 or step == c.steps:
                    self.save(heads, optimizer, step, history)
        except KeyboardInterrupt:
            self.save(heads, optimizer, step, history)
            log.warning("training interrupted at step %d; checkpoint saved in %s (run again to resume)", step, self.out)
            raise
        return step

    def save(self, heads: MedusaHeads, optimizer, step: int, history: list) -> None:
        _save(self.out, heads, optimizer, step, self.key, self.config, self.base_model, history, self.data_info)
