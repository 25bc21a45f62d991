"""A layout that does not fit says so first and names the cheapest changes that fit."""

from __future__ import annotations

import io
import json
import shlex
from contextlib import redirect_stdout

import pytest

import planner
from planner.cli import main
from planner.fixes import memory_fixes

MODEL = planner.load_model("llama3.1-8b")
CLUSTER = planner.load_cluster("dgx-h100")
MISFIT = ["--model", "llama3.1-8b", "--cluster", "dgx-h100", "--gpus", "8"]
MISFIT += ["--global-batch", "64"]


def _out(argv: list[str]) -> str:
    buf = io.StringIO()
    with redirect_stdout(buf):
        assert main(argv) == 0
    return buf.getvalue()


@pytest.fixture(scope="module")
def fixes():
    layout = planner.Layout(tp=1, pp=1, dp=8)
    training = planner.Training(seq_len=4096, global_batch=64)
    stack = planner.load_stack("megatron-core")
    base = planner.simulate(MODEL, CLUSTER, layout, training, stack=stack)
    assert not base.fits  # the dead end of the issue: 8B with no ZeRO on 8 GPUs
    return memory_fixes(MODEL, CLUSTER, layout, training, stack=stack)


def test_every_fix_fits_when_simulated_again(fixes):
    assert fixes
    stack = planner.load_stack("megatron-core")
    for f in fixes:
        rep = planner.simulate(MODEL, CLUSTER, f.layout, f.training, stack=stack)
        assert rep.fits
        assert rep.peak_memory_gib == pytest.approx(f.peak_memory_gib)
        assert f.layout.world_size == 8


def test_fixes_are_ranked_fewest_flags_then_fastest(fixes):
    keys = [(len(f.flags), -f.tokens_per_s_per_gpu) for f in fixes]
    assert keys == sorted(keys)


@pytest.mark.parametrize("command", ["simulate", "advise", "goodput"])
def test_the_misfit_is_the_first_line(command):
    out = _out([command, *MISFIT])
    first = out.strip().splitlines()[0]
    assert first.startswith("Does not fit")
    assert "GiB usable" in first
    assert "planner search --model llama3.1-8b" in out


def test_json_carries_the_fixes_and_a_search_command_that_runs():
    data = json.loads(_out(["simulate", *MISFIT, "--json"]))
    assert not data["fits"]
    assert data["memory_fixes"] and all(f["flags"] for f in data["memory_fixes"])
    argv = shlex.split(data["search_command"])
    assert argv[:2] == ["planner", "search"]
    found = json.loads(_out([*argv[1:], "--top", "1", "--json"]))
    assert found["best"]["report"]["fits"]


def test_a_layout_that_fits_has_no_misfit_keys():
    data = json.loads(_out(["simulate", *MISFIT, "--zero", "2", "--json"]))
    assert data["fits"]
    assert "memory_fixes" not in data and "search_command" not in data


def test_nothing_fits_still_points_to_search():
    out = _out(
        ["simulate", "--model", "llama3.1-405b", "--cluster", "dgx-h100", "--gpus", "8"]
        + ["--global-batch", "8"]
    )
    assert out.startswith("Does not fit")
    assert "No change of ZeRO stage" in out
    assert "planner search --model llama3.1-405b" in out


def test_layers_moved_off_the_peak_rank_are_a_fix():
    """Llama 3.1 8B at PP 2 with two micro-batches in flight on the first rank peaks there
    (83 GiB of 78.6) while the last holds 70: fewer layers on the first rank (Megatron-Core
    --decoder-first-pipeline-num-layers) fit, each a legal split that simulates as it says."""
    layout = planner.Layout(tp=1, pp=2, dp=2, zero=1)
    training = planner.Training(seq_len=8192, global_batch=64, micro_batch=1)
    base = planner.simulate(MODEL, CLUSTER, layout, training)
    assert not base.fits and base.peak_memory_stage == "first"
    assert min(base.memory_by_stage_gib.values()) < base.usable_memory_gib
    fixes = memory_fixes(MODEL, CLUSTER, layout, training, limit=200)
    edge = [f for f in fixes if f.flags == (f"--first-stage-layers {f.layout.first_stage_layers}",)]
    assert edge and all(f.layout.first_stage_layers < 16 for f in edge)
    for f in edge:
        rep = planner.simulate(MODEL, CLUSTER, f.layout, f.training)
        assert rep.fits and rep.memory_by_stage_gib["first"] < base.memory_by_stage_gib["first"]
    # the lightest move that fits is the fastest of them: the last rank takes fewer layers
    best = max(edge, key=lambda f: f.tokens_per_s_per_gpu)
    assert best.layout.first_stage_layers == max(f.layout.first_stage_layers for f in edge)
