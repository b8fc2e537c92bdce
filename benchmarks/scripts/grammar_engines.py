"""Grammar engines for the local brain's tool calls, side by side, on the engine's own llama.cpp backend:

- llama.cpp's grammar compiled from the registry's JSON schemas (``LlamaGrammar.from_json_schema``, llama.cpp's
  grammar sampler, greedy, one token per forward pass);
- llguidance (chat's own decoder, agent.brains.constrained.ConstrainedLM.decode_json) and xgrammar over the
  same JSON schema: tokens the grammar forces are fed with the next pass that needs logits, the rest is greedy
  among the allowed tokens, with prompt-lookup drafts (the user's words copied into an argument) verified in
  the same pass;
- chat's own path (agent.brains.local), the model picking the tool from retrieved examples, and as chat runs
  it (the fitted heads pick the tool and the arguments they are sure of).

Each turn shows four retrieved worked examples (agent.brains.examples) and the request, and each engine feeds
the turn itself. The fixed prefix, cached, differs: the grammar engines get the system text and one line per
tool, and ask for a JSON object; chat's path gets its own prompt (the methods, the tools' signatures, its
built-in examples). Prints seconds, forward passes, tokens fed and the decoded call per request, scored as
benchmarks/scripts/conversation.py scores (right tool and key arguments).

    .venv/bin/pip install apache-tvm-ffi && .venv/bin/pip install --no-deps xgrammar  # not a product dependency
    .venv/bin/python benchmarks/scripts/grammar_engines.py --data benchmarks/data/conversations_fresh_j.jsonl \
        --limit 12 --save-result grammar_engines_amx
"""

from __future__ import annotations

import copy
import ctypes
import json
import logging
from typing import Any

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tools.agent_tools.registry import Tool

log = logging.getLogger(__name__)

REPLY = "reply"
SET_BY_THE_GATE = frozenset({"approval_id"})  # only the approval gate fills these
# prose, and bounds that pydantic checks after the decode (a bounded repetition costs the grammar a rule per step)
DROPPED_KEYS = ("title", "description", "examples", "default", "maxLength", "minLength", "maxItems", "minItems",
                "maximum", "minimum", "exclusiveMinimum", "exclusiveMaximum", "pattern", "format")
MAX_CALL_TOKENS = 320  # a call with a pasted prompt copied into it; a reply is a sentence or two


def _strip(node: Any) -> Any:
    """A JSON schema without prose and defaults (they do not change what may be written)."""
    if isinstance(node, list):
        return [_strip(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for key, value in node.items():
        if key in ("properties", "$defs"):  # names of fields, not schema keywords
            out[key] = {name: _strip(sub) for name, sub in value.items()}
        elif key not in DROPPED_KEYS:
            out[key] = _strip(value)
    return out


def arguments_schema(tool: Tool) -> dict:
    """The tool's input schema as the model may fill it (fields only the gate sets left out)."""
    schema = copy.deepcopy(tool.input_schema())
    for key in SET_BY_THE_GATE:
        schema.get("properties", {}).pop(key, None)
    schema["required"] = [k for k in schema.get("required", []) if k not in SET_BY_THE_GATE]
    return _strip(schema)


def call_schema(tools: dict[str, Tool]) -> dict:
    """One JSON schema for a turn's answer: a call of any tool, or a reply in words."""
    calls = [{"type": "object", "properties": {"name": {"const": name}, "arguments": arguments_schema(tool)},
              "required": ["name", "arguments"], "additionalProperties": False} for name, tool in tools.items()]
    calls.append({"type": "object", "properties": {
        "name": {"const": REPLY},
        "arguments": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"],
                      "additionalProperties": False}},
        "required": ["name", "arguments"], "additionalProperties": False})
    return {"anyOf": calls}


def _kind(prop: dict) -> str:
    branches = [b for b in prop.get("anyOf", [prop]) if b.get("type") != "null"] or [prop]
    prop = branches[0]
    if "enum" in prop:
        return "|".join(str(v) for v in prop["enum"])
    if prop.get("type") == "array":
        items = prop.get("items", {})
        return "list of " + ("|".join(map(str, items["enum"])) if "enum" in items else items.get("type", "value"))
    return {"string": "text", "integer": "number", "boolean": "true|false"}.get(prop.get("type"), prop.get("type", "value"))


def tool_line(tool: Tool) -> str:
    """``name(arg*: kind, ...) - first sentence of the description`` (``*``: required)."""
    schema = tool.input_schema()
    required = set(schema.get("required", ()))
    args = [f"{k}{'*' if k in required else ''}: {_kind(p)}" for k, p in schema.get("properties", {}).items()
            if k not in SET_BY_THE_GATE]
    return f"{tool.name}({', '.join(args)}) - {tool.description.split('. ')[0][:200]}"


def grammar_text(tools: dict[str, Tool]) -> str:
    """The GBNF grammar of :func:`call_schema`, as llama.cpp compiles JSON schemas."""
    import llama_cpp

    return llama_cpp.LlamaGrammar.from_json_schema(json.dumps(call_schema(tools)), verbose=False)._grammar


TOKEN_DATA = np.dtype([("id", "<i4"), ("logit", "<f4"), ("p", "<f4")])  # llama_token_data
TRIED_FIRST = 4  # the model's best tokens checked against the grammar one at a time before the whole vocabulary


def _best_first(row: np.ndarray) -> np.ndarray:
    """The model's TRIED_FIRST best tokens, best first."""
    best = np.argpartition(-row, TRIED_FIRST)[:TRIED_FIRST]
    return best[np.argsort(-row[best])]


class GrammarSampler:
    """llama.cpp's grammar sampler over the logits of the engine's llama.cpp backend: greedy among the
    tokens the grammar allows. The model's best tokens are checked one at a time (the usual case: the
    model writes what the grammar allows), the whole vocabulary only when none of them fits."""

    def __init__(self, backend, grammar: str):
        self.lib = backend._lib
        self.vocab_size = backend.vocab_size
        self.sampler = self.lib.llama_sampler_init_grammar(backend._vocab, grammar.encode(), b"root")
        if not self.sampler:
            raise ValueError("llama.cpp could not compile the tool-call grammar")
        self.one = np.zeros(1, dtype=TOKEN_DATA)
        self.all = np.zeros(self.vocab_size, dtype=TOKEN_DATA)
        self.all["id"] = np.arange(self.vocab_size)

    def _apply(self, data: np.ndarray) -> None:
        array = self.lib.llama_token_data_array(
            data=data.ctypes.data_as(ctypes.POINTER(self.lib.llama_token_data)), size=len(data), selected=-1,
            sorted=False)
        self.lib.llama_sampler_apply(self.sampler, ctypes.byref(array))

    def pick(self, logits) -> int:
        """The best token the grammar allows next (accepted into the grammar's state); -1 when none is."""
        row = logits[: self.vocab_size].numpy()
        for token in _best_first(row):
            self.one["id"], self.one["logit"] = token, row[token]
            self._apply(self.one)
            if np.isfinite(self.one["logit"][0]):
                self.lib.llama_sampler_accept(self.sampler, int(token))
                return int(token)
        self.all["logit"] = row
        self._apply(self.all)
        token = int(np.argmax(self.all["logit"]))
        if not np.isfinite(self.all["logit"][token]):
            return -1
        self.lib.llama_sampler_accept(self.sampler, token)
        return token

    def reset(self) -> None:
        self.lib.llama_sampler_reset(self.sampler)

    def close(self) -> None:
        if self.sampler:
            self.lib.llama_sampler_free(self.sampler)
            self.sampler = None

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


def _commit_call(lm, out: list[int], max_tokens: int) -> dict | None:
    """The decoded tokens appended to the engine's committed text; the call they spell, or None when it did
    not close within ``max_tokens``."""
    text = lm.decode(out)
    lm.text += text
    try:
        return json.loads(text)
    except ValueError:
        log.info("the call did not close within %d tokens: %r", max_tokens, text[:200])
        return None


def decode_call(lm, sampler: GrammarSampler, max_tokens: int = MAX_CALL_TOKENS) -> dict | None:
    """One grammar-constrained greedy decode after the engine's committed text (``lm``: an
    agent.brains.constrained.ConstrainedLM over a llama.cpp backend): the parsed call, or None when it
    did not close within ``max_tokens``."""
    sampler.reset()
    lm._align(lm.segment_ids())  # noqa: SLF001 - the engine's context, fed lazily
    out: list[int] = []
    while len(out) < max_tokens:
        token = sampler.pick(lm._logits())  # noqa: SLF001
        if token < 0 or token in lm.stop_ids:
            break
        lm.ids.append(token)
        lm._last = None  # noqa: SLF001
        out.append(token)
        if token == lm.tokenizer.eos_token_id:
            break
    return _commit_call(lm, out, max_tokens)


SEPARATORS = (", ", ": ")  # as chat's decoder writes JSON
PROMPT_NOTE = ("each turn: 4 retrieved examples and the request; the cached prefix differs: the grammar engines get "
               "the system text and one line per tool (a JSON object asked for), chat its own prompt (methods, "
               "tool signatures, built-in examples); 'chat, heads' is chat as it runs (no retrieved examples)")


class XGrammarMatcher:
    """xgrammar's matcher over :func:`call_schema`, with the model's Hugging Face tokenizer."""

    name = "xgrammar"

    def __init__(self, tokenizer, vocab_size: int, schema: dict):
        import torch
        import xgrammar

        self.vocab_size = vocab_size
        info = xgrammar.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size)
        grammar = xgrammar.GrammarCompiler(info).compile_json_schema(
            json.dumps(schema), any_whitespace=False, separators=SEPARATORS)
        self.matcher = xgrammar.GrammarMatcher(grammar)
        self.mask = xgrammar.allocate_token_bitmask(1, vocab_size)
        self._torch = torch

    def reset(self) -> None:
        self.matcher.reset()

    def forced(self) -> list[int]:
        return list(self.matcher.find_jump_forward_tokens())

    def valid(self, tokens: list[int]) -> int:
        n = 0
        for token in tokens:
            if not self.matcher.accept_token(token):
                break
            n += 1
        if n:
            self.matcher.rollback(n)
        return n

    def accept(self, token: int) -> bool:
        return self.matcher.accept_token(token)

    def allowed(self) -> np.ndarray:
        self.matcher.fill_next_token_bitmask(self.mask)
        words = self.mask[0].numpy().view(np.uint8)
        return np.unpackbits(words, bitorder="little")[: self.vocab_size].astype(bool)

    def done(self) -> bool:
        return self.matcher.is_completed()


def _pick(matcher, row) -> int:
    """The best token the grammar allows next, accepted into the matcher's state; -1 when none is. The
    model's best few are tried first (the usual case), the whole mask only when none of them fits."""
    row = row[: matcher.vocab_size].numpy()
    for token in _best_first(row):
        if matcher.valid([int(token)]) == 1:
            matcher.accept(int(token))
            return int(token)
    allowed = matcher.allowed()
    if not allowed.any():
        return -1
    token = int(np.argmax(np.where(allowed, row, -np.inf)))
    matcher.accept(token)
    return token


def decode_matched(lm, matcher, max_tokens: int = MAX_CALL_TOKENS) -> dict | None:
    """One constrained greedy decode after the engine's committed text under a grammar library's matcher
    (see :func:`decode_call`): tokens the grammar forces are fed with the next pass that needs logits,
    the rest is the model's greedy choice among the allowed tokens, with chat's
    prompt-lookup drafts verified in the same pass."""
    import torch

    from agent.brains.constrained import LOOKUP
    from tools.engine.prompt_lookup import find_candidate_set

    matcher.reset()
    lm._align(lm.segment_ids())  # noqa: SLF001 - the engine's context, fed lazily
    out: list[int] = []
    while len(out) < max_tokens and not matcher.done():
        forced = matcher.forced()
        if forced:
            for token in forced:
                matcher.accept(token)
            lm.ids += forced
            lm._last = None  # noqa: SLF001
            out += forced
            continue
        cached = min(lm._cached(), len(lm.ids) - 1)  # noqa: SLF001
        lm.backend.crop(lm.cache, cached)
        pending = lm.ids[cached:]
        drafts = find_candidate_set(torch.tensor(lm.ids, dtype=torch.long), LOOKUP, limit=max_tokens - len(out))
        draft = drafts[0][: matcher.valid(drafts[0])] if drafts else []
        logits = lm._forward(pending + draft, cached, rows=len(draft) + 1)  # noqa: SLF001
        new: list[int] = []
        for i in range(len(draft) + 1):
            token = _pick(matcher, logits[i])
            if token < 0:
                break
            new.append(token)
            if i == len(draft) or token != draft[i] or matcher.done():
                break
        lm.backend.crop(lm.cache, cached + len(pending) + max(0, len(new) - 1))
        lm.ids = lm.ids[:cached] + pending + new
        lm._last = None  # noqa: SLF001
        out += new
        if not new:
            break
    return _commit_call(lm, out, max_tokens)


FAILED = "<no valid call>"  # a decode that did not close, or a call that did not validate: not a reply


def _score(row: dict, name: str | None, arguments: dict | None) -> tuple[bool, bool]:
    """(right tool, right tool and key arguments), scored as benchmarks/scripts/conversation.py scores."""
    from benchmarks_conversation import score

    calls = [{"name": name, "input": arguments or {}}] if name not in (None, REPLY) else []
    return score(row, calls)


def summarize(rows: list[dict]) -> dict:
    """Per engine: requests, mean and median seconds, forward passes and tokens fed, right tool, right call."""
    import statistics

    out = {}
    for engine in dict.fromkeys(r["engine"] for r in rows):
        mine = [r for r in rows if r["engine"] == engine]
        out[engine] = {"requests": len(mine), "mean_s": round(statistics.mean(r["seconds"] for r in mine), 2),
                       "median_s": round(statistics.median(r["seconds"] for r in mine), 2),
                       "passes": sum(r["passes"] for r in mine), "fed": sum(r["fed"] for r in mine),
                       "tool_ok": sum(r["tool_ok"] for r in mine), "args_ok": sum(r["args_ok"] for r in mine)}
    return out


def main(argv: list[str] | None = None) -> int:
    import argparse
    import importlib.util
    import time

    from agent.brains import local, local_prompt
    from agent.brains.examples import default_index
    from tools.agent_tools import registry
    from tools.report.results import save_result

    spec = importlib.util.spec_from_file_location("benchmarks_conversation", Path(__file__).with_name("conversation.py"))
    sys.modules["benchmarks_conversation"] = module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--limit", type=int, default=6)
    parser.add_argument("--save-result", metavar="NAME", help="also write benchmarks/results/NAME.json")
    args = parser.parse_args(argv)
    tools = registry.load_tools()
    prefix = (f"{local_prompt.IM_START}system\n{local_prompt.SYSTEM}\n\n# Tools\n"
              + "\n".join(tool_line(t) for t in tools.values())
              + f"\n{REPLY}(text*: text) - answer in words\n\nAnswer with one JSON object: "
                f'{{"name": NAME, "arguments": {{...}}}}{local_prompt.IM_END}\n')
    lm = local.load_engine(local.DEFAULT_LOCAL_MODEL, prefix)
    sampler = GrammarSampler(lm.backend, grammar_text(tools))
    matchers = []
    try:
        matchers.append(XGrammarMatcher(lm.tokenizer, lm.backend.vocab_size, call_schema(tools)))
    except ImportError as exc:
        print(f"skipped: {exc} (see the install line in this script's docstring)", file=sys.stderr)
    # chat's own path with the same information (the model picks the tool), and as chat runs it
    # (the fitted heads pick the tool and the sure arguments, no worked examples)
    brains = (("chat, examples", local.LocalBrain(examples=4)),
              ("chat, heads", local.LocalBrain(classifier=local.default_classifier())))
    requests = [json.loads(line) for line in args.data.read_text(encoding="utf-8").splitlines() if line.strip()]
    rows: list[dict] = []

    def record(engine: str, request: dict, seconds: float, passes: int, fed: int, name, arguments) -> None:
        tool_ok, args_ok = _score(request, name, arguments)
        rows.append({"engine": engine, "text": request["text"], "seconds": round(seconds, 3), "passes": passes,
                     "fed": fed, "tool": name, "arguments": arguments, "tool_ok": tool_ok, "args_ok": args_ok})
        print(f"  {engine:18s} {seconds:6.2f}s passes {passes:3d} fed {fed:4d} {'ok ' if args_ok else '-- '}"
              f"{name} {json.dumps(arguments)[:120]}", flush=True)

    for request in requests[: args.limit]:
        shown = local_prompt.examples_text(reversed(default_index().nearest(request["text"], 4)))
        print(f"want {request['tool']} {json.dumps(request.get('args'))[:140]}", flush=True)
        engines = [("llama.cpp grammar", lambda: decode_call(lm, sampler)),
                   ("llguidance", lambda: lm.decode_json(call_schema(tools), MAX_CALL_TOKENS))]  # chat's decoder
        engines += [(m.name, lambda m=m: decode_matched(lm, m)) for m in matchers]
        for engine, decode in engines:
            lm.ids, lm._last = lm.ids[: lm.base], None  # noqa: SLF001 - each engine feeds the turn itself
            lm.backend.crop(lm.cache, lm.base)
            lm.begin(shown + local_prompt.user_turn(request["text"]))
            start, fed, passes = time.perf_counter(), lm.fed, lm.passes
            call = decode() or {"name": FAILED}
            record(engine, request, time.perf_counter() - start, lm.passes - passes, lm.fed - fed,
                   call.get("name"), call.get("arguments"))
        for engine, brain in brains:
            model = brain.engine()
            start, fed, passes = time.perf_counter(), model.fed, model.passes
            decision = brain.decide(request["text"])
            record(engine, request, time.perf_counter() - start, model.passes - passes, model.fed - fed,
                   decision.name if decision.error is None else FAILED, decision.arguments)
    summary = summarize(rows)
    for engine, figures in summary.items():
        print(f"{engine:18s} {figures}")
    if args.save_result:
        path = save_result(args.save_result, "grammar_engines", rows, summary, hardware={}, dtype=None,
                           threads=lm.backend.n_threads, command=[".venv/bin/python", *sys.argv],
                           extra={"data": args.data.name, "model": local.DEFAULT_LOCAL_MODEL,
                                  "engines": "llama.cpp grammar: LlamaGrammar.from_json_schema, one token per pass; "
                                             "llguidance and xgrammar: forced tokens fed without a pass of their own, "
                                             "prompt-lookup drafts; chat: agent.brains.local (llguidance, its own prompt)",
                                  "prompt": PROMPT_NOTE})
        print(f"result: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
