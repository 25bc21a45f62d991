"""The shipped profiles carry the in-training sustained fraction of their GPU generation, as
calibration/fit_global.py fitted it (calibration/global_params.json)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from calibration.fit_device_ratio import load_ratios
from calibration.fit_global import FITTED_GENERATIONS, _sf
from calibration.fit_public_profiles import GENERATION, sustained_fraction

ROOT = Path(__file__).resolve().parents[2]
PARAMS = json.loads((ROOT / "calibration" / "global_params.json").read_text())


@pytest.mark.parametrize("accel", sorted(GENERATION))
def test_each_profile_has_its_generation_s_fitted_fraction(accel: str) -> None:
    profile = json.loads((ROOT / "calibration" / "profiles" / f"{accel}.json").read_text())
    assert profile["gemm"]["sustained_fraction"] == sustained_fraction(PARAMS, accel)
    sf = PARAMS["sustained_fraction"]
    gen = GENERATION[accel]
    # a device with its own measured ratio over the generation (calibration/fit_device_ratio.py)
    ratio = load_ratios().get(accel, {}).get("sustained_ratio", 1.0)
    assert sustained_fraction(PARAMS, accel) == round(sf.get(gen, sf["default"]) * ratio, 4)


def test_a_generation_without_public_cases_takes_the_mean_of_the_fitted_ones() -> None:
    x = np.array([0.8, 0.7, 0.6, 0.2, 40.0])
    assert _sf(x, "a100-sxm4-80gb") == 0.8 and _sf(x, "h200-sxm-141gb") == 0.7
    assert _sf(x, "b200") == 0.6
    assert _sf(x, "gb300") == pytest.approx(0.6 * load_ratios()["gb300"]["sustained_ratio"])
    assert _sf(x, "mi300x") == pytest.approx(0.7)
    assert set(FITTED_GENERATIONS) < set(GENERATION.values())
    assert PARAMS["sustained_fraction"]["default"] == pytest.approx(
        np.mean([PARAMS["sustained_fraction"][g] for g in FITTED_GENERATIONS]), abs=1e-4
    )


def test_one_number_for_all_still_reads() -> None:
    assert sustained_fraction({"sustained_fraction": 0.75}, "b200") == 0.75
