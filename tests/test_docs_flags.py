"""Every ``specpilot`` command line the README and docs/ show exists: its subcommands and each of its
``--flags`` are in the parser (agent.cli.main.build_parser), and every benchmark script they name is in
benchmarks/scripts/."""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path

import pytest

from agent.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
SPAN = re.compile(r"`([^`\n]+)`")
STOP = {"#", "|", "&&", ";", "||", ">", "2>&1"}


def code_of(text: str) -> list[str]:
    """The code a Markdown page shows: each line of its fenced blocks, then each inline code span outside them."""
    found = [line for block in FENCE.findall(text) for line in block.splitlines()]
    return found + SPAN.findall(FENCE.sub("", text))


def command_lines(text: str) -> list[list[str]]:
    """The words after ``specpilot`` in each line of the page's code that starts with it (after environment
    settings such as ``SPECPILOT_HOME=x``), up to a comment, pipe or the next command."""
    commands = []
    for code in code_of(text):
        try:
            words = shlex.split(code, comments=True)
        except ValueError:  # an unbalanced quote in a span: split on spaces
            words = code.split()
        while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):
            words.pop(0)
        if words and (words[0] == "specpilot" or words[0].endswith("/bin/specpilot")):
            rest = []
            for w in words[1:]:
                if w in STOP:
                    break
                rest.append(w)
            commands.append(rest)
    return commands


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return {name: sub for a in parser._actions if isinstance(a, argparse._SubParsersAction)
            for name, sub in a.choices.items()}


def _flags(parser: argparse.ArgumentParser) -> set[str]:
    parser.format_help()  # builds the options a Parser adds only when it is used (the method table's)
    return {o for a in parser._actions for o in a.option_strings}


def check(words: list[str], parser: argparse.ArgumentParser) -> list[str]:
    """Problems with one shown command line: an unknown subcommand or a flag its parser does not have."""
    problems, path = [], ["specpilot"]
    words = list(words)
    while words and words[0].startswith("-"):  # options of the top-level command (-v)
        if words[0].split("=")[0] not in _flags(parser):
            problems.append(f"`specpilot {words[0]}`: no such option")
        words.pop(0)
    subs = _subcommands(parser)
    while subs:
        if not words:
            return problems  # the command named alone (`specpilot`, `specpilot peers`)
        word = words.pop(0)
        if word not in subs:
            problems.append(f"`{' '.join(path)} {word}`: no such command (has {', '.join(sorted(subs))})")
            return problems
        path.append(word)
        parser = subs[word]
        subs = _subcommands(parser)
    flags = _flags(parser)
    for word in words:
        if word.startswith("--") and word.split("=")[0] not in flags:
            problems.append(f"`{' '.join(path)} {word.split('=')[0]}`: no such flag")
    return problems


@pytest.fixture(scope="module")
def parser():
    return build_parser()


def test_the_pages_show_commands():
    shown = [c for page in PAGES for c in command_lines(page.read_text(encoding="utf-8"))]
    assert len([c for c in shown if c]) >= 30, "the README and docs show specpilot commands"
    assert (ROOT / "docs").is_dir() and len(PAGES) >= 7


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_command_and_flag_shown_exists(page, parser):
    problems = [p for words in command_lines(page.read_text(encoding="utf-8")) for p in check(words, parser)]
    assert not problems, f"{page.name} shows commands the parser does not have:\n" + "\n".join(sorted(set(problems)))


# docs/results.md is left out: it quotes each result file's command as it was recorded
@pytest.mark.parametrize("page", [p for p in PAGES if p.name != "results.md"], ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_benchmark_script_shown_exists(page):
    named = set(re.findall(r"benchmarks/scripts/[A-Za-z0-9_]+\.py", page.read_text(encoding="utf-8")))
    missing = sorted(n for n in named if not (ROOT / n).is_file())
    assert not missing, f"{page.name} names scripts that do not exist: {missing}"
    old = re.findall(r"benchmarks/(?!scripts/)[A-Za-z0-9_]+\.py", page.read_text(encoding="utf-8"))
    assert not old, f"{page.name} names scripts outside benchmarks/scripts/: {old}"


def test_the_check_finds_what_does_not_exist(parser):
    assert check(["bench", "--limit", "1", "--save-result", "x"], parser) == []
    assert check(["report", "--results", "benchmarks/results", "--out", "docs/results.md"], parser) == []
    assert check(["compare", "--methods", "draft", "--k=4"], parser) == []
    assert check(["-v", "models", "fetch"], parser) == []
    assert check(["bench", "--no-such-flag"], parser) == ["`specpilot bench --no-such-flag`: no such flag"]
    assert check(["models", "frobnicate"], parser)[0].startswith("`specpilot models frobnicate`: no such command")
    assert check(["frobnicate"], parser)[0].startswith("`specpilot frobnicate`: no such command")
    assert command_lines("run `specpilot bench --limit 1 # all` then\n```\nX=1 specpilot mcp\ncli/ (the specpilot "
                         "command)\n```\n") == [["mcp"], ["bench", "--limit", "1"]]
