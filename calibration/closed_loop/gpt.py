"""A decoder-only transformer built from a dense :class:`ModelSpec` (nanoGPT-like).

Layout per block (pre-norm): ``x + attn(norm1(x))`` then ``x + mlp(norm2(x))``; a final norm and
an output projection (tied to the token embedding when ``spec.tied_embeddings``).

* Norms: ``LayerNorm`` with its bias when ``activation == "gelu"`` (GPT-2/3 style, as the
  planner counts them), otherwise ``RMSNorm``. Linear layers have no bias.
* Attention: one fused QKV projection of width ``q_dim + 2 * kv_dim``, GQA by repeating K/V heads,
  causal ``F.scaled_dot_product_attention``, output projection ``v_dim -> hidden``.
* MLP: ``gelu``: fc1, GeLU, fc2; ``relu2``: fc1, ReLU squared, fc2; ``swiglu``/``geglu``: fused
  gate+up projection (``hidden -> 2 * ffn``), ``act(gate) * up``, fc2.
* Positions: rotary embeddings (rotate-half RoPE, base 10000) unless
  ``learned_position_embeddings``, in which case a ``max_positions x hidden`` table is learned.

MoE and MLA specs are not supported (only dense specs are needed for the closed-loop check).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from planner.specs.model import ModelSpec

ROPE_BASE = 10_000.0
INIT_STD = 0.02


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy (nats) of ``logits`` (B, T, V) against ``targets`` (B, T)."""
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())


def _rope_tables(seq_len: int, head_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin tables of shape (seq_len, head_dim), float32, for rotate-half RoPE."""
    inv_freq = 1.0 / (ROPE_BASE ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float32), inv_freq)
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos(), angles.sin()


def _apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x`` (B, H, T, D) by position: ``x * cos + rotate_half(x) * sin``."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos.to(x.dtype) + rotated * sin.to(x.dtype)


def _norm(spec: ModelSpec) -> nn.Module:
    """LayerNorm (with bias) for GeLU (GPT) models, RMSNorm otherwise."""
    if spec.activation == "gelu":
        return nn.LayerNorm(spec.hidden)
    return nn.RMSNorm(spec.hidden, eps=1e-5)


class Attention(nn.Module):
    """Causal multi-head / grouped-query self-attention without biases."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.heads = spec.heads
        self.kv_heads = spec.n_kv_heads
        self.head_dim = spec.d_head
        self.q_dim = spec.q_dim
        self.kv_dim = spec.kv_dim
        self.qkv = nn.Linear(spec.hidden, self.q_dim + 2 * self.kv_dim, bias=False)
        self.proj = nn.Linear(spec.v_dim, spec.hidden, bias=False)

    def forward(
        self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None
    ) -> torch.Tensor:
        """Attend over ``x`` (B, T, hidden); ``rope`` is the (cos, sin) pair for T positions."""
        b, t, _ = x.shape
        q, k, v = self.qkv(x).split([self.q_dim, self.kv_dim, self.kv_dim], dim=-1)
        q = q.view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = k.view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = v.view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        if rope is not None:
            cos, sin = rope
            q = _apply_rope(q, cos, sin)
            k = _apply_rope(k, cos, sin)
        if self.kv_heads != self.heads:
            repeat = self.heads // self.kv_heads
            k = k.repeat_interleave(repeat, dim=1)
            v = v.repeat_interleave(repeat, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, self.heads * self.head_dim))


class MLP(nn.Module):
    """Dense channel mixer: plain (gelu, relu2) or gated (swiglu, geglu), no biases."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.activation = spec.activation
        self.gated = spec.gated
        width = 2 * spec.ffn_hidden if self.gated else spec.ffn_hidden
        self.fc1 = nn.Linear(spec.hidden, width, bias=False)
        self.fc2 = nn.Linear(spec.ffn_hidden, spec.hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Apply the MLP to ``x`` (..., hidden)."""
        h = self.fc1(x)
        if self.activation == "gelu":
            h = F.gelu(h)
        elif self.activation == "relu2":
            h = F.relu(h).square()
        else:
            gate, up = h.chunk(2, dim=-1)
            h = (F.silu(gate) if self.activation == "swiglu" else F.gelu(gate)) * up
        return self.fc2(h)


class Block(nn.Module):
    """Pre-norm transformer block: attention then MLP, each with a residual connection."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.norm1 = _norm(spec)
        self.attn = Attention(spec)
        self.norm2 = _norm(spec)
        self.mlp = MLP(spec)

    def forward(
        self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None
    ) -> torch.Tensor:
        """One block over ``x`` (B, T, hidden)."""
        x = x + self.attn(self.norm1(x), rope)
        return x + self.mlp(self.norm2(x))


class GPT(nn.Module):
    """Decoder-only transformer for a dense ``ModelSpec``; ``forward(idx)`` returns logits.

    ``seq_len`` (tokens) is the longest sequence the model accepts: the RoPE tables are built for
    it; with learned positions it must not exceed ``spec.max_positions``.
    """

    def __init__(self, spec: ModelSpec, seq_len: int) -> None:
        super().__init__()
        self.spec = spec
        self.seq_len = seq_len
        self.wte = nn.Embedding(spec.vocab, spec.hidden)
        self.wpe = (
            nn.Embedding(spec.max_positions, spec.hidden)
            if spec.learned_position_embeddings
            else None
        )
        self.blocks = nn.ModuleList(Block(spec) for _ in range(spec.layers))
        self.norm_f = _norm(spec)
        self.lm_head = nn.Linear(spec.hidden, spec.vocab, bias=False)
        if self.wpe is None:
            cos, sin = _rope_tables(seq_len, spec.d_head)
            self.register_buffer("rope_cos", cos, persistent=False)
            self.register_buffer("rope_sin", sin, persistent=False)
        self.apply(self._init_weights)
        # Residual-output projections scaled down with depth (GPT-2).
        out_std = INIT_STD / math.sqrt(2 * spec.layers)
        for block in self.blocks:
            nn.init.normal_(block.attn.proj.weight, std=out_std)
            nn.init.normal_(block.mlp.fc2.weight, std=out_std)
        if spec.tied_embeddings:
            self.lm_head.weight = self.wte.weight

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear | nn.Embedding):
            nn.init.normal_(module.weight, std=INIT_STD)

    def num_params(self) -> int:
        """Parameter count (elements); a tied output projection is counted once."""
        return sum(p.numel() for p in self.parameters())

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """Logits (B, T, vocab) for token ids ``idx`` (B, T), T <= ``seq_len``."""
        t = idx.shape[1]
        if t > self.seq_len:
            raise ValueError(f"sequence length {t} exceeds the model's seq_len {self.seq_len}")
        x = self.wte(idx)
        rope: tuple[torch.Tensor, torch.Tensor] | None = None
        if self.wpe is not None:
            x = x + self.wpe(torch.arange(t, device=idx.device))
        else:
            rope = (self.rope_cos[:t], self.rope_sin[:t])
        for block in self.blocks:
            x = block(x, rope)
        return self.lm_head(self.norm_f(x))

    def loss(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Mean cross-entropy (nats per token) of the next-token ``targets`` (B, T)."""
        return lm_loss(self(idx), targets)


def build_gpt(
    spec: ModelSpec,
    seq_len: int,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
) -> GPT:
    """Build the transformer of a dense ``spec`` for sequences of up to ``seq_len`` tokens.

    Parameters are created in ``dtype`` on ``device``. Raises ``NotImplementedError`` for MoE or
    MLA specs and ``ValueError`` for shapes this model cannot realise (odd RoPE head dim,
    ``seq_len`` beyond a learned position table).
    """
    if spec.moe is not None:
        raise NotImplementedError(
            f"{spec.name}: mixture-of-experts specs are not supported by the closed-loop GPT "
            "(only dense specs; set moe: null)"
        )
    if spec.mla is not None:
        raise NotImplementedError(
            f"{spec.name}: multi-head latent attention specs are not supported by the "
            "closed-loop GPT (only dense GQA/MHA specs; set mla: null)"
        )
    if seq_len <= 0:
        raise ValueError(f"seq_len must be positive, got {seq_len}")
    if spec.learned_position_embeddings and seq_len > spec.max_positions:
        raise ValueError(
            f"{spec.name}: seq_len {seq_len} exceeds the learned position table "
            f"(max_positions {spec.max_positions})"
        )
    if not spec.learned_position_embeddings and spec.d_head % 2:
        raise ValueError(f"{spec.name}: RoPE needs an even head_dim, got {spec.d_head}")
    with torch.device(device):  # initialised where it runs (a 3.6B model on a CPU takes a minute)
        model = GPT(spec, seq_len)
    model = model.to(device=device, dtype=dtype)
    if model.wpe is None:  # keep the RoPE tables in float32 whatever the parameter dtype
        model.rope_cos = model.rope_cos.float()
        model.rope_sin = model.rope_sin.float()
    return model
