"""The advice candidates (:class:`Candidate`) and the levers on the pipeline: interleaving,
the schedules Megatron-LM does or does not run, and a stated first / last rank split
(:func:`edge_split_lever`). :func:`planner.advise.advise` simulates and ranks them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from planner.costs.pipeline import layers_per_rank
from planner.errors import PlannerError
from planner.legality import first_violation
from planner.report import StepReport
from planner.schedules import SCHEDULES, schedule_of
from planner.specs.hardware import Cluster
from planner.specs.layout import Layout, Training
from planner.specs.model import ModelSpec


@dataclass(frozen=True, slots=True)
class Candidate:
    """One lever before it is simulated: its name, the Megatron-LM flags it stands for, and
    the layout and training it changes to."""

    name: str
    description: str
    layout: Layout
    training: Training
    no_host: bool = False  # simulate with the host never binding (CUDA graphs)


def changed_layout(base: Layout, **changes: Any) -> Layout:
    return base.with_changes(**changes)


def changed_training(base: Training, **changes: Any) -> Training:
    return base.with_changes(**changes)


def interleave_levers(model: ModelSpec, L: Layout, T: Training) -> list[Candidate]:
    """Interleaved 1F1B with more virtual stages (the rules say which counts are legal)."""
    out: list[Candidate] = []
    for v in (2, 4):
        if v <= L.virtual_stages:
            continue
        stages = L.pp * v
        split = (
            f"--num-layers-per-virtual-pipeline-stage {model.layers // stages}"
            if model.layers % stages == 0
            else f"--virtual-pipeline-model-parallel-size {v}, uneven stages"
        )
        out.append(
            Candidate(
                f"interleave vpp={v}",
                f"interleaved 1F1B schedule, {v} virtual stages per pipeline rank "
                f"(Megatron {split})",
                changed_layout(L, vpp=v, schedule=None),
                T,
            )
        )
    return out


# schedule -> (vpp it runs, what it changes against the layout's own schedule)
_SCHEDULE_LEVERS = {
    "zb-h1": (None, "1F1B's activations in flight, weight gradients deferred into the bubble"),
    "zbv": (2, "two chunks per rank in a V, about 1F1B's activations"),
    "dualpipev": (
        2,
        "two chunks per rank in a V, two micro-batches' forward and backward "
        "overlapped, more activations in flight than 1F1B",
    ),
}


def _megatron_text(name: str) -> str:
    """Whether Megatron-LM runs schedule ``name`` (the schedule object knows)."""
    sched = SCHEDULES[name]
    if sched.megatron is None:
        return sched.megatron_note or "not in Megatron-LM"
    return f"Megatron-LM runs it ({sched.megatron_note})"


def schedule_levers(L: Layout, T: Training) -> list[Candidate]:
    """The zero-bubble and V schedule levers of a pipelined layout not already running them."""
    out = []
    current = schedule_of(L).name
    for name, (vpp, what) in _SCHEDULE_LEVERS.items():
        if name == current:
            continue
        sched = SCHEDULES[name]
        torchtitan = f"torchtitan {sched.torchtitan}" if sched.torchtitan else "not in torchtitan"
        dropped = "; interleaving dropped" if vpp is None and L.virtual_stages > 1 else ""
        out.append(
            Candidate(
                name,
                f"{sched.title} schedule instead of {current} ({sched.reference}): {what}"
                f"{dropped}; {_megatron_text(name)}; {torchtitan}",
                changed_layout(L, vpp=vpp, schedule=name),
                T,
            )
        )
    return out


def edge_splits(model: ModelSpec, L: Layout) -> list[Layout]:
    """Stated pipeline splits around ``L``'s (even ones of the middle ranks, as Megatron-Core
    states them): each middle count from one under the even share to the even share, the
    edge ranks sharing the rest in every way that leaves each at most two layers above the
    middle. Empty without a pipeline of three ranks or more, or with a V-shaped schedule."""
    if L.pp < 3 or schedule_of(L).placement == "v":
        return []
    share = -(-model.layers // L.pp)
    out = []
    for middle in (share - 1, share):
        rest = model.layers - (L.pp - 2) * middle
        for last in range(0, min(rest, middle + 2) + 1):
            first = rest - last
            if 0 <= first <= middle + 2 and (first, last) != (
                L.first_stage_layers,
                L.last_stage_layers,
            ):
                out.append(changed_layout(L, first_stage_layers=first, last_stage_layers=last))
    return out


def edge_split_lever(
    model: ModelSpec,
    cluster: Cluster,
    L: Layout,
    T: Training,
    base: StepReport,
    run: Any,
) -> Candidate | None:
    """The stated split of :func:`_edge_splits` that runs fastest and fits, when it beats
    ``base`` (``run(layout) -> StepReport``): layers moved off the rank that holds the
    embedding or the head and the loss."""
    best: tuple[float, Layout] | None = None
    for lay in edge_splits(model, L):
        if first_violation(model, cluster, lay, T) is not None:
            continue
        try:
            rep = run(lay)
        except PlannerError:
            continue
        if rep.fits and rep.tokens_per_s > (best[0] if best else base.tokens_per_s):
            best = (rep.tokens_per_s, lay)
    if best is None:
        return None
    lay = best[1]
    ranks = layers_per_rank(model.layers, lay.pp, lay.first_stage_layers, lay.last_stage_layers)
    return Candidate(
        "rebalance pipeline edges",
        f"layers per pipeline rank {ranks[0]}, {ranks[1]} x {lay.pp - 2}, {ranks[-1]} "
        f"(Megatron --decoder-first-pipeline-num-layers {ranks[0]} "
        f"--decoder-last-pipeline-num-layers {ranks[-1]}, or a "
        "--pipeline-model-parallel-layout): the embedding's and the head's ranks balanced "
        "against the others",
        lay,
        T,
    )


__all__ = [
    "Candidate",
    "changed_layout",
    "changed_training",
    "edge_split_lever",
    "edge_splits",
    "interleave_levers",
    "schedule_levers",
]
