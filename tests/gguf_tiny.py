"""Tiny GGUF files written with the ``gguf`` package (no network): a 2-layer Llama with a byte-level BPE
vocabulary and random float32 weights, for the llama.cpp backend's tests (tests/test_llamacpp_backend.py,
tests/test_llamacpp_cli.py)."""

from __future__ import annotations

import gguf  # the tests that import this module skip first when it is not installed
import numpy as np

EMBD, HEADS, KV_HEADS, FF, LAYERS = 64, 4, 2, 128, 2


def byte_tokens() -> list[str]:
    """GPT-2's byte-level alphabet: one printable character per byte."""
    keep = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    chars, n = keep[:], 0
    for b in range(256):
        if b not in keep:
            keep.append(b)
            chars.append(256 + n)
            n += 1
    return [chr(c) for _, c in sorted(zip(keep, chars))]


MERGES = ["h e", "l l", "o Ġ", "Ġ w"]
# the end token under the name transformers' GGUF reader expects (another name makes it add a 262nd token)
VOCAB = byte_tokens() + [m.replace(" ", "") for m in MERGES] + ["<|endoftext|>"]
EOS = len(VOCAB) - 1


def write_tiny_llama(path, seed: int, noise_of: dict | None = None, noise: float = 0.0) -> dict:
    """Write a tiny Llama GGUF at ``path``; return its weights (``noise_of`` + noise: a perturbed copy)."""
    rng = np.random.default_rng(seed)
    hd = EMBD // HEADS
    shapes = {"token_embd.weight": (len(VOCAB), EMBD), "output.weight": (len(VOCAB), EMBD),
              "output_norm.weight": (EMBD,)}
    for i in range(LAYERS):
        shapes |= {f"blk.{i}.attn_norm.weight": (EMBD,), f"blk.{i}.ffn_norm.weight": (EMBD,),
                   f"blk.{i}.attn_q.weight": (HEADS * hd, EMBD), f"blk.{i}.attn_k.weight": (KV_HEADS * hd, EMBD),
                   f"blk.{i}.attn_v.weight": (KV_HEADS * hd, EMBD), f"blk.{i}.attn_output.weight": (EMBD, HEADS * hd),
                   f"blk.{i}.ffn_gate.weight": (FF, EMBD), f"blk.{i}.ffn_up.weight": (FF, EMBD),
                   f"blk.{i}.ffn_down.weight": (EMBD, FF)}
    weights = {}
    for name, shape in shapes.items():
        if noise_of is not None:
            w = noise_of[name] + noise * rng.standard_normal(shape).astype(np.float32) * noise_of[name].std()
        elif name.endswith("norm.weight"):
            w = 1.0 + 0.1 * rng.standard_normal(shape)
        else:
            w = rng.standard_normal(shape) * (1.5 if name.startswith(("token_embd", "output")) else 1.0) / np.sqrt(shape[-1])
        weights[name] = np.asarray(w, dtype=np.float32)
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_context_length(1024)
    writer.add_embedding_length(EMBD)
    writer.add_block_count(LAYERS)
    writer.add_feed_forward_length(FF)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_rope_dimension_count(hd)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(len(VOCAB))
    writer.add_file_type(0)  # all float32
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(VOCAB)
    writer.add_token_types([1] * (len(VOCAB) - 1) + [3])
    writer.add_token_merges(MERGES)
    writer.add_bos_token_id(EOS)
    writer.add_eos_token_id(EOS)
    writer.add_add_bos_token(False)
    for name, w in weights.items():
        writer.add_tensor(name, w)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return weights


def write_pair(folder, noise: float = 0.3) -> tuple[str, str]:
    """A tiny target and its draft (the target's weights with ``noise``) in ``folder``: their paths as text."""
    weights = write_tiny_llama(folder / "target.gguf", seed=0)
    write_tiny_llama(folder / "draft.gguf", seed=1, noise_of=weights, noise=noise)
    return str(folder / "target.gguf"), str(folder / "draft.gguf")
