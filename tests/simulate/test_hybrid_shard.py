"""Hybrid sharding (Layout.dp_shard: HSDP, Megatron-Core's partial distributed optimizer).

The ZeRO / FSDP state is sharded within groups of dp_shard DP x CP ranks and replicated across
them: each GPU holds dp*cp / dp_shard times the sharded state, the dense gradients are
reduce-scattered within a group and each shard all-reduced across the groups, and parameters
are gathered within a group (planner/simulate/data_parallel.py).
"""

from __future__ import annotations

import pytest

import planner
from planner.costs import comms, memory
from planner.errors import PlannerError
from planner.fixes import memory_fixes
from planner.simulate import simulate_step
from planner.simulate.data_parallel import dp_traffic
from planner.simulate.stages import layer_stack, make_context, params_per_gpu
from planner.specs.layout import Layout, Training

TRAINING = Training(seq_len=4096, global_batch=128, micro_batch=1, recompute="full")


def _run(model: str, cluster: str, stack: str = "megatron-core", **layout):
    m, c = planner.load_model(model), planner.load_cluster(cluster)
    return simulate_step(
        m,
        c,
        Layout(**layout),
        TRAINING,
        planner.default_profile(c),
        stack=planner.load_stack(stack),
    )


@pytest.mark.parametrize("zero", [1, 2, 3])
def test_sharded_state_per_gpu_grows_by_the_replica_count(zero: int) -> None:
    """Optimizer state (and from ZeRO 2 the gradients, from ZeRO 3 the weights) per GPU is the
    model's over the shard group: a group of 8 of 64 ranks holds 8 times what all 64 do."""
    full = _run("llama3.1-8b", "dgx-h100", dp=64, zero=zero)
    hybrid = _run("llama3.1-8b", "dgx-h100", dp=64, zero=zero, dp_shard=8)
    # the stage's optimizer state, GiB, is sharded over the group
    assert hybrid.memory_breakdown_gib["optimizer_states"] == pytest.approx(
        8 * full.memory_breakdown_gib["optimizer_states"], rel=1e-9
    )
    grads = ("gradients", 8.0 if zero >= 2 else 1.0)
    assert hybrid.memory_breakdown_gib[grads[0]] == pytest.approx(
        grads[1] * full.memory_breakdown_gib[grads[0]], rel=0.02
    )
    same = _run("llama3.1-8b", "dgx-h100", dp=64, zero=zero, dp_shard=64)
    assert same.tokens_per_s_per_gpu == full.tokens_per_s_per_gpu
    assert same.peak_memory_gib == full.peak_memory_gib


def test_the_gradient_shard_is_all_reduced_across_the_groups() -> None:
    """ZeRO-1 under hybrid sharding: the reduction is a reduce-scatter within the group (one
    node here) plus an all-reduce of 1/8 of the gradients across the 8 groups (one rank per
    node), and the parameter all-gather stays in the node."""
    model, cluster = planner.load_model("llama3.1-8b"), planner.load_cluster("dgx-h100")
    layout = Layout(dp=64, zero=1, dp_shard=8, overlap_dp_grad_reduce=False)
    ctx = make_context(model, cluster, layout, TRAINING, planner.default_profile(cluster))
    assert ctx.groups.dp_shard == comms.Placement(8, 8, 1)
    assert ctx.groups.dp_replicate == comms.Placement(8, 1, 8)
    stack = layer_stack(ctx)
    params = params_per_gpu(ctx, stack)
    grad_b, gather_b = memory.grad_bytes(TRAINING), memory.param_gather_bytes(TRAINING)
    expected = (
        comms.collective_time_s(
            "reduce_scatter", params.dense * grad_b, ctx.groups.dp_shard, ctx.fabric
        )
        + comms.collective_time_s(
            "all_reduce", params.dense * grad_b / 8, ctx.groups.dp_replicate, ctx.fabric
        )
        + comms.collective_time_s(
            "all_gather", params.dense * gather_b, ctx.groups.dp_shard, ctx.fabric
        )
    )
    assert dp_traffic(ctx, stack, params).step == pytest.approx(expected, rel=1e-12)


def test_zero3_gathers_stay_inside_the_node_under_hybrid_sharding() -> None:
    """FSDP's per-layer all-gathers leave the scale-up domain only without hybrid sharding:
    with the shard group one node, the forward's exposed gather time on a 50 Gb/s fabric
    falls."""
    model, cluster = planner.load_model("llama3.1-8b"), planner.load_cluster("hgx-a100-80gb-50g")
    out = {}
    for shard in (None, 8):
        layout = Layout(dp=64, zero=3, dp_shard=shard, overlap_zero3_param_gather=False)
        ctx = make_context(model, cluster, layout, TRAINING, planner.default_profile(cluster))
        stack = layer_stack(ctx)
        out[shard] = dp_traffic(ctx, stack, params_per_gpu(ctx, stack))
    assert out[8].per_mb_f < out[None].per_mb_f


def test_hybrid_sharding_is_refused_where_it_cannot_run() -> None:
    """dp_shard must tile DP x CP, needs a ZeRO stage, and a stack that runs it."""
    model, cluster = planner.load_model("llama3.1-8b"), planner.load_cluster("dgx-h100")
    for layout, field in (
        (Layout(dp=64, zero=1, dp_shard=6), "layout.dp_shard"),
        (Layout(dp=64, zero=0, dp_shard=8), "layout.dp_shard"),
    ):
        with pytest.raises(PlannerError) as err:
            planner.check_layout(model, cluster, layout, TRAINING)
        assert err.value.field == field
    with pytest.raises(PlannerError, match="deepspeed-zero.*hybrid sharding"):
        _run("llama3.1-8b", "dgx-h100", stack="deepspeed-zero", dp=64, zero=3, dp_shard=8)


def test_a_hybrid_layout_that_does_not_fit_is_offered_wider_shard_groups() -> None:
    """Memory fixes include a wider shard group, up to the whole DP x CP group."""
    model, cluster = planner.load_model("llama3.1-70b"), planner.load_cluster("dgx-h100")
    layout = Layout(dp=128, zero=3, dp_shard=8)
    training = Training(seq_len=8192, global_batch=256, micro_batch=1, recompute="full")
    stack = planner.load_stack("torchtitan-eager")
    fixes = memory_fixes(
        model, cluster, layout, training, planner.default_profile(cluster), stack=stack
    )
    shards = [f.layout.dp_shard for f in fixes if f.flags and f.flags[0].startswith("--dp-shard")]
    assert shards and min(shards) > 8


def test_the_vector_path_prices_hybrid_layouts_as_the_one_layout_path() -> None:
    """The search's vector path hands a hybrid layout to the one-layout path."""
    from planner.simulate.batch import BatchSimulator
    from planner.simulate.vector import figures_many

    model, cluster = planner.load_model("llama3.1-8b"), planner.load_cluster("dgx-h100")
    sim = BatchSimulator(model, cluster, planner.default_profile(cluster), None)
    cands = [(64, Layout(dp=64, zero=1, dp_shard=shard), TRAINING) for shard in (None, 8, 16)]
    many = figures_many(sim, cands)
    one = [sim.figures(layout, training) for _, layout, training in cands]
    assert [f.tokens_per_s_per_gpu for f in many] == [f.tokens_per_s_per_gpu for f in one]
    assert len({f.tokens_per_s_per_gpu for f in many}) == 3
