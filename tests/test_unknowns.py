"""planner/unknowns.py: the tuned prediction over unstated knobs, its range, and how validate
uses it for an unpublished micro-batch."""

from __future__ import annotations

import json

import pytest

import planner
from planner.cli import main
from planner.errors import PlannerError
from planner.unknowns import tuned_prediction

MODEL = planner.load_model("llama3.1-70b")
CLUSTER = planner.load_cluster("dgx-h100")
LAYOUT = planner.Layout(tp=8, pp=4, dp=2, sequence_parallel=True)
TRAIN = planner.Training(seq_len=4096, global_batch=64)
PROFILE = planner.default_profile(CLUSTER)


def test_the_range_contains_the_tuned_prediction_which_is_its_top() -> None:
    t = tuned_prediction(MODEL, CLUSTER, LAYOUT, TRAIN, PROFILE, ("micro_batch", "vpp"))
    rate = t.report.tokens_per_s_per_gpu
    assert t.tokens_per_s_per_gpu_min <= rate == t.tokens_per_s_per_gpu_max
    assert t.settings >= 2 and t.report.fits
    assert t.training.micro_batch == t.picked["micro_batch"]
    assert t.layout.vpp == t.picked["vpp"]
    # every picked value is legal and the tuned one is at least micro-batch 1 without interleaving
    plain = planner.simulate(MODEL, CLUSTER, LAYOUT, TRAIN)
    assert rate >= plain.tokens_per_s_per_gpu


def test_under_a_stack_only_what_it_runs_is_tried() -> None:
    stack = planner.load_stack("nemo")
    t = tuned_prediction(MODEL, CLUSTER, LAYOUT, TRAIN, PROFILE, ("zero",), stack)
    assert t.picked["zero"] in stack.capabilities.zero_stages
    assert t.report.stack == "nemo"


def test_unknown_names_and_nothing_that_fits_are_one_line_errors() -> None:
    with pytest.raises(PlannerError, match="micro_batch, vpp, recompute, zero"):
        tuned_prediction(MODEL, CLUSTER, LAYOUT, TRAIN, PROFILE, ("bogus",))
    huge = planner.Training(seq_len=131072, global_batch=64)
    with pytest.raises(PlannerError, match="fits in memory"):
        tuned_prediction(MODEL, CLUSTER, planner.Layout(dp=64), huge, PROFILE, ("micro_batch",))


SIM_70B = [
    "--model",
    "llama3.1-70b",
    "--cluster",
    "dgx-h100",
    "--gpus",
    "64",
    "--tp",
    "8",
    "--pp",
    "4",
    "--sequence-parallel",
    "--global-batch",
    "64",
]


def test_cli_unknown_reports_the_pick_and_range(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", *SIM_70B, "--unknown", "micro_batch", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    lo, hi = out["tuned"]["tokens_per_s_per_gpu_range"]
    assert lo <= out["tokens_per_s_per_gpu"] <= hi
    assert out["training"]["micro_batch"] == out["tuned"]["picked"]["micro_batch"]


def test_a_knob_flag_given_unknown_is_tuned_as_with_unknown(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["simulate", *SIM_70B, "--unknown", "micro_batch,zero", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    flags = ["--micro-batch", "unknown", "--zero", "UNKNOWN", "--json"]
    assert main(["simulate", *SIM_70B, *flags]) == 0
    given = json.loads(capsys.readouterr().out)
    assert given["tuned"] == listed["tuned"]
    assert set(given["tuned"]["picked"]) == {"micro_batch", "zero"}
    assert given["tokens_per_s_per_gpu"] == listed["tokens_per_s_per_gpu"]


def test_commands_that_do_not_tune_refuse_unknown(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["goodput", *SIM_70B, "--recompute", "unknown"]) != 0
    err = capsys.readouterr().err
    assert "--recompute" in err and "planner simulate" in err and "Traceback" not in err


def test_validate_tunes_every_unstated_knob() -> None:
    from planner.resources import shipped_cases
    from planner.validate import validate_file

    result = validate_file(shipped_cases()["public"], planner.default_profile)
    ranged = [c for c in result["cases"] if c.get("predicted_range_tokens_per_s_per_gpu")]
    assert ranged
    for c in ranged:
        lo, hi = c["predicted_range_tokens_per_s_per_gpu"]
        assert lo <= c["predicted_tokens_per_s_per_gpu"] <= hi + 0.01
        assert "not stated, tuned:" in c["reason"]
        assert c["in_range"] == (lo <= c["measured_tokens_per_s_per_gpu"] <= hi)
    s = result["summary"]
    assert s["n_ranged"] == len([c for c in ranged if c["status"] == "ok"])
    assert 0 <= s["range_coverage_pct"] <= 100


def test_a_knob_named_twice_is_one_knob() -> None:
    once = tuned_prediction(MODEL, CLUSTER, LAYOUT, TRAIN, PROFILE, ("micro_batch",))
    twice = tuned_prediction(MODEL, CLUSTER, LAYOUT, TRAIN, PROFILE, ("micro_batch", "micro_batch"))
    assert twice.settings == once.settings and twice.picked == once.picked
