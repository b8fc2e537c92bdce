"""Benchmark: one float32 linear layer on this CPU through PyTorch's BLAS, through oneDNN with the weights
in the plain layout, and through oneDNN with the weights packed (what runs use where this PyTorch can
pack), for the token counts a verification pass has (tools/engine/cpu_gemm.py decides which one runs).

    .venv/bin/python benchmarks/cpu_gemm.py                      # the default target's MLP shape
    .venv/bin/python benchmarks/cpu_gemm.py --shape 151936x1536 --tokens 1,2,4,8 --repeats 3   # the LM head
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
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
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


if __name__ == "__main__":
    main()
