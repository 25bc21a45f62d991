"""Accelerator and cluster specs. Bandwidths are decimal (1 GB/s = 1e9 B/s), one direction."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field, model_validator

from planner.specs.base import (
    MAX_BANDWIDTH_GB_PER_S,
    MAX_GPUS,
    MAX_LATENCY_US,
    MAX_MEMORY_GIB,
    MAX_POWER_W,
    MAX_PRICE_USD,
    MAX_TFLOPS,
    Spec,
)

Precision = Literal["fp32", "tf32", "bf16", "fp16", "fp8", "fp4"]


_Frozen = Spec


class PeakTflops(_Frozen):
    """Dense (no 2:4 sparsity) peak tensor throughput per GPU, TFLOP/s; None = unsupported."""

    fp32: float = Field(gt=0, le=MAX_TFLOPS, description="non-tensor FP32")
    tf32: float | None = Field(default=None, gt=0, le=MAX_TFLOPS)
    bf16: float | None = Field(default=None, gt=0, le=MAX_TFLOPS)
    fp16: float = Field(gt=0, le=MAX_TFLOPS)
    fp8: float | None = Field(default=None, gt=0, le=MAX_TFLOPS)
    fp4: float | None = Field(default=None, gt=0, le=MAX_TFLOPS)


class AcceleratorSpec(_Frozen):
    """One GPU / accelerator."""

    name: str = Field(min_length=1, max_length=200)
    vendor: str = Field(max_length=200)
    peak_tflops: PeakTflops
    hbm_capacity_gib: float = Field(
        gt=0, le=MAX_MEMORY_GIB, description="device memory as the driver reports it, GiB"
    )
    hbm_usable_gib: float = Field(
        gt=0,
        le=MAX_MEMORY_GIB,
        description="memory a training process can allocate (capacity minus context/driver)",
    )
    hbm_bandwidth_tb_per_s: float = Field(
        gt=0, le=1000, description="peak HBM bandwidth, TB/s (1e12 B/s)"
    )
    tdp_w: float | None = Field(
        default=None, gt=0, le=MAX_POWER_W, description="board power, W (None: unknown)"
    )
    rated_power_w: float | None = Field(
        default=None,
        gt=0,
        le=MAX_POWER_W,
        description="board power at which peak_tflops are rated, W, where tdp_w is a cap below "
        "it (the same silicon run at a lower power limit); None: tdp_w, no cap",
    )
    host_link_gb_per_s: float | None = Field(
        default=None,
        gt=0,
        le=MAX_BANDWIDTH_GB_PER_S,
        description="GPU <-> host memory bandwidth per GPU, each way, GB/s (PCIe or NVLink-C2C; "
        "None: unknown, no activation offloading)",
    )
    sm_count: int | None = Field(
        default=None,
        ge=1,
        le=1024,
        description="streaming multiprocessors (NVIDIA) or compute units (AMD) that GEMM thread "
        "blocks are spread over, for tile and wave quantization (planner/costs/waves.py); None: "
        "unknown, no quantization",
    )
    profile: str = Field(
        max_length=1000, description="id of the default calibration profile (calibration/profiles)"
    )
    sources: list[str] = Field(min_length=1, max_length=100)

    @model_validator(mode="after")
    def _check(self) -> AcceleratorSpec:
        if self.hbm_usable_gib > self.hbm_capacity_gib:
            raise ValueError("hbm_usable_gib exceeds hbm_capacity_gib")
        rated, board = self.rated_power_w, self.tdp_w
        if rated is not None and board is not None and rated < board:
            raise ValueError(
                f"rated_power_w {rated} is below tdp_w {board}: the peaks are rated at the "
                "full power, tdp_w may only cap below it"
            )
        return self

    @property
    def tensor_clock_fraction(self) -> float:
        """Sustained tensor-core clock under a power cap, as a fraction of the rated one (1.0
        without a cap): (tdp_w / rated_power_w) ** (1/3). Dynamic power is C V^2 A f and the
        voltage a clock needs falls with the clock (DVFS), so power goes as f^3 in that range
        (Wikipedia "Dynamic frequency scaling"; LeSueur and Heiser, HotPower 2010); static
        power is left out, so this is the smallest slowdown the law allows. It scales the GEMM
        and attention throughput only: HBM, NVLink and the host keep their own clocks."""
        if self.rated_power_w is None or self.tdp_w is None or self.tdp_w >= self.rated_power_w:
            return 1.0
        return float((self.tdp_w / self.rated_power_w) ** (1.0 / 3.0))

    def peak_flops_per_s(self, precision: str) -> float:
        """Dense peak for a training precision, FLOP/s (bf16 falls back to fp16 on V100)."""
        value = getattr(self.peak_tflops, precision, None)
        if value is None and precision == "bf16":
            value = self.peak_tflops.fp16
        if value is None:
            from planner.errors import PlannerError

            raise PlannerError(
                "training.precision",
                f"{self.name} has no {precision} tensor throughput",
                "bf16, fp16" + (", fp8" if self.peak_tflops.fp8 else ""),
            )
        return value * 1e12


class ClusterSpec(_Frozen):
    """A cluster: nodes of GPUs, a scale-up domain (NVLink) and a scale-out fabric (IB/RoCE)."""

    name: str = Field(min_length=1, max_length=200)
    accelerator: str = Field(
        min_length=1, max_length=1000, description="id (file stem) in hardware_specs/accelerators"
    )
    gpus_per_node: int = Field(ge=1, le=1024)
    scale_up_domain_gpus: int = Field(
        ge=1, le=MAX_GPUS, description="GPUs sharing the NVLink/xGMI domain"
    )
    scale_up_bandwidth_gb_per_s: float = Field(
        gt=0, le=MAX_BANDWIDTH_GB_PER_S, description="per GPU, one direction, GB/s"
    )
    scale_up_latency_us: float = Field(ge=0, le=MAX_LATENCY_US)
    scale_out_bandwidth_gb_per_s: float = Field(
        gt=0, le=MAX_BANDWIDTH_GB_PER_S, description="per GPU NIC, one direction, GB/s"
    )
    scale_out_latency_us: float = Field(ge=0, le=MAX_LATENCY_US)
    price_per_gpu_hour_usd: float | None = Field(default=None, gt=0, le=MAX_PRICE_USD)
    host_memory_bandwidth_gb_per_s: float | None = Field(
        default=None,
        gt=0,
        le=MAX_BANDWIDTH_GB_PER_S,
        description="peak DRAM bandwidth of one node's host CPUs, GB/s (sockets x channels x "
        "MT/s x 8 B), shared by its GPUs' optimizer updates under optimizer_offload; None: "
        "unknown, no optimizer offload",
    )
    profile: str | None = Field(
        default=None, max_length=1000, description="calibration profile id or path override"
    )
    sources: list[str] = Field(min_length=1, max_length=100)

    @model_validator(mode="after")
    def _check(self) -> ClusterSpec:
        if self.scale_up_domain_gpus < self.gpus_per_node:
            raise ValueError("scale_up_domain_gpus must be at least gpus_per_node")
        if self.scale_up_domain_gpus % self.gpus_per_node:
            raise ValueError("scale_up_domain_gpus must be a multiple of gpus_per_node")
        return self


class Cluster(_Frozen):
    """A cluster spec with its accelerator resolved (what the simulator consumes)."""

    id: str
    spec: ClusterSpec
    accelerator: AcceleratorSpec

    def with_power_limit(self, watts: float) -> Cluster:
        """This cluster with its GPUs capped at ``watts`` (``nvidia-smi -pl``): the board power
        becomes the cap and the peaks stay rated at the accelerator's own power, so the tensor
        clock follows :attr:`AcceleratorSpec.tensor_clock_fraction`. Valid: a finite value from
        :data:`MIN_POWER_LIMIT_FRACTION` of the rated power up to it (a GPU's power limit
        cannot go higher); a PlannerError naming ``power_limit_w`` otherwise."""
        from planner.errors import PlannerError

        accel = self.accelerator
        rated = accel.rated_power_w or accel.tdp_w
        if rated is None:
            raise PlannerError(
                "power_limit_w",
                f"{accel.name} states no board power (tdp_w) to cap",
                "an accelerator spec with tdp_w",
            )
        low = MIN_POWER_LIMIT_FRACTION * rated
        valid = f"{low:,.0f} to {rated:,.0f} W for {accel.name}"
        if isinstance(watts, bool) or not isinstance(watts, (int, float)):
            raise PlannerError("power_limit_w", f"{watts!r} is not a number of watts", valid)
        if not math.isfinite(watts) or not low <= watts <= rated:
            raise PlannerError("power_limit_w", f"{watts} W is out of range", valid)
        capped = accel.model_copy(update={"tdp_w": float(watts), "rated_power_w": rated})
        return self.model_copy(update={"accelerator": capped})


# the lowest power limit a cluster may be given, as a fraction of the rated board power (an
# assumption: far below the rated power the voltage stops falling with the clock and the cube
# law of AcceleratorSpec.tensor_clock_fraction no longer holds)
MIN_POWER_LIMIT_FRACTION = 0.25
