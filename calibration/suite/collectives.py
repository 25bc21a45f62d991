"""``torch.distributed`` collectives: gloo between CPU processes, nccl between local GPUs.

The suite launches its own ranks (``torch.multiprocessing`` spawn, ``MASTER_ADDR=127.0.0.1``
and a free port found by binding port 0), so no launcher is needed.

Sizes follow the nccl-tests convention (NVIDIA/nccl-tests ``doc/PERFORMANCE.md``): ``bytes``
is the full buffer -- all-reduce: the array; all-gather / reduce-scatter: the *gathered*
(full) array, so each rank contributes ``bytes / ranks``; all-to-all: what one rank sends in
total (its whole input, including the chunk it keeps); send/recv: the message (rank 0 -> 1).
From these, ``algbw = bytes / seconds`` and nccl-tests' bus bandwidth is
``busbw = algbw * 2(n-1)/n`` (all-reduce), ``algbw * (n-1)/n`` (all-gather, reduce-scatter,
all-to-all) and ``algbw`` (send/recv).

Timing per (op, size): ``dist.barrier()`` before every repeat (and a device synchronize on
CUDA), ``time.perf_counter`` around the op (+ synchronize on CUDA), untimed warm-up repeats
first; the per-repeat times are then max-reduced across ranks (a collective is as slow as
its slowest rank) and rank 0 keeps the median, in seconds. Buffers are fp32 ``torch.randn``.

Backends: gloo uses ``dist.all_gather`` with a list of tensors (gloo's documented API); ops a
backend rejects (older gloo lacks ``reduce_scatter``; ``all_to_all_single`` is newer) are
skipped, not failed. nccl uses the single-tensor APIs. With fewer than two GPUs (CUDA) or
``ranks < 2`` (CPU) nothing is measured.
"""

from __future__ import annotations

import os
import queue
import socket
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from calibration.samples import CollectiveOp, CollectiveSample
from calibration.suite.timing import MIB, MIN_SECONDS, ProgressFn, timing_settings

COLLECTIVE_OPS: tuple[CollectiveOp, ...] = (
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "all_to_all",
    "send_recv",
)

STAGE = "collectives"

SMALL_MESSAGE_BYTES = MIB
"""Messages up to this size get ``SMALL_REPEAT_FACTOR`` x the repeats (they are cheap and
noisy)."""
SMALL_REPEAT_FACTOR = 4

ELEMENT_BYTES = 4  # fp32 buffers


class _Unsupported(Exception):
    """The backend does not implement the op."""


@dataclass(frozen=True)
class CollectiveConfig:
    """What the spawned ranks measure.

    Attributes:
        backend: "gloo" or "nccl".
        ranks: number of processes (GPUs for nccl).
        sizes: message sizes in bytes (nccl-tests convention, see module doc).
        ops: collectives to time.
        warmup: untimed repeats per (op, size).
        repeats: timed repeats per (op, size) (x ``SMALL_REPEAT_FACTOR`` for small messages).
        timeout_s: ``torch.distributed`` timeout in seconds.
        threads_per_rank: ``torch.set_num_threads`` in each rank (CPU).
    """

    backend: str
    ranks: int
    sizes: tuple[int, ...]
    ops: tuple[CollectiveOp, ...] = COLLECTIVE_OPS
    warmup: int = 1
    repeats: int = 3
    timeout_s: float = 300.0
    threads_per_rank: int = 1


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (bind to port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def default_sizes(device: str, quick: bool) -> list[int]:
    """Message sizes in bytes, powers of 4 from 1 KiB: up to 64 MiB on CPU (quick and full,
    gloo over loopback is slow), up to 256 MiB on CUDA quick and 1 GiB on CUDA full."""
    top = 64 * MIB
    if torch.device(device).type == "cuda":
        top = 256 * MIB if quick else 1024 * MIB
    sizes: list[int] = []
    size = 1024
    while size <= top:
        sizes.append(size)
        size *= 4
    return sizes


def _all_gather_single() -> Callable[..., Any]:
    fn = getattr(dist, "all_gather_single", None)
    return fn if fn is not None else dist.all_gather_into_tensor


def _reduce_scatter_single() -> Callable[..., Any]:
    fn = getattr(dist, "reduce_scatter_single", None)
    return fn if fn is not None else dist.reduce_scatter_tensor


def _make_op(
    op: CollectiveOp, nbytes: int, rank: int, world: int, backend: str, device: torch.device
) -> tuple[Callable[[], object], int] | None:
    """Buffers and a closure for one (op, size); returns (fn, bytes) in the nccl-tests sense,
    or None if the size is too small to split across ranks."""
    numel = nbytes // ELEMENT_BYTES
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        numel = numel // world * world
    if numel <= 0:
        return None
    full_bytes = numel * ELEMENT_BYTES

    def rand(n: int) -> torch.Tensor:
        return torch.randn(n, device=device, dtype=torch.float32)

    if op == "all_reduce":
        buf = rand(numel)
        return (lambda: dist.all_reduce(buf)), full_bytes
    if op == "all_gather":
        shard = rand(numel // world)
        if backend == "gloo":
            outs = [torch.empty_like(shard) for _ in range(world)]
            return (lambda: dist.all_gather(outs, shard)), full_bytes
        gathered = rand(numel)
        gather = _all_gather_single()
        return (lambda: gather(gathered, shard)), full_bytes
    if op == "reduce_scatter":
        full = rand(numel)
        out = rand(numel // world)
        scatter = _reduce_scatter_single()
        return (lambda: scatter(out, full)), full_bytes
    if op == "all_to_all":
        src = rand(numel)
        dst = torch.empty_like(src)
        return (lambda: dist.all_to_all_single(dst, src)), full_bytes
    if op == "send_recv":
        msg = rand(numel)

        def send_recv() -> None:
            if rank == 0:
                dist.send(msg, dst=1)
            elif rank == 1:
                dist.recv(msg, src=0)

        return send_recv, full_bytes
    raise ValueError(f"unknown collective {op!r}")


def _time_collective(
    fn: Callable[[], object], warmup: int, repeats: int, device: torch.device
) -> float:
    """Median over repeats of the max-over-ranks time of ``fn`` (seconds). Raises
    :class:`_Unsupported` when the first call raises (same on every rank)."""
    is_cuda = device.type == "cuda"
    try:
        fn()
    except (RuntimeError, NotImplementedError, ValueError, TypeError) as exc:
        raise _Unsupported(str(exc)) from exc
    untimed = max(0, warmup - 1)  # the call above was the first warm-up
    times: list[float] = []
    for i in range(untimed + max(1, repeats)):
        dist.barrier()
        if is_cuda:
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        fn()
        if is_cuda:
            torch.cuda.synchronize(device)
        elapsed = time.perf_counter() - t0
        if i >= untimed:
            times.append(elapsed)
    worst = torch.tensor(times, dtype=torch.float64, device=device)
    dist.all_reduce(worst, op=dist.ReduceOp.MAX)
    return max(statistics.median(worst.tolist()), MIN_SECONDS)


def _worker(rank: int, cfg: CollectiveConfig, port: int, out: Any) -> None:
    """One rank: init the process group, time every (op, size), rank 0 reports on ``out``
    (messages: ("progress", done, total) and finally ("result", [sample dicts]))."""
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(max(1, cfg.threads_per_rank))
    if cfg.backend == "nccl":
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
        dist.init_process_group(
            "nccl",
            rank=rank,
            world_size=cfg.ranks,
            timeout=timedelta(seconds=cfg.timeout_s),
            device_id=device,
        )
    else:
        device = torch.device("cpu")
        dist.init_process_group(
            cfg.backend,
            rank=rank,
            world_size=cfg.ranks,
            timeout=timedelta(seconds=cfg.timeout_s),
        )
    try:
        samples: list[dict[str, Any]] = []
        total = len(cfg.ops) * len(cfg.sizes)
        done = 0
        for op in cfg.ops:
            supported = True
            for nbytes in cfg.sizes:
                made = (
                    _make_op(op, nbytes, rank, cfg.ranks, cfg.backend, device)
                    if supported
                    else None
                )
                if made is not None:
                    fn, full_bytes = made
                    repeats = cfg.repeats * (
                        SMALL_REPEAT_FACTOR if nbytes <= SMALL_MESSAGE_BYTES else 1
                    )
                    try:
                        seconds = _time_collective(fn, cfg.warmup, repeats, device)
                    except _Unsupported:
                        supported = False
                    else:
                        samples.append(
                            {
                                "op": op,
                                "ranks": cfg.ranks,
                                "bytes": full_bytes,
                                "seconds": seconds,
                                "backend": cfg.backend,
                            }
                        )
                done += 1
                if rank == 0:
                    out.put(("progress", done, total))
        if rank == 0:
            out.put(("result", samples))
        dist.barrier()
    finally:
        dist.destroy_process_group()


def bench_collectives(
    sizes: Sequence[int],
    ops: Sequence[CollectiveOp] = COLLECTIVE_OPS,
    ranks: int = 2,
    backend: str = "gloo",
    warmup: int = 1,
    repeats: int = 3,
    progress: ProgressFn | None = None,
    timeout_s: float = 300.0,
) -> list[CollectiveSample]:
    """Spawn ``ranks`` processes on ``backend`` and time ``ops`` at ``sizes`` (bytes).

    Returns one :class:`CollectiveSample` per supported (op, size), median seconds.
    ``ranks < 2`` returns []. nccl needs ``ranks <= torch.cuda.device_count()``.
    """
    if ranks < 2:
        return []
    threads = max(1, (os.cpu_count() or 1) // ranks) if backend == "gloo" else 1
    cfg = CollectiveConfig(
        backend=backend,
        ranks=ranks,
        sizes=tuple(sizes),
        ops=tuple(ops),
        warmup=warmup,
        repeats=repeats,
        timeout_s=timeout_s,
        threads_per_rank=threads,
    )
    total = len(cfg.ops) * len(cfg.sizes)
    if progress is not None:
        progress(STAGE, 0, total)
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    raw: list[dict[str, Any]] = []
    got_result = False

    def handle(msg: tuple[Any, ...]) -> None:
        nonlocal got_result
        if msg[0] == "progress" and progress is not None:
            progress(STAGE, int(msg[1]), int(msg[2]))
        elif msg[0] == "result":
            raw.extend(msg[1])
            got_result = True

    def drain() -> None:
        while True:
            try:
                handle(out.get_nowait())
            except queue.Empty:
                return

    procs = mp.start_processes(
        _worker,
        args=(cfg, free_port(), out),
        nprocs=ranks,
        join=False,
        start_method="spawn",
    )
    while not procs.join(timeout=0.1):
        drain()
    drain()
    # the feeder thread may deliver the last message just after the children exit
    deadline = time.monotonic() + 10.0
    while not got_result and time.monotonic() < deadline:
        try:
            handle(out.get(timeout=0.5))
        except queue.Empty:
            continue
    out.close()
    if not got_result:
        raise RuntimeError("collective ranks exited without reporting results")
    if progress is not None:
        progress(STAGE, total, total)
    return [CollectiveSample(**s) for s in raw]


def run_collectives(
    device: str = "cpu",
    quick: bool = True,
    ranks: int = 2,
    progress: ProgressFn | None = None,
) -> list[CollectiveSample]:
    """The collectives part of the suite: gloo over ``ranks`` CPU processes, or nccl over all
    local GPUs (``ranks`` ignored; one GPU -> [])."""
    cfg = timing_settings(device, quick)
    if torch.device(device).type == "cuda":
        world = torch.cuda.device_count()
        if world < 2:
            return []
        return bench_collectives(
            default_sizes(device, quick),
            ranks=world,
            backend="nccl",
            warmup=cfg.warmup,
            repeats=cfg.repeats,
            progress=progress,
        )
    return bench_collectives(
        default_sizes(device, quick),
        ranks=ranks,
        backend="gloo",
        warmup=cfg.warmup,
        repeats=cfg.repeats,
        progress=progress,
    )
