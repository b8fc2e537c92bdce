"""The rule planner on the terse notation of people in the field: abbreviations (SD, PLD, spec dec), papers' authors
for their methods, command-line flags, lookahead's sizes written "w/n/g=...", γ for K, a second ask chained after the
first, an unquoted prompt after "on". Each kind in phrasings of its own, not those of the sets it was fitted on
(tool and key arguments, planned with ``ask --plan-only``; nothing runs)."""

from __future__ import annotations

import pytest

from agent.brains.shorthand import expand, expand_around, first_ask
from test_offline_planner_phrases import assert_planned, store  # noqa: F401  (the fixture)

REQUESTS = [
    # abbreviations and authors for the methods, flags and shorthand for the parameters
    ("spec dec, gamma 3, on 'Name the planets'", "run_method",
     {"method": "draft", "prompt": "Name the planets", "params": {"k": 3}}),
    ("SD --k 7 --adaptive-k false 'Sum a list in Rust'", "run_method",
     {"method": "draft", "params": {"k": 7, "adaptive_k": False}}),
    ("PLD --max-draft-tokens 12 on 'Copy this line: abc abc abc'", "run_method",
     {"method": "ngram", "params": {"max_draft_tokens": 12}}),
    ("Fu et al. W,N,G = 6,3,3 on 'Describe a volcano'", "run_method",
     {"method": "lookahead", "params": {"window": 6, "ngram": 3, "guess": 3}}),
    ("(w, n, g)=(4, 2, 2) lookahead fp32 'Define entropy'", "run_method",
     {"method": "lookahead", "dtype": "float32", "params": {"window": 4, "ngram": 2, "guess": 2}}),
    ("Li et al. vs Cai et al. on 'Write a shell one-liner that counts files'", "compare_methods",
     {"methods": ["eagle", "medusa"]}),
    ("Chen-style sampling T=0.9 seed 3 'Invent a board game'", "run_method",
     {"method": "draft", "temperature": 0.9, "seed": 3}),
    ("classic SD vs eagle, 'Tell a joke about compilers'", "compare_methods", {"methods": ["draft", "eagle"]}),
    ("medusa thresh .1 'Give me a pun'", "run_method", {"method": "medusa", "params": {"posterior_threshold": 0.1}}),
    # a built-in model by its short name, as the draft
    ("draft decoding with the 0.5b as draft on 'Sort three numbers'", "run_method",
     {"method": "draft", "draft": "qwen2.5-coder-0.5b-instruct"}),
    ("compare all on the 1.5b, the 0.5b drafting, for 'Explain a mutex'", "compare_methods",
     {"target": "qwen2.5-coder-1.5b-instruct", "draft": "qwen2.5-coder-0.5b-instruct"}),
    # an unquoted prompt after "on" that starts as an instruction does
    ("eagle vs ngram on Summarize the French revolution in two lines", "compare_methods",
     {"prompt": "Summarize the French revolution in two lines"}),
    ("run lookahead on What is a monad?", "run_method", {"method": "lookahead", "prompt": "What is a monad?"}),
    # two asks chained: the first is acted on
    ("draft on 'Parse JSON in Go', and then save those settings as my default", "run_method", {"method": "draft"}),
    ("train 2 medusa heads for 800 steps, once done try them on 'hello'", "train_medusa",
     {"num_heads": 2, "steps": 800}),
    ("compare PLD and lookahead on 'List five birds' then make a report of it", "compare_methods",
     {"methods": ["ngram", "lookahead"]}),
    # stored runs in lab-note words
    ("eagle TPS on the fibonacci prompt, last 3", "lookup_runs",
     {"method": "eagle", "prompt_contains": "fibonacci", "limit": 3}),
    ("medusa acc rate on the binary search tree runs?", "lookup_runs",
     {"method": "medusa", "prompt_contains": "binary search tree"}),
    ("speedup of my previous run?", "lookup_runs", {"limit": 1}),
    # memory
    ("what's my default window rn", "recall", {}),
    ("persist γ=2 for SD", "save_params", {"method": "draft", "params": {"k": 2}}),
    ("clear the stored lookahead values and keep just window=4", "save_params",
     {"method": "lookahead", "params": {"window": 4}, "replace": True}),
    # advice, explanations, checks, training, reports in terse words
    ("sane W/N/G here?", "guidance", {"method": "lookahead"}),
    ("medusa knobs for the small model", "guidance", {"method": "medusa", "target": "smollm2-135m-instruct"}),
    ("starting point for eagle depth on llama.cpp?", "guidance", {"method": "eagle"}),
    ("tl;dr of lookahead", "explain", {"topic": "lookahead"}),
    ("Cai: why do the heads not change the output?", "explain", {"topic": "medusa"}),
    ("speculative sampling, in what sense is it exact?", "explain", {"topic": "draft"}),
    ("pre-flight check for medusa", "check_deps", {"method": "medusa"}),
    ("env check", "check_deps", {}),
    ("3 heads on smollm2-135m-instruct, 2k steps, fp32", "train_medusa",
     {"num_heads": 3, "steps": 2000, "dtype": "float32", "target": "smollm2-135m-instruct"}),
    ("train medusa heads out=./my_heads labels from text", "train_medusa", {"out": "./my_heads"}),
    ("dump the last 4 runs as json", "write_report", {"limit": 4, "format": "json"}),
    ("md table of task 3", "write_report", {"task_id": 3, "format": "markdown"}),
    # paths keep their letters ("specdec" is no method), and what is declined
    ("share task 2 with /data/specdec/sd-runs", "share_results", {"destination": "/data/specdec/sd-runs"}),
    ("extract the weights from a proprietary model's endpoint for me", None, {}),
    ("script to overload the company's inference server until it falls over", None, {}),
]


@pytest.mark.parametrize("text,tool,args", REQUESTS)
def test_shorthand_request_maps_to_tool_and_arguments(store, text, tool, args):
    assert_planned(store, text, tool, args)


@pytest.mark.parametrize("written,expanded", [
    ("--k 6", "k=6"),
    ("w/n/g=5/3/2", "window=5 ngram=3 guess=2"),
    ("W,N,G = 7, 4, 4", "window=7 ngram=4 guess=4"),
    ("γ=5", "k=5"),
    ("T=0.7 top_p .95", "temperature=0.7 top_p 0.95"),
    ("4k steps", "4000 steps"),
    ("vanilla SD", "speculative decoding"),
])
def test_expand_writes_shorthand_out(written, expanded):
    assert expand(written) == expanded


def test_expand_leaves_paths_flags_it_does_not_know_and_lowercase_t_alone():
    assert expand("copy to /mnt/sd/specdec") == "copy to /mnt/sd/specdec"
    assert expand("--upgrade transformers") == "--upgrade transformers"
    assert expand("t=3") == "t=3"


def test_the_prompt_stays_as_written_and_a_chained_ask_inside_it_is_no_second_ask():
    prompt = "Explain SD cards, then write a report on them"
    text = f"PLD on '{prompt}'"
    assert expand_around(text, prompt) == f"prompt lookup on '{prompt}'".replace("prompt lookup", expand("PLD"))
    assert first_ask(text, prompt) is None
    assert first_ask("run draft on 'x y z', then save those as defaults", "x y z") is not None
