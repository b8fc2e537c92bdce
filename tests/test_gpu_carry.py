"""benchmarks/scripts/gpu_carry.py: a checkpoint packed into pieces and rebuilt is within about one bfloat16 step."""

from __future__ import annotations

import json

import torch
from safetensors.torch import load_file, save_file
from scripts import load_benchmark


def _module():
    return load_benchmark("gpu_carry")


def _four_bit_like(rows: int, cols: int, gen: torch.Generator) -> torch.Tensor:
    """Weights as a 4-bit GGUF file gives them: per block of 32, scale * q - offset with q in 0..15."""
    q = torch.randint(0, 16, (rows * cols // 32, 32), generator=gen).float()
    scale = torch.rand(rows * cols // 32, 1, generator=gen) * 0.01 + 0.001
    offset = torch.rand(rows * cols // 32, 1, generator=gen) * 0.08
    return (scale * q - offset).reshape(rows, cols).to(torch.bfloat16)


def test_pack_and_unpack_round_trip(tmp_path):
    carry = _module()
    gen = torch.Generator().manual_seed(0)
    tensors = {"a.weight": _four_bit_like(256, 512, gen),
               "b.weight": (torch.randn(256, 512, generator=gen) * 0.02).to(torch.bfloat16),
               "norm.weight": torch.ones(512, dtype=torch.bfloat16)}
    model = tmp_path / "model"
    model.mkdir()
    save_file(tensors, str(model / "model.safetensors"))
    (model / "config.json").write_text(json.dumps({"model_type": "test"}))
    carry.pack(model, tmp_path / "packed", piece_mib=1)
    pieces = sorted((tmp_path / "packed").glob("piece*"))
    assert len(pieces) >= 1 and all(p.stat().st_size <= 1 << 20 for p in pieces)
    carry.unpack(tmp_path / "packed", tmp_path / "rebuilt")
    rebuilt = load_file(str(tmp_path / "rebuilt" / "model.safetensors"))
    assert (tmp_path / "rebuilt" / "config.json").is_file()
    assert torch.equal(rebuilt["norm.weight"], tensors["norm.weight"])
    for name in ("a.weight", "b.weight"):
        w, r = tensors[name].float(), rebuilt[name].float()
        assert r.shape == w.shape
        assert float((r - w).norm() / w.norm()) < 0.006
    # the 4-bit-structured tensor travels at 0.75 bytes a weight and comes back almost bit for bit
    assert float((rebuilt["a.weight"] == tensors["a.weight"]).float().mean()) > 0.5


def test_training_text_reads_xz(tmp_path):
    """A shipped .xz training text (the GPU-made answers) reads as the plain text does."""
    import lzma

    from tools.medusa.train import read_text, tokenize_files

    text = "def add(a, b):\n    return a + b\n" * 40
    plain, packed = tmp_path / "t.txt", tmp_path / "t.txt.xz"
    plain.write_text(text)
    packed.write_bytes(lzma.compress(text.encode()))
    assert read_text(packed) == text

    class Words:
        def encode(self, s, add_special_tokens=False):
            return [len(w) for w in s.split()]

    assert tokenize_files(Words(), [packed], 16, 1000, 4) == tokenize_files(Words(), [plain], 16, 1000, 4)


def test_unreadable_xz_is_a_clear_error(tmp_path):
    import pytest

    from tools.errors import ParameterError
    from tools.medusa.train import read_text

    bad = tmp_path / "bad.txt.xz"
    bad.write_bytes(b"not xz at all")
    with pytest.raises(ParameterError, match="not a readable xz file"):
        read_text(bad)
