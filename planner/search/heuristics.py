"""Cheap rule-of-thumb layouts, used to warm-start the Optuna search.

The rules follow common Megatron-LM practice: shard the model as little as possible (the smallest
model-parallel degree tp*pp whose weights, gradients and optimizer state fit in HBM, tensor
parallelism inside the scale-up domain preferred over pipeline stages), selective recompute,
ZeRO-1 (distributed optimizer), sequence parallelism and TP communication overlap whenever
tp > 1, micro-batch 1. A few neighbours of that base (tp x2, pp x2, cp x2 where the space has
context parallelism, i.e. for long sequences, whose activations the state estimate leaves out;
full recompute; micro-batch 2) give the sampler more than one good starting point.

Every returned structure comes from :func:`planner.search.space.structures`, so it is legal, and
every knob value comes from the space's own domains.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TypeVar

from planner.costs import memory
from planner.search.space import Knobs, SearchSpace, Structure, structures
from planner.specs.hardware import Cluster
from planner.specs.layout import Layout, Training
from planner.specs.model import ModelSpec

# Fraction of the usable HBM the model state (weights + gradients + optimizer) may take; the rest
# is left for activations, logits and framework overhead.
STATE_FRACTION = 0.6

T = TypeVar("T")


def _pick(domain: Sequence[T], wanted: T) -> T:
    """``wanted`` when the space allows it, else the domain's first value."""
    return wanted if wanted in domain else domain[0]


def _param_split(model: ModelSpec) -> tuple[float, float]:
    """(dense, expert) parameter counts of the whole model; expert = routed experts only."""
    total = float(model.total_params)
    if model.moe is None:
        return total, 0.0
    routed = model.n_moe_layers * model.moe.experts * model.mlp_params(model.moe.expert_ffn_hidden)
    return total - routed, float(routed)


def state_gib(model: ModelSpec, s: Structure, training: Training, zero: int = 1) -> float:
    """Estimated model state per GPU (weights + gradients + optimizer state), GiB.

    Dense parameters are split evenly over tp*pp (embeddings and uneven stages ignored), routed
    expert parameters over pp*ep*expert_tp; ZeRO shards as in :func:`memory.state_bytes`.
    """
    layout = Layout(tp=s.tp, pp=s.pp, dp=s.dp, cp=s.cp, ep=s.ep, zero=zero)  # type: ignore[arg-type]
    dense, expert = _param_split(model)
    dense_local, expert_local = dense / (s.tp * s.pp), expert / (s.pp * s.ep * layout.expert_tp)
    st = memory.state_bytes(
        dense_local, expert_local, layout, training, layer_params=dense_local + expert_local
    )
    return (st.weights + st.grads + st.optimizer) / memory.GIB


def _knobs(space: SearchSpace, tp: int, recompute: str = "selective") -> Knobs:
    """The rule-of-thumb knobs, each clipped to what the space allows."""
    return Knobs(
        recompute=_pick(space.recompute, recompute),
        zero=_pick(space.zero, 1),
        sequence_parallel=_pick(space.sequence_parallel, tp > 1),
        overlap_tp_comm=_pick(space.overlap_tp_comm, tp > 1),
        overlap_dp_grad_reduce=_pick(space.overlap_dp_grad_reduce, True),
        overlap_ep_comm=_pick(space.overlap_ep_comm, True),
    )


def _base(
    model: ModelSpec, cluster: Cluster, training: Training, legal: list[Structure]
) -> Structure | None:
    """Smallest model-parallel degree whose state fits (tp preferred over pp at equal degree),
    without context parallelism or interleaving, the default schedule, micro-batch as small as
    allowed."""
    if not legal:
        return None
    budget = STATE_FRACTION * cluster.accelerator.hbm_usable_gib
    min_cp = min(s.cp for s in legal)
    min_mb = min(s.micro_batch for s in legal)
    plain = [s for s in legal if s.vpp == 1 and s.cp == min_cp and s.micro_batch == min_mb]
    pool = plain or legal
    # largest ep first: routed experts are the bulk of an MoE model's state
    # the default schedule of its vpp (what Megatron-LM runs) before the zero-bubble and V ones
    ordered = sorted(
        pool,
        key=lambda s: (
            s.tp * s.pp,
            s.pp,
            -s.ep,
            s.cp,
            s.vpp,
            s.schedule is not None,
            s.micro_batch,
        ),
    )
    for s in ordered:
        if state_gib(model, s, training) <= budget:
            return s
    return ordered[-1]  # nothing fits: the most sharded layout of the lowest-ranked order


def heuristic_candidates(
    model: ModelSpec,
    cluster: Cluster,
    training: Training,
    space: SearchSpace,
    k: int = 5,
    legal: Sequence[Structure] | None = None,
) -> list[tuple[Structure, Knobs]]:
    """Up to ``k`` distinct rule-of-thumb (structure, knobs) pairs, best guess first.

    For each GPU count in the space: the Megatron-style base layout, then its neighbours (tp x2,
    pp x2, cp x2, full recompute, micro-batch 2) where those are legal. With several GPU counts
    the bases come first, largest count first. ``legal``: the structures of this problem when
    the caller already enumerated them (else they are enumerated here).
    """
    structs = (
        list(legal) if legal is not None else list(structures(model, cluster, training, space))
    )
    index = set(structs)
    bases: list[tuple[Structure, Knobs]] = []
    neighbours: list[tuple[Structure, Knobs]] = []
    for gpus in sorted({s.gpus for s in structs}, reverse=True):
        base = _base(model, cluster, training, [s for s in structs if s.gpus == gpus])
        if base is None:
            continue
        bases.append((base, _knobs(space, base.tp)))
        for tp, cp, pp, mb, rc in (
            (base.tp * 2, base.cp, base.pp, base.micro_batch, "selective"),
            (base.tp, base.cp, base.pp * 2, base.micro_batch, "selective"),
            (base.tp, base.cp * 2, base.pp, base.micro_batch, "selective"),
            (base.tp, base.cp, base.pp, base.micro_batch, "full"),
            (base.tp, base.cp, base.pp, 2 * base.micro_batch, "selective"),
        ):
            dp = gpus // (tp * cp * pp) if gpus % (tp * cp * pp) == 0 else 0
            cand = replace(base, tp=tp, cp=cp, pp=pp, dp=dp, micro_batch=mb)
            if cand in index:
                neighbours.append((cand, _knobs(space, tp, rc)))
    out: list[tuple[Structure, Knobs]] = []
    for pair in bases + neighbours:
        if pair not in out:
            out.append(pair)
    return out[: max(0, k)]
