"""Memory-bound ops: effective bandwidth = ``bytes_moved / seconds``.

``bytes_moved`` follows the STREAM convention (McCalpin's STREAM benchmark; also
stas00/ml-engineering's memory-bandwidth notes): every byte the op must read plus every byte it
must write, each counted once, ignoring cache reuse and extra passes an implementation makes.
So the derived bandwidth is *effective* -- an unfused implementation that makes several passes
reports less bandwidth, which is what a planner that counts ideal bytes needs.

=============  ========================================  ===========================================
op             what runs                                 bytes_moved (e = element size in bytes)
=============  ========================================  ===========================================
copy           ``dst.copy_(src)``                        2 * numel * e (read src, write dst)
rmsnorm        ``F.rms_norm(x, (h,), w)``                2 * numel * e + h * e
layernorm      ``F.layer_norm(x, (h,), w, b)``           2 * numel * e + 2 * h * e
softmax_xent   ``F.cross_entropy(logits, targets)``      2 * numel * e + 8 * tokens (see below)
adamw          ``torch.optim.AdamW(foreach=True).step``  28 * numel (fp32 p, g, m, v read; p, m, v
                                                         written: 7 * 4 bytes)
=============  ========================================  ===========================================

``softmax_xent``: eager PyTorch computes ``nll_loss(log_softmax(logits))``, so the (tokens x
vocab) logits are read once and the log-probabilities written once; ``nll_loss`` then reads
only one value per row, and the int64 targets are 8 bytes per token.

Activation-like ops (copy, norms, cross-entropy) run in fp32 on CPU and bf16 on CUDA (training
dtypes); AdamW always runs on fp32 master weights. Sizes are those of the main tensor (x,
logits, or the parameter), in bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from calibration.samples import Dtype, MemoryOp, MemorySample
from calibration.suite.timing import (
    MIB,
    TORCH_DTYPES,
    ProgressFn,
    TimingSettings,
    time_op,
    timing_settings,
)

MEMORY_OPS: tuple[MemoryOp, ...] = ("copy", "rmsnorm", "layernorm", "softmax_xent", "adamw")

STAGE = "memory"

NORM_HIDDEN = 4096
"""Row width (hidden size) of the normalization benchmarks."""

ADAMW_BYTES_PER_ELEMENT = 28
"""fp32 AdamW: read param, grad, exp_avg, exp_avg_sq; write param, exp_avg, exp_avg_sq."""

FOOTPRINT_FACTOR = 8
"""Peak memory of an op, in multiples of its main tensor's size (AdamW: p, g, m, v plus
foreach temporaries); sizes whose footprint exceeds the free memory are dropped."""


@dataclass(frozen=True)
class MemoryCase:
    """A ready-to-time memory-bound op.

    Attributes:
        op: which op.
        fn: runs the op once.
        elements: elements of the main tensor.
        bytes_moved: bytes read + written once each (see the module table).
    """

    op: MemoryOp
    fn: Callable[[], object]
    elements: int
    bytes_moved: float


def vocab_for(device: str) -> int:
    """Vocabulary width of the cross-entropy benchmark: 128256 (Llama 3) on CUDA, 32000 on
    CPU (so that small sizes still have whole rows)."""
    return 128256 if torch.device(device).type == "cuda" else 32000


def activation_dtype(device: str) -> Dtype:
    """Element type of copy / norm / cross-entropy: bf16 on CUDA, fp32 on CPU."""
    return "bf16" if torch.device(device).type == "cuda" else "fp32"


def make_memory_case(
    op: MemoryOp,
    nbytes: int,
    device: str = "cpu",
    dtype: Dtype | None = None,
    vocab: int | None = None,
) -> MemoryCase:
    """Allocate random inputs whose main tensor is about ``nbytes`` bytes and return the case.

    ``dtype`` applies to copy/norms/cross-entropy (default :func:`activation_dtype`); AdamW is
    always fp32. Sizes are rounded down to whole rows (at least one row).
    """
    act: Dtype = dtype or activation_dtype(device)
    tdt = TORCH_DTYPES[act]
    esize = torch.empty((), dtype=tdt).element_size()

    if op == "adamw":
        numel = max(1, nbytes // 4)
        param = torch.nn.Parameter(torch.randn(numel, device=device))
        param.grad = torch.randn(numel, device=device)
        opt = torch.optim.AdamW([param], lr=1e-4, weight_decay=0.1, foreach=True, fused=False)
        return MemoryCase(op, opt.step, numel, float(ADAMW_BYTES_PER_ELEMENT * numel))

    if op == "copy":
        numel = max(1, nbytes // esize)
        src = torch.randn(numel, device=device, dtype=tdt)
        dst = torch.empty_like(src)
        return MemoryCase(op, lambda: dst.copy_(src), numel, float(2 * numel * esize))

    if op in ("rmsnorm", "layernorm"):
        hidden = NORM_HIDDEN
        rows = max(1, nbytes // (esize * hidden))
        x = torch.randn(rows, hidden, device=device, dtype=tdt)
        weight = torch.randn(hidden, device=device, dtype=tdt)
        numel = rows * hidden
        if op == "rmsnorm":

            def rms() -> object:
                return F.rms_norm(x, (hidden,), weight, eps=1e-5)

            return MemoryCase(op, rms, numel, float((2 * numel + hidden) * esize))
        bias = torch.randn(hidden, device=device, dtype=tdt)

        def ln() -> object:
            return F.layer_norm(x, (hidden,), weight, bias, eps=1e-5)

        return MemoryCase(op, ln, numel, float((2 * numel + 2 * hidden) * esize))

    if op == "softmax_xent":
        width = vocab or vocab_for(device)
        tokens = max(1, nbytes // (esize * width))
        logits = torch.randn(tokens, width, device=device, dtype=tdt)
        targets = torch.randint(0, width, (tokens,), device=device)
        numel = tokens * width

        def xent() -> object:
            return F.cross_entropy(logits, targets)

        return MemoryCase(op, xent, numel, float(2 * numel * esize + 8 * tokens))

    raise ValueError(f"unknown memory op {op!r}")


def free_memory_bytes(device: str) -> int | None:
    """Free memory in bytes: ``torch.cuda.mem_get_info`` on CUDA, ``MemAvailable`` from
    /proc/meminfo on CPU (None if unknown)."""
    dev = torch.device(device)
    if dev.type == "cuda":
        free, _total = torch.cuda.mem_get_info(dev)
        return int(free)
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def default_sizes(device: str, quick: bool) -> list[int]:
    """Main-tensor sizes in bytes, powers of 4 MiB, capped so the footprint fits free memory.

    CPU quick: 4, 16, 64 MiB. CPU full: 4 MiB..1 GiB. CUDA quick: 16 MiB..1 GiB. CUDA full:
    4 MiB..4 GiB.
    """
    if torch.device(device).type == "cuda":
        top = 1024 if quick else 4096
        low = 16 if quick else 4
    else:
        top = 64 if quick else 1024
        low = 4
    sizes: list[int] = []
    size = low
    while size <= top:
        sizes.append(size * MIB)
        size *= 4
    free = free_memory_bytes(device)
    if free is not None:
        fitting = [s for s in sizes if s * FOOTPRINT_FACTOR <= free]
        sizes = fitting or sizes[:1]
    return sizes


def bench_memory(
    sizes: Sequence[int],
    ops: Sequence[MemoryOp] = MEMORY_OPS,
    device: str = "cpu",
    settings: TimingSettings | None = None,
    progress: ProgressFn | None = None,
    dtype: Dtype | None = None,
) -> list[MemorySample]:
    """One :class:`MemorySample` (median seconds) per (op, size in bytes)."""
    cfg = settings or timing_settings(device, quick=True)
    total = len(sizes) * len(ops)
    samples: list[MemorySample] = []
    if progress is not None:
        progress(STAGE, 0, total)
    for op in ops:
        for nbytes in sizes:
            case = make_memory_case(op, nbytes, device, dtype)
            seconds = time_op(case.fn, device, cfg.warmup, cfg.repeats, cfg.flush_bytes)
            samples.append(
                MemorySample(
                    op=op, elements=case.elements, bytes_moved=case.bytes_moved, seconds=seconds
                )
            )
            del case
            if progress is not None:
                progress(STAGE, len(samples), total)
    return samples


def run_memory(
    device: str = "cpu",
    quick: bool = True,
    progress: ProgressFn | None = None,
) -> list[MemorySample]:
    """The memory part of the suite with the default sizes and timing for the mode."""
    return bench_memory(
        default_sizes(device, quick),
        MEMORY_OPS,
        device,
        timing_settings(device, quick),
        progress,
    )
