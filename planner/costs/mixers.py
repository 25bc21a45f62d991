"""Token mixers other than softmax attention: Mamba-2 and linear attention; and the context a
sliding-window attention layer sees.

Mamba-2 (Dao & Gu 2024, "Transformers are SSMs", arXiv 2405.21060): in_proj (z, x, B, C, dt)
and out_proj are GEMMs split over TP by heads; the chunked SSD scan costs, per token and head,
2Q(N+P) FLOPs inside its chunk (the C B^T "attention" over Q positions, applied to X) and 4NP
for the chunk states (B^T X, and C h); the depthwise conv, gating and gated norm are memory
bound. Linear attention (Katharopoulos et al. 2020) in its chunked form has the same shape with
N = P = head_dim.
"""

from __future__ import annotations

from planner.costs.flops import Gemm
from planner.specs.blocks import AttentionMixer, LinearAttentionMixer, Mamba2Mixer
from planner.specs.model import ModelSpec

Mixer = AttentionMixer | Mamba2Mixer | LinearAttentionMixer


def mamba_dims(model: ModelSpec, m: Mamba2Mixer) -> tuple[int, int, int]:
    """(inner width, SSD heads, B/C width = 2 x groups x state)."""
    d_in = m.expand * model.hidden
    return d_in, d_in // m.head_dim, 2 * m.n_groups * m.d_state


def linear_dims(model: ModelSpec, m: LinearAttentionMixer) -> tuple[int, int]:
    """(heads, head dim)."""
    return m.heads or model.heads, m.head_dim or model.d_head


def ssm_gemms(model: ModelSpec, mixer: Mixer, tp: int, tokens: float) -> list[Gemm]:
    """Projection GEMMs of a Mamba-2 or linear-attention mixer."""
    h = model.hidden
    if isinstance(mixer, Mamba2Mixer):
        d_in, nheads, bc = mamba_dims(model, mixer)
        return [
            Gemm("ssm_in_proj", tokens, (2 * d_in + bc + nheads) / tp, h),
            Gemm("ssm_out_proj", tokens, h, d_in / tp),
        ]
    assert isinstance(mixer, LinearAttentionMixer)
    heads, d = linear_dims(model, mixer)
    return [
        Gemm("lin_qkv", tokens, 3 * heads * d / tp, h),
        Gemm("lin_out", tokens, h, heads * d / tp),
    ]


def scan_flops(model: ModelSpec, mixer: Mixer, tp: int, tokens: float) -> float:
    """Forward FLOPs of the chunked scan on one GPU (hardware and model convention alike)."""
    if isinstance(mixer, Mamba2Mixer):
        _, nheads, _ = mamba_dims(model, mixer)
        q, n, p = mixer.chunk, mixer.d_state, mixer.head_dim
    else:
        assert isinstance(mixer, LinearAttentionMixer)
        nheads, p = linear_dims(model, mixer)
        q, n = mixer.chunk, p
    return tokens * nheads / tp * (2.0 * q * (n + p) + 4.0 * n * p)


def ssm_elementwise_bytes(
    model: ModelSpec, mixer: Mixer, tp: int, tokens: float, act_bytes: float
) -> float:
    """Forward HBM bytes of the conv1d, gating and gated norm (Mamba-2) or feature map."""
    if isinstance(mixer, Mamba2Mixer):
        d_in, _, bc = mamba_dims(model, mixer)
        conv = 2 * (d_in + bc)  # read and write x, B, C
        gate_norm = 3 * d_in + 2 * d_in  # y * silu(z): read 2 write 1; norm read + write
        return tokens * (conv + gate_norm) / tp * act_bytes
    heads, d = linear_dims(model, mixer)
    return tokens * 2 * 2 * heads * d / tp * act_bytes  # feature map on q and k


def ssm_activation_bytes(
    model: ModelSpec, mixer: Mixer, tp: int, tokens: float, act_bytes: float
) -> float:
    """Bytes a Mamba-2 / linear-attention mixer keeps for backward (TP-split inner part):
    projection outputs, conv output, scan output and fp32 chunk states."""
    if isinstance(mixer, Mamba2Mixer):
        d_in, nheads, bc = mamba_dims(model, mixer)
        kept = (2 * d_in + bc + nheads) + (d_in + bc) + 2 * d_in
        states = 4.0 / act_bytes * nheads * mixer.head_dim * mixer.d_state / mixer.chunk
        return tokens * (kept + states) / tp * act_bytes
    heads, d = linear_dims(model, mixer)
    states = 4.0 / act_bytes * heads * d * d / mixer.chunk
    return tokens * (3 * heads * d + heads * d + states) / tp * act_bytes


def attention_context(mixer: Mixer, seq_len: int) -> tuple[float, bool]:
    """(keys each query sees on average, whether causal masking halves the work)."""
    if isinstance(mixer, AttentionMixer) and mixer.window and mixer.window < seq_len:
        return float(mixer.window), False  # a band of `window` keys (edge effects ignored)
    return float(seq_len), True
