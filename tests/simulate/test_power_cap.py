"""A power cap below the power the peaks are rated at slows the tensor cores by the cube root of
the power ratio (AcceleratorSpec.tensor_clock_fraction); HBM, links and MFU's peak stay."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

import planner
from planner.specs.hardware import Cluster
from planner.specs.layout import Layout, Training

CAPPED = "grand-teton-h100-96gb"  # H100 SXM silicon at 500 W of the 700 W its peaks are rated at


def _uncapped(cluster: Cluster) -> Cluster:
    """The same cluster with the cap lifted (the peaks' rated power as the board power)."""
    accel = cluster.accelerator.model_copy(update={"tdp_w": cluster.accelerator.rated_power_w})
    return cluster.model_copy(update={"accelerator": accel})


def test_the_clock_fraction_is_the_cube_root_of_the_power_ratio() -> None:
    accel = planner.load_cluster(CAPPED).accelerator
    assert accel.tdp_w == 500 and accel.rated_power_w == 700
    assert accel.tensor_clock_fraction == pytest.approx((500 / 700) ** (1 / 3))
    # no cap: no rated power, or a board power at or above it
    assert planner.load_cluster("dgx-h100").accelerator.tensor_clock_fraction == 1.0
    assert _uncapped(planner.load_cluster(CAPPED)).accelerator.tensor_clock_fraction == 1.0
    higher = accel.model_copy(update={"tdp_w": 800.0})
    assert higher.tensor_clock_fraction == 1.0


def test_a_cap_slows_the_gemms_and_attention_only() -> None:
    capped = planner.load_cluster(CAPPED)
    model = planner.load_model("llama3.1-8b")
    layout = Layout(tp=1, pp=1, dp=8, zero=3)
    training = Training(seq_len=8192, global_batch=8, micro_batch=1, recompute="none")
    slow = planner.simulate(model, capped, layout, training)
    fast = planner.simulate(model, _uncapped(capped), layout, training)
    clock = capped.accelerator.tensor_clock_fraction
    assert slow.step_time_s > fast.step_time_s
    # large GEMMs and attention are compute-bound here: their time scales by 1 / clock
    for cat in ("compute_gemm", "compute_attention"):
        ratio = slow.time_breakdown_s[cat] / fast.time_breakdown_s[cat]
        assert ratio == pytest.approx(1 / clock, rel=0.02), cat
    # memory-bound kernels run at the HBM's clock, the memory footprint is the same
    assert slow.time_breakdown_s["compute_memory_bound"] == pytest.approx(
        fast.time_breakdown_s["compute_memory_bound"]
    )
    assert slow.peak_memory_gib == pytest.approx(fast.peak_memory_gib)
    # MFU stays against the rated peak: it falls with the throughput
    assert slow.mfu_pct / fast.mfu_pct == pytest.approx(
        slow.tokens_per_s / fast.tokens_per_s, rel=1e-9
    )
    assert any("power cap 500 W" in a for a in slow.assumptions)
    assert not any("power cap" in a for a in fast.assumptions)


def test_rated_power_must_be_positive_and_finite() -> None:
    accel = planner.load_cluster(CAPPED).accelerator.model_dump()
    for bad in (0, -700, float("inf"), float("nan"), 400):  # 400: below the 500 W cap
        with pytest.raises(ValidationError):
            type(planner.load_cluster(CAPPED).accelerator).model_validate(
                {**accel, "rated_power_w": bad}
            )


def test_a_profile_measured_on_the_device_is_not_capped_twice() -> None:
    from planner.costs.compute import make_device
    from planner.profile import MeasuredDevice

    accel = planner.load_cluster(CAPPED).accelerator
    fitted = planner.default_profile(planner.load_cluster(CAPPED))
    measured = fitted.model_copy(
        update={
            "device": MeasuredDevice(
                name="H100 96GB at 500 W",
                kind="cuda",
                peak_tflops={"bf16": 700.0},
                memory_bandwidth_gb_per_s=2000.0,
            )
        }
    )
    capped, as_measured = make_device(accel, fitted, "bf16"), make_device(accel, measured, "bf16")
    assert capped.bf16_peak_flops == pytest.approx(
        as_measured.bf16_peak_flops * accel.tensor_clock_fraction
    )
    assert as_measured.bf16_peak_flops == accel.peak_flops_per_s("bf16")


def test_a_cluster_takes_a_power_limit_within_its_range() -> None:
    from planner.errors import PlannerError

    h100 = planner.load_cluster("dgx-h100")
    capped = h100.with_power_limit(500)
    assert capped.accelerator.tdp_w == 500 and capped.accelerator.rated_power_w == 700
    assert capped.accelerator.tensor_clock_fraction == pytest.approx((500 / 700) ** (1 / 3))
    # a capped cluster capped again keeps the rated power it was quoted at
    again = planner.load_cluster(CAPPED).with_power_limit(600)
    assert again.accelerator.rated_power_w == 700
    assert h100.with_power_limit(700).accelerator.tensor_clock_fraction == 1.0
    for bad in (900, 100, 0, -5, float("nan"), float("inf"), True, "600"):
        with pytest.raises(PlannerError) as exc:
            h100.with_power_limit(bad)  # type: ignore[arg-type]
        assert exc.value.field == "power_limit_w"
        assert "175 to 700 W" in str(exc.value)


def test_the_cli_flag_caps_the_cluster(capsys: pytest.CaptureFixture[str]) -> None:
    from planner.cli import main

    base = [
        "simulate", "--model", "llama3.1-8b", "--cluster", "dgx-h100", "--gpus", "8",
        "--global-batch", "64", "--json",
    ]  # fmt: skip
    import json

    assert main(base) in (0, None)
    free = json.loads(capsys.readouterr().out)
    assert main([*base, "--power-limit-w", "500"]) in (0, None)
    capped = json.loads(capsys.readouterr().out)
    assert capped["tokens_per_s_per_gpu"] < free["tokens_per_s_per_gpu"]
    assert any("power cap 500 W" in a for a in capped["assumptions"])
    assert main([*base, "--power-limit-w", "2000"]) not in (0, None)
    assert "--power-limit-w: 2000.0 W is out of range" in capsys.readouterr().err
