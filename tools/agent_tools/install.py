"""Install Python packages with pip (gated: runs only after the user approves the exact command).

Packages already installed (in a version the requirement allows) are left out before the approval is asked for
(:func:`resolve_install`); when every package asked for is installed the answer says so and nothing is asked.

A package is a PEP 508 name with optional extras and an optional version specifier, and nothing
else: :func:`check_package` parses it with ``packaging.requirements.Requirement`` and refuses
anything pip could read as a path, an archive (``evil-1.0.tar.gz`` is a local file to pip, whose
``setup.py`` would run), a URL, ``name @ url``, an environment marker or an option. pip runs as an
argument list (``[sys.executable, "-m", "pip", "install", ...]``), never through a shell.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from importlib import metadata

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion
from pydantic import BaseModel, ConfigDict, Field, field_validator

from tools.errors import DependencyError, ParameterError, SpecpilotError
from tools.agent_tools.registry import ToolContext, tool

MAX_PACKAGES = 10
MAX_SPEC_CHARS = 200
PIP_TIMEOUT_S = 1800
# pip treats a requirement ending in one of these as a local archive file (and builds it)
ARCHIVE_SUFFIXES = (".zip", ".whl", ".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz", ".tar.xz", ".txz", ".tlz",
                    ".tar.lz", ".tar.lzma", ".egg")
FORBIDDEN_TEXT = ("://", "/", "\\", "@", ";")
ACCEPTED = ("PyPI names, optionally with extras and a version specifier, e.g. gguf, gguf>=0.10 or "
            "transformers[torch]==5.0.1; never paths, archives (.tar.gz, .whl, .zip), URLs, name @ url, "
            "environment markers or pip options such as -e or --index-url")


def _refuse(spec: object, why: str) -> ParameterError:
    return ParameterError(f"{spec!r} is not a package name specpilot will install: {why}. Accepted: {ACCEPTED}",
                          hint="give plain PyPI names, e.g. gguf or gguf>=0.10")


def _text_problem(spec: str) -> str | None:
    """Why ``spec`` is refused before parsing (options, paths, URLs, archives, odd characters), or None."""
    lowered = spec.lower()
    if not spec:
        return "it is empty"
    if len(spec) > MAX_SPEC_CHARS:
        return f"it is longer than {MAX_SPEC_CHARS} characters"
    if spec.startswith("-"):
        return "it starts with '-', so pip would read it as an option"
    if any(c.isspace() or not c.isprintable() for c in spec):
        return "it contains spaces or control characters"
    found = next((t for t in FORBIDDEN_TEXT if t in spec), None)
    if found is not None:
        return f"it contains {found!r} (paths, URLs, name @ url and markers are not package names)"
    if lowered.endswith(ARCHIVE_SUFFIXES):
        return "it names an archive file, which pip would build and run from disk"
    return None


def check_package(spec: str) -> str:
    """Return ``spec`` if it is a PEP 508 name with optional extras and version specifier; else raise
    ParameterError saying what is accepted."""
    if not isinstance(spec, str):
        raise _refuse(spec, f"it is a {type(spec).__name__}, not text")
    problem = _text_problem(spec)
    if problem is None:
        try:
            requirement = Requirement(spec)
        except InvalidRequirement as exc:
            problem = f"it is not a valid requirement ({str(exc).splitlines()[0]})"
        else:
            if requirement.url or requirement.marker is not None:
                problem = "it carries a URL or an environment marker"
            elif requirement.name.lower().endswith(ARCHIVE_SUFFIXES):
                problem = "it names an archive file, which pip would build and run from disk"
    if problem is not None:
        raise _refuse(spec, problem)
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


ALREADY_INSTALLED = "already installed."  # how the answer ends when every package asked for is installed


class AlreadyInstalled(SpecpilotError):
    """Every package asked for is installed, in a version its requirement allows: nothing to install."""


def installed_version(spec: str) -> str | None:
    """The installed version of ``spec``'s distribution when it satisfies ``spec``: its version specifier
    (``gguf>=0.10``) and, for extras (``transformers[torch]``), the requirements those extras add; else None."""
    requirement = Requirement(spec)
    version = _satisfying_version(requirement)
    if version is None or not requirement.extras:
        return version
    for needed in metadata.requires(requirement.name) or []:
        try:
            extra_requirement = Requirement(needed)
        except InvalidRequirement:
            continue
        marker = extra_requirement.marker
        if marker is None or marker.evaluate({"extra": ""}):
            continue  # not one of an extra's own requirements
        if any(marker.evaluate({"extra": extra}) for extra in requirement.extras) \
                and _satisfying_version(extra_requirement) is None:
            return None
    return version


def _satisfying_version(requirement: Requirement) -> str | None:
    try:
        version = metadata.version(requirement.name)
    except metadata.PackageNotFoundError:
        return None
    try:
        return version if requirement.specifier.contains(version, prereleases=True) else None
    except InvalidVersion:
        return None


def resolve_install(inp: InstallInput, store: object = None) -> InstallInput:
    """The install the approval is asked for: the packages asked for less those already installed (in a
    version the requirement allows). AlreadyInstalled when none is left; an upgrade keeps every package."""
    if inp.upgrade:
        return inp
    asked = list(dict.fromkeys(inp.packages))
    found = {spec: installed_version(spec) for spec in asked}
    left = [spec for spec in asked if found[spec] is None]
    if not left:
        have = list(dict.fromkeys(f"{Requirement(spec).name} {version}" for spec, version in found.items()))
        names = have[0] if len(have) == 1 else ", ".join(have[:-1]) + " and " + have[-1]
        verb = "is" if len(have) == 1 else "are"
        first = Requirement(asked[0]).name
        raise AlreadyInstalled(f"{names} {verb} {ALREADY_INSTALLED}",
                               hint=f"nothing to install; for a newer version ask for an upgrade, e.g. "
                                    f"`/install {first} --upgrade`")
    return inp if left == inp.packages else inp.model_copy(update={"packages": left})


def run_pip(argv: list[str]) -> subprocess.CompletedProcess:
    """Run pip with an argument list (no shell), capturing its output."""
    return subprocess.run(argv, capture_output=True, text=True, timeout=PIP_TIMEOUT_S, check=False)


@tool("install_packages", InstallInput, gate="install", describe=describe_install, resolve=resolve_install)
def install_packages(inp: InstallInput, ctx: ToolContext) -> dict:
    """Install Python packages with pip (for example a method's missing dependency that check_deps named).
    Packages already installed in a version the requirement allows are left out (all of them: it says so,
    and asks nothing); upgrade=true installs every one. Needs the user's approval: the first call returns approval_required (or asks the user in the
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
