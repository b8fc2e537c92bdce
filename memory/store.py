"""The specpilot memory: one SQLite database (sqlite-utils) under the user folder.

Tables (see ``memory.migrations``): measured runs, tasks, saved parameters per method,
onboarding answers, the conversation log (this module), approvals of gated actions
(``memory.approvals``), and cost curves and trained Medusa heads (``memory.machine``). The
database runs in WAL mode with a busy timeout, and every write takes the write lock up front
(``BEGIN IMMEDIATE``), so several processes can use it at once without losing a row.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import sqlite3
import stat
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlite_utils import Database

from memory.approvals import APPROVAL_STATUSES, ApprovalsMixin
from memory.helpers import (BUSY_TIMEOUT_S, DB_FILENAME, DEFAULT_HOME, HOME_ENV, SQLITE_INT_MAX, database_path,
                            decode, dumps,
                            enable_wal, home_dir, loads, require_count, require_str_list, require_text, scalar,
                            settings_key)
from memory.machine import LEGACY_KEYS, MachineMixin
from memory.migrations import (M009_RUN_COLUMNS, foreign_tables, migrate, missing_columns, pending_migrations,
                               unknown_schema, utc_now)
from tools.errors import ApprovalError, ParameterError, RunNotFoundError, StoreError

__all__ = ["APPROVAL_STATUSES", "ApprovalError", "BUSY_TIMEOUT_S", "DB_FILENAME", "DEFAULT_HOME", "HOME_ENV",
           "Store", "database_path", "home_dir", "settings_key"]

log = logging.getLogger(__name__)

RUN_JSON_COLUMNS = ("params", "prompt_ids", "output_ids", "first_divergence", "hardware", "versions",
                    *(name for name, kind in M009_RUN_COLUMNS.items() if kind == "json"))
RUN_BOOL_COLUMNS = ("matches_baseline", "chat", "lossy")
TASK_JSON_COLUMNS = ("plan", "done", "left", "run_ids", "notes")
TASK_STATUSES = ("running", "unfinished", "done", "failed")
OPEN_TASK_STATUSES = ("running", "unfinished")
ONBOARDING_COMPLETE_KEY = "onboarding.complete"


def not_unicode(exc: UnicodeEncodeError) -> ParameterError:
    """A value SQLite cannot store as text (a lone surrogate) as the user's error, not a traceback."""
    return ParameterError(f"a value to store is not valid Unicode text: {exc.reason} at character {exc.start}",
                          hint="send UTF-8 text (JSON \\u escapes must form surrogate pairs)")


class Store(ApprovalsMixin, MachineMixin):
    """The specpilot memory. ``Store()`` opens (and migrates) ``$SPECPILOT_HOME/specpilot.db``.

    Use it as a context manager or call :meth:`close`. ``store.db`` is the underlying
    ``sqlite_utils.Database`` for ad-hoc queries.
    """

    def __init__(self, path: str | Path | None = None):
        self.path = Path(path) if path is not None else database_path()
        self._lock = threading.RLock()  # one connection may be shared by threads (e.g. the MCP server)
        if self.path.exists() and not self.path.is_file():
            raise StoreError(f"the memory database {self.path} is not a file", hint=f"move it aside or set {HOME_ENV} "
                                                                                    "to another folder")
        self.read_only = self.path.exists() and not (os.access(self.path, os.W_OK)
                                                     and os.access(self.path.parent, os.W_OK))
        self._made_beside: list[Path] = []  # -wal/-shm files a read-only open created (made writable again)
        try:
            self.db = self._connect()
        except sqlite3.Error as exc:
            raise self._error("opened", exc) from exc
        try:
            self.applied_migrations = self._open_schema()
            self._run_columns = [c for c in self.db["runs"].columns_dict if c != "extra"]
        except sqlite3.Error as exc:
            self.close()
            raise self._error("opened", exc) from exc
        except BaseException:
            self.close()
            raise
        self._writable_beside()

    def _beside(self) -> list[Path]:
        """The -wal and -shm files SQLite keeps beside the database in WAL mode."""
        return [self.path.with_name(self.path.name + suffix) for suffix in ("-wal", "-shm")]

    def _connect(self) -> Database:
        """The connection: read-write (WAL mode), or read-only when the file or its folder cannot be written.

        Read-only, a database whose -wal holds nothing is opened ``immutable=1`` (SQLite then needs no -shm
        file, so it reads from a read-only mount and leaves nothing behind); one with pending -wal content is
        opened ``mode=ro`` to read it too, and any -wal/-shm that open creates is made writable again."""
        if self.read_only:
            wal = self._beside()[0]
            pending = wal.exists() and wal.stat().st_size > 0
            self._made_beside = [p for p in self._beside() if not p.exists()]
            query = "mode=ro" if pending else "mode=ro&immutable=1"
            conn = sqlite3.connect(f"{self.path.resolve().as_uri()}?{query}", uri=True, timeout=BUSY_TIMEOUT_S,
                                   check_same_thread=False)
            db = Database(conn, execute_plugins=False)
            try:
                self._refuse_damaged(db)
            except BaseException:
                db.close()
                raise
            log.warning("the memory database %s is read-only: reading only, nothing new is stored", self.path)
            return db
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create the folder {self.path.parent} for the memory database: {exc}",
                             hint=f"set {HOME_ENV} to a folder you can write to") from exc
        db = Database(sqlite3.connect(str(self.path), timeout=BUSY_TIMEOUT_S, check_same_thread=False),
                      execute_plugins=False)
        try:
            self._refuse_damaged(db)  # before anything, even the switch to WAL mode, is written to it
            enable_wal(db)
            db.execute("PRAGMA synchronous=NORMAL")  # safe in WAL mode: durable up to the last checkpoint
        except BaseException:
            db.close()
            raise
        return db

    def _refuse_damaged(self, db: Database) -> None:
        """Raise a :class:`StoreError` when SQLite finds the database's pages damaged (``PRAGMA quick_check``);
        a file that is no database at all raises ``sqlite3.DatabaseError`` here.

        Checked on every open because a command that only writes would never notice, and more rows written
        into a damaged file make it harder to recover. It reads each page once (milliseconds for a memory of
        thousands of runs)."""
        found = [str(row[0]) for row in db.execute("PRAGMA quick_check(1)").fetchall()]
        if found != ["ok"]:
            lines = [line for text in found for line in text.splitlines() if not line.startswith("***")]
            detail = " ".join(lines)[:200] or "no details"
            raise StoreError(f"the memory database {self.path} could not be opened: SQLite finds it damaged "
                             f"({detail})", hint=self._damaged_hint())

    def _damaged_hint(self) -> str:
        """What to do with a damaged database file."""
        return (f"the file is damaged: move it aside (e.g. to {self.path.name}.broken) and specpilot starts a "
                "new memory")

    def _writable_beside(self) -> None:
        """Give the owner write permission on -wal/-shm files a read-only open created (SQLite makes them with
        the database's own 0444 mode, and `chmod u+w specpilot.db` alone would then not make it writable)."""
        for path in self._made_beside:
            with contextlib.suppress(OSError):
                mode = path.stat().st_mode
                if not mode & stat.S_IWUSR:
                    path.chmod(mode | stat.S_IWUSR)

    def _open_schema(self) -> list[str]:
        """Refuse a schema this version does not understand, or another program's database; migrate (when
        writable); check the columns."""
        foreign = foreign_tables(self.db)
        if foreign:
            raise StoreError(f"{self.path} is an SQLite database of another program (its tables: "
                             f"{', '.join(foreign[:6])}); specpilot leaves it as it is",
                             hint=f"set {HOME_ENV} to another folder, or move that file aside, and specpilot starts "
                                  "a new memory")
        newer = unknown_schema(self.db)
        if newer:
            raise StoreError(f"the memory database {self.path} was written by a newer specpilot: {newer}",
                             hint=f"upgrade specpilot, or set {HOME_ENV} to another folder to start a new memory "
                                  "(the file is left as it is)")
        if self.read_only:
            pending = pending_migrations(self.db)
            if pending:
                raise StoreError(f"the memory database {self.path} is read-only and needs {len(pending)} schema "
                                 f"update(s) this version makes ({', '.join(pending[:3])})",
                                 hint=f"make it writable (chmod u+w {self.path}) or set {HOME_ENV} to another folder")
            applied = []
        else:
            applied = migrate(self.db)
        missing = missing_columns(self.db)
        if missing:
            raise StoreError(f"the memory database {self.path} does not have the tables and columns specpilot "
                             f"expects (missing: {', '.join(missing[:6])})",
                             hint=f"move the file aside (it is kept as it is) or set {HOME_ENV} to another folder, "
                                  "and specpilot starts a new memory")
        return applied

    def _error(self, doing: str, exc: BaseException) -> StoreError:
        """A database error as a :class:`StoreError` naming the file and what to do."""
        text = str(exc)
        if text.startswith("Could not decode to UTF-8"):  # specpilot stores only UTF-8: the value was damaged
            hint = self._damaged_hint()
        elif "disk is full" in text or "database or disk is full" in text:
            hint = (f"the disk holding {self.path.parent} is full: free some space there, or set {HOME_ENV} to a "
                    "folder on another disk; what is stored so far is kept")
        elif "not a database" in text or "malformed" in text or "corrupt" in text:
            hint = self._damaged_hint()
        elif "readonly" in text or "read-only" in text or self.read_only:
            hint = f"the file is read-only: make it writable (chmod u+w {self.path}) or set {HOME_ENV} to another folder"
        elif "locked" in text or "busy" in text:
            hint = "another specpilot process is writing to it: try again when it has finished"
        elif "unable to open" in text:
            hint = f"check that {self.path.parent} exists and can be written, or set {HOME_ENV} to another folder"
        else:
            hint = f"run with -v for the details; moving {self.path} aside starts a new memory"
        return StoreError(f"the memory database {self.path} could not be {doing}: {text}", hint=hint)

    def close(self) -> None:
        """Close the database connection."""
        self.db.close()
        self._writable_beside()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    # ---- plumbing --------------------------------------------------------------------------

    @contextmanager
    def _write(self) -> Iterator[Database]:
        """A write transaction that takes the write lock at once (waits up to the busy timeout)."""
        if self.read_only:
            raise StoreError(f"the memory database {self.path} is read-only: nothing can be stored",
                             hint=f"make it writable (chmod u+w {self.path}) or set {HOME_ENV} to another folder")
        with self._lock:
            try:
                self.db.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise self._error("written", exc) from exc
            try:
                yield self.db
            except sqlite3.Error as exc:
                self.db.rollback()
                raise self._error("written", exc) from exc
            except UnicodeEncodeError as exc:
                self.db.rollback()
                raise not_unicode(exc) from None
            except BaseException:
                self.db.rollback()
                raise
            try:
                self.db.execute("COMMIT")
            except sqlite3.Error as exc:
                self.db.rollback()
                raise self._error("written", exc) from exc

    def _rows(self, sql: str, params: list | tuple = ()) -> list[dict]:
        with self._lock:
            try:
                return list(self.db.query(sql, params))
            except sqlite3.Error as exc:
                raise self._error("read", exc) from exc
            except UnicodeEncodeError as exc:
                raise not_unicode(exc) from None

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
            if key in RUN_JSON_COLUMNS and key in self._run_columns:
                row[key] = dumps(value)
            elif key in self._run_columns and key in RUN_BOOL_COLUMNS and isinstance(value, bool):
                row[key] = int(value)
            elif key in self._run_columns and scalar(value) is not NotImplemented:
                row[key] = scalar(value)
            else:
                extra[key] = value  # unknown keys, and a list/dict where a column holds a scalar
        row["extra"] = dumps(extra) if extra else None
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
        out = decode(row, RUN_JSON_COLUMNS, RUN_BOOL_COLUMNS)
        out.update(loads(out.pop("extra", None)) or {})
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
                params.append(int(value) if isinstance(value, bool) else scalar(value))
        sql = "select * from runs"
        if clauses:
            sql += " where " + " and ".join(clauses)
        sql += " order by created_at desc, rowid desc"
        if limit is not None:
            sql += " limit ?"
            params.append(require_count("limit", limit))
        return [self._decode_run(r) for r in self._rows(sql, params)]

    def list_runs(self, limit: int = 20, method: str | None = None, task_id: int | None = None) -> list[dict]:
        """The newest ``limit`` runs, optionally only one method's or one task's, newest first.

        A task's runs are those stored with its ``task_id`` and those linked to it with
        :meth:`update_task` (``run_ids``).
        """
        require_count("limit", limit)
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
        require_text("request", request)
        require_text("kind", kind)
        plan = require_str_list("plan", plan)
        now = utc_now()
        row = {"created_at": now, "updated_at": now, "request": request, "kind": kind, "status": "running",
               "plan": dumps(plan), "done": "[]", "left": dumps(plan), "run_ids": "[]", "notes": "[]"}
        with self._write() as db:
            return db["tasks"].insert(row).last_pk

    def get_task(self, task_id: int) -> dict:
        """The task ``task_id`` with its lists decoded (plan, done, left, run_ids, notes)."""
        fits = isinstance(task_id, int) and not isinstance(task_id, bool) and 0 <= task_id <= SQLITE_INT_MAX
        rows = self._rows("select * from tasks where id = ?", [task_id]) if fits else []
        if not rows:
            raise RunNotFoundError(f"no stored task has the id {task_id!r}",
                                   hint="list the stored tasks (/tasks in `specpilot chat`) and use one of their ids")
        return decode(rows[0], TASK_JSON_COLUMNS)

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
        done = require_str_list("done", done) if done is not None else None
        left = require_str_list("left", left) if left is not None else None
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
                updates["done"], updates["left"] = dumps(task["done"]), dumps(task["left"])
            if run_ids:
                updates["run_ids"] = dumps(task["run_ids"] + [r for r in dict.fromkeys(run_ids)
                                                               if r not in task["run_ids"]])
            if note is not None:
                updates["notes"] = dumps(task["notes"] + [{"at": now, "text": str(note)}])
            db["tasks"].update(task_id, updates)
        return self.get_task(task_id)

    def list_tasks(self, status: str | None = None) -> list[dict]:
        """Stored tasks, newest first, optionally only those with ``status``."""
        if status is not None and status not in TASK_STATUSES:
            raise ParameterError(f"unknown task status {status!r}", hint=f"use one of: {', '.join(TASK_STATUSES)}")
        where, params = ("where status = ?", [status]) if status else ("", [])
        rows = self._rows(f"select * from tasks {where} order by id desc", params)
        return [decode(r, TASK_JSON_COLUMNS) for r in rows]

    def unfinished_tasks(self) -> list[dict]:
        """Tasks not finished: status ``unfinished``, or ``running`` (possibly cut off), newest first."""
        marks = ", ".join("?" for _ in OPEN_TASK_STATUSES)
        rows = self._rows(f"select * from tasks where status in ({marks}) order by id desc", OPEN_TASK_STATUSES)
        return [decode(r, TASK_JSON_COLUMNS) for r in rows]

    # ---- parameters per method -------------------------------------------------------------

    def save_params(self, method: str, params: dict) -> None:
        """Save ``params`` for ``method``; earlier saves stay in the history."""
        require_text("method", method)
        if not isinstance(params, dict):
            raise ParameterError(f"params must be a dict, got {type(params).__name__}")
        with self._write() as db:
            db["method_params"].insert({"method": method, "params": dumps(params), "saved_at": utc_now()})

    def update_params(self, method: str, changes: dict, replace: bool = False,
                      check: Callable[[dict], None] | None = None) -> dict:
        """Merge ``changes`` into the parameters saved last for ``method`` (``replace``: instead of them) and
        save the result; return it. Read, merge, ``check`` (raise to refuse: nothing is saved) and write
        happen in one transaction, so concurrent updates from other processes are all kept."""
        require_text("method", method)
        if not isinstance(changes, dict):
            raise ParameterError(f"params must be a dict, got {type(changes).__name__}")
        with self._write() as db:
            merged = dict(changes) if replace else {**(self.get_params(method) or {}), **changes}
            if check is not None:
                check(merged)
            db["method_params"].insert({"method": method, "params": dumps(merged), "saved_at": utc_now()})
        return merged

    def get_params(self, method: str) -> dict | None:
        """The parameters saved last for ``method``, or ``None`` if none were saved."""
        rows = self._rows("select params from method_params where method = ? order by id desc limit 1", [method])
        return loads(rows[0]["params"]) if rows else None

    def params_history(self, method: str) -> list[dict]:
        """Every save for ``method``, newest first, as ``{"params", "saved_at"}``."""
        rows = self._rows("select params, saved_at from method_params where method = ? order by id desc", [method])
        return [decode(r, ("params",)) for r in rows]

    def all_params(self) -> dict[str, dict]:
        """The latest saved parameters of every method, as ``{method: params}``."""
        rows = self._rows("select method, params from method_params where id in "
                          "(select max(id) from method_params group by method) order by method")
        return {r["method"]: loads(r["params"]) for r in rows}

    # ---- onboarding answers ----------------------------------------------------------------

    def save_answer(self, key: str, value: Any) -> None:
        """Save (or replace) the onboarding answer ``key``; ``value`` is any JSON value.

        The legacy keys ``cost_curve`` and ``medusa_heads`` go to their own tables, entry by entry
        (see ``memory.machine``); new code calls :meth:`save_cost_curve` / :meth:`save_trained_heads`.
        """
        require_text("key", key)
        if key in LEGACY_KEYS:
            self._save_legacy_answer(key, value)
            return
        # one INSERT ... ON CONFLICT: sqlite-utils' upsert (INSERT OR IGNORE, then UPDATE) drops the row without an
        # error when the disk is full
        with self._write() as db:
            db.execute("insert into onboarding_answers (key, value, updated_at) values (?, ?, ?) on conflict (key) "
                       "do update set value = excluded.value, updated_at = excluded.updated_at",
                       [key, dumps(value), utc_now()])

    def get_answer(self, key: str, default: Any = None) -> Any:
        """The saved answer ``key``, or ``default`` when it was never answered (legacy keys: see
        :meth:`save_answer`)."""
        if key in LEGACY_KEYS:
            found = self._legacy_answer(key)
            return default if found is None else found
        rows = self._rows("select value from onboarding_answers where key = ?", [key])
        return loads(rows[0]["value"]) if rows else default

    def all_answers(self) -> dict[str, Any]:
        """Every saved onboarding answer as ``{key: value}`` (cost curves and heads are not answers)."""
        rows = self._rows("select key, value from onboarding_answers")
        return {r["key"]: loads(r["value"]) for r in rows if r["key"] not in LEGACY_KEYS}

    def onboarding_complete(self) -> bool:
        """Whether onboarding was finished (see :meth:`mark_onboarding_complete`)."""
        return bool(self.get_answer(ONBOARDING_COMPLETE_KEY, False))

    def mark_onboarding_complete(self) -> None:
        """Record that onboarding is finished, so later sessions do not ask again."""
        self.save_answer(ONBOARDING_COMPLETE_KEY, True)

    # ---- conversation log ------------------------------------------------------------------

    def log_message(self, session_id: str, role: str, content: str | dict) -> int:
        """Append a message (text or a JSON-able structure) to a session's log; return its id."""
        require_text("session_id", session_id)
        require_text("role", role)
        with self._write() as db:
            return db["messages"].insert({"session_id": session_id, "created_at": utc_now(), "role": role,
                                          "content": dumps(content)}).last_pk

    def conversation(self, session_id: str) -> list[dict]:
        """The messages of one session in the order they were logged, content decoded."""
        rows = self._rows("select * from messages where session_id = ? order by id", [session_id])
        return [decode(r, ("content",)) for r in rows]
