"""torchtitan's op-level selective checkpointing (``alternate_mm``): between none and full."""

from __future__ import annotations

import pytest

import planner
from planner.costs.flops import Gemm
from planner.costs.memory import layer_activation_bytes
from planner.costs.recompute import alternate_mm_gemms
from planner.specs.layout import Layout, Training

MODEL = planner.load_model("llama3.1-8b")
CLUSTER = planner.load_cluster("dgx-h100")
LAYOUT = Layout(tp=1, dp=8, zero=3)


def _t(recompute: str, **kw) -> Training:
    return Training(seq_len=8192, global_batch=16, micro_batch=2, recompute=recompute, **kw)


def test_saved_activations_lie_between_full_and_none():
    op = _t("selective", recompute_modules=("alternate_mm",))
    b = {
        name: layer_activation_bytes(MODEL, LAYOUT, t, False)
        for name, t in (("none", _t("none")), ("op", op), ("full", _t("full")))
    }
    assert b["full"] < b["op"] < b["none"]
    # block input + w2 output + q, v, w1, SDPA output (+ lse), 2 bytes each, per token
    m = MODEL
    per_token = 2 * (2 * m.hidden + m.q_dim + m.kv_dim + m.ffn_hidden + m.v_dim + 2 * m.heads)
    assert b["op"] == pytest.approx(per_token * 8192 * 2)


def test_step_recompute_costs_time_but_less_than_full():
    reps = {
        r: planner.simulate(MODEL, CLUSTER, LAYOUT, t)
        for r, t in (
            ("none", _t("none")),
            ("op", _t("selective", recompute_modules=("alternate_mm",))),
            ("full", _t("full")),
        )
    }
    rc = {r: rep.time_breakdown_s.get("recompute", 0.0) for r, rep in reps.items()}
    assert rc["none"] == 0.0 < rc["op"] < rc["full"]
    assert reps["full"].peak_memory_gib < reps["op"].peak_memory_gib < reps["none"].peak_memory_gib


def test_rerun_gemms_are_k_o_and_w3():
    g = (
        Gemm("qkv", 100, 4096 + 2 * 1024, 4096),
        Gemm("attn_out", 100, 4096, 4096),
        Gemm("mlp_fc1", 100, 2 * 14336, 4096),
        Gemm("mlp_fc2", 100, 4096, 14336),
    )
    names = {x.name: x for x in alternate_mm_gemms(g)}
    assert set(names) == {"attn_out", "qkv_k", "mlp_w3"}
    assert names["qkv_k"].n == 1024 and names["mlp_w3"].n == 14336
    plain = (Gemm("mlp_fc1", 100, 16384, 4096), Gemm("mlp_fc2", 100, 4096, 16384))
    assert [x.name for x in alternate_mm_gemms(plain)] == ["mlp_fc2"]


def test_torchtitan_stacks_checkpoint_at_op_level():
    for name in ("torchtitan-eager", "torchtitan-compiled", "torchtitan-compiled-float8"):
        stack = planner.load_stack(name)
        _, tr = planner.stacks.apply_stack(stack, MODEL, LAYOUT, _t("selective"))
        assert tr.selective_modules == ("alternate_mm",)


def test_moe_layers_fall_back_to_core_attn():
    ds = planner.load_model("deepseek-v3")
    lay = Layout(tp=1, dp=8, ep=8)
    a = layer_activation_bytes(ds, lay, _t("selective", recompute_modules=("alternate_mm",)), True)
    c = layer_activation_bytes(ds, lay, _t("selective", recompute_modules=("core_attn",)), True)
    assert a == c
