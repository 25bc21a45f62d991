"""planner/costs/blocks/: every token-mixer kind of the spec has its costs registered, each
answers every question of MixerCosts with finite numbers, and the hand-worked figures hold."""

from __future__ import annotations

import math
from typing import get_args

import pytest

import planner
from planner.costs.blocks import MIXER_COSTS, mixer_costs
from planner.costs.blocks.base import MixerCosts, chunked_scan_flops
from planner.specs.blocks import AttentionMixer, LinearAttentionMixer, Mamba2Mixer, Mixer
from planner.specs.layout import Layout, Training

SPEC_CLASSES = get_args(get_args(Mixer)[0])  # Annotated[Union[...], discriminator]


def test_every_mixer_kind_of_the_spec_has_registered_costs() -> None:
    kinds = {cls.model_fields["kind"].default for cls in SPEC_CLASSES}
    assert kinds == set(MIXER_COSTS)
    assert all(isinstance(c, MixerCosts) for c in MIXER_COSTS.values())


@pytest.mark.parametrize(
    "mixer",
    [AttentionMixer(), AttentionMixer(window=512), Mamba2Mixer(), LinearAttentionMixer()],
    ids=str,
)
@pytest.mark.parametrize("model_id", ["llama3.1-8b", "deepseek-v3", "jamba-v0.1"])
def test_each_kind_answers_every_question_finitely(mixer, model_id) -> None:
    model = planner.load_model(model_id)
    layout, training = Layout(tp=2), Training(seq_len=4096, global_batch=8, micro_batch=2)
    costs = mixer_costs(mixer)
    gemms = costs.gemms(model, mixer, 2, 8192.0)
    assert gemms and all(g.flops > 0 for g in gemms)
    hw, conv = costs.core_flops(model, mixer, layout, training)
    assert 0 < hw <= conv
    assert costs.model_core_flops_per_token(model, mixer, 4096, 3) == pytest.approx(
        3 * costs.model_core_flops_per_token(model, mixer, 4096)
    )
    ew = costs.elementwise(model, mixer, 2, 8192.0, 2.0)
    kept = costs.activations(model, mixer, 4096.0, 2, 2.0, set(), False, True)
    figures = [ew.hidden_bytes, ew.rope_bytes, ew.kernels, *vars_of(kept)]
    assert all(math.isfinite(x) and x >= 0 for x in figures)
    assert mixer.params(model) > 0


def vars_of(kept) -> list[float]:
    return [kept.tp_region, kept.out_proj_input, kept.replicated, kept.core]


def test_causal_attention_hardware_flops_are_half_the_convention() -> None:
    model = planner.load_model("llama3.1-8b")
    layout, training = Layout(tp=1), Training(seq_len=4096, global_batch=8, micro_batch=1)
    hw, conv = mixer_costs(AttentionMixer()).core_flops(model, AttentionMixer(), layout, training)
    # 2 * tokens * context * heads * (d_qk + d_v): 2 * 4096 * 4096 * 32 * 256
    assert conv == 2.0 * 4096 * 4096 * 32 * 256 and hw == conv / 2


def test_chunked_scan_flops_by_hand() -> None:
    # tokens 10, 4 heads over tp 2, Q 8, N 16, P 4: 10 * 2 * (2*8*20 + 4*16*4) = 11,520
    assert chunked_scan_flops(10.0, 4, 2, 8, 16, 4) == 11_520.0


def test_flash_attention_keeps_the_log_sum_exp_not_the_scores() -> None:
    model = planner.load_model("llama3.1-8b")
    costs, mixer = mixer_costs(AttentionMixer()), AttentionMixer()
    flash = costs.activations(model, mixer, 4096.0, 1, 2.0, set(), False, True)
    unfused = costs.activations(model, mixer, 4096.0, 1, 2.0, set(), False, False)
    assert flash.core == 4.0 * 4096 * model.heads
    assert unfused.core == 2.0 * model.heads * 4096 * 4096
    recomputed = costs.activations(model, mixer, 4096.0, 1, 2.0, {"core_attn"}, False, False)
    assert recomputed.core == 0.0


def test_every_channel_kind_has_registered_costs_and_they_agree_with_the_layer() -> None:
    from planner.costs import flops
    from planner.costs.blocks.channel import CHANNEL_COSTS, channel_costs
    from planner.specs.blocks import ChannelMixer, DenseMLP, LayerSpec, MoEMLP, NoMLP

    kinds = {cls.model_fields["kind"].default for cls in get_args(get_args(ChannelMixer)[0])}
    assert kinds == set(CHANNEL_COSTS)
    model = planner.load_model("mixtral-8x7b")
    layout, training = Layout(tp=2, ep=2, dp=4), Training(seq_len=4096, global_batch=8)
    tokens = 4096.0
    moe = channel_costs(MoEMLP()).gemms(model, MoEMLP(), layout, tokens)
    assert moe[0].name == "router" and any(g.name.startswith("expert_") for g in moe)
    layer = flops.layer_flops(model, layout, training, LayerSpec(mlp=MoEMLP()))
    assert [g.name for g in layer.gemms][-len(moe) :] == [g.name for g in moe]
    assert channel_costs(NoMLP()).gemms(model, NoMLP(), layout, tokens) == []
    dense = channel_costs(DenseMLP()).gemms(model, DenseMLP(ffn_hidden=1024), layout, tokens)
    assert [g.n for g in dense] == [2 * 1024 / 2, model.hidden]  # gated fc1 (gate, up), fc2
    kept, router = channel_costs(MoEMLP()).activations(model, MoEMLP(), 100.0, 2.0, set())
    assert kept > 0 and router == 100.0 * model.moe.experts * 4
    assert channel_costs(MoEMLP()).activations(model, MoEMLP(), 100.0, 2.0, {"moe"}) == (0, 0)


def test_a_window_band_runs_at_the_efficiency_of_its_short_keys() -> None:
    """A sliding window of w keys per query tiles like a causal attention of 2w tokens: its
    FLOPs fall with w, its efficiency too (the per-tile cost a long sequence amortises), so at
    seq 4096 a window-128 layer's attention takes more than its FLOP share of a full layer's."""
    from planner.costs import compute
    from planner.simulate.layers import layer_costs
    from planner.simulate.stages import make_context

    assert compute.attention_span(4096, None) == 4096
    assert compute.attention_span(4096, 128) == 256
    assert compute.attention_span(4096, 4096) == 4096  # a window past the sequence: no change
    model = planner.load_model("gpt-oss-120b")
    cluster = planner.load_cluster("dgx-h100")
    layout, training = Layout(dp=8), Training(seq_len=4096, global_batch=8)
    ctx = make_context(model, cluster, layout, training, planner.default_profile(cluster))
    full, band = (
        layer_costs(model, layout, training, layer, ctx.dev, ctx.fabric, ctx.groups)
        for layer in (model.layer_groups[0].layers[1], model.layer_groups[0].layers[0])
    )
    flop_share = 128 / 2048  # w keys per query against S / 2 for causal attention
    share = band.attention / full.attention
    assert flop_share * 1.5 < share < 1.0
