"""Regenerate the real PyTorch profiler (Kineto) traces in tests/assets (CPU only, ~10 s).

    python tests/assets/make_cpu_trace.py            # cpu_gpt_step_trace.json
    python tests/assets/make_cpu_trace.py --ddp      # also cpu_gpt_ddp_rank0_trace.json

A tiny GPT (calibration/closed_loop/gpt.py; the spec below: 1 layer, hidden 128, 4 heads,
vocab 1024, RoPE, tied embeddings) trains on random tokens, float32, one intra-op thread: one
profiler warm-up step, then two recorded steps (``ProfilerStep#1`` and ``#2``) of ``zero_grad``,
forward, cross-entropy, backward and ``AdamW.step`` (foreach) on a micro-batch of 2 sequences
of 64 tokens. ``--ddp`` repeats it with 2 DistributedDataParallel ranks on
gloo (small buckets so that several gradient all-reduces appear) and keeps rank 0's trace.
Traces are written by ``torch.profiler.profile(...).export_chrome_trace`` unchanged, without
shapes or stacks, to stay well under 1 MB.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.profiler import ProfilerActivity, profile, schedule

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from calibration.closed_loop.gpt import build_gpt, lm_loss  # noqa: E402
from planner.specs.model import ModelSpec  # noqa: E402

HERE = Path(__file__).resolve().parent
SEQ_LEN = 64
MICRO_BATCH = 2
SPEC = ModelSpec(
    name="gpt-trace-tiny",
    layers=1,
    hidden=128,
    ffn_hidden=512,
    activation="gelu",
    heads=4,
    head_dim=32,
    vocab=1024,
    tied_embeddings=True,
)


def _train_profiled(model: torch.nn.Module, out: Path, seed: int) -> None:
    """One warm-up step and two recorded steps under the profiler; export to ``out``."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    gen = torch.Generator().manual_seed(seed)
    shape = (MICRO_BATCH, SEQ_LEN)
    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=0, warmup=1, active=2, repeat=1),
    ) as prof:
        for _ in range(3):
            idx = torch.randint(SPEC.vocab, shape, generator=gen)
            targets = torch.randint(SPEC.vocab, shape, generator=gen)
            optimizer.zero_grad(set_to_none=True)
            loss = lm_loss(model(idx), targets)
            loss.backward()
            optimizer.step()
            prof.step()
    prof.export_chrome_trace(str(out))


def single(out: Path) -> None:
    """The single-process trace."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    _train_profiled(build_gpt(SPEC, SEQ_LEN), out, seed=0)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _ddp_worker(rank: int, world: int, port: int, out: str) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        torch.manual_seed(0)
        model = torch.nn.parallel.DistributedDataParallel(
            build_gpt(SPEC, SEQ_LEN), bucket_cap_mb=0.25
        )
        target = Path(out) if rank == 0 else Path(out).with_suffix(f".rank{rank}.tmp")
        _train_profiled(model, target, seed=rank)
        if rank != 0:
            target.unlink()
    finally:
        dist.destroy_process_group()


def ddp(out: Path, world: int = 2) -> None:
    """The DDP (gloo) trace of rank 0."""
    mp.spawn(_ddp_worker, args=(world, _free_port(), str(out)), nprocs=world, join=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ddp", action="store_true", help="also write the 2-rank gloo trace")
    args = parser.parse_args()
    single(HERE / "cpu_gpt_step_trace.json")
    if args.ddp:
        ddp(HERE / "cpu_gpt_ddp_rank0_trace.json")
    for path in sorted(HERE.glob("cpu_gpt_*trace.json")):
        print(f"{path.name}: {path.stat().st_size / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
