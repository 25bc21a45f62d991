"""FLOPs of one transformer layer, per GPU and micro-batch, as a list of GEMMs and its mixer's
core (each token-mixer kind's own, :mod:`planner.costs.blocks`).

Forward FLOPs of a GEMM (m x k) @ (k x n) are 2mnk; its backward is two GEMMs of the same size
(data and weight gradients), i.e. 2x forward (Narayanan et al. 2021, section 5.1). Attention core
forward is 2 * tokens * context * heads * (d_qk + d_v); causal masking halves the work a fused
kernel does (FlashAttention skips masked blocks); its backward is 2.5x forward in the
FlashAttention-2 FLOP convention (the kernel recomputes P).
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.costs.blocks import mixer_costs
from planner.costs.blocks.attention import (
    attention_core_flops,
    attention_gemms,
    attention_head_dim,
    attention_head_width,
)
from planner.costs.blocks.channel import channel_costs, mlp_gemms, moe_gemms, tokens_per_expert
from planner.costs.gemm import Gemm, tokens_per_gpu
from planner.specs.blocks import DenseMLP, LayerSpec, MoEMLP
from planner.specs.layout import Layout, Training
from planner.specs.model import ModelSpec


@dataclass(frozen=True, slots=True)
class LayerFlops:
    """Forward work of one layer kind on one GPU for one micro-batch."""

    gemms: tuple[Gemm, ...]
    attention_fwd_flops: float  # token-mixer core, hardware FLOPs (causal half counted)
    attention_model_fwd_flops: float  # MFU convention (no causal discount)
    mixer_kind: str = "attention"  # attention | mamba2 | linear_attention

    @property
    def gemm_fwd_flops(self) -> float:
        return sum(g.flops for g in self.gemms)


def as_layer(layer: LayerSpec | bool) -> LayerSpec:
    """A LayerSpec; ``True`` / ``False`` mean the flat model's MoE / dense attention layer."""
    if isinstance(layer, LayerSpec):
        return layer
    return LayerSpec(mlp=MoEMLP() if layer else DenseMLP())


def layer_flops(
    model: ModelSpec, layout: Layout, training: Training, layer: LayerSpec | bool
) -> LayerFlops:
    """Forward work of one layer: its mixer's GEMMs and core, and its channel mixer's GEMMs."""
    spec = as_layer(layer)
    tokens = tokens_per_gpu(layout, training)
    mixer = spec.mixer
    costs = mixer_costs(mixer)
    gemms = costs.gemms(model, mixer, layout.tp, tokens)
    hw, conv = costs.core_flops(model, mixer, layout, training)
    gemms += channel_costs(spec.mlp).gemms(model, spec.mlp, layout, tokens)
    return LayerFlops(tuple(gemms), hw, conv, mixer.kind)


def padded_vocab(model: ModelSpec, layout: Layout, training: Training) -> int:
    """The vocabulary the stack builds, rows: ``model.vocab`` rounded up to a multiple of
    ``training.vocab_multiple`` x TP (Megatron-LM ``_vocab_size_with_padding``; with
    ``vocab_multiple`` 1 only to a multiple of TP, the vocabulary-parallel split)."""
    multiple = training.vocab_multiple * layout.tp
    return -(-model.vocab // multiple) * multiple


def logits_gemm(model: ModelSpec, layout: Layout, training: Training) -> Gemm:
    """The output projection onto the (TP-split, padded) vocabulary, last pipeline stage."""
    vocab = padded_vocab(model, layout, training)
    return Gemm("logits", tokens_per_gpu(layout, training), vocab / layout.tp, model.hidden)


def model_flops_per_token(model: ModelSpec, seq_len: int) -> float:
    """Training FLOPs per token in the MFU convention: 6 N + 6 L H (d_qk + d_v) S.

    N counts matmul parameters active per token (logits projection included, input embedding
    lookup and position table excluded); attention is not discounted for causality (PaLM,
    Chowdhery et al. 2022, appendix B; torchtitan ``get_dense_model_nparams_and_flops``).
    """
    n = model.active_params - model.vocab * model.hidden
    if model.learned_position_embeddings:
        n -= model.max_positions * model.hidden
    if model.tied_embeddings:
        n += model.vocab * model.hidden  # the tied table is also the logits matmul
    core = 0.0  # per token: attention over min(S, window) keys; SSM / linear scans
    for layer, count in model.layer_kinds():
        mixer = layer.mixer
        core += mixer_costs(mixer).model_core_flops_per_token(model, mixer, seq_len, count)
    return 6.0 * n + core


def megatron_flops_per_iteration(
    layers: int, hidden: int, vocab: int, seq_len: int, batch: int
) -> float:
    """Narayanan et al. 2021, Eq. 3: 96 B s l h^2 (1 + s/6h + V/16lh), GPT with full recompute."""
    b, s, ell, h, v = batch, seq_len, layers, hidden, vocab
    return 96.0 * b * s * ell * h * h * (1 + s / (6 * h) + v / (16 * ell * h))


__all__ = [  # the attention helpers and Gemm live in blocks/ and gemm.py; re-exported here
    "Gemm",
    "LayerFlops",
    "as_layer",
    "attention_core_flops",
    "attention_gemms",
    "attention_head_dim",
    "attention_head_width",
    "layer_flops",
    "logits_gemm",
    "megatron_flops_per_iteration",
    "mlp_gemms",
    "model_flops_per_token",
    "moe_gemms",
    "padded_vocab",
    "tokens_per_expert",
    "tokens_per_gpu",
]
