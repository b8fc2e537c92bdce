"""Lookahead decoding: the step layout, the n-gram pool, greedy output identical to the baseline,
lossless sampling, counters, EOS and the lade compatibility check."""

from __future__ import annotations

import importlib
import math
import sys
from collections import Counter
from functools import lru_cache

import pytest
import torch
from conftest import assert_greedy_equal, make_tiny_model
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.stats import chisquare

from tools.engine import autoregressive, lookahead
from tools.engine import kv
from tools.engine.backend import as_backend
from tools.engine.draft_tree import accept_sampling_tree, build_draft_tree
from tools.engine.lookahead import LookaheadParams, NgramPool, build_layout, step_pattern
from tools.engine.upstream_status import lade_status
from tools.engine.sampling import warp_probs
from tools.engine.types import GenerationSettings
from tools.errors import ParameterError
from tools.engine.methods import parse_params

VOCAB = 64
PROMPT = [3, 17, 5, 9, 22]
REPEATING = [5, 9, 22, 41, 5, 9, 22, 41, 5, 9, 22, 41, 5, 9]


@lru_cache(maxsize=None)
def bigram_model(kind: str = "qwen2", vocab: int = VOCAB, seed: int = 0):
    """A tiny model whose next token depends on the current token only (attention and MLP outputs
    zeroed), so its greedy output falls into a cycle: repetitive text, exactly computed."""
    model = make_tiny_model(kind, seed=seed, vocab=vocab)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
    return model


@lru_cache(maxsize=None)
def tiny(kind: str):
    return make_tiny_model(kind, layers=2, seed=0)


def _baseline(model, prompt, n, eos=()):
    return autoregressive.generate(model, prompt, GenerationSettings(max_new_tokens=n, eos_token_ids=list(eos)))


def _lookahead(model, prompt, n, eos=(), **params):
    settings = GenerationSettings(max_new_tokens=n, eos_token_ids=list(eos))
    return lookahead.generate(model, prompt, settings, LookaheadParams(**params))


def _check_counters(result, max_new_tokens, ngram):
    assert result.method == "lookahead"
    assert result.target_forwards == result.steps + 1
    assert len(result.accepted_per_step) == result.steps
    assert sum(result.accepted_per_step) == result.tokens_accepted
    assert result.tokens_accepted <= result.tokens_drafted
    assert sum(result.drafted_by_position) == result.tokens_drafted
    assert all(a <= d for a, d in zip(result.accepted_by_position, result.drafted_by_position))
    assert len(result.output_ids) <= max_new_tokens
    if result.stopped_by == "length":
        assert len(result.output_ids) == max_new_tokens == 1 + result.steps + result.tokens_accepted
    assert result.mean_accepted_per_step == pytest.approx(len(result.output_ids) / result.target_forwards)


# ---------------------------------------------------------------- parameters


def test_default_parameters_and_tokens_per_step():
    params = LookaheadParams()
    assert (params.window, params.ngram, params.guess, params.prompt_lookup) == (15, 5, 5, 2)
    assert params.tokens_per_step == 1 + 4 * 15 + 5 * 4 + 2 * 10 == 101
    assert LookaheadParams(prompt_lookup=0).tokens_per_step == 81
    assert params.check() is params


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"ngram": 1}, "ngram"),
        ({"window": 0}, "window"),
        ({"guess": -1}, "guess"),
        ({"window": 100, "ngram": 5, "guess": 40}, "lower window or guess"),
        ({"prompt_lookup": -1}, "prompt_lookup"),
        ({"W": 3}, "W"),
        ({"window": "wide"}, "window"),
    ],
)
def test_bad_parameters_are_parameter_errors(options, words):
    with pytest.raises(ParameterError) as info:
        parse_params("lookahead", options)
    assert words in info.value.user_message()


def test_generate_checks_parameters(tiny_qwen):
    with pytest.raises(ParameterError, match="ngram"):
        lookahead.generate(tiny_qwen, PROMPT, GenerationSettings(max_new_tokens=4), LookaheadParams(ngram=1))
    with pytest.raises(ParameterError, match="empty"):
        lookahead.generate(tiny_qwen, [], GenerationSettings(max_new_tokens=4))


# ---------------------------------------------------------------- layout


def test_layout_attention_pattern_and_positions():
    W, N = 3, 4
    lay = build_layout(W, N)
    assert lay.size == 1 + (N - 1) * W == 10

    def x(level, col):
        return 1 + level * W + col

    vis = lay.visible
    # level 0 is causal over its own columns; every token sees the current token
    assert vis[x(0, 2)].nonzero().flatten().tolist() == [0, x(0, 0), x(0, 1), x(0, 2)]
    # level 2, column 1: level 0 up to column 1, then its own column in levels 1 and 2
    assert vis[x(2, 1)].nonzero().flatten().tolist() == [0, x(0, 0), x(0, 1), x(1, 1), x(2, 1)]
    assert lay.offsets[[x(2, 1), x(1, 1), x(0, 1), x(0, 0)]].tolist() == [4, 3, 2, 1]
    # draft tree nodes after the window: they see c and their ancestors, not the window
    tree = build_draft_tree(0, [[7, 8, 9], [7, 6], [5]])
    visible, offsets = step_pattern(lay, lay.size, tree)
    n0 = lay.size  # node i sits at n0 + i - 1
    assert visible.shape == (lay.size + 5, lay.size + 5)
    assert visible[n0 + 2].nonzero().flatten().tolist() == [0, n0, n0 + 1, n0 + 2]  # 7 8 9
    assert visible[n0 + 3].nonzero().flatten().tolist() == [0, n0, n0 + 3]  # 7 6
    assert visible[n0 + 4].nonzero().flatten().tolist() == [0, n0 + 4]  # 5
    assert offsets[n0:].tolist() == [1, 2, 3, 2, 1]
    assert torch.equal(visible[:n0, :n0], lay.visible) and not visible[:n0, n0:].any()


@pytest.mark.parametrize("kind", ["qwen2", "llama"])
@pytest.mark.parametrize("levels", [1, 3])
def test_every_step_row_sees_exactly_its_own_sequence(kind, levels):
    """Each row's logits equal a plain causal run over the prompt and the tokens that row sees."""
    model = tiny(kind)
    W, N = 3, 4
    lay = build_layout(W, N)
    n_look = 1 + levels * W
    tree = build_draft_tree(0, [[7, 8, 9], [7, 6], [5]])
    visible, offsets = step_pattern(lay, n_look, tree)
    size = visible.shape[0]
    gen = torch.Generator().manual_seed(0)
    step_ids = torch.randint(0, VOCAB, (1, size), generator=gen)
    step_ids[0, n_look:] = torch.tensor(tree.tokens[1:])
    cache = kv.new_cache(model)
    with torch.inference_mode():
        autoregressive.prefill(model, torch.tensor([PROMPT]), cache)
        L = len(PROMPT)
        rows = torch.arange(size)
        logits = as_backend(model).forward(step_ids, cache, (offsets + L)[None], visible, rows)
        for r in range(size):
            seen = visible[r].nonzero().flatten()
            assert offsets[seen].tolist() == list(range(len(seen)))  # a contiguous sequence
            alone = model(torch.tensor([PROMPT + step_ids[0, seen].tolist()])).logits[0, -1]
            torch.testing.assert_close(logits[r], alone, atol=1e-4, rtol=1e-4)


# ---------------------------------------------------------------- pool


def test_pool_keeps_the_most_recently_used_per_key():
    pool = NgramPool(n=3, per_key=2)
    pool.add(7, (1, 2))
    pool.add(7, (3, 4))
    pool.add(7, (1, 2))  # refresh: (3, 4) is now the least recently used
    pool.add(7, (5, 6))
    assert pool.candidates(7) == [(5, 6), (1, 2)]
    pool.touch(7, (1, 2))
    pool.add(7, (8, 9))
    assert pool.candidates(7) == [(8, 9), (1, 2)]
    assert pool.candidates(99) == []
    pool.add_sequence([1, 2, 3, 1, 2, 4])  # 3-grams 123, 231, 312, 124
    assert pool.candidates(1) == [(2, 4), (2, 3)]
    assert pool.candidates(2) == [(3, 1)] and pool.candidates(3) == [(1, 2)]
    assert len(pool) == 2 + 2 + 1 + 1
    pool.add_sequence([1, 2, 3, 1, 2, 4, 5], start=6)  # only the n-gram ending at index 6: 2 4 5
    assert pool.candidates(2) == [(4, 5), (3, 1)]


def test_pool_with_no_guesses_stays_empty():
    pool = NgramPool(n=3, per_key=0)
    pool.add_sequence([1, 2, 3, 4, 5])
    assert len(pool) == 0


# ---------------------------------------------------------------- acceptance


def _chi_square_pvalue(samples: Counter, exact: dict, total: int) -> float:
    """Chi-square goodness of fit, merging outcomes expected fewer than 5 times into one bin."""
    observed, expected, rest_o, rest_e = [], [], 0, 0.0
    for outcome, prob in exact.items():
        if prob * total >= 5:
            observed.append(samples.get(outcome, 0))
            expected.append(prob * total)
        else:
            rest_o += samples.get(outcome, 0)
            rest_e += prob * total
    rest_o += sum(c for o, c in samples.items() if o not in exact)
    if rest_e > 0 or rest_o:
        observed.append(rest_o)
        expected.append(max(rest_e, 1e-9))
    scale = sum(observed) / sum(expected)
    return float(chisquare(observed, [e * scale for e in expected]).pvalue)


class _Conditional:
    """A random next-token distribution for every prefix (after a fixed context)."""

    def __init__(self, vocab: int):
        self.vocab = vocab
        self.table: dict[tuple, torch.Tensor] = {}

    def __call__(self, prefix: tuple) -> torch.Tensor:
        if prefix not in self.table:
            alpha = torch.full((self.vocab,), 3.0)
            self.table[prefix] = torch.distributions.Dirichlet(alpha).sample()
        return self.table[prefix]

    def prob(self, seq: tuple) -> float:
        return math.prod(float(self(seq[:i])[seq[i]]) for i in range(len(seq)))


def _tree_samples(accept, cands, p, depth, total, seed):
    gen = torch.Generator().manual_seed(seed)
    tree = build_draft_tree(-1, [list(c) for c in cands])
    prefix = {0: ()}
    for i in range(1, tree.size):
        prefix[i] = prefix[tree.parents[i]] + (tree.tokens[i],)
    counts = Counter()
    for _ in range(total):
        node, nxt = accept(tree, lambda i: p(prefix[i]), gen)
        seq = prefix[node] + (nxt,)
        while len(seq) < depth + 1:  # continue autoregressively to a fixed length
            seq += (int(torch.multinomial(p(seq), 1, generator=gen)),)
        counts[seq] += 1
    return counts


def _first_candidate_always(tree, p_at, gen):
    """A wrong verifier (accepts the first draft's first token outright), as a control."""
    node = tree.children[0][0]
    return node, int(torch.multinomial(p_at(node), 1, generator=gen))


def test_sampling_candidates_are_lossless():
    vocab, depth, total = 4, 3, 12000
    torch.manual_seed(0)
    p = _Conditional(vocab)
    # candidates share prefixes (0 1 .., 0 ..) and differ at every depth
    cands = [(0, 1, 2), (0, 1, 3), (0, 2, 1), (1, 0, 0), (2, 2, 2)]
    exact = {}  # computing it fills p's table for every prefix, in a fixed order
    for a in range(vocab):
        for b in range(vocab):
            for c in range(vocab):
                for d in range(vocab):
                    exact[(a, b, c, d)] = p.prob((a, b, c, d))
    counts = _tree_samples(accept_sampling_tree, cands, p, depth, total, seed=2)
    assert _chi_square_pvalue(counts, exact, total) > 1e-3
    # the test can fail: a biased verifier is caught
    wrong = _tree_samples(_first_candidate_always, cands, p, depth, 3000, seed=3)
    assert _chi_square_pvalue(wrong, exact, 3000) < 1e-6


# ---------------------------------------------------------------- greedy == baseline

PARAMS = st.fixed_dictionaries({
    "window": st.integers(1, 5),
    "ngram": st.integers(2, 5),
    "guess": st.integers(0, 4),
    "pool_from_prompt": st.booleans(),
    "prompt_lookup": st.integers(0, 3),
})
PROMPTS = st.one_of(
    st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=16),
    st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=5).map(lambda p: p * 4),
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from(["qwen2", "llama", "bigram"]), prompt=PROMPTS, params=PARAMS,
       max_new_tokens=st.integers(1, 40))
def test_greedy_output_equals_the_baseline(kind, prompt, params, max_new_tokens):
    model = bigram_model() if kind == "bigram" else tiny(kind)
    expected = _baseline(model, prompt, max_new_tokens).output_ids
    result = _lookahead(model, prompt, max_new_tokens, **params)
    assert_greedy_equal(model, prompt, expected, result.output_ids)
    _check_counters(result, max_new_tokens, params["ngram"])


@pytest.mark.parametrize("kind", ["qwen2", "llama"])
def test_default_parameters_match_the_baseline(kind):
    model = tiny(kind)
    expected = _baseline(model, REPEATING, 48).output_ids
    result = _lookahead(model, REPEATING, 48)
    assert result.output_ids == expected
    assert result.extra["window"] == 15 and result.extra["tokens_per_step"] == 101
    _check_counters(result, 48, 5)


@pytest.mark.parametrize("kind", ["qwen2", "llama"])
def test_jacobi_window_finds_ngrams_on_repetitive_output(kind):
    """With the prompt kept out of the pool, accepted tokens come from the lookahead branch alone."""
    model = bigram_model(kind)
    expected = _baseline(model, REPEATING, 64).output_ids
    assert len(set(expected[-24:])) < 12  # the greedy output repeats
    result = _lookahead(model, REPEATING, 64, window=4, ngram=4, guess=3, pool_from_prompt=False, prompt_lookup=0)
    assert result.output_ids == expected
    assert result.tokens_accepted > 0
    assert result.steps < 63
    assert result.extra["verify_steps"] > 0 and result.extra["pool_ngrams"] > 0
    _check_counters(result, 64, 4)


def test_prompt_seeded_pool_accepts_on_a_repeating_prompt():
    model = bigram_model()
    cycle = _baseline(model, [5], 40).output_ids[-12:]
    prompt = cycle * 3
    expected = _baseline(model, prompt, 40).output_ids
    result = _lookahead(model, prompt, 40, window=2, ngram=4, guess=2, pool_from_prompt=True, prompt_lookup=0)
    assert result.output_ids == expected
    assert result.tokens_accepted >= 20
    assert result.mean_accepted_per_step > 2.0


def test_prompt_lookup_drafts_are_verified_with_the_pool():
    """Drafts copied from a repeating prompt are accepted from the first step, also in warm-up."""
    model = bigram_model()
    cycle = _baseline(model, [5], 40).output_ids[-12:]
    prompt = cycle * 3
    expected = _baseline(model, prompt, 40).output_ids
    result = _lookahead(model, prompt, 40, window=2, ngram=4, guess=2, prompt_lookup=1)
    assert result.output_ids == expected
    assert result.accepted_per_step[0] > 0  # a warm-up step, so the draft came from prompt lookup
    assert result.mean_accepted_per_step > 4.0
    _check_counters(result, 40, 4)
    alone = _lookahead(model, prompt, 40, window=2, ngram=4, guess=2, prompt_lookup=0)
    assert alone.accepted_per_step[0] == 0 and alone.steps > result.steps


FLAT_COSTS = [1.0] * 40  # every pass costs one token's: the branch is verified whole


@pytest.fixture
def untimed_gates(monkeypatch):
    """Tiny models' steps are left to the cost model (on a loaded machine one may take over TIMED_STEP_S)."""
    monkeypatch.setattr("tools.engine.gate.TIMED_STEP_S", float("inf"))


def test_with_pass_costs_the_prompt_lookup_draft_is_one_branch_cut_to_what_pays(untimed_gates):
    model = bigram_model()
    cycle = _baseline(model, [5], 40).output_ids[-12:]
    prompt = cycle * 3
    expected = _baseline(model, prompt, 40).output_ids
    result = _lookahead(model, prompt, 40, window=2, ngram=4, guess=2, prompt_lookup=1, pass_costs=FLAT_COSTS)
    assert result.output_ids == expected
    assert result.extra["lookup_steps"] > 0 and result.extra["looked_up"] > 0
    assert result.mean_accepted_per_step > 4.0
    _check_counters(result, 40, 4)
    # a pass over more than the window's 13 tokens costs far more: the branch joins only steps with room under that
    # (warm-up steps, steps with few pool n-grams), cut to the room
    steep = [1.0] * 13 + [40.0] * 30
    backend, passes = as_backend(model), []
    forward = backend.forward
    backend.forward = lambda ids, *args, **kw: passes.append(ids.shape[1]) or forward(ids, *args, **kw)
    params = LookaheadParams(window=2, ngram=4, guess=2, prompt_lookup=1, pass_costs=steep)
    cut = lookahead.generate(backend, prompt, GenerationSettings(max_new_tokens=40), params)
    assert cut.output_ids == expected and cut.extra["declined_steps"] == 0 and cut.extra["lookup_steps"] > 0
    assert passes[0] == len(prompt) and max(passes[1:]) <= 13  # the prefill, then no step past 13 tokens


def test_a_declined_step_verifies_the_lookup_branch_alone(untimed_gates):
    """The window does not pay (a pass over it costs 20 one-token passes), the branch does: declined steps verify
    the branch and keep its tokens, the output stays the baseline's."""
    model = bigram_model()
    cycle = _baseline(model, [5], 40).output_ids[-12:]
    prompt = cycle * 3
    expected = _baseline(model, prompt, 40).output_ids
    costs = [1.0] * 6 + [20.0] * 30
    result = _lookahead(model, prompt, 40, window=3, ngram=3, guess=1, prompt_lookup=1, pass_costs=costs)
    assert result.output_ids == expected
    assert result.extra["declined_steps"] > 0 and result.extra["lookup_steps"] > 0
    assert result.tokens_accepted > 0
    alone = _lookahead(model, prompt, 40, window=3, ngram=3, guess=1, prompt_lookup=0, pass_costs=costs)
    assert alone.output_ids == expected and alone.tokens_accepted == 0 and result.steps < alone.steps


def test_the_plain_step_the_gate_times_verifies_no_branch(monkeypatch):
    """Every step is slow enough to time: the step the gate declines to time a plain one is plain (no branch in it),
    so the gate gets its plain step's time although the branch would pay on every declined step."""
    from tools.engine.loop import decode

    monkeypatch.setattr("tools.engine.gate.TIMED_STEP_S", 0.0)
    model = bigram_model()
    cycle = _baseline(model, [5], 40).output_ids[-12:]
    prompt = cycle * 3
    settings = GenerationSettings(max_new_tokens=40)
    params = LookaheadParams(window=2, ngram=3, guess=1, prompt_lookup=1, pass_costs=FLAT_COSTS)
    backend = as_backend(model)
    step = lookahead.LookaheadStep(backend, params, settings)
    result = decode(backend, prompt, settings, step, "lookahead")
    assert result.output_ids == _baseline(model, prompt, 40).output_ids
    assert step.gate.plain_s is not None and step.gate.declined > 0


def test_warmup_steps_verify_nothing():
    model = bigram_model()
    prompt = _baseline(model, [5], 40).output_ids * 2  # the pool has candidates from the start
    # 3 decode steps, all warm-up
    result = _lookahead(model, prompt, 4, window=3, ngram=5, guess=3, prompt_lookup=0)
    assert result.steps == 3 and result.tokens_drafted == 0 and result.extra["warmup_steps"] == 3
    longer = _lookahead(model, prompt, 12, window=3, ngram=5, guess=3, prompt_lookup=0)
    assert longer.tokens_drafted > 0
    assert longer.accepted_per_step[:3] == [0, 0, 0]


@pytest.mark.parametrize("kind", ["qwen2", "llama"])
@pytest.mark.parametrize("n", [1, 2, 5, 17])
def test_max_new_tokens_is_respected(kind, n):
    model = bigram_model(kind)
    expected = _baseline(model, REPEATING, n).output_ids
    result = _lookahead(model, REPEATING, n, window=3, ngram=3, guess=3)
    assert result.output_ids == expected and len(result.output_ids) == n
    assert result.stopped_by == "length"
    _check_counters(result, n, 3)


@pytest.mark.parametrize("model_name", ["bigram", "qwen2"])
def test_eos_stops_after_the_eos_token(model_name):
    model = bigram_model() if model_name == "bigram" else tiny("qwen2")
    full = _baseline(model, REPEATING, 40).output_ids
    j = next(j for j in range(3, 40) if full[j] not in full[:j])
    eos = full[j]
    expected = _baseline(model, REPEATING, 40, eos=[eos])
    result = _lookahead(model, REPEATING, 40, eos=[eos], window=3, ngram=3, guess=3)
    assert result.output_ids == expected.output_ids == full[: j + 1]
    assert result.stopped_by == "eos"
    _check_counters(result, 40, 3)


def test_eos_as_first_token():
    model = bigram_model()
    first = _baseline(model, REPEATING, 1).output_ids[0]
    result = _lookahead(model, REPEATING, 10, eos=[first])
    assert result.output_ids == [first] and result.stopped_by == "eos" and result.steps == 0


# ---------------------------------------------------------------- sampling end to end


SAMPLED = {  # prompt-lookup drafts beside a seeded pool; with pass costs and no pool, the branch alone proposes
    "drafts": LookaheadParams(window=2, ngram=2, guess=4, pool_from_prompt=True, prompt_lookup=2),
    "branch": LookaheadParams(window=2, ngram=2, guess=0, prompt_lookup=1, pass_costs=FLAT_COSTS),
}


@pytest.mark.parametrize("kind", list(SAMPLED))
def test_sampling_matches_the_models_distribution(kind, untimed_gates):
    """The first three tokens, over many seeds, follow the target's own sampling distribution,
    while candidates are verified (accepted and rejected) along the way (prompt-lookup drafts as they are, or,
    with pass costs, one branch cut by its run's record)."""
    vocab, total = 8, 1500
    model = make_tiny_model("qwen2", layers=1, seed=3, vocab=vocab)
    prompt = [1, 2, 3, 1, 2, 4, 1, 2, 3, 5, 6, 7, 0, 1, 5, 6]
    params = SAMPLED[kind]
    base = dict(max_new_tokens=3, temperature=1.3, top_p=0.95)
    with torch.inference_mode():
        seqs = torch.tensor([prompt + [a, b] for a in range(vocab) for b in range(vocab)])
        probs = warp_probs(model(seqs).logits[:, -3:], GenerationSettings(**base)).double()
    exact = {}
    for i, (a, b) in enumerate((a, b) for a in range(vocab) for b in range(vocab)):
        for c in range(vocab):
            exact[(a, b, c)] = float(probs[i, 0, a] * probs[i, 1, b] * probs[i, 2, c])
    counts, accepted, rejected, looked_up = Counter(), 0, 0, 0
    for seed in range(total):
        result = lookahead.generate(model, prompt, GenerationSettings(**base, seed=seed), params)
        counts[tuple(result.output_ids)] += 1
        accepted += result.tokens_accepted
        rejected += result.tokens_drafted - result.tokens_accepted
        looked_up += result.extra["looked_up"]
    assert accepted > 50 and rejected > 50
    if kind == "branch":
        assert looked_up == accepted  # every kept draft token was the branch's
    assert _chi_square_pvalue(counts, exact, total) > 1e-3


@pytest.mark.parametrize("options", [dict(guess=0), dict(window=2, ngram=4, guess=2), dict()])
def test_sampling_is_reproducible_for_a_seed(options):
    model = bigram_model()
    settings = GenerationSettings(max_new_tokens=20, temperature=0.8, top_k=10, seed=7)
    first = lookahead.generate(model, REPEATING, settings, LookaheadParams(**options))
    again = lookahead.generate(model, REPEATING, settings, LookaheadParams(**options))
    assert first.output_ids == again.output_ids and len(first.output_ids) == 20
    _check_counters(first, 20, first.extra["ngram"])


def test_bfloat16_model_runs():
    model = make_tiny_model("qwen2", seed=0, dtype=torch.bfloat16)
    result = _lookahead(model, REPEATING, 24, window=3, ngram=3, guess=2)
    assert len(result.output_ids) == 24
    _check_counters(result, 24, 3)


# ---------------------------------------------------------------- lade


def _fake_lade(tmp_path, monkeypatch, source: str):
    package = tmp_path / "lade"
    package.mkdir()
    (package / "__init__.py").write_text("from .decoding import *\n")
    (package / "decoding.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()


def test_lade_not_installed(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    ok, reason = lade_status()
    assert not ok and "not installed" in reason


def test_lade_that_needs_removed_transformers_internals(tmp_path, monkeypatch):
    _fake_lade(tmp_path, monkeypatch, (
        "from transformers import GenerationMixin\n"
        "from transformers.generation.utils import LogitsProcessorList, GreedySearchOutput\n"
        "FUNC_MAP = {'greedy_search': GenerationMixin.greedy_search}\n"
    ))
    ok, reason = lade_status()
    assert not ok
    assert reason.index("transformers.GenerationMixin.greedy_search") < reason.index(
        "transformers.generation.utils.GreedySearchOutput")
    assert "lade" not in sys.modules  # read, never imported


def test_lade_whose_imports_resolve(tmp_path, monkeypatch):
    _fake_lade(tmp_path, monkeypatch, (
        "from transformers import GenerationMixin\n"
        "from transformers.generation.utils import LogitsProcessorList\n"
        "GENERATE = GenerationMixin.generate\n"
    ))
    ok, reason = lade_status()
    assert ok and "resolve" in reason
