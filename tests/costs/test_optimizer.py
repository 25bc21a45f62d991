"""The AdamW kernel (Training.optimizer_kernel, stack kernels.optimizer): fused < foreach <
per-tensor in HBM traffic, and per-tensor also waits for the host once per parameter tensor."""

from __future__ import annotations

import pytest

import planner
from planner.costs import elementwise
from planner.simulate.data_parallel import param_tensors
from planner.specs.layout import Layout, Training

MODEL = planner.load_model("llama3.1-8b")
CLUSTER = planner.load_cluster("dgx-h100")
LAYOUT = Layout(dp=8, zero=3)


def _optimizer_s(kernel: str, stack: str = "llm-foundry") -> float:
    tr = Training(seq_len=2048, global_batch=64, optimizer_kernel=kernel)
    rep = planner.simulate(MODEL, CLUSTER, LAYOUT, tr, stack=planner.load_stack(stack))
    return rep.time_breakdown_s["optimizer"]


def test_bytes_per_parameter_by_kernel() -> None:
    b = {k: elementwise.adam_bytes_per_param(k) for k in ("fused", "foreach", "per_tensor")}
    assert b == {"fused": 34, "foreach": 84, "per_tensor": 92}


def test_per_tensor_is_slowest_and_fused_fastest() -> None:
    t = {k: _optimizer_s(k) for k in ("fused", "foreach", "per_tensor")}
    assert t["fused"] < t["foreach"] < t["per_tensor"]
    # foreach is memory bound: its time is the traffic ratio of fused's
    assert t["foreach"] / t["fused"] == pytest.approx(84 / 34, rel=1e-9)


def test_parameter_tensors_of_a_dense_llama() -> None:
    # one tensor per planner GEMM (fused qkv, output projection, fused gate+up, down, as
    # Megatron's linear_qkv / linear_proj / linear_fc1 / linear_fc2 and MPT's Wqkv / out_proj /
    # up_proj / down_proj) and two norms per layer; embedding, head, final norm
    assert param_tensors(MODEL, Layout(), MODEL.layers) == pytest.approx(6 * 32 + 3)
    moe = planner.load_model("mixtral-8x7b")
    assert param_tensors(moe, Layout(ep=8, dp=8), moe.layers) < param_tensors(
        moe, Layout(), moe.layers
    )


def test_stacks_name_their_optimizer() -> None:
    from planner.stacks import stack_training

    tr = Training(seq_len=2048, global_batch=8)
    got = {
        s: stack_training(planner.load_stack(s), MODEL, tr).optimizer_kernel
        for s in ("llm-foundry", "torchtitan-eager", "megatron-core")
    }
    assert got == {
        "llm-foundry": "per_tensor",
        "torchtitan-eager": "foreach",
        "megatron-core": "fused",
    }
