"""The rule planner on requests in everyday words: recall ("what did we do last time?"), saving
parameters from chat ("save k=6 as my default for draft", /save), measuring the cost curve (/measure),
comparisons on the small model, other hardware (a plain answer, no estimate), and the rest of its
tools. The phrasings here are not the ones the planner was written against: the same kinds of
request in other words must map the same way (tool and key arguments, planned with ``ask --plan-only``)."""

from __future__ import annotations

import json

import pytest

from agent.ask import ask
from agent.brains.offline import OfflineBrain
from agent.brains.param_words import find_params
from agent.brains.phrases import SHORT_PROMPT, find_hardware, find_target
from agent.loop import Session
from conftest import SHARED
from memory import Store

PARAPHRASES = [
    ('what did we work on in the previous session?', 'recall', {}),
    ('can you remind me where we left off?', 'recall', {}),
    ('show me our history', 'recall', {}),
    ('what have we done so far?', 'recall', {}),
    ('which parameters did I save?', 'recall', {}),
    ("what's still pending from earlier runs?", 'recall', {}),
    ('set lookahead W to 7', 'save_params', {'method': 'lookahead', 'params': {'window': 7}}),
    ('make k=4 the default for the draft model', 'save_params', {'method': 'draft', 'params': {'k': 4}}),
    ('remember temperature 0.7 for medusa', 'save_params', {'method': 'medusa', 'params': {'temperature': 0.7}}),
    ('change the lookahead ngram size to 4', 'save_params', {'method': 'lookahead', 'params': {'ngram': 4}}),
    ('always use 64 new tokens for lookahead', 'save_params', {'method': 'lookahead', 'params': {'max_new_tokens': 64}}),
    ('update the draft settings: k = 5', 'save_params', {'method': 'draft', 'params': {'k': 5}}),
    ('/save lookahead window=5 ngram=3 guess=2', 'save_params', {'method': 'lookahead', 'params': {'window': 5, 'ngram': 3, 'guess': 2}}),
    ('/measure', 'measure_cost_curve', {}),
    ('how expensive is a forward pass here? measure the cost curve', 'measure_cost_curve', {}),
    ("benchmark lookahead on 'Sort a list in Go'", 'run_method', {'method': 'lookahead', 'prompt': 'Sort a list in Go'}),
    ('give medusa a try with "Explain TCP handshakes"', 'run_method', {'method': 'medusa', 'prompt': 'Explain TCP handshakes'}),
    ("what speedup does prompt lookup get on 'Repeat after me: a b c a b c'?", 'run_method', {'method': 'ngram'}),
    ("draft vs lookahead on 'Write a limerick'", 'compare_methods', {'methods': ['draft', 'lookahead'], 'prompt': 'Write a limerick'}),
    ('put medusa and lookahead head to head on "Describe Paris"', 'compare_methods', {'methods': ['medusa', 'lookahead'], 'prompt': 'Describe Paris'}),
    ("which method is quickest on 'def add(a, b):'?", 'compare_methods', {'prompt': 'def add(a, b):'}),
    ('compare draft and lookahead on a short prompt with the small model', 'compare_methods', {'target': 'smollm2-135m-instruct'}),
    ('compare lookahead and prompt lookup on any prompt using smollm2', 'compare_methods', {'methods': ['lookahead', 'ngram'], 'target': 'smollm2-135m-instruct'}),
    ('lookahead versus medusa please', None, {}),
    ('how do draft and medusa differ?', 'explain', {'topic': 'tradeoffs'}),
    ('what speedup did lookahead get last time?', 'lookup_runs', {'method': 'lookahead'}),
    ('list my medusa runs', 'lookup_runs', {'method': 'medusa'}),
    ('how many tokens/s did the draft run reach?', 'lookup_runs', {'method': 'draft'}),
    ('any advice on the medusa tree?', 'guidance', {'method': 'medusa'}),
    ('recommend a K for speculative decoding', 'guidance', {'method': 'draft'}),
    ('what window size is best for lookahead on this machine?', 'guidance', {'method': 'lookahead'}),
    ('which draft model should I pair with the 1.5b target?', 'guidance', {'method': 'draft'}),
    ('tell me about jacobi decoding', 'explain', {'topic': 'lookahead'}),
    ('what is medusa?', 'explain', {'topic': 'medusa'}),
    ('is lade installed?', 'check_deps', {}),
    ('am I ready to run medusa?', 'check_deps', {'method': 'medusa'}),
    ('pip install gguf please', 'install_packages', {'packages': ['gguf']}),
    ('could you train some medusa heads?', 'train_medusa', {}),
    ('upload the results to https://example.com/upload', 'share_results', {'destination': 'https://example.com/upload'}),
    ('write a report', 'write_report', {}),
    ('what speedup would draft decoding give on an H100?', None, {}),
    ('on an M2 Mac?', None, {}),
    ('and how about on my GPU', None, {}),
    ('would medusa be faster on an A100?', None, {}),
    ('predict lookahead throughput on a TPU', None, {}),
    ('hello there', None, {}),
    ('bye!', None, {}),
    ('who won the football yesterday?', None, {}),
    ('serve the draft setup behind an API endpoint', None, {}),
    ('what were we doing before?', 'recall', {}),
    ('what do you know about my setup?', 'recall', {}),
    ('recap our last session please', 'recall', {}),
    ('use k=3 by default for the draft method', 'save_params', {'method': 'draft', 'params': {'k': 3}}),
    ('store guess=3 for lookahead', 'save_params', {'method': 'lookahead', 'params': {'guess': 3}}),
    ('I want the draft method to use k 7 from now on', 'save_params', {'method': 'draft', 'params': {'k': 7}}),
    ('set the medusa threshold to 0.05', 'save_params', {'method': 'medusa', 'params': {'posterior_threshold': 0.05}}),
    ('time medusa on: list three colours', 'run_method', {'method': 'medusa', 'prompt': 'list three colours'}),
    ("can you measure lookahead on the prompt 'Translate hello to French'?", 'run_method', {'method': 'lookahead', 'prompt': 'Translate hello to French'}),
    ("run draft with k=4 on 'def fib(n):'", 'run_method', {'method': 'draft', 'prompt': 'def fib(n):', 'params': {'k': 4}}),
    ("run lookahead on 'hello' with the small model", 'run_method', {'method': 'lookahead', 'prompt': 'hello', 'target': 'smollm2-135m-instruct'}),
    ("is draft faster than medusa on 'Write a CSV parser'?", 'compare_methods', {'methods': ['draft', 'medusa'], 'prompt': 'Write a CSV parser'}),
    ("pit all methods against each other on 'What is 2+2?'", 'compare_methods', {'prompt': 'What is 2+2?'}),
    ('compare the speedups of my medusa and lookahead runs', 'lookup_runs', {}),
    ('what was the acceptance in run 1a2b3c4d?', 'lookup_runs', {'run_id': '1a2b3c4d'}),
    ('show the results for lookahead', 'lookup_runs', {'method': 'lookahead'}),
    ("what's a sensible n-gram size for lookahead?", 'guidance', {'method': 'lookahead'}),
    ('how big should the lookahead window be?', 'guidance', {'method': 'lookahead'}),
    ('suggest draft parameters for smollm2', 'guidance', {'method': 'draft', 'target': 'smollm2-135m-instruct'}),
    ('how is lookahead different from draft decoding?', 'explain', {'topic': 'tradeoffs'}),
    ('describe speculative sampling', 'explain', {'topic': 'draft'}),
    ('are all the packages for lookahead there?', 'check_deps', {'method': 'lookahead'}),
    ("what's missing for medusa?", 'check_deps', {'method': 'medusa'}),
    ('get lade installed for me', 'install_packages', {'packages': ['lade']}),
    ('fine-tune medusa heads on my target', 'train_medusa', {}),
    ('send the report to ~/shared/specpilot', 'share_results', {'destination': '~/shared/specpilot'}),
    ('size lookahead for this CPU by measuring forward pass cost', 'measure_cost_curve', {}),
    ('what about an RTX 3090?', None, {}),
    ('is medusa worth it on a MacBook?', None, {}),
    ('tell me a joke', None, {}),
    ('good morning', None, {}),
    ('cheers, bye', None, {}),
]
DEV_SET = SHARED / "data" / "conversations_dev.jsonl"


@pytest.fixture
def store():
    with Store() as s:
        yield s


def key_args_match(expected, actual) -> bool:
    """``expected`` is contained in ``actual``; method lists may add the baseline."""
    if isinstance(expected, dict):
        return isinstance(actual, dict) and all(k in actual and key_args_match(v, actual[k]) for k, v in expected.items())
    if isinstance(expected, list):
        return isinstance(actual, list) and set(expected) <= set(actual) <= set(expected) | {"baseline"}
    return expected == actual


def planned_call(store, text: str) -> dict | None:
    """The first tool call the rule planner makes for ``text`` (plan only: nothing is run), or None."""
    calls = ask(store, text, brain="offline", plan_only=True)["tool_calls"]
    return calls[0] if calls else None


def assert_planned(store, text: str, tool: str | None, args: dict) -> None:
    """The rule planner's first call for ``text`` is ``tool`` with ``args`` among its arguments (none for None)."""
    call = planned_call(store, text)
    if tool is None:
        assert call is None, call
    else:
        assert call is not None and call["name"] == tool and key_args_match(args, call["input"]), call


@pytest.mark.parametrize("text,tool,args", PARAPHRASES)
def test_requests_in_other_words_map_onto_the_right_tool_and_arguments(store, text, tool, args):
    assert_planned(store, text, tool, args)


@pytest.mark.skipif(not DEV_SET.exists(), reason="the shared development conversations are not on this machine")
def test_accuracy_on_the_development_conversations(store):
    rows = [json.loads(line) for line in DEV_SET.read_text().splitlines() if line.strip()]
    right = 0
    for row in rows:
        call = planned_call(store, row["text"])
        right += (call is None) if row["tool"] is None else (
            call is not None and call["name"] == row["tool"] and key_args_match(row.get("args", {}), call["input"]))
    assert right / len(rows) >= 0.9


@pytest.mark.parametrize("text,params", [
    ("save k=6 as my default for draft", {"k": 6}), ("a window of 7", {"window": 7}),
    ("top_p 0.9", {"top_p": 0.9}), ("set lookahead W to 7", {"window": 7}), ("N=4, G=3", {"ngram": 4, "guess": 3}),
    ("top-k 40 and temperature 0.7", {"top_k": 40, "temperature": 0.7}), ("always use 64 new tokens", {"max_new_tokens": 64}),
    ("set the target to ./models/mine", {"target": "./models/mine"}), ("adaptive_k=off", {"adaptive_k": False}),
    ("the draft method", {}), ("e.g. 5 things", {}), ("what is k?", {})])
def test_parameter_values_are_read_from_words(text, params):
    assert find_params(text) == params


def test_hardware_and_model_words():
    assert find_hardware("how fast would this be on an H100?") == "H100"
    assert find_hardware("and on my GPU?") == "my GPU"
    assert find_hardware("what is a gpu") is None and find_hardware("run draft on this machine") is None
    assert find_target("with the small model") == "smollm2-135m-instruct"
    assert find_target("on qwen2.5-coder-0.5b-instruct") == "qwen2.5-coder-0.5b-instruct"


def test_saving_from_chat_updates_one_parameter_and_keeps_the_rest(store):
    store.save_params("lookahead", {"target": "my-model", "window": 5, "ngram": 4, "guess": 2})
    store.save_answer("default_method", "draft")
    s = Session(store, OfflineBrain())
    reply = s.handle("set lookahead W to 7")
    assert "Saved lookahead parameters" in reply.text and "window=7" in reply.text
    assert store.get_params("lookahead") == {"target": "my-model", "window": 7, "ngram": 4, "guess": 2}
    assert store.get_answer("default_method") == "draft"  # not asked to change the default method
    s.handle("/save draft k=6 adaptive_k=false")
    assert store.get_params("draft") == {"k": 6, "adaptive_k": False}
    bad = s.handle("/save lookahead window=0")
    assert "That did not work" in bad.text and store.get_params("lookahead")["window"] == 7
    assert "Usage: /save" in s.handle("/save draft").text


def test_a_parameter_s_default_for_a_method_does_not_change_the_default_method(store):
    store.save_answer("default_method", "lookahead")
    s = Session(store, OfflineBrain())
    assert "Saved draft parameters" in s.handle("save k=6 as my default for draft").text
    assert store.get_params("draft") == {"k": 6} and store.get_answer("default_method") == "lookahead"
    s.handle("make medusa my default method")
    s.handle("save k=5 for draft and make draft my default")
    assert store.get_answer("default_method") == "draft"


def test_a_parameter_without_a_method_asks_which(store):
    s = Session(store, OfflineBrain())
    question = s.handle("remember temperature 0.5")
    assert question.awaiting and "For which method should I save temperature=0.5" in question.text
    s.handle("medusa")
    assert store.get_params("medusa") == {"temperature": 0.5}
    assert store.get_answer("default_method") == "medusa"  # the first save makes a default method


def test_measure_finds_the_cost_curve_tool_with_the_saved_or_named_target(store):
    store.save_params("lookahead", {"target": "smollm2-135m-instruct"})
    assert planned_call(store, "/measure") == {"name": "measure_cost_curve", "input": {}, "executed": False,
                                               "status": "planned"}
    assert planned_call(store, "/measure the small model")["input"] == {"target": "smollm2-135m-instruct"}


def test_compare_on_a_short_prompt_with_the_small_model_measures_and_says_why_draft_is_left_out(store):
    answer = ask(store, "compare draft and lookahead on a short prompt with the small model", brain="offline",
                 plan_only=True)
    [call] = answer["tool_calls"]
    assert call["name"] == "compare_methods" and call["input"] == {
        "prompt": SHORT_PROMPT, "methods": ["baseline", "lookahead"], "target": "smollm2-135m-instruct"}
    assert "smollm2-135m-instruct has no built-in draft model" in answer["reply"]
    assert f"On a short prompt I picked: {SHORT_PROMPT!r}" in answer["reply"]


def test_questions_about_other_hardware_get_a_plain_answer_and_an_offer(store):
    store.add_run({"method": "draft", "target": "t", "prompt": "p", "speedup": 2.0, "hardware": {"name": "This CPU"}})
    reply = Session(store, OfflineBrain()).handle("what speedup would draft decoding give on an H100?")
    assert "measures only the machine it runs on" in reply.text and "does not estimate" in reply.text
    assert "run draft: <prompt>" in reply.text and "`specpilot run --method draft" in reply.text
    assert "The 1 draft run(s) stored here were measured on this machine, not on H100" in reply.text
    assert "2.0" not in reply.text  # no figure from this machine passed off as the H100's
    [task] = store.list_tasks()
    assert task["status"] == "failed" and task["left"][0].startswith("not done: no estimate for other hardware")


def test_what_did_we_do_last_time_recalls_the_finished_and_unfinished_work(store):
    first = Session(store, OfflineBrain())
    first.handle("explain medusa")
    first.handle("share my results")  # a question left open
    reply = Session(store, OfflineBrain()).handle("what did we do last time?")
    assert "Finished tasks:" in reply.text and "explain medusa" in reply.text
    assert "Unfinished tasks:" in reply.text and "share my results" in reply.text


def test_a_path_answers_a_pending_question_and_known_commands_still_work(store, tmp_path):
    store.add_run({"method": "draft", "prompt": "p", "speedup": 1.2})  # something to share
    folder = tmp_path / "specpilot-report"
    folder.mkdir()  # a share goes to an existing folder (refused before any approval otherwise)
    s = Session(store, OfflineBrain())
    assert s.handle("share my results").awaiting
    aside = s.handle("/params")  # a known command in between: answered, and the question stays open
    assert "No parameters saved" in aside.text and "(Still waiting for the user: Where should the report go" in aside.text
    reply = s.handle(str(folder))  # a path, not a command: it answers the question
    assert "needs your approval" in reply.text
    [approval] = store.list_approvals()
    assert approval["arguments"]["input"]["destination"] == str(folder.resolve())
    tasks = {t["request"]: t for t in store.list_tasks()}
    assert tasks["/params"]["status"] == "done" and tasks["share my results"]["status"] == "unfinished"
    assert tasks["share my results"]["left"][0].startswith("waiting for approval")
