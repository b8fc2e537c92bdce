"""Benchmark: one float32 linear layer on this CPU through PyTorch's BLAS, through oneDNN with the weights
in the plain layout, and through oneDNN with the weights packed (what runs use where this PyTorch can
pack), for the token counts a verification pass has (tools/engine/cpu_gemm.py decides which one runs).

    .venv/bin/python benchmarks/scripts/cpu_gemm.py                      # the default target's MLP shape
    .venv/bin/python benchmarks/scripts/cpu_gemm.py --shape 151936x1536 --tokens 1,2,4,8 --repeats 3   # the LM head

A single bfloat16 layer fits in a server CPU's cache and times far faster than it runs in a model, so
bfloat16 is timed on a whole model: its passes over a few tokens after a 300-token prompt, with
PyTorch's layers and then with the packed ones (what runs use where the CPU has bfloat16 instructions):

    .venv/bin/python benchmarks/scripts/cpu_gemm.py --model qwen2.5-coder-1.5b-instruct --dtype bfloat16 --threads 2
"""

from __future__ import annotations

import argparse
import time

from common import REPO  # puts the repo on the path


def per_call_ms(fn, repeats: int) -> float:
    fn()
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(repeats):
            fn()
        best = min(best, (time.perf_counter() - start) / repeats * 1000)
    return best


def main() -> None:
    import torch

    from tools.engine import cpu_gemm
    from tools.engine.cpu_gemm import OneDNNLinear

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", default="8960x1536", help="out x in features")
    p.add_argument("--tokens", default="1,2,4,8,16")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--model", default=None, help="time whole passes of this model instead of one layer")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.model:
        return model_passes(args.model, args.dtype, [int(v) for v in args.tokens.split(",")], args.threads)
    out_f, in_f = (int(v) for v in args.shape.split("x"))
    print(f"tools.engine.cpu_gemm from {REPO.name}")
    layer = torch.nn.Linear(in_f, out_f, bias=False)
    packed = OneDNNLinear(layer, keep_dense=True)
    plain_layout = OneDNNLinear(layer, keep_dense=True, pack=False)
    print(f"{out_f}x{in_f} float32, {torch.get_num_threads()} threads, packed for {cpu_gemm.PACK_ROWS} rows")
    print("| tokens | BLAS ms | oneDNN ms | oneDNN packed ms |\n|---|---|---|---|")
    with torch.inference_mode():
        for n in (int(v) for v in args.tokens.split(",")):
            x = torch.randn(1, n, in_f)
            print(f"| {n} | {per_call_ms(lambda: layer(x), args.repeats):.2f} | "
                  f"{per_call_ms(lambda: plain_layout(x), args.repeats):.2f} | "
                  f"{per_call_ms(lambda: packed(x), args.repeats):.2f} |")


def model_passes(ref: str, dtype: str, counts: list[int], threads: int | None) -> None:
    """Best of 3x4 passes over each token count after a 300-token prompt, PyTorch's layers then packed ones."""
    import torch
    from transformers import DynamicCache

    from tools import models
    from tools.engine import cpu_gemm

    model = models.load(ref, dtype=dtype, threads=threads).model

    def passes() -> dict[int, float]:
        times = {}
        with torch.inference_mode():
            cache = DynamicCache()
            model(torch.randint(100, 5000, (1, 300)), past_key_values=cache, use_cache=True)
            for n in counts:
                ids, best = torch.randint(100, 5000, (1, n)), float("inf")
                for _ in range(3):
                    start = time.perf_counter()
                    for _ in range(4):
                        model(ids, past_key_values=cache, use_cache=True)
                        cache.crop(-n)
                    best = min(best, (time.perf_counter() - start) / 4 * 1000)
                times[n] = best
        return times

    own = passes()
    if not cpu_gemm.wanted("cpu", model.dtype):
        print(f"{dtype} layers stay PyTorch's on this CPU (tools.engine.cpu_gemm.wanted)")
    swapped = cpu_gemm.use_onednn(model)
    packed = passes() if swapped else {}
    print(f"{ref} in {dtype}, {torch.get_num_threads()} threads, {swapped} layers packed\n"
          "| tokens | PyTorch ms | oneDNN packed ms |\n|---|---|---|")
    for n in counts:
        print(f"| {n} | {own[n]:.0f} | {packed[n]:.0f} |" if packed else f"| {n} | {own[n]:.0f} | |")


if __name__ == "__main__":
    main()
