"""Model architecture spec: the fields of the validation schema (``shared/validation/README.md``).

Parameter counts are computed here and tested against published totals. Biases are not counted
(modern stacks have none; for GPT-3 they are < 0.01% of the total).
"""

from __future__ import annotations

from collections import Counter
from typing import Literal

from pydantic import Field, model_validator

from planner.specs.base import (
    MAX_EXPERTS,
    MAX_HEAD_DIM,
    MAX_HEADS,
    MAX_LAYERS,
    MAX_SEQ_LEN,
    MAX_TEXT,
    MAX_VOCAB,
    MAX_WIDTH,
    Spec,
)
from planner.specs.blocks import (
    AttentionMixer,
    DenseMLP,
    LayerGroup,
    LayerSpec,
    LinearAttentionMixer,
    Mamba2Mixer,
    MoEMLP,
)

Activation = Literal["gelu", "swiglu", "relu2", "geglu"]
GATED_ACTIVATIONS = ("swiglu", "geglu")
# the layer kinds of a model without layer_groups (frozen, so shared by every model)
DENSE_LAYER = LayerSpec()
MOE_LAYER = LayerSpec(mlp=MoEMLP())


_Frozen = Spec


class MoESpec(_Frozen):
    """Mixture-of-experts block (DeepSeek/Mixtral style)."""

    experts: int = Field(ge=1, le=MAX_EXPERTS, description="routed experts per MoE layer")
    top_k: int = Field(ge=1, le=MAX_EXPERTS, description="routed experts per token")
    expert_ffn_hidden: int = Field(ge=1, le=MAX_WIDTH, description="FFN width of one routed expert")
    shared_experts: int = Field(
        default=0, ge=0, le=1024, description="always-active shared experts"
    )
    shared_expert_ffn_hidden: int | None = Field(default=None, ge=1, le=MAX_WIDTH)
    dense_layers: int = Field(
        default=0, ge=0, le=MAX_LAYERS, description="leading layers with a dense MLP"
    )
    layer_freq: int = Field(
        default=1, ge=1, le=MAX_LAYERS, description="every layer_freq-th layer is MoE"
    )
    capacity_factor: float | None = Field(
        default=None,
        gt=0,
        le=64,
        description="token capacity per expert / mean load; None = dropless",
    )
    load_imbalance: float = Field(
        default=1.0,
        ge=1.0,
        le=64,
        description="busiest expert's tokens over the mean (1 = balanced)",
    )
    expert_bias: bool = Field(
        default=False,
        description="the routed experts' linear layers carry bias vectors (gpt-oss: "
        "gate_up_proj_bias, down_proj_bias); costed where the stack adds the second GEMM's bias "
        "outside the GEMM (StackKernels.fused_expert_bias), not counted as parameters",
    )

    router_groups: int | None = Field(
        default=None,
        ge=1,
        le=MAX_EXPERTS,
        description="group-limited routing: the routed experts split into this many equal "
        "groups, of which each token's experts come from router_group_topk (DeepSeek-V3's "
        "node-limited routing, HF n_group / Megatron moe_router_num_groups); None: any expert",
    )
    router_group_topk: int | None = Field(
        default=None,
        ge=1,
        le=MAX_EXPERTS,
        description="groups a token's experts may come from (HF topk_group / Megatron "
        "moe_router_group_topk); with router_groups",
    )

    @model_validator(mode="after")
    def _check(self) -> MoESpec:
        if self.top_k > self.experts:
            raise ValueError(f"top_k ({self.top_k}) exceeds experts ({self.experts})")
        groups, topk = self.router_groups, self.router_group_topk
        if (groups is None) != (topk is None):
            raise ValueError("router_groups and router_group_topk: give both or neither")
        if groups is not None and topk is not None:
            if self.experts % groups:
                raise ValueError(f"router_groups ({groups}) must divide experts ({self.experts})")
            if topk > groups:
                raise ValueError(f"router_group_topk ({topk}) exceeds router_groups ({groups})")
            if self.top_k > topk * (self.experts // groups):
                raise ValueError(
                    f"top_k ({self.top_k}) exceeds the experts of router_group_topk ({topk}) "
                    f"groups ({topk * (self.experts // groups)})"
                )
        return self


class MLASpec(_Frozen):
    """Multi-head latent attention (DeepSeek-V2/V3, arXiv 2405.04434 section 2.1)."""

    q_lora_rank: int | None = Field(
        default=None, ge=1, le=MAX_WIDTH, description="None: full-rank Q"
    )
    kv_lora_rank: int = Field(ge=1, le=MAX_WIDTH)
    qk_nope_head_dim: int = Field(ge=1, le=MAX_HEAD_DIM)
    qk_rope_head_dim: int = Field(ge=1, le=MAX_HEAD_DIM)
    v_head_dim: int = Field(ge=1, le=MAX_HEAD_DIM)


class ModelSpec(_Frozen):
    """A decoder-only transformer. Widths are element counts, not bytes."""

    name: str = Field(min_length=1, max_length=200)
    layers: int = Field(ge=1, le=MAX_LAYERS)
    hidden: int = Field(ge=1, le=MAX_WIDTH)
    ffn_hidden: int = Field(
        ge=1, le=MAX_WIDTH, description="dense MLP width (dense layers of MoE models too)"
    )
    activation: Activation = "gelu"
    heads: int = Field(ge=1, le=MAX_HEADS)
    kv_heads: int | None = Field(
        default=None, ge=1, le=MAX_HEADS, description="None: equal to heads (MHA)"
    )
    head_dim: int | None = Field(
        default=None, ge=1, le=MAX_HEAD_DIM, description="None: hidden / heads"
    )
    vocab: int = Field(ge=1, le=MAX_VOCAB)
    tied_embeddings: bool = False
    learned_position_embeddings: bool = Field(
        default=False, description="GPT-2/3 style absolute position table (max_positions x hidden)"
    )
    max_positions: int = Field(default=2048, ge=1, le=MAX_SEQ_LEN)
    moe: MoESpec | None = None
    mla: MLASpec | None = None
    layer_groups: list[LayerGroup] | None = Field(
        default=None,
        max_length=MAX_LAYERS,
        description="heterogeneous stacks; None: every layer from the flat fields",
    )
    mtp_layers: int = Field(
        default=0, ge=0, le=16, description="multi-token-prediction modules (DeepSeek-V3: 1)"
    )
    description: str | None = Field(default=None, max_length=MAX_TEXT)
    sources: list[str] = Field(default_factory=list, max_length=100)

    @model_validator(mode="after")
    def _check(self) -> ModelSpec:
        if self.kv_heads is not None and self.heads % self.kv_heads:
            raise ValueError(
                f"kv_heads ({self.kv_heads}) must divide heads ({self.heads}); "
                f"valid: a divisor of {self.heads}"
            )
        if self.head_dim is None and self.mla is None and self.hidden % self.heads:
            raise ValueError("head_dim is required when heads does not divide hidden")
        if self.moe is not None and self.moe.dense_layers > self.layers:
            raise ValueError("moe.dense_layers exceeds layers")
        if self.layer_groups is not None:
            n = sum(g.repeat * len(g.layers) for g in self.layer_groups)
            if n != self.layers:
                raise ValueError(f"layer_groups hold {n} layers but layers = {self.layers}")
            kinds = {layer.mlp.kind for g in self.layer_groups for layer in g.layers}
            if "moe" in kinds and self.moe is None:
                raise ValueError("a layer group uses an MoE channel mixer but moe is not set")
        return self

    # ---- the stack --------------------------------------------------------------------------
    def layer_kinds(self) -> tuple[tuple[LayerSpec, int], ...]:
        """Distinct layer specs and how many layers of each the stack holds (stack order of
        first appearance). Without ``layer_groups`` this is the flat model: ``moe.dense_layers``
        dense layers, then every ``layer_freq``-th layer MoE."""
        if self.layer_groups is not None:
            counts: Counter = Counter()
            for g in self.layer_groups:
                for layer in g.layers:
                    counts[layer] += g.repeat
            return tuple(counts.items())
        n_moe = self.n_moe_layers
        kinds = []
        if self.layers - n_moe:
            kinds.append((DENSE_LAYER, self.layers - n_moe))
        if n_moe:
            kinds.append((MOE_LAYER, n_moe))
        return tuple(kinds)

    # ---- derived shapes -------------------------------------------------------------------
    @property
    def n_kv_heads(self) -> int:
        return self.kv_heads or self.heads

    @property
    def d_head(self) -> int:
        return self.head_dim or self.hidden // self.heads

    @property
    def gated(self) -> bool:
        return self.activation in GATED_ACTIVATIONS

    @property
    def n_moe_layers(self) -> int:
        """Layers whose channel mixer is an MoE block."""
        if self.moe is None:
            return 0
        if self.layer_groups is not None:
            return sum(g.repeat for g in self.layer_groups for x in g.layers if x.mlp.kind == "moe")
        rest = self.layers - self.moe.dense_layers
        return (rest + self.moe.layer_freq - 1) // self.moe.layer_freq

    @property
    def n_dense_layers(self) -> int:
        return self.layers - self.n_moe_layers

    @property
    def q_dim(self) -> int:
        """Width of all query heads together (per token)."""
        if self.mla:
            return self.heads * (self.mla.qk_nope_head_dim + self.mla.qk_rope_head_dim)
        return self.heads * self.d_head

    @property
    def v_dim(self) -> int:
        """Width of all value heads together (= input width of the output projection)."""
        if self.mla:
            return self.heads * self.mla.v_head_dim
        return self.heads * self.d_head

    @property
    def kv_dim(self) -> int:
        """Width of K (= V) over all KV heads, per token, for GQA/MHA."""
        return self.n_kv_heads * self.d_head

    # ---- parameter counts (elements) --------------------------------------------------------
    def attention_params(self) -> int:
        """Parameters of one attention block (projections and any latent norms)."""
        h = self.hidden
        if self.mla:
            m = self.mla
            qk_head = m.qk_nope_head_dim + m.qk_rope_head_dim
            if m.q_lora_rank:
                q = h * m.q_lora_rank + m.q_lora_rank + m.q_lora_rank * self.heads * qk_head
            else:
                q = h * self.heads * qk_head
            kv = (
                h * (m.kv_lora_rank + m.qk_rope_head_dim)
                + m.kv_lora_rank
                + m.kv_lora_rank * self.heads * (m.qk_nope_head_dim + m.v_head_dim)
            )
            return q + kv + self.v_dim * h
        return h * self.q_dim + 2 * h * self.kv_dim + self.v_dim * h

    def mlp_params(self, ffn: int) -> int:
        """Parameters of one MLP of width ``ffn`` (3 matrices when gated, else 2)."""
        return (3 if self.gated else 2) * self.hidden * ffn

    def moe_layer_params(self) -> tuple[int, int]:
        """(total, active per token) parameters of one MoE channel mixer incl. router."""
        assert self.moe is not None
        m = self.moe
        expert = self.mlp_params(m.expert_ffn_hidden)
        shared = m.shared_experts * self.mlp_params(
            m.shared_expert_ffn_hidden or m.expert_ffn_hidden
        )
        router = self.hidden * m.experts
        return m.experts * expert + shared + router, m.top_k * expert + shared + router

    def mixer_params(self, mixer: AttentionMixer | Mamba2Mixer | LinearAttentionMixer) -> int:
        """Parameters of one token mixer (each mixer spec counts its own)."""
        return mixer.params(self)

    def layer_params(self, layer: LayerSpec) -> tuple[int, int]:
        """(total, active per token) parameters of one layer, norms included."""
        norms = self.hidden * (2 if self.activation == "gelu" else 1)
        n_norms = 1 if layer.mlp.kind == "none" else 2
        base = self.mixer_params(layer.mixer) + n_norms * norms
        if isinstance(layer.mlp, DenseMLP):
            p = self.mlp_params(layer.mlp.ffn_hidden or self.ffn_hidden)
            return base + p, base + p
        if isinstance(layer.mlp, MoEMLP):
            total, active = self.moe_layer_params()
            return base + total, base + active
        return base, base

    def mtp_params(self) -> int:
        """Parameters of the multi-token-prediction modules (not in ``total_params``, as
        DeepSeek-V3 reports 671B without its 14B MTP module): per module a layer of the last
        kind, an h x 2h projection and two norms; embedding and head are shared."""
        if not self.mtp_layers:
            return 0
        last = self.layer_kinds()[-1][0]
        return self.mtp_layers * (self.layer_params(last)[0] + 2 * self.hidden**2 + 2 * self.hidden)

    def norm_params_per_layer(self) -> int:
        return 2 * self.hidden * (2 if self.activation == "gelu" else 1)

    def embedding_params(self) -> int:
        """Input embedding (+ learned positions) and the output projection when untied."""
        emb = self.vocab * self.hidden
        if self.learned_position_embeddings:
            emb += self.max_positions * self.hidden
        return emb + (0 if self.tied_embeddings else self.vocab * self.hidden)

    def param_counts(self) -> tuple[int, int]:
        """(total, active per token) parameter counts, embeddings included, MTP excluded."""
        total = active = 0
        for layer, count in self.layer_kinds():
            t, a = self.layer_params(layer)
            total += count * t
            active += count * a
        final_norm = self.hidden
        emb = self.embedding_params()
        return total + emb + final_norm, active + emb + final_norm

    @property
    def total_params(self) -> int:
        return self.param_counts()[0]

    @property
    def active_params(self) -> int:
        return self.param_counts()[1]
