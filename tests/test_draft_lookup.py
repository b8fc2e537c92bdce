"""The draft's lookup guesses (``draft_lookup``): each draft forward also feeds what followed the text's last
n-gram earlier in it and keeps the guessed tokens the draft's own argmax agrees with. The draft proposes what
it would have proposed one forward at a time, in fewer forwards; the target's output is unchanged."""

from __future__ import annotations

import pytest
from conftest import assert_greedy_equal, make_tiny_model, perturbed_copy

from tools.engine import autoregressive, speculative
from tools.engine.params import DraftParams
from tools.engine.types import GenerationSettings
from tools.errors import ParameterError

PROMPT = [3, 17, 5, 9, 22, 41, 8] * 4  # a text that repeats: there is something to look up


@pytest.fixture(scope="module")
def drafts(tiny_qwen):
    return {"self": tiny_qwen, "perturbed": perturbed_copy(tiny_qwen, noise=0.02),
            "random": make_tiny_model("qwen2", layers=1, seed=123)}


def _run(target, draft, n, eos=(), **options):
    settings = GenerationSettings(max_new_tokens=n, eos_token_ids=list(eos))
    return speculative.generate(target, draft, PROMPT, settings, **options)


@pytest.mark.parametrize("which", ["self", "perturbed", "random"])
@pytest.mark.parametrize("confidence", [None, 0.4])
def test_lookup_guesses_leave_the_output_as_greedy_decoding_gives_it(tiny_qwen, drafts, which, confidence):
    expected = autoregressive.generate(tiny_qwen, PROMPT, GenerationSettings(max_new_tokens=40)).output_ids
    result = _run(tiny_qwen, drafts[which], 40, k=6, draft_confidence=confidence, draft_lookup=4)
    assert_greedy_equal(tiny_qwen, PROMPT, expected, result.output_ids)
    assert result.target_forwards == result.steps + 1
    assert result.extra["draft_lookup"] == 4


def test_the_draft_proposes_the_same_tokens_in_fewer_forwards(tiny_qwen):
    plain = _run(tiny_qwen, tiny_qwen, 40, k=6)
    looked = _run(tiny_qwen, tiny_qwen, 40, k=6, draft_lookup=4)
    assert looked.output_ids == plain.output_ids
    assert looked.accepted_per_step == plain.accepted_per_step  # the same proposals, step by step
    assert looked.extra["draft_tokens_looked_up"] > 0
    assert looked.extra["draft_forwards"] + looked.extra["draft_tokens_looked_up"] == plain.extra["draft_forwards"]


def test_a_lookup_guess_stops_at_an_end_of_sequence_token(tiny_qwen):
    expected = autoregressive.generate(tiny_qwen, PROMPT, GenerationSettings(max_new_tokens=40)).output_ids
    eos = expected[12]  # a token the output reaches: generation stops there, guesses included
    result = _run(tiny_qwen, tiny_qwen, 40, eos=[eos], k=6, draft_lookup=4)
    assert result.output_ids == expected[: expected.index(eos) + 1]


def test_sampling_drafts_one_forward_a_token_as_before(tiny_qwen, drafts):
    settings = GenerationSettings(max_new_tokens=20, temperature=0.8, seed=3)
    plain = speculative.generate(tiny_qwen, drafts["perturbed"], PROMPT, settings, k=4)
    looked = speculative.generate(tiny_qwen, drafts["perturbed"], PROMPT, settings, k=4, draft_lookup=4)
    assert looked.output_ids == plain.output_ids and looked.extra["draft_tokens_looked_up"] == 0


def test_draft_lookup_is_checked_and_on_by_default(tiny_qwen):
    assert DraftParams().draft_lookup == 4
    with pytest.raises(ParameterError, match="draft_lookup"):
        _run(tiny_qwen, tiny_qwen, 4, draft_lookup=-1)
