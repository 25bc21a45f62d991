"""The first thing a report says when the layout does not fit: by how much, and what fits."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from planner.fixes import NO_FIX, Fix
from planner.report import StepReport


def render_misfit(console: Console, report: StepReport, fixes: list[Fix], search_cmd: str) -> None:
    """A red headline (peak GiB over usable GiB per GPU), the cheapest changes that fit with
    their tokens/s/GPU and peak GiB, and the ``planner search`` command for the same job."""
    usable = report.usable_memory_gib
    console.print(
        f"[bold red]Does not fit[/]: {report.peak_memory_gib:,.2f} GiB per GPU at peak, "
        f"{usable:,.2f} GiB usable ({report.peak_memory_gib - usable:+,.2f} GiB)."
    )
    if fixes:
        table = Table(title="Cheapest changes that fit (fewest flags, then fastest)")
        table.add_column("add these flags")
        table.add_column("tokens/s/GPU", justify="right")
        table.add_column("peak GiB per GPU", justify="right")
        for f in fixes:
            table.add_row(
                escape(" ".join(f.flags)),
                f"{f.tokens_per_s_per_gpu:,.1f}",
                f"{f.peak_memory_gib:,.2f} of {f.usable_gib:,.2f}",
            )
        console.print(table)
    else:
        console.print(f"{NO_FIX}.")
    console.print(f"Every layout that fits, ranked: [bold]{escape(search_cmd)}[/]\n")
