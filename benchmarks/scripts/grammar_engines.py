"""Grammar engines for the local brain's tool calls, side by side: llama.cpp's grammar compiled from the
registry's JSON schemas (``LlamaGrammar.from_json_schema``, applied by llama.cpp's grammar sampler over the
engine's own llama.cpp backend, greedy, one token per forward pass) against the hand-written constrained
decoder (agent.brains.constrained + tool_grammar: choices in one pass each, prompt-lookup drafts for copied
text). Both see the same prompt: the fixed prefix, the retrieved worked examples (agent.brains.examples),
the request. Prints seconds, tokens fed and the decoded call per request.

    .venv/bin/python benchmarks/scripts/grammar_engines.py --data benchmarks/data/conversations_fresh_j.jsonl --limit 6
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
        for token in np.argpartition(-row, TRIED_FIRST)[:TRIED_FIRST][np.argsort(-row[np.argpartition(
                -row, TRIED_FIRST)[:TRIED_FIRST]])]:
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
    text = lm.decode(out)
    lm.text += text
    try:
        return json.loads(text)
    except ValueError:
        log.info("the call did not close within %d tokens: %r", max_tokens, text[:200])
        return None


def main(argv: list[str] | None = None) -> int:
    import argparse
    import time

    from agent.brains import local, local_prompt
    from agent.brains.examples import default_index
    from tools.agent_tools import registry

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--limit", type=int, default=6)
    args = parser.parse_args(argv)
    tools = registry.load_tools()
    prefix = (f"{local_prompt.IM_START}system\n{local_prompt.SYSTEM}\n\n# Tools\n"
              + "\n".join(tool_line(t) for t in tools.values())
              + f"\n{REPLY}(text*: text) - answer in words\n\nAnswer with one JSON object: "
                f'{{"name": NAME, "arguments": {{...}}}}{local_prompt.IM_END}\n')
    lm = local.load_engine(local.DEFAULT_LOCAL_MODEL, prefix)
    sampler = GrammarSampler(lm.backend, grammar_text(tools))
    rows = [json.loads(line) for line in args.data.read_text(encoding="utf-8").splitlines() if line.strip()]
    for row in rows[: args.limit]:
        shown = local_prompt.examples_text(reversed(default_index().nearest(row["text"], 4)))
        lm.begin(shown + local_prompt.user_turn(row["text"]))
        start, fed = time.perf_counter(), lm.fed
        call = decode_call(lm, sampler)
        print(f"json-schema grammar {time.perf_counter() - start:6.1f}s fed {lm.fed - fed:4d} "
              f"{json.dumps(call)[:160]} | want {row['tool']} {row.get('args')}", flush=True)
        brain = local.LocalBrain(rules=False, examples=4)
        start, fed = time.perf_counter(), brain.engine().fed
        decision = brain.decide(row["text"])
        print(f"hand-written        {time.perf_counter() - start:6.1f}s fed {brain.engine().fed - fed:4d} "
              f"{decision.name} {json.dumps(decision.arguments)[:140]}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
