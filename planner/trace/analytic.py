"""The planner's analytic figures for a shipped model, and a traced block compared with them.

Units: FLOPs and bytes per token, parameters in elements, differences in percent.
"""

from __future__ import annotations

from typing import Any

from planner.trace.block import TracedBlock, traced_layer_cost


def analytic_figures(model_id: str, seq_len: int, batch: int, whole_model: bool = False) -> dict:
    """The planner's analytic figures per token for one layer (or the whole model) of a spec.

    One layer: ``planner.costs.flops.layer_flops`` with ``Layout()`` and ``Training(seq_len,
    global_batch=batch, micro_batch=batch)``, MoE layer when the model has MoE layers; attention
    in the model convention (full, non-causal: what meta SDPA counts) and the hardware one
    (causal half). Backward: 2x every GEMM and 2x attention (autograd through the math path),
    and ``bwd_flops_per_token_flash2`` with the FlashAttention-2 convention (attention 2.5x). Activations: ``layer_activation_bytes`` with flash
    (Q, K, V, O, LSE) and unfused (scores and softmax materialised) attention. Whole model:
    ``model_flops_per_token / 3`` forward, total parameters, and the sum over layers.
    """
    from planner.costs.flops import layer_flops, model_flops_per_token
    from planner.costs.memory import layer_activation_bytes
    from planner.specs.blocks import MoEMLP
    from planner.specs.layout import Layout, Training
    from planner.specs.loading import load_model

    model = load_model(model_id)
    layout = Layout()
    training = Training(seq_len=seq_len, global_batch=batch, micro_batch=batch, precision="bf16")
    tokens = float(seq_len * batch)
    kinds = model.layer_kinds()

    def act(flash: bool, layer: Any) -> float:
        return layer_activation_bytes(model, layout, training, layer, flash_attention=flash)

    if whole_model:
        fwd = model_flops_per_token(model, seq_len) / 3.0

        def total_act(flash: bool) -> float:
            return sum(count * act(flash, layer) for layer, count in kinds)

        return {
            "model": model.name,
            "scope": "whole model",
            "fwd_flops_per_token": fwd,
            "bwd_flops_per_token": 2.0 * fwd,
            "params": float(model.total_params),
            "saved_activation_bytes_per_token_flash": total_act(True) / tokens,
            "saved_activation_bytes_per_token_unfused": total_act(False) / tokens,
        }
    # the MoE layer kind when there is one (the block worth tracing), else the first kind
    layer = next((k for k, _ in kinds if isinstance(k.mlp, MoEMLP)), kinds[0][0])
    lf = layer_flops(model, layout, training, layer)
    gemm, attn = lf.gemm_fwd_flops, lf.attention_model_fwd_flops
    return {
        "model": model.name,
        "scope": f"one {layer.mixer.kind}/{layer.mlp.kind} layer",
        "fwd_flops_per_token": (gemm + attn) / tokens,
        "fwd_flops_per_token_causal": (gemm + lf.attention_fwd_flops) / tokens,
        "attention_fwd_flops_per_token": attn / tokens,
        "bwd_flops_per_token": 2.0 * (gemm + attn) / tokens,
        "bwd_flops_per_token_flash2": (2.0 * gemm + 2.5 * attn) / tokens,
        "params": float(model.layer_params(layer)[0]),
        "saved_activation_bytes_per_token_flash": act(True, layer) / tokens,
        "saved_activation_bytes_per_token_unfused": act(False, layer) / tokens,
    }


def compare(traced: TracedBlock, model_id: str) -> dict:
    """Traced vs analytic per-token figures and the % difference ((traced - analytic) /
    analytic x 100) for FLOPs, parameters and saved activations (flash and unfused)."""
    ref = analytic_figures(
        model_id, traced.seq_len, traced.batch, whole_model=traced.input_kind == "tokens"
    )
    cost = traced_layer_cost(traced)
    pairs = {
        "fwd_flops_per_token": ("fwd_flops_per_token", "fwd_flops_per_token"),
        "bwd_flops_per_token": ("bwd_flops_per_token", "bwd_flops_per_token"),
        "bwd_flops_per_token_vs_flash2": ("bwd_flops_per_token", "bwd_flops_per_token_flash2"),
        "params": ("params", "params"),
        "saved_bytes_per_token_vs_flash": (
            "saved_activation_bytes_per_token",
            "saved_activation_bytes_per_token_flash",
        ),
        "saved_bytes_per_token_vs_unfused": (
            "saved_activation_bytes_per_token",
            "saved_activation_bytes_per_token_unfused",
        ),
    }
    rows = {}
    for name, (t_key, a_key) in pairs.items():
        if a_key not in ref:
            continue
        t, a = cost[t_key], ref[a_key]
        rows[name] = {"traced": t, "analytic": a, "diff_pct": (t - a) / a * 100.0 if a else None}
    warnings = []
    model_hidden = analytic_hidden(model_id)
    if traced.hidden is not None and traced.hidden != model_hidden:
        warnings.append(f"traced hidden {traced.hidden} differs from {model_id}'s {model_hidden}")
    return {"analytic": ref, "rows": rows, "warnings": warnings}


def analytic_hidden(model_id: str) -> int:
    """Hidden width of a shipped model id or YAML path."""
    from planner.specs.loading import load_model

    return load_model(model_id).hidden
