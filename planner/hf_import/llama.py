"""The llama-like builder: llama, mistral, qwen2, qwen3 and their MoE variants (mixtral,
qwen2_moe, qwen3_moe); attention in every layer, optional sliding windows."""

from __future__ import annotations

from typing import Any

from planner.errors import PlannerError
from planner.hf_import.fields import (
    _attention_bias_note,
    _Draft,
    _Fields,
    _first_int,
    _gated_activation,
    _head_dim,
    _mlp_bias_note,
    _read_header,
    _spec_fields,
    _windows,
    shown,
)
from planner.specs.blocks import AttentionMixer, DenseMLP, LayerSpec, MoEMLP

LLAMA_LIKE = ("llama", "mistral", "mixtral", "qwen2", "qwen3", "qwen2_moe", "qwen3_moe")


def _llama_like(f: _Fields, notes: list[str]) -> _Draft:
    """llama, mistral, mixtral, qwen2, qwen3, qwen2_moe, qwen3_moe."""
    mt = f.model_type
    h = _read_header(f)
    head_dim = _head_dim(f, h.hidden, h.heads, required=mt in ("qwen3", "qwen3_moe"))
    activation = _gated_activation(f, notes)
    windows = _windows(f, h.layers)
    _mlp_bias_note(f, notes)
    if mt in ("qwen2", "qwen2_moe"):
        f.consume("attention_bias")
        notes.append(
            f"Qwen2 attention has q/k/v biases ({h.heads * head_dim + 2 * h.kv_heads * head_dim} "
            "per layer); they are not counted."
        )
    else:
        _attention_bias_note(f, notes)
    if mt in ("qwen3", "qwen3_moe"):
        notes.append("Qwen3 QK-norm weights (2 x head_dim per layer) are not counted.")

    moe, is_moe, ffn = _moe_layers(f, h.layers, notes)
    if ffn is None:
        ffn = f.integer("intermediate_size")
    layers = [
        LayerSpec(mixer=AttentionMixer(window=w), mlp=MoEMLP() if m else DenseMLP())
        for w, m in zip(windows, is_moe, strict=True)
    ]
    fields = _spec_fields(f, h, ffn_hidden=ffn, activation=activation, head_dim=head_dim)
    return _Draft(fields, layers, moe)


def _moe_layers(
    f: _Fields, n: int, notes: list[str]
) -> tuple[dict[str, Any] | None, list[bool], int | None]:
    """The MoE block, which of the ``n`` layers are MoE layers, and ffn_hidden when the MoE
    fields settle it (None: read intermediate_size)."""
    mt = f.model_type
    if mt == "mixtral":
        experts = _first_int(f, "num_local_experts", "num_experts")
        if experts is None:
            experts = f.integer("num_experts")
        ffn = f.integer("intermediate_size")
        moe = {
            "experts": experts,
            "top_k": f.integer("num_experts_per_tok"),
            "expert_ffn_hidden": ffn,
        }
        return moe, [True] * n, ffn
    if mt not in ("qwen2_moe", "qwen3_moe"):
        return None, [False] * n, None
    experts = f.integer("num_experts", default=0, minimum=0)
    step = f.integer("decoder_sparse_step", default=1)
    only_dense = f.get("mlp_only_layers", [])
    if not isinstance(only_dense, list):
        raise PlannerError(
            f.path("mlp_only_layers"), f"expected a list, got {shown(only_dense)}", "layer indices"
        )
    for i in only_dense:
        if isinstance(i, bool) or not isinstance(i, int):
            raise PlannerError(
                f.path("mlp_only_layers"), f"{shown(i)} is not a layer index", "integers"
            )
    dense_set = set(only_dense)
    is_moe = [experts > 0 and i not in dense_set and (i + 1) % step == 0 for i in range(n)]
    moe = {
        "experts": experts,
        "top_k": f.integer("num_experts_per_tok") if experts else 1,
        "expert_ffn_hidden": f.integer("moe_intermediate_size") if experts else 1,
    }
    if mt == "qwen2_moe" and experts:
        shared = f.integer("shared_expert_intermediate_size", default=0, minimum=0)
        if shared:
            moe.update(shared_experts=1, shared_expert_ffn_hidden=shared)
            notes.append("Qwen2-MoE shared_expert_gate (hidden x 1 per layer) not counted.")
    ffn = None
    if all(is_moe):
        ffn = f.integer("intermediate_size", default=moe["expert_ffn_hidden"])
    return moe, is_moe, ffn
