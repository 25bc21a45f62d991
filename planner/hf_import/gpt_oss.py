"""The gpt-oss builder: MoE in every layer, alternating sliding-window / full attention,
attention sinks and biases (noted, not counted)."""

from __future__ import annotations

from planner.errors import PlannerError
from planner.hf_import.fields import (
    _Draft,
    _Fields,
    _gated_activation,
    _head_dim,
    _quantization_note,
    _read_header,
    _spec_fields,
    _windows,
)
from planner.specs.blocks import AttentionMixer, LayerSpec, MoEMLP


def _gpt_oss(f: _Fields, notes: list[str]) -> _Draft:
    """gpt-oss: MoE in every layer, alternating sliding-window / full attention, sinks, biases."""
    h = _read_header(f)
    head_dim = _head_dim(f, h.hidden, h.heads, required=True)
    experts = f.integer("num_local_experts")
    top_k = _top_k(f)
    ffn = f.integer("intermediate_size")
    if not f.has("layer_types"):
        f.require("layer_types")
    windows = _windows(f, h.layers)
    activation = _gated_activation(f, notes)
    f.consume("attention_bias", "swiglu_limit")
    q, kvw = h.heads * head_dim, h.kv_heads * head_dim
    per_layer = q + 2 * kvw + h.hidden + h.heads + experts * (2 * ffn + h.hidden) + experts
    notes.append(
        f"not counted: attention q/k/v/o biases, attention sinks (1 per head), expert and "
        f"router biases = {h.layers * per_layer / 1e6:.1f}M parameters in all; the experts' "
        f"output bias is costed where the stack adds it outside the GEMM (moe.expert_bias)."
    )
    notes.append(
        "gpt-oss experts use a clamped SwiGLU variant (swiglu_limit, alpha 1.702, up + 1); "
        "counted and costed as a standard SwiGLU (same three matrices)."
    )
    notes.append(
        "active params here include the input embedding; OpenAI's published active counts "
        "(5.13B for 120b, 3.61B for 20b) exclude it."
    )
    _quantization_note(f, notes)
    layers = [LayerSpec(mixer=AttentionMixer(window=w), mlp=MoEMLP()) for w in windows]
    fields = _spec_fields(f, h, ffn_hidden=ffn, activation=activation, head_dim=head_dim)
    # gate_up_proj_bias and down_proj_bias: the experts are biased (MoESpec.expert_bias)
    moe = {"experts": experts, "top_k": top_k, "expert_ffn_hidden": ffn, "expert_bias": True}
    return _Draft(fields, layers, moe)


def _top_k(f: _Fields) -> int:
    """Experts per token, from num_experts_per_tok or experts_per_token (equal when both set)."""
    top_k = [f.integer(k) for k in ("num_experts_per_tok", "experts_per_token") if f.has(k)]
    f.consume("num_experts_per_tok", "experts_per_token")
    if not top_k:
        raise PlannerError(
            f.path("num_experts_per_tok"),
            "required for model_type 'gpt_oss' but missing from the config",
            "num_experts_per_tok or experts_per_token",
        )
    if len(set(top_k)) > 1:
        raise PlannerError(
            f.path("experts_per_token"),
            f"disagrees with num_experts_per_tok ({top_k[0]} vs {top_k[1]})",
        )
    return top_k[0]
