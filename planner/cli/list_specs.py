"""``planner list models|clusters|accelerators|stacks|frameworks``: the shipped specs with a short
description; ``frameworks`` is the table from schema 1's framework names to shipped stacks."""

from __future__ import annotations

import argparse
from typing import Any

import planner
from planner.cli.common import console, json_out
from planner.errors import PlannerError
from planner.render import render_list
from planner.resources import STACKS_DIR
from planner.specs.loading import ACCELERATORS_DIR, CLUSTERS_DIR, MODELS_DIR, shipped_ids
from planner.stacks import DEFAULT_STACK

KINDS = ("models", "clusters", "accelerators", "stacks", "frameworks")


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Register ``planner list`` on the ``planner`` argparse subparsers."""
    p = sub.add_parser(
        "list",
        help="list shipped models, clusters, accelerators, software stacks, or the framework "
        "table validate uses for schema 1 cases",
    )
    p.add_argument("kind", choices=KINDS)
    p.add_argument("--json", action="store_true", help="print a JSON list of {id, description}")
    return p


def describe(kind: str, spec_id: str) -> str:
    """Short description of a shipped spec; a spec that fails to load says why."""
    try:
        if kind == "models":
            m = planner.load_model(spec_id)
            total, active = m.param_counts()
            text = f"{total / 1e9:,.2f} B params"
            return text + (f" ({active / 1e9:,.2f} B active)" if active != total else "")
        if kind == "clusters":
            c = planner.load_cluster(spec_id)
            return f"{c.spec.gpus_per_node} x {c.accelerator.name} per node"
        if kind == "stacks":
            s = planner.load_stack(spec_id)
            default = " [default]" if spec_id == DEFAULT_STACK else ""
            return f"{' '.join(s.description.split())}{default}"
        a = planner.load_accelerator(spec_id)
        bf16 = a.peak_tflops.bf16 or a.peak_tflops.fp16
        return f"{a.name}: {a.hbm_capacity_gib:g} GiB HBM, {bf16:g} TFLOP/s bf16 dense"
    except PlannerError as exc:
        return f"(invalid spec: {exc})"


def framework_rows() -> list[tuple[str, str]]:
    """Schema 1 framework names and the stack each stands for (planner/validate/frameworks.py)."""
    from planner.stacks import DEFAULT_STACK
    from planner.validate.frameworks import (
        BY_CAPABILITY,
        BY_GENERATION,
        BY_PRECISION,
        BY_ZERO3,
        FRAMEWORK_STACKS,
        NAMED_EXECUTION_FP8,
        NAMED_EXECUTION_OF,
        UNKNOWN_FSDP_FROM_ZERO,
        UNKNOWN_FSDP_STACK,
        WITH_MODEL_PARALLEL,
    )

    rows = []
    for name, stack in FRAMEWORK_STACKS.items():
        extra = [
            f"{s} on GPUs with FP8 tensor cores"
            for (n, fp8), s in BY_GENERATION.items()
            if n == name and fp8
        ]
        extra += [
            f"{s} with ZeRO-3 on GPUs without FP8 tensor cores"
            for (n, fp8), s in BY_ZERO3.items()
            if n == name and not fp8
        ]
        extra += [f"{s} with precision {p}" for (n, p), s in BY_PRECISION.items() if n == name]
        if stack in NAMED_EXECUTION_OF:
            extra.append(
                "named with 'compile' or 'inductor': torchtitan-compiled, with 'async TP': "
                f"torchtitan-async-tp; either with precision fp8: {NAMED_EXECUTION_FP8}"
            )
        if name in WITH_MODEL_PARALLEL:
            extra.append(f"with TP or PP: as {WITH_MODEL_PARALLEL[name]}")
        extra += [
            f"on GPUs without FP8 tensor cores the first of {', '.join(eras)} that runs the "
            "stated ZeRO stage, sequence parallelism and recompute"
            for (n, fp8), eras in BY_CAPABILITY.items()
            if n == name and not fp8
        ]
        rows.append((name, stack + (f" ({'; '.join(extra)})" if extra else "")))
    rows.append(
        (
            "(any other name)",
            f"{DEFAULT_STACK} ({UNKNOWN_FSDP_STACK} with ZeRO {UNKNOWN_FSDP_FROM_ZERO} or 3; "
            "planner validate --strict: the case's error)",
        )
    )
    return rows


def run(args: argparse.Namespace) -> int:
    """Ids of shipped specs with a short description."""
    if args.kind == "frameworks":
        rows = framework_rows()
    else:
        directory = {
            "models": MODELS_DIR,
            "clusters": CLUSTERS_DIR,
            "accelerators": ACCELERATORS_DIR,
            "stacks": STACKS_DIR,
        }[args.kind]
        rows = [(spec_id, describe(args.kind, spec_id)) for spec_id in shipped_ids(directory)]
    if args.json:
        json_out([{"id": i, "description": d} for i, d in rows])
    else:
        render_list(console(), args.kind, rows)
    return 0
