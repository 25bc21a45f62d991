"""What ``planner simulate`` prints: inputs, headline prediction, time and memory, notes.

Units shown: times in seconds (s), memory in GiB (2**30 bytes), throughput in tokens per second,
MFU/HFU in percent of the dense peak, FLOPs per token in TFLOP (1e12 FLOP).
"""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from planner.costs import flops
from planner.render.layouts import layout_summary
from planner.render.tables import _fmt, _kv_table, _share_table
from planner.report import MEMORY_CATEGORIES, TIME_CATEGORIES, StepReport
from planner.specs.hardware import Cluster
from planner.specs.layout import Layout, Training
from planner.specs.model import ModelSpec
from planner.uncertainty import error_band


def render_header(
    console: Console,
    report: StepReport,
    model: ModelSpec,
    cluster: Cluster,
    layout: Layout,
    training: Training,
) -> None:
    """Inputs: model (params in billions), cluster, GPU count, layout and training settings."""
    total, active = model.param_counts()
    params = f"{total / 1e9:,.2f} B total"
    if active != total:
        params += f", {active / 1e9:,.2f} B active per token"
    acc = cluster.accelerator
    rows = [
        ("model", f"{model.name} ({params})"),
        (
            "cluster",
            f"{cluster.id}: {cluster.spec.name}, {cluster.spec.gpus_per_node} x "
            f"{acc.name} per node",
        ),
        ("GPUs", f"{report.gpus:,}"),
        ("layout", layout_summary(layout)),
        (
            "training",
            f"seq_len {training.seq_len:,}, global_batch {training.global_batch:,}, "
            f"micro_batch {training.micro_batch}, {report.microbatches} microbatches "
            f"per DP rank, recompute {_recompute_text(training)}, {training.precision}",
        ),
    ]
    if model.moe is not None:
        rows.append(("experts", _experts_text(model, layout, training)))
    if report.stack:
        rows.append(("stack", _stack_text(report.stack, training)))
    console.print(_kv_table("Inputs", rows))


def _stack_text(stack: str, training: Training) -> str:
    """The stack and the kernel/execution choices it made (or the flags overrode)."""
    unfused = ", ".join(training.unfused_elementwise) or "none"
    return (
        f"{stack}: attention {training.attention_kernel}, {training.execution} execution, "
        f"unfused elementwise chains: {unfused}, loss {training.cross_entropy}, "
        f"gradients reduced in {training.grad_reduce_dtype}"
    )


def _recompute_text(training: Training) -> str:
    if training.recompute == "full" and training.recompute_fraction is not None:
        return f"full on {100.0 * training.recompute_fraction:g} % of each chunk's layers"
    if training.recompute != "selective":
        return training.recompute
    return f"selective ({', '.join(training.selective_modules) or 'nothing'})"


def _experts_text(model: ModelSpec, layout: Layout, training: Training) -> str:
    """Experts, routing and the per-expert batch one GPU's grouped GEMM sees (balanced)."""
    moe = model.moe
    assert moe is not None
    local = moe.experts / layout.ep
    per_expert = flops.tokens_per_expert(model, layout, flops.tokens_per_gpu(layout, training))
    shared = f", {moe.shared_experts} shared" if moe.shared_experts else ""
    return (
        f"{moe.experts} routed{shared}, top-{moe.top_k}; {local:g} per GPU (EP {layout.ep}); "
        f"about {per_expert:,.0f} tokens per expert per micro-batch"
    )


def _band_text(tokens_per_s_per_gpu: float, moe: bool | None) -> str:
    """Where a measured run lands around the prediction (planner/uncertainty.py)."""
    band = error_band(moe)
    lo, hi = band.interval(tokens_per_s_per_gpu)
    return f"{lo:,.1f} to {hi:,.1f} tokens/s/GPU ({band.text()})"


def render_headline(
    console: Console, report: StepReport, cluster: Cluster, moe: bool | None = None
) -> None:
    """Step time (s), tokens/s, tokens/s/GPU, MFU/HFU (%), TFLOP per token and TFLOP/s per GPU;
    ``moe``: whether the model routes to experts (its error band; None: the all-model band)."""
    tflop_per_s_gpu = report.model_flops_per_token * report.tokens_per_s_per_gpu / 1e12
    rows = [
        ("step time", _fmt(report.step_time_s, 3, " s")),
        ("tokens per step", f"{report.tokens_per_step:,}"),
        ("throughput", _fmt(report.tokens_per_s, 0, " tokens/s")),
        ("throughput per GPU", _fmt(report.tokens_per_s_per_gpu, 1, " tokens/s/GPU")),
        ("planner's error band", _band_text(report.tokens_per_s_per_gpu, moe)),
        ("MFU (of the bf16 peak)", _fmt(report.mfu_pct, 1, " %")),
        *(
            [("MFU (of the training precision's peak)", _fmt(p, 1, " %"))]
            if (p := report.mfu_training_precision_pct) is not None
            else []
        ),
        ("HFU (executed FLOPs)", _fmt(report.hfu_pct, 1, " %")),
        ("model FLOPs per token", f"{report.model_flops_per_token / 1e12:.4g} TFLOP"),
        ("model FLOP rate per GPU", _fmt(tflop_per_s_gpu, 1, " TFLOP/s")),
        (
            "memory per GPU",
            f"{report.peak_memory_gib:,.2f} GiB peak of "
            f"{report.usable_memory_gib:,.2f} GiB usable: "
            + ("fits" if report.fits else "does not fit"),
        ),
    ]
    if report.peak_reserved_gib is not None:
        rows.append(
            (
                "reserved per GPU",
                f"{report.peak_reserved_gib:,.2f} GiB (caching allocator; the stack's logs "
                f"report the {report.reported_peak} peak)",
            )
        )
    price = cluster.spec.price_per_gpu_hour_usd
    if price and report.tokens_per_s > 0:
        usd_per_mtok = price * report.gpus / 3600.0 / report.tokens_per_s * 1e6
        rows.append(
            (
                "cost",
                f"${usd_per_mtok:,.3f} per million tokens (at ${price:.2f} per GPU-hour)",
            )
        )
    console.print(_kv_table("Prediction", rows))


def render_time(console: Console, report: StepReport) -> None:
    """Time breakdown: seconds per category and percent of the step; zero categories omitted."""
    table = _share_table(
        "Step time breakdown",
        "time (s)",
        "% of step",
        report.time_breakdown_s,
        TIME_CATEGORIES,
        report.step_time_s,
        4,
        skip_zero=True,
    )
    table.add_row("step", _fmt(report.step_time_s, 4), "100.0", style="bold")
    console.print(table)


def rank_memory_text(report: StepReport) -> str | None:
    """'allocated peak by pipeline rank: first 58.93 GiB, last 55.40 GiB' where the report
    costs more than one rank (middle: the busiest of them), else None."""
    by_rank = report.memory_by_stage_gib
    if len(by_rank) < 2:
        return None
    parts = ", ".join(f"{name} {gib:,.2f} GiB" for name, gib in by_rank.items())
    return f"allocated peak by pipeline rank: {parts}"


def render_memory(console: Console, report: StepReport) -> None:
    """Per-GPU memory (GiB) on the peak pipeline stage against usable HBM, with the verdict."""
    usable = report.usable_memory_gib or 1.0
    table = _share_table(
        f"Memory per GPU (peak stage: {escape(report.peak_memory_stage)})",
        "GiB",
        "% of usable",
        report.memory_breakdown_gib,
        MEMORY_CATEGORIES,
        usable,
        2,
        skip_zero=False,
    )
    table.add_row(
        "peak",
        _fmt(report.peak_memory_gib, 2),
        _fmt(report.peak_memory_gib / usable * 100, 1),
        style="bold",
    )
    table.add_row("usable HBM", _fmt(report.usable_memory_gib, 2), "100.0")
    console.print(table)
    by_rank = rank_memory_text(report)
    if by_rank:
        console.print(escape(by_rank))
    headroom = report.memory_headroom_gib
    if report.fits:
        console.print(f"[bold green]fits[/]: {headroom:,.2f} GiB headroom")
    else:
        over = f"out of memory by {-headroom:,.2f} GiB" if headroom < 0 else "does not fit"
        console.print(f"[bold red]{over}[/]")
    for line in report.feasibility:
        console.print(f"  - {escape(line)}")


def render_notes(console: Console, report: StepReport) -> None:
    """Group placement, assumptions, calibration profile and the MFU convention."""
    if report.placement:
        table = Table(title="Group placement", title_justify="left")
        table.add_column("group")
        table.add_column("placement")
        for group, where in report.placement.items():
            table.add_row(escape(group), escape(where))
        console.print(table)
    if report.assumptions:
        console.print("[bold]Assumptions[/]")
        for line in report.assumptions:
            console.print(f"  - {escape(line)}")
    console.print(f"[bold]Calibration profile[/]: {escape(report.profile or '-')}")
    console.print(f"[dim]{escape(report.mfu_convention)}[/]")


def render_simulation(
    console: Console,
    report: StepReport,
    model: ModelSpec,
    cluster: Cluster,
    layout: Layout,
    training: Training,
) -> None:
    """Everything ``planner simulate`` shows, in reading order."""
    render_header(console, report, model, cluster, layout, training)
    render_headline(console, report, cluster, model.moe is not None)
    render_time(console, report)
    render_memory(console, report)
    render_notes(console, report)
