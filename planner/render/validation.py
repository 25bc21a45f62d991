"""What ``planner validate`` prints: one row per validation case, then the error summary.

Units shown: throughput in tokens per second per GPU, errors and MFU in percent, memory in GiB.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from planner.render.tables import _fmt, _kv_table, _truncate
from planner.uncertainty import error_band

_STATUS_STYLE = {
    "ok": "green",
    "infeasible": "yellow",
    "unsupported": "yellow",
    "error": "red",
}


MFU_NOTE = (
    "MFU: model FLOPs (6 N + attention without causal discount, the PaLM convention) over the "
    "dense bf16 peak; fp8 runs also show it over the fp8 peak in brackets. HFU (not shown) "
    "counts the FLOPs executed, causal attention halved, so it can sit below MFU."
)


def _mfu_cell(case: dict[str, Any]) -> str:
    text = _fmt(case.get("predicted_mfu_pct"), 1)
    fp8 = case.get("predicted_mfu_training_precision_pct")
    return text if fp8 is None else f"{text} ({_fmt(fp8, 1)} fp8)"


def render_validation(console: Console, result: dict[str, Any]) -> None:
    """Validation cases (tokens/s/GPU, signed error %, MFU %, memory GiB) and the summary."""
    table = Table(title="Validation cases", title_justify="left", caption=MFU_NOTE)
    table.add_column("id", overflow="fold")
    table.add_column("status", min_width=6)
    for name in (
        "predicted\ntok/s/GPU",
        "measured\ntok/s/GPU",
        "error\n%",
        "predicted\nMFU %",
        "memory GiB\npred / meas",
    ):
        table.add_column(name, justify="right")
    table.add_column("reason", min_width=20, overflow="fold")
    for case in result.get("cases", []):
        status = str(case.get("status", "?"))
        style = _STATUS_STYLE.get(status, "")
        scored = "" if case.get("scored", True) else " (unscored)"
        memory = (
            f"{_fmt(case.get('predicted_peak_memory_gib'), 1)} / "
            f"{_fmt(case.get('measured_peak_memory_gib'), 1)}"
        )
        table.add_row(
            escape(str(case.get("id", "?"))),
            f"[{style}]{escape(status)}[/]{scored}" if style else escape(status) + scored,
            _fmt(case.get("predicted_tokens_per_s_per_gpu"), 1),
            _fmt(case.get("measured_tokens_per_s_per_gpu"), 1),
            _fmt(case.get("error_pct"), 1),
            _mfu_cell(case),
            memory,
            escape(_truncate(str(case.get("reason") or ""))),
        )
    console.print(table)
    s = result.get("summary", {})
    rows = [
        (
            "cases",
            f"{s.get('n', 0)} ({s.get('n_ok', 0)} ok, {s.get('n_scored', 0)} scored)",
        ),
        ("MAPE (tokens/s/GPU)", _fmt(s.get("mape_pct"), 2, " %")),
        ("median APE", _fmt(s.get("median_ape_pct"), 2, " %")),
        ("p90 APE", _fmt(s.get("p90_ape_pct"), 2, " %")),
        ("max APE", _fmt(s.get("max_ape_pct"), 2, " %")),
        ("memory MAPE", _fmt(s.get("memory_mape_pct"), 2, " %")),
    ]
    ranged = range_coverage(result.get("cases", []))
    if ranged[0]:
        rows.append(
            (
                "unstated knobs",
                f"{ranged[0]} cases with a range (a knob not stated, or a framework name "
                f"several code bases ran under); measured inside it for {ranged[1]}",
            )
        )
    if s.get("n_banded"):
        inside = round(s["band_coverage_pct"] * s["n_banded"] / 100.0)
        rows.append(
            (
                "error band",
                f"measured inside the planner's error band for {inside} of {s['n_banded']} "
                f"({s['band_coverage_pct']:.1f} %; band by model kind: dense "
                f"{error_band(False).text()}, MoE {error_band(True).text()})",
            )
        )
    console.print(_kv_table("Summary (scored cases with status ok)", rows))


def range_coverage(cases: list[dict[str, Any]]) -> tuple[int, int]:
    """(cases with a predicted range over unstated knobs or code bases and a measurement,
    those whose measured value is in it: the ``in_range`` each such row carries)."""
    ranged = [c["in_range"] for c in cases if "in_range" in c]
    return len(ranged), sum(ranged)
