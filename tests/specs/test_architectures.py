"""Block-level specs: hybrid and SSM stacks, sliding windows, MoE imbalance, MTP modules."""

from __future__ import annotations

import math

import pytest

import planner
from planner.costs import flops
from planner.specs.blocks import (
    AttentionMixer,
    DenseMLP,
    LayerGroup,
    LayerSpec,
    LinearAttentionMixer,
    Mamba2Mixer,
    MoEMLP,
    NoMLP,
)
from planner.specs.model import ModelSpec, MoESpec

H100 = planner.load_cluster("dgx-h100")


def _mamba2_2p7b() -> ModelSpec:
    """state-spaces/mamba2-2.7b: 64 Mamba-2 layers, d_model 2560, no MLPs, tied 50288 vocab."""
    layer = LayerSpec(mixer=Mamba2Mixer(d_state=128, expand=2, head_dim=64), mlp=NoMLP())
    return ModelSpec(
        name="mamba2-2.7b",
        layers=64,
        hidden=2560,
        ffn_hidden=1,
        activation="swiglu",
        heads=40,
        vocab=50288,
        tied_embeddings=True,
        layer_groups=[LayerGroup(repeat=64, layers=[layer])],
    )


def _hybrid() -> ModelSpec:
    """A Jamba-like period: 7 Mamba-2 layers and 1 attention layer, MoE every other layer."""
    period = []
    for i in range(8):
        mixer = AttentionMixer() if i == 4 else Mamba2Mixer(d_state=16, expand=2, head_dim=64)
        period.append(LayerSpec(mixer=mixer, mlp=MoEMLP() if i % 2 else DenseMLP()))
    return ModelSpec(
        name="hybrid",
        layers=32,
        hidden=4096,
        ffn_hidden=14336,
        activation="swiglu",
        heads=32,
        kv_heads=8,
        vocab=65536,
        moe=MoESpec(experts=16, top_k=2, expert_ffn_hidden=14336),
        layer_groups=[LayerGroup(repeat=4, layers=period)],
    )


def _sim(model: ModelSpec, **layout) -> planner.StepReport:
    tr = planner.Training(seq_len=4096, global_batch=64, micro_batch=1)
    return planner.simulate(model, H100, planner.Layout(**layout), tr)


def test_mamba2_parameter_count_matches_published():
    assert _mamba2_2p7b().total_params == pytest.approx(2.7e9, rel=0.02)


def test_layer_groups_must_add_up():
    with pytest.raises(ValueError, match="layer_groups hold"):
        ModelSpec(
            name="x",
            layers=10,
            hidden=512,
            ffn_hidden=2048,
            heads=8,
            vocab=1000,
            layer_groups=[LayerGroup(repeat=3, layers=[LayerSpec()])],
        )
    with pytest.raises(ValueError, match="moe"):
        ModelSpec(
            name="x",
            layers=2,
            hidden=512,
            ffn_hidden=2048,
            heads=8,
            vocab=1000,
            layer_groups=[LayerGroup(repeat=2, layers=[LayerSpec(mlp=MoEMLP())])],
        )


def test_flat_fields_map_onto_layer_kinds():
    ds = planner.load_model("deepseek-v3")
    kinds = dict(ds.layer_kinds())
    assert sum(kinds.values()) == 61
    assert kinds[LayerSpec()] == 3 and kinds[LayerSpec(mlp=MoEMLP())] == 58


def test_hybrid_stack_simulates_and_counts():
    model = _hybrid()
    kinds = dict(model.layer_kinds())
    assert sum(kinds.values()) == 32 and len(kinds) == 3  # mamba+dense, mamba+moe, attn+dense
    rep = _sim(model, dp=8, ep=8, zero=1)
    assert rep.step_time_s > 0 and all(math.isfinite(v) for v in rep.time_breakdown_s.values())
    total, active = model.param_counts()
    assert active < total


def test_ssm_model_is_cheaper_per_token_than_attention_at_long_context():
    ssm = _mamba2_2p7b()
    attn = ssm.model_copy(
        update={
            "layer_groups": [
                LayerGroup(repeat=64, layers=[LayerSpec(mixer=AttentionMixer(), mlp=NoMLP())])
            ]
        }
    )
    assert flops.model_flops_per_token(ssm, 65536) < flops.model_flops_per_token(attn, 65536)


def test_sliding_window_bounds_attention():
    base = planner.load_model("llama3.1-8b")
    window = base.model_copy(
        update={
            "layer_groups": [
                LayerGroup(repeat=32, layers=[LayerSpec(mixer=AttentionMixer(window=512))])
            ]
        }
    )
    seq = 32768
    full_f = flops.model_flops_per_token(base, seq)
    win_f = flops.model_flops_per_token(window, seq)
    assert win_f < full_f
    # the difference is exactly the attention term beyond the window
    assert full_f - win_f == pytest.approx(6 * 32 * 32 * 256 * (seq - 512))
    tr = planner.Training(seq_len=seq, global_batch=8)
    assert (
        planner.simulate(window, H100, planner.Layout(dp=8), tr).step_time_s
        < planner.simulate(base, H100, planner.Layout(dp=8), tr).step_time_s
    )


def test_linear_attention_layer():
    model = planner.load_model("llama3.1-8b").model_copy(
        update={
            "layer_groups": [
                LayerGroup(repeat=32, layers=[LayerSpec(mixer=LinearAttentionMixer())])
            ]
        }
    )
    rep = _sim(model, dp=8, zero=2)
    assert rep.step_time_s > 0 and rep.fits


def test_moe_load_imbalance_slows_and_capacity_caps_it():
    mix = planner.load_model("mixtral-8x7b")
    slow = mix.model_copy(update={"moe": mix.moe.model_copy(update={"load_imbalance": 1.5})})
    capped = mix.model_copy(
        update={"moe": mix.moe.model_copy(update={"load_imbalance": 1.5, "capacity_factor": 1.1})}
    )
    t = [_sim(m, dp=8, ep=8, zero=1).step_time_s for m in (mix, slow, capped)]
    assert t[0] < t[2] < t[1]


def test_mtp_module_costs_time_and_memory_on_the_last_stage():
    ds = planner.load_model("deepseek-v3")
    with_mtp = ds.model_copy(update={"mtp_layers": 1})
    c = planner.load_cluster("dgx-b200")
    lay = planner.Layout(pp=16, dp=16, ep=8, zero=1)
    tr = planner.Training(seq_len=4096, global_batch=256, precision="fp8", recompute="selective")
    # without host stalls the last stage (logits) is the bottleneck in both runs
    prof = planner.default_profile(c).with_host_op_us(0.0)
    a, b = planner.simulate(ds, c, lay, tr, prof), planner.simulate(with_mtp, c, lay, tr, prof)
    assert b.step_time_s > a.step_time_s
    assert b.time_breakdown_s["compute_logits_loss"] == pytest.approx(
        2 * a.time_breakdown_s["compute_logits_loss"]
    )
    # DeepSeek-V3 reports 14B of MTP weights, which store their own copies of the embedding
    # and the output head; the planner shares them (as training does)
    assert with_mtp.mtp_params() == pytest.approx(14e9 - 2 * 129280 * 7168, rel=0.1)


def test_context_parallel_with_ssm_layers_is_rejected():
    with pytest.raises(planner.PlannerError, match="layout.cp"):
        _sim(_hybrid(), dp=4, cp=2, ep=4)
