"""Host-bound MoE layers, selective recompute modules, and what validation reads from a case."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

import planner
from planner.costs import host, memory
from planner.costs.flops import Gemm
from planner.errors import PlannerError
from planner.specs.layout import Layout, Training
from planner.validate import Case, case_inputs
from planner.validate.inputs import V1_MODEL_KEYS


@pytest.fixture(scope="module")
def b200():
    return planner.load_cluster("dgx-b200")


@pytest.fixture(scope="module")
def qwen30():
    return planner.load_model("qwen3-30b-a3b")


def _qwen_run(mb: int) -> tuple[Layout, Training]:
    return (
        Layout(dp=8, ep=8),
        Training(seq_len=4096, global_batch=512, micro_batch=mb, precision="fp8"),
    )


# ---------------------------------------------------------------------------- host op counts


def test_grouped_gemm_issues_one_launch_and_one_cast_per_local_expert():
    dense = (Gemm("qkv", 4096, 1024, 1024), Gemm("attn_out", 4096, 1024, 1024))
    grouped = (*dense, Gemm("expert_fc1", 256, 512, 1024, 16.0))
    base = host.forward_ops(dense, 10.0, True, 0.0, False, 1)
    more = host.forward_ops(grouped, 10.0, True, 0.0, False, 1)
    # 16 GEMM launches; 15 extra FP8 casts beyond the one per entry the kernel count holds
    assert more - base == pytest.approx(16 + 15)
    assert host.forward_ops(grouped, 10.0, False, 0.0, False, 1) - base == pytest.approx(16)


def test_moe_routing_and_dispatch_ops_counted_once_per_layer():
    g = (Gemm("qkv", 1, 1, 1),)
    plain = host.forward_ops(g, 0.0, False, 0.0, False, 8)
    assert host.forward_ops(g, 0.0, False, 0.0, True, 1) - plain == host.MOE_ROUTING_OPS
    assert (
        host.forward_ops(g, 0.0, False, 0.0, True, 8) - plain
        == host.MOE_ROUTING_OPS + host.MOE_EP_OPS
    )


def test_stall_is_issue_time_beyond_gpu_time():
    assert host.stall_s(1e-3, 10, 50e-6) == 0.0
    assert host.stall_s(1e-4, 10, 50e-6) == pytest.approx(4e-4)


# ------------------------------------------------------------------------ simulator effect


def test_host_overhead_off_by_default_in_a_zero_profile(b200, qwen30):
    layout, training = _qwen_run(1)
    prof = planner.default_profile(b200).with_host_op_us(0.0)
    rep = planner.simulate(qwen30, b200, layout, training, prof)
    assert rep.time_breakdown_s["host_overhead"] == 0.0


def test_small_micro_batch_moe_is_host_bound_and_larger_batches_amortise_it(b200, qwen30):
    prof = planner.default_profile(b200).with_host_op_us(40.0)
    shares = []
    for mb in (1, 4):
        layout, training = _qwen_run(mb)
        rep = planner.simulate(qwen30, b200, layout, training, prof)
        shares.append(rep.time_breakdown_s["host_overhead"] / rep.step_time_s)
    assert shares[0] > 0.2
    assert shares[1] < shares[0] / 2


def test_host_bound_step_says_so_in_its_assumptions(b200, qwen30, h100, llama70b):
    layout, training = _qwen_run(1)
    rep = planner.simulate(qwen30, b200, layout, training)
    (note,) = [a for a in rep.assumptions if a.startswith("host-bound")]
    assert f"{rep.time_breakdown_s['host_overhead']:.2f} s" in note
    dense = planner.simulate(
        llama70b,
        h100,
        Layout(tp=8, pp=4, dp=2, sequence_parallel=True),
        Training(seq_len=8192, global_batch=64),
    )
    assert not any(a.startswith("host-bound") for a in dense.assumptions)


def test_host_overhead_slows_the_step_by_exactly_its_category(b200, qwen30):
    layout, training = _qwen_run(1)
    base = planner.simulate(
        qwen30, b200, layout, training, planner.default_profile(b200).with_host_op_us(0.0)
    )
    slow = planner.simulate(
        qwen30, b200, layout, training, planner.default_profile(b200).with_host_op_us(40.0)
    )
    extra = slow.step_time_s - base.step_time_s
    assert extra > 0
    assert slow.time_breakdown_s["host_overhead"] == pytest.approx(extra, rel=0.05)


def test_expert_ops_are_the_post_sync_share_of_the_layer():
    g = (
        Gemm("qkv", 4096, 1024, 1024),
        Gemm("router", 4096, 128, 1024),
        Gemm("expert_fc1", 256, 512, 1024, 16.0),
        Gemm("expert_fc2", 256, 1024, 256, 16.0),
    )
    total = host.forward_ops(g, 10.0, True, 0.0, True, 8)
    after = host.expert_ops(g, True, 8)
    # 32 launches + 30 extra FP8 casts + the activation + post-sync routing + all-to-alls
    assert after == pytest.approx(32 + 30 + 1 + host.MOE_POST_SYNC_OPS + host.MOE_EP_OPS)
    assert 0 < after < total


def test_dropless_sync_keeps_the_host_from_banking_attention_time(b200, qwen30):
    """Dropless: the per-layer token-count sync splits the layer, so a launch-heavy expert
    segment waits for the host even when the GPU-heavy attention would cover it; with static
    (token-drop) shapes the host may carry its lead across the layer."""
    layout = Layout(dp=8, ep=8)
    training = Training(seq_len=4096, global_batch=512, micro_batch=4, precision="fp8")
    prof = planner.default_profile(b200).with_host_op_us(40.0)
    moe = qwen30.moe.model_copy(update={"capacity_factor": 1.0})
    drop = qwen30.model_copy(update={"moe": moe})
    dropless = planner.simulate(qwen30, b200, layout, training, prof)
    static = planner.simulate(drop, b200, layout, training, prof)
    assert dropless.time_breakdown_s["host_overhead"] > static.time_breakdown_s["host_overhead"]


def test_large_dense_layers_never_wait_for_the_host(h100, llama70b):
    prof = planner.default_profile(h100).with_host_op_us(40.0)
    layout = Layout(tp=8, pp=4, dp=2, sequence_parallel=True)
    training = Training(seq_len=8192, global_batch=64, micro_batch=1)
    rep = planner.simulate(llama70b, h100, layout, training, prof)
    assert rep.time_breakdown_s["host_overhead"] == 0.0


# ------------------------------------------------------------------ selective recompute modules


@pytest.fixture(scope="module")
def deepseek():
    return planner.load_model("deepseek-v3")


def _act(model, layer, **training_kw):
    layout = Layout(pp=16, dp=16, ep=8)
    training = Training(seq_len=4096, global_batch=2048, **training_kw)
    return memory.layer_activation_bytes(model, layout, training, layer)


def test_default_selective_is_core_attention(deepseek):
    layer = deepseek.layer_kinds()[-1][0]
    assert _act(deepseek, layer, recompute="selective") == _act(
        deepseek, layer, recompute="selective", recompute_modules=("core_attn",)
    )


def test_mla_up_projection_recompute_drops_the_up_projected_heads(deepseek):
    layer = deepseek.layer_kinds()[-1][0]
    m = deepseek.mla
    keep = _act(deepseek, layer, recompute="selective", recompute_modules=("core_attn",))
    drop = _act(deepseek, layer, recompute="selective", recompute_modules=("mla_up_proj",))
    heads_bytes = (
        2 * 4096 * deepseek.heads * (2 * (m.qk_nope_head_dim + m.qk_rope_head_dim) + m.v_head_dim)
    )
    assert keep - drop == pytest.approx(heads_bytes)


def test_moe_act_and_moe_recompute_shrink_the_expert_activations(deepseek):
    layer = deepseek.layer_kinds()[-1][0]
    base = _act(deepseek, layer, recompute="selective", recompute_modules=("core_attn",))
    act = _act(deepseek, layer, recompute="selective", recompute_modules=("core_attn", "moe_act"))
    whole = _act(deepseek, layer, recompute="selective", recompute_modules=("core_attn", "moe"))
    routed = 4096 * deepseek.moe.top_k * deepseek.moe.expert_ffn_hidden * 2  # bf16 fc2 input
    assert base - act == pytest.approx(routed)
    assert whole < act


def test_recompute_modules_cost_backward_time(b200, deepseek):
    layout = Layout(pp=16, dp=16, ep=8)
    prof = planner.default_profile(b200)

    def run(modules):
        tr = Training(
            seq_len=4096,
            global_batch=2048,
            recompute="selective",
            recompute_modules=modules,
            precision="fp8",
        )
        return planner.simulate(deepseek, b200, layout, tr, prof)

    attn = run(("core_attn",))
    more = run(("core_attn", "mla_up_proj", "moe_act"))
    assert more.time_breakdown_s["recompute"] > attn.time_breakdown_s["recompute"]
    assert more.peak_memory_gib < attn.peak_memory_gib
    assert more.hfu_pct > attn.hfu_pct * more.tokens_per_s / attn.tokens_per_s


def test_recompute_modules_need_selective():
    with pytest.raises(ValidationError, match="recompute: selective"):
        Training(seq_len=8, global_batch=1, recompute="full", recompute_modules=("moe_act",))
    with pytest.raises(ValidationError):
        Training(seq_len=8, global_batch=1, recompute="selective", recompute_modules=("attn",))


def test_cli_rejects_unknown_recompute_module(capsys):
    from planner.cli import main

    argv = "simulate --model llama3.1-8b --cluster dgx-h100 --gpus 8 --global-batch 64"
    rc = main([*argv.split(), "--recompute", "selective", "--recompute-modules", "core_attn,attn"])
    err = capsys.readouterr().err
    assert rc != 0
    assert "recompute_modules" in err and "Traceback" not in err


# ------------------------------------------------------------------- what validation reads


def _case(**over) -> Case:
    raw = {
        "id": "x",
        "source": "test, 2025",
        "quality": "partial",
        "model": planner.load_model("deepseek-v3").model_dump(
            include={"name", "moe", *V1_MODEL_KEYS}
        ),
        "cluster": "dgx-b200",
        "num_gpus": 256,
        "framework": "megatron-bridge",
        "layout": {"tp": 1, "pp": 16, "dp": 16, "ep": 8, "zero": 1},
        "training": {"seq_len": 4096, "global_batch": 2048, "micro_batch": 1},
        "measured": {"tokens_per_s_per_gpu": 1000.0},
    }
    raw.update(over)
    return Case.model_validate(raw)


def test_planner_error_names_layout_for_bad_world_size():
    # 120 GPUs hold no whole number of 16-stage copies (a multiple of 16 would read the dp
    # num_gpus gives: tests/validate/test_schemas.py)
    with pytest.raises(PlannerError, match="num_gpus"):
        case_inputs(_case(num_gpus=120))


# ------------------------------------------------------------------ attention head dimension


def test_head_dim_factor_is_one_at_128_and_lower_for_small_heads():
    from planner.costs import compute

    fwd, bwd = compute.ATTN_DIM_HALF["fused"]
    assert compute.head_dim_factor(128, fwd) == pytest.approx(1.0)
    # FlashAttention-3 on H100: d=64 runs at 0.77 (fwd) and 0.85 (bwd) of d=128
    assert compute.head_dim_factor(64, fwd) == pytest.approx(473 / 616, abs=0.01)
    assert compute.head_dim_factor(64, bwd) == pytest.approx(474 / 561, abs=0.01)
    assert compute.head_dim_factor(1024, fwd) == 1.2
    assert compute.head_dim_factor(1024, fwd, compute.ATTN_DIM_FACTOR_MAX["cudnn"]) == 1.0
    assert compute.head_dim_factor(64, 0.0) == 1.0
    # cuDNN 9.1.1 on H100 (same paper): d=64 at 0.72 (fwd) and 0.84 (bwd) of d=128
    c_fwd, c_bwd = compute.ATTN_DIM_HALF["cudnn"]
    assert compute.head_dim_factor(64, c_fwd) == pytest.approx(388 / 539, abs=0.01)
    assert compute.head_dim_factor(64, c_bwd) == pytest.approx(433 / 516, abs=0.01)


def test_small_heads_make_attention_slower_per_flop(h100):
    prof = planner.default_profile(h100)
    dev = planner.costs.compute.make_device(h100.accelerator, prof, "bf16")
    f128 = planner.costs.compute.attention_time_s(1e12, 4096, dev, head_dim=128)
    f64 = planner.costs.compute.attention_time_s(1e12, 4096, dev, head_dim=64)
    assert f64[0] > f128[0] and f64[1] > f128[1]


# ------------------------------------------------------------------------ EP all-to-all overlap


def test_ep_overlap_hides_part_of_the_all_to_all(h100):
    model = planner.load_model("mixtral-8x7b")
    training = Training(seq_len=4096, global_batch=256, micro_batch=1)
    base = Layout(tp=1, pp=2, vpp=4, dp=32, ep=8)
    rep = [
        planner.simulate(model, h100, base.model_copy(update={"overlap_ep_comm": o}), training)
        for o in (False, True)
    ]
    assert 0 < rep[1].time_breakdown_s["ep_comm"] < rep[0].time_breakdown_s["ep_comm"]
    assert rep[1].step_time_s < rep[0].step_time_s


def test_ep_overlap_with_plain_pipeline_is_illegal(h100):
    model = planner.load_model("mixtral-8x7b")
    training = Training(seq_len=4096, global_batch=256, micro_batch=1)
    with pytest.raises(PlannerError, match="layout.overlap_ep_comm"):
        planner.simulate(model, h100, Layout(pp=2, dp=32, ep=8, overlap_ep_comm=True), training)


def test_search_space_offers_ep_overlap_for_moe_only(h100):
    from planner.search.space import default_space, legal_layouts

    moe = planner.load_model("mixtral-8x7b")
    dense = planner.load_model("llama3.1-8b")
    assert default_space(moe, h100, (64,), 4096).overlap_ep_comm == (False, True)
    assert default_space(dense, h100, (64,), 4096).overlap_ep_comm == (False,)
    space = default_space(moe, h100, (64,), 4096)
    training = Training(seq_len=4096, global_batch=256)
    layouts = [lay for _, lay, _ in legal_layouts(moe, h100, training, space)]
    assert any(lay.overlap_ep_comm for lay in layouts)
    # never on a layout where it is illegal or meaningless
    assert all(
        lay.ep > 1 and (lay.pp == 1 or lay.virtual_stages > 1)
        for lay in layouts
        if lay.overlap_ep_comm
    )


def test_megatron_args_carry_ep_overlap():
    from planner.search.export import megatron_args

    model = planner.load_model("mixtral-8x7b")
    args = megatron_args(
        model,
        8,
        Layout(dp=8, ep=8, overlap_ep_comm=True),
        Training(seq_len=4096, global_batch=64),
    )
    assert "--overlap-moe-expert-parallel-comm" in args


def test_cli_host_op_us_overrides_the_profile(capsys):
    import json

    from planner.cli import main

    argv = [
        "simulate",
        "--model",
        "qwen3-30b-a3b",
        "--cluster",
        "dgx-b200",
        "--gpus",
        "8",
        "--ep",
        "8",
        "--global-batch",
        "64",
        "--precision",
        "fp8",
        "--json",
    ]
    assert main(argv) == 0
    shipped = json.loads(capsys.readouterr().out)
    assert main([*argv, "--host-op-us", "0"]) == 0
    off = json.loads(capsys.readouterr().out)
    assert shipped["time_breakdown_s"]["host_overhead"] > 0
    assert off["time_breakdown_s"]["host_overhead"] == 0
    assert main([*argv, "--host-op-us", "-3"]) != 0
    assert "--host-op-us" in capsys.readouterr().err


def test_advise_offers_cuda_graphs_only_when_the_host_binds(b200, qwen30, h100, llama70b):
    from planner.advise import advise

    layout, training = _qwen_run(1)
    names = {lv.name: lv for lv in advise(qwen30, b200, layout, training)}
    assert "CUDA graphs" in names
    assert names["CUDA graphs"].gain_pct > 50
    dense = advise(
        llama70b,
        h100,
        Layout(tp=8, pp=4, dp=2, sequence_parallel=True),
        Training(seq_len=8192, global_batch=64),
    )
    assert "CUDA graphs" not in {lv.name for lv in dense}


def test_cli_prints_the_expert_split_and_recompute_modules(capsys):
    from planner.cli import main

    argv = "simulate --model deepseek-v3 --cluster dgx-b200 --gpus 256 --pp 16 --ep 8"
    extra = "--global-batch 2048 --precision fp8 --recompute selective --recompute-modules"
    assert main([*argv.split(), *extra.split(), "mla_up_proj,moe_act"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "32 per GPU (EP 8)" in out and "1,024 tokens per expert" in out
    assert "recompute selective (mla_up_proj, moe_act)" in out


# ------------------------------------------------------- biased experts' per-expert bias loop


def _oss_layer_work(unfused: tuple[str, ...], ep: int, expert_bias: bool = True):
    from planner.costs import elementwise
    from planner.costs.flops import layer_flops

    model = planner.load_model("gpt-oss-120b")
    assert model.moe is not None and model.moe.expert_bias
    model = model.model_copy(
        update={"moe": model.moe.model_copy(update={"expert_bias": expert_bias})}
    )
    layout = Layout(dp=ep, ep=ep)
    training = Training(seq_len=4096, global_batch=64, micro_batch=1)
    layer = next(spec for spec, _ in model.layer_kinds() if spec.mixer.window is None)
    gemms = tuple(layer_flops(model, layout, training, layer).gemms)
    return elementwise.layer_elementwise(
        model, layout, 4096.0, layer, gemms, None, unfused=unfused
    ), model


def test_expert_bias_loop_adds_fp32_passes_and_two_launches_per_local_expert():
    from planner.costs import elementwise

    fused, model = _oss_layer_work((), 8)
    loop, _ = _oss_layer_work(("expert_bias",), 8)
    routed = 4096.0 * model.moe.top_k
    # fp32 product, fp32 sum, fp32 concatenation, cast back: 24 + 2 x 2 bytes per element
    assert loop.fwd_bytes - fused.fwd_bytes == pytest.approx(routed * model.hidden * 28.0)
    assert loop.expert_bias_bytes == pytest.approx(routed * model.hidden * 28.0)
    # 128 experts over EP 8: 16 local experts, a multiply and an add each, then cat and cast
    assert loop.fwd_kernels - fused.fwd_kernels == pytest.approx(2 * 16 + 2)
    assert loop.expert_bias_kernels == pytest.approx(2 * 16 + 2)
    more_experts, _ = _oss_layer_work(("expert_bias",), 64)  # 2 local experts
    assert more_experts.expert_bias_kernels == pytest.approx(2 * 2 + 2)
    assert elementwise.expert_bias_loop_work(10.0, 4, 3.0, 4.0) == (10.0 * 4 * 32.0, 8.0)


def test_expert_bias_costs_nothing_without_biased_experts_or_with_a_fused_bias():
    fused, _ = _oss_layer_work((), 8)
    unbiased, _ = _oss_layer_work(("expert_bias",), 8, expert_bias=False)
    assert unbiased.fwd_bytes == fused.fwd_bytes and unbiased.expert_bias_kernels == 0.0


def test_megatron_core_stacks_add_the_expert_bias_per_expert_and_it_costs_time():
    model = planner.load_model("gpt-oss-120b")
    cluster = planner.load_cluster("dgx-b200")
    layout = Layout(dp=8, ep=8)
    training = Training(seq_len=4096, global_batch=64, micro_batch=1)
    prof = planner.default_profile(cluster)
    loop_stack = planner.load_stack("megatron-bridge")
    assert not loop_stack.kernels.fused_expert_bias
    fused_stack = loop_stack.model_copy(
        update={"kernels": loop_stack.kernels.model_copy(update={"fused_expert_bias": True})}
    )
    slow = planner.simulate(model, cluster, layout, training, prof, stack=loop_stack)
    fast = planner.simulate(model, cluster, layout, training, prof, stack=fused_stack)
    assert slow.step_time_s > fast.step_time_s
    assert (
        slow.time_breakdown_s["compute_memory_bound"]
        > fast.time_breakdown_s["compute_memory_bound"]
    )
    # a model without biased experts is not affected by the stack's choice
    qwen = planner.load_model("qwen3-30b-a3b")
    a = planner.simulate(qwen, cluster, layout, training, prof, stack=loop_stack)
    b = planner.simulate(qwen, cluster, layout, training, prof, stack=fused_stack)
    assert a.step_time_s == pytest.approx(b.step_time_s)
