"""``planner calibrate`` and ``planner closed-loop``: the torch side of the CLI (lazy imports).

The simulator, search and app never import torch; these two commands do, and say how to
install it when it is missing.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import planner
from planner.errors import PlannerError
from planner.profile import CalibrationProfile

TORCH_HINT = "pip install torch==2.13.0 && pip install -e '.[calibrate]'"


def _require_torch() -> Any:
    try:
        import torch
    except ImportError:
        raise PlannerError("torch", "the calibrate extra is not installed", TORCH_HINT) from None
    return torch


def add_parsers(sub: Any) -> None:
    """Register the two subcommands on the ``planner`` argparse subparsers."""
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

    cl = sub.add_parser(
        "closed-loop",
        help="train a real torch GPT and compare with prediction",
        description="Measure real training steps of a shipped model and "
        "compare with the simulator's prediction of the same step.",
    )
    cl.add_argument("--model", default="gpt-tiny", help="shipped dense model id or YAML path")
    cl.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    cl.add_argument("--ddp", type=int, default=1, help="DDP processes (gloo on CPU)")
    cl.add_argument("--seq-len", type=int, default=512)
    cl.add_argument("--micro-batch", type=int, default=4)
    cl.add_argument("--steps", type=int, default=6, help="timed training steps")
    cl.add_argument(
        "--profile", default=None, help="profile JSON (default: run the quick suite now)"
    )
    cl.add_argument("--cluster", default="dgx-h200", help="cluster for --device cuda")
    cl.add_argument("--json", action="store_true")


def _progress_bar() -> tuple[Any, Any]:
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
    torch = _require_torch()
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


def cmd_calibrate(args: argparse.Namespace) -> int:
    """``planner calibrate``: write a measured profile (and optionally the raw samples)."""
    if args.ranks < 2:
        raise PlannerError("--ranks", f"ranks={args.ranks}", "2 or more")
    profile, suite = run_calibration(args.device, args.quick, args.ranks, args.accelerator, args.id)
    Path(args.out).write_text(profile.model_dump_json(indent=1) + "\n")
    if args.samples_out:
        Path(args.samples_out).write_text(suite.model_dump_json(indent=1) + "\n")
    fit = profile.metadata.get("fit", {})
    sys.stdout.write(
        f"wrote {args.out} (accelerator {profile.accelerator}): GEMM eta_max "
        f"{profile.gemm.eta_max}, dim_half {profile.gemm.dim_half}, fixed {profile.gemm.fixed_us} us; attention eta fwd/bwd "
        f"{profile.attention.eta_max_fwd}/{profile.attention.eta_max_bwd}; memory "
        f"{', '.join(f'{k} {v:.1f}' for k, v in fit.get('memory_bandwidth_gb_per_s', {}).items())}"
        " GB/s; "
        f"{len(profile.collectives)} collective fits\n"
    )
    return 0


def closed_loop(
    model_id: str,
    device: str,
    ddp: int,
    seq_len: int,
    micro_batch: int,
    steps: int,
    profile: CalibrationProfile | None,
    cluster_id: str = "dgx-h200",
) -> dict:
    """Measure real steps, predict the same step, and compare (the acceptance test)."""
    _require_torch()
    from calibration.closed_loop.train import measure_ddp_step, measure_training_step
    from calibration.measured_cluster import measured_cluster
    from planner.simulate import simulate_step

    if ddp < 1:
        raise PlannerError("--ddp", f"ddp={ddp}", "1 or more")
    model = planner.load_model(model_id)
    if model.moe or model.mla:
        raise PlannerError("--model", "closed loop builds dense GPTs only", "a dense model")
    if profile is None:
        profile, _ = run_calibration(device, True, max(2, ddp), None, f"{device}-measured")
    if ddp > 1:
        measured = measure_ddp_step(
            model,
            world_size=ddp,
            seq_len=seq_len,
            micro_batch=micro_batch,
            steps=steps,
            device=device,
        )
    else:
        measured = measure_training_step(
            model, seq_len=seq_len, micro_batch=micro_batch, steps=steps, device=device
        )
    if device == "cpu":
        cluster = measured_cluster(_per_rank(profile, ddp), ranks=ddp)
        precision = "fp32"
    else:
        cluster = planner.load_cluster(cluster_id)
        precision = "bf16"
    layout = planner.Layout(dp=ddp)
    training = planner.Training(
        seq_len=seq_len,
        micro_batch=micro_batch,
        global_batch=micro_batch * ddp,
        precision=precision,
    )
    report = simulate_step(model, cluster, layout, training, _per_rank(profile, ddp))
    pred, meas = report.step_time_s, measured["median_step_s"]
    return {
        "measured_step_s": meas,
        "predicted_step_s": pred,
        "error_pct": (pred - meas) / meas * 100.0,
        "device": measured.get("device", device),
        "profile": profile.id,
        "ddp": ddp,
        "model": model.name,
        "predicted_breakdown_s": report.time_breakdown_s,
        "measured_step_times_s": measured.get("step_times_s"),
    }


def _per_rank(profile: CalibrationProfile, ranks: int) -> CalibrationProfile:
    """On a CPU host, ``ranks`` processes split the cores and the memory bandwidth the suite
    measured with all of them: scale the measured peaks and bandwidth per process."""
    dev = profile.device
    if dev is None or dev.kind != "cpu" or ranks <= 1:
        return profile
    share = 1.0 / ranks
    scaled = dev.model_copy(
        update={
            "peak_tflops": {k: v * share for k, v in dev.peak_tflops.items()},
            "memory_bandwidth_gb_per_s": dev.memory_bandwidth_gb_per_s * share,
        }
    )
    return profile.model_copy(update={"device": scaled})


def cmd_closed_loop(args: argparse.Namespace) -> int:
    """``planner closed-loop``: print measured vs predicted step time."""
    profile = planner.load_profile(args.profile) if args.profile else None
    out = closed_loop(
        args.model,
        args.device,
        args.ddp,
        args.seq_len,
        args.micro_batch,
        args.steps,
        profile,
        args.cluster,
    )
    if args.json:
        sys.stdout.write(json.dumps(out, indent=2) + "\n")
    else:
        sys.stdout.write(
            f"{out['model']} on {out['device']} (ddp {out['ddp']}): measured "
            f"{out['measured_step_s'] * 1e3:.1f} ms/step, predicted "
            f"{out['predicted_step_s'] * 1e3:.1f} ms/step, error {out['error_pct']:+.1f}% "
            f"(profile {out['profile']})\n"
        )
    return 0


COMMANDS = {"calibrate": cmd_calibrate, "closed-loop": cmd_closed_loop}
