"""StepPlan: what one training step does, per pipeline stage and per pass.

``planner.simulate`` builds a :class:`StepPlan`; the :class:`~planner.report.StepReport`
(``report.plan``), the Chrome trace (planner/timeline.py), the Kineto comparison
(planner/kineto/) and the app's pipeline chart are views of it.

* A :class:`StagePlan` covers pipeline ranks with the same costs: the first (embedding), the
  last (logits and loss), the middle ones (grouped by layer count), or with the V placement
  rank 0 holding both ends. Its ``per_microbatch`` dict is what one micro-batch costs the rank
  by time category (the report's breakdown is the bottleneck rank's, times m); ``chunks``
  splits it per model chunk into forward (F), input-gradient backward (I; Qi et al.'s B) and
  weight-gradient backward (W) :class:`PassCosts`; ``comms`` lists each communication with
  what hides it.
* The schedule (planner/schedules/) orders the passes; :meth:`StepPlan.timed_ops` runs that
  order on each rank's own pass times.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from planner.schedules import SCHEDULES, Op, PassTimes, Schedule, StageTimes

PASSES = ("F", "I", "W")


@dataclass(frozen=True, slots=True)
class PassCosts:
    """Seconds of one micro-batch through one model chunk, by time category and pass."""

    forward: Mapping[str, float]
    input_grad: Mapping[str, float]
    weight_grad: Mapping[str, float] = field(default_factory=dict)

    def of(self, kind: str) -> dict[str, float]:
        """Seconds by category of an op of ``kind`` (F, I, W, or B = I and W in one pass)."""
        if kind == "F":
            return dict(self.forward)
        if kind == "I":
            return dict(self.input_grad)
        if kind == "W":
            return dict(self.weight_grad)
        both = dict(self.input_grad)
        for cat, s in self.weight_grad.items():
            both[cat] = both.get(cat, 0.0) + s
        return both

    def times(self) -> PassTimes:
        return PassTimes(
            sum(self.forward.values()),
            sum(self.input_grad.values()),
            sum(self.weight_grad.values()),
        )


@dataclass(frozen=True, slots=True)
class Comm:
    """One communication of a stage: per micro-batch (``per`` = "microbatch") or per step."""

    category: str  # planner time category
    name: str
    passes: str  # the passes it belongs to: "F", "I", "W", "F+I", or "step"
    exposed_s: float  # on the critical path (in the step time)
    hidden_s: float  # overlapped with compute (not in the step time)
    overlaps: str  # what hides it
    per: str = "microbatch"


# forward part of each layer category (planner/simulate/layers.py PART_KEYS)
_FORWARD_PART = {
    "compute_gemm": "gemm_f",
    "compute_attention": "attention_f",
    "compute_memory_bound": "memory_bound_f",
    "tp_comm": "tp_f",
    "cp_comm": "cp_f",
    "ep_comm": "ep_f",
    "host_overhead": "host_f",
}
_LAYER_TOTAL = {
    "compute_gemm": "gemm",
    "compute_attention": "attention",
    "compute_memory_bound": "memory_bound",
    "recompute": "recompute",
    "tp_comm": "tp",
    "cp_comm": "cp",
    "ep_comm": "ep",
    "host_overhead": "host",
}


@dataclass(frozen=True, slots=True)
class StageRecipe:
    """What a rank's pass split is computed from (kept so that the split, which a search never
    reads, is only computed when asked for)."""

    per_layer: Mapping[str, float]  # per-layer seconds by category (simulate/layers.py)
    layer_kinds: tuple[tuple[Any, float], ...]  # (LayerCosts, share): the parts of per_layer
    chunks: int
    pp_s: float  # pipeline sends per micro-batch, all chunks
    dp_per_mb: float  # exposed DP seconds per micro-batch
    dp_per_mb_f: float  # their forward part (ZeRO-3)
    dp_in_weight: bool  # ZeRO-2: the per-micro-batch reduce-scatter follows W
    hides: Mapping[str, str]  # category -> what hides it
    dp_raw_per_mb: float = 0.0
    dp_step: float = 0.0
    dp_raw_step: float = 0.0
    zero: int = 0


_PART_KEYS = (*_FORWARD_PART.values(), "gemm_w", "tp_raw", "cp_raw", "ep_raw")


def layer_parts(recipe: StageRecipe) -> dict[str, float]:
    """Forward parts, weight-gradient GEMMs and raw communication per layer, averaged over the
    layer kinds as the per-layer seconds are."""
    return {k: sum(getattr(c, k) * w for c, w in recipe.layer_kinds) for k in _PART_KEYS}


def _add(*parts: Mapping[str, float]) -> dict[str, float]:
    out: dict[str, float] = {}
    for part in parts:
        for cat, s in part.items():
            out[cat] = out.get(cat, 0.0) + s
    return out


Edge = tuple[int, Mapping[str, float], Mapping[str, float]]  # chunk, seconds, forward part


def split_chunks(
    recipe: StageRecipe, n_layers: float, edges: tuple[Edge, ...] = ()
) -> tuple[PassCosts, ...]:
    """Per-chunk F / I / W seconds of a rank of ``n_layers`` layers: each layer's forward
    parts, W its weight-gradient GEMMs, I what the rest leaves; the edge work on its chunk;
    pipeline sends half forward, half input gradient; ZeRO-3 traffic by its forward part."""
    v = recipe.chunks
    pl = {**recipe.per_layer, **layer_parts(recipe)}
    k = n_layers / v
    total = {cat: k * pl[key] for cat, key in _LAYER_TOTAL.items()}
    total["pp_comm"] = recipe.pp_s / v
    total["dp_comm"] = recipe.dp_per_mb / v
    fwd = {cat: k * pl[key] for cat, key in _FORWARD_PART.items()}
    fwd["pp_comm"] = recipe.pp_s / v / 2.0
    fwd["dp_comm"] = recipe.dp_per_mb_f / v
    weight = {"compute_gemm": k * pl["gemm_w"]}
    if recipe.dp_in_weight:
        weight["dp_comm"] = recipe.dp_per_mb / v
    out = []
    for c in range(v):
        t, f = total, fwd
        for chunk, e_total, e_fwd in edges:
            if chunk == c:
                t, f = _add(t, e_total), _add(f, e_fwd)
        inp = {cat: max(0.0, s - f.get(cat, 0.0) - weight.get(cat, 0.0)) for cat, s in t.items()}
        out.append(
            PassCosts(
                {cat: s for cat, s in f.items() if s > 0.0},
                {cat: s for cat, s in inp.items() if s > 0.0},
                {cat: s for cat, s in weight.items() if s > 0.0},
            )
        )
    return tuple(out)


_COMMS = (
    ("tp_comm", "tp", "TP all-reduce (or all-gather + reduce-scatter)"),
    ("cp_comm", "cp", "CP ring exchange of K, V (dK, dV)"),
    ("ep_comm", "ep", "EP dispatch + combine all-to-all"),
)


def stage_comms(recipe: StageRecipe, n_layers: float, cats: Mapping[str, float]) -> tuple:
    """A rank's communications, exposed and hidden seconds, and what hides each."""
    pl, out = {**recipe.per_layer, **layer_parts(recipe)}, []
    for cat, key, name in _COMMS:
        if pl[key + "_raw"] > 0.0:
            hidden = max(0.0, n_layers * (pl[key + "_raw"] - pl[key]))
            hides = recipe.hides.get(cat, "nothing")
            out.append(Comm(cat, name, "F+I", cats.get(cat, 0.0), hidden, hides))
    if cats.get("pp_comm", 0.0) > 0.0:
        name = "PP send/recv of activations and gradients"
        out.append(Comm("pp_comm", name, "F+I", cats["pp_comm"], 0.0, "nothing (critical path)"))
    if recipe.dp_raw_per_mb > 0.0:
        zero3 = recipe.zero >= 3
        out.append(
            Comm(
                "dp_comm",
                "ZeRO-3 parameter all-gather + gradient reduce-scatter"
                if zero3
                else "ZeRO-2 gradient reduce-scatter",
                "F+I" if zero3 else "W",
                recipe.dp_per_mb,
                max(0.0, recipe.dp_raw_per_mb - recipe.dp_per_mb),
                "the layers' forward and backward",
            )
        )
    if recipe.dp_raw_step > 0.0:
        out.append(
            Comm(
                "dp_comm",
                "DP gradient reduction (and ZeRO-1/2 parameter gather)",
                "step",
                recipe.dp_step,
                max(0.0, recipe.dp_raw_step - recipe.dp_step),
                "the last micro-batch's backward (and the first forward)",
                per="step",
            )
        )
    return tuple(out)


@dataclass(frozen=True)
class StagePlan:
    """Pipeline ranks ``ranks`` with the same per-micro-batch costs.

    ``chunks`` (per model chunk: F, I, W seconds by category) and ``comms`` are computed from
    ``recipe`` when first read."""

    ranks: tuple[int, ...]
    role: str  # only | first | middle | last | first+last
    layers: float  # per rank
    per_microbatch: Mapping[str, float]  # seconds by time category, all chunks of the rank
    recipe: StageRecipe | None = field(default=None, repr=False, compare=False)
    edges: tuple[Edge, ...] = field(default=(), repr=False)  # edge work: (chunk, total, F)
    given_chunks: tuple[PassCosts, ...] | None = field(default=None, repr=False)

    @cached_property
    def chunks(self) -> tuple[PassCosts, ...]:
        if self.given_chunks is not None:
            return self.given_chunks
        assert self.recipe is not None
        return split_chunks(self.recipe, self.layers, self.edges)

    @cached_property
    def comms(self) -> tuple[Comm, ...]:
        if self.recipe is None:
            return ()
        return stage_comms(self.recipe, self.layers, self.per_microbatch)

    @property
    def microbatch_s(self) -> float:
        """Seconds of one micro-batch through the rank (forward and backward, all chunks)."""
        return sum(self.per_microbatch.values())


StageSpec = tuple[tuple[int, ...], str, float, Mapping[str, float], tuple[Edge, ...]]


@dataclass(frozen=True)
class StepPlan:
    """One optimizer step: the stages, the schedule and the step-level phases (seconds).

    ``stages`` are built from ``stage_specs`` (ranks, role, layers, seconds per micro-batch by
    category, edge work) and ``recipe`` when first read."""

    schedule: str
    pp: int
    chunks: int  # model chunks per rank
    microbatches: int
    stage_specs: tuple[StageSpec, ...] = field(repr=False)
    recipe: StageRecipe | None = field(repr=False, compare=False)
    bottleneck_rank: int  # the rank whose costs set the rate (the report's breakdown)
    steady_s: float  # microbatches x the bottleneck rank's micro-batch time
    bubble_s: float
    dp_step_s: float  # exposed step-level DP reduction (ZeRO 0/1) after the pipeline drains
    dp_hidden_s: float  # the part of it overlapped with the last backward
    optimizer_s: float
    step_time_s: float
    breakdown_s: Mapping[str, float]  # the report's time breakdown (bottleneck rank)
    given_stages: tuple[StagePlan, ...] | None = field(default=None, repr=False)

    @cached_property
    def stages(self) -> tuple[StagePlan, ...]:
        """One StagePlan per group of ranks with the same costs, in rank order."""
        if self.given_stages is not None:
            return self.given_stages
        return build_stages(self.stage_specs, self.recipe)

    @property
    def schedule_object(self) -> Schedule:
        return SCHEDULES[self.schedule]

    def stage_of(self, rank: int) -> StagePlan:
        """The StagePlan that covers pipeline rank ``rank``."""
        for st in self.stages:
            if rank in st.ranks:
                return st
        raise IndexError(f"rank {rank} not in a pipeline of {self.pp} ranks")

    def rank_breakdown_s(self, rank: int) -> dict[str, float]:
        """Seconds per time category on ``rank`` over the step, summing to the step time: its
        own micro-batch costs, the step-level DP and optimizer, and the rest as
        ``pipeline_bubble`` (the rank idles while the bottleneck rank works)."""
        if rank == self.bottleneck_rank:
            return dict(self.breakdown_s)
        own = {c: s * self.microbatches for c, s in self.stage_of(rank).per_microbatch.items()}
        own["dp_comm"] = own.get("dp_comm", 0.0) + self.dp_step_s
        own["optimizer"] = self.optimizer_s
        own["pipeline_bubble"] = max(0.0, self.step_time_s - sum(own.values()))
        return own

    def pass_times(self) -> tuple[tuple[PassTimes, ...], ...]:
        """Each rank's per-chunk F, I and W seconds: ``[rank][chunk]``."""
        return pass_times(self.stages, self.pp)

    def stage_times(self) -> StageTimes:
        """The ranks' per-micro-batch times as the schedules take them."""
        ranks = self.pass_times()
        totals = [sum(p.total_s for p in passes) for passes in ranks]
        return StageTimes(max(totals), sum(totals), ranks)

    def op_costs(self, rank: int, op: Op) -> dict[str, float]:
        """Seconds by category of ``op`` on ``rank``."""
        return self.stage_of(rank).chunks[op.chunk].of(op.kind)

    def timed_ops(self) -> tuple[list[list[Op]], list[list[float]], list[list[float]]]:
        """(orders, start times, durations) of every rank's ops when the schedule's order runs
        on each rank's own pass times (seconds from the step's start)."""
        passes = [[c.times() for c in self.stage_of(r).chunks] for r in range(self.pp)]

        def duration(rank: int, op: Op) -> float:
            return passes[rank][op.chunk].duration_s(op.kind)

        orders, starts = self.schedule_object.timed(
            self.pp, self.chunks, self.microbatches, duration
        )
        durations = [[duration(r, op) for op in order] for r, order in enumerate(orders)]
        return orders, starts, durations


def build_stages(specs: tuple[StageSpec, ...], recipe: StageRecipe | None) -> tuple[StagePlan, ...]:
    """StagePlans of ``specs`` (ranks, role, layers, seconds by category, edge work)."""
    return tuple(StagePlan(r, role, n, cats, recipe, edges) for r, role, n, cats, edges in specs)


def pass_times(stages: tuple[StagePlan, ...], pp: int) -> tuple[tuple[PassTimes, ...], ...]:
    """Per rank, per chunk F, I and W seconds of ``stages``: ``[rank][chunk]``."""
    by_rank: dict[int, tuple[PassTimes, ...]] = {}
    for st in stages:
        times = tuple(c.times() for c in st.chunks)
        for r in st.ranks:
            by_rank[r] = times
    return tuple(by_rank[r] for r in range(pp))


__all__ = [
    "PASSES",
    "Comm",
    "PassCosts",
    "StagePlan",
    "StageRecipe",
    "StepPlan",
    "build_stages",
    "pass_times",
]
