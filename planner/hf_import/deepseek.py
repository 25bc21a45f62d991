"""The DeepSeek-V3 builder: multi-head latent attention (MLA), shared + routed experts after
``first_k_dense_replace`` dense layers, multi-token prediction (MTP) layers."""

from __future__ import annotations

from planner.hf_import.fields import (
    _attention_bias_note,
    _Draft,
    _Fields,
    _first_int,
    _gated_activation,
    _quantization_note,
    _read_header,
    _spec_fields,
)
from planner.specs.blocks import DenseMLP, LayerSpec, MoEMLP
from planner.specs.model import MLASpec


def _deepseek_v3(f: _Fields, notes: list[str]) -> _Draft:
    """DeepSeek-V3: MLA, shared + routed experts after first_k_dense_replace dense layers, MTP."""
    h = _read_header(f)
    if h.kv_heads != h.heads:
        notes.append(
            f"num_key_value_heads ({h.kv_heads}) ignored: MLA decompresses K/V for every head."
        )
    if f.has("head_dim"):
        notes.append(
            "head_dim ignored: MLA widths come from qk_nope_head_dim, qk_rope_head_dim and "
            "v_head_dim (transformers sets head_dim = qk_rope_head_dim)."
        )
    f.consume("head_dim")
    mla = MLASpec(
        q_lora_rank=_first_int(f, "q_lora_rank"),
        kv_lora_rank=f.integer("kv_lora_rank"),
        qk_nope_head_dim=f.integer("qk_nope_head_dim"),
        qk_rope_head_dim=f.integer("qk_rope_head_dim"),
        v_head_dim=f.integer("v_head_dim"),
    )
    activation = _gated_activation(f, notes)
    _attention_bias_note(f, notes)
    _quantization_note(f, notes)
    experts = f.integer("n_routed_experts", default=0, minimum=0)
    first_dense = f.integer("first_k_dense_replace", default=0, minimum=0)
    freq = f.integer("moe_layer_freq", default=1)
    is_moe = [experts > 0 and i >= first_dense and i % freq == 0 for i in range(h.layers)]
    moe = None
    if experts:
        width = f.integer("moe_intermediate_size")
        shared = f.integer("n_shared_experts", default=0, minimum=0)
        moe = {
            "experts": experts,
            "top_k": f.integer("num_experts_per_tok"),
            "expert_ffn_hidden": width,
            "shared_experts": shared,
            "shared_expert_ffn_hidden": width if shared else None,
        }
        # group-limited routing: n_group groups, a token's experts from topk_group of them
        # (DeepSeek-V3's node-limited routing); one group is no limit
        groups = f.integer("n_group", default=1, minimum=1)
        topk_group = f.integer("topk_group", default=groups, minimum=1)
        if groups > 1:
            moe |= {"router_groups": groups, "router_group_topk": topk_group}
        notes.append(
            "router e_score_correction_bias (n_routed_experts per MoE layer) is not counted."
        )
    mtp = f.integer("num_nextn_predict_layers", default=0, minimum=0)
    if mtp:
        notes.append(
            f"num_nextn_predict_layers = {mtp} -> mtp_layers (excluded from total_params, as "
            "DeepSeek reports 671B without the MTP module)."
        )
    layers = [LayerSpec(mlp=MoEMLP() if m else DenseMLP()) for m in is_moe]
    fields = _spec_fields(
        f,
        h,
        ffn_hidden=f.integer("intermediate_size"),
        activation=activation,
        mla=mla,
        mtp_layers=mtp,
    )
    return _Draft(fields, layers, moe)
