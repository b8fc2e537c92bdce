"""Append-only named migrations for the specpilot database.

Each migration is a function decorated with ``@migration``; they run once each, in the
order they are defined, and their names are recorded in the ``_migrations`` table.
A released migration is never edited or removed: a schema change is a new function
at the end of this file.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import datetime, timezone

from sqlite_utils import Database

log = logging.getLogger(__name__)

MIGRATIONS_TABLE = "_migrations"
# Onboarding answers that held whole dicts before they got tables of their own (m007, m008).
LEGACY_COST_CURVE_KEY = "cost_curve"  # {"<target>|<hardware>": {"curve", "dtype", "measured_at", "hardware"}}
LEGACY_HEADS_KEY = "medusa_heads"  # {target: folder of the Medusa heads trained for it}

Migration = Callable[[Database], None]
MIGRATIONS: list[Migration] = []


def migration(fn: Migration) -> Migration:
    """Register ``fn`` as the next migration (applied after every one defined before it)."""
    MIGRATIONS.append(fn)
    return fn


def utc_now() -> str:
    """The current time as an ISO 8601 UTC timestamp with microseconds."""
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


def applied_migrations(db: Database) -> list[str]:
    """Names of the migrations already applied to ``db``, in the order they were applied."""
    if not db[MIGRATIONS_TABLE].exists():
        return []
    return [row["name"] for row in db.query(f"select name from [{MIGRATIONS_TABLE}] order by rowid")]


def unknown_schema(db: Database) -> str | None:
    """Why ``db`` was written by a newer specpilot than this one (None when this version knows it):
    a ``user_version`` above the number of migrations here, or applied migrations this version lacks."""
    known = [fn.__name__ for fn in MIGRATIONS]
    version = db.execute("PRAGMA user_version").fetchone()[0]
    unknown = [name for name in applied_migrations(db) if name not in known]
    if unknown:
        return (f"it has migrations this specpilot does not know ({', '.join(unknown[:5])}); "
                f"this version knows {len(known)}")
    if version > len(known):
        return f"its schema version is {version}, this specpilot knows versions up to {len(known)}"
    return None


def foreign_tables(db: Database) -> list[str]:
    """The tables of a database that specpilot never made: every table of one without a ``_migrations``
    table (another program's SQLite file), else none. Empty for a new, empty database."""
    if db[MIGRATIONS_TABLE].exists():
        return []
    return [name for name in db.table_names() if not name.startswith("sqlite_")]


def pending_migrations(db: Database) -> list[str]:
    """Names of the migrations this version has that ``db`` has not had yet."""
    done = set(applied_migrations(db))
    return [fn.__name__ for fn in MIGRATIONS if fn.__name__ not in done]


_EXPECTED: dict[tuple[str, ...], dict[str, set[str]]] = {}


def expected_columns() -> dict[str, set[str]]:
    """Every table and its columns as the migrations build them (built once in memory)."""
    key = tuple(fn.__name__ for fn in MIGRATIONS)
    if key not in _EXPECTED:
        scratch = Database(memory=True)
        migrate(scratch, quiet=True)
        _EXPECTED[key] = {t.name: set(t.columns_dict) for t in scratch.tables}
        scratch.close()
    return _EXPECTED[key]


def missing_columns(db: Database) -> list[str]:
    """``table.column`` for each table or column the migrations make that ``db`` lacks (a renamed one)."""
    have = {t.name: set(t.columns_dict) for t in db.tables}
    missing = []
    for table, columns in expected_columns().items():
        if table not in have:
            missing.append(table)
        else:
            missing += [f"{table}.{c}" for c in sorted(columns - have[table])]
    return missing


def mark_version(db: Database) -> None:
    """Record the number of applied migrations as the database's ``user_version``."""
    db.execute(f"PRAGMA user_version = {len(applied_migrations(db))}")


def migrate(db: Database, *, quiet: bool = False) -> list[str]:
    """Apply every migration ``db`` has not had yet; return the names applied now (logged unless ``quiet``).

    All pending migrations run in one ``BEGIN IMMEDIATE`` transaction, so two processes
    opening a new database at the same time neither apply a migration twice nor see a
    half-built schema: the second waits (busy timeout) and then finds nothing to do.
    """
    done = set(applied_migrations(db))
    if all(fn.__name__ in done for fn in MIGRATIONS):
        return []
    db.execute("BEGIN IMMEDIATE")
    try:
        db.execute(
            f"create table if not exists [{MIGRATIONS_TABLE}] (name text primary key, applied_at text not null)"
        )
        done = set(applied_migrations(db))  # re-read under the write lock
        applied_now = []
        for fn in MIGRATIONS:
            if fn.__name__ in done:
                continue
            fn(db)
            db[MIGRATIONS_TABLE].insert({"name": fn.__name__, "applied_at": utc_now()})
            applied_now.append(fn.__name__)
        mark_version(db)
    except BaseException:
        db.rollback()
        raise
    db.execute("COMMIT")
    if applied_now and not quiet:  # quiet: the scratch database of expected_columns, not the user's
        log.info("applied migrations: %s", ", ".join(applied_now))
    return applied_now


# ---- reading the legacy dicts (used by m007/m008 and by Store for the legacy answer keys) -----


def encode_curve(curve: dict) -> str:
    """A cost curve ``{tokens: seconds}`` as the JSON stored in ``cost_curves.curve``, sorted by tokens.

    Raises ``ValueError`` or ``TypeError`` when it is empty or not numbers.
    """
    pairs = sorted((int(n), float(t)) for n, t in curve.items())
    if not pairs or any(n < 1 or t < 0 for n, t in pairs):
        raise ValueError(f"a cost curve maps token counts >= 1 to seconds >= 0, got {curve!r}")
    return json.dumps({str(n): t for n, t in pairs})


def cost_curve_rows(saved: object, default_time: str) -> tuple[list[dict], list[str]]:
    """``cost_curves`` rows from a legacy cost-curve dict, and the keys that could not be read."""
    if not isinstance(saved, dict):
        return [], ["(the whole value is not a dict)"]
    rows, skipped = [], []
    for key, entry in saved.items():
        try:
            key = str(key)
            hardware = str(entry.get("hardware") or key.rpartition("|")[2])
            target = key[: -len(hardware) - 1] if key.endswith("|" + hardware) else key.rpartition("|")[0]
            if not target or not hardware:
                raise ValueError(key)
            rows.append({"target": target, "hardware": hardware, "dtype": str(entry.get("dtype") or "unknown"),
                         "curve": encode_curve(entry["curve"]),
                         "measured_at": str(entry.get("measured_at") or default_time)})
        except (AttributeError, KeyError, TypeError, ValueError):
            skipped.append(str(key))
    return rows, skipped


def trained_heads_rows(saved: object, default_time: str) -> tuple[list[dict], list[str]]:
    """``trained_heads`` rows from a legacy ``{target: folder}`` dict, and the keys that could not be read."""
    if not isinstance(saved, dict):
        return [], ["(the whole value is not a dict)"]
    rows = [{"target": str(t), "path": str(p), "trained_at": default_time} for t, p in saved.items() if t and p]
    return rows, [str(t) for t, p in saved.items() if not (t and p)]


def _move_legacy_answer(db: Database, key: str, table: str,
                        to_rows: Callable[[object, str], tuple[list[dict], list[str]]]) -> None:
    """Move the legacy onboarding answer ``key`` into ``table``; drop the answer if all of it moved."""
    found = list(db.query("select value, updated_at from onboarding_answers where key = ?", [key]))
    if not found:
        return
    try:
        value = json.loads(found[0]["value"]) if found[0]["value"] is not None else None
    except ValueError:
        value = None
    rows, skipped = to_rows(value, found[0]["updated_at"] or utc_now())
    if rows:
        db[table].insert_all(rows, replace=True)
    if skipped:
        log.warning("kept the onboarding answer %r: could not move %s into %s", key, ", ".join(skipped), table)
    else:
        db.execute("delete from onboarding_answers where key = ?", [key])


# ---- migrations: append only, never edit a released one ------------------------------------


@migration
def m001_create_runs(db: Database) -> None:
    db["runs"].create(
        {
            "run_id": str,
            "created_at": str,
            "task_id": int,
            "settings_key": str,
            "method": str,
            "target": str,
            "draft": str,
            "params": str,  # JSON object
            "prompt": str,
            "prompt_ids": str,  # JSON list
            "output_ids": str,  # JSON list
            "output_text": str,
            "new_tokens": int,
            "wall_time_s": float,
            "tokens_per_s": float,
            "baseline_wall_time_s": float,
            "baseline_tokens_per_s": float,
            "speedup": float,
            "acceptance_rate": float,
            "tokens_drafted": int,
            "tokens_accepted": int,
            "steps": int,
            "mean_accepted_per_step": float,
            "matches_baseline": int,  # 0/1, decoded to bool
            "first_divergence": str,  # JSON object or null
            "hardware": str,  # JSON object
            "dtype": str,
            "versions": str,  # JSON object
            "extra": str,  # JSON object: every key of the record that has no column
        },
        pk="run_id",
        not_null=["created_at"],
    )
    db["runs"].create_index(["created_at"])
    db["runs"].create_index(["method", "created_at"])
    db["runs"].create_index(["settings_key"])
    db["runs"].create_index(["task_id"])


@migration
def m002_create_tasks(db: Database) -> None:
    db["tasks"].create(
        {
            "id": int,
            "created_at": str,
            "updated_at": str,
            "request": str,
            "kind": str,
            "status": str,
            "plan": str,  # JSON list of steps
            "done": str,  # JSON list of steps done
            "left": str,  # JSON list of steps still to do
            "run_ids": str,  # JSON list of linked run ids
            "notes": str,  # JSON list of {"at", "text"}
        },
        pk="id",
        not_null=["created_at", "updated_at", "request", "status"],
    )
    db["tasks"].create_index(["status"])


@migration
def m003_create_method_params(db: Database) -> None:
    db["method_params"].create(
        {"id": int, "method": str, "params": str, "saved_at": str},  # params: JSON object
        pk="id",
        not_null=["method", "params", "saved_at"],
    )
    db["method_params"].create_index(["method", "id"])


@migration
def m004_create_onboarding_answers(db: Database) -> None:
    db["onboarding_answers"].create(
        {"key": str, "value": str, "updated_at": str},  # value: JSON
        pk="key",
        not_null=["updated_at"],
    )


@migration
def m005_create_approvals(db: Database) -> None:
    db["approvals"].create(
        {
            "id": str,
            "created_at": str,
            "action": str,
            "arguments": str,  # JSON object: the exact arguments the gated action will run with
            "reason": str,
            "status": str,  # pending / approved / denied / consumed
            "decided_by": str,
            "decided_at": str,
            "consumed_at": str,
        },
        pk="id",
        not_null=["created_at", "action", "arguments", "status"],
    )
    db["approvals"].create_index(["status"])


@migration
def m006_create_messages(db: Database) -> None:
    db["messages"].create(
        {"id": int, "session_id": str, "created_at": str, "role": str, "content": str},  # content: JSON
        pk="id",
        not_null=["session_id", "created_at", "role"],
    )
    db["messages"].create_index(["session_id", "id"])


@migration
def m007_create_cost_curves(db: Database) -> None:
    """Cost curves get a row each (they were one dict in the onboarding answer ``cost_curve``)."""
    db["cost_curves"].create(
        {
            "target": str,
            "hardware": str,  # the CPU or GPU name
            "dtype": str,
            "curve": str,  # JSON object {"<tokens>": seconds}
            "measured_at": str,
        },
        pk=("target", "hardware", "dtype"),
        not_null=["target", "hardware", "dtype", "curve", "measured_at"],
    )
    _move_legacy_answer(db, LEGACY_COST_CURVE_KEY, "cost_curves", cost_curve_rows)


@migration
def m008_create_trained_heads(db: Database) -> None:
    """Trained Medusa heads get a row per target (they were one dict in the answer ``medusa_heads``)."""
    db["trained_heads"].create(
        {"target": str, "path": str, "trained_at": str},  # path: the folder the heads were written to
        pk="target",
        not_null=["target", "path", "trained_at"],
    )
    _move_legacy_answer(db, LEGACY_HEADS_KEY, "trained_heads", trained_heads_rows)


# The columns the typed run record (tools.bench.record.RunRecord, version 2) has beyond m001's; before
# m009 these keys were kept in the ``extra`` JSON column. JSON means a list or dict kept as JSON text.
M009_RUN_COLUMNS = {
    "record_version": int, "medusa_heads": str, "params_source": str, "sizing": "json", "settings": "json",
    "chat": int, "baseline_output_ids": "json", "stopped_by": str, "lossy": int, "times": "json",
    "baseline_times": "json", "repeats": int, "prefill_s": float, "drafted_by_position": "json",
    "accepted_by_position": "json", "method_extra": "json", "peers": "json", "dtype_reason": str,
    "device_map": str, "training_required": str, "draft_required": str, "category": str, "question_id": int,
    "prompt_set": str, "sweep": "json", "legacy": "json",
}


@migration
def m009_run_record_columns(db: Database) -> None:
    """Every field of the typed run record gets a column; keys stored in ``extra`` move into them."""
    for name, kind in M009_RUN_COLUMNS.items():
        db["runs"].add_column(name, str if kind == "json" else kind)
    db.execute("update runs set record_version = 1")
    for row in list(db.query("select run_id, extra from runs where extra is not null")):
        try:
            extra = json.loads(row["extra"])
        except ValueError:
            continue
        if not isinstance(extra, dict):
            continue
        moved = {k: v for k, v in extra.items() if k in M009_RUN_COLUMNS}
        if not moved:
            continue
        values = {k: (json.dumps(v) if M009_RUN_COLUMNS[k] == "json"
                      else int(v) if M009_RUN_COLUMNS[k] is int and isinstance(v, bool) else v)
                  for k, v in moved.items()}
        values = {k: v for k, v in values.items() if not isinstance(v, (list, dict))}
        rest = {k: v for k, v in extra.items() if k not in values}
        values["extra"] = json.dumps(rest) if rest else None
        db["runs"].update(row["run_id"], values)


@migration
def m010_run_backend_column(db: Database) -> None:
    """A run records the engine that ran it (tools.bench.record.RunRecord.backend); every run stored before
    ran on transformers."""
    db["runs"].add_column("backend", str)
    db.execute("update runs set backend = 'transformers' where backend is null")


@migration
def m011_cost_curve_kernels(db: Database) -> None:
    """A cost curve records the kernels that multiplied its float32 layers on a CPU where they are not
    PyTorch's own (``onednn``: tools.engine.cpu_gemm); null for PyTorch's, which every curve stored before
    was timed with. A curve timed with other kernels than a run's is measured again, not reused."""
    db["cost_curves"].add_column("kernels", str)
