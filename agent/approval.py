"""Approval gates, enforced in code: installing, training, sharing and deploying run only after a
person said yes.

Every tool call from any brain or host goes through :class:`Gate`. For a gated tool the gate
records a pending approval holding the exact call, then:

- in the terminal (``confirm`` given) it shows exactly what will run and asks y/n; yes approves
  and runs it once, no denies it and the brain gets a tool error;
- in host mode (JSON CLI, MCP without elicitation) it returns ``approval_required`` with the
  pending id; the person approves it at their own terminal (``specpilot tool approve --id X``,
  which insists on an interactive terminal), and a later call carrying that ``approval_id`` runs
  it once (``Store.consume_approval``).

Nothing the brain can send approves anything: there is no approve tool, an approval id only
works once a person decided it, and text in prompts, files, tool results or model output is
never read as a decision.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from dataclasses import replace
from typing import Any, TextIO

from tools.agent_tools import registry
from tools.errors import ApprovalError, SpecpilotError
from tools.agent_tools.registry import APPROVAL_FIELD, Tool, ToolContext, ToolResult

log = logging.getLogger(__name__)

DEPLOY_ACTION = "deploy"
Confirm = Callable[[str], bool]  # shown exactly what will run; returns the person's yes/no


class ApprovalDenied(SpecpilotError):
    """The person said no: the gated action did not run."""


def approval_prompt(action: str, what: str, approval_id: str) -> str:
    """The text shown to the person before a gated action: what will run, and the question."""
    return (f"specpilot asks for approval to {action} (approval {approval_id}).\n"
            f"This will run exactly:\n  {what}\n")


class Gate:
    """Runs tool calls, holding gated ones until a person approves them.

    ``confirm`` asks the person at the terminal (y/n); ``None`` means host mode, where a gated
    call returns ``approval_required``. ``who`` is recorded as the decider of terminal approvals.
    """

    def __init__(self, store: Any, confirm: Confirm | None = None, who: str = "terminal user"):
        self.store = store
        self.confirm = confirm
        self.who = who

    def call(self, name: str, raw_input: dict | str | None, ctx: ToolContext) -> ToolResult:
        """Validate and run the tool ``name``; gated tools only with a person's approval. Never raises."""
        try:
            tool_ = registry.get_tool(name)
            inp = registry.parse_input(tool_, raw_input)
        except SpecpilotError as exc:
            return ToolResult.error(name, exc.user_message())
        if tool_.gate is None:
            return registry.execute(tool_, inp, replace(ctx, approval=None))
        try:
            approval_id = getattr(inp, APPROVAL_FIELD)
            if approval_id:
                return self.run_approved(tool_, inp, approval_id, ctx)
            pending = self.request(tool_, inp)
            if self.confirm is None:
                return approval_required(pending)
            approved = bool(self.confirm(approval_prompt(tool_.gate, pending["reason"], pending["id"])))
            self.store.decide_approval(pending["id"], approved, by=self.who)
            if not approved:
                raise ApprovalDenied(f"the user denied approval {pending['id']} to {tool_.gate}: "
                                     f"{pending['reason']}; nothing was run",
                                     hint="do not retry it unless the user asks for it again")
            return self.run_approved(tool_, inp, pending["id"], ctx)
        except SpecpilotError as exc:
            return ToolResult.error(name, exc.user_message())

    def request(self, tool_: Tool, inp: Any) -> dict:
        """Record a pending approval for this exact call; return the approval row."""
        what = tool_.describe(inp)
        approval_id = self.store.create_approval(tool_.gate, registry.approval_arguments(tool_, inp), reason=what)
        return self.store.get_approval(approval_id)

    def run_approved(self, tool_: Tool, inp: Any, approval_id: str, ctx: ToolContext) -> ToolResult:
        """Consume the approval (once) and run the call it covers; refuse other arguments."""
        current = self.store.get_approval(approval_id)
        if current["action"] == tool_.gate and current["arguments"] != registry.approval_arguments(tool_, inp):
            raise ApprovalError(f"approval {approval_id} covers {current['arguments']}, not this call",
                                hint="call the tool again with exactly the approved input, or ask for a new approval")
        consumed = self.store.consume_approval(approval_id, action=tool_.gate)
        log.info("running %s under approval %s", tool_.name, approval_id)
        return registry.execute(tool_, inp, replace(ctx, approval=consumed))


def approval_required(pending: dict) -> ToolResult:
    """The host-mode answer to a gated call: what would run, the pending id, and how a person approves."""
    approval_id = pending["id"]
    return ToolResult(name=pending["arguments"]["tool"], content={
        "status": "approval_required",
        "approval_id": approval_id,
        "action": pending["action"],
        "will_run": pending["reason"],
        "arguments": pending["arguments"],
        "how_to_approve": (f"ask the user to run `specpilot tool approve --id {approval_id}` in their own terminal "
                           f"(or `specpilot tool deny --id {approval_id}`); once approved, call "
                           f"{pending['arguments']['tool']} again with the same input plus "
                           f"\"approval_id\": \"{approval_id}\". It runs once."),
    })


# ---- deploy / serve requests: not a tool, but still gated ------------------------------------

def request_deploy_planning(store: Any, request: str, confirm: Confirm | None, who: str = "terminal user") -> dict:
    """Gate a deploy/serve/production request before any planning.

    An earlier approval of the same request that a person gave at their terminal is used (once).
    Otherwise a pending ``deploy`` approval is recorded; with ``confirm`` the person is asked at
    once and the decision is recorded; without it (host mode) it stays pending. Returns the row.
    """
    for earlier in store.list_approvals(status="approved"):
        if earlier["action"] == DEPLOY_ACTION and earlier["arguments"].get("request") == request:
            return store.consume_approval(earlier["id"], action=DEPLOY_ACTION)  # approved at the terminal before
    what = f"plan a deployment for: {request.strip()[:300]} (specpilot itself only benchmarks locally)"
    approval_id = store.create_approval(DEPLOY_ACTION, {"request": request}, reason=what)
    if confirm is not None:
        approved = bool(confirm(approval_prompt("plan a deployment", what, approval_id)))
        store.decide_approval(approval_id, approved, by=who)
    return store.get_approval(approval_id)


# ---- a person's decision at their own terminal ------------------------------------------------

def decide_at_terminal(store: Any, approval_id: str, approve: bool, stdin: TextIO | None = None,
                       stdout: TextIO | None = None) -> dict:
    """Approve or deny ``approval_id`` after showing it to the person at an interactive terminal.

    Refuses (ApprovalError) when stdin is not a terminal, so an agent host running commands
    without a terminal cannot approve its own requests. Approving needs the typed word ``yes``.
    Returns the decided approval row.
    """
    stdin = stdin or sys.stdin
    stdout = stdout or sys.stderr
    if not stdin.isatty():
        raise ApprovalError("approving needs a person at an interactive terminal; this command's input is not one",
                            hint=f"run `specpilot tool approve --id {approval_id}` yourself in a terminal")
    pending = store.get_approval(approval_id)
    if pending["status"] != "pending":
        raise ApprovalError(f"approval {approval_id} is {pending['status']}, not pending; nothing to decide",
                            hint="ask for the action again to get a new approval id")
    stdout.write(approval_prompt(pending["action"], pending["reason"], approval_id))
    if approve:
        stdout.write("Type yes to approve it (anything else cancels): ")
        stdout.flush()
        answer = stdin.readline().strip().lower()
        if answer != "yes":
            raise ApprovalError(f"approval {approval_id} was not given (answer {answer!r}); it is still pending")
    return store.decide_approval(approval_id, approve, by="terminal user (specpilot tool approve)"
                                 if approve else "terminal user (specpilot tool deny)")
