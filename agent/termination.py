"""SIGTERM and SIGHUP as :class:`tools.errors.Terminated` (a KeyboardInterrupt): a command stopped by
``kill`` or by its terminal closing records its task as unfinished, as Ctrl-C does, instead of leaving it
"running" with nobody to finish it."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

from tools.errors import Terminated

SIGNALS = tuple(s for s in (getattr(signal, "SIGTERM", None), getattr(signal, "SIGHUP", None)) if s is not None)


def _stop(signum, frame):
    raise Terminated(signal.Signals(signum).name)


def stop_on_termination() -> None:
    """Turn SIGTERM and SIGHUP into :class:`Terminated` for the rest of the process (the main thread only)."""
    if threading.current_thread() is threading.main_thread():
        for sig in SIGNALS:
            signal.signal(sig, _stop)


@contextlib.contextmanager
def terminated_as_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM and SIGHUP raise :class:`Terminated`; the handlers before it come back after
    (the command line run in-process, by a test or a host, leaves its caller's handlers as they were)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = {sig: signal.getsignal(sig) for sig in SIGNALS}
    stop_on_termination()
    try:
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
