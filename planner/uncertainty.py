"""The planner's own error band: how far a measured run may land from a prediction.

Every figure the planner prints is a model's; the model is wrong by some amount on runs it was
not fitted on. ``calibration/fit_global.py`` measures that amount: it refits the global
parameters without each software stack's public cases, predicts those cases, and stores the
5th and 95th percentiles of the held-out log errors log(predicted / measured) in
``calibration/global_params.json`` (``error_band``), over all cases and apart for dense and MoE
models (``kinds``): the MoE costing misses by more, so an MoE prediction carries a wider band. A prediction P then reads "measured between
P x exp(-q95) and P x exp(-q05) for nine runs in ten like the public ones"; a range over
unstated knobs [lo, hi] widens to [lo x exp(-q95), hi x exp(-q05)].

The band is an empirical statement about published runs of the kinds in the public set; runs
of other stacks or scales can miss by more (the independent check set's coverage of the band is
printed by ``benchmarks/independent.py`` and reported in ``docs/validation.md``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from planner.errors import PlannerError
from planner.resources import calibration_dir
from planner.safe_io import load_json, read_text

GLOBAL_PARAMS = "global_params.json"
# a band wider than a factor of 3 either way would say nothing; the fit writes about 0.15
MAX_ABS_LOG_ERROR = math.log(3.0)
KIND_WORDS = {"dense": "dense-model", "moe": "MoE-model"}


@dataclass(frozen=True, slots=True)
class ErrorBand:
    """Quantiles of the held-out log error log(predicted / measured) of tokens/s/GPU."""

    low_quantile: float  # e.g. 0.05
    high_quantile: float  # e.g. 0.95
    low_log_error: float  # the low quantile: <= 0, the model under-predicts by exp(-this)
    high_log_error: float  # the high quantile: >= 0, the model over-predicts by exp(this)
    n: int  # held-out cases behind it
    held_out_by: str  # what each refit left out: stack or source
    kind: str = "all"  # the cases behind it: all, dense or moe

    def interval(self, low: float, high: float | None = None) -> tuple[float, float]:
        """Where a run predicted at ``low``..``high`` tokens/s/GPU (``high`` defaults to
        ``low``) lands within the band: (low x exp(-q_high), high x exp(-q_low))."""
        top = low if high is None else high
        return low * math.exp(-self.high_log_error), top * math.exp(-self.low_log_error)

    def text(self) -> str:
        """How the band was measured, for a report line."""
        lo, hi = round(self.low_quantile * 100), round(self.high_quantile * 100)
        runs = "public runs" if self.kind == "all" else f"public {KIND_WORDS[self.kind]} runs"
        return (
            f"{lo}th-{hi}th percentile of the leave-one-{self.held_out_by}-out errors on "
            f"{self.n} {runs}"
        )


def _one(band: object, what: str, by: str, kind: str) -> ErrorBand:
    """One checked band: quantiles [lo, hi], log_error [lo, hi], n."""
    try:
        assert isinstance(band, dict)
        (q_lo, q_hi), (e_lo, e_hi) = band["quantiles"], band["log_error"]
        n = int(band["n"])
        values = [float(v) for v in (q_lo, q_hi, e_lo, e_hi)]
    except (AssertionError, KeyError, TypeError, ValueError):
        raise PlannerError(
            what, "malformed", "quantiles [lo, hi], log_error [lo, hi], n, held_out_by"
        ) from None
    q_lo, q_hi, e_lo, e_hi = values
    if not (0.0 < q_lo < q_hi < 1.0):
        raise PlannerError(f"{what}.quantiles", f"{[q_lo, q_hi]}", "0 < lo < hi < 1")
    if not (-MAX_ABS_LOG_ERROR <= e_lo <= 0.0 <= e_hi <= MAX_ABS_LOG_ERROR):
        raise PlannerError(
            f"{what}.log_error",
            f"{[e_lo, e_hi]}",
            f"-{MAX_ABS_LOG_ERROR:.3f} <= lo <= 0 <= hi <= {MAX_ABS_LOG_ERROR:.3f}",
        )
    if n < 1:
        raise PlannerError(f"{what}.n", str(n), "a positive count of held-out cases")
    return ErrorBand(q_lo, q_hi, e_lo, e_hi, n, by, kind)


def parse_bands(data: object) -> dict[str, ErrorBand]:
    """Every band of a global-parameters document, checked: ``all``, and ``dense`` / ``moe``
    where the fit wrote them."""
    what = "global_params.error_band"
    if not isinstance(data, dict) or not isinstance(data.get("error_band"), dict):
        raise PlannerError(what, "missing", "run python -m calibration.fit_global")
    band = data["error_band"]
    if "held_out_by" not in band:
        raise PlannerError(
            what, "malformed", "quantiles [lo, hi], log_error [lo, hi], n, held_out_by"
        )
    by = str(band["held_out_by"])
    out = {"all": _one(band, what, by, "all")}
    kinds = band.get("kinds", {})
    if not isinstance(kinds, dict) or not set(kinds) <= set(KIND_WORDS):
        raise PlannerError(
            f"{what}.kinds", "malformed", f"a mapping with keys {sorted(KIND_WORDS)}"
        )
    for kind, one in kinds.items():
        out[kind] = _one(one, f"{what}.kinds.{kind}", by, kind)
    return out


def parse_band(data: object) -> ErrorBand:
    """The all-cases ``error_band`` of a global-parameters document, checked."""
    return parse_bands(data)["all"]


@lru_cache(maxsize=1)
def _shipped() -> dict[str, ErrorBand]:
    path = calibration_dir() / GLOBAL_PARAMS
    return parse_bands(load_json(read_text(path, str(path)), str(path)))


def error_band(moe: bool | None = None) -> ErrorBand:
    """The shipped error band (``calibration/global_params.json``): for an MoE model
    (``moe`` True) or a dense one (False) where the fit wrote one per kind, else over all."""
    bands = _shipped()
    kind = "all" if moe is None else ("moe" if moe else "dense")
    return bands.get(kind, bands["all"])


__all__ = ["ErrorBand", "error_band", "parse_band", "parse_bands"]
