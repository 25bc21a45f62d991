"""Rich rendering for the ``planner`` CLI: every function prints to the Console it is given.

Units shown: times in seconds (s), memory in GiB (2**30 bytes), throughput in tokens per second,
MFU/HFU in percent of the dense peak, FLOPs per token in TFLOP (1e12 FLOP).
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from planner.costs import flops
from planner.report import MEMORY_CATEGORIES, TIME_CATEGORIES, StepReport
from planner.specs.hardware import Cluster
from planner.specs.layout import Layout, Training
from planner.specs.model import ModelSpec


def _fmt(value: float | None, digits: int = 2, suffix: str = "") -> str:
    """A number with ``digits`` decimals and thousands separators; '-' for None."""
    if value is None:
        return "-"
    return f"{value:,.{digits}f}{suffix}"


def layout_summary(layout: Layout) -> str:
    """One line describing a layout, e.g. 'TP 8 x PP 4 x DP 32 x CP 1, EP 1, ZeRO 0, ...'."""
    parts = [
        f"TP {layout.tp} x PP {layout.pp} x DP {layout.dp} x CP {layout.cp}",
        f"EP {layout.ep}",
        f"VPP {layout.vpp or 1}",
        f"ZeRO {layout.zero}",
        f"SP {'on' if layout.sequence_parallel else 'off'}",
        f"schedule {layout.pipeline_schedule}",
    ]
    parts.append("overlap " + ("+".join(overlap_names(layout, "zero3")) or "none"))
    return ", ".join(parts)


def _kv_table(title: str, rows: list[tuple[str, str]]) -> Table:
    table = Table(title=title, show_header=False, title_justify="left")
    table.add_column("field", style="bold")
    table.add_column("value")
    for key, value in rows:
        table.add_row(escape(key), escape(value))
    return table


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
    console.print(_kv_table("Inputs", rows))


def _recompute_text(training: Training) -> str:
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


def render_headline(console: Console, report: StepReport, cluster: Cluster) -> None:
    """Step time (s), tokens/s, tokens/s/GPU, MFU/HFU (%), TFLOP per token and TFLOP/s per GPU."""
    tflop_per_s_gpu = report.model_flops_per_token * report.tokens_per_s_per_gpu / 1e12
    rows = [
        ("step time", _fmt(report.step_time_s, 3, " s")),
        ("tokens per step", f"{report.tokens_per_step:,}"),
        ("throughput", _fmt(report.tokens_per_s, 0, " tokens/s")),
        ("throughput per GPU", _fmt(report.tokens_per_s_per_gpu, 1, " tokens/s/GPU")),
        ("MFU", _fmt(report.mfu_pct, 1, " %")),
        ("HFU", _fmt(report.hfu_pct, 1, " %")),
        ("model FLOPs per token", f"{report.model_flops_per_token / 1e12:.4g} TFLOP"),
        ("model FLOP rate per GPU", _fmt(tflop_per_s_gpu, 1, " TFLOP/s")),
        (
            "memory per GPU",
            f"{report.peak_memory_gib:,.2f} GiB peak of "
            f"{report.usable_memory_gib:,.2f} GiB usable: "
            + ("fits" if report.fits else "does not fit"),
        ),
    ]
    price = cluster.spec.price_per_gpu_hour_usd
    if price and report.tokens_per_s > 0:
        usd_per_mtok = price * report.gpus / 3600.0 / report.tokens_per_s * 1e6
        rows.append(
            ("cost", f"${usd_per_mtok:,.3f} per million tokens (at ${price:.2f} per GPU-hour)")
        )
    console.print(_kv_table("Prediction", rows))


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
    render_headline(console, report, cluster)
    render_time(console, report)
    render_memory(console, report)
    render_notes(console, report)


def _truncate(text: str, width: int = 60) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


_STATUS_STYLE = {"ok": "green", "infeasible": "yellow", "unsupported": "yellow", "error": "red"}


def render_validation(console: Console, result: dict[str, Any]) -> None:
    """Validation cases (tokens/s/GPU, signed error %, MFU %, memory GiB) and the summary."""
    table = Table(title="Validation cases", title_justify="left")
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
            _fmt(case.get("predicted_mfu_pct"), 1),
            memory,
            escape(_truncate(str(case.get("reason") or ""))),
        )
    console.print(table)
    s = result.get("summary", {})
    rows = [
        ("cases", f"{s.get('n', 0)} ({s.get('n_ok', 0)} ok, {s.get('n_scored', 0)} scored)"),
        ("MAPE (tokens/s/GPU)", _fmt(s.get("mape_pct"), 2, " %")),
        ("median APE", _fmt(s.get("median_ape_pct"), 2, " %")),
        ("p90 APE", _fmt(s.get("p90_ape_pct"), 2, " %")),
        ("max APE", _fmt(s.get("max_ape_pct"), 2, " %")),
        ("memory MAPE", _fmt(s.get("memory_mape_pct"), 2, " %")),
    ]
    console.print(_kv_table("Summary (scored cases with status ok)", rows))


def render_list(console: Console, kind: str, rows: list[tuple[str, str]]) -> None:
    """Shipped spec ids of one kind with a short description."""
    table = Table(title=f"Shipped {kind}", title_justify="left")
    table.add_column("id")
    table.add_column("description")
    for spec_id, description in rows:
        table.add_row(escape(spec_id), escape(description))
    console.print(table)


# ----------------------------------------------------------------------------- planner search

COMPUTE_CATEGORIES = (
    "compute_gemm",
    "compute_attention",
    "compute_memory_bound",
    "compute_logits_loss",
)
COMM_CATEGORIES = ("tp_comm", "cp_comm", "ep_comm", "pp_comm", "dp_comm")


def objective_text(objective: str, score: float) -> str:
    """A search score in its unit: tokens/s, $ per million tokens, or hours to train."""
    if objective == "cost":
        return f"${-score:,.3f} per million tokens"
    if objective == "time_to_train":
        return f"{-score:,.1f} hours to train"
    return f"{score:,.0f} tokens/s"


def overlap_names(layout: Layout, zero3: str = "z3") -> list[str]:
    """The communication overlaps in effect: dp, tp, ep and the ZeRO-3 gather (``zero3``)."""
    return [
        name
        for name, on in (
            ("dp", layout.overlap_dp_grad_reduce),
            ("tp", layout.overlap_tp_comm and layout.tp > 1),
            ("ep", layout.overlap_ep_comm and layout.ep > 1),
            (zero3, layout.overlap_zero3_param_gather and layout.zero == 3),
        )
        if on
    ]


def _overlaps(layout: Layout) -> str:
    return "+".join(overlap_names(layout)) or "-"


def compact_layout(layout: Layout, training: Training) -> str:
    """One short line, e.g. 'TP2 PP1 DP8 CP1 EP1 VPP1 mb2 rc:none Z1 SP+ ov:dp+tp'."""
    return (
        f"TP{layout.tp} PP{layout.pp} DP{layout.dp} CP{layout.cp} EP{layout.ep} "
        f"VPP{layout.virtual_stages} mb{training.micro_batch} rc:{training.recompute} "
        f"Z{layout.zero} SP{'+' if layout.sequence_parallel else '-'} ov:{_overlaps(layout)}"
    )


def _sum(report: StepReport, cats: tuple[str, ...]) -> float:
    return sum(report.time_breakdown_s.get(c, 0.0) for c in cats)


def render_search_summary(
    console: Console, result: Any, model: ModelSpec, cluster: Cluster, objective: str
) -> None:
    """What was searched and how: method, notes, candidate counts, the candidates each legality
    rule removed before simulation, the other rejections (memory, simulator), seconds."""
    rows = [
        ("model", model.name),
        ("cluster", f"{cluster.id}: {cluster.spec.name}"),
        ("objective", objective),
        ("method", result.method),
    ]
    rows += [("note", note) for note in result.notes]
    if result.space_size is not None:
        rows.append(("legal candidates", f"{result.space_size:,}"))
    feasible = sum(1 for e in result.ranked if e.feasible)
    rows.append(("evaluated", f"{result.evaluated:,} simulated, {feasible:,} fit in memory"))
    by_rule = getattr(result, "rejected_by_rule", {})
    for rule, n in sorted(by_rule.items(), key=lambda kv: -kv[1]):
        rows.append(("removed by rule", f"{n:,}: {rule}"))
    for reason, n in sorted(result.infeasible.items(), key=lambda kv: -kv[1]):
        if reason not in by_rule:  # the rules' counts are listed above
            rows.append(("rejected", f"{n:,}: {reason}"))
    rows.append(("time", _fmt(result.seconds, 2, " s")))
    console.print(_kv_table("Layout search", rows))


def render_search_top(
    console: Console, top: list[Any], objective: str, gpus_column: bool | None = None
) -> None:
    """The ranking: layout columns, step time (s), throughput, MFU (%), memory (GiB) and the
    main time categories in seconds per step (compute, recompute, exposed comm, bubble).
    The GPU column is shown when ``gpus_column`` (default: when the rows differ in GPU count),
    CP, EP and VPP when one row has them above 1."""
    varies = {
        "GPUs": len({e.gpus for e in top}) > 1 if gpus_column is None else gpus_column,
        "CP": any(e.layout.cp > 1 for e in top),
        "EP": any(e.layout.ep > 1 for e in top),
        "VPP": any(e.layout.virtual_stages > 1 for e in top),
    }
    table = Table(title=f"Top {len(top)} layouts", title_justify="left", collapse_padding=True)
    columns: list[tuple[str, Any]] = [("#", lambda i, e: str(i))]
    columns += [
        (name, get)
        for name, get in (
            ("GPUs", lambda i, e: str(e.gpus)),
            ("TP", lambda i, e: str(e.layout.tp)),
            ("PP", lambda i, e: str(e.layout.pp)),
            ("DP", lambda i, e: str(e.layout.dp)),
            ("CP", lambda i, e: str(e.layout.cp)),
            ("EP", lambda i, e: str(e.layout.ep)),
            ("VPP", lambda i, e: str(e.layout.virtual_stages)),
        )
        if varies.get(name, True)
    ]
    columns += [
        ("mb", lambda i, e: str(e.training.micro_batch)),
        ("recompute", lambda i, e: e.training.recompute),
        ("ZeRO", lambda i, e: str(e.layout.zero)),
        ("SP", lambda i, e: "on" if e.layout.sequence_parallel else "-"),
        ("overlap", lambda i, e: _overlaps(e.layout)),
        ("step\ns", lambda i, e: _fmt(e.report.step_time_s, 3)),
        ("tokens/s", lambda i, e: _fmt(e.report.tokens_per_s, 0)),
        ("tok/s\n/GPU", lambda i, e: _fmt(e.report.tokens_per_s_per_gpu, 0)),
        ("MFU\n%", lambda i, e: _fmt(e.report.mfu_pct, 1)),
        ("mem\nGiB", lambda i, e: _fmt(e.report.peak_memory_gib, 1)),
        ("compute\ns", lambda i, e: _fmt(_sum(e.report, COMPUTE_CATEGORIES), 3)),
        ("recomp\ns", lambda i, e: _fmt(e.report.time_breakdown_s.get("recompute", 0.0), 3)),
        ("comm\ns", lambda i, e: _fmt(_sum(e.report, COMM_CATEGORIES), 3)),
        (
            "bubble\ns",
            lambda i, e: _fmt(e.report.time_breakdown_s.get("pipeline_bubble", 0.0), 3),
        ),
    ]
    if objective != "tokens_per_s":
        digits = 3 if objective == "cost" else 1
        columns.append(
            ("$/Mtok" if objective == "cost" else "hours", lambda i, e: _fmt(-e.score, digits))
        )
    for name, _ in columns:
        left = name in ("recompute", "overlap")
        table.add_column(name, justify="left" if left else "right", no_wrap=True)
    for i, e in enumerate(top, 1):
        table.add_row(*(get(i, e) for _, get in columns))
    console.print(table)


def render_search_why(
    console: Console,
    best: Any,
    runner: Any,
    objective: str,
    why: list[dict[str, Any]],
    settings: list[str],
) -> None:
    """Why #1 beats #2: scores, differing settings and the biggest time differences (s/step)."""
    console.print("[bold]Why the best beats the runner-up[/]")
    console.print(
        f"  #1 {escape(objective_text(objective, best.score))} vs "
        f"#2 {escape(objective_text(objective, runner.score))}; step "
        f"{best.report.step_time_s:.4f} s vs {runner.report.step_time_s:.4f} s "
        f"({best.report.step_time_s - runner.report.step_time_s:+.4f} s)"
    )
    if settings:
        console.print("  settings: " + escape("; ".join(settings)))
    if not why:
        console.print("  the two predictions have the same time breakdown (a tie)")
    for row in why:
        console.print(
            f"  {escape(row['category'])}: {row['difference_s']:+.4f} s per step "
            f"({row['best_s']:.4f} s vs {row['runner_up_s']:.4f} s)"
        )
    mem = best.report.peak_memory_gib - runner.report.peak_memory_gib
    console.print(
        f"  peak memory: {mem:+.2f} GiB ({best.report.peak_memory_gib:.2f} GiB vs "
        f"{runner.report.peak_memory_gib:.2f} GiB)"
    )


def render_pareto(console: Console, fronts: dict[str, list[Any]]) -> None:
    """Each Pareto front as a table, best first on its first axis."""
    for name, front in fronts.items():
        table = Table(title=f"Pareto front: {name.replace('_', ' ')}", title_justify="left")
        for h in ("GPUs", "layout", "tokens/s", "tok/s/GPU", "peak GiB", "headroom GiB"):
            table.add_column(h, justify="left" if h == "layout" else "right")
        for e in front:
            r = e.report
            table.add_row(
                str(e.gpus),
                escape(compact_layout(e.layout, e.training)),
                _fmt(r.tokens_per_s, 0),
                _fmt(r.tokens_per_s_per_gpu, 0),
                _fmt(r.peak_memory_gib, 2),
                _fmt(r.memory_headroom_gib, 2),
            )
        console.print(table)


def render_exports(console: Console, texts: dict[str, str], paths: list[Any]) -> None:
    """The winner's exports: the files written, or their text."""
    if paths:
        console.print("[bold]Exports written[/]: " + ", ".join(escape(str(p)) for p in paths))
        return
    titles = {
        "layout_yaml": "layout.yaml (planner simulate --layout FILE)",
        "megatron_args": "megatron_args.txt (Megatron-LM)",
        "torchtitan_toml": "torchtitan.toml (torchtitan job config)",
    }
    for key, text in texts.items():
        console.print(f"[bold]{escape(titles.get(key, key))}[/]")
        console.print(text.rstrip("\n"), markup=False, highlight=False, soft_wrap=True)
        console.print()


def render_search(
    console: Console,
    result: Any,
    model: ModelSpec,
    cluster: Cluster,
    objective: str,
    top: list[Any],
    why: list[dict[str, Any]],
    settings: list[str],
    texts: dict[str, str],
    paths: list[Any],
) -> None:
    """Everything ``planner search`` shows, in reading order."""
    render_search_summary(console, result, model, cluster, objective)
    render_search_top(console, top, objective, len({e.gpus for e in result.ranked}) > 1)
    if len(top) > 1:
        render_search_why(console, top[0], top[1], objective, why, settings)
    else:
        console.print("only one feasible layout: nothing to compare it with")
    if result.pareto:
        render_pareto(console, result.pareto)
    render_exports(console, texts, paths)
