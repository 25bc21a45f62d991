"""Plotly figure builders of the web app (every axis names its unit); the two Estimate charts
redrawn on every widget change are Vega-Lite specs (app_pages/vega_charts.py).

The pipeline timeline is a view of the report's step plan (planner/plan.py):
:func:`pipeline_timeline` runs the layout's schedule (planner/schedules/) on each stage's own
forward, input-gradient and weight-gradient costs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import plotly.graph_objects as go
from plotly import colors as px_colors

from planner.plan import PassCosts, StepPlan
from planner.report import StepReport

COLORS = {
    "forward": "#4C78A8",
    "backward": "#F58518",
    "weight": "#EECA3B",
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
COMM_CATEGORIES = ("tp_comm", "cp_comm", "ep_comm", "pp_comm", "dp_comm")
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
# ---- pipeline timeline --------------------------------------------------------------------------
@dataclass(frozen=True)
class Block:
    """One bar of the timeline: a stage is busy (or idle) from ``start_s`` for ``dur_s``."""

    stage: int
    kind: str  # forward | backward | weight | communication | bubble | dp_comm | optimizer
    start_s: float
    dur_s: float
    label: str = ""


@dataclass(frozen=True)
class Timeline:
    """A pipeline schedule drawn from a report's step plan, and how it was derived."""

    blocks: tuple[Block, ...]
    pp: int
    microbatches: int  # in the step
    drawn_microbatches: int  # drawn (fewer when the steady state is shortened)
    vpp: int
    forward_s: float  # per micro-batch on the bottleneck stage, compute only
    backward_s: float  # input and weight gradients, recompute included
    comm_s: float  # exposed TP/CP/EP/DP and the PP sends, per micro-batch
    end_s: float
    bubble_drawn_s: float  # idle time of stage 0 before DP communication
    notes: tuple[str, ...] = ()
    schedule: str = "1f1b"
    derivation: str = ""  # one sentence for a caption


def _one_chunk(plan: StepPlan) -> StepPlan:
    """``plan`` with each rank's chunks merged into one, under the one-chunk form of its
    schedule (interleaved -> 1F1B, interleaved-zb -> ZB-H1)."""
    merged = []
    for st in plan.stages:
        fwd = _sum_dicts([dict(c.forward) for c in st.chunks])
        inp = _sum_dicts([dict(c.input_grad) for c in st.chunks])
        wgt = _sum_dicts([dict(c.weight_grad) for c in st.chunks])
        merged.append(replace(st, given_chunks=(PassCosts(fwd, inp, wgt),), recipe=None))
    one = "zb-h1" if plan.schedule_object.splits_backward else "1f1b"
    return replace(plan, given_stages=tuple(merged), chunks=1, schedule=one)


def _sum_dicts(parts: list[dict[str, float]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for part in parts:
        for k, v in part.items():
            out[k] = out.get(k, 0.0) + v
    return out


def _split_op(costs: dict[str, float]) -> tuple[float, float]:
    """(compute, exposed communication) seconds of one op."""
    comm = sum(costs.get(k, 0.0) for k in COMM_CATEGORIES)
    return sum(costs.values()) - comm, comm


def _op_blocks(plan: StepPlan) -> tuple[list[Block], float]:
    """Blocks of every op and the idle between them; the pipeline's end."""
    orders, starts, durations = plan.timed_ops()
    kinds = {"F": "forward", "B": "backward", "I": "backward", "W": "weight"}
    blocks: list[Block] = []
    pipe_end = max(
        (st[-1] + du[-1] for st, du in zip(starts, durations, strict=True) if st), default=0.0
    )
    for r, (order, st, du) in enumerate(zip(orders, starts, durations, strict=True)):
        t = 0.0
        for op, start, dur in zip(order, st, du, strict=True):
            if start - t > 1e-12:
                blocks.append(Block(r, "bubble", t, start - t, "idle"))
            comp, com = _split_op(plan.op_costs(r, op))
            label = f"{op.kind}{op.mb + 1}" + (f" chunk {op.chunk + 1}" if plan.chunks > 1 else "")
            blocks.append(Block(r, kinds[op.kind], start, comp, label))
            if com > 0:
                blocks.append(Block(r, "communication", start + comp, com, label + " comm"))
            t = start + dur
        if pipe_end - t > 1e-12:
            blocks.append(Block(r, "bubble", t, pipe_end - t, "idle"))
    return blocks, pipe_end


def pipeline_timeline(report: StepReport, pp: int, vpp: int = 1) -> Timeline:
    """The step of ``report`` drawn from its plan: each stage with its own forward,
    input-gradient and weight-gradient costs (the first with the embedding, the last with the
    logits and loss), in its schedule's op order, timed by running that order; the DP
    communication and the optimizer step close the step. At most MAX_DRAWN_STAGES stages and
    about MAX_PIPELINE_OPS blocks are drawn, whatever the layout."""
    plan = report.plan
    if plan is None:
        raise ValueError("the report has no step plan")
    if not 1 <= plan.pp <= MAX_DRAWN_STAGES:
        raise ValueError(f"pp = {plan.pp}: at most {MAX_DRAWN_STAGES} stages are drawn")
    m = max(1, plan.microbatches)
    notes = []
    per_op = 3 if plan.schedule_object.splits_backward else 2
    if per_op * plan.pp * plan.chunks * plan.pp > 4 * MAX_PIPELINE_OPS:
        notes.append(f"{plan.chunks} chunks per stage drawn as one")
        plan = _one_chunk(plan)
    md = m
    if per_op * m * plan.chunks * plan.pp > MAX_PIPELINE_OPS:
        md = min(m, max(2 * plan.pp, MAX_PIPELINE_OPS // (per_op * plan.chunks * plan.pp)))
        notes.append(
            f"steady state shortened: {md} of the step's {m} micro-batches drawn (warm-up, "
            "cool-down and bubble to scale)"
        )
    drawn = replace(plan, microbatches=md)
    blocks, pipe_end = _op_blocks(drawn)
    bubble0 = sum(b.dur_s for b in blocks if b.kind == "bubble" and b.stage == 0)
    dp, opt = plan.dp_step_s, plan.optimizer_s
    for s in range(plan.pp):
        if dp > 0:
            blocks.append(Block(s, "dp_comm", pipe_end, dp, "DP comm (exposed)"))
        if opt > 0:
            blocks.append(Block(s, "optimizer", pipe_end + dp, opt, "optimizer step"))
    bott = plan.stage_of(plan.bottleneck_rank)
    fwd = _sum_dicts([dict(c.forward) for c in bott.chunks])
    bwd = _sum_dicts([c.of("B") for c in bott.chunks])
    comm = sum(fwd.get(k, 0.0) + bwd.get(k, 0.0) for k in COMM_CATEGORIES)
    f_comm = sum(fwd.get(k, 0.0) for k in COMM_CATEGORIES)
    return Timeline(
        blocks=tuple(blocks),
        pp=plan.pp,
        microbatches=m,
        drawn_microbatches=md,
        vpp=plan.chunks,
        forward_s=sum(fwd.values()) - f_comm,
        backward_s=sum(bwd.values()) - (comm - f_comm),
        comm_s=comm,
        end_s=pipe_end + dp + opt,
        bubble_drawn_s=bubble0,
        notes=tuple(notes),
        schedule=plan.schedule,
        derivation=(
            f"{plan.schedule_object.title} order; each stage with its own costs from the step "
            "plan (forward, input and weight gradients; first stage with the embedding, last "
            "with the logits and loss), timed by running the order"
        ),
    )


def pipeline_figure(timeline: Timeline) -> go.Figure:
    """Per-stage Gantt chart of a :class:`Timeline` (stage 1 on top)."""
    scale, unit = time_unit(timeline.end_s)
    names = {
        "forward": "forward",
        "backward": "backward (+ recompute)",
        "weight": "weight gradient (W)",
        "communication": "communication (exposed TP/CP/EP/DP, PP sends)",
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
        f"Pipeline timeline of one step ({timeline.schedule}, schematic)",
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


# ---- Validation ---------------------------------------------------------------------------------
def validation_figure(cases: Sequence[dict[str, Any]]) -> go.Figure:
    """Predicted vs measured tokens/s per GPU (log axes), one colour per source, y = x and
    +-20 % lines."""
    fig = go.Figure()
    ok = [
        c
        for c in cases
        if c.get("predicted_tokens_per_s_per_gpu") and c.get("error_pct") is not None
    ]
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
    "curves_figure",
    "pareto_figure",
    "pipeline_figure",
    "pipeline_timeline",
    "validation_figure",
]
