"""Plotly figure builders of the web app (every axis names its unit).

The pipeline timeline is schematic: :func:`pipeline_blocks` lays out a 1F1B (or interleaved
1F1B) schedule of uniform stages whose per-micro-batch forward, backward and communication
times are derived from a StepReport's totals, not from a second simulator.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import plotly.graph_objects as go
from plotly import colors as px_colors

from planner.report import MEMORY_CATEGORIES, TIME_CATEGORIES, StepReport
from planner.timeline import run_schedule, stage_order

COLORS = {
    "forward": "#4C78A8",
    "backward": "#F58518",
    "communication": "#B279A2",
    "bubble": "#D0D0D0",
    "dp_comm": "#54A24B",
    "optimizer": "#E45756",
}
CATEGORY_LABELS = {
    "compute_gemm": "GEMMs",
    "compute_attention": "attention",
    "compute_memory_bound": "memory-bound kernels",
    "compute_logits_loss": "logits + loss",
    "recompute": "recompute",
    "tp_comm": "TP comm (exposed)",
    "cp_comm": "CP comm (exposed)",
    "ep_comm": "EP comm (exposed)",
    "pp_comm": "PP comm",
    "dp_comm": "DP comm (exposed)",
    "host_overhead": "waiting for host",
    "activation_offload": "activation offload (exposed)",
    "pipeline_bubble": "pipeline bubble",
    "optimizer": "optimizer step",
    "weights": "weights",
    "gradients": "gradients",
    "optimizer_states": "optimizer states",
    "activations": "activations",
    "logits": "logits",
    "overhead": "overhead",
}
COMM_CATEGORIES = ("tp_comm", "cp_comm", "ep_comm", "pp_comm")
MAX_PIPELINE_OPS = 3000  # forward + backward blocks drawn before the steady state is shortened
MAX_DRAWN_STAGES = 32  # deeper pipelines are not drawn (2 pp^2 ops at least; unreadable anyway)


def time_unit(seconds: float) -> tuple[float, str]:
    """(scale, unit) to show durations up to ``seconds``: ms below 2 s, else s."""
    return (1e3, "ms") if seconds < 2.0 else (1.0, "s")


def _layout(
    fig: go.Figure, title: str, height: int = 380, legend: dict[str, Any] | None = None
) -> go.Figure:
    """Title, height, margins; the legend below the x-axis title unless ``legend`` says
    otherwise (its offset in plot-height units keeps ~80 px clear of the axis)."""
    below = -min(0.9, 80.0 / max(height - 60, 80))
    fig.update_layout(
        title=title,
        height=height,
        margin={"l": 10, "r": 10, "t": 50, "b": 10},
        legend=legend or {"orientation": "h", "yanchor": "top", "y": below, "x": 0},
    )
    return fig


def short(value: float) -> str:
    """A bar label: '2.23 M' from a million up, '5,262' or '77.9' below."""
    for scale, suffix in ((1e12, " T"), (1e9, " G"), (1e6, " M")):
        if abs(value) >= scale:
            return f"{value / scale:.3g}{suffix}"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


# ---- Estimate -----------------------------------------------------------------------------------
def memory_figure(report: StepReport, capacity_gib: float | None = None) -> go.Figure:
    """Stacked memory per GPU on the peak stage against the usable HBM (and capacity) lines."""
    fig = go.Figure()
    x = [f"peak stage ({report.peak_memory_stage})"]
    for cat in MEMORY_CATEGORIES:
        value = report.memory_breakdown_gib.get(cat, 0.0)
        fig.add_bar(
            name=CATEGORY_LABELS.get(cat, cat),
            x=x,
            y=[value],
            hovertemplate=f"{CATEGORY_LABELS.get(cat, cat)}: %{{y:.2f}} GiB<extra></extra>",
        )
    fig.add_hline(
        y=report.usable_memory_gib,
        line_dash="dash",
        line_color="#C00000",
        annotation_text=f"usable HBM {report.usable_memory_gib:.1f} GiB",
        annotation_position="top left",
    )
    if capacity_gib is not None and capacity_gib > report.usable_memory_gib:
        fig.add_hline(
            y=capacity_gib,
            line_dash="dot",
            line_color="#808080",
            annotation_text=f"capacity {capacity_gib:.1f} GiB",
            annotation_position="top right",
        )
    top = max(report.peak_memory_gib, capacity_gib or report.usable_memory_gib) * 1.1
    fig.update_layout(barmode="stack")
    fig.update_yaxes(title_text="memory per GPU (GiB)", range=[0, top])
    verdict = "fits" if report.fits else "does not fit"
    return _layout(fig, f"Memory per GPU: {report.peak_memory_gib:.1f} GiB, {verdict}")


def time_figure(report: StepReport) -> go.Figure:
    """Seconds per step by category (horizontal bars, labelled with the share of the step)."""
    scale, unit = time_unit(report.step_time_s)
    cats = [c for c in TIME_CATEGORIES if report.time_breakdown_s.get(c, 0.0) > 0]
    cats += [c for c in report.time_breakdown_s if c not in TIME_CATEGORIES]
    values = [report.time_breakdown_s.get(c, 0.0) for c in cats]
    step = report.step_time_s or 1.0
    fig = go.Figure(
        go.Bar(
            y=[CATEGORY_LABELS.get(c, c) for c in cats],
            x=[v * scale for v in values],
            orientation="h",
            text=[f"{v * scale:.3g} {unit} ({v / step * 100:.1f} %)" for v in values],
            textposition="auto",
            marker_color="#4C78A8",
            hovertemplate=f"%{{y}}: %{{x:.4g}} {unit}<extra></extra>",
        )
    )
    fig.update_xaxes(title_text=f"time per step ({unit})")
    fig.update_yaxes(autorange="reversed")
    title = f"Where the time goes: step {report.step_time_s * scale:.4g} {unit}"
    return _layout(fig, title, height=max(300, 60 + 32 * len(cats)))


# ---- pipeline timeline --------------------------------------------------------------------------
@dataclass(frozen=True)
class Block:
    """One bar of the timeline: a stage is busy (or idle) from ``start_s`` for ``dur_s``."""

    stage: int
    kind: str  # forward | backward | communication | bubble | dp_comm | optimizer
    start_s: float
    dur_s: float
    label: str = ""


@dataclass(frozen=True)
class Timeline:
    """A schematic pipeline schedule and how it was derived."""

    blocks: tuple[Block, ...]
    pp: int
    microbatches: int  # in the step
    drawn_microbatches: int  # drawn (fewer when the steady state is shortened)
    vpp: int
    forward_s: float  # per drawn micro-batch and stage, compute only
    backward_s: float
    comm_s: float
    end_s: float
    bubble_drawn_s: float  # idle time of stage 0 before DP communication
    notes: tuple[str, ...] = ()


def _schedule(
    pp: int, m: int, v: int, f: float, b: float, cf: float, cb: float
) -> dict[tuple[str, int, int, int], tuple[float, float]] | None:
    """(kind, stage, micro-batch, chunk) -> (start, end incl. the send); None on deadlock.

    The 1F1B / interleaved 1F1B order and dependencies of :mod:`planner.timeline`, with one
    op lasting its compute plus its exposed communication.
    """
    dur = {"F": (f + cf) / v, "B": (b + cb) / v}
    orders = [stage_order(s, pp, v, m) for s in range(pp)]
    starts = run_schedule(orders, pp, v, dur["F"], dur["B"])
    if starts is None:
        return None
    return {
        (op.kind, s, op.mb, op.chunk): (t, t + dur[op.kind])
        for s in range(pp)
        for op, t in zip(orders[s], starts[s], strict=True)
    }


def pipeline_timeline(report: StepReport, pp: int, vpp: int = 1) -> Timeline:
    """A schematic timeline of one step derived from ``report``'s totals.

    Per micro-batch and stage: t = (step - bubble - DP comm - optimizer) / micro-batches;
    its exposed TP/CP/EP/PP communication drawn after each pass, the rest split forward :
    backward = 1 : 2, recompute added to the backward. Stages are uniform; the DP
    communication and the optimizer step close the step on every stage. At most
    MAX_DRAWN_STAGES stages and about MAX_PIPELINE_OPS blocks are drawn, whatever the layout.
    """
    tb = report.time_breakdown_s
    m = max(1, report.microbatches)
    notes = []
    pipe_s = report.step_time_s - sum(
        tb.get(k, 0.0) for k in ("pipeline_bubble", "dp_comm", "optimizer")
    )
    per_mb = max(pipe_s, 0.0) / m
    comm = sum(tb.get(k, 0.0) for k in COMM_CATEGORIES) / m
    recompute = tb.get("recompute", 0.0) / m
    base = max(per_mb - comm - recompute, 0.0)
    f, b = base / 3.0, 2.0 * base / 3.0 + recompute
    cf, cb = comm / 3.0, 2.0 * comm / 3.0
    if not 1 <= pp <= MAX_DRAWN_STAGES:
        raise ValueError(f"pp = {pp}: at most {MAX_DRAWN_STAGES} stages are drawn")
    v = max(1, vpp) if pp > 1 else 1
    if 2 * pp * v * pp > 4 * MAX_PIPELINE_OPS:  # even the shortest steady state is too long
        notes.append(f"{v} interleaved chunks per stage not drawn: drawn as 1F1B")
        v = 1
    md = m
    if 2 * m * v * pp > MAX_PIPELINE_OPS:
        md = min(m, max(pp, MAX_PIPELINE_OPS // (2 * v * pp) // pp * pp))
        notes.append(
            f"steady state shortened: {md} of the step's {m} micro-batches drawn (warm-up, "
            "cool-down and bubble to scale)"
        )
    sched = _schedule(pp, md, v, f, b, cf, cb)
    if sched is None and v > 1:
        notes.append("interleaved order not drawable for this micro-batch count: drawn as 1F1B")
        v = 1
        sched = _schedule(pp, md, 1, f, b, cf, cb)
    assert sched is not None  # plain 1F1B never deadlocks
    blocks: list[Block] = []
    busy: list[list[tuple[float, float]]] = [[] for _ in range(pp)]
    for (kind, s, mb, c), (start, end) in sched.items():
        comp, com = (f, cf) if kind == "F" else (b, cb)
        comp, com = comp / v, com / v
        label = f"{kind}{mb + 1}" + (f" chunk {c + 1}" if v > 1 else "")
        blocks.append(Block(s, "forward" if kind == "F" else "backward", start, comp, label))
        if com > 0:
            blocks.append(Block(s, "communication", start + comp, com, label + " comm"))
        busy[s].append((start, end))
    pipe_end = max((e for _, e in sched.values()), default=0.0)
    bubble0 = 0.0
    for s in range(pp):
        t = 0.0
        for start, end in sorted(busy[s]):
            if start - t > 1e-12:
                blocks.append(Block(s, "bubble", t, start - t, "idle"))
                bubble0 += (start - t) if s == 0 else 0.0
            t = max(t, end)
        if pipe_end - t > 1e-12:
            blocks.append(Block(s, "bubble", t, pipe_end - t, "idle"))
            bubble0 += (pipe_end - t) if s == 0 else 0.0
    dp, opt = tb.get("dp_comm", 0.0), tb.get("optimizer", 0.0)
    for s in range(pp):
        if dp > 0:
            blocks.append(Block(s, "dp_comm", pipe_end, dp, "DP comm (exposed)"))
        if opt > 0:
            blocks.append(Block(s, "optimizer", pipe_end + dp, opt, "optimizer step"))
    return Timeline(
        blocks=tuple(blocks),
        pp=pp,
        microbatches=m,
        drawn_microbatches=md,
        vpp=v,
        forward_s=f,
        backward_s=b,
        comm_s=cf + cb,
        end_s=pipe_end + dp + opt,
        bubble_drawn_s=bubble0,
        notes=tuple(notes),
    )


def pipeline_figure(timeline: Timeline) -> go.Figure:
    """Per-stage Gantt chart of a :class:`Timeline` (stage 1 on top)."""
    scale, unit = time_unit(timeline.end_s)
    names = {
        "forward": "forward",
        "backward": "backward (+ recompute)",
        "communication": "communication (exposed TP/CP/EP, PP sends)",
        "bubble": "bubble (idle)",
        "dp_comm": "DP communication (exposed)",
        "optimizer": "optimizer step",
    }
    fig = go.Figure()
    show_text = len(timeline.blocks) <= 240
    for kind, name in names.items():
        bl = [x for x in timeline.blocks if x.kind == kind]
        if not bl:
            continue
        fig.add_bar(
            name=name,
            orientation="h",
            y=[f"stage {x.stage + 1}" for x in bl],
            x=[x.dur_s * scale for x in bl],
            base=[x.start_s * scale for x in bl],
            marker_color=COLORS[kind],
            marker_line_width=0.5,
            marker_line_color="white",
            text=[x.label.split(" ")[0] for x in bl] if show_text and kind != "bubble" else None,
            textposition="inside",
            insidetextanchor="middle",
            customdata=[[x.label, x.start_s * scale, (x.start_s + x.dur_s) * scale] for x in bl],
            hovertemplate="%{y} %{customdata[0]}: %{customdata[1]:.4g} to "
            f"%{{customdata[2]:.4g}} {unit}<extra>{name}</extra>",
        )
    stages = [f"stage {s + 1}" for s in range(timeline.pp)]
    fig.update_layout(barmode="overlay", bargap=0.25)
    fig.update_yaxes(categoryorder="array", categoryarray=stages[::-1], title_text="pipeline stage")
    fig.update_xaxes(title_text=f"time in the step ({unit})", range=[0, timeline.end_s * scale])
    return _layout(
        fig,
        "Pipeline timeline of one step (schematic)",
        height=max(260, 120 + 36 * timeline.pp),
    )


# ---- Search -------------------------------------------------------------------------------------
def pareto_figure(
    points: Sequence[dict[str, Any]], front: Sequence[dict[str, Any]], x: str, x_title: str
) -> go.Figure:
    """Tokens/s against ``x`` for every plotted candidate, the Pareto front highlighted.
    Points are dicts with ``x``, ``tokens_per_s`` and ``label``."""
    fig = go.Figure()
    fig.add_scatter(
        name="feasible layouts",
        mode="markers",
        x=[p[x] for p in points],
        y=[p["tokens_per_s"] for p in points],
        text=[p["label"] for p in points],
        marker={"color": "#9DB4CF", "size": 6},
        hovertemplate=f"%{{text}}<br>{x_title}: %{{x:.3g}}<br>%{{y:,.0f}} tokens/s<extra></extra>",
    )
    fs = sorted(front, key=lambda p: p[x])
    fig.add_scatter(
        name="Pareto front",
        mode="lines+markers",
        x=[p[x] for p in fs],
        y=[p["tokens_per_s"] for p in fs],
        text=[p["label"] for p in fs],
        marker={"color": "#E45756", "size": 9},
        line={"shape": "hv"},
        hovertemplate=f"%{{text}}<br>{x_title}: %{{x:.3g}}<br>%{{y:,.0f}} tokens/s<extra></extra>",
    )
    fig.update_xaxes(title_text=x_title)
    fig.update_yaxes(title_text="throughput (tokens/s)")
    return _layout(fig, f"Pareto front: tokens/s vs {x_title}")


# ---- Compare ------------------------------------------------------------------------------------
def compare_bars(
    names: Sequence[str], values: Sequence[float | None], title: str, y_title: str
) -> go.Figure:
    """One bar per accelerator generation (missing values left out), labelled."""
    pts = [(n, v) for n, v in zip(names, values, strict=True) if v is not None]
    fig = go.Figure(
        go.Bar(
            x=[n for n, _ in pts],
            y=[v for _, v in pts],
            text=[short(v) for _, v in pts],
            textposition="auto",
            marker_color="#4C78A8",
            hovertemplate=f"%{{x}}: %{{y:,.4g}} {y_title}<extra></extra>",
        )
    )
    fig.update_yaxes(title_text=y_title)
    fig.update_xaxes(title_text="cluster")
    return _layout(fig, title, height=340)


# ---- Validation ---------------------------------------------------------------------------------
def validation_figure(cases: Sequence[dict[str, Any]]) -> go.Figure:
    """Predicted vs measured tokens/s per GPU (log axes), one colour per source, y = x and
    +-20 % lines."""
    fig = go.Figure()
    ok = [c for c in cases if c.get("predicted_tokens_per_s_per_gpu")]
    by_source: dict[str, list[dict[str, Any]]] = {}
    for c in ok:
        by_source.setdefault(str(c.get("source", "?")), []).append(c)
    palette = px_colors.qualitative.Dark24
    for i, (source, rows) in enumerate(sorted(by_source.items())):
        fig.add_scatter(
            name=source[:48],
            mode="markers",
            x=[r["measured_tokens_per_s_per_gpu"] for r in rows],
            y=[r["predicted_tokens_per_s_per_gpu"] for r in rows],
            text=[f"{r['id']} ({r['status']}, {r['error_pct']:+.1f} %)" for r in rows],
            marker={
                "color": palette[i % len(palette)],
                "size": 8,
                "symbol": ["circle" if r["status"] == "ok" else "x" for r in rows],
            },
            hovertemplate="%{text}<br>measured %{x:,.0f}<br>predicted %{y:,.0f} tokens/s/GPU"
            "<extra></extra>",
        )
    values = [
        v
        for c in ok
        for v in (c["measured_tokens_per_s_per_gpu"], c["predicted_tokens_per_s_per_gpu"])
        if v and v > 0
    ]
    lo, hi = (min(values) / 1.5, max(values) * 1.5) if values else (1.0, 1e5)
    for factor, name, dash in (
        (1.0, "y = x", "solid"),
        (1.2, "+20 %", "dot"),
        (0.8, "-20 %", "dot"),
    ):
        fig.add_scatter(
            name=name,
            mode="lines",
            x=[lo, hi],
            y=[lo * factor, hi * factor],
            line={"color": "black" if factor == 1.0 else "#A0A0A0", "dash": dash, "width": 1},
            hoverinfo="skip",
        )
    fig.update_xaxes(type="log", title_text="measured (tokens/s per GPU)")
    fig.update_yaxes(type="log", title_text="predicted (tokens/s per GPU)")
    return _layout(
        fig,
        "Predicted vs measured throughput",
        height=560,
        legend={"orientation": "v", "x": 1.02, "y": 1, "font": {"size": 10}},
    )


# ---- Calibration --------------------------------------------------------------------------------
def curves_figure(
    series: Sequence[tuple[str, Sequence[float], Sequence[float]]],
    title: str,
    x_title: str,
    y_title: str,
    y_percent: bool = False,
) -> go.Figure:
    """Curves on a log-x axis: ``series`` = (name, x values, y values)."""
    fig = go.Figure()
    for name, xs, ys in series:
        fig.add_scatter(name=name, mode="lines+markers", x=list(xs), y=list(ys))
    fig.update_xaxes(type="log", title_text=x_title)
    fig.update_yaxes(title_text=y_title, rangemode="tozero")
    if y_percent:
        fig.update_yaxes(ticksuffix=" %")
    return _layout(fig, title)


__all__ = [
    "Block",
    "Timeline",
    "compare_bars",
    "curves_figure",
    "memory_figure",
    "pareto_figure",
    "pipeline_figure",
    "pipeline_timeline",
    "time_figure",
    "validation_figure",
]
