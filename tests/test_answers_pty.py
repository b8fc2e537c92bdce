"""The answers a person reads, through a real pseudo-terminal (pexpect) as they would type them: a fresh home,
commands (no model needed), onboarding skipped. Each reply is the short form: the choice or the result,
the figure that decides it with its run id, the next step, in a few lines; /details shows the whole of the last
answer. The compare runs for real on tiny random models saved as the draft's and prompt lookup's target, so it
takes seconds."""

from __future__ import annotations

import re
from pathlib import Path

import pexpect
import pytest

from chat_pty import PROMPT, quit_chat, spawn_chat
from memory import Store

WIDTH = 1000  # wide enough that no answer line wraps: a line counted is a line of the answer
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(])")
PASS_COSTS = [1.0, 1.5, 1.9, 2.4, 2.8, 3.3, 3.7, 4.1]


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory) -> tuple[Path, Path]:
    """A tiny random target and a different tiny draft sharing its tokenizer."""
    from conftest import make_tiny_model_folder

    folder = tmp_path_factory.mktemp("tiny-models")
    return make_tiny_model_folder(folder / "target"), make_tiny_model_folder(folder / "draft", seed=1)


def spawn_answers_chat(home: Path) -> pexpect.spawn:
    return spawn_chat(home, "--skip-onboarding", width=WIDTH, timeout=120)


def ask(chat: pexpect.spawn, text: str) -> list[str]:
    """Type ``text``; return the reply's lines (without the echoed input and blank lines)."""
    chat.sendline(text)
    chat.expect_exact(PROMPT)
    lines = [line.rstrip() for line in chat.before.replace("\r", "").split("\n")]
    assert lines[0].strip() == text  # the terminal's echo of what was typed
    return [line for line in lines[1:] if line.strip()]


def test_each_answer_is_short_answers_what_was_asked_and_details_show_the_rest(specpilot_home, tiny_models):
    target, draft = tiny_models
    with Store() as store:
        store.save_params("draft", {"target": str(target), "draft": str(draft), "max_new_tokens": 8})
        store.save_params("ngram", {"target": str(target), "max_new_tokens": 8})
        slow = store.add_run({"method": "lookahead", "target": str(target), "prompt": "def add(a, b):",
                              "speedup": 0.82, "mean_accepted_per_step": 1.31, "hardware": {"name": "Test CPU (2 cores)"},
                              "params": {"window": 3, "ngram": 3, "guess": 1, "pass_costs": PASS_COSTS}})
    chat = spawn_answers_chat(specpilot_home)
    chat.expect_exact(PROMPT)

    # a choice between methods, the pick first, each candidate with the source of its figure, an offer to measure
    choice = ask(chat, "/guide summarising long documents")
    assert len(choice) <= 6 and choice[0] == "For summarization: ngram first."
    assert choice[1].startswith("- ngram: not measured (the methods' known properties); copies spans of the prompt")
    assert "compare ngram and draft on <your prompt>" in choice[-1]

    medusa = ask(chat, "/explain medusa sentences=2")
    said = [line for line in medusa if not line.startswith("(/details")]
    assert len(SENTENCE_END.split(" ".join(said))) <= 3 and "Medusa" in said[0]

    compared = ask(chat, "/compare draft ngram 'def add(a, b):'")
    assert len(compared) <= 5
    assert re.match(r"Recommended(?: on this machine for this prompt: (draft|ngram), the fastest lossless|: plain decoding)",
                    compared[0])
    ids = dict(re.findall(r"(draft|ngram) \d+\.\d\dx \(run ([0-9a-f]{8})", compared[1]))
    with Store() as store:
        assert {m: store.get_run(i)["method"] for m, i in ids.items()} == {"draft": "draft", "ngram": "ngram"}
        best = max(store.find_runs(limit=10), key=lambda r: r["speedup"])

    worth = ask(chat, "is it worth it on my laptop?")  # free text: one message, what reads words and what to fetch
    assert len(worth) <= 2 and "commands only" in worth[0] and "/help" in worth[-1]
    assert best["speedup"] is not None

    slower = ask(chat, "/explain lookahead")  # with the stored run: tokens per step beside what passes cost
    [measured] = [line for line in slower if line.startswith("Measured here")]
    assert f"run {slow} (lookahead" in measured and "0.82x, 1.31 tokens per step" in measured
    assert "a pass over 2, 4, 8 tokens cost 1.50x, 2.40x, 4.10x a one-token pass" in measured
    assert len(slower) <= 5

    details = ask(chat, "/details")  # the whole explanation the short answer came from
    assert len(details) > 3 * len(slower) and any("Reported results." in line for line in details)
    quit_chat(chat)

    with Store() as store:
        tasks = {t["request"]: t for t in store.list_tasks()}
    assert tasks["/explain medusa sentences=2"]["status"] == "done"
    not_read = tasks["is it worth it on my laptop?"]  # recorded as not done, with the reason, not as done
    assert not_read["status"] == "failed" and not_read["left"] == ["not done: free text needs a brain that reads words"]
