"""Block-level model description: a layer is a token mixer plus a channel mixer.

Token mixers: attention (MHA/GQA/MQA, or MLA when the model has an ``mla`` block; optionally a
sliding window), Mamba-2 (selective state space, chunked SSD scan; Dao & Gu 2024, "Transformers
are SSMs", arXiv 2405.21060) and linear attention (Katharopoulos et al. 2020). Channel mixers:
a dense MLP, the model's MoE block, or none (e.g. Nemotron-H's Mamba layers).
A model's ``layer_groups`` lists groups of layers, each repeated ``repeat`` times, in order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import Field

from planner.specs.base import MAX_HEAD_DIM, MAX_HEADS, MAX_LAYERS, MAX_SEQ_LEN, MAX_WIDTH, Spec

if TYPE_CHECKING:
    from planner.specs.model import ModelSpec

_Frozen = Spec


class AttentionMixer(_Frozen):
    """Softmax attention with the model's heads, kv_heads and head_dim (or its MLA block)."""

    kind: Literal["attention"] = "attention"
    window: int | None = Field(
        default=None,
        ge=1,
        le=MAX_SEQ_LEN,
        description="sliding-window size in tokens; None = full causal",
    )

    def params(self, model: ModelSpec) -> int:
        """Parameters: the model's attention projections (MHA/GQA or MLA)."""
        return model.attention_params()


class Mamba2Mixer(_Frozen):
    """Mamba-2 block: in_proj -> causal conv1d -> SSD scan -> gated norm -> out_proj."""

    kind: Literal["mamba2"] = "mamba2"
    d_state: int = Field(default=128, ge=1, le=4096, description="state size N per head")
    d_conv: int = Field(default=4, ge=1, le=64, description="depthwise convolution width")
    expand: int = Field(default=2, ge=1, le=16, description="inner width = expand x hidden")
    head_dim: int = Field(default=64, ge=1, le=MAX_HEAD_DIM, description="SSD head dimension P")
    n_groups: int = Field(
        default=1, ge=1, le=MAX_HEADS, description="B/C groups (like GQA for the state)"
    )
    chunk: int = Field(default=256, ge=1, le=65_536, description="SSD chunk length Q")

    def params(self, model: ModelSpec) -> int:
        """Parameters: in_proj, conv1d (+ bias), dt_bias, A, D, the gated norm and out_proj."""
        h = model.hidden
        d_in = self.expand * h
        nheads = d_in // self.head_dim
        bc = 2 * self.n_groups * self.d_state
        in_proj = h * (2 * d_in + bc + nheads)
        conv = (d_in + bc) * (self.d_conv + 1)
        return in_proj + conv + 3 * nheads + d_in + d_in * h  # dt_bias, A, D; norm; out


class LinearAttentionMixer(_Frozen):
    """Causal linear attention (kernelised, chunked); ``heads``/``head_dim`` default to the
    model's."""

    kind: Literal["linear_attention"] = "linear_attention"
    heads: int | None = Field(default=None, ge=1, le=MAX_HEADS)
    head_dim: int | None = Field(default=None, ge=1, le=MAX_HEAD_DIM)
    chunk: int = Field(default=64, ge=1, le=65_536, description="chunk length of the parallel form")

    def params(self, model: ModelSpec) -> int:
        """Parameters: q, k, v and out projections."""
        width = (self.heads or model.heads) * (self.head_dim or model.d_head)
        return 4 * model.hidden * width


Mixer = Annotated[AttentionMixer | Mamba2Mixer | LinearAttentionMixer, Field(discriminator="kind")]


class DenseMLP(_Frozen):
    """A dense MLP with the model's activation; ``ffn_hidden`` defaults to the model's."""

    kind: Literal["dense"] = "dense"
    ffn_hidden: int | None = Field(default=None, ge=1, le=MAX_WIDTH)


class MoEMLP(_Frozen):
    """The model's ``moe`` block."""

    kind: Literal["moe"] = "moe"


class NoMLP(_Frozen):
    """No channel mixer (the layer is its token mixer only)."""

    kind: Literal["none"] = "none"


ChannelMixer = Annotated[DenseMLP | MoEMLP | NoMLP, Field(discriminator="kind")]


class LayerSpec(_Frozen):
    """One layer: token mixer + channel mixer (pre-norm residual blocks)."""

    mixer: Mixer = Field(default_factory=AttentionMixer)
    mlp: ChannelMixer = Field(default_factory=DenseMLP)


class LayerGroup(_Frozen):
    """``layers`` in order, the whole list repeated ``repeat`` times."""

    repeat: int = Field(default=1, ge=1, le=MAX_LAYERS)
    layers: list[LayerSpec] = Field(min_length=1, max_length=MAX_LAYERS)
