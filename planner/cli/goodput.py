"""``planner goodput``: checkpoint size and interval, failures, goodput and effective MFU of a
layout (planner/goodput.py).

Takes the layout and training flags of ``planner simulate`` (or ``--layout FILE``) and prints rich
tables or, with ``--json``, machine-readable output with the units in the key names.
"""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console
from rich.markup import escape

from planner.cli.common import console as stdout_console
from planner.cli.common import json_out
from planner.cli.inputs import add_layout_flags, inputs_line, simulate_baseline, stack_flag
from planner.cli.misfit import misfit_advice, misfit_json, print_misfit
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
from planner.render import _kv_table


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Register ``planner goodput`` on the ``planner`` argparse subparsers."""
    g = sub.add_parser(
        "goodput",
        help="checkpoint size, optimal interval, failures and effective MFU",
        description="Checkpoint size and write time, the Young/Daly checkpoint interval, lost "
        "work and restart time per failure, and the effective training time ratio and MFU of "
        "a layout. Defaults are cited in docs/goodput.md; every one is a flag.",
    )
    add_layout_flags(g)
    g.add_argument("--json", action="store_true", help="print the result as JSON")
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
    return g


def render_goodput(console: Console, g: GoodputReport, title: str = "") -> None:
    """Checkpoint, failure, interval and wall-time tables of a GoodputReport."""
    if title:
        console.print(escape(title))
    mode = "asynchronous" if g.async_checkpoint else "synchronous"
    console.print(
        _kv_table(
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
        _kv_table(
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
        _kv_table(
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
        _kv_table(
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


def run(args: argparse.Namespace) -> int:
    """The goodput tables, or JSON."""
    settings = GoodputSettings(
        mtbf_hours_per_gpu=args.mtbf_hours_per_gpu,
        checkpoint_write_gb_per_s=args.checkpoint_write_gbps,
        storage_gb_per_s=args.storage_gbps if args.storage_gbps else None,
        restart_minutes=args.restart_minutes,
        async_checkpoint=args.async_checkpoint,
        snapshot_gb_per_s=args.snapshot_gbps,
        checkpoint_interval_minutes=args.checkpoint_interval_minutes,
    )
    model, cluster, layout, training, profile, report = simulate_baseline(args)
    g = goodput(model, cluster, layout, training, report, settings)
    misfit = misfit_advice(
        args, model, cluster, layout, training, profile, stack_flag(args), report
    )
    if args.json:
        out = g.to_dict() | misfit_json(misfit)
        out.update(
            model=model.name,
            cluster=cluster.id,
            layout=layout.model_dump(mode="json"),
            training=training.model_dump(mode="json"),
        )
        json_out(out)
    else:
        print_misfit(misfit, report)
        render_goodput(
            stdout_console(), g, inputs_line(model, cluster, layout, training, report.stack)
        )
    return 0
