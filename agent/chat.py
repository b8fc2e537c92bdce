"""``specpilot chat``: the terminal conversation.

Rich output; prompt_toolkit input with history when stdin is a terminal, plain line reading when
it is piped. Greets with what memory holds, runs onboarding on the first run, then answers each
message through a :class:`agent.loop.Session` (slash commands /help /params /tasks /runs /quit and
the rest). A spinner runs while tools work; approvals are asked y/n at the terminal.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import TextIO

from rich.console import Console
from rich.markdown import Markdown
from rich.panel import Panel

from agent.brains import make_brain
from agent.brains.base import Reply
from agent.loop import Session
from agent.onboarding import InputEnded, run_onboarding
from agent.render import run_table
from memory import Store, home_dir
from tools.errors import SpecpilotError

HISTORY_FILE = "chat_history"
QUIT = ("/quit", "/exit", "/q")
HELP = """Commands: /help  /params (saved parameters)  /tasks (tasks, done and not done)  /runs (stored runs)
          /run [method] PROMPT  /compare [METHODS] PROMPT  /lookup RUN_ID  /guide METHOD  /explain TOPIC  /deps [METHOD]
          /install PKG...  /train  /report  /share DEST  /quit
Or just say what you want, e.g. "run draft: write a quicksort in Python",
"compare draft, medusa and lookahead on 'Explain quantum computing'" or
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

    def read(self, prompt: str) -> str | None:
        """One line from the person (without the newline), or None at end of input."""
        if self.session is not None:
            try:
                return self.session.prompt(prompt)
            except EOFError:
                return None
        self.console.print(prompt, end="", markup=False, highlight=False)
        self.console.file.flush()
        line = self.stdin.readline()
        if not line:
            return None
        return line.rstrip("\n")


class Chat:
    """The terminal chat: a console, a line reader, a session, and a spinner around tool calls."""

    def __init__(self, brain: str = "auto", stdin: TextIO | None = None, console: Console | None = None,
                 store: Store | None = None):
        self.console = console or Console(highlight=False)
        self.reader = LineReader(stdin or sys.stdin, self.console)
        self.store = store or Store()
        self._status = None
        self.session = Session(self.store, make_brain(brain), confirm=self.confirm, activity=self.spinner,
                               progress=self.progress)

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
        """Ask y/n for a gated action, showing exactly what will run (the spinner pauses meanwhile)."""
        status = self._status
        if status is not None:
            status.stop()
        try:
            self.console.print(Panel(prompt.rstrip(), title="approval needed", border_style="yellow"))
            answer = self.reader.read("Approve? [y/N] ")
            return (answer or "").strip().lower() in ("y", "yes")
        finally:
            if status is not None:
                status.start()

    def ask(self, question: str, default: str) -> str | None:
        """An onboarding question with its default shown; None at end of input."""
        suffix = f" [{default}]" if default != "" else " [none]"
        return self.reader.read(f"{question}{suffix}: ")

    def say(self, text: str) -> None:
        self.console.print(text, markup=False)

    def show(self, reply: Reply) -> None:
        """Print an answer; a run gets its table as well."""
        for result in reply.data:
            if result.name == "run_method" and not result.is_error and result.content.get("run_id"):
                self.console.print(run_table(self.store.get_run(result.content["run_id"])))
            if result.name == "explain" and not result.is_error and reply.text == result.content["text"].strip():
                self.console.print(Markdown(reply.text))
                return
        self.console.print(reply.text, markup=False)

    # ---- the conversation ----------------------------------------------------------------

    def run(self) -> int:
        """Greet, onboard when needed, and answer lines until /quit or end of input. Returns 0."""
        self.console.print(Panel(self.session.greeting(), title=f"specpilot ({self.session.brain.name} brain)"))
        try:
            first = run_onboarding(self.session, self.ask, self.say)
        except InputEnded:
            self.say("Input ended during the questions; your answers so far are saved.")
            return 0
        except SpecpilotError as exc:
            self.say(exc.user_message())
            return 1
        if first is not None:
            self.show(first)
        self.say("Type /help for commands, /quit to leave.")
        while True:
            line = self.reader.read("you> ")
            if line is None:
                break
            line = line.strip()
            if not line:
                continue
            if line.lower() in QUIT:
                break
            if line.lower() == "/help":
                self.say(HELP)
                continue
            try:
                reply = self.session.handle(line)
            except KeyboardInterrupt:
                self.say("Interrupted; the request is recorded as unfinished.")
                continue
            self.show(reply)
        self.say("Bye. Everything measured is stored; unfinished work will be listed next time.")
        return 0


def run_chat(brain: str = "auto") -> int:
    """Run ``specpilot chat`` on this process's terminal (or piped stdin); return the exit code."""
    with Store() as store:
        return Chat(brain=brain, store=store).run()
