"""Blackwell's fused attention: Hopper's FlashAttention-3 curve scaled so that both measured
FA4-on-B200 over FA3-on-H200 speed-ups hold (1.88x at 8k, 1.95x at 32k), with a later
saturation of its own; the shipped profiles carry it."""

from __future__ import annotations

import pytest

import planner
from calibration.fit_public_profiles import (
    BLACKWELL_ATTN_SPEEDUP,
    blackwell_attention,
    fit_attention,
)
from planner.costs.compute import attention_time_s, make_device


def test_both_measured_speedups_are_reproduced() -> None:
    half = fit_attention()[2]
    speedup, big = blackwell_attention(half)
    assert big > half  # Blackwell saturates at longer sequences than Hopper
    for seq, measured in BLACKWELL_ATTN_SPEEDUP:
        assert speedup * (seq + half) / (seq + big) == pytest.approx(measured, rel=1e-9)
    # the speed-up grows with the sequence and stays below its saturated value
    ratios = [speedup * (s + half) / (s + big) for s in (2048.0, 8192.0, 65536.0, 1e6)]
    assert ratios == sorted(ratios) and ratios[-1] < speedup


@pytest.mark.parametrize("seq", [8192, 32768])
def test_the_shipped_b200_profile_runs_attention_at_the_measured_speedup(seq: int) -> None:
    """The same causal attention, forward and backward, on the shipped B200 and H100 (H200's
    chip) profiles: B200 is faster by the measured factor at both lengths, times the ratio of
    the two generations' in-training sustained fractions (which scale every kernel)."""
    times, sustained = {}, {}
    for accel, cluster in (("b200", "dgx-b200"), ("h100", "dgx-h100")):
        c = planner.load_cluster(cluster)
        profile = planner.default_profile(c)
        dev = make_device(c.accelerator, profile, "bf16")
        fwd, bwd = attention_time_s(1e15, float(seq), dev)
        times[accel], sustained[accel] = fwd + bwd, profile.gemm.sustained_fraction
    measured = dict(BLACKWELL_ATTN_SPEEDUP)[float(seq)]
    in_training = measured * sustained["b200"] / sustained["h100"]
    assert times["h100"] / times["b200"] == pytest.approx(in_training, rel=0.01)
