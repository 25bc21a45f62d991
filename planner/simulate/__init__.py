"""Predict one optimizer step: the StepPlan and its StepReport (pure: no I/O).

``simulate_step`` runs the named stages in order: layer costs (``layers``), stage costs and
data-parallel traffic (``stages``), the pipeline under the layout's schedule, the memory peak
and utilisation (``step``), and the plan per rank, chunk and pass (``planning``).
"""

from __future__ import annotations

from dataclasses import replace

from planner.costs.host_offload import HOST_LINK_EFFICIENCY
from planner.errors import PlannerError
from planner.profile import CalibrationProfile
from planner.report import StepReport
from planner.simulate.data_parallel import DP_BUCKET_PARAMS
from planner.simulate.layers import TP_OVERLAP_FRACTION, moe_imbalance
from planner.simulate.notes import check_finite, default_assumptions
from planner.simulate.step import build_step
from planner.specs.hardware import Cluster
from planner.specs.layout import Layout, Training
from planner.specs.model import ModelSpec
from planner.specs.stack import StackSpec
from planner.stacks import apply_stack, check_model_stack, check_stack, reserved_peak_gib


def simulate_step(
    model: ModelSpec,
    cluster: Cluster,
    layout: Layout,
    training: Training,
    profile: CalibrationProfile,
    check: bool = True,
    stack: StackSpec | None = None,
    enforce_stack: bool = True,
) -> StepReport:
    """Predict one optimizer step of ``model`` on ``cluster`` under ``layout``.

    ``stack``: the software stack that runs it (:mod:`planner.stacks`): fields of ``layout``
    and ``training`` the caller did not set take the stack's values, a layout the stack cannot
    run is a PlannerError naming it (``enforce_stack`` False: costed anyway, for a published
    run whose stack is only inferred), and the report adds the reserved peak. None: the inputs
    are costed as given.

    Raises PlannerError for an illegal layout; a legal one that does not fit in memory returns
    a report with ``fits=False`` and the reason in ``feasibility``. Every figure of the report
    is finite: a non-finite one (or an arithmetic overflow) is a PlannerError naming the
    figure and the inputs it comes from, never a report. ``report.plan`` is the StepPlan.
    """
    if stack is not None:
        layout, training = apply_stack(stack, model, layout, training)
        if enforce_stack:
            check_model_stack(stack, model)
            check_stack(stack, layout, training)
    try:
        report = build_step(model, cluster, layout, training, profile, check)
    except (OverflowError, ZeroDivisionError) as exc:
        raise PlannerError(
            "inputs",
            f"the step cannot be costed ({type(exc).__name__}: {exc})",
            "specs and profile within their documented ranges (docs/limits.md)",
        ) from None
    if stack is not None:
        report = replace(
            report,
            stack=stack.name,
            peak_reserved_gib=reserved_peak_gib(stack, report.peak_memory_gib),
            reported_peak=stack.memory.reported_peak,
        )
    return check_finite(report)


__all__ = [
    "DP_BUCKET_PARAMS",
    "HOST_LINK_EFFICIENCY",
    "TP_OVERLAP_FRACTION",
    "check_finite",
    "default_assumptions",
    "moe_imbalance",
    "simulate_step",
]
