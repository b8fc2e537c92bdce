"""The import rule of the layered design (docs/architecture.md, "Layout"): imports only point down, and no two
project modules import each other, directly or round a loop.

Layers, bottom first; a module may import its own layer and the layers below it:

    tools.errors, prompts  <  memory  <  tools.engine  <  tools.models  <  tools.medusa
      <  tools.bench  <  tools.report  <  tools.agent_tools  <  agent
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("agent", "tools", "memory", "prompts")
LAYERS = (
    ("tools.errors", "prompts"),  # and the empty namespace packages tools, agent
    ("memory",),
    ("tools.engine",),
    ("tools.models",),
    ("tools.medusa",),
    ("tools.bench",),
    ("tools.report",),
    ("tools.agent_tools",),
    ("agent",),
)
# project imports inside functions are allowed only to keep torch/transformers/anthropic out of start-up
# (agent.brains.make_brain's three, counted since package __init__ files are walked, among them)
MAX_FUNCTION_IMPORTS = 18


def project_modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the four packages."""
    out = {}
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def layer_of(module: str) -> int:
    if module in ("tools", "agent"):
        return 0
    for i, prefixes in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return i
    raise AssertionError(f"{module} is in no layer: add it to LAYERS and to the Layout in docs/architecture.md")


def imports_of(module: str, path: Path, modules: dict[str, Path]) -> tuple[set[str], int]:
    """(project modules imported by ``module``, how many project imports sit inside functions)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    in_function = {id(node) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                   for node in ast.walk(f)}
    found, inner = set(), 0
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            # ``from pkg import sub`` imports the submodule when there is one, else a name of ``pkg``
            names = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                     for a in node.names]
        else:
            continue
        targets = set()
        for name in names:
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name and name != module and name.split(".")[0] in PACKAGES:
                targets.add(name)
                targets |= packages_above(name, module, modules)
        if targets and id(node) in in_function:
            inner += 1
        found |= targets
    return found, inner


def packages_above(name: str, importer: str, modules: dict[str, Path]) -> set[str]:
    """The packages whose ``__init__`` runs when ``importer`` imports ``name`` (its parents), less the
    importer's own packages (initialised before it). A package's ``__init__`` importing its own submodules is
    an edge like any other: ``agent.loop -> agent.brains.base`` runs ``agent/brains/__init__``, and whatever
    that imports."""
    parts, out = name.split("."), set()
    for i in range(1, len(parts)):
        package = ".".join(parts[:i])
        if package in modules and not (importer + ".").startswith(package + "."):
            out.add(package)
    return out


def graph() -> tuple[dict[str, set[str]], int]:
    modules = project_modules()
    edges, inner = defaultdict(set), 0
    for module, path in modules.items():
        targets, n = imports_of(module, path, modules)
        edges[module] |= targets
        inner += n
    return edges, inner


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for start in list(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges.get(start, ()))))]
        index[start] = low[start] = counter[0]; counter[0] += 1
        stack.append(start); on.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]; counter[0] += 1
                    stack.append(w); on.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop(); on.discard(w); comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_no_import_cycles():
    edges, _ = graph()
    assert cycles(edges) == []


def test_imports_only_point_down():
    edges, _ = graph()
    upward = sorted(f"{src} -> {dst}" for src, dsts in edges.items() for dst in dsts
                    if layer_of(dst) > layer_of(src))
    assert upward == []


def test_few_imports_inside_functions():
    _, inner = graph()
    assert inner <= MAX_FUNCTION_IMPORTS


def test_the_checker_sees_a_cycle_and_an_upward_import():
    """The rules above could not fail if the graph reader missed edges: check it on known shapes."""
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert layer_of("memory.store") < layer_of("tools.engine.kv") < layer_of("agent.cli.main")
    edges, _ = graph()
    assert "tools.errors" in edges["memory.store"] or "tools.errors" in set().union(*edges.values())
    # a package's __init__ is walked: importing agent.brains.base runs agent/brains/__init__
    assert "agent.brains" in edges["agent.loop"]
    assert packages_above("agent.brains.base", "agent.brains.offline", project_modules()) == set()


def test_the_brains_hold_no_phrase_tables():
    """Understanding words is the model's job: agent/brains compiles at most MAX_BRAIN_PATTERNS regular
    expressions (quoting, command shapes, the grammar's and the classifier's tokens), none of them a word list."""
    compiled = sum(path.read_text(encoding="utf-8").count("re.compile(") for path in (ROOT / "agent" / "brains").glob("*.py"))
    assert compiled <= MAX_BRAIN_PATTERNS, f"agent/brains compiles {compiled} patterns (at most {MAX_BRAIN_PATTERNS})"


MAX_BRAIN_PATTERNS = 15
