"""``planner trace PATH.py:FACTORY``: FLOPs and saved activations of a user's torch module.

The module is traced on the meta device (planner/trace/): nothing is allocated, so a
full-size block traces in about a second on a CPU. ``--compare-model`` puts the planner's
analytic figures for one layer of a shipped model (or the whole model, for a module that takes
token ids) next to the traced ones. torch is imported only when the command runs.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from rich.console import Console
from rich.table import Table

from planner.cli.common import console as stdout_console
from planner.errors import PlannerError
from planner.safe_io import dumps_strict
from planner.trace import (
    DTYPES,
    compare,
    load_factory,
    require_torch,
    trace_module,
    traced_layer_cost,
)

MIB = 2**20
TOP_OPS = 10


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Register ``planner trace`` on the ``planner`` argparse subparsers."""
    p = sub.add_parser(
        "trace",
        help="count FLOPs and saved activations of a torch module (meta device)",
        description="Build FACTORY() on the meta device, run forward and backward, and report "
        "FLOPs per op (FlopCounterMode) and the bytes autograd saves for backward.",
    )
    p.add_argument(
        "factory",
        metavar="PATH.py:FACTORY",
        help="a function returning an nn.Module: one block ((batch, seq, hidden) in and out) "
        "or a whole model on token ids",
    )
    p.add_argument("--seq-len", type=int, default=2048, help="tokens per sequence (default 2048)")
    p.add_argument("--batch", type=int, default=1, help="sequences per micro-batch (default 1)")
    p.add_argument("--dtype", choices=DTYPES, default="bf16", help="parameter/activation dtype")
    p.add_argument(
        "--input",
        choices=("auto", "hidden", "tokens"),
        default="auto",
        help="block on hidden states or model on token ids (default: try both)",
    )
    p.add_argument("--hidden", type=int, default=None, help="hidden width (default: inferred)")
    p.add_argument(
        "--compare-model",
        default=None,
        metavar="MODEL_ID",
        help="shipped model id or YAML: print its analytic per-layer figures and the differences",
    )
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    return p


def _pct(value: float | None) -> str:
    return "" if value is None else f"{value:+.2f}%"


def run(args: argparse.Namespace) -> int:
    """Print the traced figures (and the analytic comparison)."""
    if args.seq_len <= 0:
        raise PlannerError("--seq-len", f"seq_len={args.seq_len}", "an integer >= 1")
    if args.batch <= 0:
        raise PlannerError("--batch", f"batch={args.batch}", "an integer >= 1")
    require_torch()  # before importing a user file that would fail on ``import torch``
    factory = load_factory(args.factory)
    traced = trace_module(
        factory, args.seq_len, args.batch, args.dtype, input_kind=args.input, hidden=args.hidden
    )
    per_token = traced_layer_cost(traced)
    comparison = compare(traced, args.compare_model) if args.compare_model else None
    if args.json:
        out = {"traced": traced.model_dump(mode="json"), "per_token": per_token}
        if comparison is not None:
            out["compare"] = comparison
        sys.stdout.write(dumps_strict(out) + "\n")
        return 0
    _render(stdout_console(), args.factory, traced, per_token, comparison)
    return 0


def _render(
    console: Console, name: str, traced: Any, per_token: dict, comparison: dict | None
) -> None:
    ops = sorted(traced.per_op.items(), key=lambda kv: -(kv[1]["fwd"] + kv[1]["bwd"]))
    table = Table(title=f"FLOPs per op: {name}", title_justify="left")
    for col in ("op", "forward GFLOP", "backward GFLOP", "share"):
        table.add_column(col, justify="left" if col == "op" else "right")
    total = traced.fwd_flops + traced.bwd_flops
    for op, f in ops[:TOP_OPS]:
        share = (f["fwd"] + f["bwd"]) / total * 100.0 if total else 0.0
        table.add_row(op, f"{f['fwd'] / 1e9:,.2f}", f"{f['bwd'] / 1e9:,.2f}", f"{share:.1f}%")
    console.print(table)

    s = Table(title="Totals", show_header=False, title_justify="left")
    s.add_column("quantity")
    s.add_column("value", justify="right")
    kind = "block on hidden states" if traced.input_kind == "hidden" else "model on token ids"
    s.add_row(
        "traced",
        f"{kind}, batch {traced.batch} x seq {traced.seq_len} = {traced.tokens} tokens, "
        f"{traced.dtype}",
    )
    s.add_row("forward FLOPs", f"{traced.fwd_flops:.4e}")
    s.add_row("backward FLOPs", f"{traced.bwd_flops:.4e}")
    s.add_row("forward FLOPs per token", f"{per_token['fwd_flops_per_token']:.4e}")
    s.add_row("training FLOPs per token", f"{per_token['train_flops_per_token']:.4e}")
    s.add_row(
        "saved activations",
        f"{traced.saved_activation_bytes / MIB:,.1f} MiB ({traced.saved_tensors} storages)",
    )
    s.add_row(
        "saved activation bytes per token", f"{per_token['saved_activation_bytes_per_token']:,.0f}"
    )
    s.add_row("parameters", f"{traced.param_count:,}")
    console.print(s)

    if comparison is not None:
        ref = comparison["analytic"]
        c = Table(title=f"Traced vs analytic: {ref['model']}, {ref['scope']}", title_justify="left")
        for col in ("per token", "traced", "analytic", "difference"):
            c.add_column(col, justify="left" if col == "per token" else "right")
        for row_name, row in comparison["rows"].items():
            c.add_row(
                row_name, f"{row['traced']:,.6g}", f"{row['analytic']:,.6g}", _pct(row["diff_pct"])
            )
        console.print(c)
        for warning in comparison["warnings"]:
            console.print(f"warning: {warning}")
        if "fwd_flops_per_token_causal" in ref:
            console.print(
                "analytic attention: model convention (full, non-causal, what meta SDPA counts) "
                f"{ref['attention_fwd_flops_per_token']:.4e} FLOPs/token forward; hardware "
                f"(causal half) forward total {ref['fwd_flops_per_token_causal']:.4e}. "
                "Analytic backward: 2x forward, or with a FlashAttention-2 core (2.5x) "
                f"{ref['bwd_flops_per_token_flash2']:.4e} FLOPs/token."
            )
    for note in traced.notes:
        console.print(f"note: {note}")
