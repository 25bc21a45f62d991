"""The summary of validation rows: error statistics over the scored cases that ran, memory
error, and how often the measurement lies in the predicted range and the error band
(``shared/validation/README.md``)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def summarize(cases: list[dict]) -> dict:
    """Error summary over scored cases with status ok (shared/validation/README.md), the
    share of cases with a predicted range whose measurement falls inside it, and the share of
    scored cases whose measurement falls inside the planner's error band around it. ``n_ok``
    and the memory error count every case with status ok, one without a measured tokens/s
    figure (only a peak) included."""
    simulated = [c for c in cases if c["status"] == "ok"]
    ok = [c for c in simulated if _finite(c.get("error_pct"))]
    scored = [c for c in ok if c.get("scored", True)]
    ape = np.array([abs(c["error_pct"]) for c in scored], dtype=float)
    mem = [
        abs(c["predicted_peak_memory_gib"] - c["measured_peak_memory_gib"])
        / c["measured_peak_memory_gib"]
        * 100
        for c in simulated
        if c.get("measured_peak_memory_gib") and _finite(c.get("predicted_peak_memory_gib"))
    ]
    ranged = [c for c in ok if "in_range" in c]
    banded = [c for c in scored if "in_band" in c]

    def stat(fn: Any) -> float | None:
        return round(float(fn(ape)), 2) if ape.size else None

    return {
        "n": len(cases),
        "n_ok": len(simulated),
        "n_scored": len(scored),
        "mape_pct": stat(np.mean),
        "median_ape_pct": stat(np.median),
        "p90_ape_pct": stat(lambda a: np.percentile(a, 90)),
        "max_ape_pct": stat(np.max),
        "memory_mape_pct": round(float(np.mean(mem)), 2) if mem else None,
        "n_memory": len(mem),
        "n_ranged": len(ranged),
        "range_coverage_pct": (
            round(100.0 * sum(c["in_range"] for c in ranged) / len(ranged), 1) if ranged else None
        ),
        "n_banded": len(banded),
        "band_coverage_pct": (
            round(100.0 * sum(c["in_band"] for c in banded) / len(banded), 1) if banded else None
        ),
    }


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and math.isfinite(value)


__all__ = ["summarize"]
