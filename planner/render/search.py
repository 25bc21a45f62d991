"""What ``planner search`` prints: the search summary, the ranking, why #1 beats #2, the Pareto
fronts and the winner's exports.

Units shown: times in seconds (s, per step), memory in GiB (2**30 bytes), throughput in tokens
per second, MFU in percent of the dense peak, cost in $ per million tokens.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from planner.render.layouts import _overlaps, compact_layout
from planner.render.tables import _fmt, _kv_table
from planner.report import StepReport
from planner.search.export import DIALECTS
from planner.specs.hardware import Cluster
from planner.specs.model import ModelSpec

COMPUTE_CATEGORIES = (
    "compute_gemm",
    "compute_attention",
    "compute_memory_bound",
    "compute_logits_loss",
)
COMM_CATEGORIES = ("tp_comm", "cp_comm", "ep_comm", "pp_comm", "dp_comm")


def _recompute(training: Any) -> str:
    """The recompute level, with the share of the layers where it is not every layer."""
    share = training.recompute_fraction
    return training.recompute if share is None else f"full {100 * share:g}%"


def objective_text(objective: str, score: float) -> str:
    """A search score in its unit: tokens/s, $ per million tokens, or hours to train."""
    if objective == "cost":
        return f"${-score:,.3f} per million tokens"
    if objective == "time_to_train":
        return f"{-score:,.1f} hours to train"
    return f"{score:,.0f} tokens/s"


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
        rows.append(("removed by rule", f"{n:,} candidates, before simulating: {rule}"))
    for reason, n in sorted(result.infeasible.items(), key=lambda kv: -kv[1]):
        if reason not in by_rule:  # the rules' counts are listed above
            rows.append(("rejected after simulating", f"{n:,}: {reason}"))
    rows.append(("time", _fmt(result.seconds, 2, " s")))
    console.print(_kv_table("Layout search", rows))


def render_search_top(
    console: Console,
    top: list[Any],
    objective: str,
    gpus_column: bool | None = None,
    sweep_columns: bool | None = None,
) -> None:
    """The ranking: layout columns, step time (s), throughput, MFU (%), memory (GiB) and the
    main time categories in seconds per step (compute, recompute, exposed comm, bubble).
    The GPU column is shown when ``gpus_column`` (default: when the rows differ in GPU count),
    the global batch (sequences) and seq_len (tokens) columns when ``sweep_columns`` (default:
    when the rows differ in either), CP, EP and VPP when one row has them above 1."""
    sweep = _differ(top) if sweep_columns is None else sweep_columns
    varies = {
        "GPUs": len({e.gpus for e in top}) > 1 if gpus_column is None else gpus_column,
        "global\nbatch": sweep,
        "seq\nlen": sweep,
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
            ("global\nbatch", lambda i, e: str(e.training.global_batch)),
            ("seq\nlen", lambda i, e: str(e.training.seq_len)),
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
        ("recompute", lambda i, e: _recompute(e.training)),
        ("ZeRO", lambda i, e: str(e.layout.zero)),
        ("SP", lambda i, e: "on" if e.layout.sequence_parallel else "-"),
        ("overlap", lambda i, e: _overlaps(e.layout)),
        ("step\ns", lambda i, e: _fmt(e.report.step_time_s, 3)),
        ("tokens/s", lambda i, e: _fmt(e.report.tokens_per_s, 0)),
        ("tok/s\n/GPU", lambda i, e: _fmt(e.report.tokens_per_s_per_gpu, 0)),
        ("MFU\n%", lambda i, e: _fmt(e.report.mfu_pct, 1)),
        ("mem\nGiB", lambda i, e: _fmt(e.report.peak_memory_gib, 1)),
        ("compute\ns", lambda i, e: _fmt(_sum(e.report, COMPUTE_CATEGORIES), 3)),
        (
            "recomp\ns",
            lambda i, e: _fmt(e.report.time_breakdown_s.get("recompute", 0.0), 3),
        ),
        ("comm\ns", lambda i, e: _fmt(_sum(e.report, COMM_CATEGORIES), 3)),
        (
            "bubble\ns",
            lambda i, e: _fmt(e.report.time_breakdown_s.get("pipeline_bubble", 0.0), 3),
        ),
    ]
    if objective != "tokens_per_s":
        digits = 3 if objective == "cost" else 1
        columns.append(
            (
                "$/Mtok" if objective == "cost" else "hours",
                lambda i, e: _fmt(-e.score, digits),
            )
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


def _differ(rows: list[Any]) -> bool:
    """Whether ``rows`` (evaluated candidates) differ in global batch or seq_len."""
    return len({(e.training.global_batch, e.training.seq_len) for e in rows}) > 1


def render_pareto(console: Console, fronts: dict[str, list[Any]]) -> None:
    """Each Pareto front as a table, best first on its first axis; with the global batch
    (sequences) and seq_len (tokens) of each row when the fronts' rows differ in either."""
    sweep = _differ([e for front in fronts.values() for e in front])
    for name, front in fronts.items():
        if name.endswith("_vs_gpus") and len({e.gpus for e in front}) <= 1:
            console.print(
                "Pareto front of tokens/s against GPUs: one GPU count was searched; pass "
                "--gpus-max N to search GPU counts up to N."
            )
            continue
        table = Table(title=f"Pareto front: {name.replace('_', ' ')}", title_justify="left")
        batch_seq = ("batch", "seq") if sweep else ()
        for h in (
            "GPUs",
            *batch_seq,
            "layout",
            "tokens/s",
            "tok/s/GPU",
            "peak GiB",
            "headroom GiB",
        ):
            table.add_column(h, justify="left" if h == "layout" else "right")
        for e in front:
            r = e.report
            sizes = (str(e.training.global_batch), str(e.training.seq_len)) if sweep else ()
            table.add_row(
                str(e.gpus),
                *sizes,
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
    for key, text in texts.items():
        console.print(f"[bold]{escape(DIALECTS[key].title if key in DIALECTS else key)}[/]")
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
    render_search_top(
        console, top, objective, len({e.gpus for e in result.ranked}) > 1, _differ(result.ranked)
    )
    if len(top) > 1:
        render_search_why(console, top[0], top[1], objective, why, settings)
    else:
        console.print("only one feasible layout: nothing to compare it with")
    if result.pareto:
        render_pareto(console, result.pareto)
    render_exports(console, texts, paths)
