"""GEMM throughput by shape: the compute model with and without tile / wave quantization.

    python benchmarks/gemm_shapes.py

Prints, per accelerator and shape, the predicted TFLOP/s of one bf16 GEMM under the default
profile without quantization (old) and with it (new, planner/costs/waves.py), and the measured
figure where one is published: the Maximum Achievable Matmul FLOPS best shapes (stas00/
ml-engineering compute/accelerator/README.md, via shared/reference/hardware.md B1; measured
without the in-training ``sustained_fraction`` the profile applies, so the predicted column is
expected to sit about 25 % below them). The training shapes are those of hidden-1,024 and
hidden-4,096 models at TP 1 and TP 8 (8,192 tokens per micro-batch). Never fails.
"""

from __future__ import annotations

import dataclasses

import planner
from planner.costs import compute

CLUSTERS = ("dgx-a100-40gb", "dgx-h100", "dgx-b200")
# (label, m, n, k, measured TFLOP/s by cluster or None)
SHAPES = (
    ("MAMF A100 best", 1024, 10240, 5120, {"dgx-a100-40gb": 271.2}),
    ("MAMF H100 best", 2048, 2048, 13312, {"dgx-h100": 794.5}),
    ("MAMF B200 best", 1792, 16128, 3072, {"dgx-b200": 1745.0}),
    ("h1024 qkv tp1", 8192, 3072, 1024, {}),
    ("h1024 qkv tp8", 8192, 384, 1024, {}),
    ("h1024 proj tp8", 8192, 1024, 128, {}),
    ("h1024 wgrad tp8", 1024, 384, 8192, {}),
    ("h4096 fc1 tp1", 8192, 28672, 4096, {}),
    ("h4096 fc1 tp8", 8192, 3584, 4096, {}),
    ("h4096 fc2 tp8", 8192, 4096, 1792, {}),
)


def _tflops(m: float, n: float, k: float, dev: compute.Device) -> float:
    return 2.0 * m * n * k / compute.gemm_time_s(m, n, k, dev) / 1e12


def main() -> None:
    print(f"{'cluster':15} {'shape':17} {'m x n x k':>20} {'old TF/s':>9} {'new TF/s':>9} meas.")
    for cid in CLUSTERS:
        cluster = planner.load_cluster(cid)
        new = compute.make_device(cluster.accelerator, planner.default_profile(cluster), "bf16")
        old = dataclasses.replace(new, sm_count=None)
        for label, m, n, k, measured in SHAPES:
            meas = measured.get(cid)
            shape = f"{m}x{n}x{k}"
            print(
                f"{cid:15} {label:17} {shape:>20} {_tflops(m, n, k, old):9.1f} "
                f"{_tflops(m, n, k, new):9.1f} {'' if meas is None else meas}"
            )
    print("\nSMs:", {c: planner.load_cluster(c).accelerator.sm_count for c in CLUSTERS})


if __name__ == "__main__":
    main()
