"""The backward TP collectives run under the weight-gradient GEMMs
(Training.overlap_tp_backward; planner/simulate/layers.py _tp_s)."""

from __future__ import annotations

import pytest

import planner
from planner.costs import comms, compute, flops
from planner.simulate import layers
from planner.simulate.stages import make_context
from planner.specs.blocks import LayerSpec
from planner.specs.layout import Layout, Training

CLUSTER = planner.load_cluster("dgx-a100-80gb")
MODEL = planner.load_model("gpt3-175b")


def _train(**kw: object) -> Training:
    base = {"seq_len": 2048, "global_batch": 64, "micro_batch": 1, "recompute": "full"}
    return Training(**{**base, **kw})


def _step(layout: Layout, **kw: object) -> planner.StepReport:
    return planner.simulate(MODEL, CLUSTER, layout, _train(**kw))


@pytest.mark.parametrize("sp", [False, True])
def test_hiding_the_backward_collectives_shortens_the_step(sp: bool) -> None:
    layout = Layout(tp=8, pp=8, dp=1, sequence_parallel=sp)
    on, off = _step(layout), _step(layout, overlap_tp_backward=False)
    assert on.time_breakdown_s["tp_comm"] < off.time_breakdown_s["tp_comm"]
    assert on.step_time_s < off.step_time_s
    # the forward collectives are not touched: at least half the TP time stays
    assert on.time_breakdown_s["tp_comm"] > 0.5 * off.time_breakdown_s["tp_comm"] * 0.9


def test_without_tp_nothing_changes() -> None:
    layout = Layout(tp=1, pp=8, dp=8)
    assert _step(layout).step_time_s == _step(layout, overlap_tp_backward=False).step_time_s


def test_the_hidden_part_is_bounded_by_the_column_parallel_weight_gradients() -> None:
    """A tiny GEMM (hidden 64 over TP 8) cannot hide a collective that costs more than it: what
    stays exposed is at least the collective less the window."""
    model = MODEL.model_copy(update={"hidden": 256, "ffn_hidden": 1024, "heads": 2})
    layout = Layout(tp=8, pp=1, dp=1)
    training = _train(overlap_tp_backward=True)
    ctx = make_context(model, CLUSTER, layout, training, planner.default_profile(CLUSTER))
    layer = LayerSpec()
    on = layers.layer_costs(model, layout, training, layer, ctx.dev, ctx.fabric, ctx.groups)
    off_tr = training.with_changes(overlap_tp_backward=False)
    off = layers.layer_costs(model, layout, off_tr, layer, ctx.dev, ctx.fabric, ctx.groups)
    act = flops.tokens_per_gpu(layout, training) * model.hidden * training.act_bytes
    one = comms.collective_time_s("all_reduce", act, ctx.groups.tp, ctx.fabric)
    g = [x for x in on.gemms if x.name in ("qkv", "mlp_fc1")]
    window = sum(compute.gemm_time_s(x.k, x.n, x.m, ctx.dev) for x in g)
    back_on, back_off = on.tp - on.tp_f, off.tp - off.tp_f
    assert back_off == pytest.approx(2 * one)
    assert back_on < back_off
    assert back_on >= 2 * one - window - 1e-12


def test_stacks_declare_it_where_their_code_runs_it() -> None:
    on = ("megatron-core", "nemo", "megatron-bridge", "megatron-deepspeed", "megatron-lm-2022")
    off = ("megatron-lm-2021", "megatron-deepspeed-2022", "torchtitan-eager")
    for name in on:
        assert planner.load_stack(name).overlap.tp_backward_async, name
    for name in off:
        assert not planner.load_stack(name).overlap.tp_backward_async, name
    layout = Layout(tp=8, pp=8, dp=1)
    tr = _train(precision="bf16")
    old = planner.simulate(MODEL, CLUSTER, layout, tr, stack="megatron-lm-2021")
    new = planner.simulate(MODEL, CLUSTER, layout, tr, stack="megatron-lm-2022")
    assert new.time_breakdown_s["tp_comm"] < old.time_breakdown_s["tp_comm"]
