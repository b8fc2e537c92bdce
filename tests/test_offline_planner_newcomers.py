"""The rule planner on newcomers' words: a method described instead of named, misspelt words longer than a method's
name, numbers misspelt, a model by its size in words or its folder, versions in words, bare data file names, short
run ids after "runs". Each kind in phrasings of its own, not those of the set it was fitted on (tool and key
arguments, planned with ``ask --plan-only``; nothing runs)."""

from __future__ import annotations

import pytest

from agent.brains.phrases import find_packages, find_target, fix_method_typos
from test_offline_planner_phrases import assert_planned, store  # noqa: F401  (the fixture)

REQUESTS = [
    # a method described, a misspelt one, the draft as the helper
    ("could you try the method where a smaller model proposes tokens on 'Name a river'", "run_method",
     {"method": "draft", "prompt": "Name a river"}),
    ("explain like a beginner the trick where a small one guesses and the big one checks", "explain",
     {"topic": "draft"}),
    ("pls run lookaheadd on 'Count to five'", "run_method", {"method": "lookahead"}),
    ("run speculativ decoding on 'Say hi' with smollm2-135m-instruct as the helper", "run_method",
     {"method": "draft", "draft": "smollm2-135m-instruct"}),
    ("eagle with temperture zero point five, seed ninty, on 'Describe autumn'", "run_method",
     {"method": "eagle", "temperature": 0.5, "seed": 90}),
    # run settings and models in words
    ("compare medusa and eagle and time the engine's own built-in modes as well on 'Add two numbers in C'",
     "compare_methods", {"methods": ["medusa", "eagle"], "peers": True}),
    ("the model is at ~/work/tuned-qwen, run all methods with\nWhy is the sea salty?", "compare_methods",
     {"target": "~/work/tuned-qwen", "prompt": "Why is the sea salty?"}),
    ("measure the pass cost of ./ckpt/my-model please", "measure_cost_curve", {"target": "./ckpt/my-model"}),
    ("how slow is a forward pass here with more tokens in it?", "measure_cost_curve", {}),
    ("my target has 13 billion parameters, which lookahead window should I pick?", "guidance",
     {"method": "lookahead", "target_size_b": 13}),
    # stored runs and memory in everyday words
    ("what was the speed up of my medusa run yesterday?", "lookup_runs", {"method": "medusa"}),
    ("hello again, did we ever finish that comparison of the methods?", "recall", {}),
    # packages, training data, reports
    ("please install transformers version 4.46 and also accelerate", "install_packages",
     {"packages": ["transformers==4.46", "accelerate"]}),
    ("train medusa heads on corpus.jsonl and save the heads to ./heads/new", "train_medusa",
     {"data_files": ["corpus.jsonl"], "out": "./heads/new"}),
    ("write a report with the runs 1a2b, 3c4d and 5e6f", "write_report", {"run_ids": ["1a2b", "3c4d", "5e6f"]}),
    # a mixed crowd: a tree by its name alone, counts before and after names, heads by folder, politeness in the past
    ("medusa chain4 on 'Say three colours'", "run_method", {"method": "medusa", "params": {"tree": "chain4"}}),
    ("lookahead with 3 guesses and a window of 5 on 'Spell cat'", "run_method",
     {"method": "lookahead", "params": {"guess": 3, "window": 5}}),
    ("eagle topk 4 tree nodes 12 on 'Spell dog'", "run_method",
     {"method": "eagle", "params": {"topk": 4, "tree_nodes": 12}}),
    ("medusa with the heads from ~/runs/heads7 on 'Spell cow'", "run_method",
     {"method": "medusa", "medusa_heads": "~/runs/heads7"}),
    ("I was wondering which window and guess counts would make sense for lookahead here", "guidance",
     {"method": "lookahead"}),
    ("my model lives in /srv/models/mistral-7b; what medusa tree would you suggest?", "guidance",
     {"method": "medusa", "target": "/srv/models/mistral-7b"}),
    ("from now on keep the draft unquantized for draft decoding, also on a GPU", "save_params",
     {"method": "draft", "params": {"draft_quant": "none"}}),
    ("how does a pass over 1 or 32 tokens compare in cost here?", "measure_cost_curve", {}),
    ("draft, lookahead or medusa: when would you pick each?", "explain", {"topic": "tradeoffs"}),
    ("how does lookahead manage to stay exact?", "explain", {"topic": "lookahead"}),
    ("can you tell if eagle has everything it needs? no installing", "check_deps", {"method": "eagle"}),
    ("check_deps flagged accelerate as missing, install those please", "install_packages",
     {"packages": ["accelerate"]}),
    ("like last time but with eagle", "recall", {}),
    ("same as before, ngram this time", "recall", {}),
    ("what did ngram get on the palindrome prompt", "lookup_runs",
     {"method": "ngram", "prompt_contains": "palindrome"}),
    ("share task 9 to /mnt/lab/results, thanks", "share_results", {"destination": "/mnt/lab/results"}),
]


@pytest.mark.parametrize("text,tool,args", REQUESTS)
def test_newcomer_request_maps_to_tool_and_arguments(store, text, tool, args):
    assert_planned(store, text, tool, args)


def test_typos_are_fixed_but_words_that_only_start_like_a_method_are_not():
    assert fix_method_typos("medusaa and speculitive decoding") == "medusa and speculative decoding"
    assert fix_method_typos("installed, comparing, speculation") == "installed, comparing, speculation"


def test_a_small_model_that_guesses_is_the_draft_method_not_the_small_target():
    assert find_target("the one where a small model guesses first") is None
    assert find_target("run it on the small model") == "smollm2-135m-instruct"


def test_versions_in_words_are_written_as_pip_writes_them():
    assert find_packages("install gguf version 0.10 or newer") == ["gguf>=0.10"]
    assert find_packages("install numpy v2.1") == ["numpy==2.1"]
