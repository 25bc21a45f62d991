"""Command-line flags shared by several ``planner`` commands (no command imports another)."""

from __future__ import annotations

import argparse


def add_profile_device_flag(p: argparse.ArgumentParser) -> None:
    """--profile-for-any-device: accept a --profile measured on another accelerator."""
    p.add_argument(
        "--profile-for-any-device",
        action="store_true",
        help="use --profile even though it was measured on another accelerator than the "
        "cluster's (refused otherwise: a CPU profile on an H100 cluster is 100x off)",
    )
