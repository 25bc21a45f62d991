"""Measured (a :class:`~planner.kineto.result.KinetoTrace`) against predicted (a
:class:`~planner.report.StepReport`) seconds per step, one row per :data:`ROWS` entry."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from planner.errors import PlannerError
from planner.kineto.result import TOP_NAMES, KinetoTrace
from planner.report import StepReport


@dataclass(frozen=True, slots=True)
class RowSpec:
    """One comparison row: trace categories measured against planner categories."""

    label: str
    trace: tuple[str, ...]
    planner: tuple[str, ...]
    note: str


# Every trace category and every planner time category appears in exactly one row, so the
# measured column adds up to the measured step and the predicted column to step_time_s.
ROWS = (
    RowSpec(
        "gemm",
        ("gemm",),
        ("compute_gemm",),
        "the trace's GEMMs also include the logits projection (planned under logits + loss) "
        "and recomputed forward GEMMs (planned under recompute)",
    ),
    RowSpec("attention", ("attention",), ("compute_attention",), "core attention"),
    RowSpec(
        "elementwise / norm",
        ("elementwise_norm",),
        ("compute_memory_bound",),
        "norms, activations, residual adds, copies, embedding, gradient accumulation",
    ),
    RowSpec(
        "logits + loss",
        ("loss",),
        ("compute_logits_loss",),
        "the trace's part is the loss only (cross-entropy, log-softmax, NLL); the planned part "
        "includes the logits GEMM",
    ),
    RowSpec(
        "recompute",
        (),
        ("recompute",),
        "not separable in a trace: recomputed kernels are measured under gemm, attention and "
        "elementwise",
    ),
    RowSpec(
        "all-reduce / all-gather / reduce-scatter",
        ("all_reduce", "all_gather", "reduce_scatter"),
        ("tp_comm", "dp_comm"),
        "exposed (not hidden behind compute) TP and DP collectives",
    ),
    RowSpec("all-to-all", ("all_to_all",), ("ep_comm",), "exposed expert-parallel dispatch"),
    RowSpec(
        "send / recv",
        ("send_recv",),
        ("pp_comm", "cp_comm"),
        "exposed pipeline and context-parallel point-to-point",
    ),
    RowSpec("optimizer", ("optimizer",), ("optimizer",), "optimizer step"),
    RowSpec(
        "idle",
        ("idle",),
        ("pipeline_bubble", "host_overhead", "activation_offload"),
        "device idle: pipeline bubble, waiting for the host or for offloaded activations, "
        "but also data loading",
    ),
    RowSpec(
        "other (memcpy, other collectives, unclassified)",
        ("memcpy", "other_collective", "other"),
        (),
        "not modelled by the planner",
    ),
)


def compare(
    trace: KinetoTrace, report: StepReport, steps: int | None = None, stage: int | None = None
) -> list[dict[str, Any]]:
    """Measured against predicted seconds per step, one row per :data:`ROWS` entry.

    Measured: the trace's exposed seconds of the row's categories per step (``steps``, else the
    ProfilerStep count) and per device. Predicted: the sum of the row's planner categories in
    ``report.time_breakdown_s`` (the bottleneck pipeline rank), or with ``stage`` in that
    rank's own costs from the step plan (``report.plan.rank_breakdown_s``): a trace is one
    rank, and the first and last ranks carry the embedding, the logits and the loss. Raises
    PlannerError for a stage outside the pipeline. Each row: ``row``, ``trace_categories``,
    ``planner_categories``, ``measured_s``, ``predicted_s``, ``gap_s`` (measured - predicted;
    positive: the real run spends more time there than planned), ``gap_pct_of_step`` (gap over
    the predicted step time, percent), ``note``, ``top_names`` (busiest names in the trace).
    Sorted by the size of the gap, largest first.
    """
    measured = trace.per_step_s(steps)
    bd = report.time_breakdown_s
    if stage is not None:
        pp = report.plan.pp if report.plan is not None else 1
        if report.plan is None or not 0 <= stage < pp:
            raise PlannerError("--stage", f"stage {stage} is not a pipeline rank", f"0 to {pp - 1}")
        bd = report.plan.rank_breakdown_s(stage)
    rows = []
    for spec in ROWS:
        m = sum(measured.get(c, 0.0) for c in spec.trace)
        pr = sum(bd.get(c, 0.0) for c in spec.planner)
        tops = sorted(
            (item for c in spec.trace for item in trace.top_names.get(c, [])),
            key=lambda kv: -kv[1],
        )[:TOP_NAMES]
        rows.append(
            {
                "row": spec.label,
                "trace_categories": list(spec.trace),
                "planner_categories": list(spec.planner),
                "measured_s": m,
                "predicted_s": pr,
                "gap_s": m - pr,
                "gap_pct_of_step": 100.0 * (m - pr) / report.step_time_s
                if report.step_time_s > 0
                else 0.0,
                "note": spec.note,
                "top_names": [name for name, _ in tops],
            }
        )
    rows.sort(key=lambda r: (-abs(r["gap_s"]), r["row"]))
    return rows
