"""The forward-cost curve and the lookahead parameters suggested from it."""

from __future__ import annotations

import pytest

from tools.engine.cost_curve import flat_tokens, forward_cost_curve, isotonic, monotone, suggest_lookahead_params
from tools.errors import ParameterError

# measured on 2 CPU cores, Qwen2.5-Coder-1.5B bfloat16, 100 cached tokens (DESIGN.md), in seconds
CPU_CURVE = {1: 0.112, 2: 0.108, 4: 0.111, 8: 0.126, 16: 0.149, 32: 0.203, 64: 0.306}
FLAT_CURVE = {1: 0.020, 2: 0.020, 4: 0.020, 8: 0.021, 16: 0.021, 32: 0.022, 64: 0.025}
STEEP_CURVE = {1: 0.010, 2: 0.020, 4: 0.040, 8: 0.080}


def test_flat_tokens_interpolates_where_the_budget_is_crossed():
    # the 1- and 2-token times pool to 110 ms (a dip is noise); 1.3 x 110 ms = 143 ms lies between
    # 8 tokens (126 ms) and 16 tokens (149 ms)
    assert flat_tokens(CPU_CURVE) == 13
    assert flat_tokens(FLAT_CURVE) == 64  # never past the largest size measured
    assert flat_tokens(STEEP_CURVE) == 1
    with pytest.raises(ParameterError):
        flat_tokens({2: 0.1, 4: 0.2})


def test_cpu_curve_gets_a_small_window():
    params, reasoning = suggest_lookahead_params(CPU_CURVE)
    assert (params.window, params.ngram, params.guess, params.prompt_lookup) == (3, 4, 1, 0)
    assert params.tokens_per_step == 13 <= flat_tokens(CPU_CURVE)
    assert "110.0 ms for 1 token (measured 112.0 ms" in reasoning and "13 tokens" in reasoning


def test_curve_flat_to_32_tokens_gets_one_prompt_lookup_draft():
    # measured on 2 CPU cores, Qwen2.5-Coder-1.5B bfloat16, 800 cached tokens: a step up past 32 tokens
    curve = {1: 0.184, 8: 0.203, 16: 0.205, 32: 0.236, 36: 0.302, 48: 0.309}
    params, reasoning = suggest_lookahead_params(curve)
    assert (params.window, params.ngram, params.guess, params.prompt_lookup) == (5, 4, 2, 1)
    assert params.tokens_per_step == 1 + 3 * 5 + 3 * 2 + 10 == 32
    assert "1 prompt-lookup draft" in reasoning


def test_flat_gpu_like_curve_gets_the_papers_shape():
    params, reasoning = suggest_lookahead_params(FLAT_CURVE)
    assert (params.window, params.ngram, params.guess, params.prompt_lookup) == (9, 5, 4, 1)
    assert params.tokens_per_step == 1 + 4 * 9 + 4 * 4 + 10 == 63 <= 64  # room for one prompt-lookup draft
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


def test_isotonic_pools_dips_and_keeps_monotone_curves():
    assert isotonic([1.0, 2.0, 3.0]) == [1.0, 2.0, 3.0]
    assert isotonic([1.0, 3.0, 2.0, 4.0]) == [1.0, 2.5, 2.5, 4.0]
    assert isotonic([3.0, 2.0, 1.0]) == [2.0, 2.0, 2.0]
    assert isotonic([]) == []
    assert list(monotone({4: 0.3, 1: 0.2, 2: 0.4})) == [1, 2, 4]


# measured on an H200 (random weights of the default target's shape, bfloat16, 512 cached tokens) with
# sizes timed one after another: the one-token pass came first, before the GPU's clocks had ramped up
GPU_NOISY_CURVE = {1: 0.0281, 2: 0.0264, 4: 0.0192, 8: 0.0188, 16: 0.0193, 32: 0.0193, 64: 0.0198,
                   96: 0.0198, 128: 0.0246, 192: 0.0271, 256: 0.0183}


def test_a_slow_one_token_time_does_not_make_larger_passes_look_cheaper():
    params, reasoning = suggest_lookahead_params(GPU_NOISY_CURVE)
    assert flat_tokens(GPU_NOISY_CURVE) == 256
    cost = float(reasoning.split("(about ")[1].split("x")[0])
    assert cost >= 1.0  # not "0.66x a one-token pass"
    assert params.tokens_per_step <= 256


def test_masked_curve_times_the_tree_verification_path(tiny_qwen):
    curve = forward_cost_curve(tiny_qwen, sizes=(1, 3), cache_len=8, repeats=1, masked=True)
    assert list(curve) == [1, 3] and all(t > 0 for t in curve.values())
