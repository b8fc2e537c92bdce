"""The upstream reference implementations as peers: medusa-llm (FasterDecoding's Medusa) and lade (the
lookahead decoding authors' package), each in a virtual environment of its own.

Both need transformers 4.x (medusa-llm 0.1 vendors a Llama written for ~4.31, lade 0.0.2 patches
``GenerationMixin.greedy_search`` and ``_expand_mask``, gone from transformers 5) and so cannot run beside
specpilot. ``specpilot peers setup NAME`` (an install: approved by a person first) makes a venv under
:func:`peers_dir` with this machine's torch (the same version specpilot runs, so no other build is
downloaded), transformers 4.34.1 and the package. ``--peers`` then starts the venv's Python on
``upstream_runner.py`` once per model and asks it, in the same alternating rounds as every other
peer, to generate from the same prompt ids; the runner times its own generation (from the prompt
tensor to the last token) and answers with the ids. Both packages implement Llama models only: the
built-in smollm2-135m-instruct is one.

The model is handed over as a transformers folder: the target's safetensors (linked, not copied) and a
``config.json`` rewritten for transformers 4.x (``rope_theta``, ``torch_dtype``). Medusa heads are
written in upstream's checkpoint format (:func:`tools.medusa.checkpoint.save_upstream`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from tools import models
from tools.bench.children import Children
from tools.engine.medusa_trees import resolve_tree
from tools.engine.types import DecodeResult, GenerationSettings
from tools.errors import DependencyError, ParameterError, SpecpilotError

log = logging.getLogger(__name__)

RUNNER = Path(__file__).with_name("upstream_runner.py")
TRANSFORMERS_4X = "transformers==4.34.1"
# what both packages import besides torch and transformers (medusa-llm's fschat is only for its chat CLI)
COMMON = (TRANSFORMERS_4X, "accelerate<0.25", "sentencepiece", "protobuf", "safetensors")
REPLY_TIMEOUT_S = 1800  # a load or one generation; a CPU run of a 1B model stays far below


@dataclass(frozen=True)
class UpstreamPeer:
    name: str  # what the user types: specpilot peers setup NAME
    package: str  # the pinned PyPI requirement, installed without its dependencies
    method: str  # our method it is the reference for
    peer_key: str  # the record's peers key
    what: str


UPSTREAM_PEERS = {
    "medusa-llm": UpstreamPeer("medusa-llm", "medusa-llm==0.1", "medusa", "upstream_medusa",
                               "FasterDecoding's Medusa (PyPI medusa-llm 0.1), a dense tree covering ours"),
    "lade": UpstreamPeer("lade", "lade==0.0.2", "lookahead", "upstream_lade",
                         "the lookahead decoding authors' package (PyPI lade 0.0.2) with our W, N, G"),
}
UPSTREAM_PLAIN = "upstream_plain"  # transformers 4.34's plain generate in the peer's venv: its own yardstick


def peers_dir() -> Path:
    """Where the peers' virtual environments and exported models live (``SPECPILOT_PEERS``)."""
    env = os.environ.get("SPECPILOT_PEERS")
    return Path(env).expanduser() if env else models.models_dir().parent / "peers"


def peer(name: str) -> UpstreamPeer:
    if name not in UPSTREAM_PEERS:
        raise ParameterError(f"no upstream peer called {name!r}", hint=f"choose one of {', '.join(UPSTREAM_PEERS)}")
    return UPSTREAM_PEERS[name]


def venv_python(name: str) -> Path:
    return peers_dir() / name / "venv" / "bin" / "python"


def ready_file(name: str) -> Path:
    return peers_dir() / name / "ready.json"


def status(name: str) -> dict:
    """``{"peer", "ready", "python", "versions" or "reason"}``: whether ``specpilot peers setup`` finished."""
    p = peer(name)
    info = {"peer": p.name, "package": p.package, "for_method": p.method, "what": p.what}
    try:
        versions = json.loads(ready_file(name).read_text())["versions"]
    except (OSError, ValueError, KeyError):
        return {**info, "ready": False, "reason": f"not set up: `specpilot peers setup {name}` creates its environment"}
    if not venv_python(name).exists():
        return {**info, "ready": False, "reason": f"its venv is gone: run `specpilot peers setup {name}` again"}
    return {**info, "ready": True, "python": str(venv_python(name)), "versions": versions}


def torch_requirement() -> str:
    """The torch this specpilot runs, pinned, so the venv takes the same build (no CUDA download)."""
    from importlib import metadata

    return "torch==" + metadata.version("torch").split("+")[0]


def setup_commands(name: str) -> list[list[str]]:
    """The exact commands ``specpilot peers setup NAME`` runs (shown to the person before approval)."""
    p, py = peer(name), str(venv_python(name))
    return [[sys.executable, "-m", "venv", str(venv_python(name).parent.parent)],
            [py, "-m", "pip", "install", "--quiet", torch_requirement(), *COMMON],
            [py, "-m", "pip", "install", "--quiet", "--no-deps", p.package]]


def run_steps(name: str, commands: list[list[str]], progress, timeout_s: int, hint: str) -> None:
    """Empty the peer's folder, then run ``commands`` in order (each after a person approved them all);
    DependencyError with the failing step's output (and ``hint``) when one fails."""
    home = peers_dir() / name
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    for argv in commands:
        if progress:
            progress(f"{name}: {' '.join(a for a in argv[1:] if a != '--quiet')}")
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
        if proc.returncode != 0:
            raise DependencyError(f"setting up {name} failed (exit {proc.returncode}) at {' '.join(argv[:5])}: "
                                  f"{(proc.stderr or proc.stdout).strip()[-600:]}", hint=hint)


def setup(name: str, progress=None) -> dict:
    """Create the peer's venv and install it (call only after a person approved the commands); check the
    runner starts and record the versions. Raises DependencyError with pip's output when a step fails."""
    run_steps(name, setup_commands(name), progress, timeout_s=3600,
              hint="check that this machine reaches the package index, then run it again")
    probe = subprocess.run([str(venv_python(name)), "-c", "import json, importlib.metadata as m; print(json.dumps("
                            "{d: m.version(d) for d in ('torch', 'transformers', %r)}))" % peer(name).package.split("==")[0]],
                           capture_output=True, text=True, timeout=600, check=False)
    if probe.returncode != 0:
        raise DependencyError(f"{name}'s environment does not start: {probe.stderr.strip()[-400:]}")
    versions = json.loads(probe.stdout)
    ready_file(name).write_text(json.dumps({"versions": versions}, indent=2) + "\n")
    return status(name)


# ------------------------------------------------------------------------------------- model export
def llama_only(target) -> str | None:
    """Why the upstream peers cannot run ``target`` (a LoadedModel), or None when they can."""
    model_type = getattr(getattr(target.model, "config", None), "model_type", None)
    if model_type != "llama":
        return (f"medusa-llm and lade implement Llama models only; {target.ref} is a {model_type or 'non-transformers'} "
                f"model (smollm2-135m-instruct is a built-in Llama)")
    return None


def config_for_4x(config: dict) -> dict:
    """A transformers 5 ``config.json`` as transformers 4.x reads it (rope base, dtype key)."""
    out = dict(config)
    rope = out.pop("rope_parameters", None) or {}
    out.setdefault("rope_theta", rope.get("rope_theta", 10000.0))
    if rope.get("rope_type", "default") != "default":
        out["rope_scaling"] = {k: v for k, v in rope.items() if k != "rope_theta"}
    else:
        out["rope_scaling"] = None
    out["torch_dtype"] = out.pop("dtype", out.get("torch_dtype", "float32"))
    return out


def export_model(target) -> Path:
    """The target as a transformers-4.x folder for the peers (once per weights file; linked, not copied)."""
    source = Path(target.source)
    files = sorted(source.glob("*.safetensors")) if source.is_dir() else []
    if not files or not (source / "config.json").exists():
        raise ParameterError(f"the upstream peers need the target as a transformers folder; {target.source} is not one",
                             hint="use a built-in model (its GGUF is converted once) or a safetensors folder")
    key = hashlib.sha256("|".join(f"{f}:{f.stat().st_size}:{f.stat().st_mtime_ns}" for f in files).encode()).hexdigest()[:16]
    out = peers_dir() / "models" / key
    if not (out / "config.json").exists():
        tmp = out.with_name(key + ".partial")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        for f in files:
            (tmp / f.name).symlink_to(f.resolve())
        index = source / "model.safetensors.index.json"
        if index.exists():
            shutil.copy(index, tmp / index.name)
        config = config_for_4x(json.loads((source / "config.json").read_text()))
        (tmp / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        shutil.rmtree(out, ignore_errors=True)
        tmp.replace(out)
    return out


def export_heads(heads, model_dir: Path) -> Path:
    """Our Medusa heads in medusa-llm's format, next to the exported model (keyed by their weights)."""
    # tools.medusa loads torch: imported when heads are exported, not for `specpilot peers status`
    from tools.medusa.checkpoint import save_upstream

    digest = hashlib.sha256()
    for name, value in sorted(heads.state_dict().items()):
        digest.update(name.encode())
        digest.update(value.float().numpy().tobytes())
    folder = model_dir.parent / f"{model_dir.name}-medusa-{digest.hexdigest()[:12]}"
    if not (folder / "config.json").exists():
        save_upstream(heads, folder, model_dir)
    return folder


# ------------------------------------------------------------------------------------------ process
class UpstreamProcess:
    """One runner process in a peer's venv, with its model loaded; requests go one at a time."""

    def __init__(self, name: str, load: dict, threads: int | None = None):
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}
        if threads:
            env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
        self.name = name
        self.proc = subprocess.Popen([str(venv_python(name)), str(RUNNER)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        self._stderr: list[str] = []
        threading.Thread(target=self._drain, daemon=True).start()
        self.versions = self.request({"op": "load", **load})["versions"]

    def _drain(self) -> None:  # keep the last lines the libraries printed, for an error message
        for line in self.proc.stderr:
            self._stderr = (self._stderr + [line.rstrip()])[-20:]

    def request(self, req: dict) -> dict:
        if self.proc.poll() is not None:
            raise DependencyError(f"the {self.name} runner exited ({self.proc.returncode}): {self.tail()}")
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait(timeout=30)
            raise DependencyError(f"the {self.name} runner stopped answering: {self.tail()}",
                                  hint=f"run `specpilot peers setup {self.name}` again if its environment broke")
        reply = json.loads(line)
        if not reply.get("ok"):
            raise DependencyError(f"{self.name} failed: {reply.get('error')}", hint=self.tail() or None)
        return reply

    def tail(self) -> str:
        return " | ".join(self._stderr[-3:])

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write(json.dumps({"op": "quit"}) + "\n")
                self.proc.stdin.flush()
                self.proc.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()


_PROCESSES = Children()  # one runner (one model) per peer


def close_all() -> None:
    _PROCESSES.close_all()


def process_for(name: str, load: dict, threads: int | None) -> UpstreamProcess:
    return _PROCESSES.get((name, json.dumps(load, sort_keys=True)), lambda: UpstreamProcess(name, load, threads))


def generate(proc: UpstreamProcess, label: str, mode: str, prompt_ids: list[int],
             settings: GenerationSettings) -> DecodeResult:
    """One timed generation in the peer's process (greedy only: both packages verify greedily)."""
    if not settings.greedy:
        raise ParameterError(f"{proc.name} is run greedily only (its sampling is not lossless)")
    reply = proc.request({"op": "generate", "mode": mode, "prompt_ids": list(prompt_ids),
                          "max_new_tokens": settings.max_new_tokens, "eos": list(settings.eos_token_ids)})
    out = [int(t) for t in reply["output_ids"]]
    return DecodeResult(method=label, output_ids=out, prefill_s=0.0, decode_s=float(reply["seconds"]),
                        steps=int(reply.get("steps") or 0), target_forwards=int(reply.get("steps") or 0),
                        stopped_by="eos" if out and out[-1] in settings.eos_token_ids else "length",
                        extra={"versions": proc.versions})


def dense_cover(choices: list[list[int]]) -> list[int]:
    """medusa-llm 0.1's tree format for our tree: ``[1, k1, k2, ...]`` takes head i's top ``k_i`` at every
    node of level i (a dense tree), so k_i is one more than the deepest rank our tree uses at level i; the
    dense tree then holds every path of ours (and more: upstream has no sparse trees)."""
    depth = max(len(c) for c in choices)
    return [1] + [1 + max(c[i] for c in choices if len(c) == i + 1) for i in range(depth)]


def load_request(p: UpstreamPeer, ctx, params) -> dict:
    """What the runner loads for ``p`` on this context: the exported model, the heads, the settings."""
    model_dir = export_model(ctx.target)
    load = {"peer": p.name, "model_dir": str(model_dir), "heads_dir": None, "params": {}}
    if p.name == "medusa-llm":
        if ctx.medusa_heads is None:
            raise ParameterError("medusa-llm needs Medusa heads for the target", hint="pass --medusa-heads")
        load["heads_dir"] = str(export_heads(ctx.medusa_heads, model_dir))
        _, ours = resolve_tree(params.tree, ctx.medusa_heads.num_heads, str(ctx.target.device),
                               heads_tree=ctx.medusa_heads.tree_choices)
        load["params"] = {"medusa_choices": dense_cover(ours)}
    else:
        load["params"] = {"window": params.window, "level": params.ngram, "guess_set": params.guess}
    return load


def upstream_runners(ctx, prompt_ids: list[int], method_params: dict) -> dict:
    """Runners for the upstream peers of the methods in ``method_params`` (method -> its params) that are
    set up and can run this target, plus the peer venv's own plain generate; a peer that cannot run is
    logged with the reason and left out."""
    out = {}
    for p in UPSTREAM_PEERS.values():
        if p.method not in method_params:
            continue
        state = status(p.name)
        why = llama_only(ctx.target) or (None if state["ready"] else state["reason"])
        if why:
            log.warning("upstream peer %s not run: %s", p.name, why)
            continue
        try:
            proc = process_for(p.name, load_request(p, ctx, method_params[p.method]), ctx.target.extra.get("threads"))
        except SpecpilotError as exc:
            log.warning("upstream peer %s not run: %s", p.name, exc)
            continue
        out[p.peer_key] = (lambda pr, k: lambda s: generate(pr, k, "method", prompt_ids, s))(proc, p.peer_key)
        out.setdefault(UPSTREAM_PLAIN, (lambda pr: lambda s: generate(pr, UPSTREAM_PLAIN, "plain", prompt_ids, s))(proc))
    return out
