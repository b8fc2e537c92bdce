"""The draft on llama.cpp beside a transformers target (draft_quant "gguf"): the draft's GGUF file run with its
own quantized weights proposes, the transformers target verifies, so the output is the target's own.

On tiny GGUF files written here (tests/gguf_tiny.py; the target loaded by transformers from its file, the
draft by llama.cpp from a perturbed copy): greedy output equals the target's baseline; the bench context
loads the llama.cpp draft for a CPU run and the sizing drafts with it where its stored token cost is below
the int8 copy's, the int8 copy where not; a given gguf without such a draft is a clear error. Skipped when
llama-cpp-python is not installed.
"""

from __future__ import annotations

import json
import os

import pytest
import torch

pytest.importorskip("llama_cpp")
pytest.importorskip("gguf")

from agent.cli.main import main  # noqa: E402
from gguf_tiny import write_pair  # noqa: E402
from memory import Store  # noqa: E402
from tools.bench import context, machine_cost  # noqa: E402
from tools.bench.inputs import CompareInput, RunInput  # noqa: E402
from tools.bench.machine_cost import PROMPT_TOKENS  # noqa: E402
from tools.bench.protocol import hardware_name  # noqa: E402
from tools.engine import autoregressive, cpu_gemm, gguf_requant, methods, quantize  # noqa: E402
from tools.engine.params import DraftParams  # noqa: E402
from tools.engine.speculative import SpeculativeDecoder  # noqa: E402
from tools.engine.types import GenerationSettings  # noqa: E402
from tools.errors import ParameterError  # noqa: E402

PROMPTS = [[5, 6, 7, 40, 41, 42, 43, 5, 6, 7, 50, 51, 52, 9, 10, 5, 6, 7], list(range(70, 90)) + list(range(70, 80))]
SETTINGS = GenerationSettings(max_new_tokens=32)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    yield write_pair(tmp_path_factory.mktemp("gguf"))
    context.release_models()


@pytest.fixture(scope="module")
def ctx(files):
    """The target and its draft on transformers (float32), and the draft again on llama.cpp."""
    target = context.load_cached(files[0], "float32", None, 1)
    draft = context.load_cached(files[1], "float32", None, 1)
    gguf = context.load_cached(files[1], "gguf", None, 1, "llamacpp", role="gguf_draft")
    return methods.MethodContext(target=target, draft=draft, gguf_draft=gguf)


@pytest.fixture(scope="module")
def baselines(ctx):
    return [autoregressive.generate(ctx.target.model, p, SETTINGS).output_ids for p in PROMPTS]


def test_draft_quant_resolves_by_the_drafts_engine():
    assert quantize.resolve("auto", "cpu", "llamacpp") == "gguf" == quantize.resolve("gguf", "cpu", "llamacpp")
    assert quantize.resolve("none", "cpu", "llamacpp") == "none"
    with pytest.raises(ParameterError, match="runs on llama.cpp"):
        quantize.resolve("int8", "cpu", "llamacpp")
    with pytest.raises(ParameterError, match="loaded with transformers") as err:
        quantize.resolve("gguf", "cpu")
    assert "llama-cpp-python" in err.value.hint


@pytest.mark.parametrize("params", [DraftParams(draft_quant="gguf"),
                                    DraftParams(k=4, adaptive_k=False, draft_confidence=None, draft_quant="gguf"),
                                    DraftParams(draft_quant="gguf", draft_lookup=0, draft_vocab=100),
                                    DraftParams(draft_quant="gguf", pass_costs=[1.0, 1.05, 1.1, 1.2], draft_cost=0.1)])
def test_a_llamacpp_draft_for_a_transformers_target_equals_the_baseline(ctx, baselines, params):
    drafted = 0
    for prompt, expected in zip(PROMPTS, baselines):
        result = methods.run("draft", ctx, prompt, SETTINGS, params)
        assert result.output_ids == expected
        assert result.extra["draft_quant"] == "gguf"
        drafted += result.tokens_drafted
    assert drafted > 0


def test_an_int8_copy_of_a_draft_transformers_read_from_a_gguf_file(ctx, baselines):
    if not quantize.int8_available():
        pytest.skip("this torch build has no CPU int8 engine")
    result = methods.run("draft", ctx, PROMPTS[0], SETTINGS, DraftParams(draft_quant="int8"))
    assert result.output_ids == baselines[0] and result.extra["draft_quant"] == "int8"


def test_sampling_with_a_llamacpp_draft_is_reproducible(ctx):
    settings = SETTINGS.model_copy(update={"temperature": 0.9, "top_p": 0.95, "seed": 3})
    runs = [methods.run("draft", ctx, PROMPTS[0], settings, DraftParams(draft_quant="gguf")) for _ in range(2)]
    assert runs[0].output_ids == runs[1].output_ids and len(runs[0].output_ids) == SETTINGS.max_new_tokens
    assert all(0 <= t < ctx.target.vocab_size for t in runs[0].output_ids)


def test_gguf_without_a_llamacpp_draft_says_what_to_do(ctx):
    with pytest.raises(ParameterError, match="loaded with transformers"):
        methods.run("draft", methods.MethodContext(target=ctx.target, draft=ctx.draft), PROMPTS[0], SETTINGS,
                    DraftParams(draft_quant="gguf"))
    with pytest.raises(ParameterError):
        SpeculativeDecoder(inference=ctx.target, draft=ctx.gguf_draft, draft_quant="int8")


def store_with(ctx, int8_ms: float, gguf_ms: float) -> Store:
    """A store holding the target's curve and a draft token's cost as an int8 copy and on llama.cpp."""
    store = Store()
    hardware = hardware_name(str(ctx.target.device))
    store.save_cost_curve(ctx.target.ref, hardware, {1: 0.1, 2: 0.1, 4: 0.1, 8: 0.11, 16: 0.13}, dtype="float32",
                          kernels=cpu_gemm.kernels(ctx.target.model))
    int8 = "int8" if quantize.int8_available() else "float32"
    prompt = PROMPT_TOKENS
    store.save_cost_curve(ctx.draft.ref, hardware, {1: int8_ms / 1000, prompt: prompt * 0.0016}, dtype=int8,
                          kernels=None if int8 == "int8" else cpu_gemm.kernels(ctx.draft.model))
    store.save_cost_curve(ctx.draft.ref, hardware, {1: gguf_ms / 1000, prompt: prompt * 0.0048}, dtype="gguf")
    return store


def test_the_sizing_drafts_on_llamacpp_where_it_is_cheaper(ctx):
    sizing = context.sized_params(["draft"], {}, store_with(ctx, 30, 20), ctx, allow_measure=False)["draft"]
    field = sizing.fields["draft_quant"]
    assert (field.value, field.source) == ("gguf", "sized")
    assert "GGUF file on llama.cpp" in field.reason and "20 ms" in field.reason and "30 ms" in field.reason
    assert sizing.params["draft_cost"] == pytest.approx(0.2)
    # llama.cpp reads a prompt token in 4.8 ms, the int8 copy in 1.6: 10 ms saved a draft forward over a quarter of the
    # new tokens asked for pays for 10 * 0.85 * 0.25 / 3.2 = 0.66 prompt tokens per new token
    until = sizing.fields["gguf_draft_until"]
    assert until.source == "sized" and until.value == pytest.approx(0.66, abs=0.01) and "4.8 ms" in until.reason


def test_a_gguf_draft_asked_for_is_timed_without_an_int8_copy(ctx, monkeypatch):
    """A self-draft's int8 copy is one of the target: in float32 three copies of it ran the machine out of memory."""
    def no_copy(model):
        raise AssertionError("an int8 copy was made for a draft asked to run on llama.cpp")

    monkeypatch.setattr(quantize, "int8_draft", no_copy)
    store = Store()
    hardware = hardware_name(str(ctx.target.device))
    store.save_cost_curve(ctx.target.ref, hardware, {1: 0.1, 2: 0.1, 4: 0.1, 8: 0.11, 16: 0.13}, dtype="float32",
                          kernels=cpu_gemm.kernels(ctx.target.model))
    sizing = context.sized_params(["draft"], {"draft": {"draft_quant": "gguf"}}, store, ctx)["draft"]
    assert sizing.params["draft_quant"] == "gguf" and "llama.cpp" in sizing.fields["draft_cost"].reason


@pytest.mark.parametrize("until, engine", [(None, "gguf"), (2.0, "gguf"), (0.5, "int8")])
def test_a_long_prompt_is_drafted_by_the_int8_copy(ctx, baselines, until, engine):
    """PROMPTS[0] has 18 tokens for 32 new ones: past 0.5 prompt tokens per new token, not past 2."""
    if engine == "int8" and not quantize.int8_available():
        pytest.skip("this torch build has no CPU int8 engine")
    result = methods.run("draft", ctx, PROMPTS[0], SETTINGS, DraftParams(draft_quant="gguf", gguf_draft_until=until))
    assert result.output_ids == baselines[0] and result.extra["draft_quant"] == engine


def test_the_sizing_keeps_the_int8_copy_where_llamacpp_is_dearer(ctx):
    sizing = context.sized_params(["draft"], {}, store_with(ctx, 20, 30), ctx, allow_measure=False)["draft"]
    assert sizing.params["draft_quant"] == "auto" and sizing.params["draft_cost"] == pytest.approx(0.2)
    given = context.sized_params(["draft"], {"draft": {"draft_quant": "gguf"}}, store_with(ctx, 20, 30), ctx,
                                 allow_measure=False)["draft"]
    assert given.fields["draft_quant"].source == "given" and given.params["draft_cost"] == pytest.approx(0.3)
    kept = context.sized_params(["draft"], {"draft": {"draft_quant": "int8"}}, store_with(ctx, 30, 20), ctx,
                                allow_measure=False)["draft"]
    assert kept.params["draft_quant"] == "int8" and kept.params["draft_cost"] == pytest.approx(0.3)


def test_run_on_transformers_drafts_on_llamacpp_and_records_it(capsys, files):
    capsys.readouterr()
    assert main(["run", "--method", "draft", "--target", files[0], "--draft", files[1], "--dtype", "float32",
                 "--draft-quant", "gguf", "--prompt", "hello world hello world hello", "--raw",
                 "--max-new-tokens", "12", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["backend"] == "transformers" and record["params"]["draft_quant"] == "gguf"
    assert record["matches_baseline"] is True and record["new_tokens"] == 12
    assert torch.tensor(record["output_ids"]).numel() == 12


@pytest.mark.parametrize("given, loaded", [({}, True), ({"draft_quant": "gguf"}, True),
                                           ({"draft_quant": "int8"}, False), ({"draft_quant": "none"}, False)])
def test_prepare_loads_the_llamacpp_draft_only_where_it_may_run(files, given, loaded):
    run_inp = RunInput(method="draft", prompt="hello", target=files[0], draft=files[1], dtype="float32", params=given)
    compare_inp = CompareInput(prompt="hello", methods=["draft"], target=files[0], draft=files[1], dtype="float32",
                               params={"draft": given})
    for inp in (run_inp, compare_inp):
        ctx = context.prepare(inp, ["draft"], None, strict=True).ctx
        assert (ctx.gguf_draft is not None) is loaded and ctx.draft is not None


@pytest.mark.parametrize("saved, given, loaded", [({"draft_quant": "int8"}, {}, False),
                                                  ({"draft_quant": "int8"}, {"draft_quant": "gguf"}, True),
                                                  ({"draft_quant": "gguf"}, {"draft_quant": None}, True)])
def test_prepare_reads_a_saved_draft_quant_as_the_run_s_sizing_does(files, saved, given, loaded):
    """A draft_quant saved in memory is the one a run's sizing records: the llama.cpp draft is loaded by it (a given
    one wins; None is not given)."""
    store = Store()
    store.save_params("draft", saved)
    run_inp = RunInput(method="draft", prompt="hello", target=files[0], draft=files[1], dtype="float32", params=given)
    compare_inp = CompareInput(prompt="hello", methods=["draft"], target=files[0], draft=files[1], dtype="float32",
                               params={"draft": given})
    for inp in (run_inp, compare_inp):
        ctx = context.prepare(inp, ["draft"], None, strict=True, store=store).ctx
        assert (ctx.gguf_draft is not None) is loaded


def test_both_drafts_time_a_prompt_for_its_last_row_only(ctx, monkeypatch):
    """A draft reads a prompt for its last row's logits: the sizing times both drafts' prompt reading that way
    (every row's logits would add a vocabulary-wide projection per prompt token) and stores both curves."""
    if not quantize.int8_available():
        pytest.skip("this torch build has no CPU int8 engine")
    passes, backend = [], ctx.gguf_draft.model
    forward = backend.forward

    def spy(ids, cache, positions, visible=None, rows=0):
        passes.append((ids.shape[-1], rows))
        return forward(ids, cache, positions, visible, rows)
    monkeypatch.setattr(backend, "forward", spy)
    # timings on a busy machine are not what is tested: none is set aside as disturbed, and the int8 copy's
    # stored token is the slower one, so the GGUF draft is chosen and both prompt readings are timed
    monkeypatch.setattr(machine_cost, "disturbed", lambda measured, raw: None)
    store = Store()
    hardware = hardware_name(str(ctx.target.device))
    store.save_cost_curve(ctx.target.ref, hardware, {1: 0.1, 2: 0.1, 4: 0.1, 8: 0.11, 16: 0.13}, dtype="float32",
                          kernels=cpu_gemm.kernels(ctx.target.model))
    store.save_cost_curve(ctx.draft.ref, hardware, {1: 1.0}, dtype="int8")
    context.sized_params(["draft"], {}, store, ctx, allow_measure=True)
    assert (PROMPT_TOKENS, 1) in passes and not [r for n, r in passes if n == PROMPT_TOKENS and r != 1]
    for dtype in ("gguf", "int8"):
        assert PROMPT_TOKENS in store.get_cost_curve(ctx.draft.ref, hardware, dtype)["curve"]


def test_a_q4_0_copy_of_the_draft_is_made_once_and_drafts_for_the_same_output(files, baselines):
    """The built-in drafts run from a Q4_0 copy of their file (llama.cpp's fastest CPU kernels): written once beside
    it, reused after, and a draft from it leaves the output as it was."""
    fast = gguf_requant.fast_copy(files[1])
    assert fast is not None and fast.name == "draft.q4_0.gguf" and fast.stat().st_size < 0.4 * os.path.getsize(files[1])
    made = fast.stat().st_mtime_ns
    assert gguf_requant.fast_copy(files[1]) == fast and fast.stat().st_mtime_ns == made
    target = context.load_cached(files[0], "float32", None, 1)
    draft = context.load_cached(files[1], "gguf", None, 1, "llamacpp", role="gguf_draft", file=fast)
    ctx = methods.MethodContext(target=target, gguf_draft=draft)
    for prompt, expected in zip(PROMPTS, baselines):
        assert methods.run("draft", ctx, prompt, SETTINGS, DraftParams(draft_quant="gguf")).output_ids == expected


def test_no_q4_0_copy_where_it_cannot_be_written(files, tmp_path):
    source = tmp_path / "d.gguf"
    source.write_bytes(open(files[1], "rb").read())
    (tmp_path / "d.q4_0.gguf").mkdir()  # the copy's place is taken: the draft runs from its own file
    assert gguf_requant.fast_copy(source) is None
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".partial")] == []
