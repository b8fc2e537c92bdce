"""``specpilot chat``: the terminal conversation.

Rich output; prompt_toolkit input with history when stdin is a terminal, plain line reading when
it is piped. Greets with what memory holds, runs onboarding on the first run, then answers each
message through a :class:`agent.loop.Session` (slash commands /help /params /tasks /runs /quit and
the rest). A spinner runs while tools work; approvals are asked on the controlling terminal (/dev/tty),
where the person types a confirmation naming the action; piped input never approves.

The thread is kept: Ctrl-C at the prompt clears the line (Ctrl-C while a request runs stops that
request, recorded as unfinished); only Ctrl-D (end of input) or /quit ends the chat. Only known
/commands are commands, so a path such as /tmp/report.md answers a pending question. Log lines go to
``$SPECPILOT_HOME/logs/chat.log``, never into the conversation. Ctrl-C during the first-run
questions skips them, as the answer 'skip' does.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from pathlib import Path
from collections.abc import Iterator
from typing import TextIO

from rich.console import Console
from rich.markdown import Markdown
from rich.panel import Panel

from agent.approval import ask_at_terminal
from agent.brains import make_brain
from agent.brains.base import Reply
from agent.loop import Session
from agent.onboarding import SKIP_ANSWER, InputEnded, run_onboarding
from agent.render import run_table
from memory import Store, home_dir
from agent.termination import stop_on_termination
from tools.errors import SpecpilotError, Terminated

HISTORY_FILE = "chat_history"
LOG_FILE = Path("logs") / "chat.log"  # under the specpilot home
QUIT = ("/quit", "/exit", "/q")
HELP = """Commands: /help  /details (the whole of the last answer: tables, every parameter, the full text)
          /params (saved parameters)  /tasks (tasks, done and not done)  /runs (stored runs)
          /run [method] [k=v ...] PROMPT  /compare [METHODS] PROMPT  /lookup RUN_ID  /guide [METHOD]  /explain TOPIC
          /deps [METHOD]  /save METHOD k=v ...  /measure [TARGET] (cost curve)  /install PKG...  /train  /report
          /share DEST  /quit (or Ctrl-D; Ctrl-C clears the line)
Answers are short: the result, the figure that decides it with its run id, the next step.
With the local brain or Claude, just say what you want, e.g. "run draft: write a quicksort in Python",
"compare draft, medusa and lookahead on 'Explain quantum computing'",
"what did we do last time?", "save k=6 as my default for draft" or
"what was the speedup for the medusa run on that prompt?"."""


class LineReader:
    """Reads the person's lines: prompt_toolkit with history on a terminal, plain lines otherwise."""

    def __init__(self, stdin: TextIO, console: Console):
        self.stdin = stdin
        self.console = console
        self.session = None
        if stdin.isatty():
            from prompt_toolkit import PromptSession
            from prompt_toolkit.history import FileHistory

            self.session = PromptSession(history=FileHistory(str(home_dir() / HISTORY_FILE)))

    def read(self, prompt: str, on_interrupt: str = "") -> str | None:
        """One line from the person (without the newline), None at end of input (Ctrl-D), or
        ``on_interrupt`` when they press Ctrl-C (at the chat prompt: an empty line, i.e. cleared)."""
        if self.session is not None:
            try:
                return self.session.prompt(prompt)
            except EOFError:
                return None
            except Terminated:
                raise
            except KeyboardInterrupt:
                return on_interrupt
        self.console.print(prompt, end="", markup=False, highlight=False)
        self.console.file.flush()
        try:
            line = self.stdin.readline()
        except Terminated:
            raise
        except KeyboardInterrupt:
            self.console.print()
            return on_interrupt
        if not line:
            return None
        return line.rstrip("\n")


class Chat:
    """The terminal chat: a console, a line reader, a session, and a spinner around tool calls."""

    def __init__(self, brain: str = "auto", stdin: TextIO | None = None, console: Console | None = None,
                 store: Store | None = None, skip_onboarding: bool = False):
        self.console = console or Console(highlight=False)
        self.reader = LineReader(stdin or sys.stdin, self.console)
        self.store = store or Store()
        self.skip_onboarding = skip_onboarding
        self._status = None
        self.session = Session(self.store, make_brain(brain), confirm=self.confirm, activity=self.spinner,
                               progress=self.progress, stream_text=self.stream)

    # ---- terminal helpers ----------------------------------------------------------------

    @contextlib.contextmanager
    def spinner(self, what: str) -> Iterator[None]:
        """Show a spinner while a tool runs (rich draws nothing animated when output is not a terminal)."""
        with self.console.status(f"working: {what} …") as status:
            self._status = status
            try:
                yield
            finally:
                self._status = None

    def progress(self, text: str) -> None:
        """Show what a long tool is doing."""
        if self._status is not None:
            self._status.update(f"working: {text} …")
        else:
            self.console.print(f"[dim]{text}[/dim]")

    def confirm(self, prompt: str) -> bool:
        """Ask for a gated action on the controlling terminal (agent.approval opens /dev/tty itself; piped
        input never answers), showing exactly what will run (the spinner pauses meanwhile)."""
        status = self._status
        if status is not None:
            status.stop()
        answer = ask_at_terminal(prompt)  # interrupted (Ctrl-C, SIGTERM, SIGHUP): no spinner thread starts again
        if status is not None:
            status.start()
        return answer

    def ask(self, question: str, default: str) -> str | None:
        """An onboarding question with its default shown; None at end of input; Ctrl-C answers 'skip'."""
        suffix = f" [{default}]" if default != "" else " [none]"
        return self.reader.read(f"{question}{suffix}: ", on_interrupt=SKIP_ANSWER)

    def say(self, text: str) -> None:
        self.console.print(text, markup=False)

    def stream(self, text: str) -> None:
        """Show a piece of the brain's answer as it arrives."""
        self.console.print(text, end="", markup=False, highlight=False, soft_wrap=True)
        self.console.file.flush()

    def show(self, reply: Reply) -> None:
        """Print an answer (a streamed one was shown already: only its tables); the detail form (/details) of a
        run gets its table; an explanation's full text is shown as Markdown."""
        if reply.streamed:
            self.console.print()
        for result in reply.data:
            if reply.details and result.name == "run_method" and not result.is_error and result.content.get("run_id"):
                self.console.print(run_table(self.store.get_run(result.content["run_id"])))
            if result.name == "explain" and not result.is_error and result.content.get("detail") == "full":
                self.console.print(Markdown(reply.text))
                return
        if not reply.streamed:
            self.console.print(reply.text, markup=False)

    # ---- the conversation ----------------------------------------------------------------

    def run(self) -> int:
        """Greet, onboard when needed, and answer lines until /quit or end of input. Returns 0."""
        brain = self.session.brain
        greeting = self.session.greeting()
        if getattr(brain, "fallback_reason", None):
            greeting += f"\n(Commands only: {brain.fallback_reason}.)"
        self.console.print(Panel(greeting, title=f"specpilot ({brain.name} brain)"))
        if not self.skip_onboarding:
            try:
                first = run_onboarding(self.session, self.ask, self.say)
            except InputEnded:
                self.say("Input ended during the questions; your answers so far are saved.")
                return 0
            except Terminated:
                raise
            except KeyboardInterrupt:  # outside a question (a question's Ctrl-C answers 'skip'): on to the chat
                self.say("\nInterrupted; the answers given so far are saved.")
                first = None
            except SpecpilotError as exc:
                self.say(exc.user_message())
                return 1
            if first is not None:
                self.show(first)
        self.say("Type /help for commands, /quit or Ctrl-D to leave.")
        self.converse()
        self.say("Bye. Everything measured is stored; unfinished work will be listed next time.")
        return 0

    def converse(self) -> None:
        """Answer lines until /quit or end of input; Ctrl-C at the prompt only clears the line."""
        while True:
            line = self.reader.read("you> ")
            if line is None:
                return
            line = line.strip()
            if not line:
                continue
            if line.lower() in QUIT:
                return
            if line.lower() == "/help":
                self.say(HELP)
                continue
            try:
                reply = self.session.handle(line)
            except Terminated:
                raise
            except KeyboardInterrupt:
                self.say("\nInterrupted; the request is recorded as unfinished.")
                continue
            self.show(reply)


def log_to_file() -> Path:
    """Send every log line (and Python warnings) to the chat's log file under the specpilot home, not
    to the terminal the conversation is on; return the file."""
    path = home_dir() / LOG_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    logging.captureWarnings(True)
    return path


def run_chat(brain: str = "auto", skip_onboarding: bool = False) -> int:
    """Run ``specpilot chat`` on this process's terminal (or piped stdin); return the exit code."""
    log_to_file()
    stop_on_termination()
    with Store() as store:
        return Chat(brain=brain, store=store, skip_onboarding=skip_onboarding).run()
