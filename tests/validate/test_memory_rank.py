"""Schema 2 ``measured.peak_memory_rank``: a source that logged one pipeline rank's peak is
compared with that rank's prediction (Megatron's TensorBoard writer is the last rank)."""

from __future__ import annotations

import copy

import pytest
from pydantic import ValidationError

import planner
from planner.validate import CaseV2, case_inputs, parse_case, run_case
from planner.validate.inputs import V1_MODEL_KEYS


def _case(pp: int = 4, rank: str | None = "last", stack: str = "megatron-core", **layout) -> dict:
    keys = {"name", "moe", *V1_MODEL_KEYS}
    measured = {"tokens_per_s_per_gpu": 9000.0, "peak_memory_gib": 50.0}
    measured["peak_memory_kind"] = "allocated"
    if rank is not None:
        measured["peak_memory_rank"] = rank
    return {
        "id": "x",
        "source": "test",
        "quality": "partial",
        "model": planner.load_model("llama3.1-8b").model_dump(include=keys, mode="json"),
        "cluster": "dgx-h100",
        "num_gpus": 8,
        "stack": stack,
        "layout": {"tp": 2, "pp": pp, "dp": 8 // (2 * pp), "zero": 1, "vpp": 1, **layout},
        "training": {"seq_len": 4096, "global_batch": 64, "micro_batch": 1, "recompute": "none"},
        "unstated": [],
        "measured": measured,
    }


def _report(raw: dict) -> planner.StepReport:
    i = case_inputs(parse_case(copy.deepcopy(raw), 2))
    cluster = i.cluster
    return planner.simulate(
        i.model, cluster, i.layout, i.training, planner.default_profile(cluster), stack=i.stack
    )


@pytest.mark.parametrize("rank", ["first", "last"])
def test_the_named_rank_is_compared(rank: str) -> None:
    raw = _case(rank=rank)
    row = run_case(copy.deepcopy(raw), planner.default_profile, 2)
    rep = _report(raw)
    assert row["status"] == "ok"
    assert row["predicted_peak_memory_gib"] == round(rep.memory_by_stage_gib[rank], 2)
    assert f"on the {rank} pipeline rank" in row["reason"]


def test_without_a_rank_the_peak_over_the_ranks_is_compared() -> None:
    raw = _case(rank=None)
    row = run_case(copy.deepcopy(raw), planner.default_profile, 2)
    rep = _report(raw)
    assert row["predicted_peak_memory_gib"] == round(rep.peak_memory_gib, 2)
    ranks = rep.memory_by_stage_gib
    assert rep.peak_memory_gib == max(ranks.values()) and len(ranks) == 3


def test_a_reserved_figure_scales_the_rank_as_the_peak() -> None:
    raw = _case(rank="last")
    raw["measured"]["peak_memory_kind"] = "reserved"
    row = run_case(copy.deepcopy(raw), planner.default_profile, 2)
    rep = _report(raw)
    want = rep.memory_by_stage_gib["last"] * rep.peak_reserved_gib / rep.peak_memory_gib
    assert row["predicted_peak_memory_gib"] == round(want, 2)
    assert row["predicted_peak_memory_gib"] > round(rep.memory_by_stage_gib["last"], 2)


def test_one_rank_or_a_v_compares_the_peak() -> None:
    one = run_case(_case(pp=1, rank="last"), planner.default_profile, 2)
    assert "pipeline rank" not in one["reason"]
    assert one["predicted_peak_memory_gib"] == round(_report(_case(pp=1)).peak_memory_gib, 2)
    v = _case(pp=2, rank="last", stack="torchtitan-eager", vpp=2, schedule="zbv", zero=3)
    row = run_case(copy.deepcopy(v), planner.default_profile, 2)
    assert row["status"] == "ok" and "not costed apart" in row["reason"]
    assert row["predicted_peak_memory_gib"] == round(_report(v).peak_memory_gib, 2)


def test_a_rank_needs_a_peak_and_a_known_name() -> None:
    raw = _case()
    raw["measured"] = {"tokens_per_s_per_gpu": 9000.0, "peak_memory_rank": "last"}
    with pytest.raises(ValidationError, match="peak_memory_rank"):
        CaseV2.model_validate(raw)
    bad = _case(rank="middle")
    with pytest.raises(ValidationError, match="peak_memory_rank"):
        CaseV2.model_validate(bad)
    row = run_case(_case(rank="rank 7"), planner.default_profile, 2)
    assert row["status"] == "error" and "peak_memory_rank" in row["reason"]
