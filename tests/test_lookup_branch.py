"""The prompt-lookup branch the tree methods merge into their trees: the search, the length that pays for the
longer pass, the record of what was kept."""

from __future__ import annotations

from tools.engine.draft_tree import build_draft_tree
from tools.engine.lookup_branch import LookupBranch, shared_prefix


def test_the_draft_is_what_followed_the_last_ngram_and_fits_the_room():
    branch = LookupBranch(4, None)
    text = [1, 2, 3, 4, 5, 6, 7, 1, 2, 3]
    assert branch.draft(text, room=10) == (3, [4, 5, 6, 7])
    assert branch.draft(text, room=2) == (3, [4, 5])
    assert branch.draft([1, 2, 3], room=5) == (0, [])
    assert LookupBranch(0, None).draft(text, room=5) == (0, [])


def test_a_branch_is_cut_to_what_pays_for_its_pass():
    """All of a confident match on a flat cost curve; on a steep one the token the tree already holds is free
    and none further pays; without a priced pass the whole draft."""
    flat = LookupBranch(6, [1.0] * 12)
    assert flat.length([5, 9, 9, 9], n=8, shared=1, expect=1.0, size=3, overhead=0.0) == 4
    steep = LookupBranch(6, [1.0 + i for i in range(12)])
    assert steep.length([5, 9, 9, 9], n=1, shared=1, expect=1.0, size=3, overhead=0.0) == 1
    assert steep.length([8] * 6, n=1, shared=0, expect=1.0, size=3, overhead=0.0) == 0
    assert LookupBranch(6, None).length([8] * 6, n=1, shared=0, expect=1.0, size=3, overhead=0.0) == 6


def test_rejected_branches_lower_the_acceptance_that_sizes_the_next():
    branch = LookupBranch(6, [1.0, 1.0, 1.02, 1.04, 1.06, 1.08, 1.1, 1.12])
    before = branch.gate.acceptance(3)
    for _ in range(10):  # a 4-token branch whose first token the step did not keep
        branch.record(3, [5, 6, 7, 8], shared=0, accepted=[9])
    assert branch.gate.acceptance(3) < before / 2 and branch.steps == 10 and branch.looked_up == 0
    branch.record(3, [5, 6, 7, 8], shared=1, accepted=[5, 6, 2])  # kept 2 in a row, the first the tree's too
    assert branch.looked_up == 1


def test_shared_prefix_follows_the_tree_from_its_root():
    tree = build_draft_tree(0, [[5, 6, 7], [5, 8], [9]])
    children, tokens = tree.children.__getitem__, tree.tokens.__getitem__
    assert shared_prefix(children, tokens, [5, 6, 1]) == 2
    assert shared_prefix(children, tokens, [5, 8, 6]) == 2
    assert shared_prefix(children, tokens, [9]) == 1
    assert shared_prefix(children, tokens, [6]) == 0
