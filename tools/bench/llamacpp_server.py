"""llama.cpp's own speculative modes as peers on the llama.cpp backend: plain, draft-simple and the n-gram
modes of its ``common`` library, which llama-cpp-python does not bind (it wraps libllama only).

``specpilot peers setup llama.cpp`` (it downloads a source archive and compiles, so a person approves it
first) builds ``llama-server`` from the llama.cpp sources inside the sdist of the llama-cpp-python this
specpilot runs, so the peer is the same llama.cpp version as the backend. ``--peers`` on
``--backend llamacpp`` then starts one server per mode on 127.0.0.1 (a free port, one slot, the
backend's threads and batch size, the mode's own default settings), and in the same alternating
rounds as every other peer sends it the same prompt ids with ``cache_prompt: false`` (every request
processes the whole prompt, as ours does) and reads back the generated ids. The time is the wall
time of the request, from sending the ids to the last token received; the server's own prompt and
generation times and its draft counts are kept with the result.

``draft-eagle3`` is not among them: it needs an EAGLE-3 draft head converted to GGUF for the target, and
there is none for the built-in models.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from tools.bench.children import Children
from tools.bench.inputs import PEER_LABELS
from tools.bench import upstream
from tools.bench.upstream import peers_dir, run_steps
from tools.engine.types import DecodeResult, GenerationSettings
from tools.errors import DependencyError, ParameterError

log = logging.getLogger(__name__)

NAME = "llama.cpp"  # what the user types: specpilot peers setup llama.cpp
PACKAGE = "llama-cpp-python"
START_TIMEOUT_S = 600  # loading a GGUF (and a draft) on a busy CPU
REPLY_TIMEOUT_S = 1800


@dataclass(frozen=True)
class ServerMode:
    key: str  # the record's peers key (its label: tools.bench.inputs.PEER_LABELS)
    args: tuple[str, ...]  # llama-server's options for the mode (its own defaults otherwise)
    needs_draft: bool = False

    @property
    def label(self) -> str:
        return PEER_LABELS[self.key]


SERVER_MODES = {m.key: m for m in (
    ServerMode("llamacpp_server_plain", ()),
    ServerMode("llamacpp_draft_simple", ("--spec-type", "draft-simple"), needs_draft=True),
    ServerMode("llamacpp_ngram_simple", ("--spec-type", "ngram-simple")),
    ServerMode("llamacpp_ngram_map_k", ("--spec-type", "ngram-map-k")),
    ServerMode("llamacpp_ngram_mod", ("--spec-type", "ngram-mod")),
)}


def home() -> Path:
    return peers_dir() / NAME


def binary() -> Path:
    return home() / "build" / "bin" / "llama-server"


def ready_file() -> Path:
    return home() / "ready.json"


def installed_version() -> str:
    from importlib import metadata

    try:
        return metadata.version(PACKAGE)
    except metadata.PackageNotFoundError as exc:
        raise DependencyError(f"{PACKAGE} is not installed, so there is no llama.cpp version to build",
                              hint="make install (or pip install -e '.[llamacpp]') first") from exc


def status() -> dict:
    """``{"peer", "ready", "versions" or "reason", ...}`` like the upstream peers' status."""
    info = {"peer": NAME, "package": f"llama-server from the {PACKAGE} sdist", "for_method": "methods on --backend llamacpp",
            "what": "llama.cpp's own plain, draft-simple and n-gram speculative modes (llama-server)"}
    try:
        versions = json.loads(ready_file().read_text())["versions"]
    except (OSError, ValueError, KeyError):
        return {**info, "ready": False, "reason": f"not set up: `specpilot peers setup {NAME}` builds llama-server"}
    if not binary().exists():
        return {**info, "ready": False, "reason": f"its build is gone: run `specpilot peers setup {NAME}` again"}
    return {**info, "ready": True, "binary": str(binary()), "versions": versions}


def setup_commands() -> list[list[str]]:
    """The exact commands ``specpilot peers setup llama.cpp`` runs (shown to the person before approval)."""
    version, src = installed_version(), home() / "src"
    tree = src / f"llama_cpp_python-{version}" / "vendor" / "llama.cpp"
    build = home() / "build"
    return [
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
         f"{PACKAGE}=={version}", "-d", str(src)],
        ["tar", "-xzf", str(src / f"llama_cpp_python-{version}.tar.gz"), "-C", str(src)],
        ["cmake", "-S", str(tree), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release", "-DBUILD_SHARED_LIBS=OFF",
         "-DLLAMA_BUILD_SERVER=ON", "-DLLAMA_BUILD_TOOLS=ON", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF",
         "-DLLAMA_BUILD_UI=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF", "-DLLAMA_OPENSSL=OFF"],
        ["cmake", "--build", str(build), "--target", "llama-server", "-j", str(os.cpu_count() or 2)],
    ]


def setup(progress=None) -> dict:
    """Download the sdist and build llama-server (only after a person approved the commands); record the
    version. Raises DependencyError with the tool's output when a step fails."""
    run_steps(NAME, setup_commands(), progress, timeout_s=7200,
              hint="it needs cmake, a C++ compiler and the package index; run it again when they are there")
    probe = subprocess.run([str(binary()), "--version"], capture_output=True, text=True, timeout=120, check=False)
    if probe.returncode != 0:
        raise DependencyError(f"the built llama-server does not start: {(probe.stderr or probe.stdout).strip()[-400:]}")
    build = next((ln.split(":", 1)[1].strip() for ln in (probe.stdout + probe.stderr).splitlines()
                  if ln.startswith("version")), "unknown")
    ready_file().write_text(json.dumps({"versions": {PACKAGE: installed_version(), "llama.cpp": build}}, indent=2) + "\n")
    return status()


# ------------------------------------------------------------------------------------------ servers
def server_argv(mode: ServerMode, target: Path, draft: Path | None, port: int, n_ctx: int, threads: int,
                n_batch: int) -> list[str]:
    """llama-server's command line for ``mode``: one slot, no web page, the backend's threads and batch,
    and flash attention off as in the backend and llama-cpp-python's ``Llama`` (the server's ``auto`` turns
    it on for a CPU, whose different rounding changes greedy tokens at near-ties)."""
    argv = [str(binary()), "-m", str(target), "--host", "127.0.0.1", "--port", str(port), "-np", "1",
            "-c", str(n_ctx), "-t", str(threads), "-tb", str(threads), "-b", str(n_batch), "-ub", str(n_batch),
            "--flash-attn", "off", "--no-webui", *mode.args]
    if mode.needs_draft:
        argv += ["-md", str(draft), "-td", str(threads), "-tbd", str(threads)]
    return argv


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LlamaServer:
    """One llama-server process with its model(s) loaded; requests go one at a time."""

    def __init__(self, argv_for_port, label: str):
        self.label, self.port = label, free_port()
        self.argv = argv_for_port(self.port)
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True)
        self._log: list[str] = []
        threading.Thread(target=self._drain, daemon=True).start()
        self._wait_ready()

    def _drain(self) -> None:
        for line in self.proc.stderr:
            self._log = (self._log + [line.rstrip()])[-20:]

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise DependencyError(f"{self.label} exited ({self.proc.returncode}) while loading: {self.tail()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=5) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.2)
        self.close()
        raise DependencyError(f"{self.label} did not become ready in {START_TIMEOUT_S} s: {self.tail()}")

    def complete(self, body: dict) -> tuple[dict, float]:
        """POST /completion; (the reply, wall seconds from sending to the whole reply read)."""
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}/completion", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        t0 = time.perf_counter()
        try:
            with urllib.request.urlopen(req, timeout=REPLY_TIMEOUT_S) as r:
                raw = r.read()
        except urllib.error.HTTPError as exc:
            raise DependencyError(f"{self.label} refused the request ({exc.code}): {exc.read()[:300]!r}") from exc
        except (urllib.error.URLError, OSError) as exc:
            raise DependencyError(f"{self.label} stopped answering: {exc}; {self.tail()}") from exc
        return json.loads(raw), time.perf_counter() - t0

    def tail(self) -> str:
        return " | ".join(self._log[-3:])

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


_SERVERS = Children()  # one server (one model set) per mode


def close_all() -> None:
    _SERVERS.close_all()


def server_for(mode: ServerMode, target: Path, draft: Path | None, n_ctx: int, threads: int, n_batch: int) -> LlamaServer:
    key = (mode.key, str(target), str(draft) if mode.needs_draft else None, n_ctx, threads, n_batch)
    return _SERVERS.get(key, lambda: LlamaServer(
        lambda port: server_argv(mode, target, draft, port, n_ctx, threads, n_batch), mode.label))


def request_body(prompt_ids: list[int], settings: GenerationSettings) -> dict:
    """The /completion request: the prompt as ids, no prompt cache, greedy (or the settings' sampler)."""
    body = {"prompt": [int(t) for t in prompt_ids], "n_predict": settings.max_new_tokens, "cache_prompt": False,
            "return_tokens": True, "stream": False, "seed": settings.seed, "repeat_penalty": 1.0,
            "min_p": 0.0, "top_p": 1.0, "top_k": 1, "temperature": 0.0}
    if not settings.greedy:
        body.update(temperature=settings.temperature, top_p=settings.top_p, top_k=settings.top_k or 0)
    return body


def generate(server: LlamaServer, key: str, prompt_ids: list[int], settings: GenerationSettings) -> DecodeResult:
    """One timed generation by ``server``, cut at the first of ``settings``' EOS ids (the server stops at
    the model's own end-of-generation tokens)."""
    reply, took = server.complete(request_body(prompt_ids, settings))
    out = [int(t) for t in reply.get("tokens") or []]
    eos = set(settings.eos_token_ids)
    cut = next((i + 1 for i, t in enumerate(out) if t in eos), len(out))
    out = out[:cut]
    timings = reply.get("timings") or {}
    drafted, accepted = int(timings.get("draft_n") or 0), int(timings.get("draft_n_accepted") or 0)
    extra = {"engine": "llama-server", "server_prompt_ms": timings.get("prompt_ms"),
             "server_predicted_ms": timings.get("predicted_ms"), "draft_n": drafted, "draft_n_accepted": accepted}
    return DecodeResult(method=key, output_ids=out, prefill_s=0.0, decode_s=took, steps=0, target_forwards=0,
                        stopped_by="eos" if out and out[-1] in eos else "length", extra=extra)


def server_runners(ctx, prompt_ids: list[int], n_ctx: int) -> dict:
    """Runners for llama.cpp's own modes on the context's GGUF target (draft-simple only when a GGUF draft
    is loaded), when ``specpilot peers setup llama.cpp`` was done; otherwise none, with the reason logged."""
    state = status()
    if not state["ready"]:
        log.warning("llama.cpp's own speculative modes not run: %s", state["reason"])
        return {}
    backend = ctx.target.model
    draft = getattr(getattr(ctx.draft, "model", None), "path", None)
    out = {}
    for mode in SERVER_MODES.values():
        if mode.needs_draft and draft is None:
            continue
        try:
            server = server_for(mode, Path(backend.path), Path(draft) if draft else None, n_ctx, backend.n_threads,
                                backend.n_batch)
        except (DependencyError, ParameterError) as exc:
            log.warning("%s not run: %s", mode.label, exc)
            continue
        out[mode.key] = (lambda sv, k: lambda s: generate(sv, k, prompt_ids, s))(server, mode.key)
    return out


# every peer `specpilot peers setup` builds: the upstream packages' venvs and this llama-server
PEER_NAMES = (*upstream.UPSTREAM_PEERS, NAME)


def peer_status(name: str) -> dict:
    """Whether the peer ``name`` is set up (``ready``), and what it is for; the reason when it is not."""
    return status() if name == NAME else upstream.status(name)
