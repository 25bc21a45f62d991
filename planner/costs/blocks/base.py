"""What a token-mixer kind must say about its costs (one implementation per kind).

A token mixer (softmax attention with MHA/GQA/MLA, Mamba-2, linear attention, ...) is costed
through :class:`MixerCosts`: its projection GEMMs, the forward FLOPs of its core (scores and
values, or the chunked scan), its memory-bound elementwise work, and the activations it keeps
for backward. The simulator asks :func:`planner.costs.blocks.mixer_costs` for the kind of a
layer's mixer and never branches on the kind itself, so a new mixer is one new module here
(and its spec class in :mod:`planner.specs.blocks`, which also counts its parameters).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

from planner.costs.gemm import Gemm, tokens_per_gpu
from planner.specs.layout import Layout, Training
from planner.specs.model import ModelSpec


@dataclass(frozen=True, slots=True)
class MixerElementwise:
    """Forward HBM bytes and kernel launches a mixer adds to the layer's elementwise chain.

    ``hidden_bytes`` join the block's norm/residual traffic; ``rope_bytes`` are the rotary
    embedding on q and k (softmax attention without learned positions)."""

    hidden_bytes: float = 0.0
    rope_bytes: float = 0.0
    kernels: float = 0.0


@dataclass(frozen=True, slots=True)
class MixerActivations:
    """Bytes one layer's mixer keeps for backward (Korthikanti et al. 2022, in 2-byte units):
    ``tp_region`` (q, k, v or the scan's tensors) and ``out_proj_input`` are split over TP,
    ``replicated`` (MLA's latents) only with sequence parallelism, ``core`` is the score term
    (unfused softmax output, or a flash kernel's log-sum-exp; 0 when recomputed)."""

    tp_region: float
    out_proj_input: float
    replicated: float = 0.0
    core: float = 0.0


class MixerCosts(ABC):
    """The costs of one token-mixer kind; ``mixer`` is its spec (``planner.specs.blocks``)."""

    kind: ClassVar[str]  # the spec's ``kind`` literal
    softmax_attention: ClassVar[bool] = False  # costed by the attention kernel model

    @abstractmethod
    def gemms(self, model: ModelSpec, mixer: Any, tp: int, tokens: float) -> list[Gemm]:
        """Forward projection GEMMs on one GPU for ``tokens`` tokens, TP-split."""

    @abstractmethod
    def core_flops(
        self, model: ModelSpec, mixer: Any, layout: Layout, training: Training
    ) -> tuple[float, float]:
        """(hardware, MFU-convention) forward FLOPs of the mixer's core, one GPU and
        micro-batch."""

    @abstractmethod
    def model_core_flops_per_token(
        self, model: ModelSpec, mixer: Any, seq_len: int, layers: int = 1
    ) -> float:
        """Training (forward + backward) core FLOPs per token in the MFU convention, of
        ``layers`` layers of this mixer."""

    @abstractmethod
    def elementwise(
        self, model: ModelSpec, mixer: Any, tp: int, tokens: float, act_bytes: float
    ) -> MixerElementwise:
        """Forward memory-bound work the mixer adds to its layer."""

    @abstractmethod
    def activations(
        self,
        model: ModelSpec,
        mixer: Any,
        seq: float,
        batch: int,
        gin: float,
        modules: set[str],
        dropout: bool,
        flash_attention: bool,
    ) -> MixerActivations:
        """Saved activations of ``batch`` sequences of ``seq`` tokens (per CP rank), in 2-byte
        units; ``gin``: bytes of a saved GEMM input; ``modules``: the selective-recompute
        modules."""


def chunked_scan_flops(
    tokens: float, heads: int, tp: int, chunk: int, state: int, head_dim: int
) -> float:
    """Forward FLOPs of a chunked (SSD-style) scan: per token and head 2Q(N+P) inside its chunk
    (the C B^T "attention" over Q positions, applied to X) and 4NP for the chunk states
    (B^T X, and C h) (Dao & Gu 2024, arXiv 2405.21060, section 6); ``heads`` split over
    ``tp``."""
    q, n, p = chunk, state, head_dim
    return tokens * heads / tp * (2.0 * q * (n + p) + 4.0 * n * p)


class ScanMixerCosts(MixerCosts):
    """A mixer whose core is a chunked scan (Mamba-2, linear attention): hardware and MFU
    convention count the same FLOPs, forward + backward = 3 x forward."""

    @abstractmethod
    def scan_flops(self, model: ModelSpec, mixer: Any, tp: int, tokens: float) -> float:
        """Forward FLOPs of the scan on one GPU for ``tokens`` tokens, heads split over tp."""

    def core_flops(
        self, model: ModelSpec, mixer: Any, layout: Layout, training: Training
    ) -> tuple[float, float]:
        flops = self.scan_flops(model, mixer, layout.tp, tokens_per_gpu(layout, training))
        return flops, flops

    def model_core_flops_per_token(
        self, model: ModelSpec, mixer: Any, seq_len: int, layers: int = 1
    ) -> float:
        return layers * 3.0 * self.scan_flops(model, mixer, 1, 1.0)
