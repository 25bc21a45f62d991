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
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from planner.costs import compute
from planner.costs.elementwise import ElementwiseWork
from planner.costs.flops import Gemm

MLA_UP = ("q_up", "kv_up")


@dataclass(frozen=True, slots=True)
class Recompute:
    """Backward-pass re-run of one layer for one micro-batch."""

    seconds: float
    gemm_flops: float  # hardware FLOPs of the re-run GEMMs


def _gemms(gemms: tuple[Gemm, ...], keep: Callable[[str], bool]) -> tuple[Gemm, ...]:
    return tuple(g for g in gemms if keep(g.name))


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
    g_f, _ = compute.gemms_time_s(tuple(chosen), dev)
    return Recompute(seconds + g_f, sum(g.flops for g in chosen))
