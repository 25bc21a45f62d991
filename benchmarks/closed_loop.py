"""Closed-loop accuracy: measured vs predicted training step with a freshly measured profile.

    python benchmarks/closed_loop.py [--device cpu|cuda] [--model gpt-tiny] [--ddp 1 2]
                                     [--profile P.json]

Prints a table; never fails. Targets (issue 3): |error| <= 20% on one CPU process, <= 30% with
DDP over 2 gloo processes, <= 10% on a GPU with a ~1B-parameter model (gpt3-1.3b).
"""

from __future__ import annotations

import argparse

import planner
from planner.calibrate_cmds import closed_loop, run_calibration


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--model", default=None)
    ap.add_argument("--ddp", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--profile", default=None)
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--micro-batch", type=int, default=4)
    args = ap.parse_args()
    model = args.model or ("gpt3-1.3b" if args.device == "cuda" else "gpt-tiny")
    if args.profile:
        profile = planner.load_profile(args.profile)
    else:
        accel = "h200-sxm-141gb" if args.device == "cuda" else None
        profile, _ = run_calibration(args.device, True, max(2, *args.ddp), accel, None)
    print(
        f"{'model':12} {'device':6} {'ddp':>3} {'measured ms':>12} {'predicted ms':>13} "
        f"{'error %':>8}"
    )
    for ddp in args.ddp:
        out = closed_loop(model, args.device, ddp, args.seq_len, args.micro_batch, 6, profile)
        print(
            f"{model:12} {args.device:6} {ddp:3d} {out['measured_step_s'] * 1e3:12.1f} "
            f"{out['predicted_step_s'] * 1e3:13.1f} {out['error_pct']:+8.1f}"
        )


if __name__ == "__main__":
    main()
