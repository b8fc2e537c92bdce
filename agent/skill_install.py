"""``specpilot skill install``: write a skill folder (Agent Skills format) that a host such as Claude
Code can load: SKILL.md plus the workflow and explanation texts it refers to."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from tools.errors import ParameterError

SKILL_NAME = "specpilot"
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


def install_skill(skills_dir: str | Path | None = None) -> Path:
    """Write the skill into ``<skills_dir>/specpilot/`` (default ~/.claude/skills); return that folder.

    Existing files of an earlier install are replaced; nothing else in the folder is touched.
    """
    parent = Path(skills_dir or DEFAULT_SKILLS_DIR).expanduser()
    folder = parent / SKILL_NAME
    if parent.exists() and not parent.is_dir():
        raise ParameterError(f"{parent} exists and is not a folder", hint="pass --dir with a folder")
    meta = parse_frontmatter(skill_text("SKILL.md"))
    if meta.get("name") != SKILL_NAME or not meta.get("description"):
        raise ParameterError("the packaged SKILL.md lacks its name or description", hint="reinstall specpilot")
    folder.mkdir(parents=True, exist_ok=True)
    for name in SKILL_FILES:
        (folder / name).write_text(skill_text(name), encoding="utf-8")
    return folder
