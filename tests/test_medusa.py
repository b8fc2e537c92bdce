"""Medusa decoding on tiny Qwen2 and Llama models: exact greedy output, acceptance with heads whose
proposals the test constructs, the KV cache after a step, budgets, EOS, typical acceptance."""

from __future__ import annotations

import pytest
import torch
from pydantic import ValidationError

from conftest import VOCAB, make_tiny_model
from tools.engine import autoregressive
from tools.engine import kv
from tools.engine import medusa, upstream_status
from tools.engine.medusa import MedusaHeads, MedusaParams, ResBlock, build_tree_buffers, generate
from tools.engine.types import GenerationSettings
from tools.errors import DependencyError, ParameterError, VocabularyMismatchError

PROMPTS = [[1, 2, 3, 4, 5], [9, 33, 7], [60, 12, 5, 40, 41, 2, 18, 3]]


def random_heads(num_heads=4, shared=True, seed=1, hidden=32, vocab=VOCAB, layers=1) -> MedusaHeads:
    torch.manual_seed(seed)
    heads = MedusaHeads(hidden, vocab, num_heads, layers, shared_projection=shared)
    with torch.no_grad():
        for p in heads.parameters():
            p.normal_(0.0, 0.3)
    return heads.eval()


class OracleHeads:
    """Heads that know the target's greedy continuation: they find the position of the hidden state
    they are given and put the true future token of head d at rank ``ranks[d]``."""

    shared_projection = False
    num_layers = 1

    def __init__(self, model, prompt, n_tokens, num_heads=4, ranks=None):
        settings = GenerationSettings(max_new_tokens=n_tokens + num_heads + 2)
        self.seq = list(prompt) + autoregressive.generate(model, prompt, settings).output_ids
        with torch.inference_mode():
            ids = torch.tensor([self.seq])
            self.table = model.base_model(input_ids=ids, use_cache=False).last_hidden_state[0]
        self.num_heads = num_heads
        self.ranks = ranks or [0] * num_heads
        self.calls = 0

    def topk(self, hidden, depth, k):
        self.calls += 1
        t = int(((self.table - hidden[None]) ** 2).sum(-1).argmin())
        out = torch.zeros(depth, k, dtype=torch.long)
        for d in range(depth):
            truth = self.seq[t + d + 2]
            others = [x for x in range(VOCAB) if x != truth][: k - 1]
            row = others[: self.ranks[d]] + [truth] + others[self.ranks[d]:]
            out[d] = torch.tensor(row[:k])
        return out


@pytest.fixture(scope="module", params=["qwen2", "llama"])
def target(request):
    return make_tiny_model(request.param, layers=2, seed=0)


@pytest.mark.parametrize("tree", ["chain3", "cpu8", "cpu16", "mc_sim_7b_63", [[0], [1], [2], [0, 0], [2, 1]]])
def test_greedy_output_equals_baseline_with_random_heads(target, tree):
    for shared in (True, False):
        heads = random_heads(shared=shared)
        for prompt in PROMPTS:
            settings = GenerationSettings(max_new_tokens=24)
            base = autoregressive.generate(target, prompt, settings)
            result = generate(target, heads, prompt, settings, MedusaParams(tree=tree))
            assert result.output_ids == base.output_ids
            assert result.method == "medusa" and result.extra["lossy"] is False


def test_random_heads_get_some_acceptance_and_counters_add_up(target):
    settings = GenerationSettings(max_new_tokens=40)
    totals = 0
    for prompt in PROMPTS:
        r = generate(target, random_heads(), prompt, settings, MedusaParams(tree="mc_sim_7b_63"))
        totals += r.tokens_accepted
        assert r.tokens_accepted == sum(r.accepted_per_step)
        assert len(r.output_ids) == 1 + r.steps + r.tokens_accepted  # root + (accepted + 1) per step
        assert r.target_forwards == r.steps + 1
        assert r.tokens_drafted == sum(r.drafted_by_position)
        assert r.steps - 1 <= r.drafted_by_position[0] <= r.steps  # a last step with one token left drafts nothing
        assert sum(r.accepted_by_position) == r.tokens_accepted
    assert totals > 0


def test_oracle_heads_are_fully_accepted(target):
    prompt = PROMPTS[0]
    settings = GenerationSettings(max_new_tokens=33)
    base = autoregressive.generate(target, prompt, settings)
    heads = OracleHeads(target, prompt, 33)
    r = generate(target, heads, prompt, settings, MedusaParams(tree="chain4", medusa_lookup=0))  # the heads alone
    assert r.output_ids == base.output_ids
    # 1 + 6 steps * (4 + 1) = 31 tokens; with 2 left the last step proposes (and accepts) just 1
    assert r.accepted_per_step == [4] * 6 + [1]
    assert r.steps == 7 and r.acceptance_rate == 1.0
    assert r.mean_accepted_per_step == pytest.approx(33 / 8)


def test_accepted_path_follows_tree_indices_to_the_right_branch(target):
    prompt = PROMPTS[1]
    settings = GenerationSettings(max_new_tokens=31)
    base = autoregressive.generate(target, prompt, settings)
    # truth at rank 2 for head 0 and rank 1 for head 1: only the branch [2, 1] is right
    heads = OracleHeads(target, prompt, 31, ranks=[2, 1, 0, 0])
    tree = [[0], [1], [2], [0, 0], [1, 1], [2, 0], [2, 1]]
    r = generate(target, heads, prompt, settings, MedusaParams(tree=tree))
    assert r.output_ids == base.output_ids
    assert r.accepted_per_step == [2] * 10
    r = generate(target, OracleHeads(target, prompt, 31, ranks=[2, 0, 0, 0]), prompt, settings,
                 MedusaParams(tree=[[0], [1], [2], [0, 0], [1, 1], [2, 1]]))
    assert r.output_ids == base.output_ids and set(r.accepted_per_step) == {1}


def test_cache_after_a_step_holds_exactly_the_accepted_path(target):
    prompt = PROMPTS[2]
    heads = OracleHeads(target, prompt, 8, ranks=[1, 2, 0, 0])
    tree = build_tree_buffers([[0], [1], [0, 0], [1, 0], [1, 1], [1, 2], [1, 2, 0]])  # right path: nodes 2, 6, 7
    settings = GenerationSettings(max_new_tokens=8)
    with torch.inference_mode():
        cache = kv.new_cache(target)
        ids = torch.tensor([prompt])
        hidden = kv.hidden_forward(target, ids, cache, position_ids=torch.arange(len(prompt))[None])[-1]
        root = int(target.get_output_embeddings()(hidden).argmax())
        new, accepted, hidden_last = medusa.medusa_step(target, heads, tree, root, hidden, cache, settings,
                                                        MedusaParams(), None)
        assert accepted == 3 and new == heads.seq[len(prompt) + 1: len(prompt) + 5]
        ref = kv.new_cache(target)
        seq = torch.tensor([prompt + [root] + new[:-1]])
        ref_hidden = kv.hidden_forward(target, seq, ref, position_ids=torch.arange(seq.shape[1])[None])
    assert kv.cache_length(cache) == len(prompt) + 1 + accepted
    for got, want in zip(cache.layers, ref.layers):
        torch.testing.assert_close(got.keys, want.keys, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(got.values, want.values, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(hidden_last, ref_hidden[-1], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("max_new", [1, 2, 3, 4, 5, 7])
def test_budget_is_respected_without_wasted_proposals(target, max_new):
    prompt = PROMPTS[0]
    settings = GenerationSettings(max_new_tokens=max_new)
    base = autoregressive.generate(target, prompt, settings)
    r = generate(target, OracleHeads(target, prompt, max_new), prompt, settings, MedusaParams(tree="chain3"))
    assert r.output_ids == base.output_ids and len(r.output_ids) == max_new
    assert r.tokens_accepted == r.tokens_drafted  # the tree is cut to the tokens still allowed


def test_eos_stops_generation_and_is_included(target):
    prompt = PROMPTS[0]
    full = autoregressive.generate(target, prompt, GenerationSettings(max_new_tokens=30)).output_ids
    eos = full[6]
    settings = GenerationSettings(max_new_tokens=30, eos_token_ids=[eos])
    base = autoregressive.generate(target, prompt, settings)
    for heads in (random_heads(), OracleHeads(target, prompt, 30)):
        r = generate(target, heads, prompt, settings, MedusaParams(tree="cpu8"))
        assert r.output_ids == base.output_ids and r.output_ids[-1] == eos and r.stopped_by == "eos"


def test_typical_acceptance_is_marked_lossy_and_reproducible(target):
    settings = GenerationSettings(max_new_tokens=30, temperature=0.8, seed=7)
    a = generate(target, random_heads(), PROMPTS[0], settings, MedusaParams(tree="cpu16"))
    b = generate(target, random_heads(), PROMPTS[0], settings, MedusaParams(tree="cpu16"))
    assert a.output_ids == b.output_ids and len(a.output_ids) == 30
    assert a.extra["lossy"] is True and a.extra["acceptance"] == "typical" and "lossy" in a.extra["note"]
    assert a.extra["posterior_threshold"] == 0.09 and a.extra["posterior_alpha"] == 0.3


def test_typical_acceptance_at_low_temperature_accepts_the_oracle_and_matches_greedy(target):
    prompt = PROMPTS[1]
    base = autoregressive.generate(target, prompt, GenerationSettings(max_new_tokens=25))
    settings = GenerationSettings(max_new_tokens=25, temperature=0.02, seed=3)
    r = generate(target, OracleHeads(target, prompt, 25), prompt, settings,
                 MedusaParams(tree="chain3", medusa_lookup=0))
    assert r.output_ids == base.output_ids
    assert r.acceptance_rate > 0.9


def test_shared_projection_is_one_matmul_over_all_heads(target):
    heads = random_heads(num_heads=3, shared=True).attach(target)
    hidden = torch.randn(5, 32)
    logits = heads(hidden)
    assert logits.shape == (3, 5, VOCAB)
    lm = target.get_output_embeddings()
    for h in range(3):
        torch.testing.assert_close(logits[h], lm(heads.blocks[h](hidden)))
    assert heads.topk(hidden[0], 2, 4).shape == (2, 4)
    assert not any(k.startswith("_base") or "lm_head" in k for k in heads.state_dict())


def test_resblock_starts_as_identity_plus_silu_bias():
    block = ResBlock(8)
    x = torch.randn(3, 8)
    assert torch.count_nonzero(block.linear.weight) == 0
    torch.testing.assert_close(block(x), x + torch.nn.functional.silu(block.linear.bias).expand(3, 8))


def test_params_defaults_and_unknown_keys():
    p = MedusaParams()
    assert (p.posterior_threshold, p.posterior_alpha, p.tree) == (0.09, 0.3, "auto")
    with pytest.raises(ValidationError):
        MedusaParams(posterior_treshold=0.1)
    with pytest.raises(ValidationError):
        MedusaParams(posterior_alpha=0.0)


def test_clear_errors_for_mismatched_heads_trees_and_prompts(tiny_qwen):
    settings = GenerationSettings(max_new_tokens=4)
    with pytest.raises(ParameterError, match="hidden size"):
        generate(tiny_qwen, random_heads(hidden=16), [1, 2], settings)
    with pytest.raises(VocabularyMismatchError):
        generate(tiny_qwen, random_heads(vocab=VOCAB + 8), [1, 2], settings)
    with pytest.raises(ParameterError, match="only 2 heads"):
        generate(tiny_qwen, random_heads(num_heads=2), [1, 2], settings, MedusaParams(tree="cpu8"))
    with pytest.raises(ParameterError, match="empty"):
        generate(tiny_qwen, random_heads(), [], settings)
    with pytest.raises(ParameterError, match="attach"):
        random_heads()(torch.randn(32))


def test_loaded_model_objects_are_accepted(tiny_qwen):
    class Loaded:
        model, tokenizer = tiny_qwen, None

    settings = GenerationSettings(max_new_tokens=10)
    assert generate(Loaded(), random_heads(), [3, 4], settings).output_ids == \
        autoregressive.generate(tiny_qwen, [3, 4], settings).output_ids


def test_auto_tree_is_cut_to_the_number_of_heads(tiny_qwen):
    r = generate(tiny_qwen, random_heads(num_heads=2), [1, 2, 3], GenerationSettings(max_new_tokens=12))
    assert r.extra["tree"] == "cpu8[depth<=2]" and r.extra["tree_depth"] == 2


def test_bfloat16_target_runs(tiny_qwen):
    model = make_tiny_model("qwen2", layers=2, seed=0, dtype=torch.bfloat16)
    heads = random_heads().to(torch.bfloat16)
    r = generate(model, heads, [5, 6, 7], GenerationSettings(max_new_tokens=12), MedusaParams(tree="cpu8"))
    assert len(r.output_ids) == 12


def test_upstream_backend_reports_why_it_cannot_run(monkeypatch):
    from importlib import metadata

    def missing(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", missing)
    ok, reason = medusa.upstream_backend_status()
    assert not ok and "not installed" in reason
    with pytest.raises(DependencyError, match="not installed"):
        medusa.generate_upstream("some/heads", [1, 2], GenerationSettings())

    monkeypatch.setattr(metadata, "version", lambda name: "1.0")
    monkeypatch.setattr(upstream_status.importlib.util, "find_spec", lambda name: object())
    monkeypatch.setattr(upstream_status.importlib, "import_module", lambda name: None)
    ok, reason = medusa.upstream_backend_status()
    assert not ok and "transformers 4.x" in reason

    def broken(name):
        raise ImportError("cannot import name 'is_flash_attn_available'")

    monkeypatch.setattr(upstream_status.importlib, "import_module", broken)
    ok, reason = medusa.upstream_backend_status()
    assert not ok and "is_flash_attn_available" in reason
