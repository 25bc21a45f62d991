"""Vega-Lite specs of the two Estimate charts, memory per GPU and where the time goes.

They are redrawn on every widget change, so they are drawn by Streamlit's built-in Vega-Lite
renderer (``st.vega_lite_chart``): in the browser two of them cost ~65 ms less per change than
the same two plotly figures (docs/search.md, tests/app/test_browser.py). Their figures travel as
named datasets (``spec["datasets"]``, sent as Arrow) and the spec itself carries no number that
changes with the inputs (titles, scale domains), so a widget change that keeps the spec makes
the browser swap the data in the existing Vega view instead of compiling a new one. Every axis
names its unit.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from app_pages.charts import CATEGORY_LABELS, short, time_unit
from planner.report import MEMORY_CATEGORIES, TIME_CATEGORIES, StepReport

VegaSpec = dict[str, Any]
USABLE_COLOR, CAPACITY_COLOR, BAR_COLOR = "#C00000", "#808080", "#4C78A8"


def memory_spec(report: StepReport, capacity_gib: float | None = None) -> VegaSpec:
    """Stacked memory per GPU (GiB) on the peak stage against the usable HBM (and capacity)
    lines, as a Vega-Lite spec whose figures are its named datasets ``bars``, ``lines`` and
    ``top`` (an invisible point 10 % above the highest, room for the line labels)."""
    stage = "peak stage"
    bars = [
        {
            "stage": stage,
            "category": CATEGORY_LABELS.get(cat, cat),
            "order": i,
            "gib": report.memory_breakdown_gib.get(cat, 0.0),
        }
        for i, cat in enumerate(MEMORY_CATEGORIES)
    ]
    lines = [
        {"gib": report.usable_memory_gib, "label": f"usable HBM {report.usable_memory_gib:.1f} GiB"}
    ]
    if capacity_gib is not None and capacity_gib > report.usable_memory_gib:
        lines.append({"gib": capacity_gib, "label": f"capacity {capacity_gib:.1f} GiB"})
    top = max(report.peak_memory_gib, capacity_gib or report.usable_memory_gib) * 1.1
    y = {"field": "gib", "type": "quantitative", "title": "memory per GPU (GiB)"}
    return {
        "title": "Memory per GPU on the peak pipeline stage",
        "height": 320,
        "datasets": _tables(bars=bars, lines=lines, top=[{"stage": stage, "gib": top}]),
        "layer": [
            _memory_bars([CATEGORY_LABELS.get(c, c) for c in MEMORY_CATEGORIES], y),
            *_memory_lines(len(lines), y),
            {
                "data": {"name": "top"},
                "mark": {"type": "point", "opacity": 0},
                "encoding": {"x": {"field": "stage", "type": "nominal"}, "y": y},
            },
        ],
        "resolve": {"scale": {"color": "independent"}},
    }


def _tables(**datasets: list[dict[str, Any]]) -> dict[str, pa.Table]:
    """Named datasets as Arrow tables (Streamlit sends them as they are, no pandas step)."""
    return {name: pa.Table.from_pylist(rows) for name, rows in datasets.items()}


def _labelled_bars(
    dataset: str, axes: VegaSpec, tooltip: list[VegaSpec], text: VegaSpec
) -> list[VegaSpec]:
    """Two layers over the named ``dataset``: its bars (position ``axes``, ``tooltip``) and
    their ``label`` field written beside them (``text``: the text mark's placement)."""
    return [
        {
            "data": {"name": dataset},
            "mark": {"type": "bar", "color": BAR_COLOR},
            "encoding": {**axes, "tooltip": tooltip},
        },
        {
            "data": {"name": dataset},
            "mark": {"type": "text", **text},
            "encoding": {**axes, "text": {"field": "label"}},
        },
    ]


def _memory_bars(categories: list[str], y: VegaSpec) -> VegaSpec:
    """The stacked bar of the memory categories (GiB), dataset ``bars``."""
    return {
        "data": {"name": "bars"},
        "mark": "bar",
        "encoding": {
            "x": {"field": "stage", "type": "nominal", "title": None, "axis": {"labelAngle": 0}},
            "y": {**y, "stack": "zero"},
            "color": {
                "field": "category",
                "type": "nominal",
                "title": None,
                "sort": categories,
                "legend": {"orient": "bottom", "columns": 3},
            },
            "order": {"field": "order"},
            "tooltip": [
                {"field": "category", "title": "category"},
                {"field": "gib", "title": "GiB", "format": ".2f"},
            ],
        },
    }


def _memory_lines(count: int, y: VegaSpec) -> list[VegaSpec]:
    """The usable-HBM (and capacity) rules of dataset ``lines`` and their labels."""
    line_color = {
        "field": "label",
        "type": "nominal",
        "legend": None,
        "scale": {"range": [USABLE_COLOR, CAPACITY_COLOR]},
    }
    return [
        {
            "data": {"name": "lines"},
            "mark": {"type": "rule", "strokeDash": [6, 4], "strokeWidth": 2},
            "encoding": {"y": y, "color": line_color, "tooltip": [{"field": "label"}]},
        },
        *(
            {  # usable HBM labelled on the left, capacity on the right (they are close)
                "data": {"name": "lines"},
                "transform": [
                    {"window": [{"op": "row_number", "as": "row"}]},
                    {"filter": f"datum.row == {i + 1}"},
                ],
                "mark": {
                    "type": "text",
                    "align": "left" if i == 0 else "right",
                    "baseline": "bottom",
                    "x": 4 if i == 0 else {"expr": "width - 4"},
                    "dy": -2,
                    "color": USABLE_COLOR if i == 0 else CAPACITY_COLOR,
                },
                "encoding": {"y": y, "text": {"field": "label"}},
            }
            for i in range(count)
        ),
    ]


def time_spec(report: StepReport) -> VegaSpec:
    """Time per step by category (horizontal bars, labelled with the share of the step), as
    a Vega-Lite spec in ms below 2 s, else s."""
    scale, unit = time_unit(report.step_time_s)
    cats = [c for c in TIME_CATEGORIES if report.time_breakdown_s.get(c, 0.0) > 0]
    cats += [c for c in report.time_breakdown_s if c not in TIME_CATEGORIES]
    step = report.step_time_s or 1.0
    rows = []
    for cat in cats:
        value = report.time_breakdown_s.get(cat, 0.0)
        rows.append(
            {
                "category": CATEGORY_LABELS.get(cat, cat),
                "time": value * scale,
                "label": f"{value * scale:.3g} {unit} ({value / step * 100:.1f} %)",
            }
        )
    y = {
        "field": "category",
        "type": "nominal",
        "title": None,
        "sort": None,
        "axis": {"labelLimit": 240},
    }
    longest = max((row["time"] for row in rows), default=0.0) or 1.0
    x = {"field": "time", "type": "quantitative", "title": f"time per step ({unit})"}
    return {
        "title": "Where the time goes",
        "height": 110 + 34 * len(rows),  # Streamlit fits title and axes inside it
        # the invisible point at 1.3x the longest bar leaves room for the labels right of it
        "datasets": _tables(
            rows=rows,
            room=[{"category": rows[0]["category"] if rows else "", "time": longest * 1.3}],
        ),
        "layer": [
            *_labelled_bars(
                "rows",
                {"x": x, "y": y},
                [{"field": "category", "title": "category"}, {"field": "label", "title": "time"}],
                {"align": "left", "dx": 3},
            ),
            {
                "data": {"name": "room"},
                "mark": {"type": "point", "opacity": 0},
                "encoding": {"y": y, "x": x},
            },
        ],
    }


def compare_bars_spec(
    names: list[str], values: list[float | None], title: str, unit: str
) -> VegaSpec:
    """One bar per cluster (missing values left out), labelled with its value, as a Vega-Lite
    spec with dataset ``bars``; the y axis names ``unit``. The Compare page draws four of them:
    Vega-Lite is the renderer the Estimate page has already loaded, where plotly's bundle would
    be fetched and parsed on the first visit (docs/search.md)."""
    rows = [
        {"cluster": n, "value": v, "label": short(v)}
        for n, v in zip(names, values, strict=True)
        if v is not None
    ]
    x = {
        "field": "cluster",
        "type": "nominal",
        "title": "cluster",
        "sort": None,
        "axis": {"labelAngle": -25, "labelOverlap": False},
    }
    y = {"field": "value", "type": "quantitative", "title": unit, "axis": {"format": "~s"}}
    return {
        "title": title,
        "height": 300,
        "datasets": _tables(bars=rows),
        "layer": _labelled_bars(
            "bars",
            {"x": x, "y": y},
            [
                {"field": "cluster", "title": "cluster"},
                {"field": "value", "title": unit, "format": ",.4g"},
            ],
            {"baseline": "bottom", "dy": -2},
        ),
    }


__all__ = ["compare_bars_spec", "memory_spec", "time_spec"]
