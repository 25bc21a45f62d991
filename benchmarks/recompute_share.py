"""Full recompute of a share of the layers (Training.recompute_fraction) against no recompute
and every layer, on one model, cluster and layout.

    python benchmarks/recompute_share.py [--model llama3.1-70b --cluster dgx-h100 --tp 4 --pp 4
                                          --dp 4 --seq-len 8192 --stack megatron-core]

Prints tokens/s/GPU, MFU, HFU, peak memory and the recompute time per step for no recompute,
a quarter, half and three quarters of each model chunk's layers, and every layer. A planner
benchmark: every figure comes from the model (docs/model.md quotes the default run).
"""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.table import Table

import planner
from planner.errors import PlannerError
from planner.specs.layout import Layout, Training

SETTINGS = (("none", None), ("full", 0.25), ("full", 0.5), ("full", 0.75), ("full", None))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="llama3.1-70b")
    p.add_argument("--cluster", default="dgx-h100")
    p.add_argument("--tp", type=int, default=4)
    p.add_argument("--pp", type=int, default=4)
    p.add_argument("--dp", type=int, default=4)
    p.add_argument("--seq-len", type=int, default=8192)
    p.add_argument("--global-batch", type=int, default=128)
    p.add_argument("--stack", default="megatron-core")
    a = p.parse_args()
    model, cluster = planner.load_model(a.model), planner.load_cluster(a.cluster)
    layout = Layout(tp=a.tp, pp=a.pp, dp=a.dp, sequence_parallel=a.tp > 1, zero=1)
    table = Table(title=f"{a.model} on {layout.world_size} x {a.cluster}, stack {a.stack}")
    for col in ("recompute", "tokens/s/GPU", "MFU %", "HFU %", "peak GiB", "fits", "recompute s"):
        table.add_column(col, justify="right")
    for level, share in SETTINGS:
        tr = Training(
            seq_len=a.seq_len,
            global_batch=a.global_batch,
            recompute=level,
            recompute_fraction=share,
        )
        name = level if share is None else f"full, {100 * share:g} % of layers"
        try:
            r = planner.simulate(model, cluster, layout, tr, stack=a.stack)
        except PlannerError as exc:
            table.add_row(name, str(exc), "", "", "", "", "")
            continue
        table.add_row(
            name,
            f"{r.tokens_per_s_per_gpu:,.0f}",
            f"{r.mfu_pct:.1f}",
            f"{r.hfu_pct:.1f}",
            f"{r.peak_memory_gib:.1f}",
            "yes" if r.fits else "no",
            f"{r.time_breakdown_s['recompute']:.2f}",
        )
    Console(width=140).print(table)


if __name__ == "__main__":
    main()
