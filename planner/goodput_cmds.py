"""``planner goodput`` and ``planner advise``: checkpoint/failure goodput and ranked levers.

Both take the layout and training flags of ``planner simulate`` (or ``--layout FILE``), simulate
the layout, and print rich tables or, with ``--json``, machine-readable output with the units in
the key names. ``planner.cli`` registers them through :func:`add_parsers` and :data:`COMMANDS`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

import planner
from planner.advise import Lever, advise
from planner.goodput import (
    DEFAULT_MTBF_HOURS_PER_GPU,
    DEFAULT_RESTART_MINUTES,
    DEFAULT_SNAPSHOT_GB_PER_S,
    DEFAULT_STORAGE_GB_PER_S,
    DEFAULT_WRITE_GB_PER_S_PER_NODE,
    GoodputReport,
    GoodputSettings,
    goodput,
)
from planner.report import StepReport
from planner.safe_io import dumps_strict
from planner.specs.hardware import Cluster
from planner.specs.layout import Layout, Training
from planner.specs.model import ModelSpec


def _add_layout_flags(p: argparse.ArgumentParser) -> None:
    """``planner simulate``'s model, cluster, layout and training flags, and --json."""
    from planner.cli import add_layout_flags

    add_layout_flags(p)
    p.add_argument("--json", action="store_true", help="print the result as JSON")


def add_parsers(sub: Any) -> None:
    """Register ``planner goodput`` and ``planner advise`` on the argparse subparsers."""
    g = sub.add_parser(
        "goodput",
        help="checkpoint size, optimal interval, failures and effective MFU",
        description="Checkpoint size and write time, the Young/Daly checkpoint interval, lost "
        "work and restart time per failure, and the effective training time ratio and MFU of "
        "a layout. Defaults are cited in docs/goodput.md; every one is a flag.",
    )
    _add_layout_flags(g)
    g.add_argument(
        "--mtbf-hours-per-gpu",
        type=float,
        default=DEFAULT_MTBF_HOURS_PER_GPU,
        help="GPU-hours between job-stopping failures, per GPU (default "
        f"{DEFAULT_MTBF_HOURS_PER_GPU:,.0f}: Llama 3, 419 unexpected interruptions in 54 days "
        "on 16,384 H100s)",
    )
    g.add_argument(
        "--checkpoint-write-gbps",
        type=float,
        default=DEFAULT_WRITE_GB_PER_S_PER_NODE,
        help="checkpoint write bandwidth PER NODE to storage, GB/s (default "
        f"{DEFAULT_WRITE_GB_PER_S_PER_NODE:g}, an assumption)",
    )
    g.add_argument(
        "--storage-gbps",
        type=float,
        default=DEFAULT_STORAGE_GB_PER_S,
        help="aggregate storage write bandwidth cap, GB/s; 0: no cap (default "
        f"{DEFAULT_STORAGE_GB_PER_S:g}: Llama 3's Tectonic, 2 TB/s sustained)",
    )
    g.add_argument(
        "--restart-minutes",
        type=float,
        default=DEFAULT_RESTART_MINUTES,
        help="fixed minutes from a failure to training again, checkpoint load excluded "
        f"(default {DEFAULT_RESTART_MINUTES:g}, an assumption)",
    )
    g.add_argument(
        "--async-checkpoint",
        action="store_true",
        help="asynchronous checkpointing: training pauses only for a device-to-host snapshot",
    )
    g.add_argument(
        "--snapshot-gbps",
        type=float,
        default=DEFAULT_SNAPSHOT_GB_PER_S,
        help="device-to-host snapshot bandwidth per GPU with --async-checkpoint, GB/s "
        f"(default {DEFAULT_SNAPSHOT_GB_PER_S:g}, an assumption)",
    )
    g.add_argument(
        "--checkpoint-interval-minutes",
        type=float,
        default=None,
        help="evaluate this interval instead of the Daly optimum",
    )

    a = sub.add_parser(
        "advise",
        help="rank the levers (interleaving, SP, recompute, overlap, fp8, ...) of a layout",
        description="Re-simulate the layout with each single lever changed and rank the levers "
        "by predicted tokens/s gain (those that fit in memory first), with their memory cost.",
    )
    _add_layout_flags(a)
    a.add_argument(
        "--all",
        action="store_true",
        help="also list levers that are illegal or unavailable here, with the reason",
    )


def _inputs(
    args: argparse.Namespace,
) -> tuple[ModelSpec, Cluster, Layout, Training, Any, StepReport]:
    """Model, cluster, layout, training, profile and the baseline StepReport from the flags."""
    from planner.cli import _simulate_inputs, run_profile  # lazy: cli imports this module

    model = planner.load_model(args.model)
    cluster = planner.load_cluster(args.cluster)
    gpus, layout, training = _simulate_inputs(args)
    planner.check_layout(model, cluster, layout, training, gpus=gpus)
    profile = run_profile(args, cluster)
    report = planner.simulate(
        model, cluster, layout, training, profile, args.profile_for_any_device
    )
    return model, cluster, layout, training, profile, report


def _console() -> Console:
    """A console on stdout; 160 columns when not a terminal (pipes, tests)."""
    return Console(width=None if sys.stdout.isatty() else 160)


def _json_out(data: Any) -> None:
    sys.stdout.write(dumps_strict(data) + "\n")


def _kv(title: str, rows: list[tuple[str, str]]) -> Table:
    table = Table(title=title, show_header=False, title_justify="left")
    table.add_column("field", style="bold")
    table.add_column("value")
    for key, value in rows:
        table.add_row(escape(key), escape(value))
    return table


def _inputs_line(model: ModelSpec, cluster: Cluster, layout: Layout, training: Training) -> str:
    from planner.render import compact_layout

    return (
        f"{model.name} on {layout.world_size} x {cluster.accelerator.name} ({cluster.id}): "
        f"{compact_layout(layout, training)}, seq {training.seq_len}, "
        f"global batch {training.global_batch}"
    )


def render_goodput(console: Console, g: GoodputReport, title: str = "") -> None:
    """Checkpoint, failure, interval and wall-time tables of a GoodputReport."""
    if title:
        console.print(escape(title))
    mode = "asynchronous" if g.async_checkpoint else "synchronous"
    console.print(
        _kv(
            f"Checkpoint ({mode})",
            [
                (
                    "size",
                    f"{g.checkpoint_gib:,.1f} GiB ({g.checkpoint_params / 1e9:,.2f} B params x "
                    f"{g.checkpoint_bytes_per_param:g} B)",
                ),
                (
                    "written by",
                    f"{g.checkpoint_writer_gpus} GPUs, {g.checkpoint_gib_per_writer_gpu:,.2f} GiB "
                    f"each, {g.checkpoint_gib_per_writer_node:,.2f} GiB on the busiest node",
                ),
                ("write bandwidth", f"{g.checkpoint_write_gb_per_s:,.1f} GB/s (aggregate)"),
                ("write time", f"{g.checkpoint_write_s:,.1f} s"),
                ("training paused per checkpoint", f"{g.checkpoint_blocking_s:,.2f} s"),
                ("load time on restart", f"{g.checkpoint_load_s:,.1f} s"),
            ],
        )
    )
    console.print(
        _kv(
            "Failures",
            [
                ("MTBF per GPU", f"{g.mtbf_hours_per_gpu:,.0f} h"),
                ("job MTBF", f"{g.job_mtbf_hours:,.2f} h ({g.failures_per_day:,.2f} per day)"),
                ("restart (fixed + load)", f"{g.restart_s / 60:,.1f} min"),
                ("re-done work per failure", f"{g.rework_per_failure_s / 60:,.1f} min"),
                ("lost per failure", f"{g.lost_per_failure_s / 60:,.1f} min"),
            ],
        )
    )
    console.print(
        _kv(
            "Checkpoint interval",
            [
                ("Young 1974", f"{g.young_interval_s / 60:,.1f} min"),
                ("Daly 2006", f"{g.daly_interval_s / 60:,.1f} min"),
                (
                    f"used ({g.interval_source})",
                    f"{g.checkpoint_interval_s / 60:,.1f} min = every "
                    f"{g.checkpoint_interval_steps} steps of {g.step_time_s:,.2f} s",
                ),
            ],
        )
    )
    useful = 100.0 * g.effective_training_time_ratio
    console.print(
        _kv(
            "Wall time",
            [
                ("training (goodput)", f"{useful:,.2f} %"),
                ("checkpointing", f"{g.checkpoint_overhead_pct:,.2f} %"),
                ("re-done work", f"{g.rework_pct:,.2f} %"),
                ("restarts", f"{g.restart_pct:,.2f} %"),
                ("MFU -> effective MFU", f"{g.mfu_pct:,.1f} % -> {g.effective_mfu_pct:,.1f} %"),
                (
                    "tokens/s -> effective",
                    f"{g.tokens_per_s:,.0f} -> {g.effective_tokens_per_s:,.0f}",
                ),
            ],
        )
    )
    for line in g.assumptions:
        console.print(f"[dim]- {escape(line)}[/dim]")


def cmd_goodput(args: argparse.Namespace) -> int:
    """``planner goodput``: the goodput tables, or JSON."""
    settings = GoodputSettings(
        mtbf_hours_per_gpu=args.mtbf_hours_per_gpu,
        checkpoint_write_gb_per_s=args.checkpoint_write_gbps,
        storage_gb_per_s=args.storage_gbps if args.storage_gbps else None,
        restart_minutes=args.restart_minutes,
        async_checkpoint=args.async_checkpoint,
        snapshot_gb_per_s=args.snapshot_gbps,
        checkpoint_interval_minutes=args.checkpoint_interval_minutes,
    )
    model, cluster, layout, training, _, report = _inputs(args)
    g = goodput(model, cluster, layout, training, report, settings)
    if args.json:
        out = g.to_dict()
        out.update(
            model=model.name,
            cluster=cluster.id,
            layout=layout.model_dump(mode="json"),
            training=training.model_dump(mode="json"),
        )
        _json_out(out)
    else:
        render_goodput(_console(), g, _inputs_line(model, cluster, layout, training))
    return 0


def _signed(value: float | None, digits: int = 2, suffix: str = "") -> str:
    return "-" if value is None else f"{value:+,.{digits}f}{suffix}"


def render_advice(console: Console, base: StepReport, levers: list[Lever], title: str = "") -> None:
    """The baseline line and the ranked lever table."""
    if title:
        console.print(escape(title))
    console.print(
        f"baseline: {base.tokens_per_s:,.0f} tokens/s, step {base.step_time_s:,.2f} s, "
        f"MFU {base.mfu_pct:,.1f} %, peak {base.peak_memory_gib:,.1f} / "
        f"{base.usable_memory_gib:,.1f} GiB ({'fits' if base.fits else 'does NOT fit'})"
    )
    table = Table(title="Levers (fitting first, then by gain)", title_justify="left")
    for col, justify in (
        ("#", "right"),
        ("lever", "left"),
        ("tokens/s", "right"),
        ("gain", "right"),
        ("Δ step s", "right"),
        ("peak GiB", "right"),
        ("Δ peak GiB", "right"),
        ("fits", "center"),
        ("change", "left"),
    ):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for i, lv in enumerate(levers, 1):
        if not lv.applicable:
            table.add_row(
                str(i), escape(lv.name), "-", "-", "-", "-", "-", "n/a", escape(lv.reason)
            )
            continue
        table.add_row(
            str(i),
            escape(lv.name),
            f"{lv.tokens_per_s:,.0f}",
            _signed(lv.gain_pct, 1, " %"),
            _signed(lv.step_time_change_s),
            f"{lv.peak_memory_gib:,.1f}",
            _signed(lv.memory_change_gib, 1),
            "yes" if lv.fits else "[red]no[/red]",
            escape(lv.description),
        )
    console.print(table)


def cmd_advise(args: argparse.Namespace) -> int:
    """``planner advise``: the ranked lever table, or JSON."""
    model, cluster, layout, training, profile, report = _inputs(args)
    levers = advise(
        model,
        cluster,
        layout,
        training,
        profile,
        include_unavailable=args.all,
        baseline=report,
    )
    if args.json:
        _json_out(
            {
                "model": model.name,
                "cluster": cluster.id,
                "layout": layout.model_dump(mode="json"),
                "training": training.model_dump(mode="json"),
                "baseline": {
                    "tokens_per_s": report.tokens_per_s,
                    "step_time_s": report.step_time_s,
                    "mfu_pct": report.mfu_pct,
                    "peak_memory_gib": report.peak_memory_gib,
                    "usable_memory_gib": report.usable_memory_gib,
                    "fits": report.fits,
                },
                "levers": [lv.to_dict() for lv in levers],
            }
        )
    else:
        render_advice(_console(), report, levers, _inputs_line(model, cluster, layout, training))
    return 0


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "goodput": cmd_goodput,
    "advise": cmd_advise,
}

__all__ = [
    "COMMANDS",
    "add_parsers",
    "cmd_advise",
    "cmd_goodput",
    "render_advice",
    "render_goodput",
]
