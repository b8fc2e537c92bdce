"""What every brain and the conversation loop share: the :class:`Reply` a brain gives and the
:class:`Brain` interface. No concrete brain is imported here, so the loop can depend on this module
alone (agent.brains.make_brain picks a concrete brain)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Protocol

from tools.agent_tools.registry import ToolResult

# a message that asks to run something ("run draft: ...", "benchmark ...")
RUN_WORDS = re.compile(r"\s*(run|try|benchmark|measure|re-?run)\b", re.IGNORECASE)


@dataclass
class Reply:
    """What a brain answers to one user message.

    ``awaiting`` is set when the brain asked the user a question (a missing parameter): the next
    message continues the same task.
    """

    text: str
    awaiting: str | None = None
    unfinished: str | None = None  # why the request could not be finished (e.g. iteration limit)
    data: list[ToolResult] = field(default_factory=list)  # tool results worth showing as tables


class Brain(Protocol):
    """Decides which tools to call for a user message and what to answer."""

    name: str

    def respond(self, session: Any, text: str) -> Reply:
        """Handle one user message (calling ``session.call_tool``; ``session`` is an agent.loop.Session)
        and return the answer."""
        raise NotImplementedError
