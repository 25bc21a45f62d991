"""``planner advise``: the levers of a layout (interleaving, SP, recompute, overlap, fp8, ...)
ranked by predicted tokens/s gain, with their memory cost (planner/advise.py).

Takes the layout and training flags of ``planner simulate`` (or ``--layout FILE``) and prints a
rich table or, with ``--json``, machine-readable output with the units in the key names.
"""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from planner.advise import Lever, advise
from planner.cli.common import console as stdout_console
from planner.cli.common import json_out
from planner.cli.inputs import add_layout_flags, inputs_line, simulate_baseline, stack_flag
from planner.cli.misfit import misfit_advice, misfit_json, print_misfit
from planner.report import StepReport


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Register ``planner advise`` on the ``planner`` argparse subparsers."""
    a = sub.add_parser(
        "advise",
        help="rank the levers (interleaving, SP, recompute, overlap, fp8, ...) of a layout",
        description="Re-simulate the layout with each single lever changed and rank the levers "
        "by predicted tokens/s gain (those that fit in memory first), with their memory cost.",
    )
    add_layout_flags(a)
    a.add_argument("--json", action="store_true", help="print the result as JSON")
    a.add_argument(
        "--all",
        action="store_true",
        help="also list levers that are illegal or unavailable here, with the reason",
    )
    return a


def _signed(value: float | None, digits: int = 2, suffix: str = "") -> str:
    return "-" if value is None else f"{value:+,.{digits}f}{suffix}"


def render_advice(console: Console, base: StepReport, levers: list[Lever], title: str = "") -> None:
    """The baseline line and the ranked lever table."""
    if title:
        console.print(escape(title))
    console.print(
        f"baseline: {base.tokens_per_s:,.0f} tokens/s, step {base.step_time_s:,.2f} s, "
        f"MFU {base.mfu_pct:,.1f} %, peak {base.peak_memory_gib:,.1f} / "
        f"{base.usable_memory_gib:,.1f} GiB ({'fits' if base.fits else 'does NOT fit'})"
    )
    table = Table(title="Levers (fitting first, then by gain)", title_justify="left")
    for col, justify in (
        ("#", "right"),
        ("lever", "left"),
        ("tokens/s", "right"),
        ("gain", "right"),
        ("Δ step s", "right"),
        ("peak GiB", "right"),
        ("Δ peak GiB", "right"),
        ("fits", "center"),
        ("change", "left"),
    ):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for i, lv in enumerate(levers, 1):
        if not lv.applicable:
            table.add_row(
                str(i), escape(lv.name), "-", "-", "-", "-", "-", "n/a", escape(lv.reason)
            )
            continue
        table.add_row(
            str(i),
            escape(lv.name),
            f"{lv.tokens_per_s:,.0f}",
            _signed(lv.gain_pct, 1, " %"),
            _signed(lv.step_time_change_s),
            f"{lv.peak_memory_gib:,.1f}",
            _signed(lv.memory_change_gib, 1),
            "yes" if lv.fits else "[red]no[/red]",
            escape(lv.description),
        )
    console.print(table)


def run(args: argparse.Namespace) -> int:
    """The ranked lever table, or JSON."""
    model, cluster, layout, training, profile, report = simulate_baseline(args)
    stack = stack_flag(args)
    levers = advise(
        model,
        cluster,
        layout,
        training,
        profile,
        include_unavailable=args.all,
        baseline=report,
        stack=stack,
    )
    misfit = misfit_advice(args, model, cluster, layout, training, profile, stack, report)
    if args.json:
        json_out(
            {
                "model": model.name,
                "cluster": cluster.id,
                "layout": layout.model_dump(mode="json"),
                "training": training.model_dump(mode="json"),
                "baseline": {
                    "tokens_per_s": report.tokens_per_s,
                    "step_time_s": report.step_time_s,
                    "mfu_pct": report.mfu_pct,
                    "peak_memory_gib": report.peak_memory_gib,
                    "usable_memory_gib": report.usable_memory_gib,
                    "fits": report.fits,
                },
                "levers": [lv.to_dict() for lv in levers],
            }
            | misfit_json(misfit)
        )
    else:
        print_misfit(misfit, report)
        render_advice(
            stdout_console(),
            report,
            levers,
            inputs_line(model, cluster, layout, training, report.stack),
        )
    return 0
