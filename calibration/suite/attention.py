"""Causal ``scaled_dot_product_attention`` forward and backward times.

Forward and backward are timed separately, as FlashAttention's own benchmarks
(Dao-AILab/flash-attention ``benchmarks/benchmark_flash_attention.py``) report them:

* forward: ``F.scaled_dot_product_attention(q, k, v, is_causal=True)`` with autograd recording
  (inputs ``requires_grad``), so the kernel is the training one (it saves softmax statistics);
* backward: before every call a fresh forward runs *outside* the timed region (the ``setup``
  hook of :func:`~calibration.suite.timing.time_op`), then only ``out.backward(grad)`` is
  timed, with ``q/k/v.grad`` reset to ``None`` so no gradient accumulation is included.

On CUDA each backend the planner costs apart is forced in turn (``torch.nn.attention.
sdpa_kernel``): "flash" (FlashAttention-2 kernels, the planner's flash2 curve) and "cudnn"
(cuDNN fused attention, its cudnn curve); a backend that refuses a shape or dtype is skipped.
SDPA's own choice differs by torch version (recent releases prefer cuDNN on Hopper), so the
unforced call would not say which kernel was timed. On a CPU the one backend is "default".

Tensors are (batch, heads, seq, head_dim), random normal. FLOPs (for whoever fits these):
forward 4 * batch * heads * seq^2 * head_dim (halved by a causal-aware kernel), backward
2.5x forward. Times are medians in seconds.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from calibration.samples import AttentionSample, Dtype, SdpaBackend
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


def attention_backends(device: str) -> list[SdpaBackend]:
    """The SDPA backends measured apart: flash and cuDNN on CUDA, SDPA's own choice on a CPU."""
    if torch.device(device).type == "cuda":
        return ["flash", "cudnn"]
    return ["default"]


def _forced(backend: SdpaBackend) -> contextlib.AbstractContextManager[object]:
    """A context in which SDPA runs only ``backend`` (no restriction for "default")."""
    if backend == "default":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    chosen = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}
    return sdpa_kernel([chosen[backend]])


def time_attention(
    config: AttnConfig,
    dtype: Dtype,
    device: str = "cpu",
    settings: TimingSettings | None = None,
    causal: bool = True,
    backend: SdpaBackend = "default",
) -> AttentionSample:
    """Median forward and backward-only seconds of one causal SDPA call on ``backend``.

    Raises RuntimeError where the forced backend cannot run the call."""
    with _forced(backend):
        return _time_attention(config, dtype, device, settings, causal, backend)


def _time_attention(
    config: AttnConfig,
    dtype: Dtype,
    device: str,
    settings: TimingSettings | None,
    causal: bool,
    backend: SdpaBackend,
) -> AttentionSample:
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
        backend=backend,
    )


def bench_attention(
    configs: Sequence[AttnConfig],
    dtypes: Sequence[Dtype],
    device: str = "cpu",
    settings: TimingSettings | None = None,
    progress: ProgressFn | None = None,
    backends: Sequence[SdpaBackend] = ("default",),
) -> list[AttentionSample]:
    """One :class:`AttentionSample` per (backend, config, dtype); a forced backend that
    refuses a call (RuntimeError: not built, or not for that shape or dtype) is skipped."""
    total = len(configs) * len(dtypes) * len(backends)
    samples: list[AttentionSample] = []
    done = 0
    if progress is not None:
        progress(STAGE, 0, total)
    for backend in backends:
        for dtype in dtypes:
            for config in configs:
                try:
                    samples.append(time_attention(config, dtype, device, settings, True, backend))
                except RuntimeError:
                    if backend == "default":
                        raise
                done += 1
                if progress is not None:
                    progress(STAGE, done, total)
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
        attention_backends(device),
    )
