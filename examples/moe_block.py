"""A Mixtral-style MoE transformer block for ``planner trace`` and its tests.

``mixtral_block()`` is one Mixtral-8x7B layer: the flash-style GQA attention of
``gpt_block.FusedBlock`` followed by an MoE channel mixer of 8 SwiGLU experts, top-2 routing.

MoE layer (``MoE``):

* Router: a bias-free ``Linear(hidden, experts)``; the top-k logits of each token go through a
  float32 softmax (Mixtral normalises over the chosen k).
* Routing on the meta device must not depend on data (meta tensors have none, so ``topk`` and
  ``nonzero`` give no usable indices). ``routing="balanced"`` (the default on meta) sends token
  i to experts ``(i + j) mod E`` for j = 0..k-1: the k experts of a token are distinct and,
  when tokens is a multiple of E, each expert receives exactly ``tokens * k / E`` tokens, the
  balanced load the analytic model assumes. The router is still trained: the weights are the
  softmax of the router logits at the assigned experts. ``routing="topk"`` (the default on real
  devices) uses the data's top-k.
* Experts: one ``FusedMLP`` (``nn.Linear`` fc1 with gate and up fused, fc2) per expert, applied
  to the tokens gathered for it (``index_select``), then scattered back with ``index_put(accumulate=True)``.
  FLOPs are therefore per-expert GEMMs on gathered tokens, ``2 * n_e * hidden * 2 ffn`` (fc1)
  and ``2 * n_e * ffn * hidden`` (fc2) for n_e tokens: the grouped GEMM of
  ``planner.costs.flops.moe_gemms`` (count = experts, m = tokens * k / experts) exactly.
* Routing weights are applied inside the fused activation (``weight_on="activation"``):
  ``fc2(w * a) = w * fc2(a)``, so nothing beyond fc1 output, fc2 input and the gathered input
  is kept per routed token (the contract ``layer_activation_bytes`` counts).
  ``weight_on="output"`` scales each expert's output instead, which keeps that output
  (2 * hidden bytes per routed token) for the weight's gradient.
"""

from __future__ import annotations

from typing import Literal

import torch
from gpt_block import FusedBlock, FusedMLP
from torch import nn

from planner.specs.loading import load_model
from planner.specs.model import ModelSpec

Routing = Literal["auto", "balanced", "topk"]
WeightOn = Literal["activation", "output"]


class MoE(nn.Module):
    """Router + top-k + per-expert SwiGLU MLPs over gathered tokens (see the module docstring)."""

    def __init__(
        self, spec: ModelSpec, routing: Routing = "auto", weight_on: WeightOn = "activation"
    ) -> None:
        super().__init__()
        if spec.moe is None:
            raise ValueError(f"{spec.name} has no moe section")
        if spec.moe.shared_experts:
            raise NotImplementedError("shared experts are not modelled in this example")
        self.hidden = spec.hidden
        self.experts_n = spec.moe.experts
        self.top_k = spec.moe.top_k
        self.routing = routing
        self.weight_on = weight_on
        self.router = nn.Linear(spec.hidden, self.experts_n, bias=False)
        self.experts = nn.ModuleList(
            FusedMLP(spec, spec.moe.expert_ffn_hidden) for _ in range(self.experts_n)
        )

    def _balanced(self, tokens: int, device: torch.device) -> torch.Tensor:
        """(tokens, k) expert ids: token i, slot j -> (i + j) mod E."""
        i = torch.arange(tokens, device=device)[:, None]
        j = torch.arange(self.top_k, device=device)[None, :]
        return (i + j) % self.experts_n

    def _positions(self, e: int, tokens: int, assign: torch.Tensor, balanced: bool):
        """Flat (token * k + slot) positions routed to expert ``e``."""
        k, n = self.top_k, self.experts_n
        if not balanced:
            return (assign.reshape(-1) == e).nonzero().squeeze(1)
        # slot j of token i goes to e iff i = (e - j) mod E + E m: shapes known without data
        parts = [
            torch.arange((e - j) % n, tokens, n, device=assign.device) * k + j for j in range(k)
        ]
        return torch.cat(parts)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Route (B, T, hidden) tokens to their experts and combine; same shape out."""
        shape = x.shape
        xf = x.reshape(-1, self.hidden)
        tokens = xf.shape[0]
        logits = self.router(xf)  # (tokens, E)
        balanced = self.routing == "balanced" or (self.routing == "auto" and x.is_meta)
        if balanced:
            assign = self._balanced(tokens, x.device)
        else:
            assign = logits.detach().topk(self.top_k, dim=-1).indices
        weights = torch.softmax(logits.gather(1, assign).float(), dim=-1).reshape(-1)
        out = torch.zeros_like(xf)
        for e, expert in enumerate(self.experts):
            pos = self._positions(e, tokens, assign, balanced)
            tok = pos // self.top_k
            w = weights.index_select(0, pos)[:, None].to(x.dtype)
            xe = xf.index_select(0, tok)
            ye = expert(xe, w) if self.weight_on == "activation" else expert(xe) * w
            # index_put(accumulate) keeps only the index; index_add would also keep ye (autograd
            # saves the source tensor just for its shape)
            out = out.index_put((tok,), ye, accumulate=True)
        return out.view(shape)


def make_moe_block(
    model: str | ModelSpec = "mixtral-8x7b",
    routing: Routing = "auto",
    weight_on: WeightOn = "activation",
) -> nn.Module:
    """One MoE block (flash-style attention + MoE) of a shipped model id or spec."""
    spec = model if isinstance(model, ModelSpec) else load_model(model)
    return FusedBlock(spec, mlp=MoE(spec, routing, weight_on))


def mixtral_block() -> nn.Module:
    """One Mixtral-8x7B block (8 experts of 14336, top-2, GQA 32/8 heads)."""
    return make_moe_block("mixtral-8x7b")


def mixtral_block_weighted_output() -> nn.Module:
    """One Mixtral-8x7B block whose routing weights scale the expert outputs."""
    return make_moe_block("mixtral-8x7b", weight_on="output")
