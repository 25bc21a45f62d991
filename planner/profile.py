"""Calibration profile: the efficiency curves the cost model reads.

A profile is data (JSON in ``calibration/profiles/``). The shipped defaults are fitted from public
measurements by ``calibration/fit_public_profiles.py``; ``planner calibrate`` (torch) will write
measured ones of the same schema. The simulator never reads files itself: callers pass a profile.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, ValidationError, model_validator

from planner.errors import PlannerError, pydantic_error_to_planner
from planner.resources import MEASURED_PROFILES_DIR, PROFILES_DIR
from planner.safe_io import load_json, read_text
from planner.specs.base import (
    MAX_BANDWIDTH_GB_PER_S,
    MAX_GPUS,
    MAX_LATENCY_US,
    MAX_MEMORY_GIB,
    MAX_TFLOPS,
    Spec,
    no_bool,
)

PROFILE_SCHEMA_VERSION = 1


_Frozen = Spec
# an efficiency: a fraction of a datasheet peak, finite, (0, 1]
Fraction = Annotated[float, BeforeValidator(no_bool), Field(gt=0, le=1)]


class GemmEfficiency(_Frozen):
    """Dense GEMM throughput as a fraction of the datasheet peak.

    time(m, n, k) = max(2mnk / (peak * eta_max * s(m) s(n) s(k)), bytes / (hbm_bw * eta_mem))
                    + fixed_us, with s(d) = d / (d + dim_half) a saturating shape factor.
    """

    eta_max: dict[Literal["fp32", "tf32", "bf16", "fp16", "fp8", "fp4"], Fraction] = Field(
        min_length=1, description="large-GEMM efficiency per precision (0..1]; bf16 required"
    )
    dim_half: float = Field(
        gt=0, le=1e6, description="GEMM dimension at which s(d) = 0.5, elements"
    )
    fixed_us: float = Field(
        ge=0, le=MAX_LATENCY_US, description="per-kernel launch and tail overhead, us"
    )
    sustained_fraction: float = Field(
        default=1.0,
        gt=0,
        le=1,
        description="in-training over microbenchmark throughput (sustained clocks under power "
        "and thermal limits, interleaved kernels); applies to GEMMs and attention; fitted "
        "globally by calibration/fit_global.py",
    )

    @model_validator(mode="after")
    def _bf16_listed(self) -> GemmEfficiency:
        if "bf16" not in self.eta_max:
            raise ValueError("eta_max: needs a bf16 entry (the fallback of every precision)")
        return self


class AttentionEfficiency(_Frozen):
    """Fused (flash) attention throughput, FLOP convention of FlashAttention-2 (bwd = 2.5 x fwd).

    eta(s) = eta_max * s / (s + seq_half), per pass, as a fraction of the bf16 peak.
    """

    eta_max_fwd: float = Field(gt=0, le=1)
    eta_max_bwd: float = Field(gt=0, le=1)
    seq_half: float = Field(gt=0, le=1e7, description="sequence length at which eta = eta_max / 2")


class MemoryEfficiency(_Frozen):
    """Memory-bound kernels (norms, activations, casts, optimizer): fraction of HBM peak."""

    eta_hbm: float = Field(gt=0, le=1)
    op_eta: dict[str, Fraction] = Field(
        default_factory=dict,
        max_length=64,
        description="per-op efficiency where measured (copy, rmsnorm, layernorm, softmax_xent, "
        "adamw); ops not listed use eta_hbm",
    )

    def eta(self, op: str) -> float:
        """Achieved fraction of peak bandwidth for one op class."""
        return self.op_eta.get(op, self.eta_hbm)

    fixed_us: float = Field(ge=0, le=MAX_LATENCY_US, description="per-kernel launch overhead, us")


# one point of a measured bandwidth-over-size curve: (message bytes, fraction of the
# large-message bus bandwidth)
SizePoint = tuple[
    Annotated[float, BeforeValidator(no_bool), Field(gt=0, le=1e15)],
    Annotated[float, BeforeValidator(no_bool), Field(gt=0, le=1.2)],
]


class CommEfficiency(_Frozen):
    """Collectives: achieved bus bandwidth over the link spec, and NCCL base latency."""

    scale_up_eta: float = Field(gt=0, le=1.2, description="ring busbw / NVLink spec, large msgs")
    scale_out_eta: float = Field(gt=0, le=1, description="achieved / NIC line rate, large msgs")
    base_latency_us: float = Field(
        ge=0, le=MAX_LATENCY_US, description="per-collective launch latency, us"
    )
    hierarchical_overlap: float = Field(
        ge=0, le=1, description="fraction of the smaller of intra/inter phases hidden by pipelining"
    )
    overlap_contention: float = Field(
        default=0.0,
        ge=0,
        le=1,
        description="share of overlapped communication time still paid by compute (NCCL "
        "kernels take SMs and HBM bandwidth); fitted globally by calibration/fit_global.py",
    )
    size_curve: tuple[SizePoint, ...] = Field(
        default=(),
        max_length=64,
        description="measured all-reduce bus bandwidth inside one scale-up domain over message "
        "size, as (bytes, fraction of the large-message bus bandwidth), bytes increasing; "
        "empty: the alpha-beta model at every size (planner/costs/comms.py)",
    )

    @model_validator(mode="after")
    def _curve_increasing(self) -> CommEfficiency:
        sizes = [p[0] for p in self.size_curve]
        if any(b <= a for a, b in zip(sizes, sizes[1:], strict=False)):
            raise ValueError("size_curve: message sizes must increase")
        return self


class HostOverhead(_Frozen):
    """Host (CPU) side of eager training: the time the framework takes to issue one op.

    Eager PyTorch frameworks issue every kernel from Python (module code, autograd, dispatcher,
    launch). While the host stays ahead of the GPU this costs nothing; where it cannot (many
    small kernels, or a device-to-host sync that empties the launch queue, as dropless MoE
    dispatch does once per layer) the GPU waits. ``planner.costs.host`` counts the ops.
    """

    op_us: float = Field(
        default=0.0,
        ge=0,
        le=1000,
        description="host time to issue one framework op (Python, autograd, dispatcher, "
        "launch), us; 0 disables the host model; fitted globally by calibration/fit_global.py",
    )


class CollectiveFit(_Frozen):
    """A measured collective as alpha-beta: time = latency + factor(n) x bytes / busbw."""

    op: Literal["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv"]
    ranks: int = Field(ge=2, le=MAX_GPUS)
    latency_us: float = Field(ge=0, le=MAX_LATENCY_US)
    bus_bandwidth_gb_per_s: float = Field(gt=0, le=MAX_BANDWIDTH_GB_PER_S)
    backend: str = Field(max_length=100)


class MeasuredDevice(_Frozen):
    """The machine a measured profile came from; CPU hosts have no datasheet, so the planner
    builds their accelerator spec from these figures (``calibration.measured_cluster``)."""

    name: str = Field(min_length=1, max_length=200)
    kind: Literal["cpu", "cuda"]
    peak_tflops: dict[
        str, Annotated[float, BeforeValidator(no_bool), Field(gt=0, le=MAX_TFLOPS)]
    ] = Field(min_length=1, max_length=16, description="best measured GEMM TFLOP/s per dtype")
    memory_bandwidth_gb_per_s: float = Field(
        gt=0, le=MAX_BANDWIDTH_GB_PER_S, description="measured copy bandwidth"
    )
    memory_gib: float | None = Field(default=None, gt=0, le=MAX_MEMORY_GIB)
    threads: int | None = Field(default=None, ge=1, le=100_000)


class CalibrationProfile(_Frozen):
    """Efficiency parameters for one accelerator (and its fabric)."""

    schema_version: Literal[1] = PROFILE_SCHEMA_VERSION
    id: str = Field(min_length=1, max_length=200)
    accelerator: str = Field(
        min_length=1,
        max_length=200,
        description="the accelerator it was measured on or fitted for: an accelerator id "
        "(hardware_specs/accelerators), or the measured device's name",
    )
    method: str = Field(max_length=10_000, description="how the figures were obtained")
    gemm: GemmEfficiency
    attention: AttentionEfficiency
    attention_flash2: AttentionEfficiency | None = Field(
        default=None, description="FlashAttention-2 (architecture-generic kernel); None: as fused"
    )
    attention_cudnn: AttentionEfficiency | None = Field(
        default=None,
        description="cuDNN fused attention (Transformer Engine's kernel) where it was measured "
        "apart from FlashAttention-3; None: as fused",
    )
    attention_flash_triton: AttentionEfficiency | None = Field(
        default=None,
        description="flash-attn's Triton FlashAttention (flash_attn_triton.py, the kernel of "
        "llm-foundry's attn_impl: triton): the FlashAttention-2 curve slowed by the fitted "
        "global attention_triton_slowdown (calibration/fit_global.py); None: as FlashAttention-2",
    )
    memory: MemoryEfficiency
    comm: CommEfficiency
    host: HostOverhead = Field(default_factory=HostOverhead)
    collectives: list[CollectiveFit] = Field(
        default_factory=list,
        max_length=10_000,
        description="measured alpha-beta fits; used inside one domain",
    )
    device: MeasuredDevice | None = None
    metadata: dict = Field(default_factory=dict, description="how and where it was measured")
    sources: list[str] = Field(default_factory=list, max_length=100)
    raw: dict = Field(default_factory=dict, description="the samples the fit used")

    def with_host_op_us(self, op_us: float) -> CalibrationProfile:
        """This profile with another host cost per framework op (0: the host never binds,
        as with CUDA graphs or a compiled step)."""
        return self.model_copy(update={"host": HostOverhead(op_us=op_us)})

    def with_triton_attention_slowdown(self, slowdown: float) -> CalibrationProfile:
        """This profile with the Triton FlashAttention curve at its FlashAttention-2 curve
        (the fused one where it has none) slowed ``slowdown`` times (1-10, both passes)."""
        if not 1.0 <= slowdown <= 10.0:  # NaN fails too
            raise ValueError(f"Triton attention slowdown {slowdown!r}: expected 1 to 10")
        base = self.attention_flash2 or self.attention
        curve = AttentionEfficiency(
            eta_max_fwd=max(1e-4, round(base.eta_max_fwd / slowdown, 4)),
            eta_max_bwd=max(1e-4, round(base.eta_max_bwd / slowdown, 4)),
            seq_half=base.seq_half,
        )
        return self.model_copy(update={"attention_flash_triton": curve})

    def gemm_eta_max(self, precision: str) -> float:
        """Large-GEMM efficiency for a precision; fp16 uses bf16, missing fp8 falls back."""
        table = self.gemm.eta_max
        key = "bf16" if precision == "fp16" else precision
        return table.get(key) or table["bf16"]


def profile_matches(profile: CalibrationProfile, cluster: Any) -> bool:
    """True when ``profile`` was measured on (or fitted for) the cluster's accelerator: its
    ``accelerator`` names the cluster's accelerator id, spec name or default profile id
    (case-insensitive)."""
    names = {
        str(cluster.spec.accelerator),
        Path(str(cluster.spec.accelerator)).stem,
        cluster.accelerator.name,
        cluster.accelerator.profile,
        cluster.spec.profile or "",
    }
    return profile.accelerator.lower() in {n.lower() for n in names if n}


def check_profile_device(
    profile: CalibrationProfile, cluster: Any, any_device: bool = False
) -> None:
    """Refuse a profile measured on another accelerator (a CPU profile on an H100 cluster
    predicts a 100x slower step) unless ``any_device`` says it is meant."""
    if any_device or profile_matches(profile, cluster):
        return
    raise PlannerError(
        "profile",
        f"profile '{profile.id}' was measured on '{profile.accelerator}', not on this "
        f"cluster's {cluster.accelerator.name} ({cluster.spec.accelerator})",
        f"profile '{cluster.spec.profile or cluster.accelerator.profile}' (the cluster's "
        "default), a profile measured on the same accelerator, or --profile-for-any-device",
    )


PROFILE_DIRS = (PROFILES_DIR, MEASURED_PROFILES_DIR)  # where a profile id is looked up, in order


def load_profile(id_or_path: str | Path) -> CalibrationProfile:
    """A profile from a JSON path, or by id: ``calibration/profiles/<id>.json`` (fitted from
    public figures) or ``calibration/measured/<id>.json`` (measured on a device by ``planner
    calibrate``, e.g. ``h200-sxm-141gb-measured``)."""
    path = Path(id_or_path)
    if path.suffix != ".json" and not path.exists():
        shipped = [d / f"{id_or_path}.json" for d in PROFILE_DIRS]
        path = next((p for p in shipped if p.is_file()), shipped[0])
    if not path.is_file():
        known = ", ".join(sorted(p.stem for d in PROFILE_DIRS for p in d.glob("*.json")))
        raise PlannerError("profile", f"profile not found: {id_or_path}", known or None)
    return parse_profile_text(read_text(path, "profile"))


def parse_profile_text(text: str) -> CalibrationProfile:
    """A profile from JSON text: JSON syntax, ``schema_version`` and the pydantic schema are
    checked, each failure a one-line PlannerError."""
    data = load_json(text, "profile")
    if not isinstance(data, dict):
        raise PlannerError(
            "profile", f"expected a JSON object, got {type(data).__name__}", "a profile JSON"
        )
    version = data.get("schema_version")
    if version != PROFILE_SCHEMA_VERSION:
        raise PlannerError(
            "profile.schema_version",
            f"unsupported profile version {version!r}",
            str(PROFILE_SCHEMA_VERSION),
        )
    try:
        return CalibrationProfile.model_validate(data)
    except ValidationError as exc:
        raise pydantic_error_to_planner(exc, "profile") from None
