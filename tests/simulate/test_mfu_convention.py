"""MFU is stated against the bf16 peak, and for fp8 runs against the fp8 peak too (issue 15
item 7); the convention is printed with every report and validation table."""

from __future__ import annotations

import io
from contextlib import redirect_stdout

import pytest

import planner
from planner.cli import main

MODEL = planner.load_model("llama3.1-8b")
CLUSTER = planner.load_cluster("dgx-h100")
LAYOUT = planner.Layout(tp=1, dp=8, zero=1)


def _report(precision: str) -> planner.StepReport:
    training = planner.Training(seq_len=4096, global_batch=64, precision=precision)
    return planner.simulate(MODEL, CLUSTER, LAYOUT, training)


def test_fp8_mfu_against_both_peaks():
    r = _report("fp8")
    accel = CLUSTER.accelerator
    ratio = accel.peak_flops_per_s("bf16") / accel.peak_flops_per_s("fp8")
    assert r.mfu_training_precision_pct == pytest.approx(r.mfu_pct * ratio)
    assert r.mfu_training_precision_pct < r.mfu_pct
    assert "fp8 peak" in r.mfu_convention.lower()


def test_bf16_has_one_mfu():
    assert _report("bf16").mfu_training_precision_pct is None


def test_simulate_and_validate_print_the_convention():
    buf = io.StringIO()
    with redirect_stdout(buf):
        assert (
            main(
                ["simulate", "--model", "llama3.1-8b", "--cluster", "dgx-h100"]
                + ["--gpus", "8", "--global-batch", "64", "--zero", "1"]
                + ["--precision", "fp8"]
            )
            == 0
        )
    out = buf.getvalue()
    assert "MFU (of the bf16 peak)" in out and "training precision's peak" in out
    assert "HFU (executed FLOPs)" in out
    buf = io.StringIO()
    with redirect_stdout(buf):
        assert main(["validate", "public"]) == 0
    out = " ".join(buf.getvalue().split())
    assert "without causal discount" in out and "fp8)" in out
