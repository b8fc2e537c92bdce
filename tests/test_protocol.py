"""The timing protocol's order: the lead first, the others rotated, the bracketed baseline again last."""

from __future__ import annotations

import pytest

from tools.bench.protocol import measure_rounds
from tools.engine.types import DecodeResult, GenerationSettings


def runners(calls: list[str], seconds: dict[str, list[float]] | None = None):
    clock = {name: iter(times) for name, times in (seconds or {}).items()}

    def runner(name):
        def run(settings: GenerationSettings) -> DecodeResult:
            if settings.max_new_tokens == 8:  # timed, not warm-up
                calls.append(name)
            decode = next(clock[name]) if name in clock else 1.0
            return DecodeResult(method=name, output_ids=[1, 2], prefill_s=0.0, decode_s=decode, steps=2,
                                target_forwards=3)
        return run
    return {name: runner(name) for name in ("baseline", "a", "b", "c")}


SETTINGS = GenerationSettings(max_new_tokens=8)


def test_a_bracketed_baseline_is_timed_before_and_after_the_others_and_is_their_median():
    calls, finished = [], {}
    timed = measure_rounds(runners(calls, {"baseline": [1.0, 1.4]}), SETTINGS, repeats=1, warmup=0,
                           lead=["baseline"], bracket=["baseline"], rotate=1,
                           on_finished=lambda name, t: finished.setdefault(name, dict(t)))
    assert calls == ["baseline", "b", "c", "a", "baseline"]  # rotated one place on, the baseline closing
    assert timed["baseline"].times == [1.0, 1.4] and timed["baseline"].median == pytest.approx(1.2)
    assert set(finished) == {"baseline", "a", "b", "c"}  # every runner reported, once the bracket is closed
    assert all(t["baseline"].times == [1.0, 1.4] for t in finished.values())


def test_without_a_bracket_each_runner_is_timed_once_a_round():
    calls = []
    timed = measure_rounds(runners(calls), SETTINGS, repeats=2, warmup=0, lead=["baseline"])
    assert calls == ["baseline", "a", "b", "c", "baseline", "b", "c", "a"]
    assert [len(t.times) for t in timed.values()] == [2, 2, 2, 2]


def test_a_baseline_alone_is_not_bracketed():
    calls = []
    timed = measure_rounds({"baseline": runners(calls)["baseline"]}, SETTINGS, repeats=1, warmup=0,
                           lead=["baseline"], bracket=["baseline"], on_finished=lambda n, t: None)
    assert calls == ["baseline"] and timed["baseline"].times == [1.0]


def test_the_hardware_name_carries_the_cpus_widest_matrix_instructions():
    from tools.bench.protocol import hardware_info, hardware_name, isa_of

    assert isa_of({"sse2", "avx", "avx2", "fma"}) == "AVX2"
    assert isa_of({"avx2", "avx512f", "avx512bw"}) == "AVX-512"
    assert isa_of({"avx2", "avx512f", "avx512_bf16"}) == "AVX512-BF16"
    assert isa_of({"avx512f", "avx512_bf16", "amx_bf16", "amx_tile"}) == "AMX"
    assert isa_of({"sse2", "neon"}) is None
    info = hardware_info("cpu")
    assert hardware_name("cpu") == info["name"]
    assert info["isa"] is None or info["name"].endswith(f", {info['isa']})")  # a curve is stored per instruction set
