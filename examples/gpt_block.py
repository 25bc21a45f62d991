"""Transformer blocks built from a shipped ModelSpec, for ``planner trace`` and its tests.

Factories (no arguments, as ``planner trace examples/gpt_block.py:FACTORY`` calls them):

* ``llama_block``: one Llama-3.1-8B block whose autograd saves what fused training kernels save
  (Megatron-Core / Transformer Engine): a fused RMSNorm keeps its input and the fp32 inverse
  RMS; a fused SwiGLU keeps only the fc1 output (gate and up) and recomputes the activation;
  a FlashAttention-style core keeps Q, K, V (K and V at the KV-head width, GQA), the output and
  the fp32 log-sum-exp, and recomputes the probabilities in backward. This is the saving
  contract ``planner.costs.memory.layer_activation_bytes`` models, so the trace checks its
  bookkeeping (GQA widths, gated MLP, MoE) rather than PyTorch's eager kernel choices.
* ``llama_block_eager``: the same block from ``calibration/closed_loop/gpt.py`` (nn.RMSNorm,
  ``F.scaled_dot_product_attention``, an unfused SwiGLU): what plain PyTorch saves.
* ``tiny_gpt``: the whole ``gpt-tiny`` model (token ids in, logits out).

FLOPs: every GEMM is an ``nn.Linear`` (2mnk forward). Attention is full non-causal on the meta
device in both variants (eager SDPA runs the math path's two bmm; the flash-style core computes
all S x S scores and masks them), i.e. the model convention of ``planner.costs.flops``; the
flash-style backward does 5 bmm (2.5x forward, the FlashAttention-2 convention), the eager one 4.

All modules run on real devices too (the flash-style pieces have exact backward passes; a test
checks them against the eager block in float64).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from calibration.closed_loop import gpt
from planner.specs.loading import load_model
from planner.specs.model import ModelSpec

ROPE_BASE = gpt.ROPE_BASE


def rope_tables(
    seq_len: int, head_dim: int, device: torch.device, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin (seq_len, head_dim) for rotate-half RoPE, built on ``device`` in ``dtype``."""
    inv = 1.0 / (
        ROPE_BASE ** (torch.arange(0, head_dim, 2, dtype=torch.float32, device=device) / head_dim)
    )
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float32, device=device), inv)
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x`` (B, T, H, D) by position; ``cos``/``sin`` are (T, D)."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos[:, None, :] + rotated * sin[:, None, :]


# ---- fused-kernel saving contracts -------------------------------------------------------------


def _acc(t: torch.Tensor) -> torch.Tensor:
    """``t`` in its accumulation dtype: float32 for 16-bit inputs, else unchanged (fp32/fp64)."""
    return t.float() if t.element_size() < 4 else t


class RMSNormFn(torch.autograd.Function):
    """RMSNorm that saves its input and the fp32 inverse RMS (as TE/apex fused norms do)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        rstd = torch.rsqrt(_acc(x).pow(2).mean(-1, keepdim=True) + eps)
        ctx.save_for_backward(x, weight, rstd)
        return (_acc(x) * rstd).to(x.dtype) * weight

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None]:
        x, weight, rstd = ctx.saved_tensors
        xhat = _acc(x) * rstd
        g = _acc(grad)
        gw = g * _acc(weight)
        dx = rstd * (gw - xhat * (gw * xhat).mean(-1, keepdim=True))
        dweight = (g * xhat).reshape(-1, x.shape[-1]).sum(0)
        return dx.to(x.dtype), dweight.to(weight.dtype), None


class FusedRMSNorm(nn.Module):
    """RMSNorm over the last dimension with a learned scale (``hidden`` parameters)."""

    def __init__(self, hidden: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return RMSNormFn.apply(x, self.weight, self.eps)


def _gated(h: torch.Tensor, activation: str) -> torch.Tensor:
    gate, up = h.chunk(2, dim=-1)
    return (F.silu(gate) if activation == "swiglu" else F.gelu(gate)) * up


class GatedActFn(torch.autograd.Function):
    """``act(gate) * up [* w]`` of the fused fc1 output ``h`` = [gate | up]; saves only ``h``
    (and the optional per-row weight ``w``) and recomputes the activation in backward, as
    Megatron's fused (weighted) bias-SwiGLU does."""

    @staticmethod
    def forward(ctx: Any, h: torch.Tensor, w: torch.Tensor | None, activation: str) -> torch.Tensor:
        ctx.activation = activation
        ctx.has_w = w is not None
        ctx.save_for_backward(h, *(() if w is None else (w,)))
        out = _gated(h, activation)
        return out if w is None else out * w

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, Any, None]:
        h, *rest = ctx.saved_tensors
        w = rest[0] if rest else None
        with torch.enable_grad():
            h_ = h.detach().requires_grad_(True)
            a = _gated(h_, ctx.activation)
            g = grad if w is None else grad * w
            (dh,) = torch.autograd.grad(a, h_, g)
        dw = None
        if w is not None:
            dw = (grad * a.detach()).sum(-1, keepdim=True)
        return dh, dw, None


class FlashAttentionFn(torch.autograd.Function):
    """Causal attention with FlashAttention's saving contract: Q, K, V, O and the fp32
    log-sum-exp per row. Inputs and output are (B, T, heads, D); K and V may have fewer heads
    (GQA). Forward: 2 bmm (S = Q K^T, O = P V); backward recomputes S and does dV, dP, dQ, dK:
    5 bmm, 2.5x the forward FLOPs. All S x S scores are computed (masked, not skipped)."""

    @staticmethod
    def forward(ctx: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        group = q.shape[2] // k.shape[2]
        qh, kh, vh = (t.transpose(1, 2) for t in (q, k, v))
        kh, vh = kh.repeat_interleave(group, 1), vh.repeat_interleave(group, 1)
        scale = 1.0 / math.sqrt(q.shape[-1])
        s = _masked_scores(qh, kh, scale)
        lse = torch.logsumexp(s, dim=-1, keepdim=True)  # (B, H, T, 1) fp32
        p = torch.exp(s - lse).to(v.dtype)
        o = (p @ vh).transpose(1, 2).contiguous()  # (B, T, H, D)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.group, ctx.scale = group, scale
        return o

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, ...]:
        q, k, v, o, lse = ctx.saved_tensors
        group, scale = ctx.group, ctx.scale
        qh, kh, vh = (t.transpose(1, 2) for t in (q, k, v))
        kh, vh = kh.repeat_interleave(group, 1), vh.repeat_interleave(group, 1)
        do, oh = grad.transpose(1, 2), o.transpose(1, 2)
        p = torch.exp(_masked_scores(qh, kh, scale) - lse)  # recomputed probabilities (fp32)
        dv = p.to(do.dtype).transpose(-2, -1) @ do
        dp = _acc(do @ vh.transpose(-2, -1))
        delta = (_acc(do) * _acc(oh)).sum(-1, keepdim=True)
        ds = (p * (dp - delta) * scale).to(q.dtype)
        dq = ds @ kh
        dk = ds.transpose(-2, -1) @ qh

        def fold(t: torch.Tensor) -> torch.Tensor:  # sum the GQA copies, back to (B, T, h, D)
            b, h, n, d = t.shape
            return t.view(b, h // group, group, n, d).sum(2).transpose(1, 2)

        return dq.transpose(1, 2), fold(dk), fold(dv)


def _masked_scores(qh: torch.Tensor, kh: torch.Tensor, scale: float) -> torch.Tensor:
    """Causally masked fp32 scores Q K^T * scale of (B, H, T, D) inputs."""
    s = _acc(qh @ kh.transpose(-2, -1)) * scale
    n = s.shape[-1]
    mask = torch.ones(n, n, dtype=torch.bool, device=s.device).triu(1)
    return s.masked_fill(mask, float("-inf"))


class FlashAttention(nn.Module):
    """GQA self-attention: fused QKV Linear, RoPE, flash-style core, output Linear (no bias)."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = spec.heads, spec.n_kv_heads, spec.d_head
        self.q_dim, self.kv_dim = spec.q_dim, spec.kv_dim
        self.qkv = nn.Linear(spec.hidden, self.q_dim + 2 * self.kv_dim, bias=False)
        self.proj = nn.Linear(spec.v_dim, spec.hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = self.qkv(x).split([self.q_dim, self.kv_dim, self.kv_dim], dim=-1)
        q = q.view(b, t, self.heads, self.head_dim)
        k = k.view(b, t, self.kv_heads, self.head_dim)
        # flash kernels take contiguous per-head inputs: V is copied out of the fused QKV output,
        # which is then freed (Q and K are fresh tensors after RoPE)
        v = v.reshape(b, t, self.kv_heads, self.head_dim).contiguous()
        cos, sin = rope_tables(t, self.head_dim, x.device, x.dtype)
        o = FlashAttentionFn.apply(apply_rope(q, cos, sin), apply_rope(k, cos, sin), v)
        return self.proj(o.view(b, t, self.q_dim))


class FusedMLP(nn.Module):
    """Gated MLP (swiglu/geglu): fc1 (gate|up fused), GatedActFn, fc2; no biases.

    ``forward(x, w)`` optionally scales each row's activation by ``w`` (rows, 1): by linearity of
    fc2 this equals scaling the MLP output, without keeping that output for w's gradient.
    """

    def __init__(self, spec: ModelSpec, ffn: int | None = None) -> None:
        super().__init__()
        if not spec.gated:
            raise NotImplementedError(f"{spec.name}: FusedMLP needs a gated activation")
        self.activation = spec.activation
        width = ffn or spec.ffn_hidden
        self.fc1 = nn.Linear(spec.hidden, 2 * width, bias=False)
        self.fc2 = nn.Linear(width, spec.hidden, bias=False)

    def forward(self, x: torch.Tensor, w: torch.Tensor | None = None) -> torch.Tensor:
        return self.fc2(GatedActFn.apply(self.fc1(x), w, self.activation))


class FusedBlock(nn.Module):
    """Pre-norm block ``x + attn(norm1(x))``, ``+ mlp(norm2(x))`` with fused saving contracts.

    ``mlp`` replaces the dense FusedMLP (the MoE example passes its MoE layer).
    """

    def __init__(self, spec: ModelSpec, mlp: nn.Module | None = None) -> None:
        super().__init__()
        self.hidden = spec.hidden
        self.norm1 = FusedRMSNorm(spec.hidden)
        self.attn = FlashAttention(spec)
        self.norm2 = FusedRMSNorm(spec.hidden)
        self.mlp = mlp if mlp is not None else FusedMLP(spec)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """One block over ``x`` (B, T, hidden)."""
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class EagerBlock(nn.Module):
    """``calibration.closed_loop.gpt.Block`` with its RoPE tables built per forward."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.hidden = spec.hidden
        self.head_dim = spec.d_head
        self.rope = not spec.learned_position_embeddings
        self.block = gpt.Block(spec)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """One block over ``x`` (B, T, hidden)."""
        rope = (
            rope_tables(x.shape[1], self.head_dim, x.device, torch.float32) if self.rope else None
        )
        return self.block(x, rope)


def make_block(model: str | ModelSpec, fused: bool = True) -> nn.Module:
    """One dense block of a shipped model id (or spec): FusedBlock or EagerBlock."""
    spec = model if isinstance(model, ModelSpec) else load_model(model)
    return FusedBlock(spec) if fused else EagerBlock(spec)


def llama_block() -> nn.Module:
    """One Llama-3.1-8B block with fused-kernel saving contracts (see the module docstring)."""
    return make_block("llama3.1-8b")


def llama_block_eager() -> nn.Module:
    """One Llama-3.1-8B block as plain PyTorch (closed-loop GPT block, SDPA)."""
    return make_block("llama3.1-8b", fused=False)


def tiny_gpt() -> nn.Module:
    """The whole gpt-tiny model (4 layers, hidden 512, tied embeddings), up to 2048 tokens."""
    return gpt.GPT(load_model("gpt-tiny"), seq_len=2048)
