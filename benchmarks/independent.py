"""The independent check: published runs no fit reads, scored per stack.

    python benchmarks/independent.py [--cases]

Reads every schema 2 file under ``benchmarks/independent/`` (torchtitan FSDP2 eager / compiled /
Float8 / async TP, DeepSpeed ZeRO, Megatron-DeepSpeed, llm-foundry, Megatron-Core, NeMo and
Megatron-Bridge runs that are not in ``public.yaml``; sources in each case) and prints, per
stack and over all runs: tokens/s/GPU MAPE, median, p90, the runs predicted out of memory,
the memory MAPE against the measured peak of the kind the source published (allocated or
reserved), and the share of runs with unstated knobs whose measurement falls in the predicted
range. No fit script lists these files (tests/calibration/test_fit_inputs.py).
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

import planner
from planner.validate import read_case_file, run_case

DIR = Path(__file__).resolve().parent / "independent"


def rows() -> list[dict]:
    """Every case of every file, its row from ``planner validate``."""
    out = []
    for path in sorted(DIR.glob("*.yaml")):
        schema, cases = read_case_file(path)
        for raw in cases:
            row = run_case(raw, planner.default_profile, schema)
            row["file"] = path.name
            out.append(row)
    return out


def _stats(group: list[dict]) -> str:
    scored = [r for r in group if r["status"] == "ok" and r.get("scored", True)]
    ape = np.array([abs(r["error_pct"]) for r in scored])
    oom = sum(r["status"] == "infeasible" for r in group)
    mem = [
        abs(r["predicted_peak_memory_gib"] / r["measured_peak_memory_gib"] - 1) * 100
        for r in group
        if r["status"] == "ok" and r.get("measured_peak_memory_gib")
    ]
    ranged = [r for r in group if r["status"] == "ok" and "in_range" in r]

    def f(a: np.ndarray | list, fn) -> str:
        return f"{fn(a):7.1f}" if len(a) else f"{'-':>7}"

    cover = (
        f"{100 * sum(r['in_range'] for r in ranged) / len(ranged):6.0f}%" if ranged else "      -"
    )
    return (
        f"{len(group):4d} {len(scored):4d} {f(ape, np.mean)} {f(ape, np.median)} "
        f"{f(ape, lambda a: np.percentile(a, 90))} {oom:4d} {len(mem):4d} {f(mem, np.mean)} "
        f"{len(ranged):4d} {cover}"
    )


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    all_rows = rows()
    if "--cases" in argv:
        for r in all_rows:
            mem = r.get("measured_peak_memory_gib")
            pm = f"{r['predicted_peak_memory_gib']}/{mem}" if mem else ""
            print(
                f"{r['id'][:52]:52} {r.get('stack', '?'):26} {r['status']:10} "
                f"{r['error_pct'] if r['error_pct'] is not None else '-':>8} {pm}"
            )
        print()
    head = "   n   sc  MAPE %  med %   p90 %  OOM  mem mem MAPE  rng  cover"
    print(f"{'stack':28}{head}")
    by_stack = defaultdict(list)
    for r in all_rows:
        by_stack[r.get("stack", "?")].append(r)
    for stack in sorted(by_stack):
        print(f"{stack:28}{_stats(by_stack[stack])}")
    print(f"{'all':28}{_stats(all_rows)}")


if __name__ == "__main__":
    main()
