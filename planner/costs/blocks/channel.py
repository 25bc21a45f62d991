"""Channel-mixer kinds (dense MLP, the model's MoE block, none) and their costs, one class
each: GEMMs, memory-bound work around the activation, and saved activations.

A dense MLP is fc1 (gate and up fused when gated) and fc2, TP-split as Megatron does. An MoE
block is the router, the routed experts as grouped GEMMs under balanced routing (each EP rank
holds experts/ep experts and receives tokens x top_k token-expert pairs), and any shared
experts; dispatch and combine copy each routed token twice. Saved activations follow
Korthikanti et al. 2022 (Table 2) per MLP, with the Megatron-Core recompute modules ``mlp``,
``moe``, ``moe_act`` and ``shared_experts``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

from planner.costs.gemm import Gemm
from planner.specs.blocks import DenseMLP, MoEMLP, NoMLP
from planner.specs.layout import Layout
from planner.specs.model import ModelSpec


def mlp_gemms(
    model: ModelSpec, ffn: float, tp: int, tokens: float, name: str = "mlp", count: float = 1.0
) -> list[Gemm]:
    """fc1 (gate and up fused when gated) and fc2 of an MLP of width ``ffn``."""
    up = ffn * (2 if model.gated else 1)
    return [
        Gemm(f"{name}_fc1", tokens, up / tp, model.hidden, count),
        Gemm(f"{name}_fc2", tokens, model.hidden, ffn / tp, count),
    ]


def tokens_per_expert(model: ModelSpec, layout: Layout, tokens: float) -> float:
    """Tokens each local expert processes per micro-batch with balanced routing: the EP group's
    ``tokens`` x top_k token-expert pairs over its experts. With expert TP < tp each TP rank
    dispatches only its sequence-parallel share of the tokens."""
    assert model.moe is not None
    expert_tokens = tokens * layout.expert_tp / layout.tp
    return expert_tokens * model.moe.top_k / (model.moe.experts / layout.ep)


def moe_gemms(model: ModelSpec, layout: Layout, tokens: float) -> list[Gemm]:
    """Router, routed experts (grouped GEMM, balanced load) and shared experts of one MoE layer.

    Each EP rank holds experts/ep experts and, with balanced routing, receives tokens * top_k
    token-expert pairs; expert weights are split over the expert tensor-parallel size
    (``Layout.expert_tp``).
    """
    assert model.moe is not None
    moe = model.moe
    local_experts = moe.experts / layout.ep
    gemms = [Gemm("router", tokens, moe.experts, model.hidden)]
    gemms += mlp_gemms(
        model,
        moe.expert_ffn_hidden,
        layout.expert_tp,
        tokens_per_expert(model, layout, tokens),
        "expert",
        local_experts,
    )
    if moe.shared_experts:
        width = moe.shared_experts * (moe.shared_expert_ffn_hidden or moe.expert_ffn_hidden)
        gemms += mlp_gemms(model, width, layout.tp, tokens, "shared_expert")
    return gemms


def mlp_activation_bytes(
    model: ModelSpec, tokens: float, ffn: int, gin: float = 2.0, act_out: bool = True
) -> float:
    """fc1 output(s) kept for the activation (2 B) and the fc2 input (``gin`` B) per element;
    ``act_out=False``: the activation output is recomputed (Megatron ``moe_act``)."""
    fc2_in = gin if act_out else 0.0
    if model.gated:
        return tokens * ffn * (2 * 2 + fc2_in)  # gate, up, and their product (fc2 input)
    return tokens * ffn * (2 + fc2_in)  # activation input and output (fc2 input)


@dataclass(frozen=True, slots=True)
class ChannelElementwise:
    """The activation's width and tokens (``ffn``, ``ffn_tokens``), and the HBM bytes and
    launches the channel mixer adds to the layer's hidden-state traffic (MoE permutes)."""

    ffn_tokens: float = 0.0
    ffn: int = 0
    hidden_bytes: float = 0.0
    kernels: float = 0.0


class ChannelCosts(ABC):
    """The costs of one channel-mixer kind; ``mlp`` is its spec (``planner.specs.blocks``)."""

    kind: ClassVar[str]

    @abstractmethod
    def gemms(self, model: ModelSpec, mlp: Any, layout: Layout, tokens: float) -> list[Gemm]:
        """Forward GEMMs on one GPU for ``tokens`` tokens."""

    @abstractmethod
    def elementwise(
        self, model: ModelSpec, mlp: Any, tokens: float, act_bytes: float
    ) -> ChannelElementwise:
        """The activation's shape and the bytes the channel mixer adds to the layer."""

    @abstractmethod
    def activations(
        self, model: ModelSpec, mlp: Any, tok: float, gin: float, modules: set[str]
    ) -> tuple[float, float]:
        """Saved activations of ``tok`` tokens in 2-byte units: (inside the TP region,
        replicated)."""


class DenseCosts(ChannelCosts):
    """A dense MLP of the model's (or the layer's own) width."""

    kind = "dense"

    def gemms(self, model: ModelSpec, mlp: DenseMLP, layout: Layout, tokens: float) -> list[Gemm]:
        return mlp_gemms(model, mlp.ffn_hidden or model.ffn_hidden, layout.tp, tokens)

    def elementwise(
        self, model: ModelSpec, mlp: DenseMLP, tokens: float, act_bytes: float
    ) -> ChannelElementwise:
        return ChannelElementwise(tokens, mlp.ffn_hidden or model.ffn_hidden)

    def activations(
        self, model: ModelSpec, mlp: DenseMLP, tok: float, gin: float, modules: set[str]
    ) -> tuple[float, float]:
        if "mlp" in modules:
            return 0.0, 0.0  # the dense MLP is checkpointed: only its input is kept
        return mlp_activation_bytes(model, tok, mlp.ffn_hidden or model.ffn_hidden, gin), 0.0


class MoECosts(ChannelCosts):
    """The model's MoE block (router, routed and shared experts)."""

    kind = "moe"

    def gemms(self, model: ModelSpec, mlp: MoEMLP, layout: Layout, tokens: float) -> list[Gemm]:
        return moe_gemms(model, layout, tokens)

    def elementwise(
        self, model: ModelSpec, mlp: MoEMLP, tokens: float, act_bytes: float
    ) -> ChannelElementwise:
        if model.moe is None:
            return ChannelElementwise()
        ffn_tokens = tokens * model.moe.top_k
        # dispatch and combine permutations copy each routed token twice (read + write)
        permute = 2 * 2 * ffn_tokens * model.hidden * act_bytes
        return ChannelElementwise(ffn_tokens, model.moe.expert_ffn_hidden, permute, 6.0)

    def activations(
        self, model: ModelSpec, mlp: MoEMLP, tok: float, gin: float, modules: set[str]
    ) -> tuple[float, float]:
        moe = model.moe
        if moe is None:
            return 0.0, 0.0
        routed = tok * moe.top_k
        act_out = "moe_act" not in modules  # moe_act: the activation output is re-run
        kept = mlp_activation_bytes(model, routed, moe.expert_ffn_hidden, gin, act_out)
        kept += gin * routed * model.hidden
        if moe.shared_experts and "shared_experts" not in modules:
            width = moe.shared_experts * (moe.shared_expert_ffn_hidden or moe.expert_ffn_hidden)
            kept += mlp_activation_bytes(model, tok, width, gin)
        if "moe" in modules:
            return 0.0, 0.0  # the whole MoE block is checkpointed: only its input is kept
        return kept, tok * moe.experts * 4  # router logits/probabilities (fp32)


class NoChannelCosts(ChannelCosts):
    """No channel mixer (a Mamba layer of Nemotron-H)."""

    kind = "none"

    def gemms(self, model: ModelSpec, mlp: NoMLP, layout: Layout, tokens: float) -> list[Gemm]:
        return []

    def elementwise(
        self, model: ModelSpec, mlp: NoMLP, tokens: float, act_bytes: float
    ) -> ChannelElementwise:
        return ChannelElementwise()

    def activations(
        self, model: ModelSpec, mlp: NoMLP, tok: float, gin: float, modules: set[str]
    ) -> tuple[float, float]:
        return 0.0, 0.0


CHANNEL_COSTS: dict[str, ChannelCosts] = {
    c.kind: c for c in (DenseCosts(), MoECosts(), NoChannelCosts())
}


def channel_costs(mlp: Any) -> ChannelCosts:
    """The costs of ``mlp``'s kind (``mlp.kind``, a channel-mixer spec)."""
    return CHANNEL_COSTS[mlp.kind]
