"""EAGLE on tiny Qwen2 and Llama models: greedy output identical to the baseline for any head and
tree shape, lossless sampling, the dynamic tree's selection, and the head's cache bookkeeping."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from scipy.stats import chisquare

from conftest import VOCAB, assert_greedy_equal, make_tiny_model
from tools.engine import autoregressive, eagle
from tools.engine.eagle import EagleHead, _Grown, config_for, select_tree, trimmed_size
from tools.engine.params import EagleParams
from tools.engine.types import GenerationSettings
from tools.errors import ParameterError


def random_head(model, draft_vocab=VOCAB, seed=3, identity=True) -> EagleHead:
    torch.manual_seed(seed)
    ids = torch.randperm(VOCAB)[:draft_vocab].sort().values
    head = EagleHead(config_for(model.config, draft_vocab, 48), ids)
    if identity:
        head.init_identity()
    return head.eval()


@pytest.fixture(params=["qwen2", "llama"], scope="module")
def target(request):
    return make_tiny_model(request.param, layers=2, seed=0)


PROMPTS = [[1, 5, 9, 2, 7], [3, 3, 3, 3, 8, 1, 4, 4, 4, 2, 6], [11]]


@pytest.mark.parametrize("depth,topk,nodes", [(1, 1, 1), (3, 2, 4), (5, 4, 10), (6, 3, 24), (2, 8, 16)])
def test_greedy_output_is_the_baseline(target, depth, topk, nodes):
    settings = GenerationSettings(max_new_tokens=40)
    head = random_head(target)
    for prompt in PROMPTS:
        base = autoregressive.generate(target, prompt, settings).output_ids
        got = eagle.generate(target, head, prompt, settings, EagleParams(depth=depth, topk=topk, tree_nodes=nodes))
        assert_greedy_equal(target, prompt, base, got.output_ids)
        assert got.target_forwards == got.steps + 1
        assert got.new_tokens == len(base)


def test_a_reduced_draft_vocabulary_and_odd_budgets(target):
    head = random_head(target, draft_vocab=17)
    for budget in (1, 2, 3, 7):
        settings = GenerationSettings(max_new_tokens=budget)
        base = autoregressive.generate(target, PROMPTS[0], settings).output_ids
        got = eagle.generate(target, head, PROMPTS[0], settings, EagleParams(depth=5, topk=3, tree_nodes=9))
        assert got.output_ids == base


def test_eos_stops_generation(target):
    settings = GenerationSettings(max_new_tokens=30)
    base = autoregressive.generate(target, PROMPTS[1], settings).output_ids
    eos = base[9]
    settings = GenerationSettings(max_new_tokens=30, eos_token_ids=[eos])
    got = eagle.generate(target, random_head(target), PROMPTS[1], settings)
    assert got.output_ids == base[: base.index(eos) + 1] and got.stopped_by == "eos"


def test_select_tree_keeps_the_most_probable_paths_closed_under_ancestors():
    grown = _Grown(tokens=[0, 10, 11, 12, 13, 14], parents=[-1, 0, 0, 1, 1, 3], depths=[0, 1, 1, 2, 2, 3],
                   scores=[0.0, -0.1, -2.0, -0.3, -1.0, -0.35])
    tree = select_tree(grown, 3)
    assert tree.tokens == [0, 10, 12, 14]
    assert tree.parents == [-1, 0, 1, 2]
    tree = select_tree(grown, 5)
    assert sorted(tree.tokens) == [0, 10, 11, 12, 13, 14]
    first = tree.children[0]
    assert [tree.tokens[c] for c in first] == [10, 11]  # most confident child first
    assert [tree.tokens[c] for c in tree.children[1]] == [12, 13]


GROWN = _Grown(tokens=[0, 10, 11, 12, 13, 14], parents=[-1, 0, 0, 1, 1, 3], depths=[0, 1, 1, 2, 2, 3],
               scores=[0.0, -0.1, -2.0, -0.3, -1.0, -0.35])


def test_a_trimmed_tree_verifies_the_nodes_that_pay_for_the_longer_pass():
    flat = [1.0] * 8  # a pass over 8 tokens costs what one does (a GPU): every node pays
    assert trimmed_size(GROWN, 5, flat, 0.0, 1.0) == 5
    steep = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]  # each token a pass of its own: only the near-certain first node pays
    assert trimmed_size(GROWN, 5, steep, 0.0, 1.0) == 1
    gentle = [1.0, 1.1, 1.2, 1.3, 1.4, 1.5]  # 0.1 a token: nodes likely 0.90, 0.74, 0.70, 0.37 pay, 0.14 does not
    assert trimmed_size(GROWN, 5, gentle, 0.0, 1.0) == 4
    assert trimmed_size(GROWN, 5, gentle, 0.0, 0.1) == 1  # a run whose trees got a tenth of what they predicted
    assert trimmed_size(GROWN, 2, flat, 0.0, 1.0) == 2  # never past tree_nodes


@pytest.mark.parametrize("costs", [[1.0, 1.02, 1.05, 1.1, 1.2, 1.4, 1.7, 2.0], [1.0, 1.9, 2.8, 3.7, 4.6]])
def test_greedy_output_is_the_baseline_with_a_trimmed_tree(target, costs):
    settings = GenerationSettings(max_new_tokens=40)
    head = random_head(target)
    trimmed = EagleParams(depth=5, topk=4, tree_nodes=10, pass_costs=costs)
    for prompt in PROMPTS:
        base = autoregressive.generate(target, prompt, settings).output_ids
        got = eagle.generate(target, head, prompt, settings, trimmed)
        assert_greedy_equal(target, prompt, base, got.output_ids)
        extra = got.extra
        assert extra["trim"] is True
        if extra["nodes_per_tree"] is not None:  # some tree steps taken: never more nodes or depths than asked
            assert 1 <= extra["nodes_per_tree"] <= 10 and 0 <= extra["expansions_per_tree"] <= 4
    untrimmed = eagle.generate(target, head, PROMPTS[1], settings, trimmed.model_copy(update={"trim": False})).extra
    assert untrimmed["trim"] is False


def test_a_head_with_no_confidence_drafts_no_deeper_than_it_pays():
    """A head whose guesses are spread over the whole vocabulary (path probabilities far below what a head pass
    costs) expands no depth past the first and verifies one node; one that is sure keeps going."""
    model = make_tiny_model("qwen2", layers=1, seed=2)
    head = random_head(model, identity=False)
    with torch.no_grad():
        for p in head.parameters():
            p.zero_()  # every draft logit 0: each guess 1/VOCAB
    costs = [1.0, 1.05, 1.1, 1.15, 1.2, 1.25, 1.3, 1.35, 1.4, 1.45, 1.5]
    settings = GenerationSettings(max_new_tokens=12)
    params = EagleParams(depth=5, topk=4, tree_nodes=10, pass_costs=costs)
    step = eagle.EagleStep(eagle.as_backend(model), head, settings, params)
    step.gate = None  # every step a tree step
    got = eagle.decode(step.backend, [1, 5, 9], settings, step, "eagle")
    assert got.extra["expansions_per_tree"] == 0 and got.extra["nodes_per_tree"] == 1
    assert got.output_ids == autoregressive.generate(model, [1, 5, 9], settings).output_ids


def test_the_head_cache_holds_one_row_per_accepted_position(target):
    settings = GenerationSettings(max_new_tokens=25)
    head = random_head(target)
    backend = eagle.as_backend(target)
    step = eagle.EagleStep(backend, head, settings, EagleParams(depth=4, topk=3, tree_nodes=8))
    result = eagle.decode(backend, PROMPTS[0], settings, step, "eagle")
    # every position up to the last root was read by the head once
    assert step.dk.shape[2] == step.read == len(step.tokens) - 1 - (len(step.tokens) - 1 - step.read)
    assert backend.cache_length(step.cache) == len(step.tokens) - 1
    assert result.new_tokens == 25


def test_a_backend_without_embeddings_is_a_clear_error(target):
    class NoEmbed(eagle.Backend):
        def __init__(self, inner):
            self.inner = inner
            self.device, self.dtype, self.vocab_size = inner.device, inner.dtype, inner.vocab_size

        def __getattribute__(self, name):
            if name in ("embed", "inner", "device", "dtype", "vocab_size", "__class__"):
                return object.__getattribute__(self, name)
            return getattr(object.__getattribute__(self, "inner"), name)

        new_cache = cache_length = crop = keep_positions = forward = hidden = lm_head = None

    backend = NoEmbed(eagle.as_backend(target))
    with pytest.raises(ParameterError, match="input embeddings"):
        eagle.generate(backend, random_head(target), PROMPTS[0], GenerationSettings(max_new_tokens=5))


def _second_token_test(prompt: list[int], params: EagleParams, total: int = 1200) -> list[dict]:
    """Sample 3 tokens ``total`` times with an identity head on a 12-token model and check the second one (the first
    drafted and verified: the budget's last token is plain) against the target's own distribution, the sum over
    the first token x1 of p(x1) p(x2 | x1). Returns each run's ``extra``."""
    model = make_tiny_model("qwen2", layers=1, seed=5, vocab=12)
    head = EagleHead(config_for(model.config, 12, 16), torch.arange(12))
    head.init_identity()
    temp = 1.5
    with torch.no_grad():
        p1 = torch.softmax(model(torch.tensor([prompt])).logits[0, -1] / temp, -1)
        exact = torch.zeros(12)
        for x1 in range(12):
            p2 = torch.softmax(model(torch.tensor([prompt + [x1]])).logits[0, -1] / temp, -1)
            exact += p1[x1] * p2
    counts, extras = Counter(), []
    for seed in range(total):
        got = eagle.generate(model, head, prompt, GenerationSettings(max_new_tokens=3, temperature=temp, seed=seed),
                             params)
        counts[got.output_ids[1]] += 1
        extras.append(got.extra)
    observed = [counts[t] for t in range(12)]
    exact = exact.double() / exact.double().sum()
    expected = [float(exact[t]) * total for t in range(12)]
    assert chisquare(observed, expected).pvalue > 1e-3
    return extras


def test_sampling_is_lossless():
    """The distribution of the second new token (the first one drafted and verified) matches the target's own."""
    extras = _second_token_test([1, 2, 3], EagleParams(depth=2, topk=3, tree_nodes=4))
    assert all(extra["nodes_per_tree"] is not None for extra in extras)


# ---------------------------------------------------------------------------------------- training
def _tiny_shards(model, tmp_path, n=8, length=40):
    from tools.medusa.features import cache_chunk_features, load_chunk_features

    g = torch.Generator().manual_seed(0)
    chunks = [torch.randint(0, VOCAB, (4,), generator=g).tolist() for _ in range(n)]
    chunks = [c + autoregressive.generate(model, c, GenerationSettings(max_new_tokens=length)).output_ids
              for c in chunks]
    return chunks, load_chunk_features(cache_chunk_features(model, chunks, tmp_path / "features"))


def test_training_time_test_masks():
    from tools.medusa.eagle_train import _pass_masks

    m1, m2, m3 = _pass_masks(5, 3)
    assert m1.tolist() == torch.ones(4, 4, dtype=torch.bool).tril().tolist()
    assert m2.shape == (3, 4 + 3) and m2[1].tolist() == [True, True, False, False, False, True, False]
    assert m3.shape == (2, 4 + 3 + 2) and m3[0].tolist() == [True, False, False, False, True, False, False, True, False]


def test_features_are_cached_per_chunk_and_resumed(tmp_path):
    from tools.medusa.features import cache_chunk_features

    model = make_tiny_model("qwen2", layers=1, seed=2)
    chunks = [[1, 2, 3, 4, 5], [6, 7, 8, 9]]
    paths = cache_chunk_features(model, chunks, tmp_path)
    stamp = paths[0].stat().st_mtime_ns
    paths[1].unlink()
    seen = []
    cache_chunk_features(model, chunks, tmp_path, lambda done, total: seen.append((done, total)))
    assert paths[0].stat().st_mtime_ns == stamp and paths[1].exists() and seen == [(1, 2), (2, 2)]


def test_train_save_load_resume_and_run(tmp_path):
    from tools.medusa.eagle_train import EagleTrainConfig, load_head, train_head

    model = make_tiny_model("qwen2", layers=2, seed=0)
    chunks, shards = _tiny_shards(model, tmp_path)
    embed, lm_head = model.get_input_embeddings().weight.detach(), model.get_output_embeddings().weight.detach()
    config = EagleTrainConfig(intermediate_size=32, draft_vocab=40, epochs=2, held_out_chunks=2, checkpoint_every=4,
                              learning_rate=3e-3)
    losses = []
    summary = train_head(shards, embed, lm_head, model.config, tmp_path / "head", config, "key", chunks, {"x": 1},
                         progress=lambda step, total, loss, hits: losses.append(loss))
    assert summary["steps"] == 12 and len(summary["held_out"]["top1_by_depth"]) == 3 and summary["x"] == 1
    head = load_head(tmp_path / "head")
    assert head.draft_ids.numel() == 40
    resumed = train_head(shards, embed, lm_head, model.config, tmp_path / "head", config, "key", chunks, {})
    assert resumed["steps"] == 12  # already done: nothing more to train
    with pytest.raises(ParameterError, match="other data"):
        train_head(shards, embed, lm_head, model.config, tmp_path / "head", config, "other", chunks, {})
    settings = GenerationSettings(max_new_tokens=30)
    base = autoregressive.generate(model, chunks[0][:4], settings).output_ids
    assert eagle.generate(model, head, chunks[0][:4], settings).output_ids == base


def test_a_checkpoint_from_before_autocast_resumes_as_float32_training(tmp_path):
    from tools.medusa.eagle_train import STATE_FILE, EagleTrainConfig, train_head

    model = make_tiny_model("qwen2", layers=2, seed=0)
    chunks, shards = _tiny_shards(model, tmp_path)
    embed, lm_head = model.get_input_embeddings().weight.detach(), model.get_output_embeddings().weight.detach()
    config = EagleTrainConfig(intermediate_size=32, draft_vocab=40, epochs=1, held_out_chunks=2, checkpoint_every=2,
                              learning_rate=3e-3, autocast=False)
    out = tmp_path / "head"
    train_head(shards, embed, lm_head, model.config, out, config, "key", chunks, {})
    state = torch.load(out / STATE_FILE, weights_only=True)
    del state["config"]["autocast"]  # written before the setting existed: those runs trained in float32
    torch.save(state, out / STATE_FILE)
    assert train_head(shards, embed, lm_head, model.config, out, config, "key", chunks, {})["steps"] == state["step"]
    with pytest.raises(ParameterError, match="other data or settings"):
        train_head(shards, embed, lm_head, model.config, out, config.model_copy(update={"autocast": True}), "key",
                   chunks, {})


def test_training_in_bfloat16_autocast_follows_float32(tmp_path):
    from tools.medusa.eagle_train import EagleTrainConfig, train_head

    model = make_tiny_model("qwen2", layers=2, seed=0)
    chunks, shards = _tiny_shards(model, tmp_path)
    embed, lm_head = model.get_input_embeddings().weight.detach(), model.get_output_embeddings().weight.detach()
    curves = {}
    for autocast in (True, False):
        config = EagleTrainConfig(intermediate_size=32, draft_vocab=40, epochs=1, held_out_chunks=2,
                                  learning_rate=3e-3, autocast=autocast)
        losses = []
        train_head(shards, embed, lm_head, model.config, tmp_path / str(autocast), config, "key", chunks, {},
                   progress=lambda step, total, loss, hits: losses.append(loss))
        curves[autocast] = losses
    assert len(curves[True]) == len(curves[False]) >= 4
    assert all(abs(a - b) <= 0.05 * b for a, b in zip(curves[True], curves[False]))


def test_loading_refuses_what_is_not_a_head(tmp_path):
    from tools.medusa.eagle_train import load_head

    with pytest.raises(ParameterError, match="holds no EAGLE head"):
        load_head(tmp_path)


# ---------------------------------------------------------------------------------------- product
def test_run_and_compare_eagle_from_the_command_line(tiny_model_dir, tmp_path, capsys):
    import json

    from agent.cli.main import main
    from tools.medusa.eagle_train import save_head

    model = make_tiny_model("qwen2", layers=2, seed=0)  # the weights saved in tiny_model_dir
    save_head(random_head(model), tmp_path / "head", {"note": "random, for the plumbing"})
    code = main(["run", "--method", "eagle", "--target", str(tiny_model_dir), "--dtype", "float32", "--raw",
                 "--eagle-heads", str(tmp_path / "head"), "--prompt", "def f(x): return x", "--max-new-tokens", "12",
                 "--json"])
    assert code == 0
    record = json.loads(capsys.readouterr().out)
    assert record["method"] == "eagle" and record["matches_baseline"] is True
    assert record["params"]["eagle_heads"] == str(tmp_path / "head") and record["sizing"]
    code = main(["run", "--method", "eagle", "--target", str(tiny_model_dir), "--dtype", "float32", "--raw",
                 "--prompt", "def f(x): return x", "--max-new-tokens", "4", "--json"])
    captured = capsys.readouterr()
    assert code != 0 and "no EAGLE head is shipped" in captured.err + captured.out and "Traceback" not in captured.err


def test_on_a_cpu_in_float32_the_head_runs_on_packed_layers_of_its_own_copy(target):
    from tools.engine import cpu_gemm

    if not cpu_gemm.wanted("cpu", torch.float32):
        pytest.skip("this torch has no oneDNN")
    head = random_head(target)
    step = eagle.EagleStep(eagle.as_backend(target), head, GenerationSettings(max_new_tokens=5), EagleParams())
    assert cpu_gemm.kernels(step.head) is not None and isinstance(step.rows, cpu_gemm.OneDNNLinear)
    assert cpu_gemm.kernels(head) is None and "fc.weight" in head.state_dict()  # the caller's head: untouched
    assert cpu_gemm.weights_numel(step.head) == sum(p.numel() for p in head.parameters())


def test_beside_a_packed_bfloat16_target_the_head_drafts_in_bfloat16_and_the_output_is_the_baseline(monkeypatch):
    from tools.bench.protocol import diagnose_divergence
    from tools.engine import cpu_gemm

    if not cpu_gemm.wanted("cpu", torch.bfloat16):
        pytest.skip("this CPU has no bfloat16 instructions (AVX512-BF16 or AMX)")
    model = make_tiny_model("qwen2", layers=2, seed=0).to(torch.bfloat16)
    cpu_gemm.use_onednn(model)
    head = random_head(model)
    step = eagle.EagleStep(eagle.as_backend(model), head, GenerationSettings(max_new_tokens=5), EagleParams())
    assert step.dtype == torch.bfloat16 and next(step.head.parameters()).dtype == torch.bfloat16
    assert cpu_gemm.kernels(step.head) == cpu_gemm.PACKED and next(head.parameters()).dtype == torch.float32
    settings, params = GenerationSettings(max_new_tokens=40), EagleParams(depth=4, topk=3, tree_nodes=8)
    for prompt in PROMPTS:  # equal to the baseline, or leaving it only at a bfloat16 near-tie the product diagnoses
        base = autoregressive.generate(model, prompt, settings).output_ids
        got = eagle.generate(model, head, prompt, settings, params).output_ids
        assert (diagnose_divergence(model, prompt, base, got, "bfloat16") or {"kind": "near_tie"})["kind"] == "near_tie"
    monkeypatch.setenv(eagle.HEAD_ENV, "float32")  # the opt-out
    step = eagle.EagleStep(eagle.as_backend(model), head, GenerationSettings(max_new_tokens=5), EagleParams())
    assert step.dtype == torch.float32 and next(step.head.parameters()).dtype == torch.float32


def test_the_head_s_rows_of_the_lm_head_are_picked_once_per_vocabulary(target):
    backend = eagle.as_backend(target)
    ids = torch.tensor([3, 7, 11])
    first = backend.head_rows(ids)
    assert backend.head_rows(ids.clone()) is first  # the same vocabulary: kept
    assert torch.equal(backend.head_rows(torch.tensor([3, 8])), target.get_output_embeddings().weight[[3, 8]])


# ---------------------------------------------------------------------------------------- the lookup branch
def test_the_lookup_branch_gives_tokens_and_greedy_output_stays_the_baseline(target):
    """A head that drafts nothing useful (every logit 0) beside prompt lookup's branch: the branch's tokens are kept
    where the output repeats earlier text, and the output is the baseline's with or without the branch."""
    head = random_head(target, identity=False)
    with torch.no_grad():
        for p in head.parameters():
            p.zero_()
    settings, looked_up = GenerationSettings(max_new_tokens=40), 0
    for prompt in PROMPTS + [[4, 7, 4, 7, 4, 7, 4]]:
        base = autoregressive.generate(target, prompt, settings).output_ids
        for lookup in (0, 3, 10):
            got = eagle.generate(target, head, prompt, settings,
                                 EagleParams(depth=2, topk=2, tree_nodes=3, eagle_lookup=lookup))
            assert_greedy_equal(target, prompt, base, got.output_ids)
            assert got.extra["eagle_lookup"] == lookup and got.extra["nodes_per_tree"] <= 3
            if lookup == 0:
                assert got.extra["lookup_steps"] == 0 and got.extra["looked_up"] == 0
            looked_up += got.extra["looked_up"]
    assert looked_up > 0


def test_sampling_is_lossless_with_the_lookup_branch():
    """As test_sampling_is_lossless, with a prompt holding every token, so prompt lookup's branch joins every tree."""
    extras = _second_token_test([4, 7, 1, 9, 3, 0, 11, 2, 5, 8, 6, 10, 4],
                                EagleParams(depth=1, topk=1, tree_nodes=1, eagle_lookup=4))
    assert all(extra["lookup_steps"] == 1 for extra in extras)


# ---------------------------------------------------------------------------------------- fused inner layers
def fused_head(model, layers=(0, 1), seed=5) -> EagleHead:
    torch.manual_seed(seed)
    head = EagleHead(config_for(model.config, VOCAB, 48, layers), torch.arange(VOCAB))
    head.init_identity()
    with torch.no_grad():  # not the identity start: the inner layers change every draft
        head.fuse.weight.normal_(0, 0.2)
    return head.eval()


def test_a_head_fusing_inner_layers_reads_them_and_greedy_output_stays_the_baseline(target):
    head = fused_head(target)
    plain = EagleHead(config_for(target.config, VOCAB, 48), torch.arange(VOCAB))
    plain.load_state_dict(head.state_dict(), strict=False)
    settings = GenerationSettings(max_new_tokens=30)
    drafts = []
    for h in (head, plain.eval()):
        step = eagle.EagleStep(eagle.as_backend(target), h, settings, EagleParams(depth=4, topk=3, tree_nodes=8))
        got = eagle.decode(step.backend, PROMPTS[1], settings, step, "eagle")
        assert got.output_ids == autoregressive.generate(target, PROMPTS[1], settings).output_ids
        drafts.append(step.dk[:, :, : len(PROMPTS[1])].clone())  # the head's cache rows of the prompt
    assert step.inner is None and not torch.allclose(drafts[0], drafts[1])  # the inner layers changed them
    for params in (EagleParams(depth=5, topk=4, tree_nodes=10, pass_costs=[1.0] * 11), EagleParams(depth=2, topk=1)):
        for prompt in PROMPTS:
            base = autoregressive.generate(target, prompt, settings).output_ids
            assert eagle.generate(target, head, prompt, settings, params).output_ids == base


def test_a_head_starts_as_the_one_it_continues_and_fusing_starts_as_the_feature_alone(tmp_path):
    from tools.medusa.eagle_train import EagleTrainConfig, load_head, top1_by_depth, train_head

    model = make_tiny_model("qwen2", layers=2, seed=0)
    from tools.medusa.features import cache_chunk_features, load_chunk_features

    chunks, _ = _tiny_shards(model, tmp_path)
    shards = load_chunk_features(cache_chunk_features(model, chunks, tmp_path / "fused", layers=(0, 1)))
    assert shards[0]["layer1"].shape == shards[0]["hidden"].shape
    embed, lm_head = model.get_input_embeddings().weight.detach(), model.get_output_embeddings().weight.detach()
    config = EagleTrainConfig(intermediate_size=32, draft_vocab=40, epochs=1, held_out_chunks=2, learning_rate=3e-3)
    train_head(shards, embed, lm_head, model.config, tmp_path / "a", config, "key", chunks, {})
    first = load_head(tmp_path / "a")
    fused = EagleTrainConfig(**{**config.model_dump(), "fuse_layers": [0, 1], "learning_rate": 1e-12})
    train_head(shards, embed, lm_head, model.config, tmp_path / "b", fused, "key", chunks, {}, start=first)
    second = load_head(tmp_path / "b")
    assert second.config.fuse_layers == (0, 1) and torch.equal(second.draft_ids, first.draft_ids)
    held = shards[-2:]  # no step to speak of: the fused head guesses what the head it continues did
    assert top1_by_depth(second, held, embed, lm_head) == top1_by_depth(first, held, embed, lm_head)
    wider = EagleTrainConfig(**{**config.model_dump(), "intermediate_size": 64})
    with pytest.raises(ParameterError, match="another shape"):
        train_head(shards, embed, lm_head, model.config, tmp_path / "c", wider, "key", chunks, {}, start=first)
    settings = GenerationSettings(max_new_tokens=20)
    assert eagle.generate(model, second, chunks[1][:4], settings).output_ids == \
        autoregressive.generate(model, chunks[1][:4], settings).output_ids


def test_a_fused_head_s_cost_counts_the_fusion_once_a_step(target):
    backend = eagle.as_backend(target)
    fused, plain = fused_head(target), random_head(target)
    fusion = sum(p.numel() for n, p in fused.named_parameters() if n.startswith("fuse"))
    own = sum(p.numel() for p in target.parameters())
    for depth in (1, 4):
        assert eagle.head_overhead(fused, backend, depth) == pytest.approx(
            eagle.head_overhead(plain, backend, depth) + fusion / own)


def test_the_packed_copy_is_made_once_and_again_when_the_head_changes(target):
    from tools.engine import cpu_gemm

    if not cpu_gemm.wanted("cpu", torch.float32):
        pytest.skip("this torch has no oneDNN")
    head, backend, settings = random_head(target), eagle.as_backend(target), GenerationSettings(max_new_tokens=5)
    first = eagle.EagleStep(backend, head, settings, EagleParams())
    again = eagle.EagleStep(backend, head, settings, EagleParams())
    assert again.head is first.head and again.rows is first.rows
    with torch.no_grad():
        head.fc.weight.add_(1.0)  # trained on: the packed copy is stale
    changed = eagle.EagleStep(backend, head, settings, EagleParams())
    assert changed.head is not first.head
    assert torch.allclose(changed.head.fc.weight, head.fc.weight)
    base = autoregressive.generate(target, PROMPTS[0], GenerationSettings(max_new_tokens=20)).output_ids
    got = eagle.generate(target, head, PROMPTS[0], GenerationSettings(max_new_tokens=20), EagleParams())
    assert_greedy_equal(target, PROMPTS[0], base, got.output_ids)
