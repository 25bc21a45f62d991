"""Causal ``scaled_dot_product_attention`` forward and backward times.

Forward and backward are timed separately, as FlashAttention's own benchmarks
(Dao-AILab/flash-attention ``benchmarks/benchmark_flash_attention.py``) report them:

* forward: ``F.scaled_dot_product_attention(q, k, v, is_causal=True)`` with autograd recording
  (inputs ``requires_grad``), so the kernel is the training one (it saves softmax statistics);
* backward: before every call a fresh forward runs *outside* the timed region (the ``setup``
  hook of :func:`~calibration.suite.timing.time_op`), then only ``out.backward(grad)`` is
  timed, with ``q/k/v.grad`` reset to ``None`` so no gradient accumulation is included.

Tensors are (batch, heads, seq, head_dim), random normal. FLOPs (for whoever fits these):
forward 4 * batch * heads * seq^2 * head_dim (halved by a causal-aware kernel), backward
2.5x forward. Times are medians in seconds.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from calibration.samples import AttentionSample, Dtype
from calibration.suite.timing import (
    TORCH_DTYPES,
    ProgressFn,
    TimingSettings,
    time_op,
    timing_settings,
)

AttnConfig = tuple[int, int, int, int]
"""(batch, heads, seq, head_dim)."""

STAGE = "attention"


def default_configs(device: str, quick: bool) -> list[AttnConfig]:
    """Shapes per device and mode.

    * CPU quick: seq 128..512, head_dim 64, heads 4-8, batch 1-2 (6 configs, well under 1 s).
    * CPU full: seq 512..2048, head_dim 64/128, 8 heads, batch 1.
    * CUDA: seq 512..8192, head_dim 64 (64 heads) and 128 (32 heads) so heads * head_dim =
      4096, batch chosen to keep 16384 tokens per call (quick: a subset of the sequences).
    """
    if torch.device(device).type == "cuda":
        seqs = (512, 2048, 8192) if quick else (512, 1024, 2048, 4096, 8192)
        dims = (128,) if quick else (64, 128)
        return [(max(1, 16384 // s), 4096 // d, s, d) for d in dims for s in seqs]
    if quick:
        return [
            (2, 4, 128, 64),
            (2, 8, 128, 64),
            (1, 4, 256, 64),
            (2, 8, 256, 64),
            (1, 8, 512, 64),
            (2, 8, 512, 64),
        ]
    return [(1, 8, s, d) for d in (64, 128) for s in (512, 1024, 2048)]


def attention_dtypes(device: str, quick: bool) -> list[Dtype]:
    """bf16 on CUDA; fp32 on CPU (plus bf16 when not quick)."""
    if torch.device(device).type == "cuda":
        return ["bf16"]
    return ["fp32"] if quick else ["fp32", "bf16"]


def time_attention(
    config: AttnConfig,
    dtype: Dtype,
    device: str = "cpu",
    settings: TimingSettings | None = None,
    causal: bool = True,
) -> AttentionSample:
    """Median forward and backward-only seconds of one causal SDPA call."""
    cfg = settings or timing_settings(device, quick=True)
    batch, heads, seq, head_dim = config
    tdt = TORCH_DTYPES[dtype]

    def rand(grad: bool) -> torch.Tensor:
        return torch.randn(
            batch, heads, seq, head_dim, device=device, dtype=tdt, requires_grad=grad
        )

    q, k, v = rand(True), rand(True), rand(True)
    grad_out = rand(False)

    def forward() -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    fwd_s = time_op(forward, device, cfg.warmup, cfg.repeats, cfg.flush_bytes)

    pending: list[torch.Tensor] = []

    def setup() -> None:
        for t in (q, k, v):
            t.grad = None
        pending.clear()
        pending.append(forward())

    def backward() -> None:
        pending.pop().backward(grad_out)

    bwd_s = time_op(backward, device, cfg.warmup, cfg.repeats, cfg.flush_bytes, setup=setup)
    return AttentionSample(
        batch=batch,
        heads=heads,
        seq=seq,
        head_dim=head_dim,
        causal=causal,
        dtype=dtype,
        fwd_seconds=fwd_s,
        bwd_seconds=bwd_s,
    )


def bench_attention(
    configs: Sequence[AttnConfig],
    dtypes: Sequence[Dtype],
    device: str = "cpu",
    settings: TimingSettings | None = None,
    progress: ProgressFn | None = None,
) -> list[AttentionSample]:
    """One :class:`AttentionSample` per (config, dtype)."""
    total = len(configs) * len(dtypes)
    samples: list[AttentionSample] = []
    if progress is not None:
        progress(STAGE, 0, total)
    for dtype in dtypes:
        for config in configs:
            samples.append(time_attention(config, dtype, device, settings))
            if progress is not None:
                progress(STAGE, len(samples), total)
    return samples


def run_attention(
    device: str = "cpu",
    quick: bool = True,
    progress: ProgressFn | None = None,
) -> list[AttentionSample]:
    """The attention part of the suite with the default configs and timing for the mode."""
    return bench_attention(
        default_configs(device, quick),
        attention_dtypes(device, quick),
        device,
        timing_settings(device, quick),
        progress,
    )
