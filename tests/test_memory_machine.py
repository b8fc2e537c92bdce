"""Cost curves and trained Medusa heads: one row each in their own tables, saved atomically, and
moved out of the old whole-dict onboarding answers when an old database is opened."""

from __future__ import annotations

import json
import logging

import pytest

from memory import Store
from memory import migrations
from tools.errors import ParameterError

CURVE = {1: 0.110, 2: 0.112, 4: 0.118, 8: 0.140}


@pytest.fixture
def store():
    with Store() as s:
        yield s


# ---- cost curves ---------------------------------------------------------------------------


def test_a_curve_is_found_by_the_kernels_it_was_timed_with(store):
    store.save_cost_curve("t", "CPU A", CURVE, dtype="float32")  # PyTorch's own kernels (every older curve)
    assert store.get_cost_curve("t", "CPU A", "float32", kernels=None)["curve"] == CURVE
    assert store.get_cost_curve("t", "CPU A", "float32", kernels="onednn") is None
    assert store.get_cost_curve("t", "CPU A", "float32")["kernels"] is None  # any kernels
    store.save_cost_curve("t", "CPU A", {1: 0.1, 2: 0.12}, dtype="float32", kernels="onednn")  # replaces it
    assert store.get_cost_curve("t", "CPU A", "float32", kernels="onednn")["curve"] == {1: 0.1, 2: 0.12}
    assert store.get_cost_curve("t", "CPU A", "float32", kernels=None) is None


def test_cost_curve_round_trip_newest_and_per_dtype(store):
    assert store.get_cost_curve("t", "CPU A") is None
    saved = store.save_cost_curve("t", "CPU A", CURVE, dtype="float32", measured_at="2026-01-01T00:00:00")
    assert saved == {"target": "t", "hardware": "CPU A", "dtype": "float32", "curve": CURVE,
                     "measured_at": "2026-01-01T00:00:00", "kernels": None}
    assert store.get_cost_curve("t", "CPU A") == saved
    later = store.save_cost_curve("t", "CPU A", {1: 0.2, 2: 0.3}, dtype="torch.bfloat16")
    assert later["dtype"] == "bfloat16" and later["measured_at"] > saved["measured_at"]
    assert store.get_cost_curve("t", "CPU A")["curve"] == {1: 0.2, 2: 0.3}  # newest of any dtype
    assert store.get_cost_curve("t", "CPU A", dtype="float32")["curve"] == CURVE
    assert store.get_cost_curve("t", "CPU B") is None and store.get_cost_curve("u", "CPU A") is None
    # saving the same target/hardware/dtype again replaces that one row
    store.save_cost_curve("t", "CPU A", {"1": "0.5"}, dtype="float32")
    assert store.get_cost_curve("t", "CPU A", dtype="float32")["curve"] == {1: 0.5}
    assert store.db["cost_curves"].count == 2 and len(store.cost_curves()) == 2


@pytest.mark.parametrize("curve", [{}, {0: 0.1}, {1: -1.0}, {"x": 0.1}, [0.1, 0.2], None])
def test_a_malformed_cost_curve_is_refused(store, curve):
    with pytest.raises(ParameterError, match="not a cost curve"):
        store.save_cost_curve("t", "CPU", curve, dtype="float32")
    assert store.db["cost_curves"].count == 0


# ---- trained heads -------------------------------------------------------------------------


def test_trained_heads_round_trip_and_replace(store, tmp_path):
    assert store.trained_heads_path("t") is None and store.all_trained_heads() == {}
    store.save_trained_heads("t", tmp_path / "one")
    store.save_trained_heads("u", str(tmp_path / "two"))
    store.save_trained_heads("t", tmp_path / "three")
    assert store.trained_heads_path("t") == str(tmp_path / "three")
    assert store.all_trained_heads() == {"t": str(tmp_path / "three"), "u": str(tmp_path / "two")}
    with pytest.raises(ParameterError):
        store.save_trained_heads("", tmp_path)


# ---- two stores, one database --------------------------------------------------------------


def test_two_stores_saving_different_rows_keep_both():
    with Store() as a, Store() as b:
        a.save_cost_curve("t", "CPU A", CURVE, dtype="float32")
        b.save_cost_curve("t", "CPU B", CURVE, dtype="float32")
        a.save_trained_heads("t", "/heads/t")
        b.save_trained_heads("u", "/heads/u")
        for s in (a, b):
            assert {(c["target"], c["hardware"]) for c in s.cost_curves()} == {("t", "CPU A"), ("t", "CPU B")}
            assert s.all_trained_heads() == {"t": "/heads/t", "u": "/heads/u"}


def test_the_old_read_modify_write_of_the_whole_dict_loses_nothing_now():
    """Old callers read the dict, add their entry and save it back; two of them interleaved used
    to lose one entry. Each entry is now a row, so both stay."""
    key = migrations.LEGACY_COST_CURVE_KEY
    entry = {"curve": {"1": 0.1, "2": 0.11}, "dtype": "float32", "measured_at": "2026-01-01T00:00:00"}
    with Store() as a, Store() as b:
        seen_a, seen_b = a.get_answer(key) or {}, b.get_answer(key) or {}
        seen_a["t|CPU A"] = entry
        seen_b["t|CPU B"] = {**entry, "hardware": "CPU B"}
        a.save_answer(key, seen_a)
        b.save_answer(key, seen_b)
        assert set(a.get_answer(key)) == {"t|CPU A", "t|CPU B"}
        assert a.get_answer(key)["t|CPU A"] == {**entry, "hardware": "CPU A"}
        assert a.get_cost_curve("t", "CPU B")["curve"] == {1: 0.1, 2: 0.11}
        # a stale copy of the dict does not undo a newer measurement
        stale = a.get_answer(key)
        b.save_cost_curve("t", "CPU A", {1: 0.3}, dtype="float32")
        a.save_answer(key, stale)
        assert a.get_cost_curve("t", "CPU A")["curve"] == {1: 0.3}

        heads = migrations.LEGACY_HEADS_KEY
        assert a.get_answer(heads) is None and a.get_answer(heads, {}) == {}
        old_a, old_b = a.get_answer(heads) or {}, b.get_answer(heads) or {}
        a.save_answer(heads, {**old_a, "t": "/heads/t"})
        b.save_answer(heads, {**old_b, "u": "/heads/u"})
        assert b.get_answer(heads) == {"t": "/heads/t", "u": "/heads/u"} == b.all_trained_heads()
        assert a.all_answers() == {}  # neither is an onboarding answer any more
        with pytest.raises(ParameterError):
            a.save_answer(key, {"no-hardware": {"curve": {}}})


# ---- an old database -----------------------------------------------------------------------


def old_database(monkeypatch, answers: dict) -> None:
    """A database made before m007/m008, holding ``answers`` in onboarding_answers."""
    names = [fn.__name__ for fn in migrations.MIGRATIONS]
    before = migrations.MIGRATIONS[:names.index("m007_create_cost_curves")]
    with monkeypatch.context() as patch:
        patch.setattr(migrations, "MIGRATIONS", before)
        with Store() as old:
            assert "cost_curves" not in old.db.table_names()
            old.db["onboarding_answers"].insert_all(
                [{"key": k, "value": json.dumps(v), "updated_at": "2025-12-31T00:00:00+00:00"}
                 for k, v in answers.items()])


def test_an_old_database_keeps_its_curves_and_heads(monkeypatch):
    curves = {"qwen|Intel CPU": {"curve": {"1": 0.1, "4": 0.12}, "dtype": "bfloat16",
                                 "measured_at": "2026-01-01T00:00:00", "hardware": "Intel CPU"},
              "org/model|Other CPU": {"curve": {"1": 0.2}, "dtype": "float32"}}  # no hardware, no time
    old_database(monkeypatch, {"cost_curve": curves, "medusa_heads": {"qwen": "/heads/qwen"},
                               "default_method": "draft"})
    with Store() as s:
        assert s.applied_migrations[:3] == ["m007_create_cost_curves", "m008_create_trained_heads",
                                            "m009_run_record_columns"]
        assert s.get_cost_curve("qwen", "Intel CPU") == {
            "target": "qwen", "hardware": "Intel CPU", "dtype": "bfloat16", "curve": {1: 0.1, 4: 0.12},
            "measured_at": "2026-01-01T00:00:00", "kernels": None}  # timed with PyTorch's own kernels
        other = s.get_cost_curve("org/model", "Other CPU")
        assert other["curve"] == {1: 0.2} and other["measured_at"] == "2025-12-31T00:00:00+00:00"
        assert s.trained_heads_path("qwen") == "/heads/qwen"
        # the dicts left onboarding_answers; the real answers stayed
        assert [r["key"] for r in s.db["onboarding_answers"].rows] == ["default_method"]
        assert s.all_answers() == {"default_method": "draft"}
        assert set(s.get_answer("cost_curve")) == {"qwen|Intel CPU", "org/model|Other CPU"}


def test_an_entry_that_cannot_be_moved_keeps_the_old_answer(monkeypatch, caplog):
    old_database(monkeypatch, {"cost_curve": {"t|CPU": {"curve": {"1": 0.1}}, "broken": {"curve": "?"}},
                               "medusa_heads": ["not", "a", "dict"]})
    with caplog.at_level(logging.WARNING, logger="memory.migrations"), Store() as s:
        assert s.get_cost_curve("t", "CPU")["dtype"] == "unknown"  # the readable entry moved
        assert s.all_trained_heads() == {}
        kept = {r["key"]: json.loads(r["value"]) for r in s.db["onboarding_answers"].rows}
        assert kept["cost_curve"]["broken"] == {"curve": "?"} and kept["medusa_heads"] == ["not", "a", "dict"]
    assert "could not move broken into cost_curves" in caplog.text
