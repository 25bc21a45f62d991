"""The unit of layer work: a forward GEMM, and the tokens one GPU's layer sees.

Forward FLOPs of a GEMM (m x k) @ (k x n) are 2mnk; its backward is two GEMMs of the same size
(data and weight gradients), i.e. 2x forward (Narayanan et al. 2021, section 5.1).
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.specs.layout import Layout, Training


@dataclass(frozen=True, slots=True)
class Gemm:
    """One forward GEMM of shape (m x k) @ (k x n), repeated ``count`` times (grouped experts)."""

    name: str
    m: float
    n: float
    k: float
    count: float = 1.0

    @property
    def flops(self) -> float:
        """Forward FLOPs of all ``count`` GEMMs."""
        return 2.0 * self.m * self.n * self.k * self.count


def tokens_per_gpu(layout: Layout, training: Training) -> float:
    """Tokens one GPU's layer sees per micro-batch (the sequence is split over CP)."""
    return training.micro_batch * training.seq_len / layout.cp
