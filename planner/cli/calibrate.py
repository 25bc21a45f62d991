"""``planner calibrate``: run the torch microbenchmark suite and fit a calibration profile.

The simulator, search and app never import torch; this command does (lazily), and says how to
install it when it is missing.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from typing import Any

import planner
from planner.errors import PlannerError
from planner.profile import CalibrationProfile
from planner.trace import TORCH_HINT


def require_torch() -> Any:
    """The torch module, or a PlannerError saying how to install it."""
    try:
        import torch
    except ImportError:
        raise PlannerError("torch", "the calibrate extra is not installed", TORCH_HINT) from None
    return torch


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Register ``planner calibrate`` on the ``planner`` argparse subparsers."""
    c = sub.add_parser(
        "calibrate",
        help="measure GEMM, attention, memory and collectives",
        description="Run the torch microbenchmark suite and fit a profile.",
    )
    c.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    c.add_argument("--quick", action="store_true", help="small suite (about a minute on CPU)")
    c.add_argument("--ranks", type=int, default=2, help="processes for collectives (CPU)")
    c.add_argument(
        "--accelerator",
        default=None,
        help="shipped accelerator id the GPU profile is relative to (CUDA; default: the one "
        "the device's name and memory identify, else the device's own name)",
    )
    c.add_argument("--id", default=None, help="profile id (default: from the device)")
    c.add_argument("--out", default="profile.json", help="where to write the profile JSON")
    c.add_argument("--samples-out", default=None, help="also write the raw samples JSON")
    return c


def _progress_lines() -> tuple[Any, Any]:
    """Progress as plain stderr lines (a stage when it starts and when it ends), for a log or
    a pipe, where a live bar would print nothing until the end."""
    started: set[str] = set()

    def update(stage: str, done: int, total: int) -> None:
        if stage not in started:
            started.add(stage)
            sys.stderr.write(f"calibrate: {stage}: {total} measurements\n")
        if done >= total:
            sys.stderr.write(f"calibrate: {stage}: done\n")
        sys.stderr.flush()

    return contextlib.nullcontext(), update


def _progress_bar() -> tuple[Any, Any]:
    """A live rich bar on a terminal, plain progress lines otherwise."""
    if not sys.stderr.isatty():
        return _progress_lines()
    from rich.progress import Progress

    progress = Progress(transient=True)
    tasks: dict[str, Any] = {}

    def update(stage: str, done: int, total: int) -> None:
        if stage not in tasks:
            tasks[stage] = progress.add_task(stage, total=total)
        progress.update(tasks[stage], completed=done, total=total)

    return progress, update


def run_calibration(
    device: str, quick: bool, ranks: int, accelerator_id: str | None, profile_id: str | None
) -> tuple[CalibrationProfile, Any]:
    """Run the suite and fit a profile; returns (profile, raw suite result).

    The profile's ``accelerator`` names what it was measured on (the planner refuses a profile
    of another accelerator): on CUDA ``accelerator_id``, else the shipped accelerator the
    device is (:func:`calibration.suite.identify.identify_accelerator`), else the device's
    name; on a CPU the CPU's name. ``metadata`` records the device name and kind, the torch
    and CUDA versions and how the accelerator was chosen."""
    torch = require_torch()
    from calibration.fit_measured import fit_profile
    from calibration.suite.run import SuiteDeviceError, run_suite

    accel_id, chosen_by = accelerator_for(torch, device, accelerator_id)
    progress, update = _progress_bar()
    try:
        with progress:
            suite = run_suite(device=device, quick=quick, ranks=ranks, progress=update)
    except SuiteDeviceError as exc:
        raise PlannerError("--device", str(exc), "cpu or cuda") from None
    accel = planner.load_accelerator(accel_id) if accel_id else None
    pid = profile_id or f"{device}-measured"
    profile = fit_profile(suite, pid, accel, accel_id)
    meta = suite.metadata
    metadata = profile.metadata | {
        "device_name": meta.device_name,
        "device_kind": meta.device,
        "torch_version": meta.torch_version,
        "cuda_version": meta.cuda_version,
        "accelerator_chosen_by": chosen_by,
    }
    return profile.model_copy(update={"metadata": metadata}), suite


def accelerator_for(torch: Any, device: str, given: str | None) -> tuple[str | None, str]:
    """The shipped accelerator id a profile measured on ``device`` is relative to (None: the
    device's own name, as on a CPU), and how it was chosen. ``torch`` is the module (a stand-in
    in tests)."""
    from calibration.suite.identify import identify_accelerator

    if device == "cpu":
        if given:
            raise PlannerError(
                "--accelerator",
                "a CPU profile is named after the CPU it was measured on",
                "no --accelerator with --device cpu",
            )
        return None, "cpu: the CPU's name"
    if not torch.cuda.is_available():
        raise PlannerError(
            "--device",
            "cuda requested but torch.cuda.is_available() is False",
            "cpu, or a machine with a CUDA GPU",
        )
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    name, gib = props.name, props.total_memory / 2**30
    found = identify_accelerator(name, gib)
    seen = f"{name}, {gib:.1f} GiB"
    if given:
        planner.load_accelerator(given)  # a PlannerError naming the shipped ids if unknown
        if found and found != given:
            raise PlannerError(
                "--accelerator",
                f"this device ({seen}) is {found}, not {given}",
                f"{found}, or leave --accelerator out",
            )
        return given, f"--accelerator ({seen})"
    if found:
        return found, f"identified from the device name and memory ({seen})"
    return None, f"not a shipped accelerator ({seen}): the device name"


def run(args: argparse.Namespace) -> int:
    """Write a measured profile (and optionally the raw samples)."""
    if args.ranks < 2:
        raise PlannerError("--ranks", f"ranks={args.ranks}", "2 or more")
    profile, suite = run_calibration(args.device, args.quick, args.ranks, args.accelerator, args.id)
    Path(args.out).write_text(profile.model_dump_json(indent=1) + "\n")
    if args.samples_out:
        Path(args.samples_out).write_text(suite.model_dump_json(indent=1) + "\n")
    fit = profile.metadata.get("fit", {})
    sys.stdout.write(
        f"wrote {args.out} (accelerator {profile.accelerator}): GEMM eta_max "
        f"{', '.join(f'{k} {v:.3f}' for k, v in profile.gemm.eta_max.items())}, dim_half {profile.gemm.dim_half}, fixed {profile.gemm.fixed_us} us; attention eta fwd/bwd "
        f"{profile.attention.eta_max_fwd}/{profile.attention.eta_max_bwd}; memory "
        f"{', '.join(f'{k} {v:.1f}' for k, v in fit.get('memory_bandwidth_gb_per_s', {}).items())}"
        " GB/s; "
        f"{len(profile.collectives)} collective fits\n"
    )
    return 0
