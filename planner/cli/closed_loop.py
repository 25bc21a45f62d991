"""``planner closed-loop``: train a real torch GPT and compare its step time with the
prediction of the same step (torch imported lazily)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import planner
from planner.cli import calibrate
from planner.cli.inputs import NO_STACK, stack_flag
from planner.errors import PlannerError
from planner.profile import CalibrationProfile
from planner.report import StepReport
from planner.specs.model import ModelSpec
from planner.specs.stack import StackSpec

CLOSED_LOOP_STACK = "torchtitan-eager"


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Register ``planner closed-loop`` on the ``planner`` argparse subparsers."""
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
    cl.add_argument(
        "--stack",
        default=CLOSED_LOOP_STACK,
        help=f"software stack the prediction is costed under (default {CLOSED_LOOP_STACK}: the "
        "closed-loop GPT is eager PyTorch with SDPA, unfused norms and foreach AdamW, which is "
        f"that stack's kernels; {NO_STACK}: the inputs as given)",
    )
    cl.add_argument("--json", action="store_true")
    return cl


def closed_loop(
    model_id: str,
    device: str,
    ddp: int,
    seq_len: int,
    micro_batch: int,
    steps: int,
    profile: CalibrationProfile | None,
    cluster_id: str = "dgx-h200",
    stack: StackSpec | None = None,
) -> dict:
    """Measure real steps, predict the same step, and compare (the acceptance test).

    ``stack``: the stack the prediction is costed under (None: the inputs as given)."""
    calibrate.require_torch()
    from calibration.closed_loop.train import measure_ddp_step, measure_training_step

    if ddp < 1:
        raise PlannerError("--ddp", f"ddp={ddp}", "1 or more")
    model = planner.load_model(model_id)
    if model.moe or model.mla:
        raise PlannerError("--model", "closed loop builds dense GPTs only", "a dense model")
    if profile is None:
        sys.stderr.write(
            "closed-loop: no --profile given, so the microbenchmarks run first (planner "
            "calibrate --quick, about 30 s on a CPU); pass --profile P.json to reuse one\n"
        )
        profile, _ = calibrate.run_calibration(
            device, True, max(2, ddp), None, f"{device}-measured"
        )
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
    backend = measured.get("sdpa_backend", "unknown")
    stack = with_measured_attention(stack, backend)
    report = predicted_report(model, device, ddp, seq_len, micro_batch, profile, cluster_id, stack)
    pred, meas = report.step_time_s, measured["median_step_s"]
    return {
        "measured_step_s": meas,
        "predicted_step_s": pred,
        "error_pct": (pred - meas) / meas * 100.0,
        "device": measured.get("device", device),
        "profile": profile.id,
        "stack": stack.name if stack is not None else NO_STACK,
        "sdpa_backend": backend,
        "attention": stack.kernels.attention if stack is not None else None,
        "ddp": ddp,
        "model": model.name,
        "predicted_breakdown_s": report.time_breakdown_s,
        "predicted_peak_gib": report.peak_memory_gib,
        "predicted_peak_reserved_gib": report.peak_reserved_gib,
        "measured_peak_allocated_gib": measured.get("peak_allocated_gib"),
        "measured_peak_reserved_gib": measured.get("peak_reserved_gib"),
        "measured_step_times_s": measured.get("step_times_s"),
    }


def with_measured_attention(stack: StackSpec | None, backend: str) -> StackSpec | None:
    """``stack`` with its attention kernel replaced by the one SDPA ran in the measured loop
    (``backend``: a torch SDPBackend name, as
    :func:`calibration.closed_loop.train.sdpa_backend` reads it); unchanged when unknown."""
    from calibration.closed_loop.train import SDPA_AS_STACK_ATTENTION

    impl = SDPA_AS_STACK_ATTENTION.get(backend)
    if stack is None or impl is None or impl == stack.kernels.attention:
        return stack
    kernels = stack.kernels.model_copy(update={"attention": impl})
    return stack.model_copy(update={"kernels": kernels})


def predicted_report(
    model: ModelSpec,
    device: str,
    ddp: int,
    seq_len: int,
    micro_batch: int,
    profile: CalibrationProfile,
    cluster_id: str = "dgx-h200",
    stack: StackSpec | None = None,
) -> StepReport:
    """The simulator's report of the closed loop's step: data parallel over ``ddp`` ranks, fp32
    on a CPU (the measured host as a cluster), bf16 on ``cluster_id`` for CUDA."""
    from calibration.measured_cluster import measured_cluster
    from planner.simulate import simulate_step

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
    return simulate_step(model, cluster, layout, training, _per_rank(profile, ddp), stack=stack)


def predict_step(
    model_id: str,
    device: str,
    ddp: int,
    seq_len: int,
    micro_batch: int,
    profile: CalibrationProfile,
    stack: StackSpec | None = None,
    cluster_id: str = "dgx-h200",
) -> float:
    """Predicted seconds of the closed loop's step (no measurement)."""
    model = planner.load_model(model_id)
    report = predicted_report(model, device, ddp, seq_len, micro_batch, profile, cluster_id, stack)
    return report.step_time_s


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


def run(args: argparse.Namespace) -> int:
    """Print measured vs predicted step time."""
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
        stack_flag(args, CLOSED_LOOP_STACK),
    )
    if args.json:
        sys.stdout.write(json.dumps(out, indent=2) + "\n")
    else:
        sys.stdout.write(
            f"{out['model']} on {out['device']} (ddp {out['ddp']}): measured "
            f"{out['measured_step_s'] * 1e3:.1f} ms/step, predicted "
            f"{out['predicted_step_s'] * 1e3:.1f} ms/step, error {out['error_pct']:+.1f}% "
            f"(profile {out['profile']}, stack {out['stack']})\n"
        )
    return 0
