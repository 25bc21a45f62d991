"""The calibration chain on CPU, end to end: quick suite -> fit -> profile file -> closed loop.

Only the machinery is tested: every stage runs and hands on well-formed, finite figures. How
close the prediction comes to the measured step depends on what else the machine is doing (a
busy 2-core host once put it at +254%), so accuracy is not asserted here: it is the table
benchmarks/closed_loop.py prints, reported in docs/calibration.md.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

import planner

torch = pytest.importorskip("torch")

from calibration.fit_measured import fit_profile  # noqa: E402
from calibration.suite.run import run_suite  # noqa: E402


@pytest.fixture(scope="module")
def measured_profile(tmp_path_factory) -> planner.CalibrationProfile:
    suite = run_suite(device="cpu", quick=True, ranks=2)
    profile = fit_profile(suite, "cpu-test")
    path = tmp_path_factory.mktemp("profile") / "cpu.json"
    path.write_text(profile.model_dump_json())
    return planner.load_profile(path)


def test_suite_fit_produces_a_cpu_profile(measured_profile):
    fit = measured_profile.metadata["fit"]
    for key in ("gemm_median_abs_rel_error", "memory_median_abs_rel_error"):
        assert math.isfinite(fit[key]) and fit[key] >= 0, key
    assert {c.op for c in measured_profile.collectives} >= {"all_reduce", "all_gather"}
    device = measured_profile.device
    assert device is not None and device.kind == "cpu"
    assert measured_profile.accelerator == device.name  # a CPU profile keeps the CPU's name
    assert all(math.isfinite(v) and v > 0 for v in device.peak_tflops.values())


CLOSED_LOOP_FIELDS = {
    "measured_step_s",
    "predicted_step_s",
    "error_pct",
    "device",
    "profile",
    "ddp",
    "model",
    "predicted_breakdown_s",
    "measured_step_times_s",
}


@pytest.mark.parametrize("ddp", [1, 2])
def test_closed_loop_runs_and_reports(measured_profile, tmp_path, capsys, ddp):
    """``planner closed-loop --json`` with a measured profile: the JSON has every field, the
    prediction and the measurement are finite and positive, and the error is computed from
    them. Not how large the error is (see the module docstring)."""
    from planner.cli import main

    path = tmp_path / "cpu.json"
    path.write_text(measured_profile.model_dump_json())
    argv = ["closed-loop", "--profile", str(path), "--ddp", str(ddp), "--json"]
    assert main([*argv, "--seq-len", "256", "--micro-batch", "2", "--steps", "2"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) >= CLOSED_LOOP_FIELDS
    assert (out["ddp"], out["device"], out["profile"]) == (ddp, "cpu", measured_profile.id)
    pred, meas = out["predicted_step_s"], out["measured_step_s"]
    assert math.isfinite(pred) and pred > 0
    assert math.isfinite(meas) and meas > 0
    assert out["error_pct"] == pytest.approx((pred - meas) / meas * 100.0)
    assert sum(out["predicted_breakdown_s"].values()) > 0
    assert len(out["measured_step_times_s"]) == 2


def test_simulator_never_imports_torch():
    code = (
        "import sys; sys.modules['torch'] = None; import planner; "
        "m = planner.load_model('llama3.1-8b'); c = planner.load_cluster('dgx-h100'); "
        "r = planner.simulate(m, c, planner.Layout(dp=8), "
        "planner.Training(seq_len=4096, global_batch=8)); "
        "import planner.cli, planner.validate; print(r.step_time_s > 0)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"


def test_missing_torch_is_a_clear_cli_error():
    code = (
        "import sys; sys.modules['torch'] = None; from planner.cli import main; "
        "sys.exit(main(['closed-loop', '--ddp', '1']))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 2
    assert "torch" in out.stderr and "Traceback" not in out.stderr
