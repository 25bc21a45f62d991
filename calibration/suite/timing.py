"""Timing and metadata helpers shared by every part of the microbenchmark suite.

Method (the usual microbenchmark hygiene, as in stas00/ml-engineering's ``mamf-finder.py``
and the PyTorch benchmarking recipes):

* a few untimed warm-up calls first (allocator, kernel selection, lazy init, CPU frequency);
* before every timed repeat, a buffer larger than the last-level cache is read and written
  so the op starts with cold caches, as it does inside a real training step;
* on CUDA the op is bracketed by ``torch.cuda.Event(enable_timing=True)`` and the device is
  synchronized before reading the events; on CPU ``time.perf_counter`` brackets the call
  (CPU torch ops are synchronous);
* the result is the **median** over repeats, in seconds (robust to stragglers).

Benchmarks feed random inputs (``torch.randn``), never zeros: some kernels and hardware take
fast paths on zeros, and power draw (so clocks) depends on the data.
"""

from __future__ import annotations

import functools
import os
import platform
import shlex
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import torch

from calibration.samples import Dtype, SuiteMetadata

ProgressFn = Callable[[str, int, int], None]
"""``progress(stage, done, total)``: called as a part makes progress (counts of items)."""

MIB = 1 << 20
GIB = 1 << 30

MIN_SECONDS = 1e-9
"""Floor for a measured time, in seconds (the schema requires times > 0)."""

TORCH_DTYPES: dict[Dtype, torch.dtype] = {
    "fp32": torch.float32,
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
    "fp8": torch.float8_e4m3fn,
}


@dataclass(frozen=True)
class TimingSettings:
    """How hard to time each op.

    Attributes:
        warmup: untimed calls before timing.
        repeats: timed calls; the median is reported.
        flush_bytes: size of the cache-flush buffer touched before each timed call, in bytes
            (0 disables flushing).
    """

    warmup: int
    repeats: int
    flush_bytes: int


def timing_settings(device: str, quick: bool) -> TimingSettings:
    """Default :class:`TimingSettings` for ``device`` ("cpu" or "cuda") and mode.

    The flush buffer is 64 MiB on CPU quick / 128 MiB on CPU full (server L3 caches are up
    to ~32-256 MiB; 64 MiB covers this class of machine and keeps quick mode quick), and
    256 MiB on CUDA (H100 L2 is 50 MiB, B200 126 MiB).
    """
    if _device_type(device) == "cuda":
        if quick:
            return TimingSettings(warmup=3, repeats=10, flush_bytes=256 * MIB)
        return TimingSettings(warmup=5, repeats=25, flush_bytes=256 * MIB)
    if quick:
        return TimingSettings(warmup=1, repeats=5, flush_bytes=64 * MIB)
    return TimingSettings(warmup=2, repeats=7, flush_bytes=128 * MIB)


def _device_type(device: str | torch.device) -> str:
    return torch.device(device).type


def synchronize(device: str | torch.device) -> None:
    """Wait for queued work on ``device`` (no-op on CPU)."""
    if _device_type(device) == "cuda":
        torch.cuda.synchronize(device)


@functools.lru_cache(maxsize=2)
def _flush_buffer(device: str, nbytes: int) -> torch.Tensor:
    numel = max(1, nbytes // 4)
    return torch.randn(numel, device=device, dtype=torch.float32)


def release_flush_buffers() -> None:
    """Free the cached cache-flush buffers."""
    _flush_buffer.cache_clear()


def flush_cache(device: str | torch.device, flush_bytes: int) -> None:
    """Read and write a ``flush_bytes`` buffer so the last-level cache holds none of the op's
    data. Uses ``mul_(-1)``: a read-modify-write with ordinary (cache-allocating) stores, which
    keeps values bounded forever."""
    if flush_bytes <= 0:
        return
    buf = _flush_buffer(str(torch.device(device)), int(flush_bytes))
    buf.mul_(-1.0)


def time_op(
    fn: Callable[[], object],
    device: str | torch.device = "cpu",
    warmup: int = 1,
    repeats: int = 3,
    flush_bytes: int = 64 * MIB,
    *,
    setup: Callable[[], object] | None = None,
) -> float:
    """Median wall time of ``fn()`` in seconds.

    Args:
        fn: the op to time (called with no arguments; its result is ignored).
        device: "cpu" or "cuda" (or "cuda:N"); CUDA uses events + synchronize.
        warmup: untimed calls first.
        repeats: timed calls (at least 1).
        flush_bytes: bytes of a cache-flush buffer touched before each timed call (0: none).
        setup: optional untimed preparation called before every call of ``fn`` (warm-up and
            timed), e.g. re-running a forward so that ``fn`` can time only a backward.

    Returns:
        The median over ``repeats`` of the time ``fn()`` took, in seconds (>= 1 ns).
    """
    dev = torch.device(device)
    is_cuda = dev.type == "cuda"
    for _ in range(max(0, warmup)):
        if setup is not None:
            setup()
        fn()
    synchronize(dev)

    times: list[float] = []
    for _ in range(max(1, repeats)):
        if setup is not None:
            setup()
        flush_cache(dev, flush_bytes)
        if is_cuda:
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize(dev)
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return max(statistics.median(times), MIN_SECONDS)


def _cpu_model_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown cpu"


def _cpu_memory_gib() -> float | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / GIB
    except (ValueError, OSError, AttributeError):
        return None


def gpu_clocks_mhz() -> dict[str, float]:
    """Current and max SM clocks in MHz of GPU 0 via ``nvidia-smi`` ({} if unavailable)."""
    try:
        out = subprocess.run(
            [
                "nvidia-smi",
                "--query-gpu=clocks.sm,clocks.max.sm",
                "--format=csv,noheader,nounits",
            ],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
        first = out.strip().splitlines()[0]
        sm, max_sm = (float(v) for v in first.split(",")[:2])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return {}
    return {"sm": sm, "max_sm": max_sm}


def collect_metadata(device: str, quick: bool, command: str | None = None) -> SuiteMetadata:
    """Describe the machine and run: device name, versions, clocks (MHz), threads, memory
    (GiB: GPU memory on CUDA, RAM on CPU), UTC date (ISO 8601), hostname, and the command
    line (``command``, default ``sys.argv`` joined)."""
    dev_type = _device_type(device)
    if dev_type == "cuda":
        dev = torch.device(device)
        index = dev.index if dev.index is not None else 0
        name = torch.cuda.get_device_name(index)
        memory: float | None = torch.cuda.get_device_properties(index).total_memory / GIB
        clocks = gpu_clocks_mhz()
    else:
        name = _cpu_model_name()
        memory = _cpu_memory_gib()
        clocks = {}
    return SuiteMetadata(
        device="cuda" if dev_type == "cuda" else "cpu",
        device_name=name,
        torch_version=torch.__version__,
        cuda_version=torch.version.cuda,
        clocks_mhz=clocks,
        cpu_threads=torch.get_num_threads(),
        memory_gib=None if memory is None else round(memory, 2),
        date=datetime.now(UTC).isoformat(timespec="seconds"),
        command=command if command is not None else shlex.join(sys.argv),
        hostname=socket.gethostname(),
        quick=quick,
    )
