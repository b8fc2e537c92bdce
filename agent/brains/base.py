"""What every brain and the conversation loop share: the :class:`Reply` a brain gives and the
:class:`Brain` interface. No concrete brain is imported here, so the loop can depend on this module
alone (agent.brains.make_brain picks a concrete brain)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Protocol

from tools.agent_tools.registry import ToolResult

# quoted text; single quotes hold 3+ characters, and an apostrophe is no quote ("i'm sure it couldn't" quotes
# nothing; 'don't stop' is quoted whole)
QUOTED = re.compile(r"```[^\n`]*\n([\s\S]+?)\n?```|"  # a fenced code block: its lines, without the fences
                    r"\"([^\"]+)\"|“([^”]+)”|«\s*([^»]+?)\s*»|(?<!\w)'((?:[^']|'(?=\w)){3,}?)'(?!\w)|"
                    r"(?<!`)`([^`\n]+)`(?!`)")
# the slash commands of the chat and the command brain; any other text starting with "/" (a path such as
# /tmp/report.md) is an ordinary message, e.g. the answer to a pending question
SLASH_COMMANDS = frozenset({
    "help", "params", "memory", "saved", "tasks", "runs", "lookup", "run", "compare", "deps", "dependencies",
    "guide", "guidance", "suggest", "explain", "install", "train", "report", "share", "save", "measure",
    "details", "quit", "exit", "q"})
COMMAND_SHAPE = re.compile(r"/([A-Za-z][\w-]*)(?=\s|$)")


def command_name(text: str) -> str | None:
    """The command a message starts with ("/run draft ..." -> "run"), or None when it is not shaped
    like a command (plain words, or a path such as /tmp/report.md)."""
    match = COMMAND_SHAPE.match(text.strip())
    return match.group(1).lower() if match else None


def is_known_command(text: str) -> bool:
    """Whether a message is one of the known slash commands."""
    return command_name(text) in SLASH_COMMANDS


@dataclass
class Reply:
    """What a brain answers to one user message.

    ``awaiting`` is set when the brain asked the user a question (a missing parameter): the next
    message continues the same task.
    """

    text: str
    awaiting: str | None = None
    unfinished: str | None = None  # why the request could not be finished (e.g. iteration limit)
    not_done: str | None = None  # why the request could not be served at all (out of scope, not understood)
    # why the reply, though tools answered, is not the answer to what was asked (e.g. advice for another method
    # than the one named): the task is recorded as not done with this reason, not as done
    off_request: str | None = None
    streamed: bool = False  # the text was already shown as it arrived (the chat does not print it again)
    data: list[ToolResult] = field(default_factory=list)  # tool results worth showing as tables
    details: bool = False  # the detail form of the last answer (/details): the chat shows its tables too
    waiting_call: Any = None  # (call, argument) the question is about, where another brain completes it
    # the brain read the request as one to deploy, serve or integrate into production (outside specpilot): the
    # loop asks for approval before any planning (agent.approval.request_deploy_planning)
    deploy: bool = False


class ToolSession(Protocol):
    """What a brain uses of the conversation loop's session (agent.loop.Session implements it); brains
    depend on this, not on the loop, and the loop is given its brain."""

    store: Any
    task_id: int | None
    last_prompt: str | None
    last_results: list[ToolResult]  # the tool results of the newest turn that had any (what /details shows)

    def call_tool(self, name: str, tool_input: dict | str | None) -> ToolResult:
        """Run a tool through the approval gate and record it."""
        raise NotImplementedError

    def memory(self) -> dict:
        """Saved parameters, default method, unfinished tasks and newest runs."""
        raise NotImplementedError

    def deployment_approval(self, request: str) -> dict:
        """The approval to plan a deployment for ``request`` (asked for at the terminal where there is one)."""
        raise NotImplementedError


class Brain(Protocol):
    """Decides which tools to call for a user message and what to answer."""

    name: str

    def respond(self, session: Any, text: str) -> Reply:
        """Handle one user message (calling ``session.call_tool``; ``session`` is an agent.loop.Session)
        and return the answer."""
        raise NotImplementedError
