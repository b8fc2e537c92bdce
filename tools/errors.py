"""The project's own exception types: errors a user can cause, each with a message that says what to do."""

from __future__ import annotations


class SpecpilotError(Exception):
    """Base class for errors shown to the user as a clear message (never a traceback)."""

    hint: str = ""

    def __init__(self, message: str, hint: str = ""):
        super().__init__(message)
        self.hint = hint or self.hint

    def user_message(self) -> str:
        """Return the message with its hint, as shown to the user."""
        text = str(self)
        return f"{text}\n  what to do: {self.hint}" if self.hint else text


class ParameterError(SpecpilotError, ValueError):
    """A parameter is out of range or inconsistent with another one."""


class ModelNotFoundError(SpecpilotError):
    """A model reference could not be resolved to weights on this machine."""


class ModelIntegrityError(SpecpilotError):
    """A model file is corrupt or partial (checksum or size mismatch)."""


class VocabularyMismatchError(SpecpilotError, ValueError):
    """Target and draft models do not share a vocabulary."""


class DependencyError(SpecpilotError):
    """A package needed for this action is missing or unusable."""


class RunNotFoundError(SpecpilotError):
    """A stored run or task id does not exist."""


class ApprovalError(SpecpilotError):
    """An approval id is unknown, or its state does not allow what was asked (decide, consume)."""


class StoreError(SpecpilotError):
    """The memory database cannot be opened, read or written (the message names the file)."""


class Terminated(KeyboardInterrupt):
    """The process was told to stop (SIGTERM, or SIGHUP when its terminal closed): handled as Ctrl-C is (what
    finished stays stored, the task in progress is recorded as unfinished), then the process ends."""


def interruption(exc: BaseException) -> str:
    """How a KeyboardInterrupt came, for a task's note: "interrupted by SIGTERM" or "interrupted by the user"."""
    return f"interrupted by {exc}" if isinstance(exc, Terminated) and str(exc) else "interrupted by the user"
