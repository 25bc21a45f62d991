"""GEMM throughput on the (m, n, k) shapes that transformer layers produce.

Method: like stas00/ml-engineering's ``mamf-finder.py`` (Maximum Achievable Matmul FLOPS), each
shape is timed as ``torch.mm(a, b, out=c)`` on ``torch.randn`` operands after warm-up, with a
cache flush before every timed repeat, and the median time is kept. Unlike mamf-finder, which
sweeps a dense grid to find the peak, the shapes here are the ones a training step actually
runs, so a fitted efficiency curve sees realistic m/n/k aspect ratios (including the skinny
tensor-parallel shards).

Per layer with hidden ``h``, MLP width ``ffn`` and tensor-parallel degree ``tp`` (Megatron
column/row split), with ``m`` tokens per micro-batch:

============  ==========  ==========
GEMM          n           k
============  ==========  ==========
qkv           3h / tp     h
attn proj     h           h / tp
fc1           ffn / tp    h
fc2           h           ffn / tp
============  ==========  ==========

Each contributes its forward ``(m, n, k)`` and the two backward GEMMs: data gradient
``(m, k, n)`` and weight gradient ``(k, n, m)``. Operands are contiguous row-major (the real
backward reads some of them transposed; cuBLAS/oneDNN handle both at similar speed).

FP8 uses ``torch._scaled_mm`` with unit fp32 scalar scales, ``float8_e4m3fn`` operands, the
second operand column-major (the layout cuBLASLt FP8 requires) and a bf16 output, on CUDA
devices with compute capability >= 8.9 (Ada, Hopper, Blackwell); failures are skipped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import torch

from calibration.samples import Dtype, GemmSample
from calibration.suite.timing import (
    TORCH_DTYPES,
    ProgressFn,
    TimingSettings,
    time_op,
    timing_settings,
)

Shape = tuple[int, int, int]
"""(m, n, k): an (m x k) @ (k x n) product; FLOPs = 2mnk."""

LayerDims = tuple[int, int]
"""(hidden, ffn_hidden) of one transformer layer."""

TP_DEGREES: tuple[int, ...] = (1, 2, 4, 8)

STAGE = "gemm"


def gemm_flops(shape: Shape) -> int:
    """FLOPs of one (m, n, k) GEMM: 2mnk."""
    m, n, k = shape
    return 2 * m * n * k


def layer_gemm_shapes(
    layers: Iterable[LayerDims],
    tokens: Iterable[int],
    tps: Iterable[int] = TP_DEGREES,
) -> list[Shape]:
    """Deduplicated (m, n, k) shapes of the qkv/proj/fc1/fc2 GEMMs, forward and both backward
    GEMMs, for every layer, token count ``m`` and tensor-parallel degree (degrees that do not
    divide ``hidden`` and ``ffn`` are skipped). Order: first occurrence."""
    token_list = list(tokens)
    tp_list = list(tps)
    seen: dict[Shape, None] = {}
    for hidden, ffn in layers:
        for tp in tp_list:
            if hidden % tp or ffn % tp:
                continue
            weights = (
                (3 * hidden // tp, hidden),  # qkv
                (hidden, hidden // tp),  # attention output projection
                (ffn // tp, hidden),  # fc1
                (hidden, ffn // tp),  # fc2
            )
            for n, k in weights:
                for m in token_list:
                    for shape in ((m, n, k), (m, k, n), (k, n, m)):
                        seen.setdefault(shape, None)
    return list(seen)


def spread_by_flops(shapes: Sequence[Shape], count: int) -> list[Shape]:
    """At most ``count`` shapes evenly spaced (by rank) over ``shapes`` sorted by FLOPs, always
    keeping the smallest and the largest; returned in ascending FLOPs."""
    ordered = sorted(shapes, key=lambda s: (gemm_flops(s), s))
    if count <= 0:
        return []
    if len(ordered) <= count:
        return ordered
    if count == 1:
        return [ordered[-1]]
    last = len(ordered) - 1
    picks = sorted({round(i * last / (count - 1)) for i in range(count)})
    return [ordered[i] for i in picks]


def default_shapes(device: str, quick: bool) -> list[Shape]:
    """The shape set for a device and mode.

    * CPU quick: hidden 256..1024 (ffn 4h), m in {512, 2048}, 12 shapes spread over FLOPs
      (largest ~17 GFLOP, a few seconds in fp32 on 2 cores).
    * CPU full: hidden 512..2048, m 512..4096, 64 shapes.
    * CUDA quick: Llama-8B/70B-like layers, m in {2048, 8192}, 32 shapes.
    * CUDA full: hidden 2048..8192, m 1024..16384, 128 shapes.
    """
    if torch.device(device).type == "cuda":
        if quick:
            shapes = layer_gemm_shapes([(4096, 14336), (8192, 28672)], (2048, 8192))
            return spread_by_flops(shapes, 32)
        layers = [(2048, 8192), (4096, 14336), (5120, 13824), (8192, 28672)]
        shapes = layer_gemm_shapes(layers, (1024, 2048, 4096, 8192, 16384))
        return spread_by_flops(shapes, 128)
    if quick:
        shapes = layer_gemm_shapes([(256, 1024), (512, 2048), (1024, 4096)], (512, 2048))
        return spread_by_flops(shapes, 12)
    shapes = layer_gemm_shapes([(512, 2048), (1024, 4096), (2048, 8192)], (512, 1024, 2048, 4096))
    return spread_by_flops(shapes, 64)


def fp8_supported(device: str) -> bool:
    """True on CUDA devices with compute capability >= 8.9 and a torch with float8 types."""
    dev = torch.device(device)
    if dev.type != "cuda" or not hasattr(torch, "float8_e4m3fn"):
        return False
    return torch.cuda.get_device_capability(dev) >= (8, 9)


def gemm_dtypes(device: str, quick: bool) -> list[Dtype]:
    """fp32 always; bf16 and fp16 on CUDA (bf16 on CPU unless quick); fp8 where supported."""
    if torch.device(device).type == "cuda":
        dtypes: list[Dtype] = ["fp32", "bf16", "fp16"]
        if fp8_supported(device):
            dtypes.append("fp8")
        return dtypes
    return ["fp32"] if quick else ["fp32", "bf16"]


def make_gemm(shape: Shape, dtype: Dtype, device: str) -> Callable[[], object]:
    """Allocate random operands for ``shape`` and return a closure running the GEMM once.

    fp8: ``torch._scaled_mm(a, b, scale_a, scale_b, out_dtype=bf16)`` with ``a`` (m x k)
    row-major and ``b`` (k x n) column-major (a transposed contiguous (n x k)).
    """
    m, n, k = shape
    if dtype == "fp8":
        fp8 = TORCH_DTYPES["fp8"]
        a8 = torch.randn(m, k, device=device).to(fp8)
        b8 = torch.randn(n, k, device=device).to(fp8).t()
        scale = torch.tensor(1.0, device=device, dtype=torch.float32)

        def run_fp8() -> object:
            return torch._scaled_mm(a8, b8, scale_a=scale, scale_b=scale, out_dtype=torch.bfloat16)

        return run_fp8

    tdt = TORCH_DTYPES[dtype]
    a = torch.randn(m, k, device=device, dtype=tdt)
    b = torch.randn(k, n, device=device, dtype=tdt)
    c = torch.empty(m, n, device=device, dtype=tdt)

    def run_mm() -> object:
        return torch.mm(a, b, out=c)

    return run_mm


def bench_gemm(
    shapes: Sequence[Shape],
    dtypes: Sequence[Dtype],
    device: str = "cpu",
    settings: TimingSettings | None = None,
    progress: ProgressFn | None = None,
) -> list[GemmSample]:
    """Time every shape in every dtype; returns one :class:`GemmSample` (median seconds) per
    (shape, dtype). fp8 shapes that ``_scaled_mm`` rejects (or any fp8 error) are skipped."""
    cfg = settings or timing_settings(device, quick=True)
    total = len(shapes) * len(dtypes)
    done = 0
    samples: list[GemmSample] = []
    if progress is not None:
        progress(STAGE, 0, total)
    for dtype in dtypes:
        for shape in shapes:
            try:
                fn = make_gemm(shape, dtype, device)
                seconds = time_op(fn, device, cfg.warmup, cfg.repeats, cfg.flush_bytes)
            except (RuntimeError, TypeError, ValueError):
                if dtype != "fp8":
                    raise
            else:
                m, n, k = shape
                samples.append(GemmSample(m=m, n=n, k=k, dtype=dtype, seconds=seconds))
            done += 1
            if progress is not None:
                progress(STAGE, done, total)
    return samples


def run_gemm(
    device: str = "cpu",
    quick: bool = True,
    progress: ProgressFn | None = None,
) -> list[GemmSample]:
    """The GEMM part of the suite with the default shapes, dtypes and timing for the mode."""
    return bench_gemm(
        default_shapes(device, quick),
        gemm_dtypes(device, quick),
        device,
        timing_settings(device, quick),
        progress,
    )
