"""What ``planner list`` prints: the shipped spec ids of one kind."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table


def render_list(console: Console, kind: str, rows: list[tuple[str, str]]) -> None:
    """Shipped spec ids of one kind with a short description."""
    table = Table(title=f"Shipped {kind}", title_justify="left")
    table.add_column("id")
    table.add_column("description")
    for spec_id, description in rows:
        table.add_row(escape(spec_id), escape(description))
    console.print(table)
