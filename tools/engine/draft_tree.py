"""Token trees of deterministic drafts (prompt lookup continuations, lookahead's pool n-grams),
verified in one forward pass: node 0 is the current token, every other node one draft token, drafts
with a shared prefix share nodes. Greedy and lossless-sampling acceptance over such a tree.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from tools.engine.sampling import sample


@dataclass
class DraftTree:
    """Drafts merged by shared prefix. Node 0 is the current token (the root); node i > 0 holds
    ``tokens[i]`` at depth ``depths[i]`` below ``parents[i]``; ``children[i]`` in draft order."""

    tokens: list[int]
    parents: list[int]
    depths: list[int]
    children: list[list[int]]

    @property
    def size(self) -> int:
        return len(self.tokens)

    @property
    def is_chain(self) -> bool:
        return all(len(c) <= 1 for c in self.children)

    def add_child(self, parent: int, token: int) -> int:
        """Add a node holding ``token`` as ``parent``'s last child (in place); return its index."""
        node = self.size
        self.tokens.append(token)
        self.parents.append(parent)
        self.depths.append(self.depths[parent] + 1)
        self.children.append([])
        self.children[parent].append(node)
        return node

    def visible(self) -> torch.Tensor:
        """bool [size, size]: node i sees node j when j is i or one of its ancestors."""
        vis = torch.eye(self.size, dtype=torch.bool)
        for i in range(1, self.size):
            vis[i] |= vis[self.parents[i]]
        return vis

    def path_to(self, node: int) -> list[int]:
        """Node indices from the root to ``node``, both included."""
        path = [node]
        while path[-1] != 0:
            path.append(self.parents[path[-1]])
        return path[::-1]


def build_draft_tree(root: int, drafts: list[list[int]]) -> DraftTree:
    """Merge ``drafts`` (token lists) under ``root`` into a DraftTree (pure)."""
    tree = DraftTree([root], [-1], [0], [[]])
    for draft in drafts:
        add_draft(tree, draft)
    return tree


def add_draft(tree: DraftTree, draft: list[int]) -> list[int]:
    """Merge one draft into ``tree`` below the root (in place): follow the children that hold its tokens, add
    nodes (each its parent's last child) for the rest. Returns the draft's node indices, in order."""
    node, nodes = 0, []
    for token in draft:
        child = next((c for c in tree.children[node] if tree.tokens[c] == token), None)
        node = child if child is not None else tree.add_child(node, token)
        nodes.append(node)
    return nodes


def accept_greedy_tree(tree: DraftTree, choice: list[int]) -> tuple[int, int]:
    """Greedy verification: return (deepest accepted node, next token). ``choice[i]`` is the
    target's argmax after node i; a node is accepted when its token equals its parent's choice and
    its parent is accepted."""
    node = 0
    while True:
        nxt = next((c for c in tree.children[node] if tree.tokens[c] == choice[node]), None)
        if nxt is None:
            return node, choice[node]
        node = nxt


def accept_sampling_tree(tree: DraftTree, p_at: Callable[[int], torch.Tensor], generator) -> tuple[int, int]:
    """Lossless verification of deterministic drafts: return (deepest kept node, next token).

    ``p_at(i)`` returns the target's probabilities [vocab] after node i (called along the kept
    path only). At each node the children's tokens are tried in order, each kept with probability
    p(x); a rejected x is zeroed out of p and p renormalised; when all are rejected the next token
    is sampled from what is left of p.
    """
    node = 0
    while True:
        dist = p_at(node)
        kept = None
        for child in tree.children[node]:
            x = tree.tokens[child]
            px = float(dist[x])
            if px <= 0.0:
                continue
            if float(torch.rand(1, generator=generator, device=generator.device)) < px:
                kept = child
                break
            dist = dist.clone()
            dist[x] = 0.0
            dist = dist / dist.sum()
        if kept is None:
            return node, int(sample(dist, generator))
        node = kept


def chain_reach(chain: list[int], slots: list[list[tuple[int, float]]]) -> list[float]:
    """The draft's own odds that ``chain`` is kept through each of its tokens (pure): running products of the chain
    tokens' probabilities in their ``slots`` (0 for a token its slot does not list)."""
    reach, out = 1.0, []
    for token, slot in zip(chain, slots):
        reach *= next((p for t, p in slot if t == token), 0.0)
        out.append(reach)
    return out


def chain_with_leaves(root: int, chain: list[int], slots: list[list[tuple[int, float]]], leaves: int,
                      cost: Callable[[int], float] | None = None, calibration: float = 1.0,
                      reach: list[float] | None = None) -> tuple[DraftTree, float]:
    """A draft model's chain plus up to ``leaves`` of its other likely tokens as one-token branches (pure).

    ``slots[i]`` holds the draft's most probable tokens with their probabilities where it drafted ``chain[i]`` (a
    slot past the chain: where a confidence cut stopped it). A candidate leaf at slot i is reached when the chain
    is kept up to i, which the draft's own probabilities put at the product of the chain's token probabilities
    before i; its score is that times its own probability (SpecInfer's token tree, arXiv 2305.09781, with the
    draft's top tokens in place of sampled ones). Leaves are taken by score. With ``cost`` (a target pass over n
    tokens, plus what the draft spent, relative to a plain step) they are taken while the expected tokens per unit
    of cost grow (each leaf's score counted ``calibration`` times: what this run's leaves got accepted against
    what their scores predicted); without, the ``leaves`` best. Returns (the tree, the leaves' summed scores)."""
    scores = reach if reach is not None else chain_reach(chain, slots)  # the caller's, when it has them
    candidates = []
    for i, slot in enumerate(slots[: len(chain) + 1]):
        own = chain[i] if i < len(chain) else None
        odds = scores[i - 1] if i else 1.0
        candidates += [(odds * p, i, tok) for tok, p in slot if tok != own]
    candidates.sort(key=lambda c: (-c[0], c[1]))
    candidates = candidates[:leaves]
    if cost is not None and candidates:
        nodes = 1 + len(chain)
        expect, best = 1.0 + sum(scores), 0
        best_rate = expect / cost(nodes)
        for n, (score, _, _) in enumerate(candidates, 1):
            expect += calibration * score
            rate = expect / cost(nodes + n)
            if rate > best_rate + 1e-12:
                best, best_rate = n, rate
        candidates = candidates[:best]
    tree = build_draft_tree(root, [chain] + [chain[:i] + [tok] for _, i, tok in candidates])
    return tree, sum(c[0] for c in candidates)
