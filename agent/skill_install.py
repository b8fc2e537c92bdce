"""``specpilot skill install``: write a skill folder (Agent Skills format) that a host such as Claude
Code can load: SKILL.md plus the workflow and explanation texts it refers to."""

from __future__ import annotations

import re
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


def install_skill(skills_dir: str | Path | None = None, warn: Callable[[str], None] = _warn) -> Path:
    """Write the skill into ``<skills_dir>/specpilot/`` (default ~/.claude/skills); return that folder.

    SKILL.md names the absolute path of the ``specpilot`` executable; ``warn`` is told when it is not
    on PATH (the host would not find it by name) or cannot be found at all. Existing files of an
    earlier install are replaced; nothing else in the folder is touched.
    """
    parent = Path(skills_dir or DEFAULT_SKILLS_DIR).expanduser()
    folder = parent / SKILL_NAME
    if parent.exists() and not parent.is_dir():
        raise ParameterError(f"{parent} exists and is not a folder", hint="pass --dir with a folder")
    meta = parse_frontmatter(skill_text("SKILL.md"))
    if meta.get("name") != SKILL_NAME or not meta.get("description"):
        raise ParameterError("the packaged SKILL.md lacks its name or description", hint="reinstall specpilot")
    executable, on_path = find_executable()
    if executable is None:
        warn("the specpilot executable was not found (not on PATH, not beside this Python): SKILL.md calls it "
             "`specpilot`; put its folder on PATH, e.g. activate the virtual environment specpilot is installed in")
    elif not on_path:
        warn(f"specpilot is not on PATH; SKILL.md calls it by its absolute path {executable}")
    folder.mkdir(parents=True, exist_ok=True)
    for name in SKILL_FILES:
        text = skill_md(executable) if name == "SKILL.md" else skill_text(name)
        (folder / name).write_text(text, encoding="utf-8")
    return folder
