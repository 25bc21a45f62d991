"""planner validate: the schema of shared/validation/README.md in, the documented JSON out."""

from __future__ import annotations

import copy
import json

import pytest

import planner
from calibration.fit_public_profiles import build_profile, fit_attention, fit_hierarchical_overlap
from planner.profile import PROFILES_DIR
from planner.resources import shipped_cases
from planner.validate import read_case_file, run_case, validate_file

PUBLIC = shipped_cases()["public"]  # calibration/validation/public.yaml, shipped
CASE_KEYS = {
    "id",
    "status",
    "reason",
    "predicted_tokens_per_s_per_gpu",
    "measured_tokens_per_s_per_gpu",
    "error_pct",
    "predicted_mfu_pct",
    "predicted_peak_memory_gib",
    "measured_peak_memory_gib",
}
SUMMARY_KEYS = {
    "n",
    "n_ok",
    "n_scored",
    "mape_pct",
    "median_ape_pct",
    "p90_ape_pct",
    "max_ape_pct",
    "memory_mape_pct",
    "n_memory",
    "n_ranged",
    "range_coverage_pct",
    "n_banded",
    "band_coverage_pct",
}


@pytest.fixture(scope="module")
def public_result() -> dict:
    return validate_file(PUBLIC, planner.default_profile)


def test_every_public_case_is_simulated(public_result):
    cases = public_result["cases"]
    assert len(cases) == len(read_case_file(PUBLIC)[1])
    for c in cases:
        assert set(c) >= CASE_KEYS
        assert c["status"] in ("ok", "infeasible", "unsupported"), (c["id"], c["reason"])
        if c["status"] == "infeasible":
            assert "GiB" in c["reason"]
        pred, meas = c["predicted_tokens_per_s_per_gpu"], c["measured_tokens_per_s_per_gpu"]
        assert pred > 0
        assert c["error_pct"] == pytest.approx((pred - meas) / meas * 100, abs=0.1)
    assert set(public_result["summary"]) == SUMMARY_KEYS
    json.dumps(public_result)  # JSON-ready


def test_summary_matches_cases(public_result):
    scored = [c for c in public_result["cases"] if c["status"] == "ok" and c.get("scored", True)]
    s = public_result["summary"]
    assert s["n_scored"] == len(scored)
    mape = sum(abs(c["error_pct"]) for c in scored) / len(scored)
    assert s["mape_pct"] == pytest.approx(mape, abs=0.01)
    assert s["median_ape_pct"] <= s["p90_ape_pct"] <= s["max_ape_pct"]


def test_band_surrounds_each_prediction_and_coverage_counts_it(public_result):
    """Each scored case carries the planner's error band (planner/uncertainty.py) around its
    prediction (or its range over unstated knobs); in_band says whether the measurement lies
    inside, and the summary's coverage is the share of scored cases inside."""
    scored = [c for c in public_result["cases"] if c["status"] == "ok" and c.get("scored", True)]
    for c in scored:
        lo, hi = c["predicted_band_tokens_per_s_per_gpu"]
        rlo, rhi = (
            c.get("predicted_range_tokens_per_s_per_gpu")
            or [c["predicted_tokens_per_s_per_gpu"]] * 2
        )
        assert lo < rlo and rhi < hi, c["id"]
        assert c["in_band"] == (lo <= c["measured_tokens_per_s_per_gpu"] <= hi), c["id"]
    s = public_result["summary"]
    assert s["n_banded"] == len(scored)
    inside = sum(c["in_band"] for c in scored)
    assert s["band_coverage_pct"] == pytest.approx(100.0 * inside / len(scored), abs=0.05)


def _a_case() -> dict:
    """A shipped case (schema 2) written as schema 1: its stack named as a framework."""
    cases = read_case_file(PUBLIC)[1]
    case = copy.deepcopy(next(c for c in cases if c["id"].startswith("dgxc_llama31_8b")))
    case["framework"] = case.pop("stack")
    for knob in case.pop("unstated", []):
        case["layout" if knob in ("vpp", "zero") else "training"][knob] = None
    case["measured"].pop("peak_memory_kind", None)
    return case


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda c: c.pop("model"), "model"),
        (lambda c: c["layout"].update(zero=5), "layout.zero"),
        (lambda c: c["layout"].update(tp=3), "layout.tp"),
        (lambda c: c.update(num_gpus=7), "num_gpus"),
        (lambda c: c.update(cluster="no-such-cluster"), "cluster"),
        (lambda c: c["training"].update(precision="fp7"), "training.precision"),
    ],
)
def test_bad_case_is_an_error_naming_the_field(mutate, field):
    case = _a_case()
    mutate(case)
    out = run_case(case, planner.default_profile)
    assert out["status"] == "error"
    assert field.split(".")[-1] in out["reason"]


def test_non_mapping_case_is_an_error():
    assert run_case(["not", "a", "case"], planner.default_profile)["status"] == "error"


@pytest.mark.parametrize("accel", ["h100-sxm5-80gb", "a100-sxm4-80gb", "b200"])
def test_shipped_profiles_are_what_the_fit_script_writes(accel):
    shipped = json.loads((PROFILES_DIR / f"{accel}.json").read_text())
    rebuilt = build_profile(accel, fit_attention(), fit_hierarchical_overlap())
    assert json.loads(json.dumps(rebuilt)) == shipped


def test_case_sections_are_generated_from_the_specs():
    """CaseLayout / CaseTraining carry Layout / Training's own fields and ranges: a field
    added to the spec is accepted by a case with no other edit; schema-1 fields stay required."""
    from pydantic import Field, ValidationError

    from planner.specs.layout import Layout
    from planner.validate import CaseLayout, case_section

    class ChunkedLayout(Layout):
        message_chunks: int = Field(default=1, ge=1, le=8, description="pieces per message")

    section = case_section("S", ChunkedLayout, ("tp", "pp", "dp"), "test")
    assert section.model_validate({"tp": 1, "pp": 1, "dp": 1, "message_chunks": 4})
    with pytest.raises(ValidationError, match="message_chunks"):
        section.model_validate({"tp": 1, "pp": 1, "dp": 1, "message_chunks": 9})
    with pytest.raises(ValidationError, match="tp"):
        CaseLayout.model_validate({"pp": 1, "dp": 1})
    assert CaseLayout.model_fields["cp"].metadata == Layout.model_fields["cp"].metadata


def test_a_stated_layout_field_wins_over_the_framework_default():
    case = _a_case()
    case["framework"] = "nemo"  # NeMo recipes overlap TP communication by default
    case["layout"].update(tp=2, dp=case["num_gpus"] // 2, pp=1, cp=1, sequence_parallel=True)
    base = run_case(copy.deepcopy(case), planner.default_profile)
    case["layout"]["overlap_tp_comm"] = False
    off = run_case(case, planner.default_profile)
    assert base["status"] == off["status"] == "ok"
    assert off["predicted_tokens_per_s_per_gpu"] < base["predicted_tokens_per_s_per_gpu"]
