"""The SQLite memory: migrations, and a round trip through every table."""

from __future__ import annotations

import re
from datetime import datetime, timezone

import pytest

from memory import ApprovalError, Store, database_path, home_dir, settings_key
from memory import migrations
from tools.errors import ParameterError, RunNotFoundError

RUN = {
    "method": "draft",
    "target": "qwen2.5-coder-1.5b-instruct",
    "draft": "qwen2.5-coder-0.5b-instruct",
    "params": {"k": 4, "adaptive_k": False, "temperature": 0.0},
    "prompt": "def fib(n):",
    "prompt_ids": [1, 2, 3],
    "output_ids": [4, 5, 6, 7],
    "output_text": "    return n",
    "new_tokens": 4,
    "wall_time_s": 0.5,
    "tokens_per_s": 8.0,
    "baseline_wall_time_s": 1.0,
    "baseline_tokens_per_s": 4.0,
    "speedup": 2.0,
    "acceptance_rate": 0.75,
    "tokens_drafted": 8,
    "tokens_accepted": 6,
    "steps": 2,
    "mean_accepted_per_step": 1.33,
    "matches_baseline": False,
    "first_divergence": {"position": 3, "margin": 0.01, "kind": "near-tie"},
    "hardware": {"device": "cpu", "name": "Some CPU", "cores": 2},
    "dtype": "bfloat16",
    "versions": {"torch": "2.13.0", "transformers": "5.24.0"},
}


@pytest.fixture
def store():
    with Store() as s:
        yield s


def is_iso_utc(text: str) -> bool:
    return datetime.fromisoformat(text).utcoffset() == timezone.utc.utcoffset(None)


# ---- location and migrations ---------------------------------------------------------------


def test_database_lives_in_specpilot_home(specpilot_home, store):
    assert home_dir() == specpilot_home and specpilot_home.is_dir()
    assert store.path == database_path() == specpilot_home / "specpilot.db"
    assert store.path.exists()
    assert store.db.journal_mode == "wal"
    assert store.db.execute("PRAGMA busy_timeout").fetchone()[0] >= 10_000


def test_home_defaults_to_dot_specpilot(tmp_path, monkeypatch):
    monkeypatch.delenv("SPECPILOT_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert home_dir() == tmp_path / ".specpilot"
    assert (tmp_path / ".specpilot").is_dir()


def test_migrations_are_recorded_once_and_reopening_applies_nothing():
    names = [fn.__name__ for fn in migrations.MIGRATIONS]
    assert len(set(names)) == len(names)
    with Store() as first:
        assert first.applied_migrations == names
        recorded = list(first.db["_migrations"].rows)
    assert [r["name"] for r in recorded] == names
    assert all(is_iso_utc(r["applied_at"]) for r in recorded)
    with Store() as second:
        assert second.applied_migrations == []
        assert second.db["_migrations"].count == len(names)
        assert {"runs", "tasks", "method_params", "onboarding_answers", "approvals", "messages", "cost_curves",
                "trained_heads"} <= set(second.db.table_names())


def test_a_new_migration_runs_once_on_an_existing_database(monkeypatch):
    with Store() as s:
        s.add_run({"method": "baseline"})

    def m999_add_runs_note(db):
        db["runs"].add_column("note", str)

    monkeypatch.setattr(migrations, "MIGRATIONS", [*migrations.MIGRATIONS, m999_add_runs_note])
    with Store() as s:
        assert s.applied_migrations == ["m999_add_runs_note"]
        assert s.list_runs()[0]["method"] == "baseline"  # existing rows kept
        run_id = s.add_run({"method": "draft", "note": "a new column"})
        assert s.db["runs"].get(run_id)["note"] == "a new column"  # the new column is used, not extra
    with Store() as s:
        assert s.applied_migrations == []


def test_a_failing_migration_leaves_nothing_half_applied(monkeypatch):
    def m999_broken(db):
        db["scratch"].create({"id": int}, pk="id")
        raise RuntimeError("boom")

    monkeypatch.setattr(migrations, "MIGRATIONS", [*migrations.MIGRATIONS, m999_broken])
    with pytest.raises(RuntimeError, match="boom"):
        Store()
    monkeypatch.setattr(migrations, "MIGRATIONS", migrations.MIGRATIONS[:-1])
    with Store() as s:  # the earlier migrations were rolled back with it and now apply cleanly
        assert "scratch" not in s.db.table_names()
        assert s.db["_migrations"].count == len(migrations.MIGRATIONS)


# ---- runs ----------------------------------------------------------------------------------


def test_run_round_trips_with_json_decoded(store):
    run_id = store.add_run(dict(RUN))
    assert re.fullmatch(r"[0-9a-f]{8}", run_id)
    stored = store.get_run(run_id)
    for key, value in RUN.items():
        assert stored[key] == value, key
    assert stored["matches_baseline"] is False
    assert isinstance(stored["first_divergence"], dict)
    assert is_iso_utc(stored["created_at"])
    # the columns hold JSON text and plain scalars
    raw = store.db["runs"].get(run_id)
    assert raw["prompt_ids"] == "[1, 2, 3]" and raw["matches_baseline"] == 0 and raw["extra"] is None


def test_unknown_keys_are_kept_in_extra(store):
    record = {**RUN, "extra": {"method_param": 1}, "peer_list": [{"name": "assisted", "speedup": 1.6}],
              "stop_reason": "eos", "prompt": ["a", "chat", "list"]}
    run_id = store.add_run(record)
    stored = store.get_run(run_id)
    for key, value in record.items():
        assert stored[key] == value, key
    raw = store.db["runs"].get(run_id)
    assert raw["prompt"] is None  # a list where a text column is: kept in extra instead
    assert set(store._run_columns).isdisjoint({"peer_list", "stop_reason"})


def test_numpy_and_torch_values_are_stored_plainly(store):
    np = pytest.importorskip("numpy")
    torch = pytest.importorskip("torch")
    run_id = store.add_run({"method": "draft", "speedup": np.float32(1.5), "new_tokens": np.int64(7),
                            "output_ids": torch.tensor([1, 2]), "params": {"dtype": torch.bfloat16}})
    stored = store.get_run(run_id)
    assert stored["speedup"] == 1.5 and stored["new_tokens"] == 7
    assert stored["output_ids"] == [1, 2] and stored["params"] == {"dtype": "torch.bfloat16"}


def test_given_run_id_is_kept_and_duplicates_refused(store):
    assert store.add_run({"run_id": "my-run", "method": "baseline"}) == "my-run"
    assert re.fullmatch(r"[0-9a-f]{8}", store.add_run({"run_id": None, "created_at": None, "method": "x"}))
    with pytest.raises(ParameterError, match="already stored"):
        store.add_run({"run_id": "my-run", "method": "baseline"})


def test_missing_run_is_a_clear_error(store):
    with pytest.raises(RunNotFoundError) as info:
        store.get_run("nope1234")
    assert "nope1234" in str(info.value) and "specpilot runs list" in info.value.user_message()


def test_run_id_prefix_lookup(store):
    store.add_run({"run_id": "abcd1111", "method": "draft"})
    store.add_run({"run_id": "abcd2222", "method": "draft"})
    assert store.get_run("abcd1")["run_id"] == "abcd1111"
    with pytest.raises(ParameterError, match="several runs"):
        store.get_run("abcd")
    with pytest.raises(RunNotFoundError):
        store.get_run("abc")  # too short to be a prefix


def test_list_runs_newest_first_and_filters(store):
    ids = [store.add_run({"method": m, "prompt": f"p{i}"}) for i, m in enumerate(["baseline", "draft", "draft"])]
    assert [r["run_id"] for r in store.list_runs()] == ids[::-1]
    assert [r["run_id"] for r in store.list_runs(limit=2)] == ids[:0:-1]
    assert [r["run_id"] for r in store.list_runs(method="draft")] == [ids[2], ids[1]]
    assert store.last_run()["run_id"] == ids[2]
    assert [r["run_id"] for r in store.find_runs(method="draft", prompt="p1")] == [ids[1]]
    assert store.find_runs(method="medusa") == []
    with pytest.raises(ParameterError, match="cannot filter runs by 'params'"):
        store.find_runs(params={"k": 4})


def test_last_run_is_none_when_empty(store):
    assert store.last_run() is None
    assert store.list_runs() == []


def test_find_runs_by_bool_and_none(store):
    yes = store.add_run({"method": "draft", "matches_baseline": True})
    no = store.add_run({"method": "draft", "matches_baseline": False})
    unknown = store.add_run({"method": "draft"})
    assert [r["run_id"] for r in store.find_runs(matches_baseline=True)] == [yes]
    assert [r["run_id"] for r in store.find_runs(matches_baseline=False)] == [no]
    assert [r["run_id"] for r in store.find_runs(matches_baseline=None)] == [unknown]


def test_list_runs_of_a_task(store):
    task_id = store.create_task("compare methods", "compare", ["baseline", "draft"])
    own = store.add_run({"method": "baseline", "task_id": task_id})
    linked = store.add_run({"method": "draft"})
    store.add_run({"method": "draft"})  # unrelated
    store.update_task(task_id, run_ids=[linked])
    assert [r["run_id"] for r in store.list_runs(task_id=task_id)] == [linked, own]
    with pytest.raises(RunNotFoundError):
        store.list_runs(task_id=999)


def test_settings_key_lets_a_benchmark_resume(store):
    settings = {"k": 4, "max_new_tokens": 128}
    key = settings_key(settings, "def fib(n):")
    assert key == settings_key({"max_new_tokens": 128, "k": 4}, "def fib(n):")  # key order does not matter
    assert key != settings_key(settings, "def fact(n):")
    assert key != settings_key({**settings, "k": 5}, "def fib(n):")
    assert store.find_run_by_key(key) is None
    store.add_run({"method": "draft", "settings_key": key, "speedup": 1.5})
    newer = store.add_run({"method": "draft", "settings_key": key, "speedup": 1.7})
    found = store.find_run_by_key(key)
    assert found["run_id"] == newer and found["speedup"] == 1.7


# ---- tasks ---------------------------------------------------------------------------------


def test_task_round_trip_and_progress(store):
    task_id = store.create_task("benchmark the coding prompts", "benchmark", ["prompt 1", "prompt 2", "prompt 3"])
    assert isinstance(task_id, int)
    task = store.get_task(task_id)
    assert task["status"] == "running" and task["done"] == [] and task["left"] == ["prompt 1", "prompt 2", "prompt 3"]
    assert task["request"] == "benchmark the coding prompts" and task["kind"] == "benchmark"
    assert is_iso_utc(task["created_at"])

    store.update_task(task_id, done=["prompt 1"], run_ids=["r1"], note="prompt 1 took 40 s")
    task = store.update_task(task_id, done=["prompt 2", "prompt 1"], run_ids=["r2", "r1"], status="unfinished")
    assert task["done"] == ["prompt 1", "prompt 2"]
    assert task["left"] == ["prompt 3"]
    assert task["run_ids"] == ["r1", "r2"]
    assert task["status"] == "unfinished"
    assert [n["text"] for n in task["notes"]] == ["prompt 1 took 40 s"] and is_iso_utc(task["notes"][0]["at"])
    assert task["plan"] == ["prompt 1", "prompt 2", "prompt 3"]
    assert task["updated_at"] >= task["created_at"]

    task = store.update_task(task_id, left=["prompt 3", "summary"])
    assert task["left"] == ["prompt 3", "summary"] and task["done"] == ["prompt 1", "prompt 2"]


def test_task_statuses_and_listing(store):
    a = store.create_task("a", "run", ["x"])
    b = store.create_task("b", "run", ["x"])
    c = store.create_task("c", "run", ["x"])
    d = store.create_task("d", "run", ["x"])
    store.update_task(a, status="done", done=["x"])
    store.update_task(b, status="failed")
    store.update_task(c, status="unfinished")
    assert [t["id"] for t in store.list_tasks()] == [d, c, b, a]
    assert [t["id"] for t in store.list_tasks(status="done")] == [a]
    assert [t["id"] for t in store.unfinished_tasks()] == [d, c]
    with pytest.raises(ParameterError, match="unknown task status"):
        store.update_task(a, status="finished")
    with pytest.raises(ParameterError, match="list of strings"):
        store.create_task("e", "run", "not a list")
    with pytest.raises(RunNotFoundError, match="no stored task"):
        store.get_task(12345)


# ---- parameters and onboarding -------------------------------------------------------------


def test_params_latest_wins_and_history_is_kept(store):
    assert store.get_params("draft") is None
    store.save_params("draft", {"target": "t", "draft": "d", "k": 4})
    store.save_params("medusa", {"posterior_threshold": 0.09, "posterior_alpha": 0.3})
    store.save_params("draft", {"target": "t", "draft": "d", "k": 6})
    assert store.get_params("draft") == {"target": "t", "draft": "d", "k": 6}
    history = store.params_history("draft")
    assert [h["params"]["k"] for h in history] == [6, 4]
    assert all(is_iso_utc(h["saved_at"]) for h in history)
    assert store.all_params() == {"draft": {"target": "t", "draft": "d", "k": 6},
                                  "medusa": {"posterior_threshold": 0.09, "posterior_alpha": 0.3}}
    with pytest.raises(ParameterError):
        store.save_params("draft", ["k", 4])


def test_onboarding_answers_and_completion(store):
    assert store.get_answer("method") is None and store.get_answer("method", "draft") == "draft"
    assert not store.onboarding_complete()
    store.save_answer("method", "medusa")
    store.save_answer("threads", 2)
    store.save_answer("method", "lookahead")
    store.save_answer("models", {"target": "t", "draft": None})
    assert store.get_answer("method") == "lookahead"
    assert store.get_answer("threads") == 2
    assert store.get_answer("models") == {"target": "t", "draft": None}
    store.mark_onboarding_complete()
    with Store() as reopened:
        assert reopened.onboarding_complete()
        assert reopened.all_answers()["method"] == "lookahead"


# ---- approvals -----------------------------------------------------------------------------


def test_approval_round_trip_and_consume_once(store):
    args = {"packages": ["medusa-llm"], "index": None}
    approval_id = store.create_approval("install", args, "Medusa needs medusa-llm")
    pending = store.get_approval(approval_id)
    assert pending["status"] == "pending" and pending["arguments"] == args
    assert pending["reason"] == "Medusa needs medusa-llm" and is_iso_utc(pending["created_at"])
    with pytest.raises(ApprovalError, match="not been approved"):
        store.consume_approval(approval_id)

    decided = store.decide_approval(approval_id, approved=True, by="user (terminal)")
    assert decided["status"] == "approved" and decided["decided_by"] == "user (terminal)"
    assert is_iso_utc(decided["decided_at"])
    with pytest.raises(ApprovalError, match="already decided"):
        store.decide_approval(approval_id, approved=False, by="someone else")
    with pytest.raises(ApprovalError, match="is for 'install', not 'train'"):
        store.consume_approval(approval_id, action="train")

    used = store.consume_approval(approval_id, action="install")
    assert used["status"] == "consumed" and used["arguments"] == args and is_iso_utc(used["consumed_at"])
    with pytest.raises(ApprovalError, match="already used"):
        store.consume_approval(approval_id)
    with Store() as other:  # a second connection sees it consumed too
        with pytest.raises(ApprovalError, match="already used"):
            other.consume_approval(approval_id)


def test_denied_and_unknown_approvals_cannot_be_consumed(store):
    approval_id = store.create_approval("share", {"path": "report.md"}, "export a comparison")
    store.decide_approval(approval_id, approved=False, by="user")
    with pytest.raises(ApprovalError, match="denied"):
        store.consume_approval(approval_id)
    assert store.get_approval(approval_id)["status"] == "denied"
    with pytest.raises(ApprovalError, match="no approval"):
        store.consume_approval("ffffffff")
    with pytest.raises(ApprovalError, match="no approval"):
        store.decide_approval("ffffffff", approved=True, by="user")


def test_list_approvals_by_status(store):
    a = store.create_approval("install", {"packages": ["x"]}, "r")
    b = store.create_approval("train", {"heads": 4}, "r")
    c = store.create_approval("deploy", {}, "r")
    store.decide_approval(b, approved=True, by="user")
    store.decide_approval(c, approved=False, by="user")
    assert [x["id"] for x in store.list_approvals()] == [c, b, a]
    assert [x["id"] for x in store.list_approvals(status="pending")] == [a]
    store.consume_approval(b)
    assert [x["id"] for x in store.list_approvals(status="consumed")] == [b]
    assert store.list_approvals(status="approved") == []
    with pytest.raises(ParameterError):
        store.list_approvals(status="maybe")


# ---- conversation log ----------------------------------------------------------------------


def test_conversation_log_round_trip(store):
    store.log_message("s1", "user", "run the draft method")
    store.log_message("s2", "user", "other session")
    block = {"type": "tool_use", "name": "run_method", "input": {"method": "draft", "k": 4}}
    store.log_message("s1", "assistant", block)
    store.log_message("s1", "tool", "speedup 1.62x (run abcd1234)")
    messages = store.conversation("s1")
    assert [(m["role"], m["content"]) for m in messages] == [
        ("user", "run the draft method"), ("assistant", block), ("tool", "speedup 1.62x (run abcd1234)")]
    assert all(is_iso_utc(m["created_at"]) for m in messages)
    assert store.conversation("nobody") == []
