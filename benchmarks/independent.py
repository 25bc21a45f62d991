"""The independent check: published runs no fit reads, scored per stack.

    python benchmarks/independent.py [--cases]

Reads every schema 2 file under ``benchmarks/independent/`` (torchtitan FSDP2 eager / compiled /
Float8 / async TP, DeepSpeed ZeRO, Megatron-DeepSpeed, llm-foundry, Megatron-Core, NeMo and
Megatron-Bridge runs that are not in ``public.yaml``; sources in each case) and prints, per
stack and over all curated runs (and, apart, per group of the bulk files: vTrain's 1,549
measured iterations, ``benchmarks/vtrain_import.py``, the 121 runs of the Megatron-Bridge
performance archive's other releases, the 238 rows of the DGX Cloud Benchmarking tables and the
54 of InternEvo's 7B tables):
tokens/s/GPU MAPE, median, p90,
the runs predicted out of memory,
the memory MAPE against the measured peak of the kind the source published (allocated or
reserved), the share of runs with unstated knobs whose measurement falls in the predicted
range, and the share of scored runs inside the planner's error band (planner/uncertainty.py).
No fit script lists these files (tests/calibration/test_fit_inputs.py).
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

import planner
from planner.validate import read_case_file, run_case, summarize

DIR = Path(__file__).resolve().parent / "independent"
# files of many runs from one source, reported apart from the curated per-stack table so that
# they do not outweigh it: file -> (title, how its runs are grouped)
BRIDGE_TITLE = (
    "Megatron-Bridge performance archive, releases 25.09-26.08 (25.11: the rows public.yaml "
    "and heldout_moe.yaml do not hold; 26.04.01: others.yaml)"
)


def rows() -> list[dict]:
    """Every case of every file, its row from ``planner validate``."""
    out = []
    for path in sorted(DIR.glob("*.yaml")):
        schema, cases = read_case_file(path)
        for raw in cases:
            row = run_case(raw, planner.default_profile, schema)
            row["file"] = path.name
            row["tp"] = raw.get("layout", {}).get("tp")
            row["moe"] = (raw.get("model") or {}).get("moe") is not None
            out.append(row)
    return out


def _bulk_group(row: dict) -> str:
    """A vTrain run's group: single- or multi-node, and its tensor-parallel size."""
    kind = "single" if "_single_" in row["id"] else "multi"
    return f"{kind} tp {row.get('tp', '?')}"


def _bridge_group(row: dict) -> str:
    """A Megatron-Bridge archive run's group: dense or MoE model, and its cluster."""
    return f"{'moe' if row['moe'] else 'dense'} {row['cluster']}"


def _dgxc_group(row: dict) -> str:
    """A DGX Cloud Benchmarking run's group: its workload and cluster."""
    workload = row["id"].split("_")[2]  # dgxc<tag>_<gpu>_<workload>_...
    return f"{workload} {row['cluster']}"


def _internevo_group(row: dict) -> str:
    """An InternEvo run's group: its table and setting (internevo_a100_7b_<n>gpu_<table>_...)."""
    return " ".join(row["id"].split("_")[4:6] + row["id"].split("_")[6:7][:1])


def _mlperf_group(row: dict) -> str:
    """An MLPerf run's group: its round, benchmark and cluster (mlperf<round>_<who>_<model>_...)."""
    parts = row["id"].split("_")
    return f"v{parts[0][6]}.{parts[0][7]} {parts[2]} {row['cluster']}"


BULK = {
    "vtrain.yaml": (
        "vTrain measured iterations (Bang et al. 2024), Megatron-DeepSpeed, A100",
        _bulk_group,
    ),
    "bridge_2509_2602.yaml": (BRIDGE_TITLE, _bridge_group),
    "bridge_2511.yaml": (BRIDGE_TITLE, _bridge_group),
    "bridge_2604_2608.yaml": (BRIDGE_TITLE, _bridge_group),
    "dgxc.yaml": (
        "NVIDIA DGX Cloud Benchmarking tables, tags v24.11.1-v25.05.05 (NeMo; the tables "
        "public.yaml holds left out)",
        _dgxc_group,
    ),
    "internevo.yaml": (
        "InternLM / InternEvo 7B throughput and FLOPS tables (2023-07), 8-1,024 A100 on RoCE",
        _internevo_group,
    ),
    "mlperf.yaml": (
        "MLPerf Training v3.0-v5.1 LLM pre-training, NVIDIA's NeMo code (GPT-3 175B, Llama 3.1 "
        "405B / 8B; 64-11,616 GPUs)",
        _mlperf_group,
    ),
}


def _stats(group: list[dict]) -> str:
    """One table row: ``planner validate``'s summary of the group, and its OOM count."""
    s = summarize(group)
    oom = sum(r["status"] == "infeasible" for r in group)

    def f(x: float | None) -> str:
        return f"{x:7.1f}" if x is not None else f"{'-':>7}"

    cover, band = s["range_coverage_pct"], s["band_coverage_pct"]
    return (
        f"{s['n']:4d} {s['n_scored']:4d} {f(s['mape_pct'])} {f(s['median_ape_pct'])} "
        f"{f(s['p90_ape_pct'])} {oom:4d} {s['n_memory']:4d} {f(s['memory_mape_pct'])} "
        f"{s['n_ranged']:4d} "
        + (f"{cover:6.0f}%" if cover is not None else "      -")
        + (f"{band:6.0f}%" if band is not None else "      -")
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
    head = "   n   sc  MAPE %  med %   p90 %  OOM  mem mem MAPE  rng  cover   band"
    curated = [r for r in all_rows if r["file"] not in BULK]
    print(f"{'stack':28}{head}")
    by_stack = defaultdict(list)
    for r in curated:
        by_stack[r.get("stack", "?")].append(r)
    for stack in sorted(by_stack):
        print(f"{stack:28}{_stats(by_stack[stack])}")
    print(f"{'all':28}{_stats(curated)}")
    tables: dict[str, tuple[list[str], object]] = {}  # title -> (files, grouping)
    for file, (title, group_of) in BULK.items():
        tables.setdefault(title, ([], group_of))[0].append(file)
    for title, (files, group_of) in tables.items():
        bulk = [r for r in all_rows if r["file"] in files]
        if not bulk:
            continue
        print(f"\n{title} ({', '.join(files)})")
        print(f"{'group':28}{head}")
        groups = defaultdict(list)
        for r in bulk:
            groups[group_of(r)].append(r)
        for key in sorted(groups):
            print(f"{key:28}{_stats(groups[key])}")
        for kind in ("dense", "moe"):
            part = [r for r in bulk if r["moe"] == (kind == "moe")]
            if part and len(part) < len(bulk):
                print(f"{'all ' + kind:28}{_stats(part)}")
        print(f"{'all':28}{_stats(bulk)}")


if __name__ == "__main__":
    main()
