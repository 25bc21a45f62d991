"""``planner validate FILE``: predictions against published measurements, case by case."""

from __future__ import annotations

import argparse
from typing import Any

import planner
from planner.cli.common import add_profile_device_flag, console, json_out
from planner.cli.inputs import load_profile_flag
from planner.profile import CalibrationProfile, check_profile_device
from planner.render import render_validation
from planner.specs.hardware import Cluster


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Register ``planner validate`` on the ``planner`` argparse subparsers."""
    p = sub.add_parser(
        "validate",
        help="compare predictions with published measurements",
        description="Simulate every case of a validation YAML: schema 1 (a list of cases with a "
        "free-text framework, shared/validation/README.md) or schema 2 ({schema: 2, cases: [...]}"
        " with a shipped stack per case, docs/validation-schema.md). Shipped files: public, "
        "heldout_moe. Unstated knobs are tuned under the case's stack and reported as a range.",
    )
    p.add_argument("file", metavar="FILE", help="validation cases YAML, or a shipped id (public)")
    p.add_argument(
        "--strict",
        action="store_true",
        help="schema 1: a framework outside the framework table (planner list frameworks) is "
        "the case's error (default: costed under the default stack, or PyTorch FSDP2 "
        "(torchtitan-eager) where the case states ZeRO stage 2 or 3, and the row says so), "
        "and so is a field outside the schema or a measured figure written as text (default: "
        "read as the field it names or left out, docs/validation-schema.md)",
    )
    p.add_argument(
        "--profile",
        default=None,
        help="calibration profile id or JSON path (default: each cluster's own profile)",
    )
    add_profile_device_flag(p)
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    return p


def run(args: argparse.Namespace) -> int:
    """Per-case predictions against measurements, then the summary."""
    from planner.validate import validate_file

    fixed = load_profile_flag(args.profile)

    def profile_for(cluster: Cluster) -> CalibrationProfile:
        if fixed is None:
            return planner.default_profile(cluster)
        check_profile_device(fixed, cluster, args.profile_for_any_device)
        return fixed

    result = validate_file(args.file, profile_for, strict=args.strict)
    if args.json:
        json_out(result)
    else:
        render_validation(console(), result)
    return 0
