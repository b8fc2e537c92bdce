"""The first-run onboarding dialogue (agent.onboarding) with scripted answers and no model: what is said before
guidance measures this machine (and only then), Ctrl-C during that measurement, the suggested values' reasons,
and every method of the engine's table offered and followed through (eagle's head, ngram without a draft).
Guidance's measurement stands in as storing a curve (or as being interrupted), so nothing loads a model."""

from __future__ import annotations

import re

import pytest

import agent.onboarding as onboarding
import tools.agent_tools.advice as advice
from agent.brains.offline import OfflineBrain
from agent.loop import Session
from agent.onboarding import (METHODS, OWN_PARAMS, choose_method, first_run_plan, run_onboarding,
                              suggestion_text)
from memory import Store
from tools.bench.machine_cost import CPU_FALLBACK_CURVE
from tools.bench.protocol import hardware_name
from tools.engine import cpu_gemm
from tools.engine.params import ACCELERATED, PARAM_MODELS
from tools.errors import Terminated
from tools.models import DEFAULT_TARGET, SMALL_TARGET

NOTICE = "Measuring this machine's forward-pass costs for"


def cpu_hw() -> dict:
    return {"kind": "cpu", "name": hardware_name("cpu")}


def store_curve(store, method: str, target: str) -> None:
    """Store a cost curve of ``target`` as a run on this CPU stores it (what guidance sizes to)."""
    hw = cpu_hw()
    dtype = advice.run_dtype(store, method, hw)
    store.save_cost_curve(target, hw["name"], dict(CPU_FALLBACK_CURVE), dtype=dtype,
                          kernels=cpu_gemm.expected_kernels("cpu", dtype))


@pytest.fixture
def measuring(monkeypatch):
    """Guidance on this CPU, its measurement standing in as storing a curve; yields what happened, in order
    (each measurement, and each line said once onboarding runs through ``onboard``)."""
    events: list = []
    monkeypatch.setattr(advice, "detect_hardware", lambda choice: cpu_hw())

    def measure(ctx, method, target, backend):
        events.append(("measured", method, target))
        store_curve(ctx.store, method, target)

    monkeypatch.setattr(advice, "measure_machine", measure)
    return events


def onboard(store, answers: dict[str, str], events: list | None = None, session: Session | None = None):
    """Run onboarding with scripted answers (matched by the start of each question, the first match wins; the
    default otherwise); returns the questions asked ({question: default}), what was said, and the reply."""
    asked: dict[str, str] = {}
    said: list[str] = []

    def ask(question: str, default: str) -> str:
        asked[question] = default
        return next((a for q, a in answers.items() if question.startswith(q)), "")

    def say(text: str) -> None:
        said.append(text)
        if events is not None:
            events.append(("said", text))

    reply = run_onboarding(session or Session(store, OfflineBrain()), ask, say)
    return asked, said, reply


# ---------------------------------------------------------------------------- 1. the slow measurement is announced
def test_a_measurement_is_announced_before_it_starts(measuring):
    with Store() as store:
        onboard(store, {"Which method": "lookahead", "Run a short first": "n"}, measuring)
    notice = next(i for i, e in enumerate(measuring) if e[0] == "said" and e[1].startswith(NOTICE))
    measured = measuring.index(("measured", "lookahead", DEFAULT_TARGET))
    assert notice < measured  # said before anything slow starts
    text = measuring[notice][1]
    assert DEFAULT_TARGET in text and "few minutes" in text and "Ctrl-C skips" in text
    assert "\n" not in text  # one line


def test_no_announcement_when_the_curve_is_stored_or_the_method_is_not_sized_by_it(measuring):
    with Store() as store:
        store_curve(store, "lookahead", DEFAULT_TARGET)
        _, said, _ = onboard(store, {"Which method": "lookahead", "Run a short first": "n"})
    assert not any(line.startswith(NOTICE) for line in said)
    assert not any(e[0] == "measured" for e in measuring)  # nothing slow happened


def test_no_announcement_for_medusa_whose_values_do_not_come_from_the_curve(measuring):
    with Store() as store:
        asked, said, _ = onboard(store, {"Which method": "medusa", "Run a short first": "n"})
        assert onboarding.will_measure(store, "medusa", DEFAULT_TARGET) is False
    assert "Medusa heads folder (empty: the shipped or trained heads)" in asked
    assert not any(line.startswith(NOTICE) for line in said) and measuring == []


def test_will_measure_follows_guidance_and_never_raises(measuring, monkeypatch):
    with Store() as store:
        assert onboarding.will_measure(store, "draft", DEFAULT_TARGET) is True
        store_curve(store, "draft", DEFAULT_TARGET)
        assert onboarding.will_measure(store, "draft", DEFAULT_TARGET) is False
        assert onboarding.will_measure(store, "lookahead", "/no/such/model") is False  # guidance says what is wrong

        def broken(choice):
            raise RuntimeError("no hardware")

        monkeypatch.setattr(advice, "detect_hardware", broken)
        assert onboarding.will_measure(store, "ngram", DEFAULT_TARGET) is False


def test_ctrl_c_during_the_measurement_keeps_the_starting_values_and_loses_nothing(monkeypatch):
    monkeypatch.setattr(advice, "detect_hardware", lambda choice: cpu_hw())
    calls = []

    def interrupted(ctx, method, target, backend):
        calls.append(method)
        raise KeyboardInterrupt

    monkeypatch.setattr(advice, "measure_machine", interrupted)
    defaults = PARAM_MODELS["lookahead"]().model_dump()
    with Store() as store:
        store.save_params("draft", {"k": 3})  # stored before: must stay
        asked, said, _ = onboard(store, {"Which method": "lookahead", "lookahead parameter ngram": "3",
                                         "Run a short first": "n"})
        assert calls == ["lookahead"]  # measured once, interrupted, not retried
        for name in OWN_PARAMS["lookahead"]:
            assert asked[f"lookahead parameter {name}"] == str(defaults[name])
        skipped = [line for line in said if line.startswith("Measuring skipped")]
        assert len(skipped) == 1 and "\n" not in skipped[0] and "starting values" in skipped[0]
        assert store.onboarding_complete()
        assert store.get_params("lookahead") == {"target": DEFAULT_TARGET, "ngram": 3, "max_new_tokens": 128,
                                                 "temperature": 0.0}
        assert store.get_params("draft") == {"k": 3}
        assert store.get_answer("onboarding.method") == "lookahead"
        assert store.get_answer("onboarding.lookahead.target") == DEFAULT_TARGET
        assert store.get_cost_curve(DEFAULT_TARGET, cpu_hw()["name"]) is None  # no half curve stored
    assert not any("Traceback" in line for line in said)


def test_sigterm_during_the_measurement_still_ends_the_process(monkeypatch):
    monkeypatch.setattr(advice, "detect_hardware", lambda choice: cpu_hw())

    def terminated(ctx, method, target, backend):
        raise Terminated("SIGTERM")

    monkeypatch.setattr(advice, "measure_machine", terminated)
    with Store() as store, pytest.raises(Terminated):
        onboard(store, {"Which method": "ngram"})
    with Store() as store:  # what was answered stays saved, for the next session to resume
        assert store.get_answer("onboarding.method") == "ngram" and not store.onboarding_complete()
        assert store.get_answer("onboarding.ngram.target") == DEFAULT_TARGET


# ---------------------------------------------------------------------------- 2. a shared reason is said once
UNSIZED = "default: not sized, no cost curve of the target is measured on this machine"  # advice.UNSIZED_REASON


def test_a_reason_shared_by_every_parameter_is_said_once():
    text = suggestion_text("lookahead", {"source": "not measured", "suggested_params": {"window": 15, "ngram": 5,
                                                                                      "guess": 5},
                                         "param_reasons": {k: UNSIZED for k in ("window", "ngram", "guess")}})
    assert text.count(UNSIZED) == 1 and text.count("window=15") == 1
    assert "  window=15, ngram=5, guess=5: " + UNSIZED in text.splitlines()
    assert text.splitlines()[-1].startswith("Press Enter to keep a suggested value")


def test_different_reasons_are_given_per_parameter():
    text = suggestion_text("lookahead", {"source": "sized", "suggested_params": {"window": 4, "ngram": 3, "guess": 2},
                                         "param_reasons": {"window": "sized: wide", "ngram": "sized: short",
                                                           "guess": "sized: wide"}})
    lines = text.splitlines()
    assert lines[0].endswith("window=4, ngram=3, guess=2")
    assert lines[1:4] == ["  window=4: sized: wide", "  ngram=3: sized: short", "  guess=2: sized: wide"]
    partial = suggestion_text("draft", {"source": "s", "suggested_params": {"k": 8, "adaptive_k": True},
                                        "param_reasons": {"k": "sized: x"}})  # one reason only: per parameter
    assert partial.splitlines()[:2] == ["Suggested starting values (s; advice to be measured): k=8, adaptive_k=True",
                                        "  k=8: sized: x"]


def test_unsized_values_are_offered_with_one_reason(measuring, monkeypatch):
    monkeypatch.setattr(advice, "measure_machine", lambda *a: (_ for _ in ()).throw(KeyboardInterrupt()))
    with Store() as store:
        _, said, _ = onboard(store, {"Which method": "eagle", "Run a short first": "n"})
    text = "\n".join(said)
    assert UNSIZED == advice.UNSIZED_REASON
    assert text.count(UNSIZED) == 1 and "depth=5, topk=4, tree_nodes=10: " + UNSIZED in text
    # said once: the header (the answer's source) says why nothing was measured, not that no curve is measured
    header = next(line for line in text.splitlines() if line.startswith("Suggested starting values ("))
    assert "no cost curve" not in header and "starting values" in header
    assert text.count("no cost curve") == 1


# ---------------------------------------------------------------------------- 3. every method is offered
def test_every_method_of_the_table_is_offered_by_number_and_name(measuring):
    assert list(METHODS) == list(ACCELERATED) == ["draft", "medusa", "lookahead", "eagle", "ngram"]
    assert "no extra model, no training" in METHODS["ngram"] and "prompt lookup" in METHODS["ngram"]
    assert "EAGLE head" in METHODS["eagle"] and "draft model" in METHODS["draft"]
    for i, name in enumerate(METHODS, start=1):
        assert choose_method(str(i)) == name and choose_method(f"I'd like {name}") == name
    assert choose_method(str(len(METHODS) + 1)) is None and choose_method("0") is None
    assert set(OWN_PARAMS) == set(METHODS)  # a method added to the table needs its questions here
    for method, names in OWN_PARAMS.items():
        assert set(names) <= set(PARAM_MODELS[method].model_fields)
    methods = iter(["fast please", "6", "5"])  # no method named, a number past the last, then ngram's number
    asked: list[str] = []
    said: list[str] = []

    def ask(question: str, default: str) -> str:
        asked.append(question)
        return next(methods) if question.startswith("Which method") else "n" if question.startswith("Run") else ""

    with Store() as store:
        run_onboarding(Session(store, OfflineBrain()), ask, said.append)
        assert store.get_answer("onboarding.method") == "ngram"
    questions = [q for q in asked if q.startswith("Which method")]
    assert len(questions) == 3
    assert all(f"{i}) {name} — {METHODS[name]}" in questions[0] for i, name in enumerate(METHODS, start=1))
    assert said.count("Please answer draft, medusa, lookahead, eagle or ngram (or 1, 2, 3, 4, 5), or skip.") == 2


def test_ngram_asks_no_draft_and_saves_what_was_changed(measuring):
    with Store() as store:
        asked, said, _ = onboard(store, {"Which method": "5", "ngram parameter num_candidates": "2",
                                         "Run a short first": "n"})
        saved = store.get_params("ngram")
        assert store.get_answer("default_method") == "ngram"
    assert not any(q.startswith("Draft model") for q in asked)
    own = [q for q in asked if q.startswith("ngram parameter")]
    assert own == [f"ngram parameter {k}" for k in OWN_PARAMS["ngram"]]
    assert saved == {"target": DEFAULT_TARGET, "num_candidates": 2, "max_new_tokens": 128, "temperature": 0.0}
    assert first_run_plan("ngram", saved) == (SMALL_TARGET, 32)  # no model to train or draft: the small one
    assert any(line.startswith("Saved ngram parameters") for line in said)


def test_eagle_asks_for_its_head_and_keeps_the_first_run_on_the_heads_target(measuring, tmp_path):
    with Store() as store:
        asked, said, _ = onboard(store, {"Which method": "eagle", "eagle parameter depth": "4",
                                         "Run a short first": "n"})
        saved = store.get_params("eagle")
    assert "EAGLE head folder (empty: the head shipped for the target)" in asked  # the default target ships one
    assert not any(q.startswith("Draft model") for q in asked)
    assert saved == {"target": DEFAULT_TARGET, "depth": 4, "max_new_tokens": 128, "temperature": 0.0}
    assert first_run_plan("eagle", saved) == (DEFAULT_TARGET, 32)  # its head fits this target only
    assert first_run_plan("medusa", {}) == (DEFAULT_TARGET, 32)


def test_eagle_without_a_shipped_head_needs_a_head_folder(measuring, tmp_path):
    head = tmp_path / "head"
    head.mkdir()
    heads = iter(["", str(tmp_path / "missing"), str(head)])  # none, a folder not there, then a real one
    answers = {"Which method": "eagle", "Target model": SMALL_TARGET, "Run a short first": "y", "What prompt": "hi"}
    asked: dict[str, str] = {}
    said: list[str] = []

    def ask(question: str, default: str) -> str:
        asked[question] = default
        if question.startswith("EAGLE head folder"):
            return next(heads)
        return next((a for q, a in answers.items() if question.startswith(q)), "")

    with Store() as store:
        session = Session(store, OfflineBrain())
        ran: list[str] = []
        session.handle = ran.append  # the first run's command, not run
        run_onboarding(session, ask, said.append)
        saved = store.get_params("eagle")
    question = next(q for q in asked if q.startswith("EAGLE head folder"))
    assert f"none is shipped for {SMALL_TARGET}" in question
    text = "\n".join(said)
    assert f"EAGLE needs a head trained for {SMALL_TARGET}" in text and "specpilot eagle train" in text
    assert f"no folder {tmp_path / 'missing'}" in text
    assert saved["eagle_heads"] == str(head) and saved["target"] == SMALL_TARGET
    [command] = ran
    assert command.startswith(f"/run eagle max_new_tokens=32 eagle_heads={head} ") and command.endswith(" hi")
    assert "target=" not in command  # stays on the target the head was trained for


def test_a_medusa_heads_folder_that_is_not_there_is_refused(measuring, tmp_path):
    heads = tmp_path / "heads"
    heads.mkdir()
    answers = iter([str(tmp_path / "missing"), str(heads)])  # a folder not there, then a real one
    said: list[str] = []

    def ask(question: str, default: str) -> str:
        if question.startswith("Medusa heads folder"):
            return next(answers)
        return "medusa" if question.startswith("Which method") else "n" if question.startswith("Run a short") else ""

    with Store() as store:
        run_onboarding(Session(store, OfflineBrain()), ask, said.append)
        saved = store.get_params("medusa")
    assert f"no folder {tmp_path / 'missing'}" in "\n".join(said) and "holding the Medusa heads" in "\n".join(said)
    assert saved["medusa_heads"] == str(heads)
    onboarding.check_medusa_heads("")  # empty: the shipped or trained heads, nothing to check


def test_the_heads_answer_is_resumed_not_asked_again(measuring, tmp_path):
    with Store() as store:
        store.save_answer("onboarding.method", "eagle")
        store.save_answer("onboarding.eagle.target", DEFAULT_TARGET)
        store.save_answer("onboarding.eagle.eagle_heads", "")
        asked, _, _ = onboard(store, {"Run a short first": "n"})
    assert not any(q.startswith(("Which method", "Target model", "EAGLE head")) for q in asked)
    assert re.match(r"eagle parameter depth", next(q for q in asked if q.startswith("eagle parameter")))
