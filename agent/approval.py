"""Approval gates, enforced in code: installing, training, sharing and deploying run only after a
person said yes.

Every tool call from any brain or host goes through :class:`Gate`. For a gated tool the gate
records a pending approval holding the exact call, then:

- in the terminal (``confirm`` given) it shows exactly what will run and the person approves by
  typing a confirmation that names it (``install gguf``), read from the controlling terminal that
  the gate opens itself (``/dev/tty``), never from piped or pasted input; anything else denies it
  and the brain gets a tool error. With no terminal to ask on, nothing is asked: the approval stays
  pending and the answer says how a person approves it;
- in host mode (JSON CLI, MCP without elicitation) it returns ``approval_required`` with the
  pending id; the person approves it at their own terminal (``specpilot tool approve ID``, the
  same typed confirmation on ``/dev/tty``), and a later call carrying that ``approval_id`` runs
  it once (``Store.consume_approval``).

Nothing the brain can send approves anything: there is no approve tool, an approval id only
works once a person decided it, and text in prompts, files, tool results or model output is
never read as a decision. :func:`open_terminal` is the one place the answer comes from (tests
replace it, or pass a terminal to :func:`decide_at_terminal`).
"""

from __future__ import annotations

import io
import logging
import os
import secrets
import select
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, TextIO

from tools.agent_tools import registry
from tools.errors import ApprovalError, SpecpilotError
from tools.agent_tools.registry import APPROVAL_FIELD, Tool, ToolContext, ToolResult

log = logging.getLogger(__name__)

DEPLOY_ACTION = "deploy"
TTY_PATH = "/dev/tty"
TERMINAL_USER = "terminal user"
MAX_ANSWER_CHARS = 1000
WAKE_S = 0.2  # how often a wait for the approval answer wakes to act on a signal that came just before it
MAX_PHRASE_CHARS = 120
# what the person types after the action word: the part of the input that names what will happen
PHRASE_SUBJECTS = {"install": "packages", "train": "target", "share": "destination"}
Confirm = Callable[[str], bool]  # shown exactly what will run (a Question); returns the person's decision


class ApprovalDenied(SpecpilotError):
    """The person said no: the gated action did not run."""


class NoTerminal(ApprovalError):
    """There is no person's terminal to ask on (no controlling terminal, or piped input): nothing is asked."""


class Question(str):
    """The text shown before a gated action, carrying the confirmation the person must type."""

    phrase: str
    approval_id: str

    def __new__(cls, text: str, phrase: str, approval_id: str) -> Question:
        question = super().__new__(cls, text)
        question.phrase, question.approval_id = phrase, approval_id
        return question


@dataclass
class Terminal:
    """Where a question is shown and its answer read; ``owned`` when the gate opened it (closed after)."""

    reader: TextIO
    writer: TextIO
    owned: bool = False

    def close(self) -> None:
        if self.owned:
            self.reader.close()


def open_terminal() -> Terminal:
    """The controlling terminal, opened now by the gate for one question (``/dev/tty``).

    Refuses (NoTerminal) when this process's input is not a terminal (piped or redirected: a line
    there is data, never a decision) or when it has no controlling terminal.
    """
    stdin = sys.stdin
    if stdin is None or not _isatty(stdin):
        raise NoTerminal("approving needs a person at an interactive terminal; this command's input is not one")
    try:
        fd = os.open(TTY_PATH, os.O_RDWR | os.O_NOCTTY)
    except OSError as exc:
        raise NoTerminal(f"approving needs a person at an interactive terminal; this process has none "
                         f"({TTY_PATH}: {exc.strerror})") from None
    stream = io.TextIOWrapper(io.FileIO(fd, "r+"), encoding="utf-8", errors="replace", line_buffering=True)
    return Terminal(stream, stream, owned=True)


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def approval_prompt(action: str, what: str, approval_id: str) -> str:
    """The text shown to the person before a gated action: what will run, and the question. Every value in
    it is shown escaped (:func:`one_line`): a name holding a newline or an escape sequence cannot print a
    line of its own or repaint the terminal."""
    return (f"specpilot asks for approval to {one_line(action)} (approval {one_line(approval_id)}).\n"
            f"This will run exactly:\n  {one_line(what)}\n")


def how_to_approve(approval_id: str) -> str:
    """How a person approves ``approval_id`` themselves."""
    return (f"run `specpilot tool approve {approval_id}` yourself in a terminal and type the confirmation it "
            f"asks for (or `specpilot tool deny {approval_id}`)")


def confirmation_phrase(approval: dict) -> str:
    """What the person types to approve ``approval``: its action and what it names, e.g. ``install gguf``.

    Falls back to the action and the approval id when the input names nothing short and typeable.
    """
    action = str(approval["action"])
    arguments = approval.get("arguments") or {}
    value = (arguments.get("input") or {}).get(PHRASE_SUBJECTS.get(action, ""))
    subject = " ".join(str(v) for v in dict.fromkeys(value)) if isinstance(value, list) else str(value or "")
    typeable = subject.isprintable() and subject == " ".join(subject.split())
    if not subject or len(subject) > MAX_PHRASE_CHARS or not typeable:
        subject = str(approval["id"])
    return f"{action} {subject}"


def printable(text: str) -> str:
    """``text`` with control characters (escape sequences included) shown escaped, newlines kept."""
    return "".join(c if c == "\n" or c.isprintable() else repr(c)[1:-1] for c in str(text))


def one_line(text: str) -> str:
    """``text`` with every control character shown escaped, newlines and tabs included: one line."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))


CHALLENGE_LETTERS = ("bdfgklmnprstvz", "aeiou")  # consonant, vowel, consonant, vowel: easy to read and type


def challenge_word() -> str:
    """A short random word (``kavo``) made for one question: part of the confirmation, shown only on the
    terminal the gate opened. A program that pipes a known phrase into a pseudo-terminal without reading
    it cannot guess it (one that reads the terminal can: see the trust boundary in SKILL.md)."""
    return "".join(secrets.choice(CHALLENGE_LETTERS[i % 2]) for i in range(4))


def read_confirmation(terminal: Terminal, question: str, phrase: str) -> tuple[bool, str, str]:
    """Show ``question`` on ``terminal``, ask for ``phrase`` followed by a fresh :func:`challenge_word`,
    and return (whether the person typed exactly that, what they typed, the full confirmation asked for).

    Input typed before the question (pasted text, a stream of ``y``) is discarded first.
    """
    word = challenge_word()
    expected = f"{phrase} {word}" if word else phrase
    _discard_typed_ahead(terminal.reader)
    terminal.writer.write(f"{printable(question).rstrip()}\nTo approve, type exactly:  {printable(expected)}\n"
                          "(anything else does not approve) > ")
    terminal.writer.flush()
    _wait_for_line(terminal.reader)
    answer = " ".join(terminal.reader.readline(MAX_ANSWER_CHARS).split())
    return answer == expected, answer, expected


def _wait_for_line(reader: TextIO) -> None:
    """Wait until the terminal has a line to read, waking every WAKE_S: Python runs a signal's handler between
    its own steps, so a SIGTERM or SIGHUP that arrived just before a blocking read began (as the question was
    shown) would otherwise wait for a line nobody types instead of ending the chat."""
    try:
        fd = reader.fileno()
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return  # a test's stand-in: nothing blocks
    while not select.select([fd], [], [], WAKE_S)[0]:
        pass


def _discard_typed_ahead(reader: TextIO) -> None:
    try:
        import termios

        termios.tcflush(reader.fileno(), termios.TCIFLUSH)
    except Exception:  # noqa: BLE001 - a test's stand-in has no fd; termios.error: nothing to drop
        pass


def ask_at_terminal(question: str, phrase: str | None = None) -> bool:
    """Ask the person on the controlling terminal; True only when they type the confirmation phrase.

    ``phrase`` defaults to the one a :class:`Question` carries. Raises NoTerminal when there is no
    terminal to ask on (nothing is read from piped input).
    """
    phrase = phrase or getattr(question, "phrase", None)
    if not phrase:
        raise ApprovalError("an approval question needs the confirmation phrase the person types")
    terminal = open_terminal()
    try:
        return read_confirmation(terminal, question, phrase)[0]
    finally:
        terminal.close()


class Gate:
    """Runs tool calls, holding gated ones until a person approves them.

    ``confirm`` asks the person at the terminal (normally :func:`ask_at_terminal`); ``None`` means
    host mode, where a gated call returns ``approval_required``. ``who`` is recorded as the decider
    of terminal approvals.
    """

    def __init__(self, store: Any, confirm: Confirm | None = None, who: str = TERMINAL_USER):
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
            try:
                approved = self.ask(tool_.gate, pending)
            except NoTerminal as exc:
                return approval_required(pending, why_pending=str(exc))
            if not approved:
                raise ApprovalDenied(f"the user denied approval {pending['id']} to {tool_.gate}: "
                                     f"{pending['reason']}; nothing was run",
                                     hint="do not retry it unless the user asks for it again")
            return self.run_approved(tool_, inp, pending["id"], ctx)
        except SpecpilotError as exc:
            return ToolResult.error(name, exc.user_message())

    def ask(self, action: str, pending: dict) -> bool:
        """Ask the person about ``pending`` and record their decision; NoTerminal leaves it pending."""
        question = Question(approval_prompt(action, pending["reason"], pending["id"]),
                            confirmation_phrase(pending), pending["id"])
        approved = bool(self.confirm(question))
        self.store.decide_approval(pending["id"], approved, by=self.who)
        return approved

    def request(self, tool_: Tool, inp: Any) -> dict:
        """Record a pending approval for this exact call, made concrete first (``Tool.resolve``: absolute
        paths, normalised URLs, the run ids "the newest runs" stand for); return the approval row. Its
        arguments hold what runs (``input``) and, when that differs, what was asked (``requested``)."""
        arguments = approval_for(tool_, inp, self.store)
        what = tool_.describe(tool_.input_model.model_validate(arguments["input"]))
        approval_id = self.store.create_approval(tool_.gate, arguments, reason=what)
        return self.store.get_approval(approval_id)

    def run_approved(self, tool_: Tool, inp: Any, approval_id: str, ctx: ToolContext) -> ToolResult:
        """Consume the approval (once) and run exactly the call it covers (its resolved input: the same
        folder and run ids the person saw); refuse a call that asks for anything else."""
        current = self.store.get_approval(approval_id)
        if current["action"] == tool_.gate:
            asked = registry.approval_arguments(tool_, inp)
            covered = current["arguments"] or {}
            if asked["tool"] != covered.get("tool") or asked["input"] not in (covered.get("input"),
                                                                             covered.get("requested")):
                raise ApprovalError(f"approval {approval_id} covers {covered.get('input')}, not this call",
                                    hint="call the tool again with exactly the approved input, or ask for a new "
                                         "approval")
            inp = tool_.input_model.model_validate({**covered["input"], APPROVAL_FIELD: approval_id})
        consumed = self.store.consume_approval(approval_id, action=tool_.gate)
        log.info("running %s under approval %s", tool_.name, approval_id)
        return registry.execute(tool_, inp, replace(ctx, approval=consumed))


def approval_for(tool_: Tool, inp: Any, store: Any) -> dict:
    """What an approval of this call covers: the tool and its input made concrete by ``Tool.resolve``
    (``input``), with the input as asked (``requested``) when resolving changed it."""
    asked = registry.approval_arguments(tool_, inp)
    if tool_.resolve is None:
        return asked
    resolved = registry.approval_arguments(tool_, tool_.resolve(inp, store))
    return resolved if resolved["input"] == asked["input"] else {**resolved, "requested": asked["input"]}


def approval_required(pending: dict, why_pending: str | None = None) -> ToolResult:
    """The host-mode answer to a gated call: what would run, the pending id, and how a person approves."""
    approval_id = pending["id"]
    content = {
        "status": "approval_required",
        "approval_id": approval_id,
        "action": pending["action"],
        "will_run": pending["reason"],
        "arguments": pending["arguments"],
        "expires_at": pending.get("expires_at"),
        "how_to_approve": (f"ask the user to {how_to_approve(approval_id)}; once approved, call "
                           f"{pending['arguments']['tool']} again with the same input plus "
                           f"\"approval_id\": \"{approval_id}\". It runs once."),
    }
    if why_pending:
        content["why_pending"] = f"nobody was asked: {why_pending}"
    return ToolResult(name=pending["arguments"]["tool"], content=content)


# ---- deploy / serve requests: not a tool, but still gated ------------------------------------

def request_deploy_planning(store: Any, request: str, confirm: Confirm | None, who: str = TERMINAL_USER) -> dict:
    """Gate a deploy/serve/production request before any planning.

    An earlier approval of the same request that a person gave at their terminal is used (once).
    Otherwise a pending ``deploy`` approval is recorded; with ``confirm`` the person is asked at
    once and the decision is recorded; without it (host mode), or with no terminal to ask on, it
    stays pending. Returns the row.
    """
    for earlier in store.list_approvals(status="approved"):
        if earlier["action"] == DEPLOY_ACTION and earlier["arguments"].get("request") == request:
            return store.consume_approval(earlier["id"], action=DEPLOY_ACTION)  # approved at the terminal before
    what = f"plan a deployment for: {request.strip()[:300]} (specpilot itself only benchmarks locally)"
    approval_id = store.create_approval(DEPLOY_ACTION, {"request": request}, reason=what)
    if confirm is not None:
        pending = store.get_approval(approval_id)
        try:
            Gate(store, confirm, who).ask("plan a deployment", pending)
        except NoTerminal as exc:
            log.info("deploy approval %s left pending: %s", approval_id, exc)
    return store.get_approval(approval_id)


# ---- a command that is not a tool (``specpilot medusa train``) --------------------------------

def approve_command(store: Any, action: str, arguments: dict, what: str, approval_id: str | None = None,
                    who: str = TERMINAL_USER) -> dict:
    """A person's approval for a command run in the terminal, recorded like a tool's; returns it consumed.

    With ``approval_id`` (one a person approved with ``specpilot tool approve``) that approval is
    used once, if it covers exactly ``arguments``. Otherwise a pending approval is recorded and the
    person is asked on the controlling terminal; with none, NoTerminal says how to approve it.
    Raises ApprovalDenied when the person does not type the confirmation.
    """
    if approval_id:
        current = store.get_approval(approval_id)
        if current["action"] != action or current["arguments"] != arguments:
            raise ApprovalError(f"approval {approval_id} covers {current['action']} {current['arguments']}, "
                                "not this command", hint="rerun exactly the approved command, or without --approval-id")
        return store.consume_approval(approval_id, action=action)
    approval_id = store.create_approval(action, arguments, reason=what)
    pending = store.get_approval(approval_id)
    question = Question(approval_prompt(action, what, approval_id), confirmation_phrase(pending), approval_id)
    try:
        approved = ask_at_terminal(question)
    except NoTerminal as exc:
        raise NoTerminal(f"{exc}; approval {approval_id} is pending (expires {pending['expires_at']})",
                         hint=f"{how_to_approve(approval_id)}, then rerun this command with --approval-id "
                              f"{approval_id}") from None
    store.decide_approval(approval_id, approved, by=who)
    if not approved:
        raise ApprovalDenied(f"approval {approval_id} was not given (the confirmation was not typed); nothing was run",
                             hint=f"rerun it and type `{question.phrase}` and the word shown after it when asked")
    return store.consume_approval(approval_id, action=action)


# ---- a person's decision at their own terminal ------------------------------------------------

def decide_at_terminal(store: Any, approval_id: str, approve: bool, stdin: TextIO | None = None,
                       stdout: TextIO | None = None) -> dict:
    """Approve or deny ``approval_id`` after showing it to the person on their terminal.

    Approving: the terminal is the controlling one, opened here (:func:`open_terminal`);
    ``stdin``/``stdout`` stand in for it in tests and must be a terminal too. Refuses (NoTerminal)
    without one, so an agent host running commands cannot approve its own requests. Approving needs
    the typed confirmation naming the action (``install gguf``) and a word made for this question,
    not a bare yes. Denying (:func:`withdraw`) needs no terminal: it denies a pending approval or
    withdraws an approved one that has not run. Returns the decided row.
    """
    if not approve:
        return withdraw(store, approval_id, stdout or sys.stderr, how="specpilot tool deny")
    if stdin is None:
        terminal = open_terminal()
    elif _isatty(stdin):
        terminal = Terminal(stdin, stdout or sys.stderr)
    else:
        raise NoTerminal("approving needs a person at an interactive terminal; this command's input is not one",
                         hint=f"run `specpilot tool approve {approval_id}` yourself in a terminal")
    try:
        return _approve(store, terminal, approval_id)
    finally:
        terminal.close()


def _approve(store: Any, terminal: Terminal, approval_id: str) -> dict:
    pending = store.get_approval(approval_id)
    if pending["status"] != "pending":
        raise ApprovalError(f"approval {approval_id} is {pending['status']}, not pending; nothing to decide",
                            hint="ask for the action again to get a new approval id")
    question = approval_prompt(pending["action"], pending["reason"], approval_id)
    confirmed, answer, phrase = read_confirmation(terminal, question, confirmation_phrase(pending))
    if not confirmed:
        raise ApprovalError(f"approval {approval_id} was not given (typed {one_line(answer[:80])!r}, not "
                            f"{one_line(phrase)!r}); it is still pending",
                            hint="run it again and type exactly what it asks for (its last word is new each time)")
    return store.decide_approval(approval_id, True, by=f"{TERMINAL_USER} (specpilot tool approve, {TTY_PATH})")


def withdraw(store: Any, approval_id: str, shown: TextIO, how: str = "specpilot approvals revoke") -> dict:
    """Deny a pending approval, or withdraw (``revoked``) an approved one that has not run yet; show what
    will not run on ``shown``; return the row. No terminal is needed: this can only stop an action.
    ApprovalError when it already ran, expired or was refused."""
    row = store.revoke_approval(approval_id, by=f"{how}")
    outcome = ("Denied: it will not run." if row["status"] == "denied"
               else "Withdrawn: the approval is void and the action will not run.")
    shown.write(approval_prompt(row["action"], row["reason"], approval_id) + outcome + "\n")
    shown.flush()
    return row
