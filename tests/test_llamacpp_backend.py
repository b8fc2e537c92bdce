"""The llama.cpp backend (tools.engine.llamacpp) on tiny GGUF files written here with the ``gguf``
package (a 2-layer Llama, byte-level BPE vocabulary, random float32 weights; no network), and in
the slow group on the real default pair's GGUF files.

Greedy output of the baseline on the backend must equal llama.cpp's own greedy decoding (the
high-level ``llama_cpp.Llama``, temperature 0); prompt lookup, lookahead and draft-model decoding on
the backend must equal the baseline. Skipped when llama-cpp-python is not installed
(``pip install -e ".[llamacpp]"``).
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("llama_cpp")
pytest.importorskip("gguf")

from gguf_tiny import EMBD, EOS, VOCAB, write_tiny_llama  # noqa: E402
from tools.engine import autoregressive, lookahead, methods, prompt_lookup  # noqa: E402
from tools.engine.llamacpp import (LlamaReference, as_loaded, diagnose_divergence, draft_generate,  # noqa: E402
                                   load_gguf, tree_of)
from tools.engine.params import DraftParams, LookaheadParams, PromptLookupParams  # noqa: E402
from tools.engine.types import GenerationSettings  # noqa: E402
from tools.errors import ParameterError  # noqa: E402


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gguf")
    weights = write_tiny_llama(folder / "target.gguf", seed=0)
    write_tiny_llama(folder / "draft.gguf", seed=1, noise_of=weights, noise=0.3)
    return folder / "target.gguf", folder / "draft.gguf"


@pytest.fixture(scope="module")
def target(files):
    return load_gguf(files[0], n_ctx=512, n_threads=1)


@pytest.fixture(scope="module")
def draft(files):
    return load_gguf(files[1], n_ctx=512, n_threads=1)


# a prompt whose 3-gram (5, 6, 7) recurs with different continuations: prompt lookup verifies a tree
PROMPTS = [[5, 6, 7, 40, 41, 42, 43, 5, 6, 7, 50, 51, 52, 9, 10, 5, 6, 7],
           list(range(70, 90)) + list(range(70, 80))]
SETTINGS = GenerationSettings(max_new_tokens=40)


@pytest.fixture(scope="module")
def baselines(target):
    return [autoregressive.generate(target, p, SETTINGS).output_ids for p in PROMPTS]


def test_baseline_equals_llamacpp_own_greedy(files, target, baselines):
    reference = LlamaReference(files[0], n_ctx=512, n_threads=1)
    for prompt, ours in zip(PROMPTS, baselines):
        theirs, _ = reference.greedy(prompt, SETTINGS.max_new_tokens)
        assert ours == theirs


@pytest.mark.parametrize("params", [PromptLookupParams(), PromptLookupParams(num_candidates=1),
                                    PromptLookupParams(max_ngram_size=2, num_candidate_tokens=4, num_candidates=3)])
def test_prompt_lookup_equals_baseline(target, baselines, params):
    trees = 0
    for prompt, expected in zip(PROMPTS, baselines):
        result = prompt_lookup.generate(target, prompt, SETTINGS, params)
        assert result.output_ids == expected
        trees += result.extra["multi_draft_steps"]
    if params.num_candidates > 1:
        assert trees > 0  # the token-tree path (sequence ids) was exercised


@pytest.mark.parametrize("params", [LookaheadParams(window=3, ngram=3, guess=2), LookaheadParams(window=2, ngram=4),
                                    LookaheadParams(window=2, ngram=3, guess=1, pass_costs=[1.0, 2.0, 3.0, 4.0])])
def test_lookahead_equals_baseline(target, baselines, params):
    declined = 0
    for prompt, expected in zip(PROMPTS, baselines):
        result = lookahead.generate(target, prompt, SETTINGS, params)
        assert result.output_ids == expected
        declined += result.extra["declined_steps"]
    assert (declined > 0) == (params.pass_costs is not None)  # the gate's plain steps ran on llama.cpp's cache


@pytest.mark.parametrize("params", [DraftParams(k=4, adaptive_k=False, draft_confidence=None),
                                    DraftParams(), DraftParams(k=2, k_max=6, draft_confidence=0.2),
                                    DraftParams(k=4, pass_costs=[1.0, 1.05, 1.1, 1.15, 1.2], draft_cost=0.05)])
def test_draft_model_equals_baseline(target, draft, baselines, params):
    accepted = 0
    for prompt, expected in zip(PROMPTS, baselines):
        result = draft_generate(target, draft, prompt, SETTINGS, params)
        assert result.output_ids == expected
        accepted += result.tokens_accepted
    assert accepted > 0


def test_draft_steps_a_cost_gate_declines_are_plain_steps(target, draft, baselines):
    params = DraftParams(k=4, pass_costs=[1.0, 40.0], draft_cost=1.0)  # no draft can pay for its verification
    for prompt, expected in zip(PROMPTS, baselines):
        result = draft_generate(target, draft, prompt, SETTINGS, params)
        assert result.output_ids == expected
        assert result.tokens_drafted == 0 and result.extra["declined_steps"] == result.steps - 1


def test_methods_run_takes_the_backend(target, baselines):
    ctx = methods.MethodContext(target=as_loaded(target))
    for method in ("baseline", "ngram", "lookahead"):
        params = methods.parse_params(method, {})
        assert methods.run(method, ctx, PROMPTS[0], SETTINGS, params).output_ids == baselines[0]


def _chain_logits(backend, *chunks: list[int]) -> torch.Tensor:
    """Logits of the last chunk, the chunks run as causal forwards one after another on a fresh cache
    (batch boundaries matter in the last bits: llama.cpp rounds K/V to float16 as it stores them)."""
    cache, length = backend.new_cache(), 0
    for chunk in chunks:
        logits = backend.forward(torch.tensor([chunk]), cache, torch.arange(length, length + len(chunk))[None])
        length += len(chunk)
    return logits


def test_tree_forward_equals_each_path_and_keep_picks_one(target):
    prefix = [3, 4, 5, 6]
    # tree under root 9: 9 -> 11 -> 12, 9 -> 13 -> 14, 9 -> 11 -> 15
    tokens, parents = [9, 11, 12, 13, 14, 15], [-1, 0, 1, 0, 3, 1]
    depth = [0, 1, 2, 1, 2, 2]
    visible = torch.eye(6, dtype=torch.bool)
    for i in range(1, 6):
        visible[i] |= visible[parents[i]]
    cache = target.new_cache()
    target.forward(torch.tensor([prefix]), cache, torch.arange(4)[None], rows=1)
    logits = target.forward(torch.tensor([tokens]), cache, (torch.tensor(depth) + 4)[None], visible)
    for path in ([0, 1, 2], [0, 3, 4], [0, 1, 5]):
        ref = _chain_logits(target, prefix, [tokens[i] for i in path])
        assert torch.allclose(logits[path], ref, atol=1e-5)
    # rows in any order
    cache = target.new_cache()
    target.forward(torch.tensor([prefix]), cache, torch.arange(4)[None], rows=1)
    picked = target.forward(torch.tensor([tokens]), cache, (torch.tensor(depth) + 4)[None], visible,
                            rows=torch.tensor([4, 0, 2]))
    assert torch.allclose(picked, logits[[4, 0, 2]], atol=1e-5)
    target.keep_positions(cache, 4, torch.tensor([0, 3, 4]))  # path 9 -> 13 -> 14, not sequence 0's
    assert target.cache_length(cache) == 7
    nxt = target.forward(torch.tensor([[20]]), cache, torch.tensor([[7]]))
    ref = _chain_logits(target, prefix, [9, 13, 14], [20])
    assert torch.allclose(nxt, ref, atol=1e-5)


def test_crop_then_continue_equals_a_fresh_run(target):
    cache = target.new_cache()
    target.forward(torch.tensor([list(range(30, 40))]), cache, torch.arange(10)[None])
    target.crop(cache, 6)
    assert target.cache_length(cache) == 6
    got = target.forward(torch.tensor([[50, 51]]), cache, torch.tensor([[6, 7]]), rows=1)
    target.keep_positions(cache, 2, torch.arange(3))  # a leading run of a chain is a crop
    assert target.cache_length(cache) == 5
    with pytest.raises(ParameterError, match="leading run"):
        target.keep_positions(cache, 1, torch.tensor([0, 2]))
    ref = _chain_logits(target, list(range(30, 36)), [50, 51])[-1:]
    assert torch.allclose(got, ref, atol=1e-4)  # the kept 6 were computed in a batch of 10: last bits differ


def test_what_the_backend_refuses(target):
    cache = target.new_cache()
    with pytest.raises(ParameterError, match="hidden states"):
        target.hidden(torch.tensor([[1]]), cache, torch.tensor([[0]]))
    with pytest.raises(ParameterError, match="hidden states"):
        target.lm_head(torch.zeros(1, EMBD))
    assert target.head_rows(torch.tensor([1, 2])) is None
    not_a_tree = torch.tensor([[1, 0, 0], [1, 1, 0], [0, 1, 1]], dtype=torch.bool)  # 2 sees 1 but not 0
    with pytest.raises(ParameterError, match="token tree"):
        target.forward(torch.tensor([[1, 2, 3]]), cache, torch.tensor([[0, 1, 2]]), not_a_tree)
    with pytest.raises(ParameterError, match="token tree"):  # right pattern, wrong positions
        tree_of(torch.ones(2, 2, dtype=torch.bool).tril(), [0, 2], 0, 8)
    with pytest.raises(ParameterError, match="llama_decode failed with code 1"):  # past the 512-token context
        target.forward(torch.zeros(1, 600, dtype=torch.long), target.new_cache(), torch.arange(600)[None], rows=1)
    target.new_cache()
    with pytest.raises(ParameterError, match="current cache"):
        target.forward(torch.tensor([[1]]), cache, torch.tensor([[0]]))


def test_divergence_diagnosis(target, baselines):
    prompt, base = PROMPTS[0], baselines[0]
    assert diagnose_divergence(target, prompt, base, list(base)) is None
    assert diagnose_divergence(target, prompt, base, base[:10])["kind"] == "length"
    wrong = base[:5] + [(base[5] + 1) % len(VOCAB)] + base[6:]
    found = diagnose_divergence(target, prompt, base, wrong)
    assert found["position"] == 5 and found["kind"] == "mismatch" and found["margin"] > 0


def test_the_recording_backend_sees_the_rows_a_method_computed(target, baselines):
    """A lookahead run (token-tree passes) replayed through RecordingBackend: the rows its own passes
    computed for prompt + the first 5 tokens, whose top-1 is the token it emitted there."""
    from tools.engine.replay import RecordingBackend

    prompt, base = PROMPTS[0], baselines[0]
    recorder = RecordingBackend(target, prompt + base[:5])
    params = LookaheadParams(window=3, ngram=3, guess=2)
    again = lookahead.generate(recorder, prompt, SETTINGS.model_copy(update={"max_new_tokens": 6}), params)
    assert again.output_ids == base[:6]
    assert recorder.seen and recorder.seen[-1].top1 == base[5]
    assert recorder.tokens[: len(prompt) + 5] == prompt + base[:5]


def test_divergence_replays_the_method_when_recomputing_does_not_explain_it(target, baselines):
    """A forged output whose token no pass puts on top: the replay shows the method's own pass, and the
    verdict stays a mismatch; a replay that does not reproduce the output says so."""
    prompt, base = PROMPTS[0], baselines[0]
    wrong = base[:5] + [(base[5] + 1) % len(VOCAB)] + base[6:]

    def rerun(backend):
        return wrong  # stands in for a method whose pass chose wrong[5] without computing it

    forged = diagnose_divergence(target, prompt, base, wrong, rerun=rerun)
    assert forged["kind"] == "mismatch" and forged["method_pass"]["note"].startswith("no pass")

    def real(backend):
        return prompt_lookup.generate(backend, prompt, SETTINGS).output_ids

    found = diagnose_divergence(target, prompt, base, wrong, rerun=real)
    own = found["method_pass"]
    assert found["kind"] == "mismatch" and not own["replayed"] and own["top1"] == base[5]
    assert own["note"] == "running the method again left its first output at token 5"

def test_gguf_tokenizer(target):
    tok = target.tokenizer
    ids = tok("hello world")["input_ids"]
    assert tok.decode(ids) == "hello world"
    assert tok.eos_token_id == EOS and EOS in tok.stop_ids()
    assert len(tok) == len(VOCAB) == target.vocab_size


# ---------------------------------------------------------------------------------------- real models
@pytest.mark.slow
def test_real_default_pair_on_llamacpp():
    """Baseline = llama.cpp's own greedy; prompt lookup, lookahead and draft = the baseline, or leave it only
    at a shown near-tie (llama.cpp's batched kernels, or the method's own pass replayed through a recording
    backend, put the method's token on top at that position)."""
    from transformers import AutoTokenizer

    from tools import models
    from tools.bench.context import prompt_ids_for
    from tools.engine.llamacpp import diagnose_divergence

    paths = [models.gguf_path(models.builtin(n)) for n in (models.DEFAULT_TARGET, models.DEFAULT_DRAFT)]
    if not all(p.exists() for p in paths):
        pytest.skip("the default models are not fetched: run `specpilot models fetch`")
    hf = models.converted_path(models.builtin(models.DEFAULT_TARGET))
    tok = (AutoTokenizer.from_pretrained(str(hf)) if (hf / "tokenizer.json").exists()
           else AutoTokenizer.from_pretrained(str(paths[0].parent), gguf_file=paths[0].name))
    target, draft = load_gguf(paths[0], n_ctx=1024, n_threads=2), load_gguf(paths[1], n_ctx=1024, n_threads=2)
    reference = LlamaReference(paths[0], n_ctx=1024, n_threads=2)
    settings = GenerationSettings(max_new_tokens=32, eos_token_ids=[tok.eos_token_id])
    for prompt in ("Write a Python function that returns the n-th Fibonacci number iteratively.",
                   "Explain in two sentences what a hash map is."):
        ids = prompt_ids_for(tok, prompt, True)
        base = autoregressive.generate(target, ids, settings).output_ids
        assert base == reference.greedy(ids, 32, settings.eos_token_ids)[0]
        small = LookaheadParams(window=3, ngram=3, guess=2)
        for method in (lambda b: prompt_lookup.generate(b, ids, settings).output_ids,
                       lambda b: lookahead.generate(b, ids, settings, small).output_ids,
                       lambda b: draft_generate(b, draft, ids, settings, DraftParams(k=4)).output_ids):
            diagnosis = diagnose_divergence(target, ids, base, method(target), rerun=method)
            assert diagnosis is None or diagnosis["kind"] == "near_tie", diagnosis


def test_hidden_states_are_what_the_lm_head_reads_and_leave_the_cache_as_a_forward(tmp_path):
    weights = write_tiny_llama(tmp_path / "own.gguf", seed=2)
    backend = load_gguf(tmp_path / "own.gguf", n_ctx=256, n_threads=1)
    tokens = [5, 6, 7, 40, 41, 42]
    plain = _chain_logits(backend, tokens)[-1]
    then = _chain_logits(backend, tokens, [43])[-1]
    cache = backend.new_cache()  # (a backend holds one cache: the references above come first)
    last, hidden = backend.forward_hidden(torch.tensor([tokens]), cache, torch.arange(6)[None])
    assert hidden.shape == (6, EMBD) and backend.cache_length(cache) == 6
    head = torch.from_numpy(weights["output.weight"]).float()
    torch.testing.assert_close(torch.from_numpy(hidden[-1]) @ head.T, last, atol=2e-3, rtol=1e-4)
    torch.testing.assert_close(last, plain, atol=1e-4, rtol=1e-4)
    after = backend.forward(torch.tensor([[43]]), cache, torch.tensor([[6]]))[-1]  # embeddings mode is off again
    torch.testing.assert_close(after, then, atol=1e-4, rtol=1e-4)
    with pytest.raises(ParameterError, match="batch"):
        backend.forward_hidden(torch.tensor([list(range(300))]), backend.new_cache(), torch.arange(300)[None])
