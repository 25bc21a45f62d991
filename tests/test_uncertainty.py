"""The planner's error band: how the fit script measures it and how the planner reads it."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest

from calibration.fit_global import BAND_QUANTILES
from calibration.fit_global import error_band as fit_band
from planner.errors import PlannerError
from planner.uncertainty import ErrorBand, error_band, parse_band, parse_bands

GOOD = {
    "error_band": {
        "quantiles": [0.05, 0.95],
        "log_error": [-0.1, 0.2],
        "n": 50,
        "held_out_by": "stack",
    }
}


def test_shipped_band_is_what_the_fit_wrote():
    band = error_band()
    assert (band.low_quantile, band.high_quantile) == BAND_QUANTILES
    assert band.low_log_error <= 0.0 <= band.high_log_error
    assert band.n > 0 and band.held_out_by in ("stack", "source")


def test_shipped_bands_by_model_kind_split_the_held_out_cases():
    dense, moe, every = error_band(False), error_band(True), error_band()
    assert (dense.kind, moe.kind, every.kind) == ("dense", "moe", "all")
    assert dense.n + moe.n == every.n  # each held-out case in exactly one kind
    assert "MoE-model" in moe.text() and "dense-model" in dense.text()


def test_a_kind_without_its_own_band_falls_back_to_all():
    bands = parse_bands(GOOD)
    assert set(bands) == {"all"}
    with_moe = copy.deepcopy(GOOD)
    with_moe["error_band"]["kinds"] = {
        "moe": {"quantiles": [0.05, 0.95], "log_error": [-0.3, 0.6], "n": 11}
    }
    bands = parse_bands(with_moe)
    assert bands["moe"].interval(100.0) == pytest.approx(
        (100 * math.exp(-0.6), 100 * math.exp(0.3))
    )
    assert bands["moe"].held_out_by == "stack" and bands["moe"].n == 11


def test_interval_widens_a_point_and_a_range():
    band = parse_band(GOOD)
    lo, hi = band.interval(1000.0)
    # the model over-predicts by up to exp(0.2): the measurement may be as low as P / e^0.2
    assert lo == pytest.approx(1000.0 * math.exp(-0.2))
    assert hi == pytest.approx(1000.0 * math.exp(0.1))
    lo2, hi2 = band.interval(900.0, 1100.0)
    assert lo2 == pytest.approx(900.0 * math.exp(-0.2)) and hi2 == pytest.approx(
        1100.0 * math.exp(0.1)
    )
    assert "5th-95th" in band.text() and "50" in band.text() and "stack" in band.text()


def test_fit_band_is_the_quantiles_of_the_held_out_errors():
    rng = np.random.default_rng(0)
    errors = rng.normal(0.0, 0.1, size=400)
    out = fit_band(errors)
    assert out["n"] == 400
    assert out["quantiles"] == list(BAND_QUANTILES)
    lo, hi = out["log_error"]
    assert lo == pytest.approx(np.quantile(errors, 0.05), abs=1e-4)
    assert hi == pytest.approx(np.quantile(errors, 0.95), abs=1e-4)
    # and the planner reads what the fit writes
    band = parse_band({"error_band": {**out, "held_out_by": "stack"}})
    assert isinstance(band, ErrorBand) and band.n == 400


def _bad(path: tuple[str, ...], value: object) -> dict:
    data = copy.deepcopy(GOOD)
    node = data
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return data


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({}, "error_band"),
        ([1, 2], "error_band"),
        (
            {"error_band": {"quantiles": [0.05, 0.95], "log_error": [-0.1, 0.1], "n": 3}},
            "held_out_by",
        ),
        (_bad(("error_band", "quantiles"), [0.05]), "error_band"),
        (_bad(("error_band", "log_error"), ["a", "b"]), "error_band"),
        (_bad(("error_band", "quantiles"), [0.95, 0.05]), "quantiles"),
        (_bad(("error_band", "quantiles"), [0.0, 1.0]), "quantiles"),
        (_bad(("error_band", "log_error"), [0.1, 0.2]), "log_error"),
        (_bad(("error_band", "log_error"), [-0.1, 5.0]), "log_error"),
        (_bad(("error_band", "log_error"), [float("nan"), 0.1]), "log_error"),
        (_bad(("error_band", "n"), 0), "n"),
        (_bad(("error_band", "kinds"), {"sparse": {}}), "kinds"),
        (_bad(("error_band", "kinds"), {"moe": {"quantiles": [0.05, 0.95]}}), "kinds.moe"),
        (
            _bad(
                ("error_band", "kinds"),
                {"moe": {"quantiles": [0.05, 0.95], "log_error": [0.2, 0.3], "n": 3}},
            ),
            "kinds.moe.log_error",
        ),
    ],
)
def test_bad_band_names_the_field(data, field):
    with pytest.raises(PlannerError) as err:
        parse_band(data)
    assert field in str(err.value)
