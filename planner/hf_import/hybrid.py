"""The hybrid Mamba/attention builders: Jamba (Mamba-1 layers modelled as Mamba2Mixer, with the
exact Mamba-1 parameter count for the note) and Nemotron-H (``hybrid_override_pattern``, its
MLP/MoE-only layers merged into the layer before)."""

from __future__ import annotations

import math
from typing import Any

from planner.errors import PlannerError
from planner.hf_import.fields import (
    _GATED_GELU,
    MAX_LAYERS,
    _Draft,
    _Fields,
    _first_int,
    _first_required,
    _gated_activation,
    _head_dim,
    _period_offset,
    _read_header,
    _spec_fields,
    shown,
)
from planner.specs.blocks import (
    AttentionMixer,
    DenseMLP,
    LayerSpec,
    Mamba2Mixer,
    MoEMLP,
    NoMLP,
)
from planner.specs.model import Activation, ModelSpec


# ---- Jamba --------------------------------------------------------------------------------------
def _mamba1_params(hidden: int, d_in: int, d_state: int, d_conv: int, dt_rank: int) -> int:
    """Parameters of one Jamba Mamba-1 mixer (in/x/dt/out projections, conv with bias, A, D,
    and Jamba's dt/B/C RMSNorms)."""
    return (
        hidden * 2 * d_in
        + d_in * (d_conv + 1)
        + d_in * (dt_rank + 2 * d_state)
        + dt_rank * d_in
        + d_in
        + d_in * d_state
        + d_in
        + dt_rank
        + 2 * d_state
        + d_in * hidden
    )


def _jamba(f: _Fields, notes: list[str]) -> _Draft:
    """Jamba: Mamba-1 layers with one attention layer per attn_layer_period, MoE every
    expert_layer_period-th layer."""
    h = _read_header(f)
    head_dim = _head_dim(f, h.hidden, h.heads)
    activation = _gated_activation(f, notes)
    attn_period, attn_offset = _period_offset(f, "attn_layer_period", "attn_layer_offset")
    exp_period, exp_offset = _period_offset(f, "expert_layer_period", "expert_layer_offset")
    experts = f.integer("num_experts", default=1)
    d_state, d_conv, expand = (
        f.integer(k) for k in ("mamba_d_state", "mamba_d_conv", "mamba_expand")
    )
    dt_rank_raw = f.get("mamba_dt_rank", "auto")
    dt_rank = math.ceil(h.hidden / 16) if dt_rank_raw == "auto" else f.integer("mamba_dt_rank")
    f.consume("mamba_conv_bias")
    if f.flag("mamba_proj_bias", False):
        notes.append("mamba_proj_bias is true: the Mamba projection biases are not counted.")
    window = _first_int(f, "sliding_window")
    d_in = expand * h.hidden
    head = 64 if d_in % 64 == 0 else d_in
    mamba = Mamba2Mixer(d_state=d_state, d_conv=d_conv, expand=expand, head_dim=head, n_groups=1)
    layers = [
        LayerSpec(
            mixer=AttentionMixer(window=window) if i % attn_period == attn_offset else mamba,
            mlp=MoEMLP() if experts > 1 and i % exp_period == exp_offset else DenseMLP(),
        )
        for i in range(h.layers)
    ]
    n_mamba = sum(isinstance(x.mixer, Mamba2Mixer) for x in layers)
    exact = _mamba1_params(h.hidden, d_in, d_state, d_conv, dt_rank)
    probe = ModelSpec(name="probe", layers=1, hidden=h.hidden, ffn_hidden=1, heads=1, vocab=1)
    mapped = probe.mixer_params(mamba)
    notes.append(
        f"Jamba's Mamba-1 layers are modelled as Mamba2Mixer (SSD scan, head_dim {head} as a "
        f"stand-in, 1 B/C group, d_state {d_state}); dt_rank {dt_rank}, x_proj/dt_proj and the "
        f"per-channel A differ: {mapped / 1e6:.2f}M vs {exact / 1e6:.2f}M parameters per Mamba "
        f"layer ({(mapped - exact) * n_mamba / 1e6:+.0f}M over {n_mamba} layers); the "
        "Mamba-1 selective scan's cost is modelled by the SSD scan."
    )
    notes.append(
        "Jamba attention layers use no positional encoding; the planner charges RoPE "
        "elementwise work on them (negligible)."
    )
    moe = None
    if experts > 1:
        moe = {
            "experts": experts,
            "top_k": f.integer("num_experts_per_tok"),
            "expert_ffn_hidden": f.integer("intermediate_size"),
        }
    fields = _spec_fields(
        f,
        h,
        ffn_hidden=f.integer("intermediate_size"),
        activation=activation,
        head_dim=head_dim,
    )
    return _Draft(fields, layers, moe)


# ---- Nemotron-H ---------------------------------------------------------------------------------
def _nemotron_h(f: _Fields, notes: list[str]) -> _Draft:
    """Nemotron-H: hybrid_override_pattern of M (Mamba-2), * (attention), - (MLP), E (MoE)."""
    pattern = _hybrid_pattern(f)
    h = _read_header(f)
    head_dim = _first_int(f, "attention_head_dim", "head_dim")
    if head_dim is None:
        head_dim = _head_dim(f, h.hidden, h.heads)
    activation = _nemotron_activation(f)
    mamba = _nemotron_mamba(f, h.hidden, notes)
    if not f.flag("use_conv_bias", True) or not f.flag("mamba_conv_bias", True):
        notes.append("the Mamba conv has no bias here; the planner counts one (d_conv+1 taps).")
    for key in ("mamba_proj_bias", "use_bias", "mlp_bias", "attention_bias"):
        if f.flag(key, False):
            notes.append(f"{key} is true: those biases are not counted.")
    window = _first_int(f, "sliding_window")
    moe = _nemotron_moe(f, pattern)
    layers = _merge_channel_only(f, pattern, mamba, window)
    counts = {c: pattern.count(c) for c in "M*-E"}
    notes.append(
        f"hybrid_override_pattern has {h.layers} layers ({counts['M']} Mamba-2, {counts['*']} "
        f"attention, {counts['-']} MLP-only, {counts['E']} MoE-only); the planner's layers need "
        "a token mixer, so each MLP/MoE-only layer is merged into the layer before it as its "
        f"channel mixer: {len(layers)} planner layers. Parameters are exact (one norm per HF "
        "layer); pipeline stages split at merged-layer boundaries only."
    )
    fields = _spec_fields(
        f,
        h,
        ffn_hidden=f.integer("intermediate_size"),
        activation=activation,
        head_dim=head_dim,
        layers=len(layers),
    )
    return _Draft(fields, layers, moe)


def _hybrid_pattern(f: _Fields) -> str:
    """hybrid_override_pattern, checked: one of 'M*-E' per num_hidden_layers."""
    pattern = f.require("hybrid_override_pattern")
    n_hf = f.integer("num_hidden_layers", maximum=MAX_LAYERS)
    valid = "a string of M (Mamba-2), * (attention), - (MLP), E (MoE)"
    if not isinstance(pattern, str) or len(pattern) != n_hf or set(pattern) - set("M*-E"):
        raise PlannerError(
            f.path("hybrid_override_pattern"),
            f"expected {n_hf} characters (num_hidden_layers) from 'M*-E', got {shown(pattern)}",
            valid,
        )
    return pattern


def _nemotron_activation(f: _Fields) -> Activation:
    """The (non-gated) MLP activation: mlp_hidden_act, else hidden_act."""
    key = "mlp_hidden_act" if f.has("mlp_hidden_act") else "hidden_act"
    f.consume("mlp_hidden_act", "hidden_act")
    act = f.string(key, None)
    if act == "relu2":
        return "relu2"
    if act in _GATED_GELU:
        return "gelu"
    raise PlannerError(
        f.path(key),
        f"activation {shown(act)} of the (non-gated) Nemotron-H MLP is not supported",
        "relu2 or gelu",
    )


def _nemotron_mamba(f: _Fields, hidden: int, notes: list[str]) -> Mamba2Mixer:
    """The Mamba-2 mixer, from the HF or the vLLM spelling of each field."""
    m_heads = f.integer("mamba_num_heads")
    m_head_dim = f.integer("mamba_head_dim")
    expand = _first_required(f, "expand", "mamba_expand")
    if m_heads * m_head_dim != expand * hidden:
        raise PlannerError(
            f.path("mamba_num_heads"),
            f"mamba_num_heads x mamba_head_dim = {m_heads * m_head_dim} differs from expand x "
            f"hidden_size = {expand * hidden}; the planner derives the Mamba inner width from "
            "expand",
            f"mamba_num_heads = {expand * hidden // m_head_dim}",
        )
    chunk = _first_int(f, "chunk_size", "mamba_chunk_size")
    if chunk is None:
        notes.append("chunk_size missing: the planner's default SSD chunk (256) was used.")
        chunk = 256
    return Mamba2Mixer(
        d_state=_first_required(f, "ssm_state_size", "mamba_d_state"),
        d_conv=_first_required(f, "conv_kernel", "mamba_d_conv"),
        expand=expand,
        head_dim=m_head_dim,
        n_groups=_first_required(f, "n_groups", "mamba_n_groups"),
        chunk=chunk,
    )


def _nemotron_moe(f: _Fields, pattern: str) -> dict[str, Any] | None:
    """The MoE block when the pattern has E layers, else None."""
    if "E" not in pattern:
        f.consume("n_routed_experts", "moe_intermediate_size", "num_experts_per_tok")
        return None
    width = f.integer("moe_intermediate_size")
    shared = f.integer("n_shared_experts", default=0, minimum=0)
    return {
        "experts": f.integer("n_routed_experts"),
        "top_k": f.integer("num_experts_per_tok"),
        "expert_ffn_hidden": width,
        "shared_experts": shared,
        "shared_expert_ffn_hidden": (
            f.integer("moe_shared_expert_intermediate_size", default=width) if shared else None
        ),
    }


def _merge_channel_only(
    f: _Fields, pattern: str, mamba: Mamba2Mixer, window: int | None
) -> list[LayerSpec]:
    """One planner layer per M or * layer; each - or E layer after it becomes its channel mixer
    (a planner layer needs a token mixer)."""
    layers: list[LayerSpec] = []
    for i, c in enumerate(pattern):
        if c in "M*":
            mixer = mamba if c == "M" else AttentionMixer(window=window)
            layers.append(LayerSpec(mixer=mixer, mlp=NoMLP()))
            continue
        if not layers or layers[-1].mlp.kind != "none":
            raise PlannerError(
                f.path("hybrid_override_pattern"),
                f"layer {i} ('{c}') has no token mixer and does not follow an M or * layer: "
                "a channel-mixer-only layer is not expressible in the planner's schema",
                "each '-' or 'E' right after an 'M' or '*'",
            )
        mlp = DenseMLP() if c == "-" else MoEMLP()
        layers[-1] = LayerSpec(mixer=layers[-1].mixer, mlp=mlp)
    return layers
