"""``specpilot skill install``: write a skill folder (Agent Skills format) that a host such as Claude
Code can load: SKILL.md plus the workflow and explanation texts it refers to.

What an install wrote is recorded (a SHA-256 per file in ``.specpilot-install.json``): a later install
replaces a file only while it still holds what was written, so a SKILL.md someone edited is kept and
the new text goes beside it (``SKILL.md.new``). Nothing is written through a symlink: the skill folder
or a file that is one is refused or left alone, and every file is written to a new temporary file and
renamed over the old one (a rename replaces a link itself, never its target)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import secrets
import shutil
import sys
from collections.abc import Callable
from importlib import resources
from pathlib import Path

from tools.errors import ParameterError

SKILL_NAME = "specpilot"
EXECUTABLE = "specpilot"
DEFAULT_SKILLS_DIR = "~/.claude/skills"
SKILL_FILES = ("SKILL.md", "workflows.md", "explain_draft.md", "explain_medusa.md", "explain_lookahead.md",
               "explain_tradeoffs.md")
RECORD_FILE = ".specpilot-install.json"  # {file name: sha256 of the text the last install wrote}
NEW_SUFFIX = ".new"  # the new text of a file that was edited since it was installed


def skill_text(name: str) -> str:
    """The packaged text prompts/<name>."""
    return resources.files("prompts").joinpath(name).read_text(encoding="utf-8")


def parse_frontmatter(text: str) -> dict[str, str]:
    """The ``key: value`` pairs of a SKILL.md YAML frontmatter block (flat keys only)."""
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        raise ParameterError("SKILL.md has no frontmatter", hint="it must start with a --- line")
    fields: dict[str, str] = {}
    for line in lines[1:]:
        if line.strip() == "---":
            return fields
        key, sep, value = line.partition(":")
        if sep:
            fields[key.strip()] = value.strip()
    raise ParameterError("SKILL.md frontmatter is not closed", hint="end it with a --- line")


COMMAND_IN_TEXT = re.compile(r"(`)specpilot(?= )")  # `specpilot tool ...` in the text


def find_executable() -> tuple[str | None, bool]:
    """(the absolute path of the ``specpilot`` executable, whether it is on PATH): the one on PATH, else
    the one beside this Python (a virtual environment's bin folder), else (None, False)."""
    found = shutil.which(EXECUTABLE)
    if found:
        return str(Path(found).absolute()), True
    beside = Path(sys.executable).parent / EXECUTABLE
    return (str(beside.absolute()), False) if beside.exists() else (None, False)


def skill_md(executable: str | None) -> str:
    """SKILL.md with every ``specpilot`` command written as ``executable`` (an absolute path), so an agent
    host runs this installation whatever its PATH."""
    text = skill_text("SKILL.md")
    if executable is None:
        return text
    text = COMMAND_IN_TEXT.sub(lambda m: m.group(1) + executable, text)
    note = f"\nThe specpilot executable on this machine: `{executable}` (commands below use it).\n"
    end = text.index("\n---", 3) + len("\n---\n")  # after the frontmatter
    return text[:end] + note + text[end:]


def _warn(text: str) -> None:
    print(f"warning: {text}", file=sys.stderr)


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _read_record(folder: Path) -> dict[str, str]:
    path = folder / RECORD_FILE
    if path.is_symlink() or not path.is_file():
        return {}
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in record.items()} if isinstance(record, dict) else {}


def _replace_file(folder: Path, name: str, data: bytes) -> None:
    """Write ``data`` as ``folder/name``: to a new temporary file (O_EXCL|O_NOFOLLOW), renamed over the old one."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    temporary = folder / f".{name}.{secrets.token_hex(4)}.tmp"
    fd = os.open(temporary, flags, 0o644)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(temporary, folder / name)
    except BaseException:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise


def _install_file(folder: Path, name: str, text: str, record: dict[str, str], warn: Callable[[str], None]) -> None:
    """Write one skill file unless it is a symlink, or was edited since specpilot wrote it (then its new text
    goes to NAME.new); record what was written."""
    data = text.encode("utf-8")
    target = folder / name
    if target.is_symlink():
        warn(f"{target} is a symlink: left as it is (specpilot does not write through links); remove it and "
             "install again to get the packaged file")
        return
    if target.exists():
        if not target.is_file():
            warn(f"{target} is not a file: left as it is")
            return
        current = _digest(target.read_bytes())
        if current == _digest(data):
            record[name] = current
            return
        if record.get(name) != current:  # not what an install wrote: someone edited it
            if (folder / (name + NEW_SUFFIX)).is_symlink():
                warn(f"{target} was edited since it was installed: kept; the new text was not written")
                return
            _replace_file(folder, name + NEW_SUFFIX, data)
            warn(f"{target} was edited since it was installed: kept as it is; the new text is in "
                 f"{target}{NEW_SUFFIX} (move it over {name} to use it)")
            return
    _replace_file(folder, name, data)
    record[name] = _digest(data)


def install_skill(skills_dir: str | Path | None = None, warn: Callable[[str], None] = _warn) -> Path:
    """Write the skill into ``<skills_dir>/specpilot/`` (None: ~/.claude/skills; an empty name is refused);
    return that folder.

    SKILL.md names the absolute path of the ``specpilot`` executable; ``warn`` is told when it is not
    on PATH (the host would not find it by name) or cannot be found at all, and about each file left as
    it is. Files an earlier install wrote are replaced; a file edited since, or a symlink, is kept (see
    the module docstring); nothing else in the folder is touched. A skill folder that is a symlink is
    refused.
    """
    if isinstance(skills_dir, str) and not skills_dir.strip():  # Path("") would be the current folder
        raise ParameterError("the skills folder is empty",
                             hint=f"pass --dir with a folder, or leave --dir out for {DEFAULT_SKILLS_DIR}")
    parent = Path(DEFAULT_SKILLS_DIR if skills_dir is None else skills_dir).expanduser()
    folder = parent / SKILL_NAME
    if parent.exists() and not parent.is_dir():
        raise ParameterError(f"{parent} exists and is not a folder", hint="pass --dir with a folder")
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        raise ParameterError(f"{folder} is a symlink or a file, not a folder: specpilot does not write through it",
                             hint="remove it, or pass --dir with another skills folder")
    meta = parse_frontmatter(skill_text("SKILL.md"))
    if meta.get("name") != SKILL_NAME or not meta.get("description"):
        raise ParameterError("the packaged SKILL.md lacks its name or description", hint="reinstall specpilot")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _unwritable("create the skill folder", folder, exc) from None
    executable, on_path = find_executable()
    if executable is None:
        warn("the specpilot executable was not found (not on PATH, not beside this Python): SKILL.md calls it "
             "`specpilot`; put its folder on PATH, e.g. activate the virtual environment specpilot is installed in")
    elif not on_path:
        warn(f"specpilot is not on PATH; SKILL.md calls it by its absolute path {executable}")
    record = _read_record(folder)
    try:
        for name in SKILL_FILES:
            _install_file(folder, name, skill_md(executable) if name == "SKILL.md" else skill_text(name), record,
                          warn)
        if (folder / RECORD_FILE).is_symlink():
            warn(f"{folder / RECORD_FILE} is a symlink: what was installed is not recorded")
        else:
            _replace_file(folder, RECORD_FILE, (json.dumps(record, indent=1, sort_keys=True) + "\n").encode("utf-8"))
    except OSError as exc:
        raise _unwritable("write the skill into", folder, exc) from None
    return folder


def _unwritable(doing: str, folder: Path, exc: OSError) -> ParameterError:
    """An OS error creating or writing the skill folder as one sentence naming the folder and what to do."""
    reason = exc.strerror or str(exc)
    if exc.filename and str(exc.filename) != str(folder):
        reason = f"{exc.filename}: {reason}"
    return ParameterError(f"cannot {doing} {folder} ({reason})",
                          hint="pass --dir with a folder you can write to, or leave --dir out for "
                               f"{DEFAULT_SKILLS_DIR}")
