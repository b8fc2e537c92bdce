"""check_deps: versions of what imports, what is missing, what is installed but unusable (with the
import error), and the exact install command."""

from __future__ import annotations

import shlex
import sys
from importlib import metadata

import pytest

import tools.agent_tools.deps as deps
from memory import Store
from tools.agent_tools import registry
from tools.agent_tools.registry import ToolContext


@pytest.fixture
def store():
    with Store() as s:
        yield s


def check(store, method: str = "all") -> dict:
    tool = registry.get_tool("check_deps")
    result = registry.execute(tool, registry.parse_input(tool, {"method": method}), ToolContext(store=store))
    assert not result.is_error, result.content
    return result.content


def by_package(report: dict) -> dict:
    return {p["package"]: p for p in report["packages"]}


def test_every_package_is_reported_with_its_installed_version(store):
    report = check(store)
    packages = by_package(report)
    assert set(packages) == {"torch", "transformers", "accelerate", "gguf", "llama-cpp-python", "medusa-llm", "lade"}
    for name in ("torch", "transformers", "accelerate", "gguf"):
        assert packages[name]["status"] == "ok" and packages[name]["version"] == metadata.version(name)
    assert packages["torch"]["required"] and not packages["gguf"]["required"]
    assert report["ready"] is True


def test_method_filter(store):
    assert "lade" in by_package(check(store, "lookahead")) and "medusa-llm" not in by_package(check(store, "lookahead"))
    assert "medusa-llm" in by_package(check(store, "medusa")) and "lade" not in by_package(check(store, "medusa"))
    assert set(by_package(check(store, "draft"))) == {"torch", "transformers", "accelerate", "gguf", "llama-cpp-python"}
    assert set(by_package(check(store, "eagle"))) == {"torch", "transformers", "accelerate", "gguf"}


def test_the_peers_timed_beside_ours_say_whether_they_are_set_up(store, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECPILOT_PEERS", str(tmp_path / "peers"))
    peers = {p["peer"]: p for p in check(store)["peers"]}
    assert set(peers) == {"medusa-llm", "lade", "llama.cpp"}
    for name, row in peers.items():
        assert row["ready"] is False and f"specpilot peers setup {name}" in row["reason"]
    assert [p["peer"] for p in check(store, "medusa")["peers"]] == ["medusa-llm"]
    assert [p["peer"] for p in check(store, "lookahead")["peers"]] == ["lade", "llama.cpp"]
    assert check(store, "eagle")["peers"] == []


def test_a_missing_package_gets_the_exact_install_command(store, monkeypatch):
    ghost = deps.Package("specpilot_ghost_module", "specpilot-ghost", "specpilot-ghost>=1.0", ("all",))
    monkeypatch.setattr(deps, "PACKAGES", (*deps.PACKAGES, ghost))
    report = check(store, "draft")
    entry = by_package(report)["specpilot-ghost"]
    assert entry["status"] == "missing" and entry["version"] is None
    assert "No module named 'specpilot_ghost_module'" in entry["error"]
    command = shlex.join([sys.executable, "-m", "pip", "install", "specpilot-ghost>=1.0"])
    assert entry["install_command"] == command
    assert report["ready"] is False
    assert report["suggested_install"] == {"command": command, "tool_input": {"packages": ["specpilot-ghost>=1.0"]},
                                           "note": "install_packages asks the user for approval before it runs"}


def test_an_installed_but_broken_package_is_unusable_with_its_import_error(store, monkeypatch, tmp_path):
    (tmp_path / "brokenpkg").mkdir()
    init = tmp_path / "brokenpkg" / "__init__.py"
    init.write_text("raise ImportError('libbroken.so.1: cannot open shared object')\n")
    info = tmp_path / "brokenpkg-1.2.3.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: brokenpkg\nVersion: 1.2.3\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    broken = deps.Package("brokenpkg", "brokenpkg", "brokenpkg", ("all",))
    monkeypatch.setattr(deps, "PACKAGES", (*deps.PACKAGES, broken))
    entry = by_package(check(store, "baseline"))["brokenpkg"]
    assert entry["status"] == "unusable" and entry["version"] == "1.2.3"
    assert entry["error"] == "ImportError: libbroken.so.1: cannot open shared object"
    assert entry["install_command"].endswith("-m pip install --upgrade brokenpkg")


def test_upstream_packages_use_their_own_checks_and_say_why(store, monkeypatch):
    monkeypatch.setitem(deps.CUSTOM_CHECKS, "lade", lambda: (False, "lade cannot run with transformers 5.24"))
    monkeypatch.setattr(deps, "_version", lambda dist: "0.0.2" if dist == "lade" else metadata.version(dist))
    report = check(store, "lookahead")
    entry = by_package(report)["lade"]
    assert entry["status"] == "unusable" and entry["error"] == "lade cannot run with transformers 5.24"
    assert "install_command" not in entry  # reinstalling would not help
    assert "reinstalling will not fix that" in report["note"] and report["ready"] is True
