"""Install Python packages with pip (gated: runs only after the user approves the exact command).

Package names are checked against a strict pattern (a name, optional extras, at most one version
specifier), so nothing that looks like an option, a path or a URL reaches pip, and pip runs as an
argument list (``[sys.executable, "-m", "pip", "install", ...]``), never through a shell.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys

from pydantic import BaseModel, ConfigDict, Field, field_validator

from tools.errors import DependencyError, ParameterError
from tools.agent_tools.registry import ToolContext, tool

# PEP 508 name (letters, digits, . _ -, starting and ending alphanumeric), optional [extras],
# optional single specifier such as ==1.2.3 or >=0.10.
PACKAGE_PATTERN = re.compile(
    r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,98}[A-Za-z0-9])?"
    r"(?:\[[A-Za-z0-9][A-Za-z0-9._-]*(?:,[A-Za-z0-9][A-Za-z0-9._-]*)*\])?"
    r"(?:(?:==|>=|<=|~=|!=|>|<)[A-Za-z0-9][A-Za-z0-9.*+!_-]{0,63})?"
)
MAX_PACKAGES = 10
PIP_TIMEOUT_S = 1800


def check_package(spec: str) -> str:
    """Return ``spec`` if it is a plain requirement (name[extras]specifier); else raise ParameterError."""
    if not isinstance(spec, str) or not PACKAGE_PATTERN.fullmatch(spec):
        raise ParameterError(f"{spec!r} is not a package name specpilot will install",
                             hint="give plain PyPI names, optionally with one version, e.g. gguf or gguf>=0.10 "
                                  "(no options, paths or URLs)")
    return spec


class InstallInput(BaseModel):
    """Packages to install with pip into the Python that runs specpilot."""

    model_config = ConfigDict(extra="forbid")

    packages: list[str] = Field(..., min_length=1, max_length=MAX_PACKAGES,
                                description="PyPI requirement strings, e.g. ['gguf>=0.10', 'accelerate']")
    upgrade: bool = Field(False, description="pass --upgrade to pip")
    approval_id: str | None = Field(None, description="the id of an approval the user gave for exactly this install")

    @field_validator("packages")
    @classmethod
    def _plain_requirements(cls, packages: list[str]) -> list[str]:
        return [check_package(p) for p in packages]


def pip_command(inp: InstallInput) -> list[str]:
    """The exact argument list that installs ``inp.packages`` (validated; never a shell string)."""
    packages = [check_package(p) for p in dict.fromkeys(inp.packages)]
    return [sys.executable, "-m", "pip", "install", *(["--upgrade"] if inp.upgrade else []), *packages]


def describe_install(inp: InstallInput) -> str:
    """What the install will run, as one shell-quoted line (shown to the user before approval)."""
    return shlex.join(pip_command(inp))


def run_pip(argv: list[str]) -> subprocess.CompletedProcess:
    """Run pip with an argument list (no shell), capturing its output."""
    return subprocess.run(argv, capture_output=True, text=True, timeout=PIP_TIMEOUT_S, check=False)


@tool("install_packages", InstallInput, gate="install", describe=describe_install)
def install_packages(inp: InstallInput, ctx: ToolContext) -> dict:
    """Install Python packages with pip (for example a method's missing dependency that check_deps named).
    Needs the user's approval: the first call returns approval_required (or asks the user in the
    terminal); only the exact approved command runs, once. Returns the command, pip's exit code and
    the tail of its output."""
    argv = pip_command(inp)
    ctx.report(f"installing {' '.join(argv[4:])}")
    proc = run_pip(argv)
    tail = (proc.stdout or "").strip().splitlines()[-5:]
    if proc.returncode != 0:
        raise DependencyError(f"pip failed (exit {proc.returncode}) running {shlex.join(argv)}: "
                              f"{(proc.stderr or '').strip()[-600:]}",
                              hint="check the package name and that this machine reaches the package index")
    return {"status": "installed", "command": shlex.join(argv), "returncode": proc.returncode,
            "packages": argv[4 + int(inp.upgrade):], "output_tail": tail}
