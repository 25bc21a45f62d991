"""Attention with materialised scores issues its own kernels, and a host-bound step pays them."""

from __future__ import annotations

import pytest

import planner
from planner.costs import host
from planner.costs.flops import Gemm
from planner.specs.layout import Layout, Training
from planner.stacks import apply_stack


def test_unfused_attention_core_is_four_launches_and_one_more_with_dropout():
    assert host.core_kernels("unfused", True, False) == host.UNFUSED_ATTENTION_KERNELS == 4.0
    assert host.core_kernels("unfused", True, True) == 5.0
    for kernel in ("fused", "cudnn", "flash2"):
        assert host.core_kernels(kernel, True, True) == 1.0
    # a state-space or linear-attention mixer is one fused scan whatever the attention kernel
    assert host.core_kernels("unfused", False, True) == 1.0


def test_forward_ops_counts_the_core_launches():
    g = (Gemm("qkv", 1024, 3072, 1024), Gemm("attn_out", 1024, 1024, 1024))
    one = host.forward_ops(g, 6.0, False, 0.0, False, 1)
    five = host.forward_ops(g, 6.0, False, 0.0, False, 1, core=5.0)
    assert five - one == pytest.approx(4.0)


@pytest.fixture(scope="module")
def tiny_host_bound():
    cluster = planner.load_cluster("dgx-a100-80gb")
    profile = planner.default_profile(cluster).with_host_op_us(500.0)  # the host binds
    return planner.load_model("gpt-tiny"), cluster, profile


def test_a_host_bound_step_pays_the_unfused_core_launches(tiny_host_bound):
    model, cluster, profile = tiny_host_bound
    layout = Layout(dp=1)

    def step(kernel: str) -> float:
        tr = Training(
            seq_len=1024,
            global_batch=1,
            micro_batch=1,
            precision="fp16",
            attention_kernel=kernel,
            dropout=True,
        )
        return planner.simulate(model, cluster, layout, tr, profile=profile).step_time_s

    # forward 1x and backward 2x the four extra launches of every layer, at 500 us each
    extra = model.layers * (1 + host.BACKWARD_OP_FACTOR) * 4.0 * 500e-6
    assert step("unfused") - step("flash2") >= 0.9 * extra


def test_the_legacy_megatron_stacks_issue_more_backward_ops_than_transformer_engine():
    legacy = ("megatron-lm-2021", "megatron-lm-2022", "megatron-deepspeed-2022")
    te = planner.load_stack("megatron-core").execution.backward_ops
    assert te == host.BACKWARD_OP_FACTOR
    for stack_id in legacy:
        assert planner.load_stack(stack_id).execution.backward_ops > te
    # the stack's figure reaches the training it runs
    model = planner.load_model("gpt-tiny")
    _, tr = apply_stack(
        planner.load_stack("megatron-lm-2021"),
        model,
        Layout(dp=1),
        Training(seq_len=1024, global_batch=1, micro_batch=1),
    )
    assert tr.backward_host_ops == planner.load_stack("megatron-lm-2021").execution.backward_ops


def test_a_host_bound_backward_pays_its_extra_ops(tiny_host_bound):
    model, cluster, profile = tiny_host_bound

    def host_s(factor: float) -> float:
        tr = Training(seq_len=1024, global_batch=1, micro_batch=1, backward_host_ops=factor)
        rep = planner.simulate(model, cluster, Layout(dp=1), tr, profile=profile)
        return rep.time_breakdown_s["host_overhead"]

    two, three = host_s(2.0), host_s(3.0)
    assert three > two
    # one more forward's worth of ops per layer, at 500 us each, at least 10 ops per layer
    assert three - two >= model.layers * 10 * 500e-6 * 0.9


def test_megatron_fused_softmax_runs_only_on_kernel_friendly_shapes():
    from planner.costs.compute import megatron_fused_softmax

    # score matrices per micro-batch on a GPU (micro-batch x heads / TP) a multiple of 4
    assert megatron_fused_softmax(1, 4, 1024)
    assert not megatron_fused_softmax(1, 2, 1024)  # 16 heads on TP 8, micro-batch 1
    assert megatron_fused_softmax(2, 2, 1024)
    # keys between 17 and 4096, a multiple of 4
    assert not megatron_fused_softmax(1, 16, 8192)
    assert not megatron_fused_softmax(1, 16, 16)
    assert not megatron_fused_softmax(1, 16, 1022)
    # 128 keys or fewer: two batches per warp, eight per block
    assert not megatron_fused_softmax(1, 4, 64)
    assert megatron_fused_softmax(2, 4, 64)


def test_pytorch_softmax_path_moves_more_bytes_than_the_fused_kernel():
    from planner.costs import compute

    cluster = planner.load_cluster("dgx-a100-80gb")
    dev = compute.make_device(
        cluster.accelerator, planner.default_profile(cluster), "fp16", "unfused"
    )
    args = (2048.0, 1024.0, 2.0, 64.0, 64.0, True, dev)
    f_fused, b_fused = compute.unfused_attention_time_s(*args, fused_softmax=True)
    f_torch, b_torch = compute.unfused_attention_time_s(*args, fused_softmax=False)
    assert f_torch > f_fused and b_torch > b_fused
    scores = 2.0 * 2048.0 * 1024.0  # heads x tokens x keys
    extra = (compute.TORCH_SOFTMAX_BYTES[0] - 4.0) * scores / dev.hbm_bytes_per_s
    assert f_torch - f_fused == pytest.approx(extra, rel=1e-9)
    # backward: the fused kernel reads its output and the gradient and writes the gradient
    extra_b = (compute.TORCH_SOFTMAX_BYTES[1] - 6.0) * scores / dev.hbm_bytes_per_s
    assert b_torch - b_fused == pytest.approx(extra_b, rel=1e-9)


def test_dropout_moves_five_bytes_per_score_each_way():
    """Dropout writes its output and a 1 B mask forward; backward reads the gradient and the
    mask and writes the gradient: 2 + 2 + 1 B per 2-byte score both ways, not twice back."""
    from planner.costs import compute

    cluster = planner.load_cluster("dgx-a100-80gb")
    dev = compute.make_device(
        cluster.accelerator, planner.default_profile(cluster), "fp16", "unfused"
    )
    on = compute.unfused_attention_time_s(2048.0, 1024.0, 2.0, 64.0, 64.0, True, dev)
    off = compute.unfused_attention_time_s(2048.0, 1024.0, 2.0, 64.0, 64.0, False, dev)
    per_pass = 5.0 * 2.0 * 2048.0 * 1024.0 / dev.hbm_bytes_per_s
    assert on[0] - off[0] == pytest.approx(per_pass, rel=1e-9)
    assert on[1] - off[1] == pytest.approx(per_pass, rel=1e-9)


def test_pytorch_softmax_path_adds_four_launches_to_the_core():
    fused = host.core_kernels("unfused", True, True, fused_softmax=True)
    torch_path = host.core_kernels("unfused", True, True, fused_softmax=False)
    assert torch_path - fused == host.TORCH_SOFTMAX_EXTRA_KERNELS == 4.0
    # a fused attention kernel has no softmax of its own to fall back from
    assert host.core_kernels("flash2", True, True, fused_softmax=False) == 1.0
