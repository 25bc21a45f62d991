"""Causal linear attention (Katharopoulos et al. 2020) in its chunked form: the scan of
:func:`~planner.costs.blocks.base.chunked_scan_flops` with N = P = head_dim; q, k, v and out
projections; a feature map on q and k.
"""

from __future__ import annotations

from planner.costs.blocks.base import (
    MixerActivations,
    MixerElementwise,
    ScanMixerCosts,
    chunked_scan_flops,
)
from planner.costs.gemm import Gemm
from planner.specs.blocks import LinearAttentionMixer
from planner.specs.model import ModelSpec


def linear_dims(model: ModelSpec, m: LinearAttentionMixer) -> tuple[int, int]:
    """(heads, head dim)."""
    return m.heads or model.heads, m.head_dim or model.d_head


def scan_flops(model: ModelSpec, m: LinearAttentionMixer, tp: int, tokens: float) -> float:
    """Forward FLOPs of the chunked scan on one GPU (hardware and model convention alike)."""
    heads, p = linear_dims(model, m)
    return chunked_scan_flops(tokens, heads, tp, m.chunk, p, p)


class LinearAttentionCosts(ScanMixerCosts):
    """A linear-attention block's costs."""

    kind = "linear_attention"

    def gemms(
        self, model: ModelSpec, mixer: LinearAttentionMixer, tp: int, tokens: float
    ) -> list[Gemm]:
        heads, d = linear_dims(model, mixer)
        return [
            Gemm("lin_qkv", tokens, 3 * heads * d / tp, model.hidden),
            Gemm("lin_out", tokens, model.hidden, heads * d / tp),
        ]

    def scan_flops(
        self, model: ModelSpec, mixer: LinearAttentionMixer, tp: int, tokens: float
    ) -> float:
        return scan_flops(model, mixer, tp, tokens)

    def elementwise(
        self,
        model: ModelSpec,
        mixer: LinearAttentionMixer,
        tp: int,
        tokens: float,
        act_bytes: float,
    ) -> MixerElementwise:
        heads, d = linear_dims(model, mixer)
        return MixerElementwise(tokens * 2 * 2 * heads * d / tp * act_bytes, kernels=4.0)

    def activations(
        self,
        model: ModelSpec,
        mixer: LinearAttentionMixer,
        seq: float,
        batch: int,
        gin: float,
        modules: set[str],
        dropout: bool,
        flash_attention: bool,
    ) -> MixerActivations:
        """q, k, v, the output and the fp32 chunk states."""
        tok = seq * batch
        heads, d = linear_dims(model, mixer)
        states = 4.0 / 2.0 * heads * d * d / mixer.chunk
        return MixerActivations(tok * (3 * heads * d + heads * d + states) / 1 * 2.0, 0.0)
