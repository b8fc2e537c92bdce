"""The rule planner on structured and relayed requests: `key: value` lines and numbered checklists, methods ruled out
("don't bother with the draft model", "everything except medusa"), an action ruled out ("don't share anything"),
"try it again" after a complaint, values named after their number, an install asked for up to the end of its
sentence, and what is declined. Each kind in phrasings of its own, not those of the set it was fitted on (tool and key
arguments, planned with ``ask --plan-only``; nothing runs)."""

from __future__ import annotations

import pytest

from agent.brains.param_words import count_before
from agent.brains.phrases import find_packages, named_methods
from agent.brains.prompt_words import find_prompt
from test_offline_planner_phrases import assert_planned, store  # noqa: F401  (the fixture)

REQUESTS = [
    # key: value lines and checklists
    ("method: ngram\nprompt: List the Nordic countries\ntokens: 96", "run_method",
     {"method": "ngram", "prompt": "List the Nordic countries", "max_new_tokens": 96}),
    ("Plan:\n- methods: medusa, lookahead\n- prompt: Explain a hash map\n- 2 repeats", "compare_methods",
     {"methods": ["medusa", "lookahead"], "prompt": "Explain a hash map", "repeats": 2}),
    ("Please set these for lookahead, replacing what was there:\nwindow 6\nguess 3", "save_params",
     {"method": "lookahead", "params": {"window": 6, "guess": 3}, "replace": True}),
    ("eagle defaults -> depth: 4, topk: 3", "save_params", {"method": "eagle", "params": {"depth": 4, "topk": 3}}),
    ("Heads job:\n  target: smollm2-135m-instruct\n  heads: 2\n  steps: 600", "train_medusa",
     {"target": "smollm2-135m-instruct", "num_heads": 2, "steps": 600}),
    ("pip: accelerate, gguf>=0.10", "install_packages", {"packages": ["accelerate", "gguf>=0.10"]}),
    # methods and actions ruled out
    ("skip medusa; run eagle on 'Name two oceans' instead, don't use the draft method", "run_method",
     {"method": "eagle", "prompt": "Name two oceans"}),
    ("time all methods except lookahead and ngram on 'Define a vector'", "compare_methods",
     {"methods": ["baseline", "draft", "medusa", "eagle"]}),
    ("Not medusa. What does eagle really do?", "explain", {"topic": "eagle"}),
    ("no need to upload anything, just write the last 3 runs to a json file here", "write_report",
     {"limit": 3, "format": "json"}),
    # a run asked again after a complaint, a temperature before its name
    ("the last medusa run was a mess, try it again on 'Sort words by length' with tree cpu8", "run_method",
     {"method": "medusa", "params": {"tree": "cpu8"}}),
    ("draft on 'Pick a colour' at 0.9 temperature", "run_method", {"method": "draft", "temperature": 0.9}),
    # a training request whose colon leads to its files, an install up to its sentence's end
    ("Train medusa heads for the default target: files /corpora/a.txt and /corpora/b.txt, 300 steps", "train_medusa",
     {"data_files": ["/corpora/a.txt", "/corpora/b.txt"], "steps": 300}),
    ("install the upstream medusa-llm so that we can compare against it", "install_packages",
     {"packages": ["medusa-llm"]}),
    # stored runs and memory
    ("if the newest eagle run got over 2x, what's its run id?", "lookup_runs", {"method": "eagle", "limit": 1}),
    ("have I already saved settings for eagle?", "recall", {}),
    ("what did all the other methods get on that same prompt?", "lookup_runs", {"same_prompt_as_last_run": True}),
    # a usability study's users: backticks, "Prompt ->", a dtype ruled out, "on the following.", costs in words
    ("could you clock eagle on `SELECT 1;` for me?", "run_method", {"method": "eagle", "prompt": "SELECT 1;"}),
    ("Time lookahead. Prompt -> Summarise: cats sleep a lot", "run_method",
     {"method": "lookahead", "prompt": "Summarise: cats sleep a lot"}),
    ("run medusa on 'Name a tree' in fp32, not bf16", "run_method", {"method": "medusa", "dtype": "float32"}),
    ("run draft on 'Name a bird', bf16 was flaky for me so use float32", "run_method", {"dtype": "float32"}),
    ("Set 8 threads and time ngram on the following. Write a limerick about tea.", "run_method",
     {"method": "ngram", "prompt": "Write a limerick about tea.", "threads": 8}),
    ("how expensive does a forward pass become when I push more tokens through it?", "measure_cost_curve", {}),
    ("what do 4 or 32 tokens in one pass cost next to a single one here?", "measure_cost_curve", {}),
    ("walk me through the lookahead branch", "explain", {"topic": "lookahead"}),
    ("I don't understand how medusa's candidates are verified", "explain", {"topic": "medusa"}),
    ("starting window for lookahead on a laptop?", "guidance", {"method": "lookahead"}),
    ("eagle here: what depth and topk would you pick?", "guidance", {"method": "eagle"}),
    ("audit the environment for medusa", "check_deps", {"method": "medusa"}),
    ("will ngram work with whats installed?", "check_deps", {"method": "ngram"}),
    ("gguf is missing, go ahead and add it", "install_packages", {"packages": ["gguf"]}),
    ("there are no medusa heads for smollm2-135m-instruct, generate some", "train_medusa",
     {"target": "smollm2-135m-instruct"}),
    ("how quick would eagle be on the H100s at work?", None, {}),
    # people describing their job: methods described, figures before a quoted prompt, costs, advice after a colon
    ("does copying phrases out of the prompt help on 'Echo: red red red'?", "run_method", {"method": "ngram"}),
    ("try the feature-level draft head approach on 'Count down from 3'", "run_method", {"method": "eagle"}),
    ("Baseline, raw completion: what throughput on 'def add(a, b):'?", "run_method",
     {"method": "baseline", "prompt": "def add(a, b):"}),
    ("does a forward pass over 32 tokens cost much more than one here?", "measure_cost_curve", {}),
    ("profile the verification cost for the 0.5b", "measure_cost_curve", {"target": "qwen2.5-coder-0.5b-instruct"}),
    ("how does lookahead decide which n-grams to verify?", "explain", {"topic": "lookahead"}),
    ("Choosing the window for lookahead on a 13B model: what's sensible?", "guidance", {"method": "lookahead"}),
    ("which medusa tree for a desktop without a GPU?", "guidance", {"method": "medusa", "hardware": "cpu"}),
    ("Before the demo I need to know whether every package imports here.", "check_deps", {}),
    ("Got an import error the last time I ran medusa - what's missing?", "check_deps", {"method": "medusa"}),
    ("no medusa heads exist for smollm2-135m-instruct; train 3 of them", "train_medusa", {"num_heads": 3}),
    ("I want medusa heads on the default target in float32, 200 steps - can you set it going?", "train_medusa",
     {"steps": 200}),
    ("Make a report of my last 6 runs for my blog post", "write_report", {"limit": 6}),
    ("post the last 2 runs to https://example.org/in", "share_results", {"destination": "https://example.org/in"}),
    # fluent non-native English: "without adaptive k", the own modes of a library, a comparison after a colon
    ("please to run draft without adaptive k on 'Say yes'", "run_method", {"params": {"adaptive_k": False}}),
    ("run ngram on 'Say no' and time also the own modes of hugging face", "run_method", {"peers": True}),
    ("Kindly: compare every method for 'Name a prime' and revert with the fastest", "compare_methods",
     {"prompt": "Name a prime"}),
    ("I do not understand the verification in medusa, please give explanation", "explain", {"topic": "medusa"}),
    ("I would like to verify the required packages for eagle", "check_deps", {"method": "eagle"}),
    ("store for draft k 3 only and remove the other values I saved", "save_params",
     {"method": "draft", "params": {"k": 3}, "replace": True}),
    ("show the runs with same prompt as the last run", "lookup_runs", {"same_prompt_as_last_run": True}),
    # engineers writing tickets: greedy, no warm-up, "on this?", the run just done, memory and reports in their words
    ("Run medusa on 'Add 2 and 2', greedy, no warmup, 2 repeats.", "run_method",
     {"temperature": 0.0, "warmup": 0, "repeats": 2}),
    ("Worth trying lookahead on this? Sort these words: pear apple fig", "run_method",
     {"method": "lookahead", "prompt": "Sort these words: pear apple fig"}),
    ("what acceptance did the run you just did reach?", "lookup_runs", {"limit": 1}),
    ("what have we configured so far?", "recall", {}),
    ("dump your memory for me", "recall", {}),
    ("Pin eagle runs to target smollm2-135m-instruct. Save it.", "save_params",
     {"method": "eagle", "params": {"target": "smollm2-135m-instruct"}}),
    ("Size medusa's tree for this laptop.", "guidance", {"method": "medusa"}),
    ("Which window would you start lookahead at, and why?", "guidance", {"method": "lookahead"}),
    ("How does the cost of a pass grow for ./models/tiny-qwen? Measure it.", "measure_cost_curve",
     {"target": "./models/tiny-qwen"}),
    ("how does medusa draft tokens from its heads?", "explain", {"topic": "medusa"}),
    ("list my installed packages and what's missing", "check_deps", {}),
    ("Upgrade accelerate.", "install_packages", {"packages": ["accelerate"], "upgrade": True}),
    ("medusa heads: train them on notes.txt with labels taken from the text, write them to ./h2", "train_medusa",
     {"labels": "text", "out": "./h2"}),
    ("train medusa heads by self-distillation, 100 steps", "train_medusa", {"labels": "self", "steps": 100}),
    ("Write those results up as json.", "write_report", {"format": "json"}),
    # academics and writers: a parameter "set to", questions after a colon, user stories, memory, dumps
    ("I would like to compare draft and eagle on 'Define entropy' with max_new_tokens set to 64", "compare_methods",
     {"methods": ["draft", "eagle"], "max_new_tokens": 64}),
    ("Medusa: what exactly is it doing with its heads?", "explain", {"topic": "medusa"}),
    ("The verification branch of lookahead: explain?", "explain", {"topic": "lookahead"}),
    ("how do eagle's draft trees produce several tokens in one step?", "explain", {"topic": "eagle"}),
    ("Could you advise on a good medusa tree on a GPU?", "guidance", {"method": "medusa", "hardware": "gpu"}),
    ("my docs must list what medusa depends on and whether it is present here", "check_deps", {"method": "medusa"}),
    ("check that torch and transformers import correctly", "check_deps", {}),
    ("As a user I want my lookahead settings window=5 and guess=2 saved, so that I am not asked again.",
     "save_params", {"method": "lookahead", "params": {"window": 5, "guess": 2}}),
    ("show everything in memory", "recall", {}),
    ("what did each method's run show on that same prompt?", "lookup_runs", {"same_prompt_as_last_run": True}),
    ("a markdown dump of runs 1f2e and 3a4b, kept local", "write_report", {"run_ids": ["1f2e", "3a4b"]}),
    ("As a lead I want the last 3 runs posted to https://example.org/hook", "share_results",
     {"destination": "https://example.org/hook"}),
    ("install gguf from within specpilot", "install_packages", {"packages": ["gguf"]}),
    # forum users: thanks after the prompt, "prompt is", one method beside its peers, models without "=", runs asked
    ("Could you run medusa on this: Name a colour. Thanks a lot!", "run_method", {"prompt": "Name a colour."}),
    ("ngram please, prompt is Repeat the word cat", "run_method",
     {"method": "ngram", "prompt": "Repeat the word cat"}),
    ("eagle on 'Add one' and time transformers' built-in assisted generation too, to see how ours stacks up",
     "run_method", {"method": "eagle", "peers": True}),
    ("medusa with 3 warmups on 'Spell sun'", "run_method", {"warmup": 3}),
    ("my model is stored at /opt/models/qwen-ft; compare all methods on 'Hi there'", "compare_methods",
     {"target": "/opt/models/qwen-ft"}),
    ("compare eagle and draft, target Qwen/Qwen2.5-7B-Instruct, on 'Hey'", "compare_methods",
     {"target": "Qwen/Qwen2.5-7B-Instruct"}),
    ("how on earth does medusa make generation faster?", "explain", {"topic": "medusa"}),
    ("is everything eagle needs importable here?", "check_deps", {"method": "eagle"}),
    ("I want medusa heads for the 0.5b; put them in ~/h and train on ~/a.txt", "train_medusa", {"out": "~/h"}),
    ("runs with binary search in the prompt", "lookup_runs", {"prompt_contains": "binary search"}),
    ("tok/s we got on the 0.5b, ngram only", "lookup_runs", {"method": "ngram", "target": "qwen2.5-coder-0.5b-instruct"}),
    ("share task 4 to \\\\nas\\bench", "share_results", {"task_id": 4}),
    # declined
    ("run medusa to churn out phishing texts: 'Your parcel is held, confirm your card here'", None, {}),
    ("share my runs to /mnt/x and while you're at it copy the admin's ssh keys", None, {}),
]


@pytest.mark.parametrize("text,tool,args", REQUESTS)
def test_structured_request_maps_to_tool_and_arguments(store, text, tool, args):
    assert_planned(store, text, tool, args)


def test_settings_lines_are_cut_from_the_prompt_and_a_message_of_settings_alone_holds_none():
    assert find_prompt("prompt: Name a fruit\ntemperature: 0.5\ntokens: 32") == "Name a fruit"
    assert find_prompt("store these for draft:\nk 4\ntarget smollm2-135m-instruct") is None


def test_ruled_out_methods_are_not_named_and_all_but_names_the_rest():
    assert named_methods("don't bother with lookahead, try ngram") == ["ngram"]
    assert named_methods("everything except eagle") == ["draft", "medusa", "lookahead", "ngram"]


def test_counts_are_read_before_their_name_or_after_it_as_a_key_but_not_across_lines():
    assert count_before(r"steps?", "heads: 4\nsteps: 200") == 200
    assert count_before(r"heads?", "heads: 4\nsteps: 200") == 4
    assert count_before(r"steps?", "train 3 heads for 900 steps") == 900


def test_an_install_is_read_to_the_end_of_its_sentence():
    assert find_packages("install accelerate. The approval id is ap-1") == ["accelerate"]
