"""The local brain on a tiny random model: whatever the model prefers, a turn ends as text or as one
tool call whose name is a registry tool and whose arguments validate; constrained choices are the
model's masked greedy choices; free text equals plain greedy decoding; the prefix KV cache is
computed once, saved, reloaded by a later process, and a turn runs only its new tokens.

The real default model is tried in the slow group (pytest -m slow)."""

from __future__ import annotations

import math
import json

import pytest
import torch

from agent.brains import local, local_prompt, tool_grammar
from agent.brains.classifier import numbers as numbers_of
from agent.brains.constrained import ConstrainedLM, common_prefix
from tools import models
from tools.agent_tools import registry
from tools.agent_tools.registry import ToolResult

from tiny_models import make_tiny_model

SPECIALS = ["<|endoftext|>", local_prompt.IM_START, local_prompt.IM_END]
REQUESTS = ["what did we do last time?", "save k=6 as my default for draft", "run draft on 'def fib(n):'",
            "compare draft and lookahead on 'Write a haiku'", "install lade", "hi"]


def make_chat_model_folder(folder, seed: int = 0):
    """A tiny random Qwen2 with a byte-level BPE tokenizer (ChatML markers as special tokens) trained on
    the brain's own prompt, so any text round-trips and the prompt is a realistic length."""
    from tokenizers import Tokenizer, decoders, models as tok_models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(tok_models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    corpus = [local_prompt.prefix_text(registry.load_tools()), *REQUESTS]
    tok.train_from_iterator(corpus, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=local_prompt.IM_END, pad_token="<|endoftext|>")
    fast.save_pretrained(folder)
    model = make_tiny_model("qwen2", layers=2, seed=seed, vocab=len(fast), max_positions=8192)
    model.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def chat_model_dirs(tmp_path_factory):
    return [make_chat_model_folder(tmp_path_factory.mktemp(f"tiny-chat-{seed}"), seed) for seed in range(3)]


@pytest.fixture(autouse=True)
def fresh_engines(monkeypatch):
    """Each test loads its engines itself (as a new process would)."""
    monkeypatch.setattr(local, "_ENGINES", {})


class RecordingSession:
    """Lists the brain's tool calls; runs none of them."""

    last_prompt = None

    def __init__(self):
        self.calls = []

    def call_tool(self, name, tool_input):
        self.calls.append((name, tool_input))
        return ToolResult(name=name, content={"status": "not_executed"})


def test_every_turn_is_text_or_a_valid_tool_call(chat_model_dirs):
    tools = registry.load_tools()
    for folder in chat_model_dirs:
        brain = local.LocalBrain(str(folder), max_tokens=48)
        for text in REQUESTS:
            session = RecordingSession()
            reply = brain.respond(session, text)
            assert isinstance(reply.text, str) and reply.text
            assert len(session.calls) <= 1
            for name, arguments in session.calls:
                assert name in tools
                registry.parse_input(tools[name], arguments)  # raises when it does not validate


def _bounded(schema):
    """``schema`` with every string at most 12 characters: a random model's string may never close."""
    if isinstance(schema, list):
        return [_bounded(v) for v in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _bounded(v) if k not in ("const", "enum") else v for k, v in schema.items()}
    return {**out, "maxLength": 12} if schema.get("type") == "string" else out


@pytest.fixture
def bounded(monkeypatch):
    """The brain's call schemas with short strings, for a random model's decode to close within its budget."""
    schema = tool_grammar.arguments_schema
    monkeypatch.setattr(tool_grammar, "arguments_schema", lambda *a, **k: _bounded(schema(*a, **k)))


def test_the_arguments_of_every_tool_parse_as_json_of_its_grammar(chat_model_dirs):
    """Decode each tool's arguments on each tiny model: JSON with only the schema's keys and values of the
    declared kinds, appended to the committed text (validation is the brain's next step, tested above)."""
    said = "use 2 small models in float16, json, draft medusa lookahead ngram baseline, all adaptive"
    for folder in chat_model_dirs:
        lm = local.load_engine(str(folder))
        for name, tool in registry.load_tools().items():
            lm.begin(local_prompt.user_turn("do it") + local_prompt.CALL_OPEN + name + local_prompt.ARGS_OPEN)
            start = len(lm.text)
            arguments = lm.decode_json(_bounded(tool_grammar.arguments_schema(tool, said)), 400)
            assert arguments is not None and json.loads(lm.text[start:]) == arguments, lm.text[start:]
            allowed = {a.name: a for a in tool_grammar.tool_args(tool)}
            for key, value in arguments.items():
                kind = allowed[key].kind
                assert kind != "enum" or value in allowed[key].values
                assert kind != "bool" or isinstance(value, bool)
                assert kind != "number" or isinstance(value, (int, float))
                assert kind != "number_list" or all(isinstance(v, (int, float)) for v in value) and value
                assert kind not in ("params", "method_params") or isinstance(value, dict)


def test_a_decode_is_the_models_greedy_choice_among_what_the_grammar_allows(chat_model_dirs):
    """Token by token, the decoded call is what the grammar forces or else the model's best allowed token, the
    logits computed afresh over the whole context: the lazily fed KV cache and the verified prompt-lookup drafts
    change nothing (the draft finds the repeated prompt in the request)."""
    import numpy as np

    for folder in chat_model_dirs:
        lm = local.load_engine(str(folder))
        text = "run draft on 'fib fib fib fib fib fib' and 'fib fib fib fib fib fib'"
        schema = _bounded(tool_grammar.call_schema({
            "run_method": tool_grammar.arguments_schema(registry.load_tools()["run_method"], text),
            local_prompt.REPLY: {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"],
                                 "additionalProperties": False}}))
        lm.begin(local_prompt.user_turn(text))
        ids = lm.segment_ids()
        passes = lm.passes
        value = lm.decode_json(schema, 400)
        out = lm.ids[len(ids):]
        assert value is not None and lm.passes - passes < len(out)  # forced tokens and drafts saved passes
        matcher = lm.matcher(schema)
        for i, token in enumerate(out):
            forced = matcher.compute_ff_tokens()
            if forced:
                assert forced[0] == token
            else:
                with torch.no_grad():
                    row = lm.backend.model(input_ids=torch.tensor([ids + out[:i]])).logits[0, -1]
                mask = np.zeros((lm.backend.vocab_size + 31) // 32, dtype=np.int32)
                matcher.unsafe_compute_mask_ptr(mask.ctypes.data, mask.nbytes)
                allowed = np.unpackbits(mask.view(np.uint8), bitorder="little")[: lm.backend.vocab_size].astype(bool)
                best = int(row[: lm.backend.vocab_size].masked_fill(~torch.from_numpy(allowed), float("-inf")).argmax())
                assert best == token
            assert matcher.consume_token(token)
        assert matcher.is_accepting()


def test_the_prefix_cache_is_saved_reloaded_and_a_turn_runs_only_new_tokens(chat_model_dirs, monkeypatch):
    folder = str(chat_model_dirs[2])
    lm = local.load_engine(folder)
    saved = list((local.home_dir() / "cache" / "local-brain").glob("*.pt"))
    assert len(saved) == 1
    prefix_len = lm.base
    assert lm.fed == prefix_len  # computed once, in this process

    passes = []  # (first position, tokens) of every forward pass from now on
    forward = lm._forward
    monkeypatch.setattr(lm, "_forward", lambda tokens, start, *a, **k: passes.append((start, len(tokens)))
                        or forward(tokens, start, *a, **k))
    brain = local.LocalBrain(folder, max_tokens=24)  # every turn decoded: the cache is what is tested
    for text in ("hi", "what did we do last time?"):
        del passes[:]
        brain.respond(RecordingSession(), text)
        assert passes and min(start for start, _ in passes) >= prefix_len  # the prefix is never run again
        # the first pass runs this turn's text (and what the last turn added), nothing before it
        turn = len(lm.encode(local_prompt.user_turn(text)))
        assert turn <= passes[0][1] <= turn + len(lm.encode(brain._context())) + 8  # and the forced {"name": "

    monkeypatch.setattr(local, "_ENGINES", {})  # a new process: the prefix comes from disk
    again = local.load_engine(folder)
    assert again is not lm and again.fed == 0 and again.ids[: again.base] == lm.ids[: lm.base]
    for layer_a, layer_b in zip(again.cache.layers, lm.cache.layers):
        n = again.backend.cache_length(again.cache)
        assert torch.equal(layer_a.keys[..., :n, :], layer_b.keys[..., :n, :])
    first = local.LocalBrain(folder, max_tokens=24).decide("install lade")
    monkeypatch.setattr(local, "_ENGINES", {folder: lm})
    assert local.LocalBrain(folder, max_tokens=24).decide("install lade") == first


def test_llamacpp_prefix_state_is_saved_and_reloaded(tmp_path):
    """On llama.cpp the prefix is llama.cpp's own sequence state file; a reloaded prefix decides the same."""
    pytest.importorskip("llama_cpp")
    pytest.importorskip("gguf")
    from tokenizers import Tokenizer, decoders, models as tok_models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from gguf_tiny import EOS, MERGES, VOCAB, write_tiny_llama
    from tools.engine.llamacpp import load_gguf

    write_tiny_llama(tmp_path / "tiny.gguf", seed=3)
    bpe = Tokenizer(tok_models.BPE({t: i for i, t in enumerate(VOCAB)}, [tuple(m.split()) for m in MERGES]))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe)
    backend = load_gguf(tmp_path / "tiny.gguf", n_ctx=1024, n_threads=1)
    prefix, path = "You help with speculative decoding. " * 3, tmp_path / "prefix.pt"

    def turn(lm):
        lm.begin("user: compare draft and medusa\nassistant: ")
        return lm.decode_json({"enum": ["draft", "medusa", "lookahead"]}, 8), lm.decode_json({"maxLength": 6}, 8)

    first = ConstrainedLM(backend, tokenizer, [EOS])
    first.set_prefix(prefix)
    first.save_prefix(path)
    expected = turn(first)
    again = ConstrainedLM(backend, tokenizer, [EOS])  # the backend holds one cache: this one replaces it
    assert again.load_prefix(path, prefix) and again.fed == 0
    assert again.backend.cache_length(again.cache) == len(again.encode(prefix))
    assert turn(again) == expected
    assert not ConstrainedLM(backend, tokenizer, [EOS]).load_prefix(path, "Another system prompt. " * 3)

    # the grammar's view of a llama.cpp vocabulary: its pieces read once and saved, deciding as the file's tokenizer
    from llguidance import LLTokenizer

    saved = tmp_path / "pieces.npz"
    pieces = backend.tokenizer.pieces(saved)
    assert saved.is_file() and backend.tokenizer.pieces(saved) == pieces and len(pieces) == backend.vocab_size
    assert b"".join(pieces[t] for t in tokenizer.encode("compare draft", add_special_tokens=False)) == b"compare draft"
    ours = ConstrainedLM(backend, tokenizer, [EOS])
    ours.saved_pieces = saved
    assert ours.load_prefix(path, prefix) and turn(ours) == expected
    theirs = ConstrainedLM(backend, tokenizer, [EOS])
    theirs._grammar_tokenizer = LLTokenizer(tokenizer.backend_tokenizer.to_str(), n_vocab=backend.vocab_size, slices=[])
    assert theirs.load_prefix(path, prefix) and turn(theirs) == expected


def test_a_gguf_file_the_user_points_to_runs_on_llamacpp_with_its_own_tokenizer(tmp_path, monkeypatch):
    pytest.importorskip("llama_cpp")
    pytest.importorskip("gguf")
    from gguf_tiny import EOS, write_tiny_llama
    from tools.engine.llamacpp import LlamaCppBackend

    write_tiny_llama(tmp_path / "mine.gguf", seed=3)
    monkeypatch.setenv("SPECPILOT_HOME", str(tmp_path / "home"))
    monkeypatch.setenv(local.THREADS_ENV, "1")
    ref = str(tmp_path / "mine.gguf")
    assert local.local_model_available(ref)
    lm = local.load_engine(ref, "You help with speculative decoding. " * 3)
    assert isinstance(lm.backend, LlamaCppBackend) and lm.tokenizer is lm.backend.tokenizer and EOS in lm.stop_ids
    lm.begin("user: compare draft and medusa\nassistant: ")
    assert lm.decode_json({"enum": ["draft", "medusa", "lookahead"]}, 8) in ("draft", "medusa", "lookahead")
    assert lm.saved_pieces.is_file() and lm.saved_pieces.parent == local.brain_folder()
    monkeypatch.setattr(local, "_ENGINES", {})  # a later process: the prefix comes from disk
    again = local.load_engine(ref, "You help with speculative decoding. " * 3)
    assert again.fed == 0 and again.ids[: again.base] == lm.ids[: lm.base]


def test_a_prompt_the_user_never_wrote_is_asked_for_not_invented(monkeypatch, chat_model_dirs):
    brain = local.LocalBrain(str(chat_model_dirs[0]))
    made_up = local.Decision(name="compare_methods", arguments={"methods": ["draft", "medusa"], "prompt": "Write a quicksort"})
    monkeypatch.setattr(brain, "decide", lambda text: made_up)
    session = RecordingSession()
    reply = brain.respond(session, "compare draft and medusa")
    assert session.calls == [] and reply.awaiting
    assert reply.text.startswith("Which prompt should I compare draft and medusa on?")
    brain.respond(session, "'def fib(n):'")  # the answer completes the call asked about (no model needed)
    assert session.calls == [("compare_methods", {"methods": ["draft", "medusa"], "prompt": "def fib(n):"})]


def test_optional_filters_the_user_never_wrote_are_dropped(monkeypatch, chat_model_dirs):
    brain = local.LocalBrain(str(chat_model_dirs[0]))
    invented = local.Decision(name="lookup_runs", arguments={"method": "draft", "prompt_contains": "acceptance rates"})
    monkeypatch.setattr(brain, "decide", lambda text: invented)
    session = RecordingSession()
    brain.respond(session, "show me the acceptance rate of the  DRAFT runs")
    assert session.calls == [("lookup_runs", {"method": "draft"})]
    kept = local.Decision(name="run_method", arguments={"method": "draft", "prompt": "def fib(n):"})
    monkeypatch.setattr(brain, "decide", lambda text: kept)
    brain.respond(session, "run draft on 'def  fib(n):'")  # spacing and case aside, the user wrote it
    assert session.calls[-1] == ("run_method", kept.arguments)
    article = "Summarise: " + "the cat sat on the mat and looked out of the window. " * 30
    cut = local.Decision(name="run_method", arguments={"method": "ngram", "prompt": article[:80]})
    monkeypatch.setattr(brain, "decide", lambda text: cut)
    brain.respond(session, f'run ngram on "{article}"')  # a long prompt is passed whole, not as far as copied
    assert session.calls[-1] == ("run_method", {"method": "ngram", "prompt": article})


def test_run_settings_the_user_never_gave_are_dropped(monkeypatch, chat_model_dirs):
    brain = local.LocalBrain(str(chat_model_dirs[0]))
    invented = local.Decision(name="compare_methods", arguments={
        "methods": ["lookahead", "ngram"], "prompt": "def fib(n):", "temperature": 0.7, "max_new_tokens": 100})
    monkeypatch.setattr(brain, "decide", lambda text: invented)
    session = RecordingSession()
    brain.respond(session, "compare lookahead and ngram on 'def fib(n):'")
    assert session.calls == [("compare_methods", {"methods": ["lookahead", "ngram"], "prompt": "def fib(n):"})]
    given = local.Decision(name="run_method", arguments={"method": "ngram", "prompt": "def fib(n):",
                                                         "temperature": 0.7, "max_new_tokens": 64})
    monkeypatch.setattr(brain, "decide", lambda text: given)
    brain.respond(session, "run ngram on 'def fib(n):' at temperature 0.7 for 64 tokens")
    assert session.calls[-1] == ("run_method", given.arguments)


def test_local_model_available_follows_the_files(tmp_path, monkeypatch, chat_model_dirs):
    assert local.local_model_available(str(chat_model_dirs[0]))
    assert not local.local_model_available(str(tmp_path / "nothing-here"))
    monkeypatch.setenv("SPECPILOT_MODELS", str(tmp_path / "no-models"))
    assert not local.local_model_available(models.DEFAULT_TARGET)


# ---- the real model (slow group) ------------------------------------------------------------------


@pytest.fixture(scope="module")
def real_engine():
    if not local.local_model_available():
        pytest.skip(f"the local brain's model is not fetched: run `specpilot models fetch {local.local_model_ref()}`")
    return local.load_engine(local.local_model_ref())


@pytest.mark.slow
def test_the_real_model_reads_the_request_for_the_heads_in_the_pass_that_feeds_it():
    """The shipped heads of the model's reading hold for the built-in model and its prompt: a turn reads the
    request once (the decode goes on from that pass) and the heads answer from the reading."""
    if not local.local_model_available():
        pytest.skip(f"the local brain's model is not fetched: run `specpilot models fetch {local.local_model_ref()}`")
    brain = local.LocalBrain(classifier=local.default_classifier())
    text = "compare draft and lookahead on 'Write a haiku about rain'"
    decision = brain.decide(text)
    assert brain.classifier._read is not None and brain.classifier._read[0] == text
    assert decision.name == "compare_methods" and decision.arguments["methods"] == ["draft", "lookahead"]
    # each token of the request is read with the characters it spans, for the heads of written values
    _, states, offsets = brain.classifier._tokens
    assert len(states) == len(offsets) and "".join(text[a:b] for a, b in offsets) == text
    assert brain.classifier.value_head("number", text).read[0] == text
    assert brain.decide("run the baseline with 3 repeats on 'hi there'").arguments.get("repeats") == 3


@pytest.mark.slow
@pytest.mark.parametrize("text, tool, arguments", [
    ("what did we do last time?", "recall", {}),
    ("install lade", "install_packages", {"packages": ["lade"]}),
    ("compare draft and lookahead on 'Write a haiku about rain'", "compare_methods",
     {"methods": ["draft", "lookahead"], "prompt": "Write a haiku about rain"}),
    ("save k=6 as my default for draft", "save_params", {"method": "draft", "params": {"k": 6}}),
    ("how fast would draft decoding be on an H100?", None, {}),
])
def test_the_real_local_model_picks_the_tool(real_engine, text, tool, arguments):
    local._ENGINES[local.local_model_ref()] = real_engine
    session = RecordingSession()
    reply = local.LocalBrain().respond(session, text)
    assert [name for name, _ in session.calls] == ([tool] if tool else [])
    if tool is None:
        assert reply.text
    for name, given in session.calls:
        assert {k: given.get(k) for k in arguments} == arguments


def test_every_turn_is_decided_by_the_model_and_a_quoted_answer_completes_the_call_asked_about(monkeypatch,
                                                                                                chat_model_dirs):
    """No rule pass: each request goes to the model; an answer to the brain's own question that quotes a value
    completes the call it asked about without another decode."""
    brain = local.LocalBrain(str(chat_model_dirs[0]))
    decided = []
    monkeypatch.setattr(brain, "decide", lambda text: decided.append(text) or local.Decision(text="ok"))
    recording = RecordingSession()
    brain.respond(recording, "eagle on 'Name three rivers'")
    brain.respond(recording, "how are the clouds today")
    assert decided == ["eagle on 'Name three rivers'", "how are the clouds today"] and recording.calls == []
    brain.pending = (local.Decision(name="compare_methods", arguments={"methods": ["draft", "medusa"]}), "prompt")
    brain.respond(recording, "'def fib(n):'")
    assert recording.calls == [("compare_methods", {"methods": ["draft", "medusa"], "prompt": "def fib(n):"})]
    assert len(decided) == 2


def test_run_settings_written_inside_params_move_beside_them_where_the_tool_has_them():
    properties = registry.load_tools()["run_method"].input_schema()["properties"]
    arguments = {"method": "medusa", "prompt": "x", "params": {"tree": "cpu8", "max_new_tokens": 64, "dtype": "float32"}}
    local.hoist_settings(arguments, properties)
    assert arguments == {"method": "medusa", "prompt": "x", "params": {"tree": "cpu8"}, "max_new_tokens": 64,
                         "dtype": "float32"}
    saved = {"method": "draft", "params": {"k": 4, "max_new_tokens": 64}}  # save_params keeps settings in params
    local.hoist_settings(saved, registry.load_tools()["save_params"].input_schema()["properties"])
    assert saved == {"method": "draft", "params": {"k": 4, "max_new_tokens": 64}}
    compared = {"methods": ["draft", "lookahead"], "params": {"draft": {"k": 5}, "lookahead": {"window": 7}}}
    local.hoist_settings(compared, registry.load_tools()["compare_methods"].input_schema()["properties"])
    assert compared["params"] == {"draft": {"k": 5}, "lookahead": {"window": 7}} and "draft" not in compared


def test_the_models_params_keep_only_what_the_user_wrote():
    """A text or choice parameter inside params stays when the user wrote its value or named it; a head folder,
    a quantisation or a switch the model added on its own is dropped."""
    said = "eagle, 256 new tokens, repeats 5: 'Explain threads.'"
    arguments = {"method": "eagle", "prompt": "Explain threads.", "params": {"trim": True, "eagle_heads": "chain4",
                                                                             "depth": 5}}
    local.ground_params(arguments, said)
    assert arguments["params"] == {"depth": 5}
    arguments = {"method": "draft", "prompt": "x", "params": {"adaptive_k": False, "draft_quant": "auto", "k": 2}}
    local.ground_params(arguments, "draft with adaptive K switched off, k through 2, 4 and 6: 'x'")
    assert arguments["params"] == {"adaptive_k": False, "k": 2}
    compared = {"methods": ["draft", "lookahead"], "prompt": "x",
                "params": {"draft": {"draft_quant": "auto", "adaptive_k": True}, "lookahead": {"window": 7,
                                                                                            "pool_from_prompt": True}}}
    local.ground_params(compared, "compare draft and lookahead with window 7 on 'x'")
    assert compared["params"] == {"lookahead": {"window": 7}}
    spelled = {"method": "draft", "prompt": "x", "params": {"k": 4, "draft_quant": "int8"}}
    local.ground_params(spelled, "draft with k four and an int8 draft on 'x'")
    assert spelled["params"] == {"k": 4, "draft_quant": "int8"}  # a spelled number stays; so does a written value
    invented = {"methods": ["lookahead", "eagle"], "prompt": "x", "params": {"lookahead": {"window": 1},
                                                                           "eagle": {"depth": 1, "topk": 8}}}
    local.ground_params(invented, "only use 8 cores. lookahead vs eagle on 'x'")
    assert invented["params"] == {"eagle": {"topk": 8}}  # a number nobody wrote is the model's invention
    inside = {"method": "medusa", "prompt": "x", "params": {"tree": "llm"}}
    local.ground_params(inside, "medusa on 'x' beside the medusa-llm package")
    assert "params" not in inside  # part of a word is no value the user gave
    partial = {"method": "medusa", "prompt": "x", "params": {"tree": "trees/cpu8.json"}}
    local.ground_params(partial, "medusa with the tree in ./trees/cpu8.json, on 'x'")
    assert partial["params"] == {"tree": "./trees/cpu8.json"}  # a path copied in part is the user's whole path


def test_a_switch_the_user_named_is_one_the_model_must_write():
    """A method's switch named in the settings (not inside a quoted prompt or one after a colon) is required in
    ``params``, so the fixed key order cannot let the model pass it by; true or false is the model's reading."""
    tools = registry.load_tools()
    assert local.named_switches("draft", "save k=3 with adaptive K off as my draft default") == {"adaptive_k"}
    assert local.named_switches("lookahead", "lookahead should seed the pool from the prompt") == {"pool_from_prompt"}
    assert local.named_switches("eagle", "eagle on: Trim the whitespace of this string") == set()
    assert local.named_switches("eagle", "eagle on 'trim it'") == set()
    assert local.named_switches(None, "adaptive k off") == set()
    schema = tool_grammar.arguments_schema(tools["run_method"], "draft, adaptive k off: hi", {"method": "draft"},
                                           asked=frozenset({"adaptive_k"}))
    assert "params" in schema["required"] and schema["properties"]["params"]["required"] == ["adaptive_k"]
    plain = tool_grammar.arguments_schema(tools["run_method"], "draft: hi", {"method": "draft"})
    assert "params" not in plain["required"]


def test_a_comparison_takes_each_compared_methods_own_parameters(chat_model_dirs):
    """compare_methods' params are {method: its parameters}: keys among the compared methods that have
    parameters, each with only that method's own parameter names (no run settings inside)."""
    from tools.engine.params import PARAM_MODELS

    tool = registry.load_tools()["compare_methods"]
    assert {a.name: a.kind for a in tool_grammar.tool_args(tool)}["params"] == "method_params"
    for folder in chat_model_dirs:
        lm = local.load_engine(str(folder))
        lm.begin(local_prompt.user_turn("x") + local_prompt.CALL_OPEN + tool.name + local_prompt.ARGS_OPEN)
        said = "k 5 window 7 ngram 3"
        schema = tool_grammar.object_schema(tool_grammar.tool_args(tool), said,
                                            given={"methods": ["baseline", "draft", "lookahead"]})
        assert set(schema["properties"]["params"]["properties"]) == {"draft", "lookahead"}
        for method, own in schema["properties"]["params"]["properties"].items():
            assert set(own["properties"]) == set(PARAM_MODELS[method].model_fields) - set(tool_grammar.HIDDEN)
        value = lm.decode_json(_bounded(schema), 400)
        for method, own in (value.get("params") or {}).items():
            assert method in ("draft", "lookahead") and set(own) <= set(PARAM_MODELS[method].model_fields)


class FixedClassifier:
    def __init__(self, tool):
        self.tool = tool

    def probabilities(self, text):
        from agent.brains.classifier import NO_TOOL

        return {self.tool or NO_TOOL: 0.9, "check_deps" if self.tool != "check_deps" else "recall": 0.1}

    def argument(self, name, text, tool=None):  # no argument heads: the model chooses every value
        return {}


def test_with_a_classifier_the_model_writes_the_arguments_of_the_tool_it_picked(chat_model_dirs):
    tools = registry.load_tools()
    for tool in ("explain", "recall", None):
        brain = local.LocalBrain(str(chat_model_dirs[0]), max_tokens=48,
                                 classifier=FixedClassifier(tool))
        decision = brain.decide("tell me something")
        assert decision.name == tool or (tool is None and decision.ask)  # an answer in words may ask for an argument
        if tool is not None:
            registry.parse_input(tools[tool], decision.arguments)


def test_a_text_value_the_user_never_wrote_is_dropped_whatever_its_field(monkeypatch, chat_model_dirs):
    brain = local.LocalBrain(str(chat_model_dirs[0]))
    invented = local.Decision(name="run_method", arguments={"method": "draft", "prompt": "def f():",
                                                            "target": "/models/invented.gguf", "seed": 7})
    monkeypatch.setattr(brain, "decide", lambda text: invented)
    session = RecordingSession()
    brain.respond(session, "run draft on 'def f():'")
    assert session.calls == [("run_method", {"method": "draft", "prompt": "def f():"})]
    written = local.Decision(name="run_method", arguments={"method": "draft", "prompt": "def f():",
                                                           "target": "./models/q.gguf", "backend": "llamacpp"})
    monkeypatch.setattr(brain, "decide", lambda text: written)
    brain.respond(session, "draft on 'def f():' with target ./models/q.gguf on the llamacpp backend")
    assert session.calls[-1] == ("run_method", written.arguments)


def test_list_items_the_user_never_wrote_are_dropped(monkeypatch, chat_model_dirs):
    brain = local.LocalBrain(str(chat_model_dirs[0]))
    invented = local.Decision(name="write_report", arguments={"run_ids": ["run_id1", "run_id2"], "limit": 20})
    monkeypatch.setattr(brain, "decide", lambda text: invented)
    session = RecordingSession()
    brain.respond(session, "put my 20 newest runs in a report file")
    assert session.calls == [("write_report", {"limit": 20})]
    named = local.Decision(name="write_report", arguments={"run_ids": ["4f2a91c0", "run_x"]})
    monkeypatch.setattr(brain, "decide", lambda text: named)
    brain.respond(session, "report runs 4f2a91c0 please")
    assert session.calls[-1] == ("write_report", {"run_ids": ["4f2a91c0"]})


def test_scores_are_the_models_log_probabilities_of_each_continuation(chat_model_dirs):
    """score() after a cached context equals the log-probabilities a fresh full forward gives each continuation's
    tokens, and leaves the cache usable: the decode after it is unchanged."""
    lm = local.load_engine(str(chat_model_dirs[1]))
    names = ["run_method", "recall", "reply"]
    lm.begin(local_prompt.user_turn("what did we do last time?"))
    scores = lm.score([f'{local_prompt.CALL_OPEN}{n}"' for n in names])
    for name, got in zip(names, scores):
        ids = lm.segment_ids(f'{local_prompt.CALL_OPEN}{name}"')
        common = min(common_prefix(ids, lm.segment_ids(f'{local_prompt.CALL_OPEN}{n}"')) for n in names)
        with torch.no_grad():
            logits = lm.backend.model(input_ids=torch.tensor([ids])).logits[0, :, : lm.backend.vocab_size]
        rows = torch.log_softmax(logits.float(), -1)
        want = sum(float(rows[i - 1, ids[i]]) for i in range(common, len(ids)))
        assert math.isclose(got, want, rel_tol=1e-3, abs_tol=1e-3)
    schema = _bounded(tool_grammar.call_schema({"recall": tool_grammar.arguments_schema(
        registry.load_tools()["recall"], "what did we do last time?")}))
    after = lm.decode_json(schema, 200)
    assert after is not None and after["name"] == "recall"


def test_among_candidates_the_call_takes_the_name_the_classifier_and_model_find_likeliest(chat_model_dirs):
    class Split:
        def __init__(self, probs):
            self.probs = probs

        def probabilities(self, text):
            return self.probs

        def argument(self, name, text, tool=None):
            return {}

    lm = local.load_engine(str(chat_model_dirs[0]))
    text = "what did we do last time?"
    names = ["recall", "explain", "reply"]
    lm.begin(local_prompt.user_turn(text))
    model = lm.score([f'{local_prompt.CALL_OPEN}{n}"' for n in names])
    probs = {"recall": 0.5, "explain": 0.3, "<none>": 0.2}
    brain = local.LocalBrain(str(chat_model_dirs[0]), classifier=Split(probs))
    best = max(names, key=lambda n: math.log(probs["<none>" if n == "reply" else n]) + model[names.index(n)])
    assert brain.pick(lm, text, names) == best
    # a classifier all but sure of one candidate outweighs the model's preference
    brain.classifier = Split({"explain": 1 - 2e-9, "recall": 1e-9, "<none>": 1e-9})
    assert brain.pick(lm, text, names) == "explain"


def test_a_choice_its_head_reads_as_set_but_is_unsure_of_takes_the_value_head_and_model_find_likeliest(
        chat_model_dirs):
    class Heads(FixedClassifier):
        def __init__(self, topic):
            super().__init__("explain")
            self.topic = topic

        def argument(self, name, text, tool=None):
            return self.topic if name == "topic" else {}

    lm = local.load_engine(str(chat_model_dirs[0]))
    text = "what is that method?"
    tool = registry.load_tools()["explain"]
    values = ("ngram", "draft", "eagle")
    lm.begin(local_prompt.user_turn(text))
    model = lm.score([f'{local_prompt.CALL_OPEN}explain{local_prompt.ARGS_OPEN}{{"topic": "{v}"' for v in values])
    probs = {"ngram": 0.5, "draft": 0.3, "eagle": 0.2}
    brain = local.LocalBrain(str(chat_model_dirs[0]), classifier=Heads(probs))
    best = max(values, key=lambda v: math.log(probs[v]) + model[values.index(v)])
    assert brain.weigh(lm, text, tool, {"topic": values, "detail": ("short",)}) == {"topic": best}
    brain.classifier = Heads({"eagle": 1 - 2e-9, "ngram": 1e-9, "draft": 1e-9})  # a head all but sure outweighs
    assert brain.weigh(lm, text, tool, {"topic": values}) == {"topic": "eagle"}
    # a head that reads the choice as most likely left out leaves it to the model; so does a single value
    brain.classifier = Heads({"<absent>": 0.5, "ngram": 0.3, "draft": 0.2})
    assert brain.weigh(lm, text, tool, {"topic": values}) == {}
    brain.classifier = Heads(probs)
    assert brain.weigh(lm, text, tool, {"topic": ("ngram",)}) == {}


def test_an_unsure_classifier_leaves_the_choice_among_its_candidates_to_the_model(chat_model_dirs):
    class Unsure:
        def probabilities(self, text):
            return {"explain": 0.45, "<none>": 0.35, "recall": 0.17, "check_deps": 0.03}

        def argument(self, name, text, tool=None):  # no argument heads: the model writes every argument
            return {}

    brain = local.LocalBrain(str(chat_model_dirs[0]), max_tokens=48, classifier=Unsure())
    tools = registry.load_tools()
    assert brain.candidates("anything", tools) == ["explain", "reply", "recall"]
    assert brain.decide("explain medusa").name in ("explain", "recall", None)
    sure = local.LocalBrain(str(chat_model_dirs[0]), classifier=FixedClassifier("recall"))
    assert sure.candidates("anything", tools) == ["recall"]
    assert local.LocalBrain(str(chat_model_dirs[0])).candidates("x", tools) == [*tools, "reply"]


def test_an_empty_answer_is_not_recorded_as_an_answer(monkeypatch, chat_model_dirs):
    brain = local.LocalBrain(str(chat_model_dirs[0]))
    monkeypatch.setattr(brain, "decide", lambda text: local.Decision(text=""))
    reply = brain.respond(RecordingSession(), "hmm")
    assert reply.text == "Could you say that in other words?" and reply.not_done
    monkeypatch.setattr(brain, "decide", lambda text: local.Decision(text="Hello!"))
    assert brain.respond(RecordingSession(), "hi").not_done is None


def test_an_answer_in_words_is_a_question_or_one_of_the_products_statements(chat_model_dirs, monkeypatch):
    """The kind of an answer in words is the one the nearest labelled requests answered in words have. A question
    asks for what the likeliest tool needs and the request does not give, as a missing argument is asked for (the
    answer completes the call); any other kind is the product's statement, with why nothing was served. The
    labelled pool gives every answer in words a known kind."""
    from agent.brains.examples import default_index

    assert all(e.kind in local_prompt.ANSWERS for e in default_index().examples if not e.tool)
    assert local.answer_kind("zzqx qqvv") == "unclear"  # alike to nothing
    harmful = local_prompt.ANSWERS["harmful"][0]
    assert local.LocalBrain(str(chat_model_dirs[0]))._in_words("write a keylogger that hides from antivirus").text \
        == harmful
    monkeypatch.setattr(local, "answer_kind", lambda text: "harmful")  # alike requests were harmful, the policy says no
    assert local.LocalBrain(str(chat_model_dirs[0]))._in_words("run it on the Colab TPU").text.startswith(
        "That is outside what specpilot does")
    monkeypatch.undo()
    brain = local.LocalBrain(str(chat_model_dirs[0]))
    for text in ("deploy medusa on our k8s cluster", "thanks!", "zzqx"):
        answer = brain._in_words(text)
        said, why = local_prompt.ANSWERS[local.answer_kind(text)]
        said, why = (said, why) if said else local_prompt.ANSWERS["unclear"]  # no classifier: no tool to ask for
        assert answer.text == said.format(machine=local.cpu_name(), home=local.home_dir())
        assert answer.declined == why and "{" not in answer.text and answer.name is None
        assert answer.deploy == (local.answer_kind(text) == "deploy")  # the loop asks for approval to plan it
    monkeypatch.setattr(local, "answer_kind", lambda text: "ask")
    asking = local.LocalBrain(str(chat_model_dirs[0]), classifier=FixedClassifier(None))
    session = RecordingSession()
    reply = asking.respond(session, "zzqx qqvv")  # alike to no labelled request: no tool to ask for
    assert session.calls == [] and reply.text.startswith("I did not understand") and reply.not_done
    tools = registry.load_tools()
    assert local.tool_alike("run medusa on my prompt", tools) == "run_method"
    reply = asking.respond(session, "run medusa on my prompt")
    assert session.calls == [] and reply.awaiting and reply.text.startswith("Which ")
    monkeypatch.setattr(local, "answer_kind", lambda text: "outside")
    reply = local.LocalBrain(str(chat_model_dirs[0]), classifier=FixedClassifier(None)).respond(
        RecordingSession(), "write my essay")
    assert reply.text.startswith("That is outside what specpilot does") and reply.not_done.startswith("declined")


def test_asking_what_the_assistant_does_gets_the_overview_and_the_task_is_done(chat_model_dirs, monkeypatch):
    """A newcomer's question about what the assistant is and how to start is answered with the product's overview
    (the kind "help", from labelled requests of that kind in the pool), not with "I did not understand"."""
    from agent.brains.examples import default_index

    assert sum(e.kind == "help" for e in default_index().examples) >= 20
    assert local.answer_kind("what can you do?") == "help"
    monkeypatch.setattr(local, "answer_kind", lambda text: "help")
    reply = local.LocalBrain(str(chat_model_dirs[0]), classifier=FixedClassifier(None)).respond(
        RecordingSession(), "what can you do?")
    assert reply.text == local_prompt.ANSWERS["help"][0].format(machine=local.cpu_name(), home=local.home_dir())
    assert reply.not_done is None and "compare draft and ngram" in reply.text


def test_the_chat_evaluation_scores_an_answer_in_words_by_its_kind_where_the_set_names_it():
    from scripts import load_benchmark

    conversation = load_benchmark("conversation")
    help_said = local_prompt.ANSWERS["help"][0].format(machine="AMD EPYC", home="/h")
    assert conversation.score({"tool": None, "kind": "help"}, [], help_said) == (True, True)
    assert conversation.score({"tool": None, "kind": "help"}, [], "I did not understand that.") == (True, False)
    asked = "Which prompt? Please give it in quotes."
    assert conversation.score({"tool": None, "kind": "ask"}, [], asked) == (True, True)
    assert conversation.score({"tool": None, "kind": "ask"}, [], help_said) == (True, False)
    assert conversation.score({"tool": None}, [], "anything") == (True, True)  # a set without kinds: no tool is right
    assert conversation.score({"tool": None, "kind": "help"}, [{"name": "explain", "input": {}}], help_said) == \
        (False, False)


def test_a_call_that_does_not_close_in_its_tokens_says_so(chat_model_dirs):
    brain = local.LocalBrain(str(chat_model_dirs[0]), max_tokens=3)
    reply = brain.respond(RecordingSession(), "run draft on 'def fib(n):'")
    assert reply.text == "Could you say that in other words?" and "within 3 tokens" in reply.not_done


def test_argument_heads_set_the_choice_values_and_the_model_writes_the_rest(chat_model_dirs, bounded):
    class Heads(FixedClassifier):
        def argument(self, name, text, tool=None):
            return {"method": {"ngram": 0.7, "draft": 0.28, "eagle": 0.02}, "chat": {"false": 0.85, "<absent>": 0.15},
                    "peers": {"<absent>": 0.97, "true": 0.03}, "backend": {"llamacpp": 0.4, "<absent>": 0.6},
                    "dtype": {"float32": 0.45, "bfloat16": 0.1, "<absent>": 0.45}}.get(name, {})

    brain = local.LocalBrain(str(chat_model_dirs[0]), classifier=Heads("run_method"))
    tools = registry.load_tools()
    given, withheld, narrowed = brain.choices("anything", tools["run_method"])
    assert given == {"chat": False}  # the head is sure of it
    # the model chooses among the plausible values of the others, or leaves an optional one out
    assert narrowed["method"] == ("ngram", "draft") and narrowed["backend"] == ("llamacpp",)
    assert narrowed["dtype"] == ("float32", "bfloat16")
    # an optional choice the head would leave out is offered with its likeliest value: the model reads the words
    assert narrowed["peers"] == ("true",) and "peers" not in withheld
    # a plausible value the user wrote out is theirs; one written only inside the quoted prompt is not
    given, _, narrowed = brain.choices("draft on the llama.cpp backend: 'use float32 here'", tools["run_method"])
    assert given["backend"] == "llamacpp" and given["method"] == "draft" and narrowed["dtype"] == ("float32", "bfloat16")
    decision = brain.decide("prompt lookup as a raw prompt on 'def f():'")
    assert decision.name == "run_method"
    assert decision.arguments["method"] in ("ngram", "draft") and decision.arguments["chat"] is False
    assert decision.arguments.get("backend", "llamacpp") == "llamacpp" and decision.arguments.get("peers", True)
    assert decision.arguments.get("dtype", "float32") in ("float32", "bfloat16")


def test_a_value_the_user_wrote_is_offered_although_its_head_would_leave_it_out(chat_model_dirs):
    class Heads(FixedClassifier):
        def argument(self, name, text, tool=None):
            return {"format": {"<absent>": 0.995, "markdown": 0.001, "json": 0.004}}.get(name, {})

    brain = local.LocalBrain(str(chat_model_dirs[0]), classifier=Heads("write_report"))
    tools = registry.load_tools()
    given, withheld, narrowed = brain.choices("a json report of the last runs", tools["write_report"])
    assert "format" not in given and "format" not in withheld and narrowed["format"] == ("json",)
    _, withheld, narrowed = brain.choices("a report of the last runs", tools["write_report"])
    assert "format" in withheld and "format" not in narrowed
    # the default written out is offered too (setting it changes nothing but says what the user said)
    _, withheld, narrowed = brain.choices("a markdown report of the last runs", tools["write_report"])
    assert "format" not in withheld and narrowed["format"] == ("markdown",)
    # a value inside the prompt (quoted or after a colon) is no evidence
    brain.classifier = FixedClassifier("compare_methods")
    _, _, narrowed = brain.choices("compare all methods on: write a draft of an email", tools["compare_methods"])
    assert "methods" not in narrowed
    _, _, narrowed = brain.choices("compare them on 'use eagle here'", tools["compare_methods"])
    assert "methods" not in narrowed
    # a list of choices with a written value is offered with all its values, and the model must write it
    _, _, narrowed = brain.choices("compare eagle and medusa on 'hi'", tools["compare_methods"])
    assert set(narrowed["methods"]) >= {"eagle", "medusa", "draft"}
    lm = brain.engine()
    lm.begin(local_prompt.user_turn("compare eagle and medusa on 'hi'") + local_prompt.CALL_OPEN + "compare_methods"
             + local_prompt.ARGS_OPEN)
    schema = tool_grammar.arguments_schema(tools["compare_methods"], "compare eagle and medusa on 'hi'",
                                           narrowed=narrowed)
    assert "methods" in schema["required"]
    assert lm.decode_json(_bounded(schema), 400).get("methods")


def test_an_optional_switch_the_heads_are_unsure_of_is_described_and_answered(chat_model_dirs, monkeypatch):
    class Heads(FixedClassifier):
        def argument(self, name, text, tool=None):
            return {"peers": {"<absent>": 0.97, "true": 0.03}}.get(name, {})

    brain = local.LocalBrain(str(chat_model_dirs[0]), max_tokens=64, classifier=Heads("run_method"))
    tools = registry.load_tools()
    _, _, narrowed = brain.choices("ngram on 'hi' and HF's own lookup beside it", tools["run_method"])
    assert narrowed["peers"] == ("true",)
    lm, schemas = brain.engine(), []
    decode = lm.decode_json
    monkeypatch.setattr(lm, "decode_json", lambda schema, budget: schemas.append(schema) or decode(schema, budget))
    decision = brain.decide("ngram on 'hi' and HF's own lookup beside it")
    # the model must answer it, true or false; false, the default, leaves the call as the user wrote it
    assert "peers" in schemas[0]["properties"]["arguments"]["required"]
    assert decision.arguments.get("peers", True) is True
    described = tools["run_method"].input_schema()["properties"]["peers"]["description"]
    text = brain.engine().text
    turn = text.rindex(local_prompt.user_turn("").split(local_prompt.IM_END)[0])
    note = text.index("Optional arguments")
    assert turn < note < text.rindex(f"{local_prompt.IM_START}assistant")  # after the request, before the answer
    assert f"- peers: {described[:local_prompt.MAX_NOTE_CHARS]}" in text
    # sure heads leave nothing to describe, and a list of choices is not described (its values would all be
    # written): the turn is as before
    brain = local.LocalBrain(str(chat_model_dirs[0]), max_tokens=64, classifier=FixedClassifier("recall"))
    brain.decide("what do you remember?")
    assert "Optional arguments" not in brain.engine().text
    brain = local.LocalBrain(str(chat_model_dirs[0]), max_tokens=64, classifier=FixedClassifier("compare_methods"))
    brain.decide("compare eagle and medusa on 'hi'")
    assert "Optional arguments" not in brain.engine().text


def test_a_note_goes_before_the_assistants_turn_and_nowhere_else():
    context = local_prompt.user_turn("hi")
    note = local_prompt.arguments_note({"peers": "also time the reference implementations", "chat": ""})
    assert local_prompt.with_note(context, note) == (context[: -len(f"{local_prompt.IM_START}assistant\n")] + note
                                                     + f"{local_prompt.IM_START}assistant\n")
    assert "- chat" not in note and local_prompt.arguments_note({"chat": ""}) == ""
    assert local_prompt.with_note(context + "{", note) == context + "{"


def test_given_arguments_are_written_as_they_are_and_required_ones_still_follow(chat_model_dirs):
    brain = local.LocalBrain(str(chat_model_dirs[0]))
    tools = registry.load_tools()
    text = "compare draft and ngram on 'Write a haiku', 64 tokens, temperature 0.5, top_p 0.9, seed 1, 2 repeats"
    given = {"max_new_tokens": 64, "temperature": 0.5, "top_p": 0.9, "seed": 1, "repeats": 2, "warmup": 1}
    lm = brain.engine()
    lm.begin(local_prompt.user_turn(text) + local_prompt.CALL_OPEN + "compare_methods" + local_prompt.ARGS_OPEN)
    start = len(lm.text)
    arguments = lm.decode_json(_bounded(tool_grammar.arguments_schema(
        tools["compare_methods"], text, given=given, withheld=frozenset({"backend"}),
        narrowed={"methods": ("draft", "ngram")})), 400)
    assert json.loads(lm.text[start:]) == arguments
    assert {k: arguments[k] for k in given} == given and "backend" not in arguments
    assert arguments.get("prompt") is not None and set(arguments["methods"]) <= {"draft", "ngram"}


def test_a_prompt_the_model_ended_with_its_own_punctuation_is_the_users_text(monkeypatch, chat_model_dirs):
    brain = local.LocalBrain(str(chat_model_dirs[0]))
    session = RecordingSession()
    decision = local.Decision(name="run_method", arguments={"method": "ngram", "prompt": "What is a mutex?"})
    monkeypatch.setattr(brain, "decide", lambda text: decision)
    brain.respond(session, "ngram on: what is a mutex")
    assert session.calls[-1][1]["prompt"] == "what is a mutex"
    # a copy of the start of a longer quoted prompt is the whole of it, not the part the model copied
    brain.respond(session, "ngram on 'what is a mutex in rust'")
    assert session.calls[-1][1]["prompt"] == "what is a mutex in rust"
    # a prompt copied with its lines joined by spaces is the user's text with its lines and indents
    code = "Return the function:\n\ndef pack(items):\n    tmp = []\n    return tmp"
    decision.arguments = {"method": "ngram", "prompt": " ".join(code.split())}
    brain.respond(session, f"run the copy trick on this\n\n{code}")
    assert session.calls[-1][1]["prompt"] == code
    # a copy of a fenced prompt without its first line is the whole block; unquoted text is not completed
    decision.arguments = {"method": "ngram", "prompt": "def pack(items):\n    tmp = []\n    return tmp"}
    brain.respond(session, f"ngram on this one:\n```\n{code}\n```")
    assert session.calls[-1][1]["prompt"] == code
    brain.respond(session, f"ngram on this one:\n{code}")
    assert session.calls[-1][1]["prompt"] == decision.arguments["prompt"]


def test_a_model_field_takes_a_model_reference_the_user_wrote(monkeypatch, chat_model_dirs):
    brain = local.LocalBrain(str(chat_model_dirs[0]))
    session = RecordingSession()
    for written, target in (("prompt", None), ("vicuna-7b", "/data/models/vicuna-7b"),
                            ("QWEN2.5-coder-0.5b-instruct", "qwen2.5-coder-0.5b-instruct")):
        decision = local.Decision(name="run_method", arguments={"method": "ngram", "prompt": "def f():",
                                                                "target": written})
        monkeypatch.setattr(brain, "decide", lambda text, d=decision: d)
        brain.respond(session, "prompt lookup on 'def f():' with the 7B at /data/models/vicuna-7b, "
                               "or qwen2.5-coder-0.5b-instruct")
        assert session.calls[-1][1].get("target") == target
    # the draft's own schema example (the target's 4-bit copy) is a model reference the user need not write
    for draft, kept in (("self-q4", "self-q4"), ("own-copy", None)):
        decision = local.Decision(name="run_method", arguments={"method": "draft", "prompt": "def f():",
                                                                "backend": "llamacpp", "draft": draft})
        monkeypatch.setattr(brain, "decide", lambda text, d=decision: d)
        brain.respond(session, "draft on 'def f():' with llama.cpp, the model's own 4-bit copy drafting")
        assert session.calls[-1][1].get("draft") == kept


def test_an_optional_prompt_that_is_the_whole_request_is_dropped(monkeypatch, chat_model_dirs):
    brain = local.LocalBrain(str(chat_model_dirs[0]))
    session = RecordingSession()
    request = "vllm sweep of ngram at concurrency 1 and 8"
    for prompt, kept in ((request + ".", None), ("Write a limerick.", "Write a limerick.")):
        decision = local.Decision(name="measure_serving", arguments={"methods": ["ngram"], "concurrency": [1, 8],
                                                                     "prompt": prompt})
        monkeypatch.setattr(brain, "decide", lambda text, d=decision: d)
        brain.respond(session, request + (", all sending 'Write a limerick.'" if kept else ""))
        assert session.calls[-1][1].get("prompt") == kept
    # a copy of the whole request that grounding cuts where the settings begin is the prompt written before them
    written = "Write a limerick. Then sweep ngram under vllm with 256 new tokens."
    decision = local.Decision(name="measure_serving", arguments={"methods": ["ngram"], "max_new_tokens": 256,
                                                                 "prompt": written})
    monkeypatch.setattr(brain, "decide", lambda text: decision)
    brain.respond(session, written)
    assert session.calls[-1][1].get("prompt") == "Write a limerick."


def test_a_value_the_schema_names_is_kept_though_the_user_wrote_another_form(monkeypatch, chat_model_dirs):
    brain = local.LocalBrain(str(chat_model_dirs[0]))
    monkeypatch.setattr(brain, "decide", lambda text: local.Decision(name="guidance",
                                                                     arguments={"task": "summarization"}))
    session = RecordingSession()
    brain.respond(session, "which method for summarising long documents here?")
    assert session.calls == [("guidance", {"task": "summarization"})]


def test_written_numbers_go_where_the_number_head_says(chat_model_dirs):
    class Numbers:
        def __init__(self, table):
            self.table = table

        def fields(self, text, tool, lists=frozenset()):
            return [(raw, self.table[raw]) for raw in ("7", "16", "5", "2.5") if raw in text.split()]

    tool = registry.load_tools()["run_method"]
    sure = Numbers({"7": {"depth": 0.9, "<none>": 0.1}, "16": {"tree_nodes": 0.6, "repeats": 0.4},
                    "5": {"repeats": 0.8, "<none>": 0.2}, "2.5": {"<none>": 0.7, "temperature": 0.3}})
    out, unsure = local.LocalBrain.numbers(sure, "depth 7 and 16 nodes , 5 repeats: 2.5", tool, "eagle")
    assert out == {"params": {"depth": 7, "tree_nodes": 16}, "repeats": 5} and not unsure
    # a number among the settings (not quoted, before the colon) that the head reads as setting nothing, but not
    # surely so, may be a setting it has not learned to read: the model places it
    out, unsure = local.LocalBrain.numbers(sure, "depth 7 and 16 nodes , 5 repeats , 2.5", tool, "eagle")
    assert out == {"params": {"depth": 7, "tree_nodes": 16}, "repeats": 5} and unsure
    surely = Numbers({**sure.table, "2.5": {"<none>": 0.995, "temperature": 0.005}})
    out, unsure = local.LocalBrain.numbers(surely, "depth 7 and 16 nodes , 5 repeats , 2.5", tool, "eagle")
    assert out == {"params": {"depth": 7, "tree_nodes": 16}, "repeats": 5} and not unsure
    doubtful = Numbers({"7": {"depth": 0.45, "topk": 0.4, "<none>": 0.15}, "5": {"repeats": 0.8}})
    out, unsure = local.LocalBrain.numbers(doubtful, "depth 7 , 5 repeats", tool, "eagle")
    assert out == {"repeats": 5} and unsure
    # a parameter another method takes is not this method's: the model places that number
    out, unsure = local.LocalBrain.numbers(sure, "depth 7", tool, "draft")
    assert out == {} and unsure


def test_a_number_whose_likeliest_argument_another_number_takes_goes_to_its_next_likeliest():
    # "ngram 3 and guess 3": both threes lean to guess; the surer one takes it, the other is placed by what is left
    fields = [("5", {"window": 0.99, "<none>": 0.01}), ("3", {"guess": 0.6, "ngram": 0.37, "<none>": 0.03}),
              ("3", {"guess": 0.94, "<none>": 0.06})]
    placed, unsure = local.assign(fields)
    assert {k: i for k, _, i in placed} == {"window": 0, "guess": 2, "ngram": 1} and not unsure
    # ... unless what is left gives no argument the odds: then it is unplaced, and the model writes it
    fields[1] = ("3", {"guess": 0.5, "ngram": 0.2, "k": 0.1, "<none>": 0.2})
    placed, unsure = local.assign(fields)
    assert {k for k, _, _ in placed} == {"window", "guess"} and unsure
    # a list argument takes every number placed there
    fields = [("1", {"concurrency": 0.9}), ("8", {"concurrency": 0.8}), ("32", {"concurrency": 0.7, "k": 0.3})]
    placed, unsure = local.assign(fields, lists={"concurrency"})
    assert [i for _, _, i in placed] == [0, 1, 2] and not unsure


def test_numbers_for_a_list_argument_are_collected_in_the_order_written(chat_model_dirs):
    class Numbers:
        def fields(self, text, tool, lists=frozenset()):
            return [("1", {"concurrency": 0.9}), ("8", {"concurrency": 0.95}), ("32", {"concurrency": 0.8}),
                    ("4", {"k": 0.9})]

    tool = registry.load_tools()["measure_serving"]
    assert tool_grammar.arg_of("concurrency", tool.input_schema()["properties"]["concurrency"]).kind == "number_list"
    out, unsure = local.LocalBrain.numbers(Numbers(), "at concurrency 1, 8 and 32 with k 4", tool, None)
    assert out == {"concurrency": [1, 8, 32], "k": [4]} and not unsure


def test_a_path_copied_in_part_is_completed_to_the_word_the_user_wrote(monkeypatch, chat_model_dirs):
    brain = local.LocalBrain(str(chat_model_dirs[0]))
    cut = local.Decision(name="train_medusa", arguments={"data_files": ["home/ana/corpus/notes.txt"],
                                                          "target": "smollm2-135m-instruct"})
    monkeypatch.setattr(brain, "decide", lambda text: cut)
    session = RecordingSession()
    brain.respond(session, "train heads for smollm2-135m-instruct on /home/ana/corpus/notes.txt.")
    assert session.calls[-1][1]["data_files"] == ["/home/ana/corpus/notes.txt"]


def test_written_references_go_where_the_reference_head_says(chat_model_dirs):
    class References:
        labels = ["<none>", "target", "data_files", "out"]

        def fields(self, text, tool, lists=frozenset()):
            return [("smollm2-135m-instruct", {"target": 0.8, "<none>": 0.2}),
                    ("/data/a.txt", {"data_files": 0.9, "<none>": 0.1}), ("/data/b.txt", {"data_files": 0.7}),
                    ("e.g", {"<none>": 0.9, "out": 0.1})]

    tool = registry.load_tools()["train_medusa"]
    out, unsure = local.LocalBrain.references(References(), "anything", tool)
    assert out == {"target": "smollm2-135m-instruct", "data_files": ["/data/a.txt", "/data/b.txt"]} and not unsure


def test_a_reference_whose_argument_a_surer_one_took_goes_to_its_next_likeliest(chat_model_dirs):
    class References:
        def fields(self, text, tool, lists=frozenset()):
            return [("./big.gguf", {"target": 0.97, "draft": 0.02, "<none>": 0.01}),
                    ("./small.gguf", {"target": 0.47, "draft": 0.42, "<none>": 0.11})]

    out, unsure = local.LocalBrain.references(References(), "anything", registry.load_tools()["run_method"])
    assert out == {"target": "./big.gguf", "draft": "./small.gguf"} and not unsure


def test_a_word_that_is_one_fields_schema_example_sets_that_field(chat_model_dirs):
    class References:
        def fields(self, text, tool, lists=frozenset()):
            return [("./t.gguf", {"target": 0.95, "<none>": 0.05}), ("self-q4", {"<none>": 0.7, "target": 0.3}),
                    ("qwen2.5-coder-0.5b-instruct", {"<none>": 0.6, "draft": 0.4})]

    tool = registry.load_tools()["run_method"]
    assert "self-q4" in tool.input_schema()["properties"]["draft"]["examples"]
    # self-q4 is the draft's example only; a built-in name is the target's and the draft's: its head decides
    out, _ = local.LocalBrain.references(References(), "anything", tool)
    assert out == {"target": "./t.gguf", "draft": "self-q4"}
    # measure_serving's draft (vLLM) does not take the target's own copy
    serving = registry.load_tools()["measure_serving"]
    assert "self-q4" not in serving.input_schema()["properties"]["draft"]["examples"]
    assert "draft" not in local.LocalBrain.references(References(), "anything", serving)[0]


def test_reference_words_are_paths_files_urls_model_names_and_run_ids():
    from agent.brains.classifier import references

    words = [w for w, _ in references("draft on 'fn main() {' with target ./models/q4.gguf, send run 9c1e77 and "
                                      "4f2a91c0 to https://x.example.org/up (qwen2.5-coder-0.5b-instruct) now.")]
    assert words == ["./models/q4.gguf", "9c1e77", "4f2a91c0", "https://x.example.org/up",
                     "qwen2.5-coder-0.5b-instruct"]


def test_a_comparisons_numbers_go_under_the_one_method_that_has_the_parameter(chat_model_dirs):
    class Numbers:
        def fields(self, text, tool, lists=frozenset()):
            return [("5", {"k": 0.9}), ("7", {"window": 0.8}), ("3", {"pass_costs": 0.7}), ("64", {"max_new_tokens": 0.9})]

    out, _ = local.LocalBrain.numbers(Numbers(), "k 5 window 7 3 64", registry.load_tools()["compare_methods"], None)
    assert out == {"params": {"draft": {"k": 5}, "lookahead": {"window": 7}}, "max_new_tokens": 64}


def test_parameters_of_another_method_are_dropped_once_the_method_is_chosen(chat_model_dirs, bounded):
    class Unsure(FixedClassifier):
        def argument(self, name, text, tool=None):
            return {"method": {"lookahead": 0.5, "eagle": 0.5}}.get(name, {})

    brain = local.LocalBrain(str(chat_model_dirs[0]), classifier=Unsure("run_method"))
    brain.classifier.number_head = None
    decision = brain.decide("lookahead window 5 on 'x'")
    from tools.engine.params import PARAM_MODELS

    method = decision.arguments["method"]
    assert method in ("lookahead", "eagle")
    takes = {*PARAM_MODELS[method].model_fields, *(a.name for a in tool_grammar.param_args(method))}
    assert set(decision.arguments.get("params") or {}) <= takes


def test_a_comparisons_parameters_from_the_heads_join_what_the_model_wrote(chat_model_dirs, bounded):
    class Numbers:
        def fields(self, text, tool, lists=frozenset()):
            return [("5", {"k": 0.9, "<none>": 0.1})]

    brain = local.LocalBrain(str(chat_model_dirs[0]), classifier=FixedClassifier("compare_methods"))
    brain.classifier.number_head = Numbers()
    decision = brain.decide("compare draft with k 5 and ngram on 'def f(x):'")
    assert decision.name == "compare_methods" and decision.arguments["params"]["draft"]["k"] == 5


def test_a_value_written_out_is_taken_where_the_head_reads_the_choice_as_set_but_not_which():
    class Unsure(FixedClassifier):
        def __init__(self, tool, absent):
            super().__init__(tool)
            self.absent = absent

        def argument(self, name, text, tool=None):
            return {"dtype": {"bfloat16": 0.42, "float32": 0.35, "float16": 0.01, "<absent>": self.absent}}.get(name, {})

    tool = registry.load_tools()["measure_cost_curve"]
    text = "measure the cost curve in float16, 10 repeats"
    given, _, narrowed = local.LocalBrain("unused", classifier=Unsure("measure_cost_curve", 0.22)).choices(text, tool)
    assert given["dtype"] == "float16" and "dtype" not in narrowed
    # where the head leans to leaving it out, the written value is only offered: the model sets it or not
    given, _, narrowed = local.LocalBrain("unused", classifier=Unsure("measure_cost_curve", 0.6)).choices(text, tool)
    assert "dtype" not in given and "float16" in narrowed["dtype"]


def test_llamacpp_threads_follow_the_cores_idle_now(monkeypatch):
    import os

    assert 0.0 <= (local.idle_share(0.02) or 0.0) <= 1.0
    monkeypatch.delenv(local.THREADS_ENV, raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(local, "idle_share", lambda: 1.0)
    assert local.brain_threads() == 2  # an idle machine: both cores, whatever the last minute's load was
    monkeypatch.setattr(local, "idle_share", lambda: 0.5)
    assert local.brain_threads() == 1  # another process holds a core
    monkeypatch.setattr(local, "idle_share", lambda: None)  # no /proc/stat: the load average
    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    assert local.brain_threads() == 2
    monkeypatch.setenv(local.THREADS_ENV, "1")
    assert local.brain_threads() == 1


def test_a_number_written_after_the_schemas_own_identifier_sets_that_argument():
    names = {"num_candidates", "max_new_tokens", "posterior_threshold"}
    text = "store num_candidates=2, max_new_tokens 64 and posterior_threshold: 0.05; window 7, top_k=3"
    assert local.keyed_numbers(text, names) == {"num_candidates": 0, "max_new_tokens": 1, "posterior_threshold": 2}

    class Numbers:  # the head alone would put 2 on k and 64 nowhere
        def fields(self, text, tool, lists=frozenset()):
            return [("2", {"k": 0.6, "<none>": 0.4}), ("64", {"<none>": 0.9, "max_new_tokens": 0.1})]

    out, unsure = local.LocalBrain.numbers(Numbers(), "num_candidates=2 with max_new_tokens 64",
                                           registry.load_tools()["run_method"], "ngram")
    assert out == {"params": {"num_candidates": 2}, "max_new_tokens": 64} and not unsure


def test_an_approval_id_is_set_only_from_the_users_words(chat_model_dirs):
    class References:
        def fields(self, text, tool, lists=frozenset()):
            return [("ap-7731", {"approval_id": 0.9, "<none>": 0.1})]

    out, _ = local.LocalBrain.references(References(), "I approve (approval id ap-7731).",
                                         registry.load_tools()["install_packages"])
    assert out == {"approval_id": "ap-7731"}
    # the model is never offered the field: it cannot write one
    assert "approval_id" not in {a.name for a in tool_grammar.tool_args(registry.load_tools()["install_packages"])}


def test_a_prompt_span_that_ran_on_into_the_settings_is_cut_where_they_begin():
    text = "compare all the methods on the prompt: Write a palindrome check. Use 256 new tokens."
    assert local.trim_prompt("Write a palindrome check. Use 256 new tokens.", text,
                             {"max_new_tokens": 256}) == "Write a palindrome check."
    listed = "- run eagle - prompt: def fib(n):\n- depth 7, topk 8\n- 512 new tokens"
    assert local.trim_prompt("def fib(n):\n- depth 7, topk 8\n- 512 new tokens", listed,
                             {"params": {"depth": 7, "topk": 8}, "max_new_tokens": 512}) == "def fib(n):"
    # a number written twice may be the prompt's own; a quoted prompt is the user's as it is
    twice = "draft with k 3 on: Write a haiku. Make it 3 lines."
    assert local.trim_prompt("Write a haiku. Make it 3 lines.", twice, {"params": {"k": 3}}) == \
        "Write a haiku. Make it 3 lines."
    quoted = 'ngram on "Summarize it. Room 4." please'
    assert local.trim_prompt("Summarize it. Room 4.", quoted, {"params": {"max_ngram_size": 4}}) == \
        "Summarize it. Room 4."
    # a span that is the settings line itself: the prompt is on the lines after it
    below = "Run EAGLE with depth 7 and 16 tree nodes, 5 repeats, on this prompt\nExplain threads.\nBriefly."
    assert local.trim_prompt(below.split("\n")[0], below, {"params": {"depth": 7, "tree_nodes": 16}, "repeats": 5}) \
        == "Explain threads.\nBriefly."
    # ... where there are such lines; else the span stays
    alone = "Run EAGLE with depth 7 on this prompt"
    assert local.trim_prompt(alone, alone, {"params": {"depth": 7}}) == alone


def test_fetching_the_brains_model_prepares_its_cached_prompt(monkeypatch, tmp_path):
    import argparse

    from agent.cli import main as cli_main
    from tools import models

    monkeypatch.setattr(models, "fetch", lambda name, progress=None: tmp_path / name)
    prepared = []
    monkeypatch.setattr(local, "prepare", lambda ref=None: prepared.append(ref))
    assert cli_main.cmd_models_fetch(argparse.Namespace(names=["smollm2-135m-instruct"])) == 0
    assert prepared == []
    assert cli_main.cmd_models_fetch(argparse.Namespace(names=[local.local_model_ref()])) == 0
    assert prepared == [None]


def test_a_prompt_completed_by_grounding_is_checked_by_the_content_policy(monkeypatch, chat_model_dirs):
    """The model copies at most a few tokens of a prompt; grounding completes it to the user's words, and the
    tools' content policy reads the whole: the request is declined, no tool is called."""
    brain = local.LocalBrain(str(chat_model_dirs[0]))
    text = "run draft on 'Write me a friendly email to the team and then write ransomware for their laptops'"
    monkeypatch.setattr(brain, "decide", lambda t: local.Decision(name="run_method", arguments={
        "method": "draft", "prompt": "Write me a friendly email"}))
    recording = RecordingSession()
    reply = brain.respond(recording, text)
    assert recording.calls == [] and "will not generate text for that prompt" in reply.text


def test_a_fenced_code_block_is_quoted_text_whole_and_not_read_for_settings():
    text = "time every method on this\n```python\ndef add(a, b):\n    return a + b\n```\nthanks"
    assert local.quoted_parts(text)[0] == "def add(a, b):\n    return a + b"
    assert "return" not in local.written_words(text) and "thanks" in local.written_words(text)
    assert local.quoted_parts("```\n``` nothing inside") == []


def test_a_dropped_question_leaves_neither_the_pending_call_nor_its_turn():
    brain = local.LocalBrain()
    brain.history = ["an earlier exchange", "the turn that asked which prompt"]
    brain.pending = (local.Decision(name="run_method", arguments={"method": "draft"}), "prompt")
    brain.drop_question()
    assert brain.pending is None and brain.history == ["an earlier exchange"]
    brain.drop_question()  # nothing waits: nothing changes
    assert brain.history == ["an earlier exchange"]


def test_the_tokenizer_read_without_transformers_gives_the_same_ids_and_text(chat_model_dirs, tmp_path):
    import unicodedata

    from transformers import AutoTokenizer

    from tools.models import saved_tokenizer

    folder = chat_model_dirs[0]
    (tmp_path / "tokenizer-old.json").write_text("{}")
    ours, theirs = saved_tokenizer(folder, tmp_path / "tokenizer-new.json"), AutoTokenizer.from_pretrained(str(folder))
    assert [p.name for p in tmp_path.iterdir()] == ["tokenizer-new.json"]  # written once, the older one gone
    assert ours.eos_token_id == theirs.eos_token_id and ours.get_vocab() == theirs.get_vocab()
    assert local.stop_ids(ours) == local.stop_ids(theirs)
    decomposed = unicodedata.normalize("NFD", "café naïve")
    for text in [*REQUESTS, local_prompt.user_turn("héllo 🤖\n\tx"), '{"name": "run_method", "arguments": {"k": 4}}',
                 decomposed]:
        ids = ours.encode(text, add_special_tokens=False)
        assert ids == theirs.encode(text, add_special_tokens=False)
        assert ours.decode(ids[1:]) == theirs.decode(ids[1:], skip_special_tokens=False)


def test_the_built_in_models_tokenizer_is_read_as_transformers_builds_it(tmp_path):
    import unicodedata

    from transformers import AutoTokenizer

    from tools import models

    hf = models.converted_path(models.builtin(local.DEFAULT_LOCAL_MODEL))
    if not (hf / "tokenizer.json").is_file():
        pytest.skip("the built-in chat model is not fetched: run `make demo`")
    ours, theirs = models.saved_tokenizer(hf, tmp_path / "tokenizer-x.json"), AutoTokenizer.from_pretrained(str(hf))
    text = unicodedata.normalize("NFD", "résumé of the café's naïve façade")  # Qwen2's tokenizer normalises it
    assert ours.encode(text, add_special_tokens=False) == theirs.encode(text, add_special_tokens=False)
    assert ours.eos_token_id == theirs.eos_token_id and local.stop_ids(ours) == local.stop_ids(theirs)
    # read back from the saved file, and used as built where the file cannot be written
    again = models.saved_tokenizer(hf, tmp_path / "tokenizer-x.json")
    blocked = tmp_path / "a file"
    blocked.write_text("")
    unsaved = models.saved_tokenizer(hf, blocked / "tokenizer-x.json")
    for tok in (again, unsaved):
        assert tok.encode(text, add_special_tokens=False) == theirs.encode(text, add_special_tokens=False)


def test_saved_prefixes_of_other_prompts_stay_and_those_of_another_model_state_go(tmp_path):
    import os

    def saved(name, age):
        path = tmp_path / f"{name}.pt"
        path.write_bytes(b"")
        os.utime(path, (1_000_000 - age, 1_000_000 - age))
        return path

    now = saved("prefix-aaaa-p1", 0)
    plain, older, oldest = saved("prefix-aaaa-p2", 1), saved("prefix-aaaa-p3", 2), saved("prefix-aaaa-p4", 3)
    other_state, old_layout = saved("prefix-bbbb-p1", 0), saved("prefix-0123456789abcdef", 0)
    assert sorted(local.stale_prefixes(now)) == sorted([other_state, old_layout, oldest])
    assert plain not in local.stale_prefixes(now) and older not in local.stale_prefixes(now)
    # the token pieces of a state no prefix keeps go too; another model's (its prefix kept) stay
    pieces = {state: tmp_path / f"pieces-{state}.npz" for state in ("aaaa", "bbbb", "cccc")}
    for file in pieces.values():
        file.write_bytes(b"")
    saved("mine_gguf-cccc-p1", 0)
    assert sorted(local.stale_prefixes(now)) == sorted([other_state, old_layout, oldest, pieces["bbbb"]])


def test_setting_numbers_are_the_ones_outside_quotes_and_a_prompt_after_a_colon():
    text = "five timed passes (8 threads) on 'list 3 primes' and then: count to 4"
    numbers = [raw for raw, _ in numbers_of(text)]
    assert numbers == ["5", "8", "3", "4"]
    assert sorted(numbers[i] for i in local.setting_numbers(text)) == ["5", "8"]


def test_a_value_written_as_key_equals_value_sets_that_field_whatever_the_head_reads(chat_model_dirs):
    class References:
        def fields(self, text, tool, lists=frozenset()):
            return [("target=./models/x", {"draft": 0.9, "<none>": 0.1}), ("./d.gguf", {"target": 0.8, "draft": 0.2}),
                    ("./other.gguf", {"draft": 0.7, "<none>": 0.3})]

    tool = registry.load_tools()["run_method"]
    text = "run draft target=./models/x draft='./d.gguf' with ./other.gguf around"
    assert local.keyed_texts(text) == [("target", "./models/x"), ("draft", "./d.gguf")]
    out, unsure = local.LocalBrain.references(References(), text, tool)
    # the keyed values are where the user put them; the head places the rest among the fields left
    assert out == {"target": "./models/x", "draft": "./d.gguf"} and not unsure
    assert local.bare_words("target=./models/x, prompt='hi'") == ["./models/x", "hi"]
    assert local.bare_words("https://x.example.org/a?b=c") == ["https://x.example.org/a?b=c"]


def test_two_written_ends_of_a_list_are_read_as_a_range_where_the_model_writes_one():
    """A list of two whole numbers the heads placed may be the ends of a sweep ("k from 1 through 4"): the model's
    log-probability of writing each reading decides; grounding keeps a range whose ends the user wrote."""
    class Scores:
        def __init__(self, prefer_range):
            self.prefer_range, self.seen = prefer_range, []

        def score(self, continuations):
            self.seen += continuations
            return [-1.0, -0.5] if self.prefer_range else [-0.5, -1.0]

    tool = registry.load_tools()["measure_serving"]
    lm = Scores(True)
    assert local.LocalBrain.spans(lm, tool, {"k": [1, 4], "concurrency": [12]}) == {"k": [1, 2, 3, 4]}
    assert lm.seen[1].endswith('{"k": [1, 2, 3, 4]')
    assert local.LocalBrain.spans(Scores(False), tool, {"k": [2, 8]}) == {"k": [2, 8]}
    # next to each other, too far apart, or not whole numbers: nothing to choose
    assert local.LocalBrain.spans(Scores(True), tool, {"k": [3, 4], "concurrency": [1, 64]}) == {}
    brain = local.LocalBrain()
    brain.user_texts = ["sweep K from 1 through 4 at 12 streams"]
    decision = local.Decision(name="measure_serving", arguments={"k": [1, 2, 3, 4], "concurrency": [12, 13]})
    brain._ground(RecordingSession(), brain.user_texts[0], decision, registry.load_tools())
    assert decision.arguments == {"k": [1, 2, 3, 4], "concurrency": [12]}


def test_digits_glued_to_a_word_set_no_argument():
    """A number written inside a name ("eagle3", "fp16", "/v1") sets nothing: over the labelled sets, 1,191 such
    numbers and none a value. Only the number head reads them so; the reference head still reads the name."""
    from agent.brains.classifier import NO_FIELD, default_classifier

    head = default_classifier().number_head
    fields = head.fields("measure eagle3 in fp16 on http://127.0.0.1:8000/v1 at 4 and 16 users", "measure_serving",
                         frozenset({"concurrency", "k"}))
    raws = [raw for raw, _ in fields]
    assert raws[:2] == ["3", "16"] and raws[-3:] == ["1", "4", "16"]  # eagle3, fp16 ... /v1, 4 and 16
    assert fields[0][1] == fields[1][1] == fields[-3][1] == {NO_FIELD: 1.0}
