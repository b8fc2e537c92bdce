"""The baseline: a KV-cached autoregressive loop that must match transformers' own generate."""

from __future__ import annotations

import pytest
import torch

from tools.engine.autoregressive import as_input_ids, generate
from tools.engine.types import GenerationSettings

PROMPTS = [[3, 17, 5, 9, 22], [1], [40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51], [7, 7, 7, 2]]


def _hf_greedy(model, prompt: list[int], n: int) -> list[int]:
    ids = torch.tensor([prompt])
    with torch.no_grad():
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            do_sample=False,
            max_new_tokens=n,
            min_new_tokens=n,
            pad_token_id=0,
        )
    return out[0, len(prompt):].tolist()


@pytest.fixture(params=["tiny_qwen", "tiny_llama"])
def model(request):
    return request.getfixturevalue(request.param)


@pytest.mark.parametrize("prompt", PROMPTS, ids=lambda p: f"len{len(p)}")
def test_greedy_equals_transformers_generate(model, prompt):
    expected = _hf_greedy(model, prompt, 24)
    result = generate(model, prompt, GenerationSettings(max_new_tokens=24))
    assert result.output_ids == expected
    assert result.stopped_by == "length"


def test_greedy_result_counters(tiny_qwen):
    result = generate(tiny_qwen, PROMPTS[0], GenerationSettings(max_new_tokens=10))
    assert result.method == "baseline"
    assert result.new_tokens == 10
    assert result.steps == 9
    assert result.target_forwards == 10
    assert result.accepted_per_step == [1] * 9
    assert result.mean_accepted_per_step == 1.0
    assert result.tokens_drafted == 0 and result.acceptance_rate is None
    assert result.prefill_s >= 0 and result.decode_s >= 0
    assert result.wall_time_s == pytest.approx(result.prefill_s + result.decode_s)


@pytest.mark.parametrize("n", [1, 2, 7, 31])
def test_max_new_tokens_is_respected(tiny_qwen, n):
    full = generate(tiny_qwen, PROMPTS[0], GenerationSettings(max_new_tokens=40)).output_ids
    result = generate(tiny_qwen, PROMPTS[0], GenerationSettings(max_new_tokens=n))
    assert len(result.output_ids) == n
    assert result.output_ids == full[:n]
    assert result.stopped_by == "length"


def _eos_case(model, prompt, n=30):
    """Pick a token the greedy output emits at a position j >= 3 for the first time; return (full, eos, j)."""
    full = generate(model, prompt, GenerationSettings(max_new_tokens=n)).output_ids
    for j in range(3, n):
        if full[j] not in full[:j]:
            return full, full[j], j
    raise AssertionError("no fresh token in the greedy output to use as EOS")


def test_eos_stops_after_the_eos_token(model):
    full, eos, j = _eos_case(model, PROMPTS[0])
    result = generate(model, PROMPTS[0], GenerationSettings(max_new_tokens=30, eos_token_ids=[eos]))
    assert result.output_ids == full[: j + 1]
    assert result.output_ids[-1] == eos
    assert result.stopped_by == "eos"
    assert result.steps == j
    assert result.target_forwards == j + 1


def test_eos_as_the_first_token_stops_at_once(tiny_qwen):
    full = generate(tiny_qwen, PROMPTS[0], GenerationSettings(max_new_tokens=5)).output_ids
    result = generate(tiny_qwen, PROMPTS[0], GenerationSettings(max_new_tokens=5, eos_token_ids=[full[0]]))
    assert result.output_ids == [full[0]]
    assert result.stopped_by == "eos"
    assert result.steps == 0 and result.target_forwards == 1


def test_any_of_several_eos_tokens_stops(tiny_qwen):
    full, eos, j = _eos_case(tiny_qwen, PROMPTS[0])
    absent = next(t for t in range(64) if t not in full)
    result = generate(tiny_qwen, PROMPTS[0], GenerationSettings(max_new_tokens=30, eos_token_ids=[absent, eos]))
    assert result.output_ids == full[: j + 1]
    assert result.stopped_by == "eos"


def test_eos_at_the_last_allowed_token_reports_eos(tiny_qwen):
    full, eos, j = _eos_case(tiny_qwen, PROMPTS[0])
    result = generate(tiny_qwen, PROMPTS[0], GenerationSettings(max_new_tokens=j + 1, eos_token_ids=[eos]))
    assert result.output_ids == full[: j + 1]
    assert result.stopped_by == "eos"


def test_an_eos_that_never_comes_does_not_stop(tiny_qwen):
    full = generate(tiny_qwen, PROMPTS[0], GenerationSettings(max_new_tokens=20)).output_ids
    absent = next(t for t in range(64) if t not in full)
    result = generate(tiny_qwen, PROMPTS[0], GenerationSettings(max_new_tokens=20, eos_token_ids=[absent]))
    assert result.output_ids == full
    assert result.stopped_by == "length"


# ---------------------------------------------------------------- sampling


def _sampled(model, seed, **kw):
    kw.setdefault("temperature", 1.5)
    kw.setdefault("max_new_tokens", 24)
    return generate(model, PROMPTS[0], GenerationSettings(seed=seed, **kw)).output_ids


def test_same_seed_gives_the_same_sampled_output(model):
    assert _sampled(model, 5) == _sampled(model, 5)
    assert _sampled(model, 6, top_p=0.9, top_k=10) == _sampled(model, 6, top_p=0.9, top_k=10)


def test_different_seeds_give_different_sampled_outputs(model):
    greedy = generate(model, PROMPTS[0], GenerationSettings(max_new_tokens=24)).output_ids
    outputs = [_sampled(model, seed) for seed in range(4)]
    assert len({tuple(o) for o in outputs}) == 4
    assert all(o != greedy for o in outputs)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_top_k_1_equals_greedy(model, seed):
    greedy = generate(model, PROMPTS[2], GenerationSettings(max_new_tokens=20)).output_ids
    sampled = generate(
        model, PROMPTS[2], GenerationSettings(max_new_tokens=20, temperature=1.0, top_k=1, seed=seed)
    ).output_ids
    assert sampled == greedy


def test_tiny_top_p_equals_greedy(tiny_qwen):
    greedy = generate(tiny_qwen, PROMPTS[0], GenerationSettings(max_new_tokens=20)).output_ids
    assert _sampled(tiny_qwen, 3, top_p=1e-6, max_new_tokens=20) == greedy


@pytest.mark.parametrize("top_k", [2, 5])
def test_sampled_tokens_lie_in_the_targets_top_k(tiny_llama, top_k):
    prompt = PROMPTS[0]
    out = _sampled(tiny_llama, 9, top_k=top_k, temperature=3.0)
    with torch.no_grad():
        logits = tiny_llama(torch.tensor([prompt + out])).logits[0]
    # the logits that chose out[i] sit at position len(prompt) - 1 + i
    rows = logits[len(prompt) - 1 : len(prompt) - 1 + len(out)]
    allowed = rows.topk(top_k, dim=-1).indices
    assert all(t in allowed[i].tolist() for i, t in enumerate(out))
    # at temperature 3 the top-1 token is not always taken
    assert any(t != int(rows[i].argmax()) for i, t in enumerate(out))


def test_first_sampled_token_follows_the_warped_distribution(tiny_qwen):
    """Over many seeds the first token's frequencies match softmax(logits / T) restricted to top-k."""
    prompt = PROMPTS[0]
    with torch.no_grad():
        logits = tiny_qwen(torch.tensor([prompt])).logits[0, -1]
    top = logits.topk(4)
    p = (top.values / 2.0).softmax(-1)
    counts = torch.zeros(4)
    n = 400
    for seed in range(n):
        tok = generate(
            tiny_qwen, prompt, GenerationSettings(max_new_tokens=1, temperature=2.0, top_k=4, seed=seed)
        ).output_ids[0]
        assert tok in top.indices.tolist()
        counts[top.indices.tolist().index(tok)] += 1
    # 4 standard deviations of a binomial proportion at n=400 is at most 0.1
    torch.testing.assert_close(counts / n, p, atol=0.1, rtol=0)


def test_prompt_may_be_a_list_tuple_or_tensor(tiny_qwen):
    s = GenerationSettings(max_new_tokens=6)
    a = generate(tiny_qwen, PROMPTS[0], s).output_ids
    assert generate(tiny_qwen, tuple(PROMPTS[0]), s).output_ids == a
    assert generate(tiny_qwen, torch.tensor([PROMPTS[0]]), s).output_ids == a
    assert generate(tiny_qwen, torch.tensor(PROMPTS[0]), s).output_ids == a
    ids = as_input_ids(PROMPTS[0], "cpu")
    assert ids.shape == (1, len(PROMPTS[0])) and ids.dtype == torch.long
