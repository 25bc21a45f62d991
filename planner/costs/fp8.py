"""FP8 scaling recipes: the HBM bytes of casting each GEMM operand, by recipe.

A linear layer's three GEMMs (forward Y = X W, data gradient dX = dY W^T, weight gradient
dW = X^T dY) read three operands in fp8: the input X (m x k), the weight W (k x n) and the output
gradient dY (m x n). Each must be cast from bf16 once per GEMM layout that reads it; the recipes
differ in how many passes that takes (bytes per element, a read of bf16 = 2, a write of fp8 = 1,
a scale per row or block ~0):

- ``delayed`` (Transformer Engine ``DelayedScaling``): the scale comes from an amax history, so
  one kernel reads bf16 and writes the fp8 tensor and its fp8 transpose (2 + 1 + 1 = 4 B); the
  amax of this step is reduced in the same kernel (TE ``cast_transpose``). The weights are cast
  once per step, on its first micro-batch (TE ``is_first_microbatch``), so ~0 per micro-batch.
- ``tensorwise`` (current scaling, torchao ``Float8LinearConfig`` "tensorwise"): an amax pass
  (read 2 B) before the cast; input and output gradient then cast to both layouts in one
  kernel (2 + 1 + 1), the weight in one kernel per layout (2 + 1, twice): 6 B, 6 B, 8 B.
- ``rowwise`` (torchao "rowwise"): the scale runs along the contraction dimension, which differs
  between the GEMMs, so each layout is its own cast, one of them through a bf16 transpose:
  input and output gradient 2 + 1 + 2 then 2 + 1 (8 B), weight 2 + 1, a bf16 transpose (2 + 2)
  and 2 + 1 (10 B).
- ``rowwise_gw_hp`` (torchao "rowwise_with_gw_hp"): rowwise for the two GEMMs on the critical
  path, the weight gradient in bf16: input and output gradient 2 + 1 (3 B), weight 2 + 1 twice
  (6 B); the weight-gradient GEMM runs at bf16 speed.
- ``mxfp8`` (Transformer Engine ``MXFP8BlockScaling``): 1 x 32 blocks with e8m0 scales; one
  kernel reads bf16 and writes both layouts with their scales (2 + 1 + 1 + 2/32 B); weights
  cached across micro-batches as with delayed.
- ``blockwise`` (DeepSeek-V3, arXiv 2412.19437 section 3.3.1; Transformer Engine
  ``Float8BlockScaling``): activations and gradients in 1 x 128 tiles, weights in 128 x 128
  blocks, fp32 scales; one kernel per operand writes both layouts (2 + 1 + 1 + 8/128 B), the
  weights cached across micro-batches.

The kernel accounting of tensorwise, rowwise and rowwise_gw_hp follows torchao's float8
roofline model (torchao/testing/training/roofline_utils.py,
``get_tensor_memory_traffic_ovhd_s``, unfused case); delayed and mxfp8 follow Transformer
Engine's fused cast-transpose / quantize kernels (TE ``cast_transpose``, ``quantize`` with row-
and column-wise usage). With ``fp8_param_gather`` the weight is cast on its shard before the
ZeRO / FSDP all-gather (torchao precompute_float8_dynamic_scale_for_fsdp): its cast bytes are
spread over the DP group, about nothing per GPU.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class CastBytes:
    """Bytes per element of casting one operand to fp8: in forward, and in backward."""

    fwd: float
    bwd: float


@dataclass(frozen=True, slots=True)
class Recipe:
    """A recipe's cast bytes per operand role and whether the weight gradient is in fp8."""

    input: CastBytes
    weight: CastBytes
    grad_output: CastBytes
    wgrad_fp8: bool = True


_MX = 2.0 + 1.0 + 1.0 + 2.0 / 32.0
# bytes per value of an FP8 tensor in 1 x 128 tiles with an fp32 scale each (DeepSeek-V3's
# activation tiles; also what its FP8 MoE dispatch sends, planner/simulate/layers.py)
TILE_BYTES = 1.0 + 4.0 / 128.0
# blockwise: one kernel reads bf16 and writes both layouts as 1 x 128 tiles
_BLOCK = 2.0 + 2.0 * TILE_BYTES
# Transformer Engine casts a weight on the first micro-batch of the step and reuses the fp8 copy
# for the others (Megatron passes is_first_microbatch to TE's linear layers): per micro-batch
# the weight cast is ~0 (one cast per step, a fraction 1 / micro-batches of what is counted)
_CACHED = CastBytes(0.0, 0.0)

RECIPES: dict[str, Recipe] = {
    "delayed": Recipe(CastBytes(4.0, 0.0), _CACHED, CastBytes(0.0, 4.0)),
    "tensorwise": Recipe(CastBytes(6.0, 0.0), CastBytes(5.0, 3.0), CastBytes(0.0, 6.0)),
    "rowwise": Recipe(CastBytes(5.0, 3.0), CastBytes(3.0, 7.0), CastBytes(0.0, 8.0)),
    "rowwise_gw_hp": Recipe(
        CastBytes(3.0, 0.0), CastBytes(3.0, 3.0), CastBytes(0.0, 3.0), wgrad_fp8=False
    ),
    "mxfp8": Recipe(CastBytes(_MX, 0.0), _CACHED, CastBytes(0.0, _MX)),
    "blockwise": Recipe(CastBytes(_BLOCK, 0.0), _CACHED, CastBytes(0.0, _BLOCK)),
}


def cast_bytes(
    recipe: str, inputs: float, weights: float, grad_outputs: float, weights_cast: bool = True
) -> tuple[float, float]:
    """(forward, backward) HBM bytes of the fp8 casts of a layer's GEMMs.

    ``inputs``, ``weights``, ``grad_outputs``: elements of the GEMM inputs (m x k summed over the
    GEMMs), weights (k x n) and output gradients (m x n) on this GPU; ``weights_cast`` False:
    the weights arrive in fp8 (``fp8_param_gather``).
    """
    r = RECIPES[recipe]
    w = weights if weights_cast else 0.0
    fwd = inputs * r.input.fwd + w * r.weight.fwd + grad_outputs * r.grad_output.fwd
    bwd = inputs * r.input.bwd + w * r.weight.bwd + grad_outputs * r.grad_output.bwd
    return fwd, bwd


def wgrad_fp8(recipe: str) -> bool:
    """Whether ``recipe`` runs the weight-gradient GEMM in fp8 (only with precision fp8)."""
    return RECIPES[recipe].wgrad_fp8
