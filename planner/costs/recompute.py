"""Selective recompute: what the backward pass re-runs for each recomputed submodule.

Megatron-Core's ``--recompute-granularity selective --recompute-modules ...`` (the default module
is ``core_attn``, Korthikanti et al. 2022, section 5): each named submodule's forward runs again
in backward instead of keeping its activations (``planner.costs.memory`` drops the matching
terms). Modules and what they re-run here:

* ``core_attn``: the token-mixer core (attention kernel) forward.
* ``mla_up_proj``: MLA's q / kv up-projections (``q_up``, ``kv_up``) forward.
* ``moe_act``: the routed experts' activation function (memory bound).
* ``mlp``: a dense MLP (fc1, activation, fc2) forward.
* ``layernorm``: the two norms forward.
* ``moe``: the whole MoE block: router, expert and shared GEMMs, activation and dispatch.
* ``shared_experts``: the shared experts' MLP forward.
* ``alternate_mm``: torchtitan's op-level selective activation checkpointing
  (``activation_checkpoint.mode = "selective"``, ``selective_ac_option = "op"``,
  torchtitan/models/llama3/infra/parallelize.py ``_apply_ac_to_transformer_block``): the
  policy saves the outputs of every other ``aten.mm`` (the 1st, 3rd, ... of the block: q, v,
  w1, w2 of a Llama block), the SDPA outputs and the reduce-scatters, and re-runs the rest in
  backward: the k, output-projection and w3 (for a plain MLP, fc2) GEMMs, the norms, RoPE and
  the activation function. Attention and dense-MLP layers only (other kinds: as core_attn).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from planner.costs import compute
from planner.costs.elementwise import ElementwiseWork
from planner.costs.flops import Gemm

MLA_UP = ("q_up", "kv_up")


def block_layers(layers: int, pp: int, vpp: int, share: float) -> tuple[int, int]:
    """(layers re-run, layers) of a model chunk of the mean size (``layers / (pp x vpp)``,
    rounded) under full recompute of ``share`` of its layers, as Megatron's block method
    counts them (``--recompute-num-layers``: at least one, at most the chunk)."""
    chunk = max(1, round(layers / (pp * vpp)))
    return min(chunk, max(1, round(share * chunk))), chunk


@dataclass(frozen=True, slots=True)
class Recompute:
    """Backward-pass re-run of one layer for one micro-batch."""

    seconds: float
    gemm_flops: float  # hardware FLOPs of the re-run GEMMs


def _gemms(gemms: tuple[Gemm, ...], keep: Callable[[str], bool]) -> tuple[Gemm, ...]:
    return tuple(g for g in gemms if keep(g.name))


def alternate_mm_gemms(gemms: tuple[Gemm, ...]) -> list[Gemm]:
    """The GEMMs torchtitan's op-level policy re-runs: with separate q, k, v, o, w1, w3, w2
    matmuls (1st, 3rd, ... saved) those are k, o and w3 (a plain MLP: fc2). The planner fuses
    q, k, v into one ``qkv`` GEMM and w1, w3 into ``mlp_fc1``: the re-run share of each is
    its k columns and its w3 half."""
    by = {g.name: g for g in gemms}
    out: list[Gemm] = []
    qkv, fc1, fc2 = by.get("qkv"), by.get("mlp_fc1"), by.get("mlp_fc2")
    if qkv is not None and "attn_out" in by:
        out.append(by["attn_out"])
        q_and_kv = qkv.n  # q_dim + 2 kv_dim (per TP rank)
        kv = (q_and_kv - by["attn_out"].k) / 2.0  # v_dim = q_dim for these layers
        if kv > 0:
            out.append(Gemm("qkv_k", qkv.m, kv, qkv.k, qkv.count))
    if fc1 is not None and fc2 is not None:
        glu = fc1.n > 1.5 * fc2.k  # fused w1, w3: twice the width fc2 reads
        out.append(Gemm("mlp_w3", fc1.m, fc1.n / 2.0, fc1.k, fc1.count) if glu else fc2)
    return out


def selective(
    modules: tuple[str, ...],
    gemms: tuple[Gemm, ...],
    dev: compute.Device,
    attention_fwd_s: float,
    ew: ElementwiseWork,
    activation_bytes: tuple[float, float],
    ep_fwd_s: float,
) -> Recompute:
    """Seconds and FLOPs that ``modules`` re-run in one layer's backward.

    ``activation_bytes``: forward HBM bytes of the (routed expert, dense MLP) activation
    functions; ``ep_fwd_s``: the layer's forward dispatch + combine all-to-all.
    """
    mods = set(modules)
    chosen: list[Gemm] = []
    seconds = 0.0
    routed_act, dense_act = activation_bytes
    if "core_attn" in mods:
        seconds += attention_fwd_s
    if "mla_up_proj" in mods:
        chosen += _gemms(gemms, lambda n: n in MLA_UP)
    if "mlp" in mods:
        chosen += _gemms(gemms, lambda n: n.startswith("mlp_"))
        seconds += dense_act / dev.hbm_bytes_per_s
    if "moe" in mods:
        chosen += _gemms(gemms, lambda n: n == "router" or n.startswith(("expert_", "shared_")))
        seconds += routed_act / dev.hbm_bytes_per_s + ep_fwd_s
    else:
        if "moe_act" in mods:
            seconds += routed_act / dev.hbm_bytes_per_s
        if "shared_experts" in mods:
            chosen += _gemms(gemms, lambda n: n.startswith("shared_expert_"))
    if "layernorm" in mods:
        seconds += ew.norm_bytes / dev.norm_bytes_per_s
    if "alternate_mm" in mods:
        chosen += alternate_mm_gemms(gemms)
        # every memory-bound op of the layer re-runs (norms, RoPE, activation, casts)
        seconds += ew.norm_bytes / dev.norm_bytes_per_s + ew.fwd_bytes / dev.hbm_bytes_per_s
    g_f, _ = compute.gemms_time_s(tuple(chosen), dev)
    return Recompute(seconds + g_f, sum(g.flops for g in chosen))
