"""Stated pipeline splits (Layout.first_stage_layers / last_stage_layers): the ranks carry the
stated layer counts in time and memory, a split equal to the even one changes nothing, and the
search's batch path costs them as the one-layout path does."""

from __future__ import annotations

import pytest

import planner
from planner.costs import pipeline
from planner.errors import PlannerError
from planner.simulate import simulate_step
from planner.simulate.batch import BatchSimulator
from planner.simulate.vector import VectorPass
from planner.specs.layout import Layout, Training

H100 = "dgx-h100"
TRAINING = Training(seq_len=4096, global_batch=256, micro_batch=1, recompute="selective")


def _run(model_id: str, layout: Layout, training: Training = TRAINING) -> planner.StepReport:
    model, cluster = planner.load_model(model_id), planner.load_cluster(H100)
    return simulate_step(model, cluster, layout, training, planner.default_profile(cluster))


def _rank_layers(report: planner.StepReport) -> dict[int, float]:
    """Layers of each pipeline rank in the report's plan."""
    out = {}
    for ranks, _role, layers, _cats, _edge in report.plan.stage_specs:
        for r in ranks:
            out[r] = layers
    return out


def test_layers_per_rank_takes_the_stated_counts_and_shares_the_rest() -> None:
    assert pipeline.layers_per_rank(61, 16, 4, 1) == [4] + [4] * 14 + [1]
    assert pipeline.layers_per_rank(61, 4, 16, 13) == [16, 16, 16, 13]
    assert pipeline.layers_per_rank(32, 4, first=2) == [2, 10, 10, 10]
    assert pipeline.layers_per_rank(32, 2, last=0) == [32, 0]
    assert pipeline.stated_split_error(61, 16, 4, 1) is None
    assert pipeline.stated_split_error(61, 16, 4, 2) is not None  # 55 over 14 ranks
    assert pipeline.stated_split_error(32, 2, 16, 15) is not None  # pp 2: first + last = 32
    assert pipeline.stated_split_error(32, 1, 32, None) is not None  # no pipeline


def test_a_stated_even_split_changes_nothing() -> None:
    base = Layout(tp=2, pp=4, dp=4, sequence_parallel=True, zero=1)
    stated = base.model_copy(update={"first_stage_layers": 8, "last_stage_layers": 8})
    a, b = _run("llama3.1-8b", base), _run("llama3.1-8b", stated)
    assert a.tokens_per_s_per_gpu == b.tokens_per_s_per_gpu
    assert a.peak_memory_gib == b.peak_memory_gib
    assert a.time_breakdown_s == b.time_breakdown_s


def test_the_plan_carries_the_stated_counts() -> None:
    layout = Layout(tp=2, pp=4, dp=4, first_stage_layers=6, last_stage_layers=2)
    layers = _rank_layers(_run("llama3.1-8b", layout))
    assert layers == {0: 6, 1: 12, 2: 12, 3: 2}


def test_fewer_layers_beside_the_head_speed_up_a_head_bound_pipeline() -> None:
    """Llama 3's 128k-entry head makes the last rank the slowest under the even split; moving
    its layers to the middle ranks (Megatron's --decoder-last-pipeline-num-layers) balances it,
    and piling them on it instead slows the step."""
    base = Layout(tp=2, pp=4, dp=2, zero=1)
    even = _run("llama3.1-8b", base)
    light = _run("llama3.1-8b", base.model_copy(update={"last_stage_layers": 2}))
    heavy = _run("llama3.1-8b", base.model_copy(update={"first_stage_layers": 2}))
    assert light.tokens_per_s_per_gpu > even.tokens_per_s_per_gpu
    # the first rank (embedding only) given fewer layers: the others, the head's among them,
    # take more, and the head rank sets the rate
    assert heavy.tokens_per_s_per_gpu < even.tokens_per_s_per_gpu


def test_the_peak_rank_holds_the_activations_of_its_stated_layers() -> None:
    """1F1B: rank r keeps pp - r micro-batches of its layers in flight. With 14 layers on the
    first rank it is the peak; with 2, the second rank (10 layers, 3 micro-batches) is, and
    holds 30 layers' worth against the first's 4 x 14 = 56."""
    base = Layout(tp=2, pp=4, dp=4, zero=1)
    small = _run("llama3.1-8b", base.model_copy(update={"first_stage_layers": 2}))
    big = _run("llama3.1-8b", base.model_copy(update={"first_stage_layers": 14}))
    assert (small.peak_memory_stage, big.peak_memory_stage) == ("middle", "first")
    ratio = big.memory_breakdown_gib["activations"] / small.memory_breakdown_gib["activations"]
    assert ratio == pytest.approx(56 / 30, rel=1e-9)


@pytest.mark.parametrize(
    "update",
    [
        {"pp": 1, "first_stage_layers": 4},
        {"pp": 4, "first_stage_layers": 4, "last_stage_layers": 3},
        {"pp": 4, "first_stage_layers": 40},
        {"pp": 4, "vpp": 2, "schedule": "zbv", "first_stage_layers": 8},
    ],
)
def test_a_split_that_cannot_run_is_refused_by_field(update: dict) -> None:
    layout = Layout(tp=2, dp=1, **update)
    with pytest.raises(PlannerError) as err:
        _run("llama3.1-8b", layout)
    assert err.value.field in ("layout.first_stage_layers", "layout.last_stage_layers")


def test_the_search_paths_cost_a_stated_split_as_the_one_layout_path() -> None:
    model, cluster = planner.load_model("deepseek-v3"), planner.load_cluster("dgx-b200")
    profile = planner.default_profile(cluster)
    layout = Layout(pp=16, dp=16, ep=8, zero=1, first_stage_layers=4, last_stage_layers=1)
    training = Training(seq_len=4096, global_batch=4096, recompute="selective", precision="fp8")
    want = simulate_step(model, cluster, layout, training, profile)
    sim = BatchSimulator(model, cluster, profile)
    got = sim.figures(layout, training)
    assert got.tokens_per_s_per_gpu == pytest.approx(want.tokens_per_s_per_gpu, rel=1e-9)
    assert got.peak_memory_gib == pytest.approx(want.peak_memory_gib, rel=1e-9)
    even = sim.figures(
        layout.model_copy(update={"first_stage_layers": None, "last_stage_layers": None}), training
    )
    assert even.tokens_per_s_per_gpu != got.tokens_per_s_per_gpu  # no cache shared across
    vp = VectorPass(sim, [(256, layout, training)], None)
    assert vp.run()[0] == got and vp.fallback == [0]
