"""A prompt-lookup branch for the tree methods (EAGLE, Medusa): what followed the text's last 3, 2 or 1
tokens earlier in the prompt or output (prompt lookup's search, tools.engine.prompt_lookup) merged into a
step's draft tree as one more branch.

A head guesses from the target's features; where the answer repeats earlier text (a summary, extracted
fields, a retrieved passage, code reusing its own names) the earlier text is the better guess, and the
two fail in different places. The branch is a deterministic draft like the tree's others, so greedy
output stays the target's and EAGLE's sampling stays lossless.

With a priced pass (``pass_costs``) the branch is cut to the length with the most expected tokens per unit
of the step's cost: the tree's own expected tokens plus a^j for the branch's j-th token (a: this run's
per-token acceptance of branches after n-token matches, from prompt lookup's prior fitted on the fit half;
tools.engine.prompt_lookup.DraftGate keeps it), against the pass over the tree and the branch's new nodes
(tokens the tree already holds cost nothing) and the step's other work.
"""

from __future__ import annotations

import torch

from tools.engine.gate import pass_cost
from tools.engine.params import PromptLookupParams
from tools.engine.prompt_lookup import DraftGate, match_candidates


class LookupBranch:
    """One run's lookup branches: the search, the acceptance record by match length, and counters
    (``steps``: trees a branch joined; ``looked_up``: kept tokens only a branch proposed)."""

    def __init__(self, tokens: int, pass_costs: list[float] | None):
        self.tokens = tokens
        self.params = PromptLookupParams(num_candidate_tokens=max(1, tokens), num_candidates=1, pass_costs=pass_costs)
        self.gate = DraftGate(self.params)
        self.steps = self.looked_up = 0
        self._buffer, self._filled = torch.empty(0, dtype=torch.long), 0  # the text searched, as a tensor

    def draft(self, text: list[int], room: int) -> tuple[int, list[int]]:
        """(match length n, the draft) for the text so far, at most ``room`` tokens; (0, []) without one. The text
        only grows between calls (accepted tokens never change): only its new tokens are copied."""
        room = min(room, self.tokens)
        if room < 1:
            return 0, []
        n, drafts = match_candidates(self._searched(text), self.params, limit=room)
        return (n, drafts[0]) if drafts else (0, [])

    def _searched(self, text: list[int]) -> torch.Tensor:
        size = len(text)
        if size < self._filled:  # another text than last time: copy it whole
            self._filled = 0
        if size > self._buffer.numel():
            grown = torch.empty(max(2 * self._buffer.numel(), size + 256), dtype=torch.long)
            grown[: self._filled] = self._buffer[: self._filled]
            self._buffer = grown
        if size > self._filled:
            self._buffer[self._filled: size] = torch.tensor(text[self._filled:], dtype=torch.long)
        self._filled = size
        return self._buffer[:size]

    def length(self, draft: list[int], n: int, shared: int, expect: float, size: int, overhead: float) -> int:
        """How many of ``draft``'s tokens to verify: all without pass costs, else the length with the most expected
        tokens per unit of cost. ``shared``: its leading tokens the tree already holds; ``expect``: the tokens the
        tree alone is expected to give (the target's own included); ``size``: the tree's tokens, root included;
        ``overhead``: the step's other work in one-token passes."""
        costs = self.params.pass_costs
        if not costs:
            return len(draft)
        a = self.gate.acceptance(n)
        best, best_rate = shared, expect / (pass_cost(costs, size) + overhead)
        for length in range(shared + 1, len(draft) + 1):
            expect += a ** length
            rate = expect / (pass_cost(costs, size + length - shared) + overhead)
            if rate > best_rate + 1e-12:
                best, best_rate = length, rate
        return best

    def record(self, n: int, draft: list[int], shared: int, accepted: list[int]) -> None:
        """A verified branch (``draft``: the tokens verified, the first ``shared`` of them the tree's own too) and the
        draft tokens the step accepted: the branch's tokens kept in a row count for n-token matches; those past the
        shared ones were the branch's alone."""
        kept = next((j for j, (x, y) in enumerate(zip(draft, accepted)) if x != y), min(len(draft), len(accepted)))
        self.gate.update(n, len(draft), kept)
        self.steps += 1
        self.looked_up += max(0, kept - shared)


def held_path(children_of, tokens_of, draft: list[int]) -> list[int]:
    """The nodes below the root that hold ``draft``'s leading tokens, as far as a tree holds them (``children_of(node)``
    lists a node's children, ``tokens_of(node)`` its token)."""
    node, path = 0, []
    for token in draft:
        node = next((c for c in children_of(node) if tokens_of(c) == token), None)
        if node is None:
            break
        path.append(node)
    return path


def shared_prefix(children_of, tokens_of, draft: list[int]) -> int:
    """How many of ``draft``'s leading tokens a tree already holds as a path from its root."""
    return len(held_path(children_of, tokens_of, draft))


def path_children(retrieve: torch.Tensor, size: int) -> list[list[int]]:
    """Each node's children in a tree of ``size`` nodes given as its root-to-leaf paths (``retrieve`` [paths, D + 1],
    node indices padded with -1, as Medusa's tree buffers hold them)."""
    children: list[list[int]] = [[] for _ in range(size)]
    for path in retrieve.tolist():
        for parent, child in zip(path, path[1:]):
            if child >= 0 and child not in children[parent]:
                children[parent].append(child)
    return children


def graft_paths(visible: torch.Tensor, positions: list[int], retrieve: torch.Tensor, tokens: list[int],
                children: list[list[int]], draft: list[int], device
                ) -> tuple[torch.Tensor, torch.Tensor | list[int], torch.Tensor, list[int]]:
    """A tree held on the host as (``visible`` [n, n], ``positions`` its n depths, ``retrieve`` [paths, D + 1],
    ``tokens``) with ``draft`` merged below the root: its leading tokens the tree holds are followed, the rest
    appended as new nodes on one more path. Returns the new (visible, positions, retrieve) on ``device`` and the
    appended tokens; the tree as given (on the host) and no tokens when it holds all of ``draft``."""
    path = [0] + held_path(children.__getitem__, tokens.__getitem__, draft)
    new = draft[len(path) - 1:]
    if not new:
        return visible, positions, retrieve, []
    n, m = len(tokens), len(tokens) + len(new)
    grown = torch.zeros(m, m, dtype=torch.bool)
    grown[:n, :n] = visible
    depth = list(positions)
    for i in range(n, m):
        grown[i] = grown[path[-1]]
        grown[i, i] = True
        depth.append(depth[path[-1]] + 1)
        path.append(i)
    width = max(retrieve.shape[1], len(path))
    paths = torch.full((retrieve.shape[0] + 1, width), -1, dtype=torch.long)
    paths[:-1, : retrieve.shape[1]] = retrieve
    paths[-1, : len(path)] = torch.tensor(path)
    return grown.to(device), torch.tensor(depth, device=device), paths.to(device), new
