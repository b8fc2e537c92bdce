"""The specpilot memory: one SQLite database (sqlite-utils) under the user folder.

Tables (see ``memory.migrations``): measured runs, tasks, saved parameters per method,
onboarding answers, approvals of gated actions, and the conversation log. The database
runs in WAL mode with a busy timeout, and every write takes the write lock up front
(``BEGIN IMMEDIATE``), so several processes can use it at once without losing a row.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import secrets
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlite_utils import Database

from memory.migrations import migrate, utc_now
from tools.errors import ApprovalError, ParameterError, RunNotFoundError, SpecpilotError

HOME_ENV = "SPECPILOT_HOME"
DEFAULT_HOME = "~/.specpilot"
DB_FILENAME = "specpilot.db"
BUSY_TIMEOUT_S = 60.0

RUN_JSON_COLUMNS = ("params", "prompt_ids", "output_ids", "first_divergence", "hardware", "versions")
RUN_BOOL_COLUMNS = ("matches_baseline",)
TASK_JSON_COLUMNS = ("plan", "done", "left", "run_ids", "notes")
TASK_STATUSES = ("running", "unfinished", "done", "failed")
OPEN_TASK_STATUSES = ("running", "unfinished")
APPROVAL_STATUSES = ("pending", "approved", "denied", "consumed")
ONBOARDING_COMPLETE_KEY = "onboarding.complete"



def home_dir() -> Path:
    """The specpilot user folder: ``$SPECPILOT_HOME``, default ``~/.specpilot`` (created if missing)."""
    home = Path(os.environ.get(HOME_ENV) or DEFAULT_HOME).expanduser()
    home.mkdir(parents=True, exist_ok=True)
    return home


def database_path() -> Path:
    """Path of the specpilot database inside :func:`home_dir`."""
    return home_dir() / DB_FILENAME


def settings_key(settings: Any, prompt: Any) -> str:
    """A stable 16-hex-digit hash of ``settings`` and ``prompt``, used as a run's ``settings_key``.

    Equal settings (whatever their key order) and an equal prompt give the same key, so a
    resumable benchmark can skip prompts it has already measured (:meth:`Store.find_run_by_key`).
    """
    canonical = json.dumps({"settings": settings, "prompt": prompt}, sort_keys=True, default=_json_default)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]


def _json_default(value: Any) -> Any:
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


def _dumps(value: Any) -> str | None:
    return None if value is None else json.dumps(value, default=_json_default, ensure_ascii=False)


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _scalar(value: Any) -> Any:
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


def _decode(row: dict, json_columns: tuple[str, ...], bool_columns: tuple[str, ...] = ()) -> dict:
    out = dict(row)
    for column in json_columns:
        if column in out:
            out[column] = _loads(out[column])
    for column in bool_columns:
        if out.get(column) is not None:
            out[column] = bool(out[column])
    return out


def _require_text(name: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ParameterError(f"{name} must be a non-empty string, got {value!r}")
    return value


def _require_str_list(name: str, value: Any) -> list[str]:
    if isinstance(value, str) or not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise ParameterError(f"{name} must be a list of strings, got {value!r}")
    return list(value)


def _enable_wal(db: Database) -> None:
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


class Store:
    """The specpilot memory. ``Store()`` opens (and migrates) ``$SPECPILOT_HOME/specpilot.db``.

    Use it as a context manager or call :meth:`close`. ``store.db`` is the underlying
    ``sqlite_utils.Database`` for ad-hoc queries.
    """

    def __init__(self, path: str | Path | None = None):
        self.path = Path(path) if path is not None else database_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(str(self.path), timeout=BUSY_TIMEOUT_S, check_same_thread=False)
        self.db = Database(conn, execute_plugins=False)
        self._lock = threading.RLock()  # one connection may be shared by threads (e.g. the MCP server)
        try:
            _enable_wal(self.db)
            self.db.execute("PRAGMA synchronous=NORMAL")  # safe in WAL mode: durable up to the last checkpoint
            self.applied_migrations = migrate(self.db)
        except BaseException:
            self.db.close()
            raise
        self._run_columns = [c for c in self.db["runs"].columns_dict if c != "extra"]

    def close(self) -> None:
        """Close the database connection."""
        self.db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    # ---- plumbing --------------------------------------------------------------------------

    @contextmanager
    def _write(self) -> Iterator[Database]:
        """A write transaction that takes the write lock at once (waits up to the busy timeout)."""
        with self._lock:
            self.db.execute("BEGIN IMMEDIATE")
            try:
                yield self.db
            except BaseException:
                self.db.rollback()
                raise
            self.db.execute("COMMIT")

    def _rows(self, sql: str, params: list | tuple = ()) -> list[dict]:
        with self._lock:
            return list(self.db.query(sql, params))

    def _exists_in(self, table: str, column: str) -> Callable[[str], bool]:
        """A test of whether ``table`` already has a row whose ``column`` equals a value."""
        return lambda value: bool(self._rows(f"select 1 from [{table}] where [{column}] = ? limit 1", [value]))

    @staticmethod
    def _new_id(existing: Callable[[str], bool]) -> str:
        """A fresh 8-hex-digit id that ``existing`` does not know yet."""
        while True:
            candidate = secrets.token_hex(4)
            if not existing(candidate):
                return candidate

    # ---- runs ------------------------------------------------------------------------------

    def add_run(self, record: dict) -> str:
        """Store a measured run and return its ``run_id`` (a short unique id is made if missing).

        Lists and dicts are stored as JSON; keys without a column of their own are kept in
        the ``extra`` JSON column and come back as top-level keys from :meth:`get_run`.
        """
        if not isinstance(record, dict):
            raise ParameterError(f"a run record must be a dict, got {type(record).__name__}")
        row: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        for key, value in record.items():
            if key in RUN_JSON_COLUMNS:
                row[key] = _dumps(value)
            elif key in self._run_columns and key in RUN_BOOL_COLUMNS and isinstance(value, bool):
                row[key] = int(value)
            elif key in self._run_columns and _scalar(value) is not NotImplemented:
                row[key] = _scalar(value)
            else:
                extra[key] = value  # unknown keys, and a list/dict where a column holds a scalar
        row["extra"] = _dumps(extra) if extra else None
        row["created_at"] = row.get("created_at") or utc_now()
        with self._write() as db:
            exists = self._exists_in("runs", "run_id")
            if row.get("run_id") is None:
                row["run_id"] = self._new_id(exists)
            else:
                row["run_id"] = str(row["run_id"])
                if exists(row["run_id"]):
                    raise ParameterError(
                        f"a run with id {row['run_id']!r} is already stored",
                        hint="leave run_id out and a new unique id is made",
                    )
            db["runs"].insert(row)
        return row["run_id"]

    @staticmethod
    def _decode_run(row: dict) -> dict:
        out = _decode(row, RUN_JSON_COLUMNS, RUN_BOOL_COLUMNS)
        out.update(_loads(out.pop("extra", None)) or {})
        return out

    def get_run(self, run_id: str) -> dict:
        """The stored run ``run_id`` (or a unique prefix of it, 4+ characters), JSON decoded."""
        rows = self._rows("select * from runs where run_id = ?", [str(run_id)])
        if not rows and len(str(run_id)) >= 4:
            rows = self._rows("select * from runs where run_id like ? || '%' escape '\\' limit 6",
                              [str(run_id).replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")])
            if len(rows) > 1:
                ids = ", ".join(r["run_id"] for r in rows[:5])
                raise ParameterError(f"run id prefix {run_id!r} matches several runs ({ids})",
                                     hint="give more characters of the run id")
        if not rows:
            raise RunNotFoundError(f"no stored run has the id {run_id!r}",
                                   hint="list the stored runs with `specpilot runs list` and use one of their ids")
        return self._decode_run(rows[0])

    def find_runs(self, limit: int | None = None, **filters: Any) -> list[dict]:
        """Runs whose columns equal every filter (``None`` matches a missing value), newest first."""
        clauses, params = [], []
        for key, value in filters.items():
            if key not in self._run_columns or key in RUN_JSON_COLUMNS:
                allowed = ", ".join(c for c in self._run_columns if c not in RUN_JSON_COLUMNS)
                raise ParameterError(f"cannot filter runs by {key!r}", hint=f"filter by one of: {allowed}")
            if value is None:
                clauses.append(f"[{key}] is null")
            else:
                clauses.append(f"[{key}] = ?")
                params.append(int(value) if isinstance(value, bool) else _scalar(value))
        sql = "select * from runs"
        if clauses:
            sql += " where " + " and ".join(clauses)
        sql += " order by created_at desc, rowid desc"
        if limit is not None:
            sql += " limit ?"
            params.append(int(limit))
        return [self._decode_run(r) for r in self._rows(sql, params)]

    def list_runs(self, limit: int = 20, method: str | None = None, task_id: int | None = None) -> list[dict]:
        """The newest ``limit`` runs, optionally only one method's or one task's, newest first.

        A task's runs are those stored with its ``task_id`` and those linked to it with
        :meth:`update_task` (``run_ids``).
        """
        clauses, params = [], []
        if method is not None:
            clauses.append("method = ?")
            params.append(method)
        if task_id is not None:
            linked = self.get_task(task_id)["run_ids"]
            marks = ", ".join("?" for _ in linked)
            clauses.append(f"(task_id = ? or run_id in ({marks}))" if linked else "task_id = ?")
            params += [int(task_id), *linked]
        sql = "select * from runs"
        if clauses:
            sql += " where " + " and ".join(clauses)
        sql += " order by created_at desc, rowid desc limit ?"
        return [self._decode_run(r) for r in self._rows(sql, [*params, int(limit)])]

    def last_run(self) -> dict | None:
        """The newest stored run, or ``None`` when there is none."""
        runs = self.list_runs(limit=1)
        return runs[0] if runs else None

    def find_run_by_key(self, key: str) -> dict | None:
        """The newest run stored with ``settings_key == key`` (see :func:`settings_key`), or ``None``."""
        runs = self.find_runs(limit=1, settings_key=key)
        return runs[0] if runs else None

    # ---- tasks -----------------------------------------------------------------------------

    def create_task(self, request: str, kind: str, plan: list[str]) -> int:
        """Record a new task (status ``running``, everything in ``plan`` still left); return its id."""
        _require_text("request", request)
        _require_text("kind", kind)
        plan = _require_str_list("plan", plan)
        now = utc_now()
        row = {"created_at": now, "updated_at": now, "request": request, "kind": kind, "status": "running",
               "plan": _dumps(plan), "done": "[]", "left": _dumps(plan), "run_ids": "[]", "notes": "[]"}
        with self._write() as db:
            return db["tasks"].insert(row).last_pk

    def get_task(self, task_id: int) -> dict:
        """The task ``task_id`` with its lists decoded (plan, done, left, run_ids, notes)."""
        rows = self._rows("select * from tasks where id = ?", [task_id])
        if not rows:
            raise RunNotFoundError(f"no stored task has the id {task_id!r}",
                                   hint="list the stored tasks (/tasks in `specpilot chat`) and use one of their ids")
        return _decode(rows[0], TASK_JSON_COLUMNS)

    def update_task(self, task_id: int, status: str | None = None, done: list[str] | None = None,
                    left: list[str] | None = None, run_ids: list[str] | None = None,
                    note: str | None = None) -> dict:
        """Update a task and return it.

        ``done`` steps are added to the done list and removed from the left list; ``left``
        replaces the list of steps still to do; ``run_ids`` are linked (added once each);
        ``note`` is appended with a timestamp. Read and write happen in one transaction,
        so concurrent updates from other processes are not lost.
        """
        if status is not None and status not in TASK_STATUSES:
            raise ParameterError(f"unknown task status {status!r}", hint=f"use one of: {', '.join(TASK_STATUSES)}")
        done = _require_str_list("done", done) if done is not None else None
        left = _require_str_list("left", left) if left is not None else None
        run_ids = [str(r) for r in run_ids] if run_ids is not None else None
        with self._write() as db:
            task = self.get_task(task_id)
            now = utc_now()
            updates: dict[str, Any] = {"updated_at": now}
            if status is not None:
                updates["status"] = status
            if left is not None:
                task["left"] = left
            if done is not None:
                task["done"] += [step for step in done if step not in task["done"]]
                task["left"] = [step for step in task["left"] if step not in done]
            if done is not None or left is not None:
                updates["done"], updates["left"] = _dumps(task["done"]), _dumps(task["left"])
            if run_ids:
                updates["run_ids"] = _dumps(task["run_ids"] + [r for r in dict.fromkeys(run_ids)
                                                               if r not in task["run_ids"]])
            if note is not None:
                updates["notes"] = _dumps(task["notes"] + [{"at": now, "text": str(note)}])
            db["tasks"].update(task_id, updates)
        return self.get_task(task_id)

    def list_tasks(self, status: str | None = None) -> list[dict]:
        """Stored tasks, newest first, optionally only those with ``status``."""
        if status is not None and status not in TASK_STATUSES:
            raise ParameterError(f"unknown task status {status!r}", hint=f"use one of: {', '.join(TASK_STATUSES)}")
        where, params = ("where status = ?", [status]) if status else ("", [])
        rows = self._rows(f"select * from tasks {where} order by id desc", params)
        return [_decode(r, TASK_JSON_COLUMNS) for r in rows]

    def unfinished_tasks(self) -> list[dict]:
        """Tasks not finished: status ``unfinished``, or ``running`` (possibly cut off), newest first."""
        marks = ", ".join("?" for _ in OPEN_TASK_STATUSES)
        rows = self._rows(f"select * from tasks where status in ({marks}) order by id desc", OPEN_TASK_STATUSES)
        return [_decode(r, TASK_JSON_COLUMNS) for r in rows]

    # ---- parameters per method -------------------------------------------------------------

    def save_params(self, method: str, params: dict) -> None:
        """Save ``params`` for ``method``; earlier saves stay in the history."""
        _require_text("method", method)
        if not isinstance(params, dict):
            raise ParameterError(f"params must be a dict, got {type(params).__name__}")
        with self._write() as db:
            db["method_params"].insert({"method": method, "params": _dumps(params), "saved_at": utc_now()})

    def get_params(self, method: str) -> dict | None:
        """The parameters saved last for ``method``, or ``None`` if none were saved."""
        rows = self._rows("select params from method_params where method = ? order by id desc limit 1", [method])
        return _loads(rows[0]["params"]) if rows else None

    def params_history(self, method: str) -> list[dict]:
        """Every save for ``method``, newest first, as ``{"params", "saved_at"}``."""
        rows = self._rows("select params, saved_at from method_params where method = ? order by id desc", [method])
        return [_decode(r, ("params",)) for r in rows]

    def all_params(self) -> dict[str, dict]:
        """The latest saved parameters of every method, as ``{method: params}``."""
        rows = self._rows("select method, params from method_params where id in "
                          "(select max(id) from method_params group by method) order by method")
        return {r["method"]: _loads(r["params"]) for r in rows}

    # ---- onboarding answers ----------------------------------------------------------------

    def save_answer(self, key: str, value: Any) -> None:
        """Save (or replace) the onboarding answer ``key``; ``value`` is any JSON value."""
        _require_text("key", key)
        with self._write() as db:
            db["onboarding_answers"].upsert({"key": key, "value": _dumps(value), "updated_at": utc_now()}, pk="key")

    def get_answer(self, key: str, default: Any = None) -> Any:
        """The saved answer ``key``, or ``default`` when it was never answered."""
        rows = self._rows("select value from onboarding_answers where key = ?", [key])
        return _loads(rows[0]["value"]) if rows else default

    def all_answers(self) -> dict[str, Any]:
        """Every saved onboarding answer as ``{key: value}``."""
        return {r["key"]: _loads(r["value"]) for r in self._rows("select key, value from onboarding_answers")}

    def onboarding_complete(self) -> bool:
        """Whether onboarding was finished (see :meth:`mark_onboarding_complete`)."""
        return bool(self.get_answer(ONBOARDING_COMPLETE_KEY, False))

    def mark_onboarding_complete(self) -> None:
        """Record that onboarding is finished, so later sessions do not ask again."""
        self.save_answer(ONBOARDING_COMPLETE_KEY, True)

    # ---- approvals -------------------------------------------------------------------------

    def create_approval(self, action: str, arguments: dict, reason: str) -> str:
        """Record a pending approval for ``action`` with its exact ``arguments``; return its id."""
        _require_text("action", action)
        if not isinstance(arguments, dict):
            raise ParameterError(f"arguments must be a dict, got {type(arguments).__name__}")
        with self._write() as db:
            approval_id = self._new_id(self._exists_in("approvals", "id"))
            db["approvals"].insert({"id": approval_id, "created_at": utc_now(), "action": action,
                                    "arguments": _dumps(arguments), "reason": reason, "status": "pending"})
        return approval_id

    def get_approval(self, approval_id: str) -> dict:
        """The approval ``approval_id`` with its arguments decoded."""
        rows = self._rows("select * from approvals where id = ?", [str(approval_id)])
        if not rows:
            raise ApprovalError(f"no approval has the id {approval_id!r}",
                                hint="ask for the action again to get a new approval id")
        return _decode(rows[0], ("arguments",))

    def decide_approval(self, approval_id: str, approved: bool, by: str) -> dict:
        """Approve or deny a pending approval (recording who and when); return it."""
        _require_text("by", by)
        with self._write() as db:
            cursor = db.execute(
                "update approvals set status = ?, decided_by = ?, decided_at = ? where id = ? and status = 'pending'",
                ["approved" if approved else "denied", by, utc_now(), str(approval_id)])
            if cursor.rowcount != 1:
                current = self.get_approval(approval_id)
                raise ApprovalError(
                    f"approval {approval_id} was already decided ({current['status']} by {current['decided_by']} "
                    f"at {current['decided_at']}); a decision cannot be changed",
                    hint="ask for the action again to get a new approval id")
        return self.get_approval(approval_id)

    def consume_approval(self, approval_id: str, action: str | None = None) -> dict:
        """Use an approved approval, exactly once; return it (with the exact arguments to run).

        If ``action`` is given the approval must be for that action. A pending, denied,
        already consumed or unknown approval raises :class:`ApprovalError`.
        """
        with self._write() as db:
            current = self.get_approval(approval_id)
            if action is not None and current["action"] != action:
                raise ApprovalError(f"approval {approval_id} is for {current['action']!r}, not {action!r}",
                                    hint=f"ask for approval of {action!r} itself")
            cursor = db.execute(
                "update approvals set status = 'consumed', consumed_at = ? where id = ? and status = 'approved'",
                [utc_now(), str(approval_id)])
            if cursor.rowcount != 1:
                status = current["status"]
                if status == "pending":
                    message = f"approval {approval_id} has not been approved yet"
                    hint = "the user must approve it first"
                elif status == "denied":
                    message = f"approval {approval_id} was denied by {current['decided_by']}; the action will not run"
                    hint = "ask again if the user changes their mind"
                else:
                    message = (f"approval {approval_id} was already used at {current['consumed_at']}; "
                               "an approval runs its action once")
                    hint = "ask for a new approval to run it again"
                raise ApprovalError(message, hint=hint)
        return self.get_approval(approval_id)

    def list_approvals(self, status: str | None = None) -> list[dict]:
        """Approvals, newest first, optionally only those with ``status``."""
        if status is not None and status not in APPROVAL_STATUSES:
            raise ParameterError(f"unknown approval status {status!r}",
                                 hint=f"use one of: {', '.join(APPROVAL_STATUSES)}")
        where, params = ("where status = ?", [status]) if status else ("", [])
        rows = self._rows(f"select * from approvals {where} order by created_at desc, rowid desc", params)
        return [_decode(r, ("arguments",)) for r in rows]

    # ---- conversation log ------------------------------------------------------------------

    def log_message(self, session_id: str, role: str, content: str | dict) -> int:
        """Append a message (text or a JSON-able structure) to a session's log; return its id."""
        _require_text("session_id", session_id)
        _require_text("role", role)
        with self._write() as db:
            return db["messages"].insert({"session_id": session_id, "created_at": utc_now(), "role": role,
                                          "content": _dumps(content)}).last_pk

    def conversation(self, session_id: str) -> list[dict]:
        """The messages of one session in the order they were logged, content decoded."""
        rows = self._rows("select * from messages where session_id = ? order by id", [session_id])
        return [_decode(r, ("content",)) for r in rows]
