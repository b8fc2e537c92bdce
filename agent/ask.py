"""``specpilot ask TEXT``: one turn with the agent, non-interactive, for scripts and evaluation.

The message goes through the same :class:`agent.loop.Session` as the chat (memory first, the task
recorded with what was and was not done), with no terminal: a gated tool comes back as an approval
request, never runs. Onboarding is never started. With ``plan_only`` only read-only tools run
(``Tool.read_only``: recall, lookup_runs, explain, check_deps); a tool that would load a
model, write files or memory, or needs approval is validated and listed with ``executed: false``.

``--json`` prints exactly one object on stdout::

    {"reply": str,
     "tool_calls": [{"name": str, "input": {...}, "executed": bool, "status": str}],
     "task": {"id": int | None, "status": "done" | "unfinished" | "failed" | None, "reason": str | None}}

``status`` of a call: ``ok``, ``error``, ``approval_required`` (executed), ``planned`` (plan only, not
executed) or ``invalid`` (plan only, the input does not validate). The task's status is the one
recorded in memory: ``done`` (a plan-only ask whose calls were planned is done too: a dry run is no unfinished
work; its reason then says "planned only, not executed: TOOLS"); ``unfinished`` (waiting for an answer or an
approval); ``failed`` (not done: could not be served, with the reason).
"""

from __future__ import annotations

import contextlib
import json
import sys
from typing import Any

from agent.brains import make_brain
from agent.brains.base import Reply
from agent.loop import Session
from agent.replies import PLANNED_ONLY  # how a plan-only task's planned calls are recorded (status done)
from memory import Store
from tools.agent_tools.registry import ToolResult, get_tool, parse_input
from tools.errors import SpecpilotError

PLANNED = "planned"
# why a tool that is not read-only does not run in plan-only mode (the default: the general reason)
NOT_READ_ONLY = {"run_method": "loads the model and measures", "compare_methods": "loads the models and measures",
                 "measure_cost_curve": "loads the model and measures", "save_params": "writes memory",
                 "write_report": "writes a file"}


class AskSession(Session):
    """A session for one non-interactive turn: no terminal, every tool call listed in ``calls``, and
    with ``plan_only`` only read-only tools executed."""

    def __init__(self, store: Any, brain: Any, plan_only: bool = False):
        super().__init__(store, brain, confirm=None)
        self.plan_only = plan_only
        self.calls: list[dict] = []
        self.closed_task_id: int | None = None
        self.planned_only: str | None = None  # "planned only, not executed: TOOLS" when a dry run closed its task

    def call_tool(self, name: str, tool_input: dict | str | None) -> ToolResult:
        """Run the tool (plan only: only a read-only one) and list the call."""
        if self.plan_only and not runs_in_plan(name):
            result = self._plan(name, tool_input)
            executed = False
        else:
            result = super().call_tool(name, tool_input)
            executed = True
        self.calls.append({"name": name, "input": tool_input if isinstance(tool_input, dict) else tool_input or {},
                           "executed": executed, "status": call_status(result, executed)})
        return result

    def _plan(self, name: str, tool_input: dict | str | None) -> ToolResult:
        """Validate a call that plan-only mode does not run; record it in the task as planned."""
        tool_ = get_tool(name)
        try:
            parse_input(tool_, tool_input)
        except SpecpilotError as exc:
            result = ToolResult.error(name, exc.user_message(), plan_only=True)
        else:
            why = (f"needs the user's approval ({tool_.gate})" if tool_.gate else
                   NOT_READ_ONLY.get(name, "loads a model or writes files or memory"))
            result = ToolResult(name=name, content={"status": "not_executed", "plan_only": True, "tool": name,
                                                    "input": tool_input, "reason": f"plan only: {name} {why}"})
        self.turn_results.append(result)
        if self.task_id is not None:
            task_id = self.task_id
            self.remember(lambda: self.store.update_task(task_id, note=f"{name}: planned, not executed (plan only)"))
        return result

    def _close_task(self, reply: Reply) -> None:
        """Close the task as the loop does; a dry run's planned calls are recorded as done, "planned only, not
        executed" (a dry run is no unfinished work: it stays out of the greeting, /tasks' unfinished list and
        `runs list`)."""
        planned = [c["name"] for c in self.calls if not c["executed"] and c["status"] == PLANNED]
        task_id = self.closed_task_id = self.task_id
        super()._close_task(reply)
        if not planned or task_id is None or self.task_id is not None:  # no plan, no task, or a question waits
            return
        task = self.remember(lambda: self.store.get_task(task_id))
        if task is None or task["status"] != "done":  # not served, or waiting for an approval: recorded as such
            return
        self.planned_only = f"{PLANNED_ONLY}: {', '.join(dict.fromkeys(planned))}"
        self.remember(lambda: self.store.update_task(task_id, done=[self.planned_only], note=self.planned_only))


def runs_in_plan(name: str) -> bool:
    """Whether plan-only mode runs this tool: a read-only one (an unknown name runs, to fail as such)."""
    try:
        return get_tool(name).read_only
    except SpecpilotError:
        return True


def call_status(result: ToolResult, executed: bool) -> str:
    if not executed:
        return "invalid" if result.is_error else PLANNED
    if result.is_error:
        return "error"
    return "approval_required" if result.content.get("status") == "approval_required" else "ok"


def ask(store: Any, text: str, brain: str = "auto", plan_only: bool = False) -> dict:
    """One turn: ``{"reply", "tool_calls", "task"}`` (see the module docstring). Never onboards."""
    chosen = make_brain(brain)
    if getattr(chosen, "fallback_reason", None):
        print(f"note: {chosen.fallback_reason}; commands only", file=sys.stderr)
    session = AskSession(store, chosen, plan_only=plan_only)
    reply = session.handle(text)
    task_id = session.closed_task_id if session.task_id is None else session.task_id
    task = store.get_task(task_id) if task_id is not None else None
    reason = ("; ".join(task.get("left") or []) or session.planned_only) if task else None
    return {"reply": reply.text, "tool_calls": session.calls,
            "task": {"id": task_id, "status": task["status"] if task else None, "reason": reason}}


def run_ask(text: str, brain: str = "auto", plan_only: bool = False, as_json: bool = False) -> int:
    """``specpilot ask``: print the answer (``as_json``: the one JSON object on stdout; notes and logs
    go to stderr). Returns 0: whether the request was done is the task's status."""
    with contextlib.redirect_stdout(sys.stderr):  # stray prints from libraries must not corrupt the output
        with Store() as store:
            answer = ask(store, text, brain=brain, plan_only=plan_only)
    if as_json:
        sys.stdout.write(json.dumps(answer, ensure_ascii=False, default=str) + "\n")
    else:
        print(answer["reply"])
        for call in answer["tool_calls"]:
            shown = json.dumps(call["input"], ensure_ascii=False, default=str)
            if not call["executed"] and f"{call['name']} {shown}" not in answer["reply"]:  # said once
                print(f"  ({call['status']}, not executed: {call['name']} {shown})")
    sys.stdout.flush()
    return 0
