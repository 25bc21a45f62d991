"""Shared Rich building blocks of the renderers: number formatting and the two table shapes.

Units follow the caller: :func:`_fmt` only formats a number, it does not convert it.
"""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table


def _fmt(value: float | None, digits: int = 2, suffix: str = "") -> str:
    """A number with ``digits`` decimals and thousands separators; '-' for None."""
    if value is None:
        return "-"
    return f"{value:,.{digits}f}{suffix}"


def _truncate(text: str, width: int = 60) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def _kv_table(title: str, rows: list[tuple[str, str]]) -> Table:
    table = Table(title=title, show_header=False, title_justify="left")
    table.add_column("field", style="bold")
    table.add_column("value")
    for key, value in rows:
        table.add_row(escape(key), escape(value))
    return table


def _share_table(
    title: str,
    unit: str,
    share: str,
    values: dict[str, float],
    order: tuple[str, ...],
    whole: float,
    digits: int,
    skip_zero: bool,
) -> Table:
    """A category / value / percent-of-``whole`` table: known categories in ``order`` first."""
    table = Table(title=title, title_justify="left")
    table.add_column("category")
    table.add_column(unit, justify="right")
    table.add_column(share, justify="right")
    whole = whole or 1.0
    cats = [c for c in order if c in values] + [c for c in values if c not in order]
    for cat in cats:
        if skip_zero and values[cat] == 0:
            continue
        table.add_row(escape(cat), _fmt(values[cat], digits), _fmt(values[cat] / whole * 100, 1))
    table.add_section()
    return table
