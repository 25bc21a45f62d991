"""ZeRO-3 collectives as DeepSpeed 0.3 issued them (planner/simulate/data_parallel.py) and the
pipeline p2p overlap of the interleaved schedule (planner/simulate/stages.py rank_costs).

Directions and closed forms only: per-tensor list collectives cost more than per-layer ones and
grow with the group, nothing of them overlaps, full recompute adds one gather pass, and an
overlapped p2p never costs more than an exposed one.
"""

from __future__ import annotations

import pytest

import planner
from planner.costs import comms, memory
from planner.simulate import simulate_step
from planner.simulate.data_parallel import dp_traffic, owned_params, param_tensors
from planner.simulate.stages import layer_stack, make_context, params_per_gpu
from planner.specs.layout import Layout, Training


def _dp(model, cluster, layout: Layout, training: Training):
    ctx = make_context(model, cluster, layout, training, planner.default_profile(cluster))
    stack = layer_stack(ctx)
    params = params_per_gpu(ctx, stack)
    return ctx, params, dp_traffic(ctx, stack, params)


def _zero3(dp: int, collectives: str, **kw) -> Layout:
    return Layout(dp=dp, zero=3, zero3_collectives=collectives, **kw)


def test_per_tensor_list_collectives_match_their_closed_form(llama8b, a100):
    training = Training(seq_len=2048, global_batch=64, recompute="none")
    ctx, params, dp = _dp(llama8b, a100, _zero3(64, "per_tensor_list"), training)
    n = param_tensors(llama8b, ctx.layout, params.stage_layers)
    copies = 64 * ctx.dev.mem_fixed_s
    group = ctx.groups.dp_cp
    ag = n * (
        comms.collective_time_s(
            "all_gather", params.dense * memory.param_gather_bytes(training) / n, group, ctx.fabric
        )
        + copies
    )
    rs = n * (
        comms.collective_time_s(
            "reduce_scatter", params.dense * memory.grad_bytes(training) / n, group, ctx.fabric
        )
        + copies
    )
    assert dp.per_mb == pytest.approx(2 * ag + rs, rel=1e-12)
    assert dp.per_mb == dp.raw_per_mb  # nothing overlaps: a device synchronize before each
    assert dp.per_mb_f == pytest.approx(ag, rel=1e-12)


def test_full_recompute_gathers_once_more(llama8b, a100):
    base = dict(seq_len=2048, global_batch=64)
    _, _, none = _dp(llama8b, a100, _zero3(64, "per_tensor_list"), Training(**base))
    _, _, full = _dp(
        llama8b, a100, _zero3(64, "per_tensor_list"), Training(**base, recompute="full")
    )
    assert full.per_mb == pytest.approx(none.per_mb + none.per_mb_f, rel=1e-12)


def test_per_tensor_list_costs_more_and_grows_with_the_group(llama8b, a100):
    training = Training(seq_len=2048, global_batch=512)
    per_layer = _dp(llama8b, a100, _zero3(64, "per_layer"), training)[2].raw_per_mb
    small = _dp(llama8b, a100, _zero3(64, "per_tensor_list"), training)[2].per_mb
    big = _dp(llama8b, a100, _zero3(256, "per_tensor_list"), training)[2].per_mb
    assert small > per_layer
    assert big > small  # ring latency and one copy per rank: linear in the group


def test_zero3_2021_stack_is_slower_than_modern_deepspeed(a100):
    gpt = planner.load_model("gpt3-1.3b")  # the 2021 code's model: GeLU, multi-head, tied
    layout = Layout(dp=128, zero=3)
    training = Training(seq_len=2048, global_batch=128, recompute="full", precision="fp16")
    prof = planner.default_profile(a100)
    old = simulate_step(
        gpt, a100, layout, training, prof, stack=planner.load_stack("deepspeed-zero3-2021")
    )
    new = simulate_step(
        gpt, a100, layout, training, prof, stack=planner.load_stack("deepspeed-zero")
    )
    assert old.time_breakdown_s["dp_comm"] > new.time_breakdown_s["dp_comm"]
    assert old.step_time_s > new.step_time_s


@pytest.mark.parametrize("vpp", [2, 4])
def test_interleaved_p2p_overlap_hides_steady_state_hops(llama70b, h100, vpp):
    training = Training(seq_len=8192, global_batch=128)
    prof = planner.default_profile(h100)
    kw = dict(tp=8, pp=4, dp=2, vpp=vpp, sequence_parallel=True)
    off = simulate_step(llama70b, h100, Layout(**kw, overlap_pp_comm=False), training, prof)
    on = simulate_step(llama70b, h100, Layout(**kw, overlap_pp_comm=True), training, prof)
    assert off.time_breakdown_s["pp_comm"] > 0
    assert on.time_breakdown_s["pp_comm"] < off.time_breakdown_s["pp_comm"]
    assert on.step_time_s < off.step_time_s
    # the fill and drain still wait for their hops: the bubble does not shrink
    assert on.time_breakdown_s["pipeline_bubble"] >= off.time_breakdown_s["pipeline_bubble"]


def test_p2p_overlap_needs_the_interleaved_schedule(llama70b, h100):
    training = Training(seq_len=8192, global_batch=128)
    prof = planner.default_profile(h100)
    kw = dict(tp=8, pp=4, dp=2, sequence_parallel=True)
    off = simulate_step(llama70b, h100, Layout(**kw, overlap_pp_comm=False), training, prof)
    on = simulate_step(llama70b, h100, Layout(**kw, overlap_pp_comm=True), training, prof)
    assert on.step_time_s == off.step_time_s


def test_stacks_set_the_p2p_overlap_as_their_source_says():
    from planner.stacks import apply_stack

    model = planner.load_model("llama3.1-70b")
    layout, training = Layout(tp=8, pp=4, dp=2, vpp=2), Training(seq_len=4096, global_batch=64)
    for name, want in [("megatron-core", True), ("nemo", True), ("megatron-lm-2021", False)]:
        got, _ = apply_stack(planner.load_stack(name), model, layout, training)
        assert got.overlap_pp_comm is want, name
    got, _ = apply_stack(planner.load_stack("deepspeed-zero3-2021"), model, Layout(dp=8), training)
    assert got.zero3_collectives == "per_tensor_list"


def test_fsdp2_copy_out_adds_two_copies_per_micro_batch(llama8b, h100):
    from planner.simulate.data_parallel import fsdp2_copies_s

    training = Training(seq_len=4096, global_batch=64)
    kw = dict(dp=8, zero=3, overlap_zero3_param_gather=False)
    ctx, params, plain = _dp(llama8b, h100, Layout(**kw, zero3_collectives="per_layer"), training)
    _, _, fsdp2 = _dp(llama8b, h100, Layout(**kw, zero3_collectives="per_layer_copy_out"), training)
    copy_out, rs_in = fsdp2_copies_s(ctx, params)
    assert copy_out > 0 and rs_in > 0
    # gathered bytes read and written once per gather: forward and backward
    assert fsdp2.per_mb == pytest.approx(plain.per_mb + 2 * copy_out + rs_in, rel=1e-12)
    # with prefetch the copy-out still shows: it runs on the compute stream
    on = dict(dp=8, zero=3, overlap_zero3_param_gather=True)
    hidden = _dp(llama8b, h100, Layout(**on, zero3_collectives="per_layer"), training)[2]
    shown = _dp(llama8b, h100, Layout(**on, zero3_collectives="per_layer_copy_out"), training)[2]
    assert shown.per_mb >= hidden.per_mb + 2 * copy_out - 1e-15


def test_torchtitan_stacks_copy_out_and_fsdp1_does_not():
    from planner.stacks import apply_stack

    model = planner.load_model("llama3.1-8b")
    layout, training = Layout(dp=8, zero=3), Training(seq_len=4096, global_batch=64)
    for name, want in [
        ("torchtitan-eager", "per_layer_copy_out"),
        ("torchtitan-compiled", "per_layer_copy_out"),
        ("llm-foundry", "per_layer"),
        ("megatron-core", "per_layer"),
    ]:
        got, _ = apply_stack(planner.load_stack(name), model, layout, training)
        assert got.zero3_collectives == want, name


@pytest.mark.parametrize("ep", [8, 64])
def test_optimizer_owns_the_shard_its_memory_holds(ep):
    """The AdamW update runs over the state this GPU holds: dense parameters sharded over DP,
    experts over their own data-parallel group (dp / ep), as the optimizer-state memory counts
    them (tests/simulate/test_batch.py checks the search path's figures against this one)."""
    model = planner.load_model("gpt-oss-120b")
    cluster = planner.load_cluster("dgx-b200")
    layout = Layout(dp=64, ep=ep, zero=1)
    training = Training(seq_len=4096, global_batch=512, micro_batch=1, recompute="full")
    ctx, params, _ = _dp(model, cluster, layout, training)
    owned = owned_params(ctx, params)
    held = memory.state_bytes(params.dense, params.stage_experts, layout, training).optimizer
    assert owned * memory.optimizer_state_bytes(training) == pytest.approx(held, rel=1e-9)
    assert owned > params.local / 64  # experts shard over dp / ep ranks, not over all 64
