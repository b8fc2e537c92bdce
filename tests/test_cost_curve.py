"""The forward-cost curve and the lookahead parameters suggested from it."""

from __future__ import annotations

import pytest

from tools.cost_curve import flat_tokens, forward_cost_curve, suggest_lookahead_params
from tools.errors import ParameterError

# measured on 2 CPU cores, Qwen2.5-Coder-1.5B bfloat16, 100 cached tokens (DESIGN.md), in seconds
CPU_CURVE = {1: 0.112, 2: 0.108, 4: 0.111, 8: 0.126, 16: 0.149, 32: 0.203, 64: 0.306}
FLAT_CURVE = {1: 0.020, 2: 0.020, 4: 0.020, 8: 0.021, 16: 0.021, 32: 0.022, 64: 0.025}
STEEP_CURVE = {1: 0.010, 2: 0.020, 4: 0.040, 8: 0.080}


def test_flat_tokens_interpolates_where_the_budget_is_crossed():
    # 1.3 x 112 ms = 145.6 ms lies between 8 tokens (126 ms) and 16 tokens (149 ms)
    assert flat_tokens(CPU_CURVE) == 14
    assert flat_tokens(FLAT_CURVE) == 64  # never past the largest size measured
    assert flat_tokens(STEEP_CURVE) == 1
    with pytest.raises(ParameterError):
        flat_tokens({2: 0.1, 4: 0.2})


def test_cpu_curve_gets_a_small_window():
    params, reasoning = suggest_lookahead_params(CPU_CURVE)
    assert (params.window, params.ngram, params.guess, params.prompt_lookup) == (3, 4, 1, 0)
    assert params.tokens_per_step == 13 <= flat_tokens(CPU_CURVE)
    assert "112.0 ms" in reasoning and "13 tokens" in reasoning


def test_curve_flat_to_32_tokens_gets_one_prompt_lookup_draft():
    # measured on 2 CPU cores, Qwen2.5-Coder-1.5B bfloat16, 800 cached tokens: a step up past 32 tokens
    curve = {1: 0.184, 8: 0.203, 16: 0.205, 32: 0.236, 36: 0.302, 48: 0.309}
    params, reasoning = suggest_lookahead_params(curve)
    assert (params.window, params.ngram, params.guess, params.prompt_lookup) == (5, 4, 2, 1)
    assert params.tokens_per_step == 1 + 3 * 5 + 3 * 2 + 10 == 32
    assert "1 prompt-lookup draft" in reasoning


def test_flat_gpu_like_curve_gets_the_papers_shape():
    params, reasoning = suggest_lookahead_params(FLAT_CURVE)
    assert (params.window, params.ngram, params.guess, params.prompt_lookup) == (7, 5, 3, 2)
    assert params.tokens_per_step == 1 + 4 * 7 + 4 * 3 + 20 == 61 <= 64
    assert "unlikely to pay off" not in reasoning


def test_steep_curve_gets_the_smallest_setting_and_a_warning():
    params, reasoning = suggest_lookahead_params(STEEP_CURVE)
    assert (params.window, params.ngram, params.guess, params.prompt_lookup) == (1, 2, 1, 0)
    assert "unlikely to pay off" in reasoning


def test_a_tighter_budget_never_suggests_more_tokens():
    loose, _ = suggest_lookahead_params(CPU_CURVE, budget=2.0)
    tight, _ = suggest_lookahead_params(CPU_CURVE, budget=1.1)
    assert tight.tokens_per_step <= loose.tokens_per_step


def test_forward_cost_curve_measures_each_size(tiny_qwen):
    curve = forward_cost_curve(tiny_qwen, sizes=(4, 1, 2), cache_len=16, repeats=2)
    assert list(curve) == [1, 2, 4]
    assert all(t > 0 for t in curve.values())
    params, _ = suggest_lookahead_params(curve)
    assert params.tokens_per_step >= 3
    with pytest.raises(ParameterError):
        forward_cost_curve(tiny_qwen, sizes=(0, 1))
