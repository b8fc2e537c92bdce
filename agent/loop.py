"""The conversation loop: one :class:`Session` per conversation, whatever the brain.

A session reads memory first (saved parameters, unfinished tasks), records every request as a
task (what is done and what is left), routes slash commands to the command brain (agent.brains.offline), puts
deploy/serve requests the brain called no tool for behind an approval before any planning, and runs every
tool call through the approval gate.
Brains (agent.brains) only decide which tools to call and what to say; the loop knows them only through
agent.brains.base: the brain is given to the Session, and so is the command brain that answers slash commands (by
default the brain's own ``commands`` brain, which agent.brains.make_brain attaches, else the brain itself).
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import uuid
from collections.abc import Callable
from typing import Any, ContextManager, TypeVar

from agent.approval import Confirm, Gate, request_deploy_planning
from agent.commands import parse_command, tool_command
from agent.brains.base import QUOTED, Brain, Reply, command_name, is_known_command
from agent.replies import DEPLOY_SCOPE, deployment_plan, deployment_status, nothing_to_do
from tools.agent_tools.lookup import statement, task_line
from tools.agent_tools.registry import ToolContext, ToolResult, check_prompt, load_tools
from tools.engine.params import ACCELERATED
from tools.errors import ParameterError, StoreError

log = logging.getLogger(__name__)
T = TypeVar("T")
NOT_RECORDED = "not_recorded"  # the key of a host call's result saying its task row could not be written

ANSWER_STEP = "answer the request"
# a message that asks to run something ("run draft: ...", "benchmark ..."): what follows its colon is the prompt
RUN_WORDS = re.compile(r"\s*(run|try|benchmark|measure|re-?run)\b", re.IGNORECASE)
# the methods' own names, as the tools' schemas spell them (a request that names one expects an answer about it)
METHOD_NAME = re.compile(rf"\b({'|'.join(ACCELERATED)})\b", re.IGNORECASE)


def instruction_part(text: str) -> str:
    """A message without the prompt it carries: quoted text, and what follows the colon of a run request."""
    text = QUOTED.sub(" ", text)
    if RUN_WORDS.match(text) and ":" in text:
        text = text.split(":", 1)[0]
    return text


class Session:
    """One conversation over the memory, with a brain and an approval gate.

    ``confirm`` asks the person y/n at the terminal; ``None`` is host mode (gated calls return
    ``approval_required``). ``activity(text)`` returns a context manager shown while a tool runs
    (the chat's spinner); ``progress(text)`` receives progress lines from tools; ``stream_text(text)``
    receives a brain's answer as it arrives (a brain that used it marks its Reply ``streamed``).
    ``planner`` answers slash commands (default: the brain's ``commands`` brain, else the brain itself).
    """

    def __init__(self, store: Any, brain: Brain, confirm: Confirm | None = None, session_id: str | None = None,
                 activity: Callable[[str], ContextManager] | None = None,
                 progress: Callable[[str], None] | None = None, planner: Brain | None = None,
                 stream_text: Callable[[str], None] | None = None):
        self.store = store
        self.brain = brain
        self.confirm = confirm
        self.gate = Gate(store, confirm)
        self.session_id = session_id or uuid.uuid4().hex[:12]
        self.activity = activity or (lambda text: contextlib.nullcontext())
        self.progress = progress
        self.stream_text = stream_text
        self.task_id: int | None = None
        self.turn_results: list[ToolResult] = []
        self.last_prompt: str | None = None
        self.last_results: list[ToolResult] = []  # the newest turn's tool results that had any (for /details)
        self._planner = planner
        self.not_recorded: str | None = None  # why this turn's log or task could not be written

    def remember(self, write: Callable[[], T]) -> T | None:
        """Run a write to memory the answer does not depend on (the conversation log, the task row) and
        return its result; on a full or read-only disk the turn goes on without it (None), and the reply
        says what was not recorded."""
        try:
            return write()
        except StoreError as exc:
            log.warning("not recorded in memory: %s", exc.user_message())
            self.not_recorded = self.not_recorded or str(exc)
            return None

    # ---- memory first --------------------------------------------------------------------

    def memory(self) -> dict:
        """What memory holds now: saved parameters, default method, unfinished tasks, newest runs."""
        unfinished = [t for t in self.store.unfinished_tasks() if t["id"] != self.task_id]
        return {"saved_params": self.store.all_params(),
                "default_method": self.store.get_answer("default_method"),
                "onboarding_complete": self.store.onboarding_complete(),
                "unfinished_tasks": [task_line(t) for t in unfinished[:10]],
                "recent_runs": [statement(r) for r in self.store.list_runs(limit=3)]}

    def greeting(self) -> str:
        """A greeting that says what is saved and what is unfinished (nothing is asked)."""
        mem = self.memory()
        lines = []
        if mem["saved_params"]:
            lines.append("Saved parameters (I will not ask for these again):")
            for method, params in mem["saved_params"].items():
                mark = " (default)" if method == mem["default_method"] else ""
                lines.append(f"  {method}{mark}: " + ", ".join(f"{k}={v}" for k, v in params.items()))
        else:
            lines.append("No parameters saved yet.")
        if mem["unfinished_tasks"]:
            lines.append("Unfinished work:")
            lines += [f"  {line}" for line in mem["unfinished_tasks"]]
        else:
            lines.append("No unfinished work.")
        if mem["recent_runs"]:
            lines.append("Newest stored run: " + mem["recent_runs"][0])
        return "\n".join(lines)

    # ---- one request ---------------------------------------------------------------------

    def handle(self, text: str) -> Reply:
        """Answer one user message: record it as a task, let the brain work, and close the task.

        A message over the tool inputs' limit (MAX_PROMPT_BYTES) is refused before anything reads it."""
        try:
            check_prompt("the conversation", "message", text)
        except ParameterError as exc:
            if text.strip():
                return Reply(exc.user_message(), not_done="the message is too long to read")
        text = text.strip()
        if not text:
            return Reply("Say what you would like to do, or /help.")
        continuing = self.task_id is not None
        if continuing and (is_known_command(text) or tool_command(text, load_tools())):
            return self._aside(text)
        self.not_recorded = None
        reply = self._handle(text, continuing)
        if self.not_recorded:
            reply.text += (f"\n(Not recorded in memory: {self.not_recorded}. The answer above was read from memory "
                           "as it is.)")
        return reply

    def _handle(self, text: str, continuing: bool) -> Reply:
        self.remember(lambda: self.store.log_message(self.session_id, "user", text))
        if not continuing:
            self.task_id = self.remember(lambda: self.store.create_task(request=text, kind=_kind(text),
                                                                        plan=[ANSWER_STEP]))
        else:
            self.remember(lambda: self.store.update_task(self.task_id, note=f"user answered: {text[:200]}"))
        self.turn_results = []
        try:
            command = None if continuing else self._tool_command(text)
            if command is not None:
                reply = command
            elif self._for_planner(text, continuing):
                reply = self.planner().respond(self, text)
            else:
                reply = self.brain.respond(self, text)
                if reply.deploy and not continuing and not self.turn_results:
                    reply = self._deploy(text)  # the brain read a request to deploy: approval before any planning
        except KeyboardInterrupt as exc:  # Ctrl-C, or (tools.errors.Terminated) SIGTERM / SIGHUP
            if self.task_id is not None:
                task_id = self.task_id
                self.remember(lambda: self.store.update_task(
                    task_id, status="unfinished", note=f"interrupted by {exc}" if str(exc) else "interrupted by the user"))
            self.task_id = None
            raise
        except Exception as exc:  # a brain bug ends this request, not the conversation
            log.exception("the %s brain failed", self.brain.name)
            if self.task_id is not None:
                task_id = self.task_id
                self.remember(lambda: self.store.update_task(task_id, status="failed",
                                                             note=f"{type(exc).__name__}: {exc}"))
            self.task_id = None
            return Reply(f"Something went wrong while answering: {type(exc).__name__}: {exc}")
        if not reply.data:
            reply.data = [r for r in self.turn_results if r.name == "run_method"]
        if reply.off_request is None and not continuing:
            reply.off_request = off_request(text, self.turn_results)
        self._close_task(reply)
        if self.turn_results:
            self.last_results = list(self.turn_results)
        self.remember(lambda: self.store.log_message(self.session_id, "assistant", reply.text))
        return reply

    def _tool_command(self, text: str) -> Reply | None:
        """``/TOOL key=value ...`` (agent.commands: parsed from the tool's schema) run as typed; None when the
        message is not a tool command, or is one of the command brain's shortcuts in its own syntax."""
        tools = load_tools()
        name = tool_command(text, tools)
        if name is None:
            return None
        try:
            arguments = parse_command(text, tools[name])
        except ParameterError as exc:
            if is_known_command(text):  # "/explain draft ...": the command brain's own shortcut
                return None
            return Reply(exc.user_message(), not_done=f"/{name} did not validate")
        from agent.replies import format_result  # noqa: PLC0415  (the formatter loads the tools' texts)

        return Reply(format_result(self.call_tool(name, arguments)))

    def _aside(self, text: str) -> Reply:
        """A known /command while a question waits for its answer: handled as a task of its own. The waiting
        question (and its task) stay open and the reply says so, unless the command asks a question of its
        own: then that one replaces it, and the first task is recorded as set aside."""
        waiting, self.task_id = self.task_id, None
        reply = self.handle(text)
        if reply.awaiting:  # the command asked a question of its own: that one is pending now, the first is dropped
            command = text.split()[0]
            self.remember(lambda: self.store.update_task(
                waiting, status="unfinished", left=[f"set aside: {command} asked a question of its own"]))
            drop = getattr(self.brain, "drop_question", None)
            if self.planner() is not self.brain and drop is not None:
                drop()  # else the brain's own question would take the next message for its answer
            reply.text += "\n(The earlier question is dropped: ask for that again when you want it.)"
            return reply
        self.task_id = waiting
        left = [step for step in self.store.get_task(waiting)["left"] if step.startswith("waiting for the user")]
        if left:
            reply.text += f"\n(Still {left[0]})"
        return reply

    def planner(self):
        """The command brain (slash commands go to it whatever the brain)."""
        if self._planner is None:
            self._planner = getattr(self.brain, "commands", None) or self.brain
        return self._planner

    def _for_planner(self, text: str, continuing: bool) -> bool:
        """Whether the command brain answers this message: a known slash command, anything
        shaped like a command when no question is pending, or anything while the planner asks."""
        return (is_known_command(text) or (command_name(text) is not None and not continuing)
                or self._planner_is_asking())

    def _planner_is_asking(self) -> bool:
        """Whether the planner (used for slash commands beside another brain) waits for an answer."""
        planner = self._planner
        return planner is not None and planner is not self.brain and getattr(planner, "pending", None) is not None

    def call_tool(self, name: str, tool_input: dict | str | None) -> ToolResult:
        """Run a tool through the approval gate for the current task; record and log the outcome."""
        ctx = ToolContext(store=self.store, progress=self.progress, task_id=self.task_id,
                          session_id=self.session_id)
        with self.activity(f"{name}"):
            result = self.gate.call(name, tool_input if tool_input is not None else {}, ctx)
        self.turn_results.append(result)
        self.remember(lambda: self.store.log_message(self.session_id, "tool", {
            "name": name, "input": tool_input, "is_error": result.is_error, "result": result.content}))
        if self.task_id is not None:
            step, task_id = _step(name, tool_input, result), self.task_id
            if result.is_error:
                self.remember(lambda: self.store.update_task(task_id, note=f"{step}: {result.content.get('error')}"))
            elif result.content.get("status") == "approval_required":
                waiting = f"{step}: waiting for approval {result.content['approval_id']}"
                self.remember(lambda: self.store.update_task(task_id, note=waiting))
            else:
                self.remember(lambda: self.store.update_task(task_id, done=[step], run_ids=result.run_ids))
        if name == "run_method" and isinstance(tool_input, dict) and not result.is_error:
            self.last_prompt = tool_input.get("prompt") or self.last_prompt
        self.remember(lambda: resolve_waiting(self.store, tool_input, result))
        return result

    def _close_task(self, reply: Reply) -> None:
        if self.task_id is None:
            return
        task_id = self.task_id
        pending = [r.content for r in self.turn_results if r.content.get("status") == "approval_required"]
        if reply.awaiting:
            self.remember(lambda: self.store.update_task(task_id, status="unfinished",
                                                         left=[f"waiting for the user: {reply.awaiting}"]))
            return  # the next message continues this task
        if pending:
            left = [f"waiting for approval {p['approval_id']}: {p['will_run']}" for p in pending]
            update = {"status": "unfinished", "left": left}
        elif reply.unfinished:
            update = {"status": "unfinished", "left": [reply.unfinished]}
        elif reply.not_done or reply.off_request:  # not served, or not what was asked: recorded as such, not as done
            why = f"not done: {reply.not_done or reply.off_request}"
            update = {"status": "failed", "left": [why], "note": why}
        elif self.turn_results and all(r.is_error and not nothing_to_do(r) for r in self.turn_results):
            why = "not done: " + "; ".join(f"{r.name} failed: {r.content.get('error')}" for r in self.turn_results)
            update = {"status": "failed", "left": [why[:500]], "note": why[:500]}
        else:
            update = {"status": "done", "done": [ANSWER_STEP], "left": []}
        self.remember(lambda: self.store.update_task(task_id, **update))
        self.task_id = None

    # ---- deploy / serve: out of scope, approval before any planning ---------------------

    def deployment_approval(self, request: str) -> dict:
        """The approval to plan a deployment for ``request``: asked for at the terminal where there is one, else
        left pending for ``specpilot tool approve``."""
        return request_deploy_planning(self.store, request, self.confirm)

    def _deploy(self, text: str) -> Reply:
        approval = self.deployment_approval(text)
        if approval["status"] == "pending":
            said = (f"Planning it needs your approval first: run `specpilot tool approve --id {approval['id']}` in your "
                    "terminal if you want me to plan it.")
        elif approval["status"] == "denied":
            said = f"You declined, so I will not plan it (approval {approval['id']} denied)."
        else:
            said = f"You approved planning it (approval {approval['id']}).\n{deployment_plan(self.store)}"
        return Reply(f"{DEPLOY_SCOPE} {said}", **deployment_status(approval))


def off_request(text: str, results: list[ToolResult]) -> str | None:
    """Why tool results that answered are not the answer to ``text``: the request names methods and every
    method-specific result is about others (guidance for the default method when another was named); None
    when the request names none, or a result is about one it names."""
    named = {m.lower() for m in METHOD_NAME.findall(instruction_part(text))}
    about = set().union(*(methods_of(r) for r in results if not r.is_error)) if results else set()
    if not named or not about or named & about:
        return None
    return f"the answer is about {', '.join(sorted(about))}, not {', '.join(sorted(named))} as asked"


def methods_of(result: ToolResult) -> set[str]:
    """The methods a tool result is about (empty for results about no method in particular)."""
    c = result.content
    if result.name in ("guidance", "run_method", "check_deps"):
        found = {c.get("method")}
    elif result.name == "explain":
        found = {c.get("topic")}
    elif result.name == "compare_methods":
        found = {r.get("method") for r in c.get("rows") or []}
    elif result.name == "lookup_runs":
        found = {r.get("method") for r in c.get("runs") or []}
    else:
        found = set()
    return {m for m in found if m in ACCELERATED}


def resolve_waiting(store: Any, tool_input: Any, result: ToolResult) -> None:
    """After an approved call ran, mark the tasks that were waiting for that approval as done."""
    approval_id = tool_input.get("approval_id") if isinstance(tool_input, dict) else None
    if not approval_id or result.is_error:
        return
    for task in store.unfinished_tasks():
        waiting = [step for step in task["left"] if f"approval {approval_id}" in step]
        if waiting:
            store.update_task(task["id"], done=waiting, run_ids=result.run_ids,
                              note=f"approval {approval_id} was given and the action ran")
            if not store.get_task(task["id"])["left"]:
                store.update_task(task["id"], status="done")


def host_call(store: Any, name: str, tool_input: dict | str | None, gate: Gate | None = None,
              progress: Callable[[str], None] | None = None) -> ToolResult:
    """One tool call from an agent host (JSON CLI, MCP), recorded as a task; gated calls return
    ``approval_required`` unless ``gate`` can ask. Never raises. With a read-only memory the call
    runs without a task (read-only tools still answer; a tool that stores says why it cannot); so it does
    when the task row cannot be written (a full disk): the result says so under ``not_recorded``."""
    shown = tool_input if isinstance(tool_input, str) else json.dumps(tool_input or {}, ensure_ascii=False, default=str)
    shown = shown[:300].encode("utf-8", "backslashreplace").decode("utf-8")  # a lone surrogate shown escaped
    task_id, not_recorded = None, None
    if getattr(store, "read_only", False):
        not_recorded = "the memory database is read-only: this call is not recorded as a task"
    else:
        try:
            task_id = store.create_task(request=f"{name} {shown}", kind=f"tool:{name}", plan=[name])
        except StoreError as exc:
            not_recorded = f"this call is not recorded as a task: {exc.user_message()}"
    ctx = ToolContext(store=store, progress=progress, task_id=task_id)
    result = (gate or Gate(store)).call(name, tool_input, ctx)
    if task_id is None:
        if not_recorded:
            result.content.setdefault(NOT_RECORDED, not_recorded)
        return result
    try:
        _close_host_task(store, task_id, name, tool_input, result)
    except StoreError as exc:
        result.content.setdefault(NOT_RECORDED, f"the outcome is not recorded in task {task_id}: {exc.user_message()}")
    return result


def _close_host_task(store: Any, task_id: int, name: str, tool_input: dict | str | None, result: ToolResult) -> None:
    if result.content.get("status") == "approval_required":
        store.update_task(task_id, status="unfinished", run_ids=result.run_ids,
                          left=[f"waiting for approval {result.content['approval_id']}: {result.content['will_run']}"])
    elif result.is_error:
        store.update_task(task_id, status="failed", note=str(result.content.get("error")))
    else:
        store.update_task(task_id, status="done", done=[name], run_ids=result.run_ids)
        parsed = tool_input
        if isinstance(tool_input, str):
            with contextlib.suppress(ValueError, RecursionError):
                parsed = json.loads(tool_input)
        resolve_waiting(store, parsed, result)


def _kind(text: str) -> str:
    if command_name(text):
        return "command:" + command_name(text)
    return "request"


def _step(name: str, tool_input: Any, result: ToolResult) -> str:
    """A short name for a tool call, as recorded in a task's done list."""
    detail = ""
    if isinstance(tool_input, dict):
        for key in ("method", "topic", "run_id", "packages", "destination"):
            if tool_input.get(key):
                detail = f" {key}={tool_input[key]}"
                break
    runs = f" -> run {', '.join(result.run_ids)}" if result.run_ids and name == "run_method" else ""
    return f"{name}{detail}{runs}"

