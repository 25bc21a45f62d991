"""Softmax attention (MHA / GQA / MQA, or MLA when the model has an ``mla`` block; optionally a
sliding window): projections, core FLOPs, rotary embedding and saved activations.

Core forward FLOPs are 2 * tokens * context * heads * (d_qk + d_v); causal masking halves the
work a fused kernel does (FlashAttention skips masked blocks), while the MFU convention counts
it whole (PaLM, Chowdhery et al. 2022, appendix B). Saved activations follow Korthikanti et al.
2022 (section 4.1, Table 2), extended to GQA and MLA.
"""

from __future__ import annotations

from planner.costs.blocks.base import MixerActivations, MixerCosts, MixerElementwise
from planner.costs.gemm import Gemm, tokens_per_gpu
from planner.specs.blocks import AttentionMixer
from planner.specs.layout import Layout, Training
from planner.specs.model import ModelSpec


def attention_gemms(model: ModelSpec, tp: int, tokens: float) -> list[Gemm]:
    """Projection GEMMs of the token mixer (MHA/GQA or MLA), TP-split as Megatron does."""
    h = model.hidden
    if model.mla is None:
        return [
            Gemm("qkv", tokens, (model.q_dim + 2 * model.kv_dim) / tp, h),
            Gemm("attn_out", tokens, h, model.v_dim / tp),
        ]
    m = model.mla
    qk_head = m.qk_nope_head_dim + m.qk_rope_head_dim
    gemms = []
    if m.q_lora_rank:
        gemms += [
            Gemm("q_down", tokens, m.q_lora_rank, h),
            Gemm("q_up", tokens, model.heads * qk_head / tp, m.q_lora_rank),
        ]
    else:
        gemms.append(Gemm("q_proj", tokens, model.heads * qk_head / tp, h))
    gemms += [
        Gemm("kv_down", tokens, m.kv_lora_rank + m.qk_rope_head_dim, h),
        Gemm(
            "kv_up", tokens, model.heads * (m.qk_nope_head_dim + m.v_head_dim) / tp, m.kv_lora_rank
        ),
        Gemm("attn_out", tokens, h, model.v_dim / tp),
    ]
    return gemms


def attention_head_width(model: ModelSpec) -> int:
    """d_qk + d_v of one attention head (MLA: nope + rope + v)."""
    if model.mla:
        return model.mla.qk_nope_head_dim + model.mla.qk_rope_head_dim + model.mla.v_head_dim
    return 2 * model.d_head


def attention_head_dim(model: ModelSpec) -> float:
    """Mean of d_qk and d_v: the head dimension a fused attention kernel tiles over."""
    return attention_head_width(model) / 2.0


def attention_core_flops(
    model: ModelSpec, layout: Layout, training: Training, window: int | None = None
) -> tuple[float, float]:
    """(hardware, model-convention) forward FLOPs of scores and values for one micro-batch.

    Full causal attention: the convention counts every query against every key, a fused kernel
    does half. A sliding window of w < S keys: both count the w-key band.
    """
    tokens = tokens_per_gpu(layout, training)
    heads = model.heads / layout.tp
    if window and window < training.seq_len:
        band = 2.0 * tokens * window * heads * attention_head_width(model)
        return band, band
    full = 2.0 * tokens * training.seq_len * heads * attention_head_width(model)
    return 0.5 * full, full


def attention_context(mixer: AttentionMixer, seq_len: int) -> tuple[float, bool]:
    """(keys each query sees on average, whether causal masking halves the work)."""
    if mixer.window and mixer.window < seq_len:
        return float(mixer.window), False  # a band of `window` keys (edge effects ignored)
    return float(seq_len), True


class AttentionCosts(MixerCosts):
    """Softmax attention, costed by the attention kernel model (fused or unfused)."""

    kind = "attention"
    softmax_attention = True

    def gemms(self, model: ModelSpec, mixer: AttentionMixer, tp: int, tokens: float) -> list[Gemm]:
        return attention_gemms(model, tp, tokens)

    def core_flops(
        self, model: ModelSpec, mixer: AttentionMixer, layout: Layout, training: Training
    ) -> tuple[float, float]:
        return attention_core_flops(model, layout, training, mixer.window)

    def model_core_flops_per_token(
        self, model: ModelSpec, mixer: AttentionMixer, seq_len: int, layers: int = 1
    ) -> float:
        ctx = min(seq_len, mixer.window or seq_len)
        return layers * 6.0 * model.heads * attention_head_width(model) * ctx

    def elementwise(
        self, model: ModelSpec, mixer: AttentionMixer, tp: int, tokens: float, act_bytes: float
    ) -> MixerElementwise:
        if model.learned_position_embeddings:
            return MixerElementwise()
        rope = 2 * tokens * (model.q_dim + model.kv_dim) / tp * act_bytes  # read + write q, k
        return MixerElementwise(rope_bytes=rope, kernels=1.0)

    def activations(
        self,
        model: ModelSpec,
        mixer: AttentionMixer,
        seq: float,
        batch: int,
        gin: float,
        modules: set[str],
        dropout: bool,
        flash_attention: bool,
    ) -> MixerActivations:
        tok = seq * batch
        replicated = 0.0
        if model.mla:
            m = model.mla
            qk = m.qk_nope_head_dim + m.qk_rope_head_dim
            qkv = 2 * tok * model.heads * (2 * qk + m.v_head_dim)
            if "mla_up_proj" in modules:
                qkv = 0.0  # up-projected q, k, v discarded, re-run from the latents in backward
            replicated = 2 * tok * (m.kv_lora_rank + (m.q_lora_rank or 0))
        else:
            qkv = 2 * tok * (model.q_dim + 2 * model.kv_dim)
        core = 0.0
        if "core_attn" not in modules and not flash_attention:
            ctx = min(seq, mixer.window or seq)
            # softmax output (+ mask and dropout output) per score
            core = (5.0 if dropout else 2.0) * model.heads * seq * ctx * batch
        elif flash_attention:
            core = 4.0 * tok * model.heads  # fp32 log-sum-exp per row
        return MixerActivations(qkv, gin * tok * model.v_dim, replicated, core)
