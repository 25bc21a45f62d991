"""The GPU closed loop, replayed: step times measured on a lent GPU (a JSON record written from
``benchmarks/device/gpu_session.sh``'s output) against the simulator's prediction of the same
steps under each profile, here and without a GPU.

    python benchmarks/gpu_closed_loop.py [--record benchmarks/device/h200_closed_loop.json]
                                         [--profile ID|PATH ...] [--stack torchtitan-eager]

Default profiles: the shipped public-figure profile of the record's accelerator and the profile
measured on that GPU (calibration/measured/h200-sxm-141gb-measured.json). The stack's attention
kernel is the one SDPA ran in the record. Prints a table; never fails. Target (issue 3):
|error| <= 10 % on a GPU with a ~1B-parameter model.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import planner
from calibration.closed_loop.train import SDPA_AS_STACK_ATTENTION
from planner.cli.closed_loop import predict_step, with_measured_attention

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "benchmarks" / "device" / "h200_closed_loop.json"
PROFILES = [
    "h200-sxm-141gb",
    str(ROOT / "calibration" / "measured" / "h200-sxm-141gb-measured.json"),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--record", default=str(RECORD))
    ap.add_argument("--profile", nargs="+", default=PROFILES)
    ap.add_argument("--stack", default="torchtitan-eager")
    args = ap.parse_args()
    record = json.loads(Path(args.record).read_text(encoding="utf-8"))
    stack = with_measured_attention(planner.load_stack(args.stack), record["sdpa_backend"])
    print(f"{record['device']}, torch {record['torch']}, {record['date']}")
    print(
        f"stack {args.stack} with attention {SDPA_AS_STACK_ATTENTION.get(record['sdpa_backend'])}"
        f" (SDPA ran {record['sdpa_backend']})"
    )
    profiles = [planner.load_profile(p) for p in args.profile]
    head = "".join(f" {p.id[:26]:>26} {'err %':>7}" for p in profiles)
    print(f"{'model':10} {'seq':>5} {'mb':>3} {'measured ms':>12}{head}")
    errors: dict[str, list[float]] = {p.id: [] for p in profiles}
    for run in record["runs"]:
        measured = run["measured_step_ms"]
        cells = ""
        for profile in profiles:
            predicted = 1e3 * predict_step(
                run["model"], "cuda", 1, run["seq_len"], run["micro_batch"], profile, stack
            )
            error = (predicted - measured) / measured * 100.0
            errors[profile.id].append(abs(error))
            cells += f" {predicted:23.1f} ms {error:+7.1f}"
        print(
            f"{run['model']:10} {run['seq_len']:5d} {run['micro_batch']:3d} {measured:12.1f}{cells}"
        )
    for pid, errs in errors.items():
        print(f"{pid}: mean |error| {sum(errs) / len(errs):.1f} %, max {max(errs):.1f} %")


if __name__ == "__main__":
    main()
