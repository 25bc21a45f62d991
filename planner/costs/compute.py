"""Compute time: roofline with efficiencies from a calibration profile.

time = max(FLOPs / (peak x eta_flops(shape)), bytes / (HBM bandwidth x eta_mem)) + fixed overhead.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from planner.costs.alignment import linear_alignment, unfused_attention_alignment
from planner.costs.elementwise import ElementwiseWork
from planner.costs.flops import Gemm
from planner.costs.host import host_op_factor
from planner.costs.waves import wave_utilization
from planner.profile import AttentionEfficiency, CalibrationProfile
from planner.specs.hardware import AcceleratorSpec


@dataclass(frozen=True, slots=True)
class Device:
    """What the compute model needs to know about one GPU under one profile and precision."""

    gemm_peak_flops: float  # FLOP/s for the training precision's GEMMs
    bf16_peak_flops: float  # FLOP/s for bf16 (fp32 when training in fp32) attention, logits
    hbm_bytes_per_s: float  # achieved HBM bandwidth for memory-bound kernels
    gemm_eta: float  # large-GEMM efficiency at the training precision
    bf16_gemm_eta: float
    dim_half: float
    gemm_fixed_s: float
    mem_fixed_s: float
    norm_bytes_per_s: float  # achieved bandwidth of LayerNorm / RMSNorm
    xent_bytes_per_s: float  # softmax + cross-entropy
    adam_bytes_per_s: float  # optimizer update
    attn_eta_fwd: float
    attn_eta_bwd: float
    attn_seq_half: float
    attn_dim_half_fwd: float  # head-dimension saturation of the fused kernel (see below)
    attn_dim_half_bwd: float
    attn_dim_factor_max: float  # the head-dimension gain's cap (relative to d = 128)
    gemm_in_bytes: float  # bytes per GEMM input element (1 for fp8)
    act_bytes: float  # bytes per activation / GEMM output element
    host_op_s: float = 0.0  # host time to issue one framework op (0: host never binds)
    sm_count: int | None = None  # SMs for tile / wave quantization (None: none)


# Fused attention throughput grows with the head dimension d (more work per loaded tile):
# eta(d) ~ d / (d + d_half), normalised to d = 128 where the profile's curve is fitted.
# FlashAttention-3 on H100 at 16k (arXiv 2407.08608, shared/reference/hardware.md B7): causal fwd
# 473 TFLOP/s at d=64 vs 616 at d=128 (0.77), bwd 474 vs 561 (0.85) -> d_half 55 and 29.
# cuDNN 9.1.1 in the same figures: causal fwd 388 vs 539 (0.72), bwd 433 vs 516 (0.84) -> d_half
# 82 and 30; d = 256 is no faster than d = 128 (causal fwd 509 vs 539): capped at 1.
# FlashAttention-2 on A100 (arXiv 2307.08691 Figs. 4-6): causal bwd 166 vs 186 (0.89) -> d_half
# 18; its causal forward is no slower at d=64 (185 vs 148), so no forward penalty.
ATTN_DIM_HALF = {
    "fused": (55.0, 29.0),
    "cudnn": (82.0, 30.0),
    "flash2": (0.0, 18.0),
    "unfused": (0.0, 0.0),
}
ATTN_REF_HEAD_DIM = 128.0
# d = 256 over d = 128: FA3 fwd (no causal) measures ~1.2x (756 vs 648); cuDNN does not gain
ATTN_DIM_FACTOR_MAX = {"fused": 1.2, "cudnn": 1.0, "flash2": 1.2, "unfused": 1.2}
# the Triton FlashAttention has no head-dimension figure of its own: FlashAttention-2's
ATTN_DIM_HALF["flash_triton"] = ATTN_DIM_HALF["flash2"]
ATTN_DIM_FACTOR_MAX["flash_triton"] = ATTN_DIM_FACTOR_MAX["flash2"]


def attention_efficiency(profile: CalibrationProfile, attention_kernel: str) -> AttentionEfficiency:
    """The profile's curve for a kernel: FlashAttention-2, cuDNN and the Triton
    FlashAttention where the profile has them apart, else its fused (best-kernel) curve (the
    Triton kernel falls back to FlashAttention-2's first)."""
    own = {
        "flash2": profile.attention_flash2,
        "cudnn": profile.attention_cudnn,
        "flash_triton": profile.attention_flash_triton or profile.attention_flash2,
    }
    return own.get(attention_kernel) or profile.attention


def make_device(
    accel: AcceleratorSpec,
    profile: CalibrationProfile,
    precision: str,
    attention_kernel: str = "fused",
    norm: str = "rmsnorm",
    execution: str = "eager",
) -> Device:
    """Bind an accelerator and a profile for one training precision and attention kernel;
    ``execution`` scales the host time per op (:func:`planner.costs.host.host_op_factor`)."""
    work = "fp32" if precision == "fp32" else "bf16"
    # a power cap below the rated power (1.0 without); a profile measured on a device already
    # carries that device's clocks, so the cap is not applied a second time
    clock = accel.tensor_clock_fraction if profile.device is None else 1.0
    bf16_peak = accel.peak_flops_per_s(work) * clock
    gemm_peak = accel.peak_flops_per_s(precision) * clock
    peak_bw = accel.hbm_bandwidth_tb_per_s * 1e12
    attn = attention_efficiency(profile, attention_kernel)
    return Device(
        gemm_peak_flops=gemm_peak,
        bf16_peak_flops=bf16_peak,
        hbm_bytes_per_s=peak_bw * profile.memory.eta("copy"),
        gemm_eta=profile.gemm_eta_max(precision) * profile.gemm.sustained_fraction,
        bf16_gemm_eta=profile.gemm_eta_max(work) * profile.gemm.sustained_fraction,
        dim_half=profile.gemm.dim_half,
        gemm_fixed_s=profile.gemm.fixed_us * 1e-6,
        mem_fixed_s=profile.memory.fixed_us * 1e-6,
        norm_bytes_per_s=peak_bw
        * profile.memory.eta("layernorm" if norm == "layernorm" else "rmsnorm"),
        xent_bytes_per_s=peak_bw * profile.memory.eta("softmax_xent"),
        adam_bytes_per_s=peak_bw * profile.memory.eta("adamw"),
        attn_eta_fwd=attn.eta_max_fwd * profile.gemm.sustained_fraction,
        attn_eta_bwd=attn.eta_max_bwd * profile.gemm.sustained_fraction,
        attn_seq_half=attn.seq_half,
        attn_dim_half_fwd=ATTN_DIM_HALF[attention_kernel][0],
        attn_dim_half_bwd=ATTN_DIM_HALF[attention_kernel][1],
        attn_dim_factor_max=ATTN_DIM_FACTOR_MAX[attention_kernel],
        gemm_in_bytes={"fp8": 1.0, "fp32": 4.0}.get(precision, 2.0),
        act_bytes=4.0 if precision == "fp32" else 2.0,
        host_op_s=profile.host.op_us * 1e-6 * host_op_factor(execution),
        sm_count=accel.sm_count,
    )


def gemm_time_s(
    m: float,
    n: float,
    k: float,
    dev: Device,
    low_precision: bool = True,
    batch: float = 1.0,
    align: float = 1.0,
) -> float:
    """Seconds for one (m x k) @ (k x n) GEMM: the smooth per-dimension saturation of the
    profile times the tile / wave quantization over the SMs (:mod:`planner.costs.waves`);
    ``batch`` GEMMs of this shape issued in one launch (batched or grouped) share the waves;
    ``align`` is the operand-alignment factor (:mod:`planner.costs.alignment`)."""
    dh = dev.dim_half
    shape = align * (m / (m + dh)) * (n / (n + dh)) * (k / (k + dh))
    if dev.sm_count is not None:
        shape *= wave_utilization(m, n, k, dev.sm_count, batch)
    if low_precision:
        peak, eta, in_bytes = dev.gemm_peak_flops, dev.gemm_eta, dev.gemm_in_bytes
    else:
        peak, eta, in_bytes = dev.bf16_peak_flops, dev.bf16_gemm_eta, dev.act_bytes
    t_flops = 2.0 * m * n * k / (peak * eta * shape)
    t_bytes = ((m * k + k * n) * in_bytes + m * n * dev.act_bytes) / dev.hbm_bytes_per_s
    return max(t_flops, t_bytes) + dev.gemm_fixed_s


def low_precision(g: Gemm, wgrad: bool = True) -> bool:
    """Whether ``g`` runs at the training precision (the router and the logits stay in bf16);
    ``wgrad``: for its weight-gradient GEMM, whether the recipe runs that one low too."""
    return wgrad and g.name not in ("router", "logits")


def gemm_alignment(g: Gemm, dev: Device, low: bool) -> float:
    """Operand-alignment factor of a GEMM's three training GEMMs (its rows are ``g.n`` and
    ``g.k`` wide; the logits' ``n`` is the stack's padded vocabulary over TP)."""
    return linear_alignment(g.n, g.k, dev.gemm_in_bytes if low else dev.act_bytes)


def gemms_time_s(
    gemms: tuple[Gemm, ...], dev: Device, wgrad_low: bool = True
) -> tuple[float, float]:
    """(forward, backward) seconds of a list of GEMMs; backward = data and weight gradients
    (``wgrad_low`` False: the weight gradients at bf16, torchao rowwise_with_gw_hp)."""
    fwd = bwd = 0.0
    for g in gemms:
        low, low_w = low_precision(g), low_precision(g, wgrad_low)
        c, a, a_w = g.count, gemm_alignment(g, dev, low), gemm_alignment(g, dev, low_w)
        fwd += c * gemm_time_s(g.m, g.n, g.k, dev, low, c, a)
        bwd += c * (
            gemm_time_s(g.m, g.k, g.n, dev, low, c, a)
            + gemm_time_s(g.k, g.n, g.m, dev, low_w, c, a_w)
        )
    return fwd, bwd


def head_dim_factor(head_dim: float, dim_half: float, cap: float = 1.2) -> float:
    """Fused-attention efficiency at ``head_dim`` relative to d = 128 (at most ``cap``)."""
    if dim_half <= 0:
        return min(1.0, cap)
    ref = ATTN_REF_HEAD_DIM / (ATTN_REF_HEAD_DIM + dim_half)
    return min(cap, head_dim / (head_dim + dim_half) / ref)


def attention_time_s(
    hw_fwd_flops: float,
    seq_len: float,
    dev: Device,
    bwd_factor: float = 2.5,
    head_dim: float = ATTN_REF_HEAD_DIM,
) -> tuple[float, float]:
    """(forward, backward) seconds of a fused token-mixer core kernel (bf16).

    Attention: backward = 2.5x forward FLOPs (FlashAttention convention); efficiency saturates in
    the sequence length and in the head dimension (``head_dim_factor``). Chunked SSD / linear
    attention scans (``bwd_factor`` 2) are fused kernels of the same class and use the same
    efficiency curve (an assumption until measured).
    """
    if hw_fwd_flops <= 0:
        return 0.0, 0.0
    sat = seq_len / (seq_len + dev.attn_seq_half)
    f_fwd = head_dim_factor(head_dim, dev.attn_dim_half_fwd, dev.attn_dim_factor_max)
    f_bwd = head_dim_factor(head_dim, dev.attn_dim_half_bwd, dev.attn_dim_factor_max)
    fwd = hw_fwd_flops / (dev.bf16_peak_flops * dev.attn_eta_fwd * sat * f_fwd)
    bwd = bwd_factor * hw_fwd_flops / (dev.bf16_peak_flops * dev.attn_eta_bwd * sat * f_bwd)
    return fwd, bwd


def attention_span(seq_len: float, window: int | None) -> float:
    """The sequence length whose causal attention has the per-query work of ``seq_len`` tokens
    under a sliding ``window`` (None: none): a query of a causal length-S attention sees S / 2
    keys on average, one in a window band sees ``window``, so the band runs as a causal
    attention of 2 x window tokens (the efficiency curve of :func:`attention_time_s` was fitted
    on causal attention: FlashAttention tiles a band of w keys as it tiles a causal 2w).
    Below that length the window changes nothing."""
    return min(seq_len, 2.0 * window) if window else seq_len


# Megatron's fused scale-mask-softmax kernel (megatron/model/fused_softmax.py
# FusedScaleMaskSoftmax.is_kernel_available, Megatron-LM 2755bcb87b and both Megatron-DeepSpeed
# forks; Megatron-LM v2.5 capped the keys at 2048): 16-bit input, 16 < keys <= 4096, queries and
# keys multiples of 4, and the score matrices of a micro-batch on a GPU (micro-batch x heads / TP)
# a multiple of the kernel's batches per block (4 from 128 keys up). Otherwise the scores take
# PyTorch's path: upcast to fp32, scale, masked_fill, softmax, downcast (forward_torch_softmax).
FUSED_SOFTMAX_MAX_KEYS = 4096
# bytes per score of PyTorch's path with the softmax in fp32 (attention_softmax_in_fp32, on with
# query-key layer scaling, Megatron's default): forward upcast 2 + 4, scale 4 + 4, masked_fill
# 4 + 1 + 4, softmax 4 + 4, downcast 4 + 2; backward downcast 2 + 4, softmax 4 + 4 + 4, masked
# fill 4 + 1 + 4, scale 4 + 4, upcast 4 + 2. The fused kernel: 2 + 2 forward, about twice back.
TORCH_SOFTMAX_BYTES = (37.0, 41.0)
TORCH_SOFTMAX_BYTES_FP32 = (25.0, 29.0)  # fp32 training: no casts (the kernel never runs)


def megatron_fused_softmax(micro_batch: float, heads_per_gpu: float, seq_len: float) -> bool:
    """Whether Megatron's fused scale-mask-softmax kernel runs (see FUSED_SOFTMAX_MAX_KEYS)."""
    if not 16 < seq_len <= FUSED_SOFTMAX_MAX_KEYS or seq_len % 4:
        return False
    pow2 = 1 << math.ceil(math.log2(seq_len))
    warp = min(pow2, 32)
    per_block = (128 // warp) * (2 if pow2 <= 128 else 1)
    return (micro_batch * heads_per_gpu) % per_block == 0


def unfused_attention_time_s(
    tokens: float,
    seq_len: float,
    heads: float,
    d_qk: float,
    d_v: float,
    dropout: bool,
    dev: Device,
    fused_softmax: bool = True,
) -> tuple[float, float]:
    """(forward, backward) seconds of attention with materialised scores (pre-FlashAttention).

    Two batched GEMMs per head (Q K^T over the full s x s, no causal skip; P V) at bf16 GEMM
    efficiency (times the operand alignment of the head dimensions and the sequence,
    :func:`planner.costs.alignment.unfused_attention_alignment`), and memory-bound passes over
    the scores: fused scale-mask-softmax reads and writes 2 B per score, dropout reads 2,
    writes 2 and a 1 B mask (Korthikanti et al. 2022, section 4.1, count 5as^2b bytes of saved
    scores). Backward, counted per kernel: the fused softmax's backward reads its output and the
    incoming gradient and writes the gradient (3 x 2 B; Megatron's
    ``scaled_upper_triang_masked_softmax_warp_backward``), dropout's backward reads the gradient
    and the mask and writes the gradient (2 + 1 + 2 B; ``native_dropout_backward``).
    ``fused_softmax`` False: the softmax takes PyTorch's fp32 path (:data:`TORCH_SOFTMAX_BYTES`,
    :func:`megatron_fused_softmax`).
    """
    seqs = heads * tokens / seq_len  # independent (sequence, head) score matrices
    a = unfused_attention_alignment(seq_len, d_qk, d_v, dev.act_bytes)
    qk = gemm_time_s(seq_len, seq_len, d_qk, dev, False, seqs, a)
    pv = gemm_time_s(seq_len, d_v, seq_len, dev, False, seqs, a)
    qk_b = gemm_time_s(seq_len, d_qk, seq_len, dev, False, seqs, a) + gemm_time_s(
        d_qk, seq_len, seq_len, dev, False, seqs, a
    )
    pv_b = gemm_time_s(seq_len, seq_len, d_v, dev, False, seqs, a) + gemm_time_s(
        seq_len, d_v, seq_len, dev, False, seqs, a
    )
    scores = seqs * seq_len * seq_len
    # dropout: read and write the scores and a 1 B mask, forward and backward alike
    drop = 2.0 * dev.act_bytes + 1.0 if dropout else 0.0
    if fused_softmax:
        soft_f = (2.0 * dev.act_bytes + drop) * scores / dev.hbm_bytes_per_s
        soft_b = (3.0 * dev.act_bytes + drop) * scores / dev.hbm_bytes_per_s
    else:
        torch_f, torch_b = TORCH_SOFTMAX_BYTES_FP32 if dev.act_bytes >= 4 else TORCH_SOFTMAX_BYTES
        soft_f = (torch_f + drop) * scores / dev.hbm_bytes_per_s
        soft_b = (torch_b + drop) * scores / dev.hbm_bytes_per_s
    fix = dev.gemm_fixed_s  # one batched launch per GEMM, not one per matrix
    fwd = seqs * (qk + pv - 2 * fix) + 2 * fix + soft_f
    bwd = seqs * (qk_b + pv_b - 4 * fix) + 4 * fix + soft_b
    return fwd, bwd


def memory_bound_time_s(
    work: ElementwiseWork, dev: Device, backward_factor: float
) -> tuple[float, float]:
    """(forward, backward) seconds of memory-bound kernels: backward moves ``backward_factor``
    times the forward bytes, except the FP8 casts, which it has of its own."""
    rest = (
        (work.fwd_bytes - work.cast_fwd_bytes) / dev.hbm_bytes_per_s
        + work.norm_bytes / dev.norm_bytes_per_s
        + work.fwd_kernels * dev.mem_fixed_s
    )
    fwd = rest + work.cast_fwd_bytes / dev.hbm_bytes_per_s
    bwd = backward_factor * rest + work.cast_bwd_bytes / dev.hbm_bytes_per_s
    return fwd, bwd
