"""A Cluster for the machine a measured CPU profile came from (it has no datasheet).

Peaks are the best measured GEMM throughputs, memory bandwidth the measured copy bandwidth,
the "scale-up" link the measured all-reduce bus bandwidth between the processes.
"""

from __future__ import annotations

from planner.errors import PlannerError
from planner.profile import CalibrationProfile
from planner.specs.hardware import AcceleratorSpec, Cluster, ClusterSpec, PeakTflops


def measured_cluster(profile: CalibrationProfile, ranks: int = 1) -> Cluster:
    """One node of ``ranks`` processes on the profiled host."""
    dev = profile.device
    if dev is None:
        raise PlannerError(
            "profile.device",
            "this profile has no measured device figures",
            "a profile written by planner calibrate",
        )
    p = dev.peak_tflops
    fp32 = p.get("fp32") or max(p.values())
    half = p.get("bf16") or p.get("fp16") or fp32
    mem = dev.memory_gib or 16.0
    source = f"measured: {profile.method}"
    accel = AcceleratorSpec(
        name=dev.name,
        vendor="measured",
        peak_tflops=PeakTflops(
            fp32=fp32,
            tf32=None,
            bf16=p.get("bf16") or half,
            fp16=p.get("fp16") or half,
            fp8=p.get("fp8"),
        ),
        hbm_capacity_gib=mem,
        hbm_usable_gib=mem,
        hbm_bandwidth_tb_per_s=dev.memory_bandwidth_gb_per_s / 1e3,
        profile=profile.id,
        sources=[source],
    )
    ar = [c for c in profile.collectives if c.op == "all_reduce"] or list(profile.collectives)
    bw = max((c.bus_bandwidth_gb_per_s for c in ar), default=1.0)
    lat = min((c.latency_us for c in ar), default=0.0)
    spec = ClusterSpec(
        name=f"{dev.name} x {ranks} processes",
        accelerator=profile.id,
        gpus_per_node=ranks,
        scale_up_domain_gpus=ranks,
        scale_up_bandwidth_gb_per_s=bw,
        scale_up_latency_us=lat,
        scale_out_bandwidth_gb_per_s=bw,
        scale_out_latency_us=lat,
        profile=profile.id,
        sources=[source],
    )
    return Cluster(id=f"measured-{profile.id}", spec=spec, accelerator=accel)
