"""The slower group: every method on the real offline models (run `specpilot models fetch` first).

    make test-slow      (or: pytest -m slow)

Greedy output of every method must equal the target's own greedy output in float32.
"""

from __future__ import annotations

import pytest
import torch

from tools import models
from tools.engine import autoregressive, lookahead, prompt_lookup, speculative
from tools.engine.types import GenerationSettings

pytestmark = pytest.mark.slow

PROMPTS = [
    "Write a Python function that returns the n-th Fibonacci number iteratively.",
    "Explain in two sentences what a hash map is.",
]


def _have(name: str) -> bool:
    return any(r.name == name and (r.converted or r.gguf) for r in models.list_models())


@pytest.fixture(scope="module")
def pair():
    if not (_have(models.DEFAULT_TARGET) and _have(models.DEFAULT_DRAFT)):
        pytest.skip("the default models are not fetched: run `specpilot models fetch`")
    torch.set_num_threads(max(1, torch.get_num_threads()))
    return models.load(models.DEFAULT_TARGET, dtype="float32"), models.load(models.DEFAULT_DRAFT, dtype="float32")


@pytest.fixture(scope="module")
def cases(pair):
    from tools.bench.run import eos_ids_for, prompt_ids_for

    target, _ = pair
    settings = GenerationSettings(max_new_tokens=24, eos_token_ids=eos_ids_for(target))
    out = []
    for prompt in PROMPTS:
        ids = prompt_ids_for(target.tokenizer, prompt, True)
        out.append((ids, autoregressive.generate(target.model, ids, settings).output_ids))
    return settings, out


@pytest.mark.parametrize("options", [dict(k=4), dict(k=6, adaptive_k=True), dict(k=4, draft_quant="int8"),
                                     dict(k=5, draft_vocab=32768, draft_confidence=0.3)])
def test_draft_model_greedy_equals_the_target_in_float32(pair, cases, options):
    target, draft = pair
    settings, rows = cases
    for ids, expected in rows:
        result = speculative.generate(target, draft, ids, settings, **options)
        assert result.output_ids == expected
        assert result.tokens_accepted > 0


def test_the_draft_on_llamacpp_greedy_equals_the_target_in_float32(pair, cases):
    pytest.importorskip("llama_cpp")
    from tools.bench.context import load_cached

    target, _ = pair
    gguf = load_cached(models.DEFAULT_DRAFT, "gguf", None, None, "llamacpp", role="gguf_draft")
    settings, rows = cases
    for ids, expected in rows:
        result = speculative.generate(target, gguf, ids, settings, k=4, draft_quant="gguf")
        assert result.output_ids == expected
        assert result.tokens_accepted > 0 and result.extra["draft_quant"] == "gguf"


def test_lookahead_and_prompt_lookup_greedy_equal_the_target_in_float32(pair, cases):
    target, _ = pair
    settings, rows = cases
    # the benchmark's CPU-sized lookahead (W=5, N=4, G=2, one prompt-lookup draft) and pure lookahead
    shapes = [dict(window=5, ngram=4, guess=2, prompt_lookup=1), dict(window=3, ngram=3, guess=3, prompt_lookup=0)]
    for ids, expected in rows:
        for shape in shapes:
            la = lookahead.generate(target.model, ids, settings, lookahead.LookaheadParams(**shape))
            assert la.output_ids == expected, shape
        for options in (dict(), dict(num_candidates=1)):
            pl = prompt_lookup.generate(target.model, ids, settings, prompt_lookup.PromptLookupParams(**options))
            assert pl.output_ids == expected, options


def test_medusa_greedy_equals_the_target_in_float32(pair, cases):
    from tools.engine import medusa
    from tools.medusa.checkpoint import default_medusa_heads_path, load_medusa_heads

    target, _ = pair
    if default_medusa_heads_path(target.ref) is None:
        pytest.skip("no shipped Medusa heads for the default target")
    heads = load_medusa_heads(target, None)
    settings, rows = cases
    for ids, expected in rows:
        result = medusa.generate(target.model, heads, ids, settings, medusa.MedusaParams())
        assert result.output_ids == expected


@pytest.mark.parametrize("shape", [dict(depth=5, topk=4, tree_nodes=10), dict(depth=6, topk=6, tree_nodes=24)])
def test_eagle_greedy_equals_the_target_in_float32(pair, cases, shape):
    from tools.engine import eagle
    from tools.engine.params import EagleParams
    from tools.medusa.eagle_train import default_head_path, load_eagle_for

    target, _ = pair
    if default_head_path(target.ref) is None:
        pytest.skip("no shipped EAGLE head for the default target")
    head = load_eagle_for(target, None)
    settings, rows = cases
    for ids, expected in rows:
        result = eagle.generate(target, head, ids, settings, EagleParams(pass_costs=None, **shape))
        assert result.output_ids == expected, shape
        assert result.tokens_accepted > 0


COPYING = ("Here is a function:\n```python\ndef area(width, height):\n    return width * height\n```\n"
           "Rewrite it with type hints and a docstring.")


@pytest.mark.parametrize("method", ["medusa", "eagle", "lookahead"])
def test_the_lookup_branch_keeps_greedy_output_the_target_s_in_float32(pair, method):
    """An answer that copies its prompt: prompt lookup's branch joins Medusa's and EAGLE's trees (and lookahead's
    step, priced: a pass costing one token's whatever it holds verifies the branch whole) and the output is still the
    target's."""
    from tools.bench.run import eos_ids_for, prompt_ids_for
    from tools.engine import eagle, lookahead, medusa
    from tools.engine.params import EagleParams, LookaheadParams
    from tools.medusa.checkpoint import load_medusa_heads
    from tools.medusa.eagle_train import load_eagle_for

    target, _ = pair
    settings = GenerationSettings(max_new_tokens=48, eos_token_ids=eos_ids_for(target))
    ids = prompt_ids_for(target.tokenizer, COPYING, True)
    expected = autoregressive.generate(target.model, ids, settings).output_ids
    if method == "medusa":
        result = medusa.generate(target.model, load_medusa_heads(target, None), ids, settings, medusa.MedusaParams())
    elif method == "lookahead":
        params = LookaheadParams(window=3, ngram=3, guess=1, prompt_lookup=1, pass_costs=[1.0] * 40)
        result = lookahead.generate(target.model, ids, settings, params)
    else:
        result = eagle.generate(target, load_eagle_for(target, None), ids, settings, EagleParams(pass_costs=None))
    assert result.output_ids == expected
    assert result.extra["lookup_steps"] > 0 and result.extra["looked_up"] > 0
