"""Float8 GEMM throughput by scaling granularity on one GPU: bf16 ``torch.mm`` against
``torch._scaled_mm`` with one scale per tensor (tensorwise) and one per row of A and column of B
(rowwise), on the linear-layer shapes of Llama 3.1 8B and 70B at 8,192 tokens.

    python benchmarks/device/fp8_scaling.py [--out fp8_gemm.txt]

Prints a table (TFLOP/s, and each fp8 kind's speed-up over bf16); needs a GPU with float8
(compute capability >= 8.9). Medians of CUDA-event times over 30 runs after 5 warm-ups.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable
from functools import partial

import torch

SHAPES = {  # (m, n, k) of the forward GEMMs: tokens x out x in
    "8B qkv": (8192, 6144, 4096),
    "8B proj": (8192, 4096, 4096),
    "8B fc1 (gate+up)": (8192, 28672, 4096),
    "8B fc2": (8192, 4096, 14336),
    "70B qkv": (8192, 10240, 8192),
    "70B proj": (8192, 8192, 8192),
    "70B fc1 (gate+up)": (8192, 57344, 8192),
    "70B fc2": (8192, 8192, 28672),
}


def timed(fn: Callable[[], object], warmup: int = 5, repeats: int = 30) -> float:
    """Median seconds of ``fn`` by CUDA events."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    dev = "cuda"
    fp8 = torch.float8_e4m3fn
    lines = [
        f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}",
        f"{'shape':18} {'m':>6} {'n':>6} {'k':>6} {'bf16 TF/s':>10} {'tensorwise':>11} "
        f"{'rowwise':>9} {'tw/bf16':>8} {'rw/bf16':>8} {'rw/tw':>6}",
    ]
    print(lines[0], flush=True)
    print(lines[1], flush=True)
    for name, (m, n, k) in SHAPES.items():
        a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
        b = torch.randn(k, n, device=dev, dtype=torch.bfloat16)
        bf16_s = timed(partial(torch.mm, a, b))
        a8 = a.to(fp8)
        b8 = b.t().contiguous().to(fp8).t()  # column-major, as _scaled_mm requires
        one = torch.tensor(1.0, device=dev)
        tw_s = timed(partial(torch._scaled_mm, a8, b8, one, one, out_dtype=torch.bfloat16))
        row_a = torch.ones(m, 1, device=dev)
        col_b = torch.ones(1, n, device=dev)
        try:
            rw_s = timed(partial(torch._scaled_mm, a8, b8, row_a, col_b, out_dtype=torch.bfloat16))
        except RuntimeError as exc:  # a torch without rowwise scaling
            print(f"rowwise refused: {exc}", flush=True)
            rw_s = float("nan")
        flops = 2.0 * m * n * k
        line = (
            f"{name:18} {m:6d} {n:6d} {k:6d} {flops / bf16_s / 1e12:10.0f} "
            f"{flops / tw_s / 1e12:11.0f} {flops / rw_s / 1e12:9.0f} {bf16_s / tw_s:8.2f} "
            f"{bf16_s / rw_s:8.2f} {tw_s / rw_s:6.2f}"
        )
        print(line, flush=True)
        lines.append(line)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            fh.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
