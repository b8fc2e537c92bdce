"""Runs an upstream reference implementation (medusa-llm, lade) inside its own virtual environment.

This file is executed by the peer environment's Python (``specpilot peers setup``), never imported by
specpilot: it imports nothing of ours, only torch, the transformers 4.x that the package needs, and
the package. It reads one JSON request per line on stdin and answers one JSON line on the protocol
stream (the original stdout; anything the libraries print goes to stderr):

    {"op": "load", "peer": "lade"|"medusa-llm", "model_dir": ..., "heads_dir": ..., "params": {...}}
    {"op": "generate", "mode": "plain"|"method", "prompt_ids": [...], "max_new_tokens": N, "eos": [...]}
    {"op": "quit"}

``generate`` answers ``{"ok": true, "output_ids": [...], "seconds": s, "steps": n}``: the clock starts
after the prompt ids are a tensor and stops after the last token, as specpilot's own loop does.
Greedy only: both upstream packages verify greedily at temperature 0 and sample lossy otherwise.

Adaptations, each needed to run the package on a model newer than it was written for, none of which
changes what it computes for the Llama models it targets:
- medusa-llm 0.1 vendors a Llama whose rotary embedding ignores ``rope_theta`` (fixed base 10000) and
  whose preallocated KV cache has ``num_attention_heads`` rows where grouped-query models store
  ``num_key_value_heads``: the runner passes the config's base and sizes the cache by the KV heads.
- medusa-llm loads a tokenizer it only uses to print text: the runner works on ids and skips it.
- medusa-llm's dense tree uses one head per level after the root: the runner runs the first
  ``len(medusa_choices) - 1`` heads (upstream's ``model.medusa``).
- medusa-llm's ``medusa_generate`` yields decoded text and counts steps, not tokens: the runner calls
  the package's own step functions (generate_candidates, tree_decoding, evaluate_posterior,
  update_inference_inputs) in the same order and stops at ``max_new_tokens`` like every other method.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback

PROTOCOL = None  # the real stdout, opened before the libraries can print to it
STATE: dict = {}


def reply(obj: dict) -> None:
    PROTOCOL.write(json.dumps(obj) + "\n")
    PROTOCOL.flush()


def versions() -> dict:
    from importlib import metadata

    out = {"python": sys.version.split()[0]}
    for dist in ("torch", "transformers", "medusa-llm", "lade"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return out


# ------------------------------------------------------------------------------------------ loading
def load_plain(model_dir: str):
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32)
    return model.eval()


def patch_medusa_llama(rope_theta: float) -> None:
    """The two fixes medusa-llm's vendored Llama needs on a grouped-query model with its own rope base."""
    import torch
    from medusa.model import kv_cache, medusa_model, modeling_llama_kv

    rotary = modeling_llama_kv.LlamaRotaryEmbedding
    original_init = rotary.__init__

    def init(self, dim, max_position_embeddings=2048, base=None, device=None):
        original_init(self, dim, max_position_embeddings, rope_theta if base is None else base, device)

    rotary.__init__ = init

    def initialize_past_key_values(model):
        config = model.config
        kv_heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
        data = torch.zeros(config.num_hidden_layers * 2, 1, kv_heads, config.max_position_embeddings,
                           config.hidden_size // config.num_attention_heads, device=model.device, dtype=model.dtype)
        lengths = torch.zeros(config.num_hidden_layers * 2, dtype=torch.long, device="cpu")
        caches = [[kv_cache.KVCache(data[i * 2 + j], lengths[i * 2 + j]) for j in range(2)]
                  for i in range(config.num_hidden_layers)]
        return caches, data, lengths

    medusa_model.initialize_past_key_values = initialize_past_key_values

    class NoTokenizer:  # medusa-llm only decodes text to print it; ids are all the runner needs
        @staticmethod
        def from_pretrained(*_args, **_kwargs):
            return None

    medusa_model.AutoTokenizer = NoTokenizer


def load_medusa(model_dir: str, heads_dir: str):
    import torch

    with open(os.path.join(model_dir, "config.json")) as fh:
        rope_theta = float(json.load(fh).get("rope_theta", 10000.0))
    patch_medusa_llama(rope_theta)
    from medusa.model.medusa_model import MedusaModel

    model = MedusaModel.from_pretrained(heads_dir, torch_dtype=torch.float32)
    return model.eval()


def handle_load(req: dict) -> dict:
    peer, params = req["peer"], req.get("params") or {}
    STATE.clear()
    STATE.update(peer=peer, params=params)
    if peer == "lade":
        import lade

        lade.augment_all()
        lade.config_lade(LEVEL=int(params.get("level", 5)), WINDOW_SIZE=int(params.get("window", 7)),
                         GUESS_SET_SIZE=int(params.get("guess_set", 7)), DEBUG=0)
        STATE["model"] = load_plain(req["model_dir"])
    elif peer == "medusa-llm":
        STATE["medusa"] = load_medusa(req["model_dir"], req["heads_dir"])
        # the vendored Llama cannot run transformers' generate (it expects its own KV cache): plain
        # decoding in this environment uses transformers' Llama on the same weights
        STATE["model"] = load_plain(req["model_dir"])
    else:
        return {"ok": False, "error": f"unknown peer {peer!r}"}
    return {"ok": True, "versions": versions()}


# --------------------------------------------------------------------------------------- generation
def trim_at_eos(new: list[int], eos: list[int], limit: int) -> list[int]:
    new = new[:limit]
    for i, token in enumerate(new):
        if token in eos:
            return new[: i + 1]
    return new


def generate_plain(ids, max_new_tokens: int, eos: list[int], use_lade: bool) -> tuple[list[int], int]:
    """transformers 4.x ``generate`` (greedy); with lade augmented and USE_LADE=1 it runs lookahead."""
    import torch

    os.environ["USE_LADE"] = "1" if use_lade else "0"
    out = STATE["model"].generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                         do_sample=False, eos_token_id=eos or None, pad_token_id=(eos or [0])[0])
    return out[0, ids.shape[1]:].tolist(), 0


def generate_medusa(ids, max_new_tokens: int, eos: list[int]) -> tuple[list[int], int]:
    """medusa-llm's own step functions, in medusa_generate's order, until ``max_new_tokens`` or EOS."""
    from medusa.model import medusa_model as mm
    from medusa.model import utils as mu

    model, params = STATE["medusa"], STATE["params"]
    choices = [int(c) for c in params.get("medusa_choices", [1, 7, 6])]
    if not 2 <= len(choices) <= len(model.medusa_head) + 1:
        raise ValueError(f"medusa_choices {choices} needs 1..{len(model.medusa_head)} heads after the root")
    model.medusa = len(choices) - 1  # the heads upstream's forward runs: one per level of the tree
    if getattr(model, "medusa_choices", None) != choices:
        model.medusa_buffers = mu.generate_medusa_buffers(choices, device=model.base_model.device)
        model.medusa_choices = choices
    buffers = model.medusa_buffers
    if not hasattr(model, "past_key_values"):
        model.past_key_values, model.past_key_values_data, model.current_length_data = \
            mm.initialize_past_key_values(model.base_model)
    model.current_length_data.zero_()
    mu.reset_medusa_mode(model)
    input_ids, start = ids.clone(), ids.shape[1]
    medusa_logits, logits = mu.initialize_medusa(input_ids, model, buffers["medusa_attn_mask"], model.past_key_values)
    new_token, steps = 0, 0
    while new_token < max_new_tokens:
        candidates, tree_candidates = mu.generate_candidates(medusa_logits, logits, choices[1:],
                                                             buffers["tree_indices"], 0.0)
        medusa_logits, logits, outputs = mu.tree_decoding(model, tree_candidates, model.past_key_values,
                                                          buffers["medusa_position_ids"], input_ids,
                                                          buffers["retrieve_indices"])
        best, accept_length = mu.evaluate_posterior(logits, candidates, 0.0, 0.09, 0.3)
        input_ids, logits, medusa_logits, new_token = mu.update_inference_inputs(
            input_ids, candidates, best, accept_length, buffers["retrieve_indices"], outputs, logits,
            medusa_logits, new_token, model.past_key_values_data, model.current_length_data)
        steps += 1
        if any(t in eos for t in input_ids[0, start:].tolist()):
            break
    return input_ids[0, start:].tolist(), steps


def handle_generate(req: dict) -> dict:
    import torch

    if "model" not in STATE:
        return {"ok": False, "error": "no model loaded: send a load request first"}
    eos, limit = [int(t) for t in req.get("eos") or []], int(req["max_new_tokens"])
    ids = torch.tensor([req["prompt_ids"]], dtype=torch.long)
    method = req.get("mode") == "method"
    with torch.inference_mode():
        t0 = time.perf_counter()
        if method and STATE["peer"] == "medusa-llm":
            new, steps = generate_medusa(ids, limit, eos)
        else:
            new, steps = generate_plain(ids, limit, eos, use_lade=method)
        seconds = time.perf_counter() - t0
    return {"ok": True, "output_ids": trim_at_eos(new, eos, limit), "seconds": seconds, "steps": steps}


def main() -> int:
    global PROTOCOL
    PROTOCOL = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # prints from the libraries go to stderr
    sys.stdout = sys.stderr
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            req = json.loads(line)
            op = req.get("op")
            if op == "quit":
                reply({"ok": True})
                return 0
            handler = {"load": handle_load, "generate": handle_generate}.get(op)
            reply(handler(req) if handler else {"ok": False, "error": f"unknown op {op!r}"})
        except Exception as exc:  # the parent shows the error; the trace goes to stderr for a bug report
            traceback.print_exc()
            reply({"ok": False, "error": f"{type(exc).__name__}: {exc}"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
