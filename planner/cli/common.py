"""Helpers every ``planner`` command shares: output, the profile flag, building a spec.

No command module imports another; what two commands share lives here or in
``planner/cli/inputs.py``.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from pydantic import BaseModel, ValidationError
from rich.console import Console

from planner.errors import pydantic_error_to_planner
from planner.safe_io import dumps_strict

MODEL_HELP = "shipped model id or path to a model YAML"
CLUSTER_HELP = "shipped cluster id or path to a YAML"


def add_profile_device_flag(p: argparse.ArgumentParser) -> None:
    """--profile-for-any-device: accept a --profile measured on another accelerator."""
    p.add_argument(
        "--profile-for-any-device",
        action="store_true",
        help="use --profile even though it was measured on another accelerator than the "
        "cluster's (refused otherwise: a CPU profile on an H100 cluster is 100x off)",
    )


def build_spec(cls: type[BaseModel], prefix: str, **kwargs: Any) -> Any:
    """Construct a pydantic spec, turning a validation error into a PlannerError."""
    try:
        return cls(**kwargs)
    except ValidationError as exc:
        raise pydantic_error_to_planner(exc, prefix) from None


def json_out(data: Any) -> None:
    """Strict JSON on stdout (a non-finite figure is an error, not NaN)."""
    sys.stdout.write(dumps_strict(data) + "\n")


def console() -> Console:
    """A console on stdout; 160 columns when not a terminal (pipes, tests)."""
    return Console(width=None if sys.stdout.isatty() else 160)
