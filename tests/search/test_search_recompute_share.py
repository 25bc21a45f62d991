"""The search with recompute shares (``--recompute-fractions``, SearchSpace.recompute_fraction):
full recompute of a share of the layers is a knob value beside every layer, tried only with
full recompute and only under a stack that runs it."""

from __future__ import annotations

import math

import pytest

import planner
from planner.errors import PlannerError
from planner.search import SearchSpace, search
from planner.search.jobs import check_recompute_fractions
from planner.search.optuna_encoding import candidate_attr, candidate_from_attr, structure_of
from planner.search.space import stack_space
from planner.specs.layout import Training

# 70B on 64 H100 at TP4 PP4 SP ZeRO-1: no recompute does not fit, a quarter of the layers does
SPACE = SearchSpace(
    gpus=(64,),
    tp=(4,),
    pp=(4,),
    vpp=(1,),
    micro_batch=(1,),
    recompute=("none", "full"),
    zero=(1,),
    sequence_parallel=(True,),
    overlap_tp_comm=(False,),
)


@pytest.mark.parametrize("method", ["exhaustive", "optuna"])
def test_the_search_finds_the_smallest_share_that_fits(method: str) -> None:
    model, cluster = planner.load_model("llama3.1-70b"), planner.load_cluster("dgx-h100")
    stack = planner.load_stack("megatron-core")
    kw = {"seq_len": 8192, "space": SPACE, "stack": stack, "method": method, "trials": 20}
    with_shares = search(model, cluster, 64, 128, recompute_fractions=(0.5, 0.25), **kw)
    ranked = with_shares.top(3)
    assert [e.training.recompute_fraction for e in ranked] == [0.25, 0.5, None]
    for e in ranked:  # each a valid Training, costed as simulate costs it
        assert Training.model_validate(e.training.model_dump()) == e.training
        want = planner.simulate(model, cluster, e.layout, e.training, stack=stack)
        assert e.report.tokens_per_s_per_gpu == pytest.approx(want.tokens_per_s_per_gpu)
    without = search(model, cluster, 64, 128, **kw).top(1)[0]
    assert without.training.recompute_fraction is None
    assert ranked[0].report.tokens_per_s_per_gpu > without.report.tokens_per_s_per_gpu


def test_a_share_goes_with_full_recompute_under_a_stack_that_runs_it() -> None:
    space = SearchSpace(gpus=(8,), recompute_fraction=(None, 0.5))
    pairs = {(k.recompute, k.recompute_fraction) for k in space.knobs()}
    assert pairs == {("none", None), ("selective", None), ("full", None), ("full", 0.5)}
    hf = stack_space(space, planner.load_stack("deepspeed-zero"))
    assert hf.recompute_fraction == (None,)
    core = stack_space(space, planner.load_stack("megatron-core"))
    assert core.recompute_fraction == (None, 0.5)


@pytest.mark.parametrize("bad", [0.0, 1.0, 1.5, -0.25, math.nan, True])
def test_a_share_outside_0_to_1_is_refused_by_name(bad: float) -> None:
    with pytest.raises(PlannerError) as err:
        check_recompute_fractions([0.5, bad])
    assert err.value.field == "search.recompute_fractions"


def test_more_shares_than_the_bound_are_refused_by_name() -> None:
    from planner.search.jobs import MAX_RECOMPUTE_FRACTIONS

    shares = [(i + 1) / 1000 for i in range(MAX_RECOMPUTE_FRACTIONS + 1)]
    with pytest.raises(PlannerError) as err:
        check_recompute_fractions(shares)
    assert err.value.field == "search.recompute_fractions"
    assert check_recompute_fractions(shares[:-1]) == tuple(shares[:-1])


def test_an_optuna_trial_record_keeps_the_share() -> None:
    layout = planner.Layout(tp=4, pp=4, dp=4, sequence_parallel=True, zero=1)
    tr = Training(seq_len=8192, global_batch=128, recompute="full", recompute_fraction=0.25)
    attr = candidate_attr(64, layout, tr)
    assert candidate_from_attr(attr, tr.with_changes(recompute_fraction=None)) == (64, layout, tr)
    assert structure_of((64, layout, tr))[1].recompute_fraction == 0.25
