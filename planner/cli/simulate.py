"""``planner simulate``: one training step of a model on a cluster under a layout."""

from __future__ import annotations

import argparse
from typing import Any

import planner
from planner.cli.common import console, json_out
from planner.cli.inputs import add_layout_flags, run_profile, simulate_inputs, with_stack
from planner.render import render_simulation
from planner.timeline import write_trace


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Register ``planner simulate`` on the ``planner`` argparse subparsers."""
    p = sub.add_parser(
        "simulate",
        help="predict step time, throughput, MFU and memory",
        description="Predict one training step of a model on a cluster.",
    )
    add_layout_flags(p)
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument(
        "--trace",
        metavar="FILE",
        default=None,
        help="also write the simulated step as a Chrome trace (Perfetto) JSON",
    )
    return p


def run(args: argparse.Namespace) -> int:
    """One step prediction as rich tables or JSON."""
    model = planner.load_model(args.model)
    cluster = planner.load_cluster(args.cluster)
    gpus, layout, training = simulate_inputs(args)
    stack, layout, training = with_stack(args, model, layout, training)
    planner.check_layout(model, cluster, layout, training, gpus=gpus)
    report = planner.simulate(
        model,
        cluster,
        layout,
        training,
        run_profile(args, cluster),
        args.profile_for_any_device,
        stack=stack,
    )
    if args.trace:
        write_trace(report, model, layout, training, args.trace)
    if args.json:
        out = report.to_dict()
        out.update(
            model=model.model_dump(mode="json"),
            cluster=cluster.model_dump(mode="json"),
            layout=layout.model_dump(mode="json"),
            training=training.model_dump(mode="json"),
        )
        json_out(out)
    else:
        render_simulation(console(), report, model, cluster, layout, training)
    return 0
