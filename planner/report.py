"""StepReport: what the simulator says about one training step (units in every name).

A view of the step's :class:`~planner.plan.StepPlan` (``report.plan``): the totals, the time
breakdown of the rank that sets the pace and the memory of the peak rank.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from planner.plan import StepPlan

MFU_CONVENTION = (
    "MFU = model FLOPs per token x tokens/s / (GPUs x dense bf16 peak); model FLOPs per token = "
    "6 N (active matmul params, logits included, embedding lookup excluded) + "
    "6 L H (d_qk + d_v) S (attention, no causal discount), as PaLM and torchtitan. HFU counts "
    "the FLOPs the GPUs execute (recompute included, causal attention halved), so it can be "
    "below MFU. FP8 runs also report MFU against the dense FP8 peak "
    "(mfu_training_precision_pct), which is half the bf16-peak figure."
)

TIME_CATEGORIES = (
    "compute_gemm",
    "compute_attention",
    "compute_memory_bound",
    "compute_logits_loss",
    "recompute",
    "tp_comm",
    "cp_comm",
    "ep_comm",
    "pp_comm",
    "dp_comm",
    "host_overhead",
    "activation_offload",
    "pipeline_bubble",
    "optimizer",
)
MEMORY_CATEGORIES = (
    "weights",
    "gradients",
    "optimizer_states",
    "activations",
    "logits",
    "overhead",
)


@dataclass(frozen=True, slots=True)
class StepReport:
    """Prediction for one optimizer step. Times in seconds, memory in GiB, rates per second."""

    step_time_s: float
    tokens_per_step: int
    tokens_per_s: float
    tokens_per_s_per_gpu: float
    mfu_pct: float
    hfu_pct: float
    model_flops_per_token: float
    gpus: int
    microbatches: int
    time_breakdown_s: dict[str, float]
    memory_breakdown_gib: dict[str, float]
    peak_memory_gib: float
    peak_memory_stage: str
    usable_memory_gib: float
    fits: bool
    feasibility: list[str] = field(default_factory=list)
    placement: dict[str, str] = field(default_factory=dict)
    profile: str = ""
    assumptions: list[str] = field(default_factory=list)
    mfu_convention: str = MFU_CONVENTION
    stack: str = ""  # the software stack the step was costed for ("" none: inputs as given)
    peak_reserved_gib: float | None = None  # the caching allocator's reserved peak (stack)
    reported_peak: str = ""  # which peak the stack's own logs report: allocated or reserved
    # MFU against the training precision's dense peak where it differs from bf16's (fp8); None
    mfu_training_precision_pct: float | None = None
    # allocated GiB at each pipeline rank's own peak (first, middle: the busiest one, last; or
    # only), of which the largest is peak_memory_gib
    memory_by_stage_gib: dict[str, float] = field(default_factory=dict)
    # the plan this report summarises: per rank, chunk and pass (not part of to_dict)
    plan: StepPlan | None = field(default=None, repr=False, compare=False)

    @property
    def memory_headroom_gib(self) -> float:
        return self.usable_memory_gib - self.peak_memory_gib

    def to_dict(self) -> dict:
        """JSON-ready dictionary of every field but the plan."""
        d = asdict(replace(self, plan=None))
        del d["plan"]
        d["memory_headroom_gib"] = self.memory_headroom_gib
        return d
