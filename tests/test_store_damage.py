"""A memory database SQLite finds damaged is refused on open, before anything is written to it (QA s21,
finding 13: `ask` wrote into a file that `runs list` refused to read); the migrations log names only
migrations applied to the user's database (finding 14)."""

from __future__ import annotations

import logging
import os
import sqlite3
import stat

import pytest

from memory import Store, database_path
from memory import migrations
from tools.errors import StoreError

DAMAGED_HINT = "the file is damaged: move it aside (e.g. to specpilot.db.broken) and specpilot starts a new memory"


def stored_runs(count: int = 40) -> None:
    """A database with ``count`` runs, checkpointed into the main file (no -wal content left)."""
    with Store() as s:
        for i in range(count):
            s.add_run({"method": "draft", "prompt": f"prompt {i} " * 40, "output_ids": list(range(50))})


def damage_a_page(table: str = "runs") -> bytes:
    """Overwrite the root page of ``table`` with bytes no b-tree page starts with; the file's new bytes."""
    path = database_path()
    with sqlite3.connect(path) as conn:
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        root = conn.execute("select rootpage from sqlite_master where name = ?", [table]).fetchone()[0]
    conn.close()
    with open(path, "r+b") as handle:
        handle.seek((root - 1) * page_size)
        handle.write(b"\xff" * page_size)
    return path.read_bytes()


def test_a_damaged_database_is_refused_on_open_and_left_as_it_is():
    stored_runs()
    before = damage_a_page()
    with pytest.raises(StoreError) as info:
        Store()
    path = database_path()
    assert str(info.value).startswith(f"the memory database {path} could not be opened: SQLite finds it damaged (")
    assert "***" not in str(info.value) and info.value.hint == DAMAGED_HINT
    assert path.read_bytes() == before
    assert sorted(p.name for p in path.parent.iterdir() if p.name.startswith("specpilot.db")) == ["specpilot.db"]


def test_ask_no_longer_writes_into_a_damaged_database(cli_in_process):
    stored_runs()
    before = damage_a_page()  # `ask` writes a task: the tasks table itself is intact
    for args in (("ask", "hello", "--plan-only", "--json"), ("runs", "list")):
        proc = cli_in_process(*args)
        assert proc.returncode == 2, proc
        assert "SQLite finds it damaged" in proc.stderr and "move it aside" in proc.stderr, proc.stderr
    assert database_path().read_bytes() == before


def test_a_damaged_read_only_database_is_refused_too(monkeypatch):
    stored_runs()
    damage_a_page()
    path = database_path()
    os.chmod(path, stat.S_IRUSR)
    real_access = os.access  # root may write a read-only file: make the check see what a user would
    monkeypatch.setattr(os, "access", lambda p, mode: False if str(p) == str(path) else real_access(p, mode))
    try:
        with pytest.raises(StoreError, match="SQLite finds it damaged") as info:
            Store()
        assert info.value.hint == DAMAGED_HINT  # not "make it writable": that would not help
    finally:
        os.chmod(path, stat.S_IRUSR | stat.S_IWUSR)


def test_a_file_that_is_no_database_keeps_its_message():
    path = database_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"not a database" * 100)
    with pytest.raises(StoreError) as info:
        Store()
    assert str(info.value) == f"the memory database {path} could not be opened: file is not a database"
    assert info.value.hint == DAMAGED_HINT and path.read_bytes() == b"not a database" * 100


def test_a_newer_schema_keeps_its_message():
    stored_runs(1)
    with sqlite3.connect(database_path()) as conn:
        conn.execute("PRAGMA user_version = 99")
    conn.close()
    with pytest.raises(StoreError, match="was written by a newer specpilot"):
        Store()


def test_text_that_is_not_utf8_is_named_as_damage():
    stored_runs(1)
    with sqlite3.connect(database_path()) as conn:
        conn.execute("update runs set prompt = cast(x'54686520ff71756963' as text)")
    conn.close()
    with Store() as s:  # the pages are sound: SQLite's check passes, the value does not decode
        with pytest.raises(StoreError, match="could not be read: Could not decode to UTF-8") as info:
            s.list_runs()
    assert info.value.hint == DAMAGED_HINT


def test_migrations_are_logged_only_when_applied_to_the_users_database(caplog, monkeypatch):
    monkeypatch.setattr(migrations, "_EXPECTED", {})  # build the scratch database again
    with caplog.at_level(logging.INFO, logger="memory.migrations"):
        with Store():
            pass
        applied = [r.getMessage() for r in caplog.records if "applied migrations" in r.getMessage()]
        assert len(applied) == 1 and applied[0].startswith("applied migrations: m001_create_runs")
        caplog.clear()
        monkeypatch.setattr(migrations, "_EXPECTED", {})
        with Store():  # up to date; the scratch database expected_columns builds is no one's
            pass
        assert not [r for r in caplog.records if "applied migrations" in r.getMessage()]
