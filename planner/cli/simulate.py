"""``planner simulate``: one training step of a model on a cluster under a layout."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import planner
from planner.cli.common import console, json_out
from planner.cli.fields import comma_list
from planner.cli.inputs import (
    add_layout_flags,
    load_model_cluster,
    run_profile,
    simulate_inputs,
    take_unknown_flags,
    with_stack,
)
from planner.cli.misfit import misfit_advice, misfit_json, print_misfit
from planner.render import render_simulation
from planner.timeline import write_trace
from planner.uncertainty import error_band
from planner.unknowns import UNKNOWABLE, tuned_prediction


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Register ``planner simulate`` on the ``planner`` argparse subparsers."""
    p = sub.add_parser(
        "simulate",
        help="predict step time, throughput, MFU and memory",
        description="Predict one training step of a model on a cluster.",
    )
    add_layout_flags(p)
    p.add_argument(
        "--unknown",
        type=comma_list,
        default=(),
        metavar="KNOBS",
        help="knobs the run does not state, comma-separated from "
        f"{', '.join(UNKNOWABLE)}: the report is the tuned one (the fastest legal setting "
        "that fits) with the range of tokens/s/GPU over every setting that fits (or give the "
        "knob's own flag the value unknown, e.g. --micro-batch unknown)",
    )
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
    unknown = tuple(dict.fromkeys((*args.unknown, *take_unknown_flags(args))))
    model, cluster = load_model_cluster(args)
    gpus, layout, training = simulate_inputs(args)
    stack, layout, training = with_stack(args, model, layout, training)
    planner.check_layout(model, cluster, layout, training, gpus=gpus)
    profile = run_profile(args, cluster)
    tuned = None
    if unknown:
        tuned = tuned_prediction(model, cluster, layout, training, profile, unknown, stack)
        report, layout, training = tuned.report, tuned.layout, tuned.training
    else:
        report = planner.simulate(
            model, cluster, layout, training, profile, args.profile_for_any_device, stack=stack
        )
    if args.trace:
        write_trace(report, model, layout, training, args.trace)
        sys.stderr.write(f"wrote {args.trace} (Chrome trace JSON: open it in ui.perfetto.dev)\n")
    band = error_band(model.moe is not None)  # the planner's error band of the model's kind
    advice = misfit_advice(args, model, cluster, layout, training, profile, stack, report)
    if args.json:
        out = report.to_dict() | misfit_json(advice)
        out.update(
            model=model.model_dump(mode="json"),
            cluster=cluster.model_dump(mode="json"),
            layout=layout.model_dump(mode="json"),
            training=training.model_dump(mode="json"),
        )
        lo, hi = (
            (tuned.tokens_per_s_per_gpu_min, tuned.tokens_per_s_per_gpu_max)
            if tuned is not None
            else (report.tokens_per_s_per_gpu, report.tokens_per_s_per_gpu)
        )
        out["tokens_per_s_per_gpu_band"] = list(band.interval(lo, hi))
        if tuned is not None:
            out["tuned"] = {
                "picked": tuned.picked,
                "tokens_per_s_per_gpu_range": [
                    tuned.tokens_per_s_per_gpu_min,
                    tuned.tokens_per_s_per_gpu_max,
                ],
                "settings_that_fit": tuned.settings,
                "combinations": tuned.combinations,
                "combinations_costed": tuned.searched,
            }
        json_out(out)
    else:
        print_misfit(advice, report)
        render_simulation(console(), report, model, cluster, layout, training)
        if tuned is not None:
            picked = ", ".join(f"{k} {v}" for k, v in tuned.picked.items())
            console().print(
                f"[bold]Unstated knobs[/]: tuned to {picked} (the fastest of "
                f"{tuned.settings} legal settings that fit"
                + (
                    ""
                    if tuned.exhaustive
                    else f"; {tuned.searched:,} of {tuned.combinations:,} combinations costed: "
                    "a log-spread grid, then one knob at a time"
                )
                + "); tokens/s/GPU over those settings: "
                f"{tuned.tokens_per_s_per_gpu_min:,.1f} to {tuned.tokens_per_s_per_gpu_max:,.1f}"
                "; with the planner's error band: {:,.1f} to {:,.1f}".format(
                    *band.interval(tuned.tokens_per_s_per_gpu_min, tuned.tokens_per_s_per_gpu_max)
                )
            )
    return 0
