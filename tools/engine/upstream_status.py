"""Whether the upstream reference packages (lade, medusa-llm) could run beside this transformers, told
without importing them (lade patches transformers when imported) and without torch at import time: the
check_deps tool answers from here.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
from pathlib import Path


def lade_status() -> tuple[bool, str]:
    """Say whether the PyPI package ``lade`` (the reference implementation) could run here.

    lade is not imported (importing it patches transformers); its sources are read instead and
    every ``from transformers... import name`` and ``GenerationMixin.<attr>`` it uses is looked up
    in the installed transformers. Returns (ok, reason); reason names the first missing attribute.
    """
    spec = importlib.util.find_spec("lade")
    if spec is None or not spec.submodule_search_locations:
        return False, "lade is not installed (specpilot's own lookahead decoder does not need it)"
    import transformers

    version = transformers.__version__
    missing: list[str] = []
    for folder in spec.submodule_search_locations:
        for path in sorted(Path(folder).rglob("*.py")):
            missing.extend(_missing_transformers_names(path, transformers))
    if missing:
        # the GenerationMixin methods lade patches come first: they are why it cannot work at all
        missing.sort(key=lambda item: "GenerationMixin" not in item[1])
        shown = ", ".join(f"{name} ({where})" for where, name in missing[:3])
        more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        return False, (f"lade cannot run with transformers {version}: it needs {shown}{more}, which this "
                       f"transformers no longer has; lade targets transformers 4.36 (GenerationMixin "
                       f"internals were removed in 4.41). Use specpilot's lookahead method instead.")
    return True, f"lade's transformers imports all resolve with transformers {version}"


def _missing_transformers_names(path: Path, transformers) -> list[tuple[str, str]]:
    """(file, 'module.name') for each transformers name ``path`` imports or patches that does not exist."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
    except SyntaxError:
        return []
    found: list[tuple[str, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "transformers":
            try:
                module = importlib.import_module(node.module)
            except Exception:  # a removed module
                found.append((path.name, node.module))
                continue
            for alias in node.names:
                if alias.name != "*" and not hasattr(module, alias.name):
                    found.append((path.name, f"{node.module}.{alias.name}"))
        elif (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
              and node.value.id == "GenerationMixin" and isinstance(node.ctx, ast.Load)):
            if not hasattr(transformers.GenerationMixin, node.attr):
                found.append((path.name, f"transformers.GenerationMixin.{node.attr}"))
    return found


def upstream_backend_status() -> tuple[bool, str]:
    """Whether the PyPI package ``medusa-llm`` can run here, and why not when it cannot."""
    from importlib import metadata

    import transformers

    try:
        version = metadata.version("medusa-llm")
    except metadata.PackageNotFoundError:
        return False, "the PyPI package medusa-llm is not installed"
    if importlib.util.find_spec("medusa") is None:
        return False, f"medusa-llm {version} is installed but its `medusa` module is missing"
    tf = transformers.__version__
    try:
        importlib.import_module("medusa.model.medusa_model")
    except Exception as exc:  # any import failure is the answer we report
        return False, f"medusa-llm {version} cannot be imported with transformers {tf}: {type(exc).__name__}: {exc}"
    if int(tf.split(".")[0]) >= 5:
        return False, (f"medusa-llm {version} vendors a Llama/Mistral model written for transformers 4.x (its own "
                       f"KV cache and a tree mask set as a model attribute); it does not run with transformers {tf}")
    return True, f"medusa-llm {version} imports with transformers {tf}"
