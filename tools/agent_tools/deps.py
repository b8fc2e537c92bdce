"""Check the packages a method needs: import each one, report its version, what is missing or
installed but unusable (with the import error), and the exact install command to suggest."""

from __future__ import annotations

import importlib
import shlex
import sys
from dataclasses import dataclass
from importlib import metadata
from typing import Callable, Literal

from pydantic import BaseModel, ConfigDict, Field

from tools.agent_tools.registry import ToolContext, tool
from tools.engine.params import METHOD_NAMES, METHODS
from tools.bench import vllm_server
from tools.bench.llamacpp_server import NAME as LLAMACPP_PEER, PEER_NAMES, peer_status
from tools.engine.upstream_status import lade_status, upstream_backend_status


@dataclass(frozen=True)
class Package:
    """A package specpilot may use: its import name, PyPI name, and which methods need it."""

    module: str
    dist: str
    requirement: str  # what to install
    needed_by: tuple[str, ...]  # methods that cannot run without it ("all" = every method)
    optional_for: tuple[str, ...] = ()  # methods that can use it but run without it
    purpose: str = ""


def _lade_check() -> tuple[bool, str]:
    return lade_status()


def _medusa_check() -> tuple[bool, str]:
    return upstream_backend_status()


# what runs on llama.cpp: every method that does not read the target's hidden states (the method table)
ON_LLAMACPP = tuple(name for name, spec in METHODS.items() if not spec.needs_features)

PACKAGES: tuple[Package, ...] = (
    Package("torch", "torch", "torch", ("all",), purpose="tensors and model execution"),
    Package("transformers", "transformers", "transformers>=5.0,<6", ("all",),
            purpose="model loading and forward passes"),
    Package("accelerate", "accelerate", "accelerate", (), ("all",),
            purpose="device_map='auto' (spreading a large model over GPUs and CPU)"),
    Package("gguf", "gguf", "gguf>=0.10", (), ("all",),
            purpose="loading GGUF files, including the built-in offline models"),
    Package("llama_cpp", "llama-cpp-python", "llama-cpp-python", (), ON_LLAMACPP,
            purpose="the llama.cpp backend (--backend llamacpp: GGUF models as llama.cpp runs them) and the local "
                    "chat brain; `make install` builds it"),
    Package("medusa", "medusa-llm", "medusa-llm", (), ("medusa",),
            purpose="the upstream Medusa reference implementation (specpilot's own Medusa decoder does not need it)"),
    Package("lade", "lade", "lade", (), ("lookahead",),
            purpose="the upstream lookahead reference implementation (specpilot's own decoder does not need it)"),
)

# Packages whose import has side effects (lade patches transformers when imported): a custom check.
CUSTOM_CHECKS: dict[str, Callable[[], tuple[bool, str]]] = {"lade": _lade_check, "medusa": _medusa_check}

# the methods each peer is measured beside (`specpilot peers setup NAME`; --peers)
PEER_METHODS = {"medusa-llm": ("medusa",), "lade": ("lookahead",),
                LLAMACPP_PEER: ON_LLAMACPP}

Method = Literal[("all", *METHOD_NAMES)]  # type: ignore[valid-type]  (from the method table)


class DepsInput(BaseModel):
    """Which method's dependencies to check."""

    model_config = ConfigDict(extra="forbid")

    method: Method = Field("all", description="a method name, or 'all' for every package specpilot may use")


def install_command(requirements: list[str]) -> str:
    """The exact pip command that installs ``requirements`` into this Python."""
    return shlex.join([sys.executable, "-m", "pip", "install", *requirements])


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def check_package(pkg: Package) -> dict:
    """Import one package and report ``{"status": ok|missing|unusable, "version", "error"}``."""
    version = _version(pkg.dist)
    if pkg.module in CUSTOM_CHECKS:
        ok, reason = CUSTOM_CHECKS[pkg.module]()
        status = "ok" if ok else ("missing" if version is None else "unusable")
        return {"status": status, "version": version, **({} if ok else {"error": reason})}
    try:
        module = importlib.import_module(pkg.module)
    except ImportError as exc:
        if version is None:
            return {"status": "missing", "version": None, "error": f"{type(exc).__name__}: {exc}"}
        return {"status": "unusable", "version": version, "error": f"{type(exc).__name__}: {exc}"}
    except Exception as exc:  # an installed package that fails while importing is unusable, whatever the error
        return {"status": "unusable", "version": version, "error": f"{type(exc).__name__}: {exc}"}
    return {"status": "ok", "version": version or getattr(module, "__version__", None)}


def relevant(pkg: Package, method: str) -> tuple[bool, bool]:
    """(needed, optional) for ``method``; every package is relevant to 'all'."""
    if method == "all":
        return bool(pkg.needed_by), not pkg.needed_by
    needed = "all" in pkg.needed_by or method in pkg.needed_by
    optional = not needed and ("all" in pkg.optional_for or method in pkg.optional_for)
    return needed, optional


@tool("check_deps", DepsInput, read_only=True)
def check_deps(inp: DepsInput, ctx: ToolContext) -> dict:
    """Check the Python packages a decoding method needs (torch, transformers, accelerate, gguf,
    llama-cpp-python, and the optional upstream medusa-llm and lade): imports each one and reports its
    version, whether it is missing or installed but unusable (with the import error), and the exact
    install command to suggest; under ``peers``, whether the reference implementations timed beside
    ours (`specpilot peers setup NAME`: medusa-llm, lade, llama.cpp's llama-server) are set up; under ``vllm``,
    whether vLLM's own venv is set up (`specpilot peers setup vllm`), its version and the device it uses.
    Nothing is installed."""
    report, missing_required, missing_optional = [], [], []
    for pkg in PACKAGES:
        needed, optional = relevant(pkg, inp.method)
        if not (needed or optional):
            continue
        ctx.report(f"checking {pkg.dist}")
        entry = {"package": pkg.dist, "module": pkg.module, "required": needed, "purpose": pkg.purpose,
                 **check_package(pkg)}
        if entry["status"] == "missing":
            entry["install_command"] = install_command([pkg.requirement])
            (missing_required if needed else missing_optional).append(pkg.requirement)
        elif entry["status"] == "unusable" and pkg.module not in CUSTOM_CHECKS:
            entry["install_command"] = install_command(["--upgrade", pkg.requirement])
        report.append(entry)
    ready = not any(e["required"] and e["status"] != "ok" for e in report)
    out = {"method": inp.method, "ready": ready, "packages": report}
    if missing_required or missing_optional:
        out["suggested_install"] = {
            "command": install_command(missing_required or missing_optional),
            "tool_input": {"packages": missing_required or missing_optional},
            "note": "install_packages asks the user for approval before it runs",
        }
    out["peers"] = [peer_status(name) for name in PEER_NAMES if inp.method == "all" or inp.method in PEER_METHODS[name]]
    # vLLM lives in a venv of its own (`specpilot peers setup vllm`): its version and the device it will use
    out["vllm"] = {**vllm_server.status(), "device_here": "cuda" if vllm_server.has_cuda() else "cpu"}
    unusable_upstream = [e["package"] for e in report if e["status"] == "unusable" and e["module"] in CUSTOM_CHECKS]
    if unusable_upstream:
        out["note"] = (f"{', '.join(unusable_upstream)} cannot run with the installed transformers; reinstalling "
                       f"will not fix that. specpilot's own decoders do not need them; `specpilot peers setup "
                       f"medusa-llm|lade` runs them in a venv of their own, timed beside ours with --peers.")
    return out
