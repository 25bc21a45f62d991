"""Operand alignment of a GEMM: rows that are not a whole number of 16-byte vectors.

Tensor-core GEMM kernels load their operands in 128-bit (16-byte) vectors; cuBLAS 11 and later
still use tensor cores when a row's length is not a multiple of 16 bytes, but with narrower
loads and lower throughput ("most efficient with multiples of 16 bytes": NVIDIA, Matrix
Multiplication Background User's Guide DU-09799-001, section 2.2 Tensor Core Requirements;
cuBLAS documentation, "Tensor Core usage" pointer and leading-dimension alignment). In 16-bit
precision that is a multiple of 8 elements, in FP8 of 16.

Magnitude: one measured pair, Stas Bekman's ml-engineering (training/performance/README.md,
"Vector and matrix size divisibility", swiglu-maf-bench.py on H100, hidden 4096): an MLP with
d_ff = 10922 (a multiple of 2 elements, 4-byte rows) runs at 272.73 TFLOP/s, the aligned
neighbours at 395-398 (10944: 398.38; multiples of 32 such as 10848 and 10912: 395.2-395.6).
So a GEMM with a misaligned row runs at 272.73 / 398.38 = 0.685 of the aligned one; this module
applies that one ratio to every misalignment (2-, 4- or 8-byte rows alike: no finer measurement
was found), and nothing to rows that are whole 16-byte vectors.

Which rows: in training a linear layer's three GEMMs (forward Y = X W^T, data gradient
dX = dY W, weight gradient dW = dY^T X) read and write row-major tensors whose rows are the
layer's input width k and output width n; the token dimension is never a row length. So a
layer is aligned when both n and k are (``linear_alignment``). Megatron's materialised
attention reads Q, K and V as strided views of one [s, b, heads, 3 x head_dim] tensor: every
Q/K/V row starts at a multiple of head_dim elements, so the batched score GEMMs are aligned
when head_dim is, and the score rows when the sequence length is (``unfused_attention_alignment``;
the BigScience BLOOM runs with head_dim 150 and 450, train/tr11-176B-ml/chronicles-prequel.md,
are such a case). The logits GEMM's width is the stack's padded vocabulary over TP
(``Training.vocab_multiple``: Megatron-family stacks pad to a multiple of 128 x TP, so their
logits are aligned; a stack that keeps GPT-2's 50,257 rows runs them misaligned).
"""

from __future__ import annotations

import math

VECTOR_BYTES = 16
# 272.73 / 398.38 TFLOP/s: ml-engineering's H100 d_ff = 10922 vs 10944 (see the docstring)
MISALIGNED_EFFICIENCY = 272.73 / 398.38


def row_aligned(elements: float, element_bytes: float) -> bool:
    """Whether a row of ``elements`` values of ``element_bytes`` each is a whole number of
    16-byte vectors (a fractional width, e.g. a mean over experts, counts as aligned: it is
    not a real row)."""
    if elements <= 0 or not math.isfinite(elements) or abs(elements - round(elements)) > 1e-9:
        return True
    return (round(elements) * element_bytes) % VECTOR_BYTES == 0


def linear_alignment(n: float, k: float, element_bytes: float) -> float:
    """Throughput factor (0, 1] of a linear layer's GEMMs with input width ``k`` and output
    width ``n`` (elements) at ``element_bytes`` per input element: 1 when both rows are whole
    16-byte vectors, else the measured ``MISALIGNED_EFFICIENCY``."""
    if row_aligned(n, element_bytes) and row_aligned(k, element_bytes):
        return 1.0
    return MISALIGNED_EFFICIENCY


def unfused_attention_alignment(
    seq_len: float, d_qk: float, d_v: float, element_bytes: float
) -> float:
    """Throughput factor (0, 1] of the batched Q K^T and P V GEMMs of materialised attention:
    the head dimensions set the Q, K and V row starts and widths, the sequence the score rows."""
    if all(row_aligned(d, element_bytes) for d in (seq_len, d_qk, d_v)):
        return 1.0
    return MISALIGNED_EFFICIENCY


__all__ = [
    "MISALIGNED_EFFICIENCY",
    "VECTOR_BYTES",
    "linear_alignment",
    "row_aligned",
    "unfused_attention_alignment",
]
