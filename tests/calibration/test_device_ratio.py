"""GB300's in-training speed over GB200's (calibration/fit_device_ratio.py): measured from paired
published runs, carried into the shipped GB300 profile, and read from no independent run."""

from __future__ import annotations

import json

import planner
from calibration import fit_device_ratio, fit_public_profiles
from planner.validate import read_case_file


def test_the_shipped_ratio_names_its_pairs_and_they_are_pairs() -> None:
    ratios = fit_device_ratio.load_ratios()
    gb300 = ratios["gb300"]
    assert gb300["fitted_on"] == fit_device_ratio.READS[0]
    _, cases = read_case_file(fit_device_ratio.PAIRS)
    ids = {c["id"] for c in cases}
    assert gb300["pairs"] and all(p.replace("_gb300_", "_gb200_") in ids for p in gb300["pairs"])
    assert len(fit_device_ratio._pairs(cases)) == len(gb300["pairs"])
    assert 0.5 <= gb300["sustained_ratio"] <= 2.0


def test_the_gb300_profile_carries_the_ratio_over_its_generation() -> None:
    glob = fit_public_profiles.global_params()
    ratio = fit_device_ratio.load_ratios()["gb300"]["sustained_ratio"]
    want = fit_public_profiles.sustained_fraction(glob, "gb300")
    gb200 = fit_public_profiles.sustained_fraction(glob, "gb200")
    assert abs(want - gb200 * ratio) < 1e-3
    shipped = json.loads((fit_public_profiles.PROFILES_DIR / "gb300.json").read_text())
    assert shipped["gemm"]["sustained_fraction"] == want


def test_gb300_runs_a_dense_step_faster_than_gb200_at_equal_peaks() -> None:
    model = planner.load_model("llama3.1-70b")
    layout = planner.Layout(tp=2, pp=4, dp=8, vpp=5, sequence_parallel=True)
    training = planner.Training(seq_len=8192, global_batch=256, precision="fp8")
    rates = {
        c: planner.simulate(model, planner.load_cluster(c), layout, training).tokens_per_s_per_gpu
        for c in ("gb200-nvl72", "gb300-nvl72")
    }
    gb200, gb300 = (planner.load_cluster(c).accelerator for c in ("gb200-nvl72", "gb300-nvl72"))
    assert gb300.peak_tflops.fp8 == gb200.peak_tflops.fp8
    assert rates["gb300-nvl72"] > 1.05 * rates["gb200-nvl72"]


def test_the_ratio_fit_reproduces_the_shipped_ratio() -> None:
    shipped = fit_device_ratio.load_ratios()["gb300"]["sustained_ratio"]
    assert abs(fit_device_ratio.fit()["gb300"]["sustained_ratio"] - shipped) < 0.01
