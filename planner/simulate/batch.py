"""Many candidates of one model, cluster, profile and stack: the figures of ``simulate_step``,
memory first, each stage's result shared by every candidate whose inputs it reads.

A search costs thousands of layouts that differ in a few fields. The stages of
``simulate_step`` (planner/simulate/step.py) each read a subset of the layout: the layer costs
read tp, cp, ep, sequence parallelism, the TP / EP overlaps and the training settings but not
pp, dp, vpp, ZeRO or the schedule; the parameters per GPU add pp; the data-parallel traffic adds
dp, ZeRO and its overlaps. :class:`BatchSimulator` runs the same stage functions and keeps each
result under the key of exactly what it reads, so a stage is costed once per distinct key, and
prices the memory before the time so that a candidate that cannot fit is never timed.

The figures are those of the one-layout path, bit for bit (tests/simulate/test_batch.py checks
thousands of random legal layouts of every shipped model); the full :class:`StepReport` (its
plan, notes and placement) is built by ``simulate_step`` only for the layouts a caller shows.
"""

from __future__ import annotations

import operator
import threading
from dataclasses import dataclass

from planner.costs import comms, compute, pipeline
from planner.errors import PlannerError
from planner.profile import CalibrationProfile
from planner.simulate.data_parallel import DataParallel, dp_traffic
from planner.simulate.planning import stage_plans
from planner.simulate.stages import (
    Context,
    Edges,
    Params,
    Stack,
    edge_costs,
    edge_work,
    layer_memory,
    layer_stack,
    make_context,
    make_device,
    make_groups,
    params_per_gpu,
    pp_send_s,
    rank_costs,
)
from planner.simulate.step import (
    activation_terms,
    flops_per_token,
    memory_peak,
    step_times,
    utilisation,
)
from planner.specs.blocks import LayerSpec
from planner.specs.hardware import Cluster
from planner.specs.layout import Layout, Training
from planner.specs.model import ModelSpec
from planner.specs.stack import StackSpec
from planner.stacks import (
    model_violations,
    reserved_peak_gib,
    stack_layout,
    stack_training,
    stack_violation,
)

# Layout fields the layer costs (planner/simulate/layers.py), the layer activations and the
# edge costs never read: a layer-cost key leaves them out.
NOT_READ_BY_LAYERS = frozenset(
    {
        "pp",
        "dp",
        "vpp",
        "zero",
        "dp_shard",
        "schedule",
        "overlap_dp_grad_reduce",
        "overlap_zero3_param_gather",
        "pp_scatter_gather",
        "overlap_pp_comm",
        "zero3_collectives",
    }
)
LAYER_LAYOUT_FIELDS = tuple(f for f in Layout.model_fields if f not in NOT_READ_BY_LAYERS)
# Training fields every stage may read; the global batch enters only through the micro-batch
# count and the tokens per step.
LAYER_TRAINING_FIELDS = tuple(f for f in Training.model_fields if f != "global_batch")
# of those, what the memory reads (not the TP and EP overlaps)
MEMORY_LAYOUT_FIELDS = tuple(
    f for f in LAYER_LAYOUT_FIELDS if f not in ("overlap_tp_comm", "overlap_ep_comm")
)
_MEMORY_LAYOUT = operator.attrgetter(*MEMORY_LAYOUT_FIELDS)
_OVERLAPS = operator.attrgetter("overlap_tp_comm", "overlap_ep_comm")
# what planner.stacks.stack_violation reads of a layout
_VIOLATION_LAYOUT = operator.attrgetter(
    "tp", "sequence_parallel", "pp", "cp", "ep", "overlap_tp_comm", "zero", "schedule", "vpp"
)
_UNKNOWN = object()
# what the memory peak reads beyond the layers: the pipeline, its schedule, DP and ZeRO
_PEAK_LAYOUT = operator.attrgetter(
    "pp", "vpp", "schedule", "dp", "zero", "dp_shard", "first_stage_layers", "last_stage_layers"
)
# how the layers split over the pipeline ranks
_SPLIT = operator.attrgetter("pp", "first_stage_layers", "last_stage_layers")
_LAYER_TRAINING = operator.attrgetter(*LAYER_TRAINING_FIELDS)
_Peak = tuple[dict[str, float], str, float, "Params"]  # memory_peak's GiB, rank, total, params
# the vector path's memo (planner/simulate/vector.py): key -> id dicts and tables by id
VECTOR_DICTS = ("training", "layer_training", "update", "mid", "schedule", "pid", "flight")
VECTOR_DICTS += ("lid", "pp_s", "coll", "copies", "structure")
VECTOR_LISTS = ("mid_rows", "mid_num", "pid_num", "pid_params", "flight_num", "tconsts")
VECTOR_LISTS += ("lid_num", "lid_key", "pid_key")


def memory_key(layout: Layout, training: Training) -> tuple:
    """The key of what the memory reads of the layers: the layout's memory fields, its expert
    TP and the training fields (the TP, CP and EP groups follow from these on one cluster)."""
    return (_MEMORY_LAYOUT(layout), layout.expert_tp, _LAYER_TRAINING(training))


# the simulators of this thread's last searches (shared_simulator): a search that follows
# another on the same specs (a sweep's next global batch, a knob changed in the app) reuses
# every stage already costed; per thread, so that no two searches share one at once
KEEP_SIMULATORS = 2
_RECENT = threading.local()


def shared_simulator(
    model: ModelSpec,
    cluster: Cluster,
    profile: CalibrationProfile,
    stack: StackSpec | None = None,
) -> BatchSimulator:
    """A BatchSimulator of these specs: this thread's from a recent call with the very same
    spec objects (specs are frozen, so its cached stages still hold), else a new one (the
    KEEP_SIMULATORS most recent are kept)."""
    recent: list = getattr(_RECENT, "sims", None) or []
    for k, sim in enumerate(recent):
        same = sim.model is model and sim.cluster is cluster and sim.profile is profile
        if same and sim.stack is stack:
            recent.insert(0, recent.pop(k))
            return sim
    sim = BatchSimulator(model, cluster, profile, stack)
    _RECENT.sims = [sim, *recent][:KEEP_SIMULATORS]
    return sim


@dataclass(frozen=True, slots=True)
class Figures:
    """What a search ranks and prints of one candidate: the figures of its StepReport.

    ``timed`` False: the memory was priced and the candidate does not fit the limit it was
    asked about, so its time was never costed (the time fields are 0 and
    ``time_breakdown_s`` is empty). Seconds, tokens/s, percent and GiB as in StepReport.
    """

    timed: bool
    step_time_s: float
    tokens_per_s: float
    tokens_per_s_per_gpu: float
    mfu_pct: float
    hfu_pct: float
    model_flops_per_token: float
    gpus: int
    microbatches: int
    time_breakdown_s: dict[str, float]
    memory_breakdown_gib: dict[str, float]
    peak_memory_gib: float
    peak_memory_stage: str
    usable_memory_gib: float
    stack: str  # "" without a stack, as StepReport
    peak_reserved_gib: float | None

    @property
    def fits(self) -> bool:
        return self.peak_memory_gib <= self.usable_memory_gib

    @property
    def memory_headroom_gib(self) -> float:
        """Usable GiB left free at the peak (negative: over)."""
        return self.usable_memory_gib - self.peak_memory_gib


@dataclass(slots=True)
class _Timed:
    """The time costs of one layer-cost key (computed for its first candidate that fits)."""

    stack: Stack  # its layer_max is that candidate's; replaced per pp
    edges: Edges
    emb: dict[str, float]
    head: dict[str, float]
    work: tuple[float, float]  # flops_per_token


@dataclass(slots=True)
class _Layers:
    """What the memory reads of the layers, for every candidate of one memory key."""

    kinds: list[tuple[LayerSpec, float]]
    act_layer: float  # activation bytes per layer and micro-batch
    terms: tuple[float, float, float]  # activation_terms


class BatchSimulator:
    """The figures of ``simulate_step(model, cluster, layout, training, profile, False,
    stack)`` for many layouts, each stage costed once per distinct input.

    ``memory_limit_gib``: a candidate whose peak exceeds it is returned memory only
    (``Figures.timed`` False). Raises what ``simulate_step`` raises: PlannerError for a layout
    the stack cannot run, ArithmeticError on extreme inputs."""

    def __init__(
        self,
        model: ModelSpec,
        cluster: Cluster,
        profile: CalibrationProfile,
        stack: StackSpec | None = None,
    ) -> None:
        self.model, self.cluster, self.profile, self.stack = model, cluster, profile, stack
        self.fabric = comms.make_fabric(cluster, profile)
        self.usable = cluster.accelerator.hbm_usable_gib
        self._devices: dict[tuple, compute.Device] = {}
        self._groups: dict[tuple, comms.Groups] = {}
        self._trainings: dict[Training, Training] = {}
        self._violations: dict[tuple, PlannerError | None] = {}
        # what the stack's code cannot express of the model: every candidate's error
        self._model_violation = (
            next(iter(model_violations(stack, model)), None) if stack is not None else None
        )
        self._layers: dict[tuple, _Layers] = {}
        self._timed_parts: dict[tuple, _Timed] = {}
        self._peaks: dict[tuple, _Peak] = {}
        self._params: dict[tuple, Params] = {}
        self._stacks: dict[tuple, Stack] = {}
        self._pp_s: dict[tuple, float] = {}
        self._dp: dict[tuple, DataParallel] = {}
        self._shared: dict = {}  # kernel costs and collectives shared between layouts (layers, stages)
        self._memo: dict = {}  # the keys and tables of figures_many (planner/simulate/vector.py)

    def _vector_memo(self) -> dict:
        """The vector path's keys and tables, kept between calls (created on first use)."""
        if not self._memo:
            for name in VECTOR_DICTS:
                self._memo[name] = {}
            for name in VECTOR_LISTS:
                self._memo[name] = []
            self._memo["edge_keys"] = [set(), set(), set()]
        return self._memo

    # ---- the shared stages ---------------------------------------------------------------
    def _applied(self, layout: Layout, training: Training) -> tuple[Layout, Training]:
        """``layout`` and ``training`` under the stack, checked (``simulate_step``'s first
        step); the training part once per distinct Training."""
        stack = self.stack
        if stack is None:
            return layout, training
        tr = self._trainings.get(training)
        if tr is None:
            tr = self._trainings[training] = stack_training(stack, self.model, training)
        layout = stack_layout(stack, layout)
        # what stack_violation reads, so each distinct answer is found once
        vkey = (_VIOLATION_LAYOUT(layout), tr.recompute, tr.precision)
        err = self._violations.get(vkey, _UNKNOWN)
        if err is _UNKNOWN:
            err = self._violations[vkey] = self._model_violation or stack_violation(
                stack, layout, tr
            )
        if err is not None:
            raise err.with_traceback(None)  # one error object, raised afresh each time
        return layout, tr

    def _device(self, training: Training) -> compute.Device:
        """``make_device`` for ``training``, kept per (precision, attention kernel, execution)."""
        dkey = (training.precision, training.attention_kernel, training.execution)
        dev = self._devices.get(dkey)
        if dev is None:
            dev = self._devices[dkey] = make_device(
                self.model, self.cluster, self.profile, training
            )
        return dev

    def _context(self, layout: Layout, training: Training) -> Context:
        """``make_context`` with the device and the group placements kept per key."""
        dev = self._device(training)
        gkey = (
            layout.tp, layout.cp, layout.dp, layout.pp, layout.ep, layout.expert_tp,
            layout.zero_shard,
        )  # fmt: skip
        groups = self._groups.get(gkey)
        if groups is None:
            groups = self._groups[gkey] = make_groups(layout, self.fabric)
        return make_context(
            self.model, self.cluster, layout, training, self.profile, dev, self.fabric, groups,
            self._shared,
        )  # fmt: skip

    def _layer_part(self, mkey: tuple, ctx: Context) -> _Layers:
        """The memory part of the layers of memory key ``mkey``."""
        part = self._layers.get(mkey)
        if part is None:
            kinds, act_layer = layer_memory(ctx)
            stack = self._stack(mkey, kinds, act_layer, _SPLIT(ctx.layout), None)
            terms = activation_terms(ctx, stack)
            part = self._layers[mkey] = _Layers(kinds, act_layer, terms)
        return part

    def _timed(self, key: tuple, part: _Layers, ctx: Context) -> _Timed:
        """The time part of the layers of layer-cost key ``key``, costed on first use."""
        t = self._timed_parts.get(key)
        if t is None:
            stack = layer_stack(ctx, (part.kinds, part.act_layer))
            edges = edge_costs(ctx, stack)
            emb, head = edge_work(ctx, stack, edges)
            t = self._timed_parts[key] = _Timed(
                stack, edges, emb, head, flops_per_token(ctx, stack)
            )
        return t

    def _stack(
        self, key: tuple, kinds: list, act_layer: float, split: tuple, timed: _Timed | None
    ) -> Stack:
        """The layer stack with the layers on the most loaded rank of ``split`` (pp and the
        stated first / last rank counts): without time costs (what the memory reads) when
        ``timed`` is None."""
        k = (key, split, timed is not None)
        s = self._stacks.get(k)
        if s is None:
            s = self._stacks[k] = Stack(
                kinds,
                timed.stack.costs if timed else [],
                timed.stack.per_layer if timed else {},
                max(pipeline.stage_layer_counts(self.model.layers, *split)),
                act_layer,
            )
        return s

    # ---- one candidate ---------------------------------------------------------------------
    def figures(
        self, layout: Layout, training: Training, memory_limit_gib: float | None = None
    ) -> Figures:
        """The candidate's figures; timed unless its peak exceeds ``memory_limit_gib``."""
        layout, training = self._applied(layout, training)
        # the TP, CP and EP groups follow from tp, cp, ep and expert_tp on this cluster
        mkey = memory_key(layout, training)
        peak_key = (mkey, _PEAK_LAYOUT(layout), training.global_batch)
        found = self._peaks.get(peak_key)
        ctx = None
        if found is None:
            ctx = self._context(layout, training)
            found = self._peaks[peak_key] = self._peak(mkey, ctx)
        mem, stage_name, peak, params = found
        if memory_limit_gib is not None and peak > memory_limit_gib:
            m = pipeline.microbatches_per_step(
                training.global_batch, training.micro_batch, layout.dp
            )
            return self._figures(layout.world_size, m, None, 0.0, {}, found)
        ctx = ctx or self._context(layout, training)
        key = (mkey, _OVERLAPS(layout))
        part = self._layer_part(mkey, ctx)
        t = self._timed(key, part, ctx)
        stack = self._stack(key, part.kinds, part.act_layer, _SPLIT(layout), t)
        pp_s = self._pp_send(key, ctx)
        dp = self._dp_traffic(key, ctx, stack, params)
        ranks = rank_costs(ctx, stack, t.emb, t.head, pp_s, dp)

        def plan() -> tuple:
            specs, recipe, _ = stage_plans(ctx, stack, t.edges, t.emb, t.head, pp_s, dp, ranks)
            return specs, recipe

        steady, bubble, optimizer_s, breakdown = step_times(ctx, ranks, params, dp, plan)
        step = steady + bubble + dp.step + optimizer_s
        work = utilisation(ctx, stack, step, t.work)
        return self._figures(layout.world_size, ctx.microbatches, work, step, breakdown, found)

    def _peak(self, mkey: tuple, ctx: Context) -> _Peak:
        """The memory peak of ``ctx`` (memory_peak's GiB by category and rank, their sum)
        and the parameters per GPU it was priced from."""
        part = self._layer_part(mkey, ctx)
        split = _SPLIT(ctx.layout)
        stack = self._stack(mkey, part.kinds, part.act_layer, split, None)
        pkey = (mkey, split, ctx.both_ends)
        params = self._params.get(pkey)
        if params is None:
            params = self._params[pkey] = params_per_gpu(ctx, stack)
        mem, stage_name, _ = memory_peak(ctx, stack, params, part.terms)
        return mem, stage_name, sum(mem.values()), params

    def _pp_send(self, key: tuple, ctx: Context) -> float:
        layout = ctx.layout
        k = (key, layout.pp, ctx.vpp, layout.pp_scatter_gather, ctx.groups.pp)
        out = self._pp_s.get(k)
        if out is None:
            out = self._pp_s[k] = pp_send_s(ctx)
        return out

    def _dp_traffic(self, key: tuple, ctx: Context, stack: Stack, params: Params) -> DataParallel:
        layout = ctx.layout
        k = (
            key,
            layout.pp,
            ctx.both_ends,
            layout.dp,
            layout.zero,
            layout.overlap_dp_grad_reduce,
            layout.overlap_zero3_param_gather,
            ctx.groups.dp_cp,
            ctx.groups.dp_shard,
            ctx.microbatches > 1,
        )
        out = self._dp.get(k)
        if out is None:
            out = self._dp[k] = dp_traffic(ctx, stack, params)
        return out

    def _figures(
        self,
        gpus: int,
        microbatches: int,
        work: tuple[float, float, float, float] | None,
        step: float,
        breakdown: dict[str, float],
        peak: _Peak,
    ) -> Figures:
        """The Figures of a priced candidate: timed when ``work`` (utilisation's MFU %, HFU %,
        model FLOPs per token, tokens/s) is given, memory only when it is None."""
        mfu, hfu, mf_tok, tps = work or (0.0, 0.0, 0.0, 0.0)
        mem, stage_name, total, _ = peak
        return Figures(
            work is not None,
            step,
            tps,
            tps / gpus,
            mfu,
            hfu,
            mf_tok,
            gpus,
            microbatches,
            breakdown,
            mem,
            total,
            stage_name,
            self.usable,
            self.stack.name if self.stack is not None else "",
            reserved_peak_gib(self.stack, total) if self.stack is not None else None,
        )
