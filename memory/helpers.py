"""Helpers shared by the parts of the store: the user folder, the settings key, JSON encoding of
column values, argument checks, and switching a database to WAL mode."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

from sqlite_utils import Database

from tools.errors import ParameterError, StoreError

HOME_ENV = "SPECPILOT_HOME"
DEFAULT_HOME = "~/.specpilot"
DB_FILENAME = "specpilot.db"
BUSY_TIMEOUT_S = 60.0
SQLITE_INT_MAX = 2 ** 63 - 1  # the largest integer SQLite stores: an id or a limit beyond it names nothing


def home_dir() -> Path:
    """The specpilot user folder: ``$SPECPILOT_HOME``, default ``~/.specpilot`` (created if missing).

    StoreError (one sentence, what to do) when it is not a folder or cannot be made."""
    home = Path(os.environ.get(HOME_ENV) or DEFAULT_HOME).expanduser()
    if home.exists() and not home.is_dir():
        raise StoreError(f"the specpilot folder {home} is a file, not a folder",
                         hint=f"set {HOME_ENV} to a folder (it is created if missing), or move the file aside")
    try:
        home.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreError(f"cannot create the specpilot folder {home}: {exc.strerror or exc}",
                         hint=f"set {HOME_ENV} to a folder you can write to") from None
    return home


def database_path() -> Path:
    """Path of the specpilot database inside :func:`home_dir`."""
    return home_dir() / DB_FILENAME


def settings_key(settings: Any, prompt: Any) -> str:
    """A stable 16-hex-digit hash of ``settings`` and ``prompt``, used as a run's ``settings_key``.

    Equal settings (whatever their key order) and an equal prompt give the same key, so a
    resumable benchmark can skip prompts it has already measured (:meth:`Store.find_run_by_key`).
    """
    canonical = json.dumps({"settings": settings, "prompt": prompt}, sort_keys=True, default=json_default)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]


def json_default(value: Any) -> Any:
    """Make numpy/torch values, dataclasses, pydantic models and paths JSON-serialisable."""
    if hasattr(value, "model_dump"):
        return value.model_dump()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if hasattr(value, "tolist"):  # numpy arrays and scalars, torch tensors
        return value.tolist()
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    return str(value)  # paths, torch dtypes, devices: keep their readable form


def dumps(value: Any) -> str | None:
    """``value`` as JSON text (``None`` stays ``None``, i.e. SQL null)."""
    return None if value is None else json.dumps(value, default=json_default, ensure_ascii=False)


def loads(text: str | None) -> Any:
    """The value of a JSON column (``None`` for SQL null)."""
    return None if text is None else json.loads(text)


def scalar(value: Any) -> Any:
    """A value SQLite stores as is, or ``NotImplemented`` for a list/dict that needs JSON."""
    if value is None or isinstance(value, (str, int, float)):
        return value
    if isinstance(value, (list, tuple, dict, set, frozenset)):
        return NotImplemented
    if hasattr(value, "item"):  # numpy / torch scalars
        try:
            return value.item()
        except (ValueError, RuntimeError):
            return NotImplemented
    return str(value)


def decode(row: dict, json_columns: tuple[str, ...], bool_columns: tuple[str, ...] = ()) -> dict:
    """A copy of ``row`` with its JSON columns decoded and its 0/1 columns made bools."""
    out = dict(row)
    for column in json_columns:
        if column in out:
            out[column] = loads(out[column])
    for column in bool_columns:
        if out.get(column) is not None:
            out[column] = bool(out[column])
    return out


def require_text(name: str, value: Any) -> str:
    """``value`` if it is a non-empty string, else :class:`ParameterError`."""
    if not isinstance(value, str) or not value.strip():
        raise ParameterError(f"{name} must be a non-empty string, got {value!r}")
    return value


def require_count(name: str, value: Any, minimum: int = 0) -> int:
    """``value`` if it is an int (not a bool) from ``minimum`` to SQLITE_INT_MAX, else :class:`ParameterError`."""
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= SQLITE_INT_MAX:
        raise ParameterError(f"{name} must be a whole number from {minimum} to {SQLITE_INT_MAX:,}, got {value!r:.40}")
    return value


def require_str_list(name: str, value: Any) -> list[str]:
    """``value`` as a list if it is a list/tuple of strings, else :class:`ParameterError`."""
    if isinstance(value, str) or not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise ParameterError(f"{name} must be a list of strings, got {value!r}")
    return list(value)


def enable_wal(db: Database) -> None:
    """Switch ``db`` to WAL mode, retrying while another process holds a lock.

    Changing the journal mode of a new database needs an exclusive lock, and SQLite answers
    "database is locked" at once (without waiting out the busy timeout) when two processes
    race for it from a shared lock; so retry with a short backoff up to the busy timeout.
    """
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    delay = 0.005
    while True:
        try:
            db.enable_wal()
            return
        except sqlite3.OperationalError as exc:
            lock_error = "locked" in str(exc) or "busy" in str(exc)
            if not lock_error or time.monotonic() > deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 0.2)
