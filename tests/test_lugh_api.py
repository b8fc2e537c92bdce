"""The Lugh::Speculative API of SpeculativeDecoder: constructor options and aliases, refused
parameters, vocabulary checks (with and without tokenizers), accessors, statistics, the step
functions and generate."""

from __future__ import annotations

import pytest
import torch
from conftest import make_tiny_model, perturbed_copy

from tools.engine import autoregressive
from tools.engine.speculative import SpeculativeDecoder
from tools.engine.types import GenerationSettings
from tools.errors import ParameterError, SpecpilotError, VocabularyMismatchError
from tools.models import LoadedModel

PROMPT = [3, 17, 5, 9, 22]
VOCAB = 64


@pytest.fixture(scope="module")
def draft(tiny_qwen):
    return perturbed_copy(tiny_qwen, noise=0.02)


def _tokenizer(order=range(VOCAB), eos: int = VOCAB - 1):
    """A word-level tokenizer over the words t0..t{n-1}; ``order`` gives the word that gets each id."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {f"t{word}": i for i, word in enumerate(order)}
    tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token="t0"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tk.decoder = decoders.WordPiece()
    return PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="t0", eos_token=f"t{eos}", pad_token="t0")


def _loaded(model, tokenizer) -> LoadedModel:
    return LoadedModel(ref="tiny", model=model, tokenizer=tokenizer, dtype="float32", dtype_reason="test",
                       device="cpu", source="fixture")


def _baseline(model, n, prompt=PROMPT, eos=()):
    return autoregressive.generate(model, prompt, GenerationSettings(max_new_tokens=n, eos_token_ids=list(eos)))


# ---------------------------------------------------------------- refused parameters


@pytest.mark.parametrize("k", [0, 17, -1, "4", 4.0, True])
def test_k_outside_1_to_16_or_not_an_integer_is_refused(tiny_qwen, draft, k):
    with pytest.raises(ParameterError, match="k must be an integer from 1 to 16") as err:
        SpeculativeDecoder(inference=tiny_qwen, draft=draft, k=k)
    assert "what to do" in err.value.user_message()


@pytest.mark.parametrize("depth", [0, 17, "8"])
def test_depth_outside_1_to_16_is_refused(tiny_qwen, draft, depth):
    with pytest.raises(ParameterError, match="k must be"):
        SpeculativeDecoder(main=tiny_qwen, draft_inference=draft, depth=depth)


def test_k_and_depth_that_disagree_are_refused(tiny_qwen, draft):
    with pytest.raises(ParameterError, match="disagree"):
        SpeculativeDecoder(inference=tiny_qwen, draft=draft, k=4, depth=5)
    assert SpeculativeDecoder(inference=tiny_qwen, draft=draft, k=5, depth=5).k == 5


@pytest.mark.parametrize("missing", ["target", "draft", "both"])
def test_a_missing_model_is_refused(tiny_qwen, draft, missing):
    kwargs = {"inference": tiny_qwen, "draft": draft}
    if missing in ("target", "both"):
        kwargs.pop("inference")
    if missing in ("draft", "both"):
        kwargs.pop("draft")
    with pytest.raises(ParameterError, match="target .* draft"):
        SpeculativeDecoder(**kwargs)


@pytest.mark.parametrize("top_p", [0.0, -0.5, 1.01, 2.0])
def test_top_p_outside_0_1_is_refused(tiny_qwen, draft, top_p):
    with pytest.raises(ParameterError, match="top_p"):
        SpeculativeDecoder(tiny_qwen, draft, top_p=top_p)


@pytest.mark.parametrize("temperature", [-0.01, -1.0])
def test_a_negative_temperature_is_refused(tiny_qwen, draft, temperature):
    with pytest.raises(ParameterError, match="temperature"):
        SpeculativeDecoder(tiny_qwen, draft, temperature=temperature)


@pytest.mark.parametrize(
    "options, words",
    [
        ({"draft_confidence": 1.0}, "draft_confidence"),
        ({"draft_confidence": -0.1}, "draft_confidence"),
        ({"draft_vocab": 0}, "draft_vocab"),
        ({"k": 4, "k_max": 3}, "k_max"),
        ({"k_max": 17}, "k must be"),
    ],
)
def test_bad_option_values_are_refused(tiny_qwen, draft, options, words):
    with pytest.raises(ParameterError, match=words):
        SpeculativeDecoder(tiny_qwen, draft, **options)


@pytest.mark.parametrize("options", [{"top_k": -1}, {"temperature": 150.0}])
def test_other_out_of_range_settings_raise_parameter_errors(tiny_qwen, draft, options):
    with pytest.raises(ParameterError):
        SpeculativeDecoder(tiny_qwen, draft, **options)


def test_different_vocabulary_sizes_without_tokenizers_are_refused(tiny_qwen):
    other = make_tiny_model("qwen2", layers=1, seed=2, vocab=VOCAB + 6)
    with pytest.raises(VocabularyMismatchError, match="draft has 70") as err:
        SpeculativeDecoder(tiny_qwen, other)
    assert isinstance(err.value, SpecpilotError)
    assert err.value.hint
    with pytest.raises(VocabularyMismatchError):
        SpeculativeDecoder(other, tiny_qwen)


def test_tokenizers_that_map_tokens_to_different_ids_are_refused(tiny_qwen, draft):
    forward = _tokenizer(range(VOCAB))
    backward = _tokenizer(reversed(range(VOCAB)))
    with pytest.raises(VocabularyMismatchError, match="different ids") as err:
        SpeculativeDecoder(_loaded(tiny_qwen, forward), _loaded(draft, backward))
    assert "same model family" in err.value.user_message()


def test_a_tokenizer_larger_than_the_lm_heads_is_refused(tiny_qwen, draft):
    big = _tokenizer(range(VOCAB + 6))
    with pytest.raises(VocabularyMismatchError, match="70 tokens"):
        SpeculativeDecoder(_loaded(tiny_qwen, big), _loaded(draft, big))


def test_step_functions_before_init_caches_are_refused(tiny_qwen, draft):
    decoder = SpeculativeDecoder(tiny_qwen, draft)
    for call in (decoder.step, decoder.draft_tokens, lambda: decoder.verify_tokens([1, 2])):
        with pytest.raises(ParameterError, match="init_caches"):
            call()


def test_an_empty_prompt_is_refused(tiny_qwen, draft):
    decoder = SpeculativeDecoder(tiny_qwen, draft)
    with pytest.raises(ParameterError, match="empty"):
        decoder.init_caches([])


def test_draft_tokens_n_outside_1_to_16_is_refused(tiny_qwen, draft):
    decoder = SpeculativeDecoder(tiny_qwen, draft)
    decoder.init_caches(PROMPT)
    for n in (0, 17):
        with pytest.raises(ParameterError, match="k must be"):
            decoder.draft_tokens(n)


def test_verify_tokens_refuses_ids_outside_the_vocabulary(tiny_qwen, draft):
    decoder = SpeculativeDecoder(tiny_qwen, draft)
    decoder.init_caches(PROMPT)
    for bad in ([VOCAB], [-1], [1, 2, 100]):
        with pytest.raises(ParameterError, match=r"\[0, 64\)"):
            decoder.verify_tokens(bad)


def test_sampling_verification_needs_the_drafts_own_proposals(tiny_qwen, draft):
    decoder = SpeculativeDecoder(tiny_qwen, draft, temperature=1.0)
    decoder.init_caches(PROMPT)
    with pytest.raises(ParameterError, match="draft_tokens"):
        decoder.verify_tokens([1, 2])
    drafted = decoder.draft_tokens(3)
    with pytest.raises(ParameterError, match="draft_tokens"):
        decoder.verify_tokens(drafted[:2])
    assert len(decoder.verify_tokens(drafted)) >= 1


@pytest.mark.parametrize("max_tokens", [0, -3])
def test_generate_refuses_max_tokens_below_1(tiny_qwen, draft, max_tokens):
    with pytest.raises(ParameterError, match="max"):
        SpeculativeDecoder(tiny_qwen, draft).generate(PROMPT, max_tokens)


def test_a_text_prompt_without_a_tokenizer_is_refused(tiny_qwen, draft):
    with pytest.raises(ParameterError, match="tokenizer"):
        SpeculativeDecoder(tiny_qwen, draft).generate("t1 t2", 4)


# ---------------------------------------------------------------- aliases and accessors


def test_aliases_main_draft_inference_and_depth(tiny_qwen, draft):
    a = SpeculativeDecoder(main=tiny_qwen, draft_inference=draft, depth=6, temperature=0.8, top_p=0.95)
    b = SpeculativeDecoder(inference=tiny_qwen, draft=draft, k=6, temperature=0.8, top_p=0.95)
    assert (a.k, a.temperature, a.top_p, a.n_vocab) == (6, 0.8, 0.95, VOCAB)
    assert (b.k, b.temperature, b.top_p, b.n_vocab) == (6, 0.8, 0.95, VOCAB)
    assert a.target is tiny_qwen and a.draft_model is draft
    greedy_a = SpeculativeDecoder(main=tiny_qwen, draft_inference=draft, depth=3).generate(PROMPT, 20)
    greedy_b = SpeculativeDecoder(tiny_qwen, draft, k=3).generate(PROMPT, 20)
    assert greedy_a == greedy_b == _baseline(tiny_qwen, 20).output_ids


def test_defaults(tiny_qwen, draft):
    decoder = SpeculativeDecoder(tiny_qwen, draft)
    assert (decoder.k, decoder.temperature, decoder.top_p, decoder.n_vocab) == (4, 0.0, 1.0, VOCAB)


def test_accessors_are_read_only_properties(tiny_qwen, draft):
    decoder = SpeculativeDecoder(tiny_qwen, draft)
    for name in ("k", "temperature", "top_p", "n_vocab"):
        with pytest.raises(AttributeError):
            setattr(decoder, name, 3)


# ---------------------------------------------------------------- generate and the step functions


@pytest.mark.parametrize("k", [1, 4, 16])
def test_generate_takes_ids_and_returns_ids(tiny_qwen, draft, k):
    decoder = SpeculativeDecoder(tiny_qwen, draft, k=k)
    out = decoder.generate(PROMPT, max_tokens=25)
    assert isinstance(out, list) and all(type(t) is int for t in out)
    assert out == _baseline(tiny_qwen, 25).output_ids
    assert decoder.generate(tuple(PROMPT), 25) == out
    assert decoder.generate(PROMPT, 7) == out[:7]


def test_generate_with_tokenizers_stops_at_the_tokenizers_eos(tiny_qwen, draft):
    full = _baseline(tiny_qwen, 30).output_ids
    j = next(i for i in range(3, 30) if full[i] not in full[:i])
    tok = _tokenizer(eos=full[j])
    decoder = SpeculativeDecoder(_loaded(tiny_qwen, tok), _loaded(draft, tok), k=4)
    assert decoder.generate(PROMPT, 30) == full[: j + 1]


def test_generate_with_a_text_prompt_returns_text(tiny_qwen, draft):
    tok = _tokenizer(eos=0)  # t0 is special (eos), so it would be skipped in the text
    decoder = SpeculativeDecoder(_loaded(tiny_qwen, tok), _loaded(draft, tok), k=3)
    text = decoder.generate(" ".join(f"t{i}" for i in PROMPT), 12)
    expected_ids = _baseline(tiny_qwen, 12, eos=[0]).output_ids
    assert isinstance(text, str)
    assert text == tok.decode(expected_ids, skip_special_tokens=True)
    assert text.split()[0] == f"t{expected_ids[0]}"


def test_the_seed_makes_sampling_reproducible(tiny_qwen, draft):
    def sampled(seed):
        return SpeculativeDecoder(tiny_qwen, draft, k=4, temperature=1.0, top_p=0.95, seed=seed).generate(PROMPT, 30)

    first = sampled(7)
    assert first == sampled(7)
    decoder = SpeculativeDecoder(tiny_qwen, draft, k=4, temperature=1.0, top_p=0.95, seed=7)
    assert decoder.generate(PROMPT, 30) == decoder.generate(PROMPT, 30) == first
    assert sampled(8) != first
    assert first != _baseline(tiny_qwen, 30).output_ids


def test_steps_build_the_baselines_greedy_output(tiny_qwen, draft):
    decoder = SpeculativeDecoder(tiny_qwen, draft, k=4)
    out = [decoder.init_caches(PROMPT)]
    while len(out) < 30:
        new = decoder.step()
        assert 1 <= len(new) <= 5
        out += new
    assert out[:30] == _baseline(tiny_qwen, 30).output_ids
    assert decoder.total_steps == len(decoder.accepted_per_step)


def test_init_caches_returns_the_targets_first_token_and_restarts(tiny_qwen, draft):
    decoder = SpeculativeDecoder(tiny_qwen, draft, k=4)
    expected = _baseline(tiny_qwen, 10).output_ids
    assert decoder.init_caches(PROMPT) == expected[0]
    decoder.step()
    decoder.step()
    assert decoder.init_caches(PROMPT) == expected[0]
    out = [expected[0]]
    while len(out) < 10:
        out += decoder.step()
    assert out[:10] == expected


def test_verify_tokens_accepts_the_targets_own_continuation(tiny_qwen, draft):
    expected = _baseline(tiny_qwen, 12).output_ids
    decoder = SpeculativeDecoder(tiny_qwen, draft, k=4)
    decoder.init_caches(PROMPT)
    assert decoder.verify_tokens(expected[1:6]) == expected[1:7]
    assert decoder.tokens_accepted == 5 and decoder.tokens_drafted == 5


def test_verify_tokens_cuts_at_the_first_wrong_draft_and_corrects_it(tiny_qwen, draft):
    expected = _baseline(tiny_qwen, 12).output_ids
    wrong = (expected[3] + 1) % VOCAB
    decoder = SpeculativeDecoder(tiny_qwen, draft, k=4)
    decoder.init_caches(PROMPT)
    assert decoder.verify_tokens([expected[1], expected[2], wrong, expected[4]]) == expected[1:4]
    # the rejected tail left no trace: the next verification continues the baseline
    assert decoder.verify_tokens(expected[4:7]) == expected[4:8]
    assert decoder.accepted_per_step == [2, 3]


def test_verify_tokens_without_drafts_adds_the_targets_next_token(tiny_qwen, draft):
    expected = _baseline(tiny_qwen, 5).output_ids
    decoder = SpeculativeDecoder(tiny_qwen, draft, k=4)
    decoder.init_caches(PROMPT)
    drafted = decoder.draft_tokens()  # proposed, then discarded
    assert len(drafted) == 4
    assert decoder.verify_tokens([]) == [expected[1]]
    assert decoder.verify_tokens([]) == [expected[2]]
    assert decoder.tokens_drafted == 0 and decoder.total_steps == 2


def test_draft_tokens_proposes_the_drafts_greedy_continuation(tiny_qwen, draft):
    decoder = SpeculativeDecoder(tiny_qwen, draft, k=4)
    first = decoder.init_caches(PROMPT)
    drafted = decoder.draft_tokens(6)
    assert len(drafted) == 6
    assert drafted == _baseline(draft, 6, prompt=PROMPT + [first]).output_ids
    assert decoder._seq == PROMPT + [first]  # proposing commits nothing


def test_draft_tokens_twice_proposes_again_from_the_committed_sequence(tiny_qwen, draft):
    decoder = SpeculativeDecoder(tiny_qwen, draft, k=4)
    decoder.init_caches(PROMPT)
    drafted = decoder.draft_tokens(6)
    assert decoder.draft_tokens(2) == drafted[:2]
    assert decoder.draft_tokens(6) == drafted


# ---------------------------------------------------------------- statistics


def test_statistics_start_at_zero(tiny_qwen, draft):
    decoder = SpeculativeDecoder(tiny_qwen, draft)
    assert (decoder.tokens_drafted, decoder.tokens_accepted, decoder.total_steps) == (0, 0, 0)
    assert decoder.acceptance_rate == 0.0


def test_statistics_after_generate(tiny_qwen, draft):
    decoder = SpeculativeDecoder(tiny_qwen, draft, k=4)
    out = decoder.generate(PROMPT, 33)
    assert decoder.total_steps == len(decoder.accepted_per_step) > 0
    assert decoder.tokens_accepted == sum(decoder.accepted_per_step)
    assert decoder.tokens_drafted == sum(decoder.drafted_by_position)
    assert 0 < decoder.tokens_accepted < decoder.tokens_drafted
    assert decoder.acceptance_rate == decoder.tokens_accepted / decoder.tokens_drafted
    # every step adds its accepted drafts and one target token, after the prefill's token
    assert len(out) == 1 + decoder.total_steps + decoder.tokens_accepted


def test_statistics_count_the_steps_of_the_step_api(tiny_qwen):
    decoder = SpeculativeDecoder(tiny_qwen, tiny_qwen, k=3)
    decoder.init_caches(PROMPT)
    for _ in range(4):
        decoder.step()
    assert (decoder.total_steps, decoder.tokens_drafted, decoder.tokens_accepted) == (4, 12, 12)
    assert decoder.acceptance_rate == 1.0


def test_reset_stats_clears_every_counter(tiny_qwen, draft):
    decoder = SpeculativeDecoder(tiny_qwen, draft, k=4)
    decoder.generate(PROMPT, 20)
    assert decoder.total_steps > 0
    decoder.reset_stats()
    assert (decoder.tokens_drafted, decoder.tokens_accepted, decoder.total_steps) == (0, 0, 0)
    assert decoder.acceptance_rate == 0.0
    assert decoder.accepted_per_step == []
    assert sum(decoder.drafted_by_position) == sum(decoder.accepted_by_position) == 0


# ---------------------------------------------------------------- padding rows


def _padded_pair(target_rows: int, draft_rows: int):
    """A target and a draft that share token ids 0..63 and differ only by extra LM-head rows.

    The draft is the target cut (or padded) to its rows, so their real-token logits agree.
    Padding rows are zero, as in checkpoints whose heads were padded to a round size.
    """
    base = make_tiny_model("qwen2", layers=2, seed=0, vocab=VOCAB)
    models = []
    for rows in (target_rows, draft_rows):
        model = make_tiny_model("qwen2", layers=2, seed=0, vocab=rows)
        state = {}
        for name, value in base.state_dict().items():
            if value.shape[0] == VOCAB and name.endswith(("embed_tokens.weight", "lm_head.weight")):
                padded = torch.zeros(rows, value.shape[1])
                padded[:VOCAB] = value
                value = padded
            state[name] = value
        model.load_state_dict(state)
        models.append(model.eval())
    return models


@pytest.mark.parametrize("rows", [(70, 64), (64, 70), (72, 70)])
def test_padding_rows_work_when_the_tokenizers_agree(rows):
    target, draft = _padded_pair(*rows)
    tok = _tokenizer()
    with pytest.raises(VocabularyMismatchError):
        SpeculativeDecoder(target, draft)  # without tokenizers the padding cannot be checked
    decoder = SpeculativeDecoder(_loaded(target, tok), _loaded(draft, tok), k=4)
    assert decoder.n_vocab == min(rows)
    expected = _baseline(target, 40).output_ids
    assert max(expected) < VOCAB  # the padding rows never win on this prompt
    assert decoder.generate(PROMPT, 40) == expected
    assert decoder.acceptance_rate == 1.0  # the draft's real-token logits are the target's


def test_sampling_with_a_padded_target_only_emits_real_tokens():
    target, draft = _padded_pair(70, 64)
    tok = _tokenizer()
    for seed in range(5):
        decoder = SpeculativeDecoder(_loaded(target, tok), _loaded(draft, tok), k=4, temperature=1.0, seed=seed)
        out = decoder.generate(PROMPT, 40)
        assert all(0 <= t < VOCAB for t in out)
