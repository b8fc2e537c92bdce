"""The rule planner on messages pasted from team threads and on a few kinds of request it misread before: lines
quoted from the thread before the ask, @mentions, an instruction after a colon, a settings sentence after the prompt,
a model file named apart from its folder, the baseline alone, stored runs by what was done, how a method can be
faster, what a method needs, draft_quant and n-gram bounds by name, and writing that is no report. Each kind in
phrasings of its own, not those of the set it was fitted on (planned with ``ask --plan-only``; nothing runs)."""

from __future__ import annotations

import pytest

from agent.brains.background import without_thread
from agent.brains.package_words import find_packages
from agent.brains.param_words import find_params
from test_offline_planner_phrases import assert_planned, store  # noqa: F401  (the fixture)

REQUESTS = [
    # quoted thread lines and @mentions before the ask
    ("> the lookahead numbers looked odd on my machine\n> maybe the window is too big\nwhich window would you start "
     "lookahead with?", "guidance", {"method": "lookahead"}),
    ("> is llama-cpp-python even built here?\n@bot could you check the draft method's dependencies?", "check_deps",
     {"method": "draft"}),
    ("> no Medusa heads for the small model yet\nok, train medusa heads for smollm2-135m-instruct, 300 steps",
     "train_medusa", {"target": "smollm2-135m-instruct", "steps": 300}),
    ("@lena what's saved in memory for this project?", "recall", {}),
    # an instruction after a colon, not a prompt
    ("Copied from the tuning doc (5 prompts): please store lookahead window 6, ngram 4 for me", "save_params",
     {"method": "lookahead", "params": {"window": 6, "ngram": 4}}),
    ("eagle: depth 5, topk 6, and drop whatever else was saved for it", "save_params",
     {"method": "eagle", "params": {"depth": 5, "topk": 6}, "replace": True}),
    ("draft settings to keep: k 5, k_max 9", "save_params", {"method": "draft", "params": {"k": 5, "k_max": 9}}),
    # a settings sentence after the prompt
    ("Run ngram on the prompt: List the planets of the solar system. Use 48 new tokens.", "run_method",
     {"method": "ngram", "prompt": "List the planets of the solar system.", "max_new_tokens": 48}),
    # a model file named apart from its folder
    ("my-model-q4_k_m.gguf is stored in /data/llm, run prompt lookup on it through llama.cpp. Prompt: Say hi",
     "run_method", {"method": "ngram", "target": "/data/llm/my-model-q4_k_m.gguf", "backend": "llamacpp"}),
    # the baseline alone; the baseline and one method compared with peers
    ("I only want the baseline numbers first, on: Describe a sunset in two sentences.", "run_method",
     {"method": "baseline", "prompt": "Describe a sunset in two sentences."}),
    ("compare baseline and draft, with transformers' own assisted generation alongside: 'Sort a list in Go'",
     "compare_methods", {"methods": ["baseline", "draft"], "peers": True, "prompt": "Sort a list in Go"}),
    # stored runs by what was done
    ("we ran some runs on fizzbuzz this morning, how fast were they?", "lookup_runs", {"prompt_contains": "fizzbuzz"}),
    # how a method can be faster: an explanation
    ("how does medusa speed decoding up with no separate draft model at all?", "explain", {"topic": "medusa"}),
    # what a method needs
    ("tell me what the eagle method needs before I try it", "check_deps", {"method": "eagle"}),
    ("go through every dependency and give me the install command for what's missing", "check_deps", {}),
    # parameters by their names
    ("save draft_quant int8 for draft", "save_params", {"method": "draft", "params": {"draft_quant": "int8"}}),
    ("for prompt lookup keep min ngram 1 and max ngram 3", "save_params",
     {"method": "ngram", "params": {"min_ngram_size": 1, "max_ngram_size": 3}}),
    # writing that is no report of runs
    ("can you write the results section of my book report?", None, {}),
    ("please write me a 300-word essay about the Roman Empire", None, {}),
    # an issue's title line over its body
    ("Draft K not remembered?\nI saved a K for draft on Monday. What does memory hold now?", "recall", {}),
    ("How does lookahead verify its guesses?\nI read the blog post but the verification branch lost me.", "explain",
     {"topic": "lookahead"}),
    ("ngram speed on a refactoring prompt\n\nRun ngram on this, 3 repeats:\nRename the variable x to count in: x = 0",
     "run_method", {"method": "ngram", "repeats": 3, "prompt": "Rename the variable x to count in: x = 0"}),
    ("Cost curve out of date\nspecpilot 0.5 now packs the layers. Measure the cost curve again, 2 repeats.",
     "measure_cost_curve", {"repeats": 2}),
    # a quoted error message or a method in backticks is no prompt
    ("`eagle` fails with 'no head for this target' on smollm2-135m-instruct. What does it need?", "check_deps",
     {"method": "eagle"}),
    # settings in a long last sentence, values in words, a parameter's connector is no save
    ("Time draft on this prompt: Name three prime numbers. Please generate sixty-four new tokens, use a k of three "
     "and keep the temperature at zero.", "run_method",
     {"method": "draft", "prompt": "Name three prime numbers.", "max_new_tokens": 64, "params": {"k": 3}}),
    ("I'd like to see lookahead on the following prompt with the guess set to 5:\nList three colours.", "run_method",
     {"method": "lookahead", "prompt": "List three colours.", "params": {"guess": 5}}),
    ("please remember these for lookahead so I stop retyping them: a window of nine and an n-gram size of three",
     "save_params", {"method": "lookahead", "params": {"window": 9, "ngram": 3}}),
    # memory, packages, reports and shares in other words
    ("which K do we have saved for draft at the moment?", "recall", {}),
    ("Is the eagle method fine dependency-wise on this box?", "check_deps", {"method": "eagle"}),
    ("approved: pip install lade==0.4.1, approval id ok-1234", "install_packages",
     {"packages": ["lade==0.4.1"], "approval_id": "ok-1234"}),
    ("a markdown report of task number 7, kept on this machine", "write_report", {"task_id": 7}),
    ("ship the runs of task 3 to https://example.org/drop", "share_results",
     {"task_id": 3, "destination": "https://example.org/drop"}),
    # EAGLE's tree in the papers' words, a misspelt count, runs picked by their stored prompt, memory in other words
    ("store for eagle: top-k children 6 and a tree size of 40", "save_params",
     {"method": "eagle", "params": {"topk": 6, "tree_nodes": 40}}),
    ("time lookahead on 'Name a river in Spain' with 4 repeates", "run_method",
     {"method": "lookahead", "prompt": "Name a river in Spain", "repeats": 4}),
    ("pull up the runs whose prompt had 'binary search' in it", "lookup_runs", {"prompt_contains": "binary search"}),
    ("what's my saved window for lookahead?", "recall", {}),
    ("quick check, anything in memory from before?", "recall", {}),
    # a command line half-remembered into the chat
    ('specpilot run --meth lookahead --new-tokens 96 --prompt "List five fruits"', "run_method",
     {"method": "lookahead", "max_new_tokens": 96, "prompt": "List five fruits"}),
    ("runs list --method draft --limit 5", "lookup_runs", {"method": "draft", "limit": 5}),
    ("recall --include-done-tasks", "recall", {"include_done_tasks": True}),
    ("guide eagle --backend transformers", "guidance", {"method": "eagle"}),
    ("doctor --method medusa", "check_deps", {"method": "medusa"}),
    ("train-medusa --target smollm2-135m-instruct --num-heads 2 --steps 100", "train_medusa",
     {"target": "smollm2-135m-instruct", "num_heads": 2, "steps": 100}),
    ("save --method lookahead --window 5 --no-default", "save_params",
     {"method": "lookahead", "params": {"window": 5}, "make_default": False}),
    ("compare --methods medusa eagle with prompt Write a short poem about tea", "compare_methods",
     {"methods": ["medusa", "eagle"], "prompt": "Write a short poem about tea"}),
    # a scene that mentions production and what it does not tell, then the ask
    ("In production we run at temperature 0.7, so greedy figures don't tell me enough. Run draft on 'Say hi' with "
     "seed 3.", "run_method", {"method": "draft", "temperature": 0.7, "seed": 3}),
    # heads for a checkpoint in a folder, put somewhere; a past comparison written up; a package got onto the machine
    ("there are no heads for the checkpoint in ./ckpt/tiny; train some and put the heads in ./out/tiny", "train_medusa",
     {"target": "./ckpt/tiny", "out": "./out/tiny"}),
    ("write up the comparison we ran in task 4 for the wiki", "write_report", {"task_id": 4}),
    ("go ahead and grab lade onto this machine", "install_packages", {"packages": ["lade"]}),
]


@pytest.mark.parametrize("text,tool,args", REQUESTS)
def test_thread_messages_map_onto_the_right_tool_and_arguments(store, text, tool, args):
    assert_planned(store, text, tool, args)


def test_quoted_lines_and_mentions_are_dropped_only_before_the_ask():
    assert without_thread("> a quoted line\n@sam run draft on 'x'") == "run draft on 'x'"
    assert without_thread("> only a quoted line") == "> only a quoted line"
    assert without_thread("run draft on:\n> Write a haiku") == "run draft on:\n> Write a haiku"  # a quoted prompt stays


def test_a_gguf_draft_is_no_llamacpp_backend_nor_is_the_package_name():
    assert find_params("store draft_quant gguf") == {"draft_quant": "gguf"}
    assert find_params("now that llama-cpp-python is installed, k=4") == {"k": 4}
    assert find_params("run it on llama.cpp with a gguf draft") == {"draft_quant": "gguf", "backend": "llamacpp"}


def test_words_that_name_no_package_are_not_installed():
    assert find_packages("install the missing ones") == []
    assert find_packages("install the missing dependencies and lade") == ["lade"]
