"""The rule planner on longer messages: sentences of background (other hardware, production, a colleague's figures)
around the sentence that asks, approval ids typed back, installs with versions in words, a report put into a named
folder or kept local, cost-curve requests in words, and what is declined. Each kind in phrasings of its own, not those
of the set it was fitted on (tool and key arguments, planned with ``ask --plan-only``; nothing runs)."""

from __future__ import annotations

import pytest

from agent.brains.approval_words import find_approval_id
from agent.brains.background import request_part
from agent.brains.phrases import find_packages, find_hardware
from agent.loop import is_deploy_request
from test_offline_planner_phrases import assert_planned, store  # noqa: F401  (the fixture)

REQUESTS = [
    # background sentences around the ask
    ("Our cluster has two A100 cards and a colleague measured 60 tok/s there. Please time lookahead on "
     "'Name three rivers' with window 5.", "run_method",
     {"method": "lookahead", "prompt": "Name three rivers", "params": {"window": 5}}),
    ("We serve a chatbot in production with top_p sampling. Could you compare ngram and medusa on 'Greet a guest'?",
     "compare_methods", {"methods": ["ngram", "medusa"], "prompt": "Greet a guest"}),
    ("My advisor thinks medusa always wins over lookahead. Can you run lookahead on 'List four seasons'?", "run_method",
     {"method": "lookahead", "prompt": "List four seasons"}),
    ("Nobody on the team remembers last year's settings. Use draft smollm2-135m-instruct with 40 new tokens. "
     "The prompt is: Say hello", "run_method", {"method": "draft", "max_new_tokens": 40}),
    ("I have a talk on Monday and my slides are half done. Can you explain me the lookahead method?", "explain",
     {"topic": "lookahead"}),
    ("What exactly is EAGLE? I read it drafts from features but I can't picture it.", "explain", {"topic": "eagle"}),
    ("Could you lay out the trade-offs between the methods, memory and training cost included?", "explain",
     {"topic": "tradeoffs"}),
    # a deploy gate reads the request, not the prompt or the scene
    ("We deploy nothing from this box. Please run ngram on 'Write a deployment checklist'", "run_method",
     {"method": "ngram"}),
    ("We are happy with the figures. Now I need an inference endpoint for the whole company.", None, {}),
    # stored runs and memory
    ("I lost the terminal. Show me the run whose id starts with 9c2e again", "lookup_runs", {"run_id": "9c2e"}),
    ("We were halfway through a lookahead sweep on Friday. Which parts of it are still not done?", "recall", {}),
    # saved settings: the method asked for first, a cost curve not saved
    ("Remember tree cpu8 for medusa please, but my usual runs stay with draft, so no default change.", "save_params",
     {"method": "medusa", "params": {"tree": "cpu8"}}),
    ("I'd like real numbers on how a target pass costs with 1 to 64 tokens in float32; store it too.",
     "measure_cost_curve", {"dtype": "float32"}),
    # installs with versions in words, approvals typed back
    ("Please install transformers with version at least 4.46 and also accelerate.", "install_packages",
     {"packages": ["transformers>=4.46", "accelerate"]}),
    ("I approved the install, approval id inst-3318. Go ahead and install lade==0.4.1.", "install_packages",
     {"packages": ["lade==0.4.1"], "approval_id": "inst-3318"}),
    ("You asked me to approve the share; done, the id is sh-7710. Post the newest runs to https://example.org/in",
     "share_results", {"destination": "https://example.org/in", "approval_id": "sh-7710"}),
    # reports: kept local, or put into a folder the message names
    ("Write a JSON report of the runs of task 3. Keep it on this machine, nothing gets sent.", "write_report",
     {"task_id": 3, "format": "json"}),
    ("Our lab's results live in /srv/lab/results, outside of specpilot. Put the report of the last 5 runs there.",
     "share_results", {"destination": "/srv/lab/results", "limit": 5}),
    # declined
    ("The target makes mistakes on SQL. Can you fine-tune the 0.5B target on my examples?", None, {}),
]


@pytest.mark.parametrize("text,tool,args", REQUESTS)
def test_longer_requests_map_onto_the_right_tool_and_arguments(store, text, tool, args):
    assert_planned(store, text, tool, args)


def test_background_sentences_are_dropped_only_beside_one_that_asks():
    assert request_part("We have a 4090. Please run draft.") == "Please run draft."
    assert request_part("We have a 4090 and it is slow.") == "We have a 4090 and it is slow."
    assert request_part("Run draft on it. Then compare them.") == "Run draft on it. Then compare them."


def test_hardware_named_in_a_sentence_that_asks_nothing_of_it_is_no_estimate():
    assert find_hardware("On our V100 bf16 is slow, so I want float16. Run medusa here.") is None
    assert find_hardware("How fast would medusa run on an H100?") is not None


def test_a_deploy_word_inside_the_prompt_or_the_scene_is_no_deploy_request():
    assert not is_deploy_request("Our team likes YAML. Run lookahead on this prompt: Write a Kubernetes deployment")
    assert is_deploy_request("Please deploy medusa behind an API")


def test_approval_ids_and_install_versions_in_words():
    assert find_approval_id("I approved it, the approval id is apr-4471.") == "apr-4471"
    assert find_approval_id("please approve the install") is None
    assert find_packages("install gguf with version at least 0.10 and also llama-cpp-python, we need them") == [
        "gguf>=0.10", "llama-cpp-python"]
    assert find_packages("approved the install already. Go ahead and install lade==0.4.1 now") == ["lade==0.4.1"]
