"""Shared sampling pieces: warping (temperature, top-k, top-p), the residual max(0, p - q), sampling."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tools.engine.sampling import greedy_tokens, make_generator, residual, sample, uniform, warp_probs
from tools.engine.types import GenerationSettings


def _settings(**kw) -> GenerationSettings:
    kw.setdefault("temperature", 1.0)
    return GenerationSettings(**kw)


def _logits(seed: int, n: int = 16, rows: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(rows, n, generator=g) * 3.0


# ---------------------------------------------------------------- temperature


@pytest.mark.parametrize("temperature", [0.25, 0.7, 1.0, 2.0, 10.0])
def test_temperature_divides_the_logits(temperature):
    logits = _logits(1)
    probs = warp_probs(logits, _settings(temperature=temperature))
    assert probs.dtype == torch.float32
    torch.testing.assert_close(probs, (logits / temperature).softmax(-1))
    torch.testing.assert_close(probs.sum(-1), torch.ones(1))


def test_lower_temperature_sharpens_and_higher_flattens():
    logits = _logits(2)
    top = int(logits.argmax())
    cold = warp_probs(logits, _settings(temperature=0.5))
    warm = warp_probs(logits, _settings(temperature=1.0))
    hot = warp_probs(logits, _settings(temperature=4.0))
    assert cold[0, top] > warm[0, top] > hot[0, top]
    # entropy grows with temperature
    ent = [-(p * p.clamp_min(1e-30).log()).sum() for p in (cold, warm, hot)]
    assert ent[0] < ent[1] < ent[2]


def test_half_precision_logits_give_float32_probabilities():
    logits = _logits(3).to(torch.bfloat16)
    probs = warp_probs(logits, _settings())
    assert probs.dtype == torch.float32
    torch.testing.assert_close(probs, logits.float().softmax(-1))


# ---------------------------------------------------------------- top-k


@pytest.mark.parametrize("k", [1, 2, 5, 15])
def test_top_k_keeps_exactly_the_k_most_likely_tokens(k):
    logits = _logits(4, n=16, rows=3)
    probs = warp_probs(logits, _settings(top_k=k))
    kept = probs > 0
    assert kept.sum(-1).tolist() == [k] * 3
    expected = torch.zeros_like(kept)
    expected.scatter_(-1, logits.topk(k, dim=-1).indices, True)
    assert torch.equal(kept, expected)
    # the survivors keep their relative odds (renormalised softmax over the top k)
    ref = logits.masked_fill(~expected, float("-inf")).softmax(-1)
    torch.testing.assert_close(probs, ref)


@pytest.mark.parametrize("k", [0, 16, 40])
def test_top_k_off_or_at_least_the_vocabulary_changes_nothing(k):
    logits = _logits(5)
    torch.testing.assert_close(warp_probs(logits, _settings(top_k=k)), logits.softmax(-1))


def test_top_k_is_applied_after_temperature():
    logits = _logits(6)
    probs = warp_probs(logits, _settings(temperature=0.5, top_k=3))
    mask = torch.zeros_like(logits, dtype=torch.bool).scatter_(-1, logits.topk(3).indices, True)
    torch.testing.assert_close(probs, (logits / 0.5).masked_fill(~mask, float("-inf")).softmax(-1))


# ---------------------------------------------------------------- top-p


def _minimal_prefix_size(probs: torch.Tensor, top_p: float) -> int:
    """Size of the smallest set of most likely tokens whose mass reaches top_p (reference, plain python)."""
    values = sorted(probs.tolist(), reverse=True)
    total = 0.0
    for i, v in enumerate(values):
        total += v
        if total >= top_p:
            return i + 1
    return len(values)


def test_top_p_keeps_the_minimal_prefix_on_a_hand_made_distribution():
    probs = torch.tensor([[0.05, 0.5, 0.3, 0.15]])
    logits = probs.log()
    # 0.5 < 0.6 -> need 0.5 + 0.3: the two top tokens
    warped = warp_probs(logits, _settings(top_p=0.6))
    torch.testing.assert_close(warped, torch.tensor([[0.0, 0.625, 0.375, 0.0]]))
    # 0.5 + 0.3 = 0.8 falls short of 0.85: the third token is needed, the fourth is not
    warped = warp_probs(logits, _settings(top_p=0.85))
    torch.testing.assert_close(warped, torch.tensor([[0.0, 0.5, 0.3, 0.15]]) / 0.95)
    # 0.5 alone reaches 0.5
    warped = warp_probs(logits, _settings(top_p=0.4))
    torch.testing.assert_close(warped, torch.tensor([[0.0, 1.0, 0.0, 0.0]]))


@pytest.mark.parametrize("top_p", [1e-6, 0.01])
def test_top_p_always_keeps_the_top_token(top_p):
    logits = _logits(7, rows=4)
    probs = warp_probs(logits, _settings(top_p=top_p))
    expected = torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).float()
    torch.testing.assert_close(probs, expected)


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    n=st.integers(2, 40),
    top_p=st.floats(0.01, 0.99),
    temperature=st.sampled_from([0.5, 1.0, 1.7]),
)
def test_top_p_keeps_the_minimal_prefix_reaching_p(seed, n, top_p, temperature):
    logits = _logits(seed, n=n)
    base = (logits / temperature).softmax(-1)[0]
    probs = warp_probs(logits, _settings(top_p=top_p, temperature=temperature))[0]
    kept = probs > 0
    size = _minimal_prefix_size(base, top_p)
    # a float boundary case can move the cut by one token; everything else must be exact
    assert abs(int(kept.sum()) - size) <= 1
    near_boundary = (base.sort(descending=True).values.cumsum(-1) - top_p).abs().min() < 1e-5
    if not near_boundary:
        assert int(kept.sum()) == size
    # the kept tokens are the most likely ones, renormalised
    order = base.argsort(descending=True)
    assert kept[order[: int(kept.sum())]].all()
    torch.testing.assert_close(probs, torch.where(kept, base, 0.0) / base[kept].sum())


def test_top_p_is_applied_after_top_k_on_the_renormalised_mass():
    # top-2 renormalised: 0.4/0.7, 0.3/0.7 = 0.571, 0.429; top_p 0.5 then keeps only the first
    probs = torch.tensor([[0.4, 0.3, 0.2, 0.1]])
    warped = warp_probs(probs.log(), _settings(top_k=2, top_p=0.5))
    torch.testing.assert_close(warped, torch.tensor([[1.0, 0.0, 0.0, 0.0]]))
    # without top-k, 0.4 does not reach 0.5: two tokens stay
    warped = warp_probs(probs.log(), _settings(top_p=0.5))
    torch.testing.assert_close(warped, torch.tensor([[4 / 7, 3 / 7, 0.0, 0.0]]))


def test_rows_are_warped_independently():
    logits = _logits(8, rows=5)
    s = _settings(top_k=4, top_p=0.8, temperature=0.9)
    batch = warp_probs(logits, s)
    for i in range(5):
        torch.testing.assert_close(batch[i], warp_probs(logits[i], s))


# ---------------------------------------------------------------- residual


def test_residual_is_the_renormalised_positive_part_of_p_minus_q():
    p = torch.tensor([0.5, 0.2, 0.2, 0.1])
    q = torch.tensor([0.1, 0.6, 0.2, 0.1])
    torch.testing.assert_close(residual(p, q), torch.tensor([1.0, 0.0, 0.0, 0.0]))
    p = torch.tensor([0.4, 0.4, 0.1, 0.1])
    q = torch.tensor([0.1, 0.2, 0.3, 0.4])
    # max(0, p - q) = [0.3, 0.2, 0, 0] -> [0.6, 0.4, 0, 0]
    torch.testing.assert_close(residual(p, q), torch.tensor([0.6, 0.4, 0.0, 0.0]))


def test_residual_does_not_modify_its_inputs_and_works_per_row():
    p = torch.tensor([[0.4, 0.4, 0.1, 0.1], [0.25, 0.25, 0.25, 0.25]])
    q = torch.tensor([[0.1, 0.2, 0.3, 0.4], [0.7, 0.1, 0.1, 0.1]])
    p0, q0 = p.clone(), q.clone()
    r = residual(p, q)
    assert torch.equal(p, p0) and torch.equal(q, q0)
    torch.testing.assert_close(r, torch.tensor([[0.6, 0.4, 0.0, 0.0], [0.0, 1 / 3, 1 / 3, 1 / 3]]))


def test_residual_falls_back_to_p_when_p_never_exceeds_q():
    p = torch.tensor([[0.3, 0.3, 0.4], [0.0, 0.5, 0.5]])
    q = torch.tensor([[0.3, 0.3, 0.4], [0.2, 0.4, 0.4]])
    # row 0: p == q, nothing is positive -> p itself; row 1 (a normal row beside it): [0, 0.5, 0.5]
    r = residual(p, q)
    torch.testing.assert_close(r[0], p[0])
    torch.testing.assert_close(r[1], torch.tensor([0.0, 0.5, 0.5]))


@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(2, 30))
def test_residual_makes_rejection_sampling_exact(seed, n):
    """q(x) min(1, p/q) + (1 - sum min(p, q)) * residual(x) == p(x): the identity behind lossless sampling."""
    g = torch.Generator().manual_seed(seed)
    p = (torch.randn(n, generator=g, dtype=torch.float64) * 2).softmax(-1)
    q = (torch.randn(n, generator=g, dtype=torch.float64) * 2).softmax(-1)
    accept = torch.minimum(p, q)
    total = accept + (1 - accept.sum()) * residual(p, q)
    torch.testing.assert_close(total, p)
    r = residual(p, q)
    assert (r >= 0).all()
    torch.testing.assert_close(r.sum(), torch.tensor(1.0, dtype=torch.float64))


# ---------------------------------------------------------------- sample / generator


def test_make_generator_is_none_for_greedy_and_seeded_otherwise():
    assert make_generator(GenerationSettings(temperature=0.0)) is None
    g1 = make_generator(_settings(seed=11))
    g2 = make_generator(_settings(seed=11))
    g3 = make_generator(_settings(seed=12))
    a, b, c = (torch.rand(8, generator=g) for g in (g1, g2, g3))
    assert torch.equal(a, b)
    assert not torch.equal(a, c)


def test_sample_is_reproducible_and_follows_the_shape_of_probs():
    probs = warp_probs(_logits(9, rows=6), _settings())
    draw = lambda seed: sample(probs, torch.Generator().manual_seed(seed))  # noqa: E731
    a = draw(1)
    assert a.shape == (6,) and a.dtype == torch.long
    assert torch.equal(a, draw(1))
    assert any(not torch.equal(a, draw(s)) for s in range(2, 6))
    single = sample(probs[0], torch.Generator().manual_seed(1))
    assert single.shape == ()


def test_sample_never_draws_a_zero_probability_token():
    probs = warp_probs(_logits(10, n=12, rows=200), _settings(top_k=3))
    draws = sample(probs, torch.Generator().manual_seed(0))
    assert (probs.gather(-1, draws[:, None]) > 0).all()


def test_sample_frequencies_follow_probs():
    probs = torch.tensor([0.1, 0.6, 0.3])
    g = torch.Generator().manual_seed(0)
    draws = sample(probs.expand(20_000, 3), g)
    freq = torch.bincount(draws, minlength=3).float() / draws.numel()
    torch.testing.assert_close(freq, probs, atol=0.015, rtol=0)


def test_uniform_draws_from_the_generator():
    a = uniform(5, torch.Generator().manual_seed(3), "cpu")
    b = uniform(5, torch.Generator().manual_seed(3), "cpu")
    assert a.shape == (5,) and torch.equal(a, b)
    assert ((a >= 0) & (a < 1)).all()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_greedy_tokens_is_argmax_with_first_of_ties(dtype):
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(7, 1000, generator=g).to(dtype)
    logits[1, [5, 500, 999]] = 50.0  # a three-way tie: the first index wins, as with argmax
    logits[2] = 0.0  # every token tied
    logits[3, -1] = 60.0
    got = greedy_tokens(logits)
    assert got.dtype == torch.long and got.shape == (7,)
    assert torch.equal(got, logits.argmax(dim=-1))
    assert got[1] == 5 and got[2] == 0 and got[3] == 999
    assert int(greedy_tokens(logits[4])) == int(logits[4].argmax())  # one row
