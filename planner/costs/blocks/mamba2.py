"""Mamba-2 (Dao & Gu 2024, "Transformers are SSMs", arXiv 2405.21060): in_proj (z, x, B, C, dt)
and out_proj are GEMMs split over TP by heads; the chunked SSD scan
(:func:`~planner.costs.blocks.base.chunked_scan_flops`); the depthwise conv, gating and gated
norm are memory bound.
"""

from __future__ import annotations

from planner.costs.blocks.base import (
    MixerActivations,
    MixerElementwise,
    ScanMixerCosts,
    chunked_scan_flops,
)
from planner.costs.gemm import Gemm
from planner.specs.blocks import Mamba2Mixer
from planner.specs.model import ModelSpec


def mamba_dims(model: ModelSpec, m: Mamba2Mixer) -> tuple[int, int, int]:
    """(inner width, SSD heads, B/C width = 2 x groups x state)."""
    d_in = m.expand * model.hidden
    return d_in, d_in // m.head_dim, 2 * m.n_groups * m.d_state


def scan_flops(model: ModelSpec, m: Mamba2Mixer, tp: int, tokens: float) -> float:
    """Forward FLOPs of the SSD scan on one GPU (hardware and model convention alike)."""
    _, nheads, _ = mamba_dims(model, m)
    return chunked_scan_flops(tokens, nheads, tp, m.chunk, m.d_state, m.head_dim)


class Mamba2Costs(ScanMixerCosts):
    """A Mamba-2 block's costs."""

    kind = "mamba2"

    def gemms(self, model: ModelSpec, mixer: Mamba2Mixer, tp: int, tokens: float) -> list[Gemm]:
        d_in, nheads, bc = mamba_dims(model, mixer)
        return [
            Gemm("ssm_in_proj", tokens, (2 * d_in + bc + nheads) / tp, model.hidden),
            Gemm("ssm_out_proj", tokens, model.hidden, d_in / tp),
        ]

    def scan_flops(self, model: ModelSpec, mixer: Mamba2Mixer, tp: int, tokens: float) -> float:
        return scan_flops(model, mixer, tp, tokens)

    def elementwise(
        self, model: ModelSpec, mixer: Mamba2Mixer, tp: int, tokens: float, act_bytes: float
    ) -> MixerElementwise:
        d_in, _, bc = mamba_dims(model, mixer)
        conv = 2 * (d_in + bc)  # read and write x, B, C
        gate_norm = 3 * d_in + 2 * d_in  # y * silu(z): read 2 write 1; norm read + write
        return MixerElementwise(tokens * (conv + gate_norm) / tp * act_bytes, kernels=4.0)

    def activations(
        self,
        model: ModelSpec,
        mixer: Mamba2Mixer,
        seq: float,
        batch: int,
        gin: float,
        modules: set[str],
        dropout: bool,
        flash_attention: bool,
    ) -> MixerActivations:
        """Projection outputs, conv output, scan output and the fp32 chunk states."""
        tok = seq * batch
        d_in, nheads, bc = mamba_dims(model, mixer)
        kept = (2 * d_in + bc + nheads) + (d_in + bc) + 2 * d_in
        states = 4.0 / 2.0 * nheads * mixer.head_dim * mixer.d_state / mixer.chunk
        return MixerActivations(tok * (kept + states) / 1 * 2.0, 0.0)
