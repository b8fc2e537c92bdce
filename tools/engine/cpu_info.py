"""This CPU as the OS describes it, with no torch behind it: its model name, its instruction-set flags and the
widest matrix instruction set among them (what decides whether bfloat16 is fast here)."""

from __future__ import annotations

import contextlib
import os
import platform

_FLAGS: list[frozenset] = []  # this CPU's flags, read once


def cpu_flags() -> frozenset:
    """This CPU's instruction-set flags as Linux lists them (empty elsewhere or where they cannot be read)."""
    if not _FLAGS:
        try:
            with open("/proc/cpuinfo", encoding="utf-8") as f:
                flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
        except OSError:
            flags = []
        _FLAGS.append(frozenset(flags))
    return _FLAGS[0]


def cpu_model_name() -> str:
    """The CPU's model name as the OS reports it."""
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


# the widest matrix instructions a CPU has, as its flags name them: what decides whether bfloat16 is fast there
# and how a pass over several tokens costs against one (two CPUs of one model name can differ: cloud hosts)
CPU_ISA = (("amx_bf16", "AMX"), ("avx512_bf16", "AVX512-BF16"), ("avx512f", "AVX-512"), ("avx2", "AVX2"))


def cpu_isa() -> str | None:
    """The CPU's widest matrix instruction set ("AVX2", "AVX-512", "AVX512-BF16", "AMX"), None where the OS does
    not say (no /proc/cpuinfo)."""
    flags = cpu_flags()
    return isa_of(set(flags)) if flags else None


def isa_of(flags: set[str]) -> str | None:
    """The widest of :data:`CPU_ISA` among a CPU's ``flags``, or None."""
    return next((name for flag, name in CPU_ISA if flag in flags), None)


def cpu_name(threads: int | None = None) -> str:
    """The name measurements on this CPU carry: model, cores, threads where known, and its instruction set."""
    isa = cpu_isa()
    threads_text = f", {threads} threads" if threads else ""
    return f"{cpu_model_name()} ({os.cpu_count()} cores{threads_text}{', ' + isa if isa else ''})"
