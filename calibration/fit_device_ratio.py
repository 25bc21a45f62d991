"""Fit one device's in-training speed over its generation's from published pairs of runs.

    python -m calibration.fit_device_ratio [--write]

GB300 (Blackwell Ultra) has the same tensor peaks as GB200 (bf16 2.5, fp8 5 PFLOP/s dense; the
accelerator files cite them) and no microbenchmark of ours, so its profile is GB200's; but the
Megatron-Bridge tables run the same models 1.2x faster per GPU on DGX-GB300 than on DGX-GB200
in every release (1,400 W against 1,200 W; Blackwell Ultra's doubled attention exponent
throughput). The speed-up is not a published figure, so it is measured here, as a paired
difference: for each pair of rows of one release, model and precision on the two systems
(``calibration/validation/gb300_pairs.yaml``: the 26.02 release), the log of the measured
GB300 / GB200 throughput ratio minus the log of the predicted one, the software release and the
recipe cancelling out. The ratio ``r`` multiplies GB300's sustained fraction (the GEMM and
attention efficiency in training, ``gemm.sustained_fraction``) over the Blackwell one fitted by
``calibration/fit_global.py``; it is chosen by a robust (soft-L1) least-squares fit of those
pair residuals (scipy least_squares), bounded so that no GEMM efficiency passes 1.

``--write`` stores it in ``calibration/device_ratios.json``; ``python -m
calibration.fit_public_profiles`` then writes the GB300 profile. The other releases' GB300 rows
(and the whole independent set, ``benchmarks/``) are read by no fit.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

import planner
from planner.validate import read_case_file, run_case

ROOT = Path(__file__).resolve().parents[1]
PAIRS = ROOT / "calibration" / "validation" / "gb300_pairs.yaml"
OUT = Path(__file__).resolve().parent / "device_ratios.json"
# Every file this fit reads (tests/calibration/test_fit_inputs.py holds it to this list).
READS = ("calibration/validation/gb300_pairs.yaml", "calibration/profiles/*.json")
DEVICE, BASE = "gb300", "gb200"  # the device fitted, and the device of its borrowed profile
LOSS, F_SCALE = "soft_l1", 0.1


def _pairs(cases: list[dict]) -> list[tuple[dict, dict]]:
    """(device row, base row) for every case id naming the device whose base twin is there."""
    by_id = {c["id"]: c for c in cases}
    out = []
    for cid, case in by_id.items():
        twin = by_id.get(cid.replace(f"_{DEVICE}_", f"_{BASE}_"))
        if f"_{DEVICE}_" in cid and twin is not None:
            out.append((case, twin))
    if not out:
        raise SystemExit(f"no {DEVICE}/{BASE} pairs in {PAIRS}")
    return out


def _profile_for(ratio: float):  # noqa: ANN202 - a profile_for callable
    """planner.default_profile, with the device's sustained fraction scaled by ``ratio``."""

    def profile_for(cluster):  # noqa: ANN001, ANN202
        prof = planner.default_profile(cluster)
        if cluster.spec.accelerator != DEVICE:
            return prof
        gemm = prof.gemm.model_copy(
            update={"sustained_fraction": prof.gemm.sustained_fraction * ratio}
        )
        return prof.model_copy(update={"gemm": gemm})

    return profile_for


def residuals(pairs: list[tuple[dict, dict]], ratio: float, base_rate: list[float]) -> np.ndarray:
    """Per pair: log(measured device/base ratio) - log(predicted device/base ratio)."""
    out = []
    for (dev, base), base_pred in zip(pairs, base_rate, strict=True):
        row = run_case(dev, _profile_for(ratio), 2)
        meas = dev["measured"]["tokens_per_s_per_gpu"] / base["measured"]["tokens_per_s_per_gpu"]
        out.append(np.log(meas) - np.log(row["predicted_tokens_per_s_per_gpu"] / base_pred))
    return np.array(out)


def fit(write: bool = False) -> dict:
    """The fitted ratio and its pair residuals (written to OUT with ``write``)."""
    _, cases = read_case_file(PAIRS)
    pairs = _pairs(cases)
    base_rate = [
        run_case(base, planner.default_profile, 2)["predicted_tokens_per_s_per_gpu"]
        for _, base in pairs
    ]
    cluster = planner.load_cluster(pairs[0][0]["cluster"])
    prof = planner.default_profile(cluster)
    # the scaled fraction may not lift the device's best GEMM efficiency past 1
    eta = max(prof.gemm_eta_max(p) for p in ("bf16", "fp8"))
    upper = 1.0 / (prof.gemm.sustained_fraction * eta)
    # the shipped profile may already carry a ratio: fit the total over the generation's
    current = load_ratios().get(DEVICE, {}).get("sustained_ratio", 1.0)

    def fun(x: np.ndarray) -> np.ndarray:
        return residuals(pairs, float(x[0]), base_rate)

    # run_case rounds its figures: a finite-difference step well above that rounding
    res = least_squares(
        fun, x0=[1.0], bounds=([0.5], [upper]), loss=LOSS, f_scale=F_SCALE, diff_step=0.01
    )
    scale = float(res.x[0])
    before, after = fun(np.array([1.0])), fun(res.x)
    result = {
        DEVICE: {
            "sustained_ratio": round(current * scale, 4),
            "over": BASE,
            "fitted_on": READS[0],
            "pairs": [dev["id"] for dev, _ in pairs],
            "pair_residual_pct_before": [round(float(np.expm1(r)) * 100, 1) for r in before],
            "pair_residual_pct_after": [round(float(np.expm1(r)) * 100, 1) for r in after],
        }
    }
    if write:
        OUT.write_text(json.dumps(result, indent=2) + "\n")
    return result


def load_ratios() -> dict:
    """The fitted device ratios (empty before a fit)."""
    return json.loads(OUT.read_text()) if OUT.is_file() else {}


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    result = fit(write="--write" in argv)
    r = result[DEVICE]
    print(
        f"{DEVICE} sustained fraction = {BASE}'s x {r['sustained_ratio']:.4f} ({len(r['pairs'])} pairs)"
    )
    print(f"{'pair':48} {'before %':>9} {'after %':>9}")
    for pid, b, a in zip(
        r["pairs"], r["pair_residual_pct_before"], r["pair_residual_pct_after"], strict=True
    ):
        print(f"{pid:48} {b:9.1f} {a:9.1f}")


if __name__ == "__main__":
    main()
