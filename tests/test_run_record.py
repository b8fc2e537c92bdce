"""The typed run record: every field has a column, old rows read back, the store refuses what it cannot
read (a newer schema, a renamed column), a read-only database is read and never silently written, and a
run that cannot be stored is still returned with the reason."""

from __future__ import annotations

import json
import os
import sqlite3
import stat

import pytest

from agent.cli.main import main
from memory import Store, database_path
from memory import migrations
from memory.store import RUN_BOOL_COLUMNS, RUN_JSON_COLUMNS
from tools.bench.record import JSON_FIELDS, RECORD_VERSION, PeerFigures, RunRecord
from tools.bench.run import store_record
from tools.errors import StoreError

FULL = RunRecord(
    method="draft", target="t", draft="d", params={"k": 4}, params_source="sized", sizing={"k": "from the curve"},
    settings={"max_new_tokens": 8}, prompt="p", chat=True, prompt_ids=[1, 2], output_ids=[3, 4], output_text="x y",
    baseline_output_ids=[3, 4], new_tokens=2, stopped_by="length", matches_baseline=True, lossy=False,
    wall_time_s=0.5, tokens_per_s=4.0, baseline_wall_time_s=1.0, baseline_tokens_per_s=2.0, speedup=2.0,
    times=[0.5, 0.6], baseline_times=[1.0], repeats=1, prefill_s=0.1, acceptance_rate=0.5, tokens_drafted=4,
    tokens_accepted=2, steps=1, mean_accepted_per_step=2.0, drafted_by_position=[1, 1], accepted_by_position=[1, 0],
    method_extra={"k_used": [4]}, peers={"hf_assisted": PeerFigures(wall_time_s=0.7, speedup=1.4, times=[0.7])},
    hardware={"name": "cpu"}, dtype="float32", dtype_reason="no bf16", device_map=None, versions={"torch": "x"},
    training_required="none", draft_required="d", category="coding", question_id=3, prompt_set="eval",
    sweep={"label": "k=4"}, task_id=7, settings_key="abc",
)


def test_every_record_field_has_a_column_of_the_right_kind():
    with Store() as s:
        columns = set(s.db["runs"].columns_dict)
    assert set(RunRecord.model_fields) <= columns
    assert set(JSON_FIELDS) <= set(RUN_JSON_COLUMNS)
    bools = {n for n, f in RunRecord.model_fields.items() if f.annotation in (bool, bool | None)}
    assert bools <= set(RUN_BOOL_COLUMNS)


def test_a_record_round_trips_through_the_store_in_columns():
    with Store() as s:
        run_id = s.add_run(FULL.to_store())
        raw = s.db["runs"].get(run_id)
        assert raw["extra"] is None  # every field went to its own column
        back = RunRecord.from_stored(s.get_run(run_id))
    assert back.model_dump(exclude={"run_id", "created_at"}) == FULL.model_dump(exclude={"run_id", "created_at"})
    assert back.record_version == RECORD_VERSION and back.peers["hf_assisted"].speedup == 1.4


def test_a_misspelled_field_is_refused_when_the_record_is_built():
    with pytest.raises(ValueError):
        RunRecord(method="draft", speed_up=2.0)
    rec = RunRecord(method="draft")
    with pytest.raises(ValueError):
        rec.speedup = "fast"


def test_an_old_row_with_keys_in_extra_reads_as_a_record(monkeypatch):
    names = [fn.__name__ for fn in migrations.MIGRATIONS]
    before = migrations.MIGRATIONS[:names.index("m009_run_record_columns")]
    with monkeypatch.context() as patch:
        patch.setattr(migrations, "MIGRATIONS", before)
        with Store() as old:
            old_id = old.add_run({"method": "medusa", "speedup": 1.5, "peers": {"hf_assisted": {"speedup": 1.2}},
                                  "stopped_by": "eos", "lossy": True, "chat": False, "a_retired_key": 1})
    with Store() as s:
        raw = s.db["runs"].get(old_id)
        assert json.loads(raw["extra"]) == {"a_retired_key": 1}  # the known keys moved into columns
        rec = RunRecord.from_stored(s.get_run(old_id))
    assert rec.record_version == 1 and rec.stopped_by == "eos" and rec.lossy is True and rec.chat is False
    assert rec.peers["hf_assisted"].speedup == 1.2 and rec.legacy == {"a_retired_key": 1}


def test_runs_show_json_prints_the_typed_record(capsys):
    with Store() as s:
        run_id = s.add_run(FULL.to_store())
    assert main(["runs", "show", run_id, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert set(shown) == set(RunRecord.model_fields) and shown["run_id"] == run_id and shown["sizing"] == FULL.sizing


# ---- a database this version cannot use -------------------------------------------------------


def test_a_newer_schema_is_refused_with_the_file_and_what_to_do(capsys):
    with Store() as s:
        s.db.execute("insert into _migrations (name, applied_at) values ('m999_from_the_future', 'now')")
    with pytest.raises(StoreError) as info:
        Store()
    text = info.value.user_message()
    assert str(database_path()) in text and "m999_from_the_future" in text and "upgrade specpilot" in text
    assert main(["runs", "list"]) != 0
    assert "newer specpilot" in capsys.readouterr().err


def test_a_higher_user_version_is_refused():
    with Store() as s:
        s.db.execute("PRAGMA user_version = 500")
    with pytest.raises(StoreError, match="schema version is 500"):
        Store()


def test_a_renamed_column_is_refused_not_failed_later():
    with Store() as s:
        s.db.execute("alter table runs rename column speedup to speed_up")
    with pytest.raises(StoreError, match=r"runs\.speedup"):
        Store()


def test_a_damaged_file_is_named():
    path = database_path()
    path.write_bytes(b"this is not a database at all" * 100)
    with pytest.raises(StoreError) as info:
        Store()
    assert str(path) in str(info.value) and "move it aside" in info.value.hint


def test_a_read_only_database_is_read_and_writes_say_why(monkeypatch):
    with Store() as s:
        run_id = s.add_run({"method": "draft", "speedup": 2.0})
    path = database_path()
    with Store():  # checkpoint the WAL into the main file
        pass
    os.chmod(path, stat.S_IRUSR)
    real_access = os.access  # root may write a read-only file: make the check see what a user would
    monkeypatch.setattr(os, "access", lambda p, mode: False if str(p) == str(path) else real_access(p, mode))
    try:
        with Store() as s:
            assert s.read_only and s.get_run(run_id)["speedup"] == 2.0
            with pytest.raises(StoreError, match="read-only"):
                s.add_run({"method": "draft"})
    finally:
        os.chmod(path, stat.S_IRUSR | stat.S_IWUSR)


def test_a_run_that_cannot_be_stored_is_still_returned():
    class Broken:
        def add_run(self, record):
            raise StoreError("the memory database /x/specpilot.db could not be written: disk I/O error",
                             hint="free some disk")

    out = store_record(RunRecord(method="draft", speedup=2.0), Broken())
    assert out["run_id"] is None and out["speedup"] == 2.0
    assert "could not be written" in out["not_stored"] and "free some disk" in out["not_stored"]


def test_database_errors_name_the_file():
    with Store() as s:
        s.db.execute("drop table tasks")
        with pytest.raises(StoreError) as info:
            s._rows("select * from tasks")
    assert str(database_path()) in str(info.value)
    assert isinstance(info.value.__cause__, sqlite3.Error)


def test_read_only_tools_answer_from_a_read_only_memory(monkeypatch):
    from agent.loop import host_call

    with Store() as s:
        s.add_run({"method": "draft", "speedup": 2.0, "prompt": "p"})
    path = database_path()
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: False if str(p) == str(path) else real_access(p, mode))
    with Store() as s:
        result = host_call(s, "lookup_runs", {})
        assert not result.is_error, result.content
        saved = host_call(s, "save_params", {"method": "draft", "params": {"k": 3}})
        assert saved.is_error and "read-only" in json.dumps(saved.content)


def test_a_run_without_parameters_is_sized_and_says_why(tiny_model_dir, capsys):
    code = main(["run", "--method", "lookahead", "--target", str(tiny_model_dir), "--dtype", "float32", "--raw",
                 "--prompt", "def f(x): return x", "--max-new-tokens", "8", "--json"])
    assert code == 0
    record = json.loads(capsys.readouterr().out)
    assert record["params_source"] in ("sized", "default") and record["sizing"]
    with Store() as s:
        stored = RunRecord.from_stored(s.get_run(record["run_id"]))
        (task,) = s.list_tasks()
    assert stored.sizing == record["sizing"] and task["status"] == "done" and task["run_ids"] == [record["run_id"]]
