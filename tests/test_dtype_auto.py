"""``--dtype auto`` on a CPU: bfloat16 only where the CPU has bfloat16 instructions."""

import pytest
import torch

from tools import models


@pytest.mark.parametrize(("flags", "expected"), [
    ({"avx2", "fma"}, torch.float32),
    # AVX-512 without bfloat16 instructions: bfloat16 weights are widened inside every matmul, and a pass over
    # several tokens (what verification is) costs several times one: float32
    ({"avx2", "avx512f", "avx512_vnni"}, torch.float32),
    ({"avx2", "avx512f", "avx512_bf16"}, torch.bfloat16),
    ({"avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16"}, torch.bfloat16),
])
def test_auto_picks_bfloat16_only_with_bfloat16_instructions(monkeypatch, flags, expected):
    monkeypatch.setattr(models, "cpu_flags", lambda: set(flags))
    dtype, reason = models.resolve_dtype("auto", "cpu")
    assert dtype == expected
    assert reason.startswith("auto: ")


def test_a_named_dtype_is_taken_as_asked_and_an_unknown_one_is_refused():
    assert models.resolve_dtype("float32")[0] == torch.float32
    with pytest.raises(models.ParameterError):
        models.resolve_dtype("float8")
