"""What tracing a module measured: :class:`TracedBlock` (one micro-batch, forward + backward)
and :func:`traced_layer_cost`, its per-token form.

Units: FLOPs are floating-point operations (multiply and add count 2), bytes are bytes, token
counts are ``batch * seq_len``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict


class TracedBlock(BaseModel):
    """What one forward + backward of a traced module costs (FLOPs, bytes, elements).

    All figures are for one micro-batch of ``batch`` sequences of ``seq_len`` tokens.
    """

    model_config = ConfigDict(frozen=True)

    fwd_flops: float  # FLOPs of the forward
    bwd_flops: float  # FLOPs of the backward (input and weight gradients)
    per_op: dict[str, dict[str, float]]  # aten op -> {"fwd": FLOPs, "bwd": FLOPs}
    per_module_fwd: dict[str, float]  # module FQN (from FlopCounterMode) -> forward FLOPs
    saved_activation_bytes: int  # bytes of unique non-parameter storages saved for backward
    saved_tensors: int  # number of those unique storages
    saved_bytes_by_dtype: dict[str, int]  # e.g. {"torch.bfloat16": ..., "torch.float32": ...}
    param_count: int  # parameter elements (tied parameters once)
    hidden: int | None  # hidden width of the block input (None: not determined)
    seq_len: int  # tokens per sequence
    batch: int  # sequences per micro-batch
    dtype: str  # "bf16", "fp16" or "fp32"
    input_kind: Literal["hidden", "tokens"]  # block on (B, S, hidden) or model on ids (B, S)
    sdpa_calls: int  # F.scaled_dot_product_attention calls in the forward
    notes: list[str]

    @property
    def tokens(self) -> int:
        """Tokens in the traced micro-batch (``batch * seq_len``)."""
        return self.batch * self.seq_len


def traced_layer_cost(traced: TracedBlock) -> dict[str, float]:
    """Per-token figures of a traced block, the form a simulator consumes.

    Keys: ``fwd_flops_per_token``, ``bwd_flops_per_token``, ``train_flops_per_token`` (FLOPs per
    token), ``params`` (elements), ``saved_activation_bytes_per_token`` (bytes per token),
    ``tokens`` (the traced micro-batch). For a whole model these are whole-model figures.
    """
    t = float(traced.tokens)
    return {
        "fwd_flops_per_token": traced.fwd_flops / t,
        "bwd_flops_per_token": traced.bwd_flops / t,
        "train_flops_per_token": (traced.fwd_flops + traced.bwd_flops) / t,
        "params": float(traced.param_count),
        "saved_activation_bytes_per_token": traced.saved_activation_bytes / t,
        "tokens": t,
    }
