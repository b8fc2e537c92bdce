"""Named Medusa trees (lists of choices) and loading a user's own tree from a JSON file.

A tree is a list of *choices*: each choice is a path of top-k ranks, one rank per depth. ``[0, 1]``
is the node at depth 2 holding head 0's top-1 token followed by head 1's second-best token. Every
prefix of a choice must be a choice too (the tree is prefix-closed). The root (the token the target
itself chose) is implicit and not listed, so a tree of N choices is verified as N + 1 tokens.

On a CPU, verifying up to ~8 tokens costs about as much as one token and 16 tokens about 1.3x
(DESIGN.md, "CPU physics"), so the CPU trees stay small; ``mc_sim_7b_63`` is upstream's 64-token
tree for GPUs (FasterDecoding/Medusa, medusa/model/medusa_choices.py).
"""

from __future__ import annotations

import json
from pathlib import Path

from tools.errors import ParameterError

# Upstream's default sparse tree for Vicuna-7B on an A100 (63 choices, depth 4).
MC_SIM_7B_63: list[list[int]] = [
    [0], [0, 0], [1], [0, 1], [2], [0, 0, 0], [1, 0], [0, 2], [3], [0, 3], [4], [0, 4], [2, 0], [0, 5],
    [0, 0, 1], [5], [0, 6], [6], [0, 7], [0, 1, 0], [1, 1], [7], [0, 8], [0, 0, 2], [3, 0], [0, 9], [8],
    [9], [1, 0, 0], [0, 2, 0], [1, 2], [0, 0, 3], [4, 0], [2, 1], [0, 0, 4], [0, 0, 5], [0, 0, 0, 0],
    [0, 1, 1], [0, 0, 6], [0, 3, 0], [5, 0], [1, 3], [0, 0, 7], [0, 0, 8], [0, 0, 9], [6, 0], [0, 4, 0],
    [1, 4], [7, 0], [0, 1, 2], [2, 0, 0], [3, 1], [2, 2], [8, 0], [0, 5, 0], [1, 5], [1, 0, 1], [0, 2, 1],
    [9, 0], [0, 6, 0], [0, 0, 0, 1], [1, 6], [0, 7, 0],
]

# upstream orders its choices by how often they were accepted, so every prefix of the list is a
# prefix-closed tree made of the most useful nodes: the CPU trees are such prefixes.
TREES: dict[str, list[list[int]]] = {
    "chain3": [[0], [0, 0], [0, 0, 0]],  # 4 tokens: top-1 of three heads
    "chain4": [[0], [0, 0], [0, 0, 0], [0, 0, 0, 0]],  # 5 tokens: top-1 of four heads
    "cpu8": MC_SIM_7B_63[:7],  # 8 tokens, depth 3
    "cpu16": MC_SIM_7B_63[:15],  # 16 tokens, depth 3
    "mc_sim_7b_63": MC_SIM_7B_63,  # 64 tokens, depth 4 (upstream's GPU default)
}

DEFAULT_TREE_CPU = "cpu8"
DEFAULT_TREE_GPU = "mc_sim_7b_63"
AUTO = "auto"  # the heads' fitted tree or cpu8 on a CPU, mc_sim_7b_63 on a GPU, cut to the number of heads


def validate_choices(choices) -> list[list[int]]:
    """Return ``choices`` as a list of int lists, or raise ParameterError saying what is wrong.

    Rules: each choice is a non-empty list of non-negative integers, no choice repeats, and every
    prefix of a choice is itself a choice.
    """
    if not isinstance(choices, (list, tuple)):
        raise ParameterError("a Medusa tree must be a list of choices such as [[0], [0, 0], [1]]")
    out: list[list[int]] = []
    for c in choices:
        if not isinstance(c, (list, tuple)) or not c:
            raise ParameterError(f"tree choice {c!r} is not a non-empty list of top-k ranks")
        if any(not isinstance(r, int) or isinstance(r, bool) or r < 0 for r in c):
            raise ParameterError(f"tree choice {c!r} must hold non-negative integers (top-k ranks)")
        out.append([int(r) for r in c])
    seen = {tuple(c) for c in out}
    if len(seen) != len(out):
        raise ParameterError("a Medusa tree lists the same choice twice", hint="remove the duplicate choices")
    for c in out:
        for d in range(1, len(c)):
            if tuple(c[:d]) not in seen:
                raise ParameterError(
                    f"tree choice {c} needs its parent {c[:d]} in the tree",
                    hint="every prefix of a choice must be listed as well",
                )
    return out


def load_choices(path: str | Path) -> list[list[int]]:
    """Read a tree from a JSON file: a list of choices, or an object with a ``"choices"`` list."""
    p = Path(path).expanduser()
    try:
        data = json.loads(p.read_text())
    except FileNotFoundError:
        raise ParameterError(f"tree file {p} does not exist", hint=f"use a file or a named tree: {', '.join(TREES)}")
    except (OSError, json.JSONDecodeError) as exc:
        raise ParameterError(f"tree file {p} is not valid JSON: {exc}", hint="write a list like [[0], [0, 0], [1]]")
    if isinstance(data, dict):
        data = data.get("choices")
    return validate_choices(data)


def tree_depth(choices: list[list[int]]) -> int:
    """Depth of a tree (its longest choice; 0 for an empty tree)."""
    return max((len(c) for c in choices), default=0)


def cut_to_depth(choices: list[list[int]], depth: int) -> list[list[int]]:
    """The choices no deeper than ``depth`` (still prefix-closed)."""
    return [c for c in choices if len(c) <= depth]


def resolve_tree(tree: str | list, num_heads: int, device: str = "cpu",
                 heads_tree: list[list[int]] | None = None) -> tuple[str, list[list[int]]]:
    """Return (name, choices) for a tree name, ``"auto"``, a JSON file path, or a list of choices.

    ``"auto"`` takes ``heads_tree`` (a tree fitted to the heads, stored with them) on a CPU when
    there is one, else the CPU or GPU default for ``device``, cut to ``num_heads`` levels; a named,
    listed or file tree deeper than ``num_heads`` is an error.
    """
    if isinstance(tree, (list, tuple)):
        name, choices = "custom", validate_choices(tree)
    elif tree == AUTO and heads_tree and not str(device).startswith("cuda"):
        choices = cut_to_depth(validate_choices(heads_tree), num_heads)
        name = f"fitted to the heads ({len(choices)} nodes)"
    elif tree == AUTO:
        name = DEFAULT_TREE_GPU if str(device).startswith("cuda") else DEFAULT_TREE_CPU
        choices = cut_to_depth(TREES[name], num_heads)
        if len(choices) < len(TREES[name]):
            name = f"{name}[depth<={num_heads}]"
    elif tree in TREES:
        name, choices = tree, [list(c) for c in TREES[tree]]
    elif str(tree).endswith(".json") or Path(str(tree)).expanduser().is_file():
        name, choices = str(tree), load_choices(tree)
    else:
        raise ParameterError(
            f"unknown Medusa tree {tree!r}",
            hint=f"use one of {', '.join([AUTO, *TREES])} or a JSON file with a list of choices",
        )
    if not choices:
        raise ParameterError(f"tree {name} has no choices", hint="give at least one choice, e.g. [[0]]")
    depth = tree_depth(choices)
    if depth > num_heads:
        raise ParameterError(
            f"tree {name} is {depth} levels deep but the Medusa heads have only {num_heads} heads",
            hint=f"pick a tree at most {num_heads} deep (e.g. chain3 or cpu8), or heads with more heads",
        )
    return name, choices
