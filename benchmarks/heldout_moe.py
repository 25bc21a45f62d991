"""Held-out MoE check: do the mechanisms fitted on the public set carry over to unseen runs?

    python benchmarks/heldout_moe.py [CASES.yaml]

Simulates calibration/validation/heldout_moe.yaml (33 Megatron-Bridge 25.09 / 25.11 / 26.02 MoE rows
transcribed from the performance-summary archive, none of them in shared/validation/public.yaml
and none read by any fit) with the shipped profiles, and again with the host model switched off
(``host.op_us = 0``), and prints both errors per row and the summary.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

import planner
from planner.profile import CalibrationProfile
from planner.validate import read_case_file, run_case

DEFAULT = Path(__file__).resolve().parents[1] / "calibration" / "validation" / "heldout_moe.yaml"


def _no_host(cluster: planner.Cluster) -> CalibrationProfile:
    return planner.default_profile(cluster).with_host_op_us(0.0)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    path = Path(argv[0]) if argv else DEFAULT
    schema, cases = read_case_file(path)
    print(f"{'case':58} {'measured':>9} {'predicted':>9} {'err %':>7} {'no-host %':>9}  status")
    errs: dict[str, list[float]] = {"with": [], "without": []}
    for raw in cases:
        r = run_case(raw, planner.default_profile, schema)
        r0 = run_case(raw, _no_host, schema)
        e, e0 = r["error_pct"], r0["error_pct"]
        pred = r["predicted_tokens_per_s_per_gpu"]
        print(
            f"{raw['id'][:58]:58} {raw['measured']['tokens_per_s_per_gpu']:9.0f} "
            f"{pred if pred is None else round(pred):>9} "
            f"{'-' if e is None else format(e, '+7.1f'):>7} "
            f"{'-' if e0 is None else format(e0, '+9.1f'):>9}  {r['status']}"
        )
        if r["status"] == "ok":
            errs["with"].append(abs(e))
        if r0["status"] == "ok":
            errs["without"].append(abs(e0))
    for key, label in (("with", "shipped profiles"), ("without", "host model off")):
        v = np.array(errs[key])
        print(
            f"{label:18}: {len(v)} of {len(cases)} ok, MAPE {v.mean():.1f}%, "
            f"median {np.median(v):.1f}%, max {v.max():.1f}%"
        )


if __name__ == "__main__":
    main()
