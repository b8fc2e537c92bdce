"""``specpilot skill install`` writes the absolute path of the specpilot executable into SKILL.md, and
warns when the executable is not on PATH (or cannot be found at all)."""

from __future__ import annotations

from pathlib import Path

import pytest

import agent.skill_install as skill_install
from agent.cli.main import main
from agent.skill_install import install_skill, parse_frontmatter
from tools.errors import ParameterError


def test_skill_md_names_the_executable_on_path_without_a_warning(tmp_path, monkeypatch):
    exe = tmp_path / "bin" / "specpilot"
    monkeypatch.setattr(skill_install.shutil, "which", lambda name: str(exe))
    warnings = []
    folder = install_skill(tmp_path / "skills", warn=warnings.append)
    text = (folder / "SKILL.md").read_text()
    assert warnings == [] and parse_frontmatter(text)["name"] == "specpilot"
    assert f"The specpilot executable on this machine: `{exe}`" in text
    assert f"`{exe} tool list`" in text and "`specpilot tool" not in text


def test_a_missing_or_unlisted_executable_is_warned_about(tmp_path, monkeypatch):
    monkeypatch.setattr(skill_install.shutil, "which", lambda name: None)
    beside = tmp_path / "venv" / "bin"
    beside.mkdir(parents=True)
    monkeypatch.setattr(skill_install.sys, "executable", str(beside / "python"))
    warnings = []
    text = (install_skill(tmp_path / "a", warn=warnings.append) / "SKILL.md").read_text()
    assert len(warnings) == 1 and "executable was not found" in warnings[0]  # nothing beside this Python yet
    assert "`specpilot tool list`" in text
    (beside / "specpilot").write_text("#!/bin/sh\n")
    warnings.clear()
    text = (install_skill(tmp_path / "b", warn=warnings.append) / "SKILL.md").read_text()
    assert warnings == [f"specpilot is not on PATH; SKILL.md calls it by its absolute path {beside / 'specpilot'}"]
    assert f"`{beside / 'specpilot'} tool list`" in text


@pytest.mark.parametrize("given", ["", "  "])
def test_an_empty_skills_folder_is_refused_not_taken_for_the_default(tmp_path, monkeypatch, capsys, given):
    """`skill install --dir ''` used to write into ~/.claude/skills (QA s21, finding 12)."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ParameterError, match="the skills folder is empty"):
        install_skill(given, warn=lambda text: None)
    assert main(["skill", "install", "--dir", given]) == 2
    assert "the skills folder is empty" in capsys.readouterr().err
    assert not (tmp_path / "home").exists() and not (tmp_path / "specpilot").exists()  # nothing written


def test_no_skills_folder_means_the_default_one(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert install_skill(None, warn=lambda text: None) == tmp_path / ".claude" / "skills" / "specpilot"


@pytest.mark.parametrize("where", ["file-as-folder", "proc"])
def test_a_skills_folder_that_cannot_be_created_is_one_sentence(tmp_path, capsys, where):
    """`skill install --dir /proc/nope` printed a raw FileNotFoundError (QA s21, finding 5)."""
    if where == "proc":
        if not Path("/proc/self").is_dir():
            pytest.skip("no /proc on this system")
        given = Path("/proc/nope")
    else:
        (tmp_path / "a-file").write_text("x")
        given = tmp_path / "a-file" / "skills"
    warnings = []
    with pytest.raises(ParameterError) as info:
        install_skill(given, warn=warnings.append)
    assert str(info.value).startswith(f"cannot create the skill folder {given / 'specpilot'} (")
    assert "--dir" in info.value.hint and warnings == []  # no PATH advice before the refusal
    assert main(["skill", "install", "--dir", str(given)]) == 2
    err = capsys.readouterr().err
    assert f"error: cannot create the skill folder {given / 'specpilot'}" in err and "Error:" not in err
