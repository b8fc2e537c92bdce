"""The approval id a user types after approving a gated action ("I approved it, the id is apr-4471").

The planner passes it with the gated call; the approval gate then checks that a person gave exactly that
approval for exactly that call, so a typed id grants nothing by itself.
"""

from __future__ import annotations

import re

APPROVED_TOOLS = frozenset({"install_packages", "train_medusa", "share_results"})
ID = r"\s*[`'\"]?([A-Za-z0-9][\w-]{3,40})"
APPROVAL_ID = re.compile(r"\b(?:approval|approve|approved|approving)\b.{0,60}?\b(?:id|code|number|no\.?)\s*"
                         r"(?:is|was|:|=|#)?" + ID + r"|\bapproval(?: id)?\s*[:=#]" + ID, re.IGNORECASE | re.DOTALL)


def find_approval_id(text: str) -> str | None:
    """An approval id the message gives (one with a digit), or None."""
    for match in APPROVAL_ID.finditer(text):
        found = match.group(1) or match.group(2)
        if found and re.search(r"\d", found):
            return found
    return None
