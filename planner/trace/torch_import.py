"""Importing torch on demand: nothing in :mod:`planner.trace` imports it at module import, so
the simulator and the CLI stay torch-free until a trace is requested."""

from __future__ import annotations

from typing import Any

from planner.errors import PlannerError

# how to install torch, for every command that needs it (planner trace, calibrate, closed-loop)
TORCH_HINT = "pip install torch==2.13.0 && pip install -e '.[calibrate]'"


def require_torch() -> Any:
    """The torch module, or a PlannerError naming torch and how to install it."""
    try:
        import torch
    except ImportError:
        raise PlannerError(
            "torch", "planner trace needs torch, which is not installed", TORCH_HINT
        ) from None
    return torch
