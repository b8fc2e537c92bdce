"""Prompt lookup decoding: the n-gram matcher, greedy output identical to the baseline, accepted
drafts on repetitive text, EOS, limits and lossless sampling."""

from __future__ import annotations

import itertools
from collections import Counter
from functools import lru_cache

import pytest
import torch
from conftest import assert_greedy_equal, make_tiny_model
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.stats import chisquare

from tools.engine import autoregressive, prompt_lookup
from tools.engine.draft_tree import accept_greedy_tree, accept_sampling_tree, build_draft_tree
from tools.engine.prompt_lookup import (
    PromptLookupParams,
    accept_sampling_onehot,
    find_candidate_set,
    find_candidates,
    fit_budget,
)
from tools.engine.sampling import warp_probs
from tools.engine.types import GenerationSettings
from tools.errors import ParameterError
from tools.engine.methods import parse_params

VOCAB = 64
PROMPT = [3, 17, 5, 9, 22]


@lru_cache(maxsize=None)
def tiny(kind: str):
    return make_tiny_model(kind, layers=2, seed=0)


@lru_cache(maxsize=None)
def bigram_model(kind: str = "qwen2"):
    """A tiny model whose next token depends on the current token only: its greedy output cycles."""
    model = make_tiny_model(kind, seed=0)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
    return model


def _baseline(model, prompt, n, eos=()):
    return autoregressive.generate(model, prompt, GenerationSettings(max_new_tokens=n, eos_token_ids=list(eos)))


def _lookup(model, prompt, n, eos=(), **params):
    settings = GenerationSettings(max_new_tokens=n, eos_token_ids=list(eos))
    return prompt_lookup.generate(model, prompt, settings, PromptLookupParams(**params))


def _check_counters(result, max_new_tokens):
    assert result.method == "ngram"
    assert result.target_forwards == result.steps + 1
    assert len(result.accepted_per_step) == result.steps
    assert sum(result.accepted_per_step) == result.tokens_accepted <= result.tokens_drafted
    assert sum(result.drafted_by_position) == result.tokens_drafted
    assert sum(result.accepted_by_position) == result.tokens_accepted
    if result.extra["num_candidates"] == 1 or not result.extra["multi_draft_steps"]:
        # one draft per step: a draft reaching position j also covers every earlier one
        assert result.drafted_by_position == sorted(result.drafted_by_position, reverse=True)
    assert all(a <= d for a, d in zip(result.accepted_by_position, result.drafted_by_position))
    assert result.accepted_by_position == sorted(result.accepted_by_position, reverse=True)
    assert len(result.output_ids) <= max_new_tokens
    if result.stopped_by == "length":
        assert len(result.output_ids) == max_new_tokens == 1 + result.steps + result.tokens_accepted


# ---------------------------------------------------------------- parameters


def test_defaults():
    params = PromptLookupParams()
    assert (params.max_ngram_size, params.min_ngram_size, params.num_candidate_tokens) == (3, 1, 10)
    assert params.num_candidates == 3


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"min_ngram_size": 0}, "min_ngram_size"),
        ({"max_ngram_size": 1, "min_ngram_size": 2}, "max_ngram_size"),
        ({"num_candidate_tokens": 0}, "num_candidate_tokens"),
        ({"num_candidate_tokens": 1000}, "num_candidate_tokens"),
        ({"num_candidates": 0}, "num_candidates"),
        ({"num_candidates": 100}, "num_candidates"),
        ({"max_candidate_tokens": 5}, "max_candidate_tokens"),
        ({"max_draft_tokens": 0}, "max_draft_tokens"),
        ({"ngram": 3}, "ngram"),
    ],
)
def test_bad_parameters_are_parameter_errors(options, words):
    with pytest.raises(ParameterError) as info:
        parse_params("ngram", options)
    assert words in info.value.user_message()


def test_generate_checks_parameters(tiny_qwen):
    with pytest.raises(ParameterError, match="min_ngram_size"):
        prompt_lookup.generate(tiny_qwen, PROMPT, GenerationSettings(max_new_tokens=3),
                               PromptLookupParams(min_ngram_size=0))
    with pytest.raises(ParameterError, match="empty"):
        prompt_lookup.generate(tiny_qwen, [], GenerationSettings(max_new_tokens=3))


# ---------------------------------------------------------------- matcher


def _draft(tokens, limit=None, **params):
    return find_candidates(torch.tensor(tokens), PromptLookupParams(**params), limit).tolist()


def test_matcher_copies_what_followed_the_suffix():
    assert _draft([1, 2, 3, 4, 5, 9, 1, 2, 3], num_candidate_tokens=3) == [4, 5, 9]
    assert _draft([1, 2, 3, 4, 5, 9, 1, 2, 3], num_candidate_tokens=3, limit=2) == [4, 5]
    assert _draft([1, 2, 3, 4, 5, 9, 1, 2, 3], num_candidate_tokens=3, limit=0) == []
    assert _draft([1, 2, 3, 4]) == []  # nothing repeats
    assert _draft([7]) == []


def test_matcher_prefers_the_longest_ngram():
    # "3" alone last occurred before 8; "2 3" occurred before 4
    tokens = [2, 3, 4, 4, 4, 3, 8, 8, 8, 2, 3]
    assert _draft(tokens, num_candidate_tokens=2) == [4, 4]
    assert _draft(tokens, num_candidate_tokens=2, max_ngram_size=1) == [8, 8]


def test_matcher_takes_the_most_recent_full_match_else_the_earliest():
    tokens = [5, 1, 2, 5, 3, 4, 0, 0, 5, 6, 7, 5]
    assert _draft(tokens, num_candidate_tokens=2) == [6, 7]  # the most recent with 2 tokens after it
    assert _draft(tokens, num_candidate_tokens=3) == [6, 7, 5]
    periodic = [1, 2, 3, 1, 2, 3, 1, 2]
    # no occurrence of "2" has 10 tokens after it: the earliest gives the longest draft
    assert _draft(periodic, max_ngram_size=1) == [3, 1, 2, 3, 1, 2]
    assert _draft(periodic) == [3, 1, 2]  # "3 1 2" occurs once before the suffix


def test_min_ngram_size_limits_weak_matches():
    tokens = [4, 9, 9, 1, 2, 4]
    assert _draft(tokens, num_candidate_tokens=2) == [9, 9]
    assert _draft(tokens, num_candidate_tokens=2, min_ngram_size=2) == []


def _drafts(tokens, limit=None, **params):
    return find_candidate_set(torch.tensor(tokens), PromptLookupParams(**params), limit)


def test_candidate_set_takes_different_continuations_of_the_same_ngram():
    tokens = [1, 2, 7, 8, 0, 1, 2, 5, 6, 0, 1, 2, 7, 9, 0, 3, 1, 2]
    # "1 2" occurred three times: most recent full continuations first, repeats of a prefix skipped
    assert _drafts(tokens, num_candidate_tokens=2, max_ngram_size=2) == [[7, 9], [5, 6], [7, 8]]
    assert _drafts(tokens, num_candidate_tokens=2, max_ngram_size=2, num_candidates=2) == [[7, 9], [5, 6]]
    assert _drafts(tokens, num_candidate_tokens=1, max_ngram_size=2) == [[7], [5]]  # [7] twice
    assert _drafts(tokens, num_candidate_tokens=2, max_ngram_size=2, num_candidates=1) == [
        _draft(tokens, num_candidate_tokens=2, max_ngram_size=2)]
    # only the longest matching n-gram's occurrences are used
    assert _drafts(tokens, num_candidate_tokens=2) == [[7, 9], [5, 6], [7, 8]]
    assert _drafts([0, 3, 1, 2, 4, 3, 1, 2, 9, 1, 3, 1, 2], num_candidate_tokens=2) == [[9, 1], [4, 3]]
    assert _drafts([1, 2, 3]) == [] and _drafts([1, 2, 1], limit=0) == []


def test_drafts_are_cut_to_the_token_budget():
    assert fit_budget([[1, 2, 3], [4, 5, 6], [7, 8]], 5) == [[1, 2, 3], [4, 5]]
    assert fit_budget([[1, 2, 3], [4, 5, 6]], 3) == [[1, 2, 3]]
    assert fit_budget([[1, 2, 3]], 2) == [[1, 2]] and fit_budget([], 4) == []


def test_drafts_grow_while_they_are_fully_accepted():
    model = bigram_model()
    cycle = _baseline(model, [5], 60).output_ids[-12:]
    prompt = [1, 2, 3] + cycle * 6
    expected = _baseline(model, prompt, 64).output_ids
    fixed = _lookup(model, prompt, 64, num_candidate_tokens=4, max_candidate_tokens=4)
    growing = _lookup(model, prompt, 64, num_candidate_tokens=4, max_candidate_tokens=16)
    assert fixed.output_ids == growing.output_ids == expected
    assert max(growing.accepted_per_step) > 4 >= max(fixed.accepted_per_step)
    assert growing.steps < fixed.steps
    _check_counters(growing, 64)
    small = _lookup(model, prompt, 64, num_candidate_tokens=4, max_candidate_tokens=16, max_draft_tokens=6)
    assert small.output_ids == expected and max(small.accepted_per_step) <= 6


def test_draft_tree_merges_shared_prefixes():
    tree = build_draft_tree(5, [[1, 2, 3], [1, 4], [6]])
    assert tree.tokens == [5, 1, 2, 3, 4, 6]
    assert tree.parents == [-1, 0, 1, 2, 1, 0]
    assert tree.depths == [0, 1, 2, 3, 2, 1]
    assert tree.children == [[1, 5], [2, 4], [3], [], [], []]
    assert not tree.is_chain and build_draft_tree(5, [[1, 2]]).is_chain and build_draft_tree(5, []).size == 1
    vis = tree.visible()
    assert vis[3].tolist() == [True, True, True, True, False, False]
    assert vis[4].tolist() == [True, True, False, False, True, False]
    assert vis[5].tolist() == [True, False, False, False, False, True]
    assert tree.path_to(3) == [0, 1, 2, 3] and tree.path_to(4) == [0, 1, 4] and tree.path_to(0) == [0]


def test_greedy_tree_acceptance_follows_the_targets_choices():
    tree = build_draft_tree(5, [[1, 2, 3], [1, 4], [6]])
    #           node: 0  1  2  3  4  5   (choice[i] = target's argmax after node i)
    assert accept_greedy_tree(tree, [1, 4, 0, 0, 8, 0]) == (4, 8)  # 1 then 4, then the target's 8
    assert accept_greedy_tree(tree, [1, 2, 3, 7, 0, 0]) == (3, 7)  # the whole first draft
    assert accept_greedy_tree(tree, [6, 0, 0, 0, 0, 9]) == (5, 9)
    assert accept_greedy_tree(tree, [2, 2, 3, 7, 0, 0]) == (0, 2)  # nothing kept


def test_tree_rejection_sampling_is_lossless():
    """Two levels of branching drafts: the kept tokens plus the next one, continued to 3 tokens,
    follow p exactly; trying children without renormalising is caught by the same test."""
    vocab, total = 4, 12000
    torch.manual_seed(1)
    table = {}

    def p(prefix):
        if prefix not in table:
            table[prefix] = torch.distributions.Dirichlet(torch.full((vocab,), 2.0)).sample()
        return table[prefix]

    exact = {s: float(p(())[s[0]] * p(s[:1])[s[1]] * p(s[:2])[s[2]])
             for s in itertools.product(range(vocab), repeat=3)}
    tree = build_draft_tree(-1, [[0, 1], [0, 2], [3, 3]])
    prefixes = {0: ()}
    for i in range(1, tree.size):
        prefixes[i] = prefixes[tree.parents[i]] + (tree.tokens[i],)

    def naive(tree, p_at, gen):  # keeps child x with probability p(x), without renormalising
        node = 0
        while True:
            dist = p_at(node)
            for child in tree.children[node]:
                if float(torch.rand(1, generator=gen)) < float(dist[tree.tokens[child]]):
                    node = child
                    break
            else:
                return node, int(torch.multinomial(dist, 1, generator=gen))

    def samples(accept, n, seed):
        gen = torch.Generator().manual_seed(seed)
        counts = Counter()
        for _ in range(n):
            node, nxt = accept(tree, lambda i: p(prefixes[i]), gen)
            seq = prefixes[node] + (nxt,)
            while len(seq) < 3:
                seq += (int(torch.multinomial(p(seq), 1, generator=gen)),)
            counts[seq[:3]] += 1
        return counts

    assert _pvalue(samples(accept_sampling_tree, total, 1), exact, total) > 1e-3
    assert _pvalue(samples(naive, total, 2), exact, total) < 1e-6


# ---------------------------------------------------------------- greedy == baseline

PROMPTS = st.one_of(
    st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=20),
    st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=6).map(lambda p: p * 4),
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from(["qwen2", "llama", "bigram"]), prompt=PROMPTS,
       max_ngram=st.integers(1, 4), min_ngram=st.integers(1, 2), k=st.integers(1, 12),
       drafts=st.integers(1, 4), max_new_tokens=st.integers(1, 40))
def test_greedy_output_equals_the_baseline(kind, prompt, max_ngram, min_ngram, k, drafts, max_new_tokens):
    model = bigram_model() if kind == "bigram" else tiny(kind)
    expected = _baseline(model, prompt, max_new_tokens).output_ids
    result = _lookup(model, prompt, max_new_tokens, max_ngram_size=max(max_ngram, min_ngram),
                     min_ngram_size=min_ngram, num_candidate_tokens=k, num_candidates=drafts)
    assert_greedy_equal(model, prompt, expected, result.output_ids)
    _check_counters(result, max_new_tokens)


@pytest.mark.parametrize("kind", ["qwen2", "llama"])
def test_repeating_text_is_drafted_and_accepted(kind):
    model = bigram_model(kind)
    cycle = _baseline(model, [5], 40).output_ids[-12:]
    prompt = [1, 2, 3] + cycle * 2
    expected = _baseline(model, prompt, 48).output_ids
    result = _lookup(model, prompt, 48)
    assert result.output_ids == expected
    assert result.tokens_accepted >= 30
    assert result.steps <= 8
    assert result.extra["draft_steps"] > 0
    _check_counters(result, 48)


@pytest.mark.parametrize("kind", ["qwen2", "llama"])
def test_default_parameters_match_the_baseline_on_random_models(kind):
    model = tiny(kind)
    prompt = [5, 9, 22, 41, 5, 9, 22, 41, 5, 9, 22, 41, 5, 9]
    assert _lookup(model, prompt, 48).output_ids == _baseline(model, prompt, 48).output_ids


@pytest.mark.parametrize("n", [1, 2, 5, 17])
def test_max_new_tokens_is_respected(n):
    model = bigram_model()
    prompt = _baseline(model, [5], 40).output_ids * 2
    result = _lookup(model, prompt, n)
    assert result.output_ids == _baseline(model, prompt, n).output_ids and len(result.output_ids) == n
    assert result.stopped_by == "length"
    _check_counters(result, n)


@pytest.mark.parametrize("model_name", ["bigram", "qwen2"])
def test_eos_stops_after_the_eos_token(model_name):
    model = bigram_model() if model_name == "bigram" else tiny("qwen2")
    prompt = _baseline(model, [5], 30).output_ids * 2
    full = _baseline(model, prompt, 40).output_ids
    eos = full[5]
    j = full.index(eos)
    result = _lookup(model, prompt, 40, eos=[eos])
    assert result.output_ids == _baseline(model, prompt, 40, eos=[eos]).output_ids == full[: j + 1]
    assert result.stopped_by == "eos"
    _check_counters(result, 40)


# ---------------------------------------------------------------- sampling


def _pvalue(counts: Counter, exact: dict, total: int) -> float:
    observed, expected, rest_o, rest_e = [], [], 0, 0.0
    for outcome, prob in exact.items():
        if prob * total >= 5:
            observed.append(counts.get(outcome, 0))
            expected.append(prob * total)
        else:
            rest_o += counts.get(outcome, 0)
            rest_e += prob * total
    observed.append(rest_o)
    expected.append(max(rest_e, 1e-9))
    scale = sum(observed) / sum(expected)
    return float(chisquare(observed, [e * scale for e in expected]).pvalue)


def test_onehot_rejection_sampling_is_lossless():
    """Kept drafts + next token, continued to 3 tokens, follow p exactly; a verifier that keeps
    drafts outright is caught by the same test."""
    vocab, total = 4, 12000
    torch.manual_seed(0)
    table = {}

    def p(prefix):
        if prefix not in table:
            table[prefix] = torch.distributions.Dirichlet(torch.full((vocab,), 3.0)).sample()
        return table[prefix]

    exact = {s: float(p(())[s[0]] * p(s[:1])[s[1]] * p(s[:2])[s[2]])
             for s in itertools.product(range(vocab), repeat=3)}
    drafts = [0, 1]

    def samples(accept, n, seed):
        gen = torch.Generator().manual_seed(seed)
        probs = torch.stack([p(()), p((0,)), p((0, 1))])
        counts = Counter()
        for _ in range(n):
            kept, nxt = accept(lambda j: probs[j], drafts, gen)
            seq = tuple(drafts[:kept]) + (nxt,)
            while len(seq) < 3:
                seq += (int(torch.multinomial(p(seq), 1, generator=gen)),)
            counts[seq] += 1
        return counts

    assert _pvalue(samples(accept_sampling_onehot, total, 1), exact, total) > 1e-3
    keep_all = lambda p_at, d, gen: (len(d), int(torch.multinomial(p_at(len(d)), 1, generator=gen)))  # noqa: E731
    assert _pvalue(samples(keep_all, 3000, 2), exact, 3000) < 1e-6


def test_sampling_matches_the_models_distribution():
    vocab, total = 8, 1500
    model = make_tiny_model("qwen2", layers=1, seed=3, vocab=vocab)
    prompt = [1, 2, 3, 1, 2, 4, 1, 2, 3, 5, 6, 7, 0, 1, 5, 6]
    base = dict(max_new_tokens=3, temperature=1.3, top_k=6)
    with torch.inference_mode():
        seqs = torch.tensor([prompt + [a, b] for a in range(vocab) for b in range(vocab)])
        probs = warp_probs(model(seqs).logits[:, -3:], GenerationSettings(**base)).double()
    exact = {}
    for i, (a, b) in enumerate(itertools.product(range(vocab), repeat=2)):
        for c in range(vocab):
            exact[(a, b, c)] = float(probs[i, 0, a] * probs[i, 1, b] * probs[i, 2, c])
    counts, accepted, rejected = Counter(), 0, 0
    params = PromptLookupParams(max_ngram_size=2, num_candidate_tokens=2, num_candidates=3)
    multi = 0
    for seed in range(total):
        result = prompt_lookup.generate(model, prompt, GenerationSettings(**base, seed=seed), params)
        counts[tuple(result.output_ids)] += 1
        accepted += result.tokens_accepted
        rejected += result.tokens_drafted - result.tokens_accepted
        multi += result.extra["multi_draft_steps"]
    assert accepted > 50 and rejected > 50 and multi > 50
    assert _pvalue(counts, exact, total) > 1e-3
