"""Tile and wave quantization of GEMMs over the SM count (planner/costs/waves.py)."""

from __future__ import annotations

import dataclasses

import pytest

import planner
from planner.costs import compute
from planner.costs.waves import wave_utilization
from planner.errors import PlannerError
from planner.specs.hardware import AcceleratorSpec

A100 = planner.load_cluster("dgx-a100-40gb")
H100 = planner.load_cluster("dgx-h100")


def _device(cluster: planner.Cluster, sm_count: int | None) -> compute.Device:
    dev = compute.make_device(cluster.accelerator, planner.default_profile(cluster), "bf16")
    return dataclasses.replace(dev, sm_count=sm_count)


def test_no_sm_count_means_no_quantization():
    assert wave_utilization(300.0, 300.0, 4096.0, None) == 1.0


def test_large_gemms_lose_little_and_small_ones_lose_more():
    big = wave_utilization(8192.0, 8192.0, 8192.0, 108)
    # hidden 1,024 at TP 8: the attention output projection writes 8,192 x 1,024 with K = 128
    small = wave_utilization(8192.0, 1024.0, 128.0, 108)
    assert 0.95 <= big <= 1.0
    assert small < big
    assert 0.0 < small <= 1.0


def test_one_tile_past_a_full_wave_costs_a_second_wave():
    # 108 tiles of 128 x 128 fill one A100 wave; one more row of tiles needs a second
    full = wave_utilization(108 * 128.0, 128.0, 256.0, 108)
    over = wave_utilization(109 * 128.0, 128.0, 256.0, 108)
    assert full == pytest.approx(1.0)
    assert over < 0.6


def test_split_k_fills_the_gpu_when_the_output_is_small_and_k_long():
    # a weight gradient: 1,024 x 384 output (24 tiles of 128 x 128) reduced over 8,192 tokens
    long_k = wave_utilization(1024.0, 384.0, 8192.0, 108)
    short_k = wave_utilization(1024.0, 384.0, 512.0, 108)
    assert long_k > short_k


def test_a_batched_launch_shares_its_waves():
    one = wave_utilization(1024.0, 1024.0, 64.0, 108)
    many = wave_utilization(1024.0, 1024.0, 64.0, 108, batch=128.0)
    assert many > one


@pytest.mark.parametrize("cluster", [A100, H100], ids=["a100", "h100"])
def test_gemm_time_grows_with_quantization_for_small_shapes(cluster):
    sms = cluster.accelerator.sm_count
    assert sms is not None
    on, off = _device(cluster, sms), _device(cluster, None)
    small = (8192.0, 384.0, 1024.0)
    assert compute.gemm_time_s(*small, on) > compute.gemm_time_s(*small, off)
    big = (16384.0, 8192.0, 8192.0)
    assert compute.gemm_time_s(*big, on) <= 1.06 * compute.gemm_time_s(*big, off)


def test_every_figure_stays_finite_and_positive():
    for m in (1.0, 17.0, 128.0, 1000.0, 65536.0):
        for n in (1.0, 96.0, 4096.0):
            for k in (1.0, 300.0, 1e6):
                u = wave_utilization(m, n, k, 132, batch=3.0)
                assert 0.0 < u <= 1.0


@pytest.mark.parametrize("bad", [0, -4, 5000])
def test_sm_count_has_a_range(bad):
    raw = planner.load_cluster("dgx-h100").accelerator.model_dump() | {"sm_count": bad}
    with pytest.raises((ValueError, PlannerError)):
        AcceleratorSpec(**raw)
