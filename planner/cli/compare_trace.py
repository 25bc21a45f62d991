"""``planner compare-trace REAL.json``: a real profiler trace against the planner's prediction.

The trace (planner/kineto/) is classified into GEMM, attention, elementwise, loss,
collective, optimizer and idle time per step; the same step is simulated from ``--model``,
``--cluster`` and ``--layout`` (a layout YAML as written by ``planner search``); the table puts
measured and predicted seconds per step side by side and lists where the real run loses time
against the plan, largest gaps first. torch is not needed.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

import planner
from planner.cli.common import CLUSTER_HELP, MODEL_HELP, add_profile_device_flag
from planner.cli.common import console as stdout_console
from planner.cli.inputs import LAYOUT_NAMES_IT, add_stack_flag, load_model_cluster, with_stack
from planner.errors import PlannerError
from planner.kineto import KinetoTrace, compare, load_kineto
from planner.report import StepReport
from planner.safe_io import dumps_strict


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Register ``planner compare-trace`` on the ``planner`` argparse subparsers."""
    p = sub.add_parser(
        "compare-trace",
        help="compare a real PyTorch profiler trace with the predicted step",
        description="Classify the kernels (GPU) or top-level operators (CPU) of a PyTorch "
        "profiler JSON (export_chrome_trace) into planner categories and compare their time "
        "per step with the simulated step of the same layout.",
    )
    p.add_argument("trace", metavar="REAL.json", help="PyTorch profiler trace (.json/.json.gz)")
    p.add_argument("--model", default=None, help=MODEL_HELP + LAYOUT_NAMES_IT)
    p.add_argument("--cluster", default=None, help=CLUSTER_HELP + LAYOUT_NAMES_IT)
    p.add_argument(
        "--layout",
        required=True,
        metavar="LAYOUT.yaml",
        help="layout YAML with a training section (as written by planner search --export-dir)",
    )
    p.add_argument(
        "--steps",
        type=int,
        default=None,
        help="training steps in the trace (default: the number of ProfilerStep# spans)",
    )
    p.add_argument("--profile", default=None, help="calibration profile id or JSON path")
    add_profile_device_flag(p)
    add_stack_flag(p)
    p.add_argument("--json", action="store_true", help="print the comparison as JSON")
    return p


def _simulate(args: argparse.Namespace) -> StepReport:
    from planner.search.export import load_layout_file

    model, cluster = load_model_cluster(args)
    layout, training, file_gpus = load_layout_file(args.layout)
    if training is None:
        raise PlannerError(
            "--layout",
            f"{args.layout} has no training section",
            "a layout YAML with layout and training (planner search --export-dir writes one)",
        )
    gpus = file_gpus or layout.world_size
    stack, layout, training = with_stack(args, model, layout, training)
    planner.check_layout(model, cluster, layout, training, gpus=gpus)
    profile = planner.load_profile(args.profile) if args.profile else None
    return planner.simulate(
        model, cluster, layout, training, profile, args.profile_for_any_device, stack=stack
    )


def _s(value: float) -> str:
    """Seconds with 4 significant digits."""
    return f"{value:.4g}"


def render_comparison(
    console: Console,
    trace: KinetoTrace,
    report: StepReport,
    rows: list[dict[str, Any]],
    steps: int,
) -> None:
    """The measured-vs-predicted table, then the gaps where the real run is slower."""
    measured_step = trace.step_time_s(steps)
    console.print(
        f"[bold]{escape(trace.path)}[/]: {trace.kind.upper()} trace, {steps} step(s), "
        f"{len(trace.devices)} device timeline(s), {trace.intervals} busy intervals classified"
    )
    table = Table(title="Measured vs planned time per step (seconds)", title_justify="left")
    table.add_column("category")
    table.add_column("measured s/step", justify="right")
    table.add_column("predicted s/step", justify="right")
    table.add_column("gap s", justify="right")
    table.add_column("gap % of step", justify="right")
    for row in rows:
        table.add_row(
            escape(row["row"]),
            _s(row["measured_s"]),
            _s(row["predicted_s"]),
            f"{row['gap_s']:+.4g}",
            f"{row['gap_pct_of_step']:+.1f}",
        )
    step_gap = measured_step - report.step_time_s
    table.add_section()
    table.add_row(
        "[bold]step[/]",
        _s(measured_step),
        _s(report.step_time_s),
        f"{step_gap:+.4g}",
        f"{100.0 * step_gap / report.step_time_s:+.1f}" if report.step_time_s > 0 else "-",
    )
    console.print(table)
    console.print("[bold]Where the real run loses time against the plan (largest gaps first)[/]")
    losing = [r for r in rows if r["gap_s"] > 0.0]
    if not losing:
        console.print("  nowhere: every category is at or under the plan")
    for i, row in enumerate(losing, 1):
        tops = ", ".join(row["top_names"][:3])
        console.print(
            f"  {i}. {escape(row['row'])}: {row['gap_s']:+.4g} s/step "
            f"({row['gap_pct_of_step']:+.1f}% of the planned step); {escape(row['note'])}"
            + (f"; busiest: {escape(tops)}" if tops else "")
        )


def run(args: argparse.Namespace) -> int:
    """Rich table (or JSON) of measured vs predicted per step."""
    trace = load_kineto(args.trace)
    steps = trace.resolve_steps(args.steps)
    report = _simulate(args)
    rows = compare(trace, report, steps)
    if args.json:
        out = {
            "trace": trace.path,
            "kind": trace.kind,
            "steps": steps,
            "devices": list(trace.devices),
            "measured_step_s": trace.step_time_s(steps),
            "predicted_step_s": report.step_time_s,
            "rows": rows,
        }
        sys.stdout.write(dumps_strict(out) + "\n")
    else:
        render_comparison(stdout_console(), trace, report, rows, steps)
    return 0
