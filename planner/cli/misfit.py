"""Shared by ``simulate``, ``advise`` and ``goodput``: a layout that does not fit says so first."""

from __future__ import annotations

import argparse
from typing import Any

from planner.cli.common import console
from planner.cli.inputs import NO_STACK
from planner.fixes import Fix, memory_fixes, search_command
from planner.profile import CalibrationProfile
from planner.render.misfit import render_misfit
from planner.report import StepReport
from planner.specs.hardware import Cluster
from planner.specs.layout import Layout, Training
from planner.specs.model import ModelSpec
from planner.specs.stack import StackSpec


def misfit_advice(
    args: argparse.Namespace,
    model: ModelSpec,
    cluster: Cluster,
    layout: Layout,
    training: Training,
    profile: CalibrationProfile | str | None,
    stack: StackSpec | None,
    report: StepReport,
) -> tuple[list[Fix], str] | None:
    """(the cheapest changes that fit, the ``planner search`` command) when ``report`` does
    not fit, else None."""
    if report.fits:
        return None
    fixes = memory_fixes(model, cluster, layout, training, profile, stack)
    stack_arg = getattr(args, "stack", None)
    cmd = search_command(
        args.model or model.name,
        args.cluster or cluster.id,
        layout.world_size,
        training,
        stack_arg if stack_arg and stack_arg != NO_STACK else None,
    )
    return fixes, cmd


def print_misfit(advice: tuple[list[Fix], str] | None, report: StepReport) -> None:
    """Print the misfit headline and fixes (nothing when the layout fits)."""
    if advice is not None:
        render_misfit(console(), report, *advice)


def misfit_json(advice: tuple[list[Fix], str] | None) -> dict[str, Any]:
    """The JSON keys for a misfit: ``memory_fixes`` and ``search_command`` (empty if it fits)."""
    if advice is None:
        return {}
    fixes, cmd = advice
    return {"memory_fixes": [f.to_dict() for f in fixes], "search_command": cmd}
