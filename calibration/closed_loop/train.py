"""Time real training steps of a :func:`build_gpt` model: single process and DDP.

A *step* is ``zero_grad(set_to_none=True)``, forward, cross-entropy loss, backward and
``AdamW.step()`` on one random micro-batch of ``micro_batch x seq_len`` token ids. Weights stay
float32; a lower-precision ``dtype`` runs forward and loss under ``torch.autocast``. Times are
wall-clock seconds (``time.perf_counter``), with a device synchronisation before each reading on
CUDA. The first ``warmup`` steps are run but not timed.
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from calibration.closed_loop.gpt import build_gpt, lm_loss
from planner.specs.model import ModelSpec

LEARNING_RATE = 1e-4


def _default_dtype(device: torch.device) -> torch.dtype:
    """bfloat16 (autocast) on CUDA, float32 elsewhere."""
    return torch.bfloat16 if device.type == "cuda" else torch.float32


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed_loop(
    model: nn.Module,
    vocab: int,
    run: tuple[int, int, int, int],
    device: torch.device,
    dtype: torch.dtype,
    seed: int,
    barrier: bool = False,
    after_step: Callable[[], object] | None = None,
) -> list[float]:
    """Run ``warmup + steps`` training steps of ``model``; return the timed ones (seconds).
    ``after_step`` is called after every step, outside the timed region (a profiler's
    ``step``). ``run`` is (seq_len, micro_batch, steps, warmup)."""
    seq_len, micro_batch, steps, warmup = run
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, foreach=True)
    gen = torch.Generator(device="cpu").manual_seed(seed)
    shape = (micro_batch, seq_len)
    batches = [
        (
            torch.randint(vocab, shape, generator=gen).to(device),
            torch.randint(vocab, shape, generator=gen).to(device),
        )
        for _ in range(min(warmup + steps, 4))
    ]
    autocast = (
        torch.autocast(device_type=device.type, dtype=dtype)
        if dtype != torch.float32
        else nullcontext()
    )
    times: list[float] = []
    for i in range(warmup + steps):
        if i == warmup:
            _sync(device)
            if barrier:
                dist.barrier()
        idx, targets = batches[i % len(batches)]
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        with autocast:
            loss = lm_loss(model(idx), targets)
        loss.backward()
        optimizer.step()
        _sync(device)
        if i >= warmup:
            times.append(time.perf_counter() - start)
        if after_step is not None:
            after_step()
    return times


# torch's SDPA backends as the stack field that names each kernel (planner/specs/stack.py)
SDPA_AS_STACK_ATTENTION = {
    "FLASH_ATTENTION": "sdpa_flash",
    "CUDNN_ATTENTION": "cudnn_fused",
    "EFFICIENT_ATTENTION": "sdpa_mem_efficient",
    "MATH": "math",
}


def sdpa_choice(shape: tuple[int, int, int, int], device: torch.device, dtype: torch.dtype) -> str:
    """The backend ``F.scaled_dot_product_attention`` picks by itself for causal attention on
    (batch, heads, seq, head_dim) tensors that need gradients, read from torch's dispatcher
    (``torch._fused_sdp_choice``, a private function: "unknown" where it is missing or
    refuses). Recent torch releases prefer cuDNN on Hopper, older ones FlashAttention-2."""
    from torch.nn.attention import SDPBackend

    choose = getattr(torch, "_fused_sdp_choice", None)
    if choose is None:
        return "unknown"
    q = torch.empty(shape, device=device, dtype=dtype, requires_grad=True)
    try:
        return SDPBackend(choose(q, q, q, None, 0.0, True)).name
    except (RuntimeError, ValueError):
        return "unknown"


def sdpa_backend(
    spec: ModelSpec, seq_len: int, micro_batch: int, device: torch.device, dtype: torch.dtype
) -> str:
    """:func:`sdpa_choice` for the model's attention, so the kernel a closed loop ran is read,
    not assumed."""
    return sdpa_choice((micro_batch, spec.heads, seq_len, spec.d_head), device, dtype)


def _result(
    times: list[float],
    params: int,
    micro_batch: int,
    seq_len: int,
    device: torch.device,
    dtype: torch.dtype,
    backend: str = "unknown",
) -> dict[str, Any]:
    return {
        "sdpa_backend": backend,
        "median_step_s": statistics.median(times),
        "step_times_s": times,
        "params": params,
        "tokens_per_step": micro_batch * seq_len,
        "device": str(device),
        "dtype": str(dtype).removeprefix("torch."),
        "threads": torch.get_num_threads(),
    }


def _check_args(steps: int, warmup: int, micro_batch: int, seq_len: int) -> None:
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    if warmup < 0:
        raise ValueError(f"warmup must be >= 0, got {warmup}")
    if micro_batch < 1 or seq_len < 1:
        raise ValueError(f"micro_batch and seq_len must be >= 1, got {micro_batch}, {seq_len}")


def measure_training_step(
    spec: ModelSpec,
    seq_len: int = 512,
    micro_batch: int = 4,
    steps: int = 8,
    warmup: int = 2,
    device: str | torch.device = "cpu",
    dtype: torch.dtype | None = None,
    seed: int = 0,
    after_step: Callable[[], object] | None = None,
) -> dict[str, Any]:
    """Time ``steps`` full training steps of ``spec`` in this process (``after_step``: called
    after each step, untimed, e.g. a profiler's ``step``).

    ``dtype`` is the compute precision (default: bfloat16 autocast on CUDA, float32 on CPU).
    Returns ``median_step_s`` and ``step_times_s`` (seconds), ``params`` (elements),
    ``tokens_per_step`` (``micro_batch * seq_len``), ``device``, ``dtype`` (name), ``threads``
    (``torch.get_num_threads()``), ``sdpa_backend`` (:func:`sdpa_backend`) and, on CUDA,
    ``peak_allocated_gib`` and ``peak_reserved_gib`` (:func:`peak_memory`: model, optimizer
    state and the steps' activations; the peak is reset before the model is built).
    """
    _check_args(steps, warmup, micro_batch, seq_len)
    dev = torch.device(device)
    compute_dtype = dtype or _default_dtype(dev)
    torch.manual_seed(seed)
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    model = build_gpt(spec, seq_len, device=dev)
    run = (seq_len, micro_batch, steps, warmup)
    times = _timed_loop(model, spec.vocab, run, dev, compute_dtype, seed, after_step=after_step)
    backend = sdpa_backend(spec, seq_len, micro_batch, dev, compute_dtype)
    result = _result(times, model.num_params(), micro_batch, seq_len, dev, compute_dtype, backend)
    return result | peak_memory(dev)


def peak_memory(device: torch.device) -> dict[str, float]:
    """The caching allocator's peaks since the last reset, GiB: ``peak_allocated_gib`` (live
    tensors) and ``peak_reserved_gib`` (segments held); empty on a CPU, which has no such
    allocator."""
    if device.type != "cuda":
        return {}
    gib = float(1 << 30)
    return {
        "peak_allocated_gib": torch.cuda.max_memory_allocated(device) / gib,
        "peak_reserved_gib": torch.cuda.max_memory_reserved(device) / gib,
    }


def _free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (bind to port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _ddp_worker(
    rank: int,
    world_size: int,
    port: int,
    spec_json: str,
    seq_len: int,
    micro_batch: int,
    steps: int,
    warmup: int,
    device_type: str,
    dtype_name: str | None,
    seed: int,
    out_path: str,
) -> None:
    """One DDP rank: build, wrap, time; rank 0 writes its result dict to ``out_path`` as JSON."""
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    if device_type == "cuda":
        torch.cuda.set_device(rank)
        dev = torch.device("cuda", rank)
        backend = "nccl"
    else:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // world_size))
        dev = torch.device("cpu")
        backend = "gloo"
    dist.init_process_group(backend, rank=rank, world_size=world_size)
    try:
        spec = ModelSpec.model_validate_json(spec_json)
        compute_dtype = getattr(torch, dtype_name) if dtype_name else _default_dtype(dev)
        torch.manual_seed(seed)
        model = build_gpt(spec, seq_len, device=dev)
        params = model.num_params()
        ddp = nn.parallel.DistributedDataParallel(
            model, device_ids=[rank] if dev.type == "cuda" else None
        )
        run = (seq_len, micro_batch, steps, warmup)
        times = _timed_loop(ddp, spec.vocab, run, dev, compute_dtype, seed + rank, barrier=True)
        if rank == 0:
            backend = sdpa_backend(spec, seq_len, micro_batch, dev, compute_dtype)
            result = _result(times, params, micro_batch, seq_len, dev, compute_dtype, backend)
            result["world_size"] = world_size
            result["threads_per_rank"] = torch.get_num_threads()
            Path(out_path).write_text(json.dumps(result))
        # Leave together, with DDP's reducer (which holds the process group) released first:
        # a rank tearing gloo down while its peer is still active can abort the peer.
        del ddp, model
        dist.barrier()
    finally:
        dist.destroy_process_group()
    # Skip interpreter and C++ static teardown: on CPU, a gloo rank occasionally aborts there
    # ("terminate called without an active exception", no Python frame) after all work is done,
    # which mp.spawn would report as a failed run. Only reached when the rank succeeded.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def measure_ddp_step(
    spec: ModelSpec,
    world_size: int = 2,
    seq_len: int = 512,
    micro_batch: int = 4,
    steps: int = 8,
    warmup: int = 2,
    device: str = "cpu",
    dtype: torch.dtype | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    """Time data-parallel training steps of ``spec`` over ``world_size`` spawned processes.

    Each rank wraps the same model in ``DistributedDataParallel`` (default buckets; gloo on CPU
    with ``os.cpu_count() // world_size`` threads per rank, NCCL on CUDA with one GPU per rank)
    and times the same loop as :func:`measure_training_step` after a barrier, on its own
    ``micro_batch x seq_len`` batch. Returns rank 0's result dict (``tokens_per_step`` is per
    rank) plus ``world_size`` and ``threads_per_rank``.

    The ranks are started with the ``spawn`` method, so a calling script needs the usual
    ``if __name__ == "__main__":`` guard. Start-up (interpreter, torch import, process group)
    adds a few seconds of wall time that is not part of the timed steps.
    """
    _check_args(steps, warmup, micro_batch, seq_len)
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    device_type = torch.device(device).type
    if device_type not in ("cpu", "cuda"):
        raise ValueError(f"device must be cpu or cuda, got {device}")
    if device_type == "cuda" and torch.cuda.device_count() < world_size:
        raise ValueError(
            f"world_size {world_size} needs {world_size} GPUs, found {torch.cuda.device_count()}"
        )
    dtype_name = str(dtype).removeprefix("torch.") if dtype is not None else None
    with tempfile.TemporaryDirectory(prefix="ddp_step_") as tmp:
        out_path = os.path.join(tmp, "rank0.json")
        args = (
            world_size,
            _free_port(),
            spec.model_dump_json(),
            seq_len,
            micro_batch,
            steps,
            warmup,
            device_type,
            dtype_name,
            seed,
            out_path,
        )
        mp.spawn(_ddp_worker, args=args, nprocs=world_size, join=True)
        result: dict[str, Any] = json.loads(Path(out_path).read_text())
    return result
