"""``planner list models|clusters|accelerators|stacks``: the shipped specs with a short description."""

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

KINDS = ("models", "clusters", "accelerators", "stacks")


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Register ``planner list`` on the ``planner`` argparse subparsers."""
    p = sub.add_parser(
        "list", help="list shipped models, clusters, accelerators or software stacks"
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


def run(args: argparse.Namespace) -> int:
    """Ids of shipped specs with a short description."""
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
