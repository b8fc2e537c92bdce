"""The local model's retrieved worked examples: drawn from the fitted chat sets only, nearest first."""

from __future__ import annotations

import json
import re
from pathlib import Path

from agent.brains import local_prompt
from agent.brains.examples import Example, ExampleIndex, default_index

DATA = Path(__file__).resolve().parents[1] / "benchmarks" / "data"


def held_out_texts() -> set[str]:
    names = re.findall(r"^\| (conversations_fresh_\w+\.jsonl) \|.*\| held out \|$",
                       (DATA / "MANIFEST.md").read_text(encoding="utf-8"), re.MULTILINE)
    assert names  # the manifest names its held-out sets
    return {json.loads(line)["text"] for name in names
            for line in (DATA / name).read_text(encoding="utf-8").splitlines() if line.strip()}


def test_the_pool_holds_no_request_of_a_held_out_set():
    pool = {e.text for e in default_index().examples}
    assert len(pool) > 1500
    assert not pool & held_out_texts()


def test_nearest_examples_share_the_request_words():
    index = ExampleIndex([Example("run lookahead on my prompt", "run_method", {"method": "lookahead"}),
                          Example("save k=4 for draft", "save_params", {"method": "draft"}),
                          Example("hello there", None, {}, "Hello!")])
    assert [e.tool for e in index.nearest("please save k=6 for the draft method", k=2)][0] == "save_params"
    assert index.nearest("zzz qqq", k=2) == []


def test_examples_are_shown_as_calls_and_replies():
    text = local_prompt.examples_text([Example("list my runs", "lookup_runs", {}),
                                       Example("hi", None, {}, "Hello!")])
    assert '{"name": "lookup_runs", "arguments": {}}' in text
    assert '{"name": "reply", "arguments": {"text": "Hello!"}}' in text
    assert local_prompt.examples_text([]) == ""


def test_nearest_can_keep_to_one_tool_or_to_answers_in_words():
    index = ExampleIndex([Example("run lookahead on my prompt", "run_method", {"method": "lookahead"}),
                          Example("save lookahead k=4", "save_params", {"method": "lookahead"}),
                          Example("lookahead hello", None, {}, "Hello!")])
    assert [e.tool for e in index.nearest("lookahead please", k=3, tool="save_params")] == ["save_params"]
    assert [e.reply for e in index.nearest("lookahead please", k=3, tool="")] == ["Hello!"]


def test_typical_examples_stand_for_every_class_and_differ_from_each_other():
    index = default_index()
    picked = index.typical(3)
    classes = {e.tool or "" for e in index.examples}
    assert {e.tool or "" for e in picked} == classes
    for cls in classes:
        members = [e for e in picked if (e.tool or "") == cls]
        assert 1 <= len(members) <= 3 and len({e.text for e in members}) == len(members)
    assert picked == index.typical(3)  # chosen by the data, the same every time
    assert not {e.text for e in picked} & held_out_texts()


def test_the_typical_examples_are_chosen_once_and_read_back(tmp_path, monkeypatch):
    from agent.brains import examples

    chosen = examples.typical_examples(2, tmp_path)
    assert chosen == examples.default_index().typical(2) and len(list(tmp_path.glob("typical-*.json"))) == 1
    monkeypatch.setattr(examples, "default_index", lambda: (_ for _ in ()).throw(AssertionError("chosen again")))
    assert examples.typical_examples(2, tmp_path) == chosen  # read back, not chosen again
    blocked = tmp_path / "a file"
    blocked.write_text("")
    monkeypatch.undo()
    assert examples.typical_examples(2, blocked) == chosen  # a folder that cannot be written: chosen, not kept
