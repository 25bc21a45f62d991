"""The same model, cluster and layout under every shipped software stack, side by side.

    python benchmarks/stacks.py [--model llama3.1-8b --cluster dgx-h100 --gpus 8 ...]

Prints tokens/s/GPU, MFU, allocated and reserved peak memory, and the time categories the
stacks move (memory-bound elementwise work, host overhead, TP communication), or the reason a
stack cannot run the layout. A planner benchmark: every figure comes from the model.
"""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.table import Table

import planner
from planner.errors import PlannerError
from planner.resources import STACKS_DIR
from planner.specs.layout import Layout, Training
from planner.specs.loading import shipped_ids


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="llama3.1-8b")
    p.add_argument("--cluster", default="dgx-h100")
    p.add_argument("--tp", type=int, default=1)
    p.add_argument("--pp", type=int, default=1)
    p.add_argument("--dp", type=int, default=8)
    p.add_argument("--zero", type=int, default=1)
    p.add_argument("--seq-len", type=int, default=4096)
    p.add_argument("--micro-batch", type=int, default=1)
    p.add_argument("--global-batch", type=int, default=64)
    args = p.parse_args()
    model, cluster = planner.load_model(args.model), planner.load_cluster(args.cluster)
    layout = Layout(
        tp=args.tp, pp=args.pp, dp=args.dp, zero=args.zero, sequence_parallel=args.tp > 1
    )
    training = Training(
        seq_len=args.seq_len, global_batch=args.global_batch, micro_batch=args.micro_batch
    )
    table = Table(
        title=f"{model.name} on {layout.world_size} x {cluster.accelerator.name}: TP {args.tp} "
        f"PP {args.pp} DP {args.dp} ZeRO {args.zero}, seq {args.seq_len}, mb {args.micro_batch}"
    )
    for col in (
        "stack",
        "tokens/s/GPU",
        "MFU %",
        "alloc GiB",
        "reserved GiB",
        "mem-bound s",
        "host s",
        "tp_comm s",
        "note",
    ):
        table.add_column(col, justify="left" if col in ("stack", "note") else "right")
    for stack_id in shipped_ids(STACKS_DIR):
        try:
            r = planner.simulate(model, cluster, layout, training, stack=stack_id)
        except PlannerError as exc:
            table.add_row(stack_id, *["-"] * 7, str(exc)[:70])
            continue
        t = r.time_breakdown_s
        table.add_row(
            stack_id,
            f"{r.tokens_per_s_per_gpu:,.0f}",
            f"{r.mfu_pct:.1f}",
            f"{r.peak_memory_gib:.1f}",
            f"{r.peak_reserved_gib:.1f}",
            f"{t.get('compute_memory_bound', 0.0):.3f}",
            f"{t.get('host_overhead', 0.0):.3f}",
            f"{t.get('tp_comm', 0.0):.3f}",
            f"{'fits' if r.fits else 'does not fit'}; logs report {r.reported_peak}",
        )
    Console(width=160).print(table)


if __name__ == "__main__":
    main()
