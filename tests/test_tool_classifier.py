"""The shipped tool classifier (agent.brains.classifier): fitted on the fitted chat sets only, judged on the
held-out ones."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from agent.brains import classifier
from agent.brains.classifier import NO_TOOL, TOOL_HEAD, default_classifier, features, load_bytes, save
from tools.agent_tools import registry

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "benchmarks" / "data"
HELD_OUT = ("conversations_fresh_j.jsonl", "conversations_fresh_u.jsonl", "conversations_fresh_ac.jsonl")


def test_the_classifier_ships_and_knows_only_registry_tools():
    model = default_classifier()
    assert model is not None
    assert set(model.labels) - {NO_TOOL} <= set(registry.load_tools())


def test_the_held_out_sets_were_not_in_its_training_pool():
    pool = {json.loads(line)["text"] for line in (ROOT / "prompts" / "tool_examples.jsonl").read_text().splitlines()
            if line.strip()}
    for name in HELD_OUT:
        rows = [json.loads(line) for line in (DATA / name).read_text().splitlines() if line.strip()]
        assert not pool & {r["text"] for r in rows}, name


def test_it_picks_the_right_tool_on_requests_it_never_saw():
    model = default_classifier()
    for name in HELD_OUT:
        rows = [json.loads(line) for line in (DATA / name).read_text().splitlines() if line.strip()]
        right = sum((model.choose(r["text"]).tool or NO_TOOL) == (r.get("tool") or NO_TOOL) for r in rows)
        assert right / len(rows) >= 0.9, (name, right, len(rows))


def test_choices_are_limited_to_the_tools_offered():
    model = default_classifier()
    choice = model.choose("compare draft and ngram on 'hello'", allowed={"explain"})
    assert choice.tool in ("explain", None)
    assert 0.0 <= choice.probability <= 1.0


def test_features_do_not_depend_on_case_or_spacing():
    assert features("Run  DRAFT") == features("run draft")
    assert features("") == features("   ") or not features("")


def test_its_argument_heads_read_choice_values_on_requests_they_never_saw():
    """Every enum or boolean argument the labelled sets give values to has a head; on the held-out sets the
    values the brain takes from them where they are sure (LocalBrain.choices) match the labels for at least
    95% of those choice arguments of the right tool."""
    from agent.brains.classifier import ABSENT
    from agent.brains.local import LocalBrain

    model = default_classifier()
    assert {"method", "backend", "chat", "peers", "topic", "include_done_tasks"} <= set(model.heads)
    brain, tools = LocalBrain(classifier=model), registry.load_tools()
    for name in HELD_OUT:
        right = total = 0
        for row in [json.loads(line) for line in (DATA / name).read_text().splitlines() if line.strip()]:
            if not row.get("tool"):
                continue
            given, withheld, _ = brain.choices(row["text"], tools[row["tool"]])
            for arg in [a for a in model.heads if a in given or a in withheld]:
                want = (row.get("args") or {}).get(arg, ABSENT)
                total += 1
                right += given.get(arg, ABSENT) == want
        assert total > 100 and right / total >= 0.95, (name, right, total)


def test_its_number_head_says_which_argument_a_written_number_sets_on_requests_it_never_saw():
    """Each digit string of a held-out request to a tool: the head's likeliest argument is the one the labels
    give that number (anywhere in the arguments), or none (a number inside a prompt or a model's name)."""
    from agent.brains.classifier import NO_FIELD

    head = default_classifier().number_head
    assert head is not None
    for name in HELD_OUT:
        right = total = 0
        for row in [json.loads(line) for line in (DATA / name).read_text().splitlines() if line.strip()]:
            if not row.get("tool"):
                continue
            leaves = []

            def walk(args):
                for key, value in args.items():
                    if isinstance(value, dict):
                        walk(value)
                    elif isinstance(value, (int, float)) and not isinstance(value, bool):
                        leaves.append([key, float(value)])

            walk(row.get("args") or {})
            for raw, probs in head.fields(row["text"], row["tool"]):
                match = next((leaf for leaf in leaves if leaf[1] == float(raw)), None)
                want = match[0] if match else NO_FIELD
                if match:
                    leaves.remove(match)
                total += 1
                right += max(probs, key=probs.get) == want
        assert total > 50 and right / total >= 0.9, (name, right, total)


def test_numbers_written_as_words_are_read_as_digits():
    from agent.brains.classifier import numbers

    found = [raw for raw, _ in numbers("eagle at depth six, ten repeats, two hundred fifty six new tokens; this one")]
    assert found == ["6", "10", "256"]


def test_a_number_written_in_words_spans_its_words_as_written():
    from agent.brains.classifier import _numbers

    text = "the baseline, repeated five times, then 64 tokens; two hundred fifty six more"
    spans = [(raw, text[start:end]) for raw, _, _, (start, end) in _numbers(text)]
    assert spans == [("5", "five"), ("64", "64"), ("256", "two hundred fifty six")]


def test_a_values_reading_is_its_last_tokens_state_and_the_next_tokens_mean():
    from agent.brains.classifier import READ_AFTER, value_reading

    # tokens: "run" "5" "0" " times" " now" (the number 50 is two tokens)
    offsets = np.array([[0, 3], [4, 5], [5, 6], [6, 12], [12, 16]])
    states = np.arange(5 * 2, dtype=np.float32).reshape(5, 2)
    got = value_reading(states, offsets, 4, 6)
    assert READ_AFTER == 2 and got.tolist() == [*states[2], *states[3:5].mean(0)]
    # at the end of the request, the value's own state stands for what follows
    assert value_reading(states, offsets, 13, 16).tolist() == [*states[4], *states[4]]


def test_a_decimal_written_without_its_leading_zero_is_one_number():
    from agent.brains.classifier import numbers

    assert [raw for raw, _ in numbers("medusa, temp 0.7, top-p .9, seed 42")] == ["0.7", ".9", "42"]
    # a point inside a word is no decimal point: a version, a model name
    assert [raw for raw, _ in numbers("qwen2.5-coder v.2")] == ["2.5", "2"]


def test_an_enumeration_of_numbers_is_read_as_one_list():
    from agent.brains.classifier import _runs
    from agent.brains.local import LocalBrain

    head = default_classifier().number_head
    serving = registry.load_tools()["measure_serving"]
    # every level of "2, 6 and 24 concurrent requests" is read beside "concurrent requests", the first too
    assert LocalBrain.numbers(head, "how do 2, 6 and 24 concurrent requests change the draft speedup under vllm?",
                              serving, None)[0] == {"concurrency": [2, 6, 24]}
    assert LocalBrain.numbers(head, "vllm sweep for ngram: K 3 or 5, with 1, 4, 8 and 12 clients in parallel",
                              serving, None)[0] == {"k": [3, 5], "concurrency": [1, 4, 8, 12]}
    # the last level, read beside the next list's name, goes with the run most of whose numbers are surely levels
    assert LocalBrain.numbers(head, "sweep concurrency 2, 4, 16 and 32, and k = 2, 3 and 6 for ngram",
                              serving, None)[0] == {"concurrency": [2, 4, 16, 32], "k": [2, 3, 6]}
    assert LocalBrain.numbers(head, "eagle under vllm at concurrency 1, 2 and 8, and k 3 and 5",
                              serving, None)[0] == {"concurrency": [1, 2, 8], "k": [3, 5]}
    # an argument's name between numbers splits them; a digit inside a word ("v1") joins no run
    assert [run for run, _, _ in _runs("conc 1,8 k 2,4", head.labels)] == [[0, 1], [2, 3]]
    assert [run for run, _, _ in _runs("at http://host:8000/v1 - 1, 8 and 32", head.labels)] == [[2, 3, 4]]


def test_its_reading_heads_were_fitted_under_the_built_in_model_and_the_prompt_it_now_has():
    """The heads over the model's reading hold for one model and prompt: a prompt change needs a refit
    (benchmarks/scripts/train_tool_classifier.py --reading DIR --reading-only), or they are never used."""
    from agent.brains.local import DEFAULT_LOCAL_MODEL, chat_prefix, reading_state

    reading = default_classifier().reading
    assert reading is not None
    assert reading.state == reading_state(DEFAULT_LOCAL_MODEL, chat_prefix()), \
        "the local brain's prompt changed since the reading heads were fitted: refit them"
    assert set(reading.heads) == {TOOL_HEAD, *default_classifier().heads}


def test_the_reading_heads_answer_only_for_the_text_read_and_survive_a_round_trip(tmp_path):
    import io

    clf = default_classifier()
    reading = clf.reading
    buffer = io.BytesIO()
    save(buffer, sorted(clf.index, key=clf.index.get), clf.idf, clf.weights, clf.bias, clf.labels, clf.heads,
         clf.number_head, clf.reference_head, reading=reading)
    again = load_bytes(buffer.getvalue())
    assert again.reading.state == reading.state and set(again.reading.heads) == set(reading.heads)
    text = "compare every method on 'Write a haiku about rain'"
    plain = again.probabilities(text)
    hidden = reading.mean + reading.scale * np.linspace(-0.02, 0.02, len(reading.mean), dtype=np.float32)
    again.read(text, hidden)
    read = again.probabilities(text)
    assert read != plain and abs(sum(read.values()) - 1) < 1e-4
    assert again.probabilities("another request") == load_bytes(buffer.getvalue()).probabilities("another request")
    assert again.argument("peers", text, "compare_methods") != load_bytes(buffer.getvalue()).argument(
        "peers", text, "compare_methods")
    again.read(text, None)
    assert again.probabilities(text) == plain


def test_the_value_heads_of_the_reading_answer_only_for_the_text_read_and_survive_a_round_trip():
    """A value head of the model's reading is used, bound to the reading, only for the request the model read;
    any other request gets the TF-IDF head."""
    import io
    from dataclasses import replace

    from agent.brains.classifier import READ_AFTER, _numbers

    clf = default_classifier()
    plain = clf.number_head
    size = 2 * len(clf.reading.mean) if clf.reading is not None else 8
    rng = np.random.default_rng(0)
    head = replace(plain, hidden=rng.normal(size=(size, len(plain.labels))).astype(np.float32),
                   hidden_mean=np.zeros(size, np.float32), hidden_scale=np.ones(size, np.float32))
    reading = clf.reading or __import__("agent.brains.classifier", fromlist=["Reading"]).Reading(
        "state", np.zeros(size // 2, np.float32), np.ones(size // 2, np.float32), {})
    reading = replace(reading, values={"number": head})
    buffer = io.BytesIO()
    save(buffer, sorted(clf.index, key=clf.index.get), clf.idf, clf.weights, clf.bias, clf.labels, clf.heads,
         clf.number_head, clf.reference_head, reading=reading)
    again = load_bytes(buffer.getvalue())
    loaded = again.reading.values["number"]
    assert np.allclose(loaded.hidden, head.hidden, atol=1e-2) and loaded.kind == "number" and loaded.labels == plain.labels
    assert (loaded.hidden_mean == head.hidden_mean).all() and (loaded.hidden_scale == head.hidden_scale).all()
    text = "run draft with k 5 on 'hello'"
    tokens = (rng.normal(size=(len(text), size // 2)).astype(np.float32),  # one token per character
              np.array([[i, i + 1] for i in range(len(text))]))
    assert again.value_head("number", text) is again.number_head  # nothing read yet
    again.read(text, reading.mean, tokens)
    bound = again.value_head("number", text)
    assert bound is not again.number_head and bound.read[0] == text and bound is again.value_head("number", text)
    # the value's reading is its own token's state and the next READ_AFTER tokens' mean, standardised
    _, feats, beside, (start, end) = _numbers(text)[0]
    assert text[start:end] == "5"
    expected = bound._probabilities(feats, beside, "run_method",
                                    np.concatenate([tokens[0][start], tokens[0][end:end + READ_AFTER].mean(0)]))
    assert bound.fields(text, "run_method")[0][1] == expected
    assert again.value_head("number", "another request") is again.number_head
    again.read(text, None)
    assert again.value_head("number", text) is again.number_head


def test_an_arguments_name_is_read_with_its_words_joined_where_no_other_name_joins_the_same():
    labels = ["warmup", "topk", "top_k", "max_new_tokens"]
    hits = classifier.naming((["untimed"], ["warm-ups", "first"]), labels)  # "2 untimed warm-ups": warmup's name
    assert hits[0].any() and not hits[1:].any()
    hits = classifier.naming(([], ["top-k"]), labels)  # top_k's own spelling, never eagle's topk
    assert hits[2].any() and not hits[1].any()
