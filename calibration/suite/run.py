"""Run the whole microbenchmark suite and write a :class:`~calibration.samples.SuiteResult`.

Usage::

    python -m calibration.suite.run --device cpu --quick --out samples.json
    python -m calibration.suite.run --device cuda --full --out h100.json

``--quick`` on CPU takes about a minute or less on 2 cores (see each part's ``default_*``
for the shapes); ``--full`` measures more shapes, dtypes and sizes.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import torch

from calibration.samples import SuiteResult
from calibration.suite.attention import run_attention
from calibration.suite.collectives import run_collectives
from calibration.suite.gemm import run_gemm
from calibration.suite.memory import run_memory
from calibration.suite.timing import ProgressFn, collect_metadata, release_flush_buffers

STAGES: tuple[str, ...] = ("gemm", "attention", "memory", "collectives")


class SuiteDeviceError(ValueError):
    """The requested device is unknown or unavailable."""


def _normalize_device(device: str) -> str:
    try:
        dev = torch.device(device)
    except RuntimeError as exc:
        raise SuiteDeviceError(f"unknown device {device!r}: {exc}") from exc
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise SuiteDeviceError("device 'cuda' requested but torch.cuda.is_available() is False")
        return str(dev)
    if dev.type != "cpu":
        raise SuiteDeviceError(f"unsupported device {device!r} (use 'cpu' or 'cuda')")
    return "cpu"


def run_suite(
    device: str = "cpu",
    quick: bool = True,
    ranks: int = 2,
    progress: ProgressFn | None = None,
    *,
    command: str | None = None,
) -> SuiteResult:
    """Run GEMM, attention, memory and collective benchmarks on ``device``.

    Args:
        device: "cpu" or "cuda" (also "cuda:N" for the single-device parts).
        quick: small shape/size sets and few repeats (CPU: about a minute on 2 cores).
        ranks: gloo processes for CPU collectives (CUDA uses every local GPU; one GPU
            measures no collectives).
        progress: ``progress(stage, done, total)`` called as each part advances; stages are
            "gemm", "attention", "memory", "collectives".
        command: the command line recorded in the metadata (default: ``sys.argv``).

    Returns:
        The :class:`SuiteResult`, times in seconds (medians over repeats).

    Raises:
        SuiteDeviceError: ``device`` is unknown, or CUDA was asked for but is unavailable.
    """
    dev = _normalize_device(device)
    metadata = collect_metadata(dev, quick, command)
    torch.manual_seed(0)
    try:
        gemm = run_gemm(dev, quick, progress)
        _release(dev)
        attention = run_attention(dev, quick, progress)
        _release(dev)
        memory = run_memory(dev, quick, progress)
        _release(dev)
        collectives = run_collectives(dev, quick, ranks, progress)
    finally:
        _release(dev)
    return SuiteResult(
        metadata=metadata,
        gemm=gemm,
        attention=attention,
        memory=memory,
        collectives=collectives,
    )


def _release(device: str) -> None:
    release_flush_buffers()
    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m calibration.suite.run",
        description="Run the torch microbenchmark suite and write SuiteResult JSON.",
    )
    parser.add_argument("--device", default="cpu", help="cpu or cuda (default: cpu)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--quick",
        dest="quick",
        action="store_true",
        default=True,
        help="small shape/size sets (default)",
    )
    mode.add_argument("--full", dest="quick", action="store_false", help="the full shape/size sets")
    parser.add_argument(
        "--ranks", type=int, default=2, help="gloo processes for CPU collectives (default: 2)"
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("samples.json"),
        help="output JSON path (default: samples.json; '-' for stdout)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; returns the process exit status."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    args = _parse_args(argv)
    raw_args = list(sys.argv[1:] if argv is None else argv)
    command = shlex.join(["python", "-m", "calibration.suite.run", *raw_args])
    console = Console(stderr=True)
    start = time.perf_counter()
    try:
        if args.no_progress:
            result = run_suite(args.device, args.quick, args.ranks, command=command)
        else:
            with Progress(
                TextColumn("{task.description:<12}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=console,
            ) as bar:
                tasks = {stage: bar.add_task(stage, total=None) for stage in STAGES}

                def progress(stage: str, done: int, total: int) -> None:
                    bar.update(tasks[stage], completed=done, total=total)

                result = run_suite(args.device, args.quick, args.ranks, progress, command=command)
    except SuiteDeviceError as exc:
        console.print(f"[red]error:[/red] {exc}")
        return 2
    elapsed = time.perf_counter() - start

    text = result.model_dump_json(indent=1)
    if str(args.out) == "-":
        sys.stdout.write(text + "\n")
    else:
        args.out.write_text(text + "\n", encoding="utf-8")
    console.print(
        f"{len(result.gemm)} gemm, {len(result.attention)} attention, "
        f"{len(result.memory)} memory, {len(result.collectives)} collective samples "
        f"in {elapsed:.1f} s on {result.metadata.device_name}"
        + ("" if str(args.out) == "-" else f" -> {args.out}"),
        soft_wrap=True,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
