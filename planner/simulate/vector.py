"""Many candidates at once: :class:`~planner.simulate.batch.BatchSimulator`'s figures with the
per-candidate assembly (memory peak, rank costs, pipeline, DP exposure, optimizer, utilisation)
done in numpy over every candidate of one pipeline depth and ZeRO stage.

The stages shared between candidates (layer costs, parameters, pipeline sends, collectives) are
still costed once per distinct key by the one-layout stage functions; what differs per
candidate is the arithmetic that combines them, which :mod:`planner.simulate.vector_math`
replays elementwise in the order ``simulate_step`` does it, so each figure is the same float
(tests/simulate/test_batch.py). A candidate this path does not cover (a V or zero-bubble
schedule, offloaded layers, a per-tensor optimizer, a figure that is not finite, an error) is
handed to :meth:`BatchSimulator.figures`, one at a time.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from operator import itemgetter

import numpy as np

from planner.costs import elementwise, memory
from planner.schedules import SCHEDULES, OneF1B, default_schedule_name
from planner.simulate import batch as _batch
from planner.simulate.batch import BatchSimulator, Figures
from planner.simulate.copying import quick_copy
from planner.simulate.stages import stage_categories
from planner.simulate.vector_keys import (
    ROW,
    memory_inputs,
    mid_row,
    new_flight,
    new_pid,
    time_inputs,
)
from planner.simulate.vector_math import PER_LAYER, Columns, memory_columns, time_columns
from planner.specs.layout import Layout, Training
from planner.stacks import layout_defaults, reserved_peak_gib, stack_training, stack_violation

Candidate = tuple[int, Layout, Training]
# Python 3.12 sums floats with compensation: the elementwise sums would then differ
COVERED_PYTHON = sys.version_info < (3, 12)
_VIOLATION = itemgetter(
    "tp", "sequence_parallel", "pp", "cp", "ep", "overlap_tp_comm", "zero", "schedule", "vpp"
)
_MEMORY = itemgetter(*_batch.MEMORY_LAYOUT_FIELDS)


@dataclass(slots=True)
class _TrainingInfo:
    """One candidate Training under the stack, and what the vector path reads of it."""

    given: Training  # kept alive: the cache is keyed by its id
    applied: Training | None
    error: Exception | None
    layer_id: int  # interned layer-training fields
    covered: bool  # no error, no offload, not a per-tensor optimizer, Python < 3.12
    tix: int  # its row of _training_consts in the memo's "tconsts"
    recompute: str = ""  # the applied Training's, read by the stack's verdict
    precision: str = ""


def _training_consts(sim: BatchSimulator, tr: Training) -> tuple:
    """(weight B, optimizer B, gradient B, gather B, AdamW B, AdamW ops, AdamW B/s, host s/op,
    tokens per step, peak FLOP/s, 1 where the first micro-batch skips the gradient-accumulation
    pass, fp8 weight-cache B per layer parameter): the per-Training constants of the vector
    path."""
    fp32 = tr.precision == "fp32"
    dev = sim._device(tr)
    return (
        4 if fp32 else memory.WEIGHT_BYTES,
        memory.optimizer_state_bytes(tr),
        memory.grad_bytes(tr),
        memory.param_gather_bytes(tr),
        elementwise.adam_bytes_per_param(tr.optimizer_kernel, tr.optimizer_states),
        float(elementwise.ADAM_OPS[tr.optimizer_kernel]),
        dev.adam_bytes_per_s,
        dev.host_op_s,
        tr.tokens_per_step,
        sim.cluster.accelerator.peak_flops_per_s(tr.work_precision),
        1.0 if elementwise.grad_pass_share(tr, 2.0) < 1.0 else 0.0,
        memory.fp8_weight_cache_bytes(tr),
    )


class VectorPass:
    """One call of :func:`figures_many`: the per-candidate keys, then the numpy groups."""

    def __init__(self, sim: BatchSimulator, cands: Sequence[Candidate], limit: float | None):
        self.sim, self.cands, self.limit = sim, cands, limit
        self.out: list = [None] * len(cands)
        self.fallback: list[int] = []
        self.groups: dict[tuple, list[tuple]] = {}
        self.memo = sim._vector_memo()
        self.default_keys = tuple(layout_defaults(sim.stack, Layout())) if sim.stack else ()
        self.memory_only_figures = True
        self.bounded: set[int] = set()  # see figures_many
        self.last_ctx: tuple = (-1, None)
        self.row_of: dict[int, tuple] = {}  # candidate -> its row, for a cache miss

    # ---- per candidate ------------------------------------------------------------------
    def training(self, training: Training) -> _TrainingInfo:
        memo = self.memo["training"]
        info = memo.get(id(training))
        if info is None:
            sim = self.sim
            try:
                tr = training
                if sim.stack is not None:
                    tr = sim._trainings.get(training)
                    if tr is None:
                        tr = sim._trainings[training] = stack_training(
                            sim.stack, sim.model, training
                        )
                lid = self.memo["layer_training"].setdefault(
                    _batch._LAYER_TRAINING(tr), len(self.memo["layer_training"])
                )
                covered = COVERED_PYTHON and not tr.offload_layers
                covered = covered and not (tr.optimizer_offload or tr.checkpoint_offload)
                covered = covered and tr.optimizer_kernel != "per_tensor"
                self.memo["tconsts"].append(_training_consts(sim, tr))
                tix = len(self.memo["tconsts"]) - 1
                info = _TrainingInfo(
                    training, tr, None, lid, covered, tix, tr.recompute, tr.precision
                )
            except Exception as exc:  # noqa: BLE001 - the one-layout path raises it again
                info = _TrainingInfo(training, None, exc, -1, False, -1)
            memo[id(training)] = info
        return info

    def applied(self, layout: Layout) -> tuple[dict, dict]:
        """The layout's field values under the stack (``stack_layout``'s, without a copy), and
        the update ``stack_layout`` makes."""
        d = layout.__dict__
        stack = self.sim.stack
        if stack is None:
            return d, {}
        fs = layout.__pydantic_fields_set__
        # what layout_defaults reads (sequence parallelism, tp > 1, pp > 1) and which of its
        # fields the layout sets
        keys = self.default_keys
        sig = (*map(fs.__contains__, keys), d["sequence_parallel"], d["tp"] > 1, d["pp"] > 1)
        memo = self.memo["update"]
        update = memo.get(sig)
        if update is None:
            set_fields = layout.__pydantic_fields_set__
            wanted = layout_defaults(stack, layout)
            update = memo[sig] = {k: v for k, v in wanted.items() if k not in set_fields}
        return ({**d, **update} if update else d), update

    def prepare(self) -> None:
        """Key every candidate and put its row (ROW fields) in its (pp, ZeRO, ZeRO-3 reshard)
        group, or the candidate in ``fallback``."""
        sim, memo = self.sim, self.memo
        mids, pids, structs = memo["mid"], memo["pid"], memo["structure"]
        infos, verdicts = memo["training"], sim._violations
        stacked = sim.stack is not None
        for i, (_gpus, layout, training) in enumerate(self.cands):
            info = infos.get(id(training)) or self.training(training)
            if not info.covered:
                self.fallback.append(i)
                continue
            if layout.first_stage_layers is not None or layout.last_stage_layers is not None:
                self.fallback.append(i)  # a stated pipeline split: the one-candidate path
                continue
            if layout.dp_replicas > 1:
                self.fallback.append(i)  # hybrid sharding (Layout.dp_shard): the same
                continue
            a, update = self.applied(layout)
            self.row_of[i] = (info, update)
            if stacked:  # what the stack cannot run, under the one-layout path's key
                vkey = (_VIOLATION(a), info.recompute, info.precision)
                err = verdicts.get(vkey, _batch._UNKNOWN)
                if err is _batch._UNKNOWN:
                    err = self.violation(i, vkey, info.applied)
                if err is not None:
                    self.fallback.append(i)
                    continue
            tp, cp, dp, pp, ep = a["tp"], a["cp"], a["dp"], a["pp"], a["ep"]
            sk = (info.tix, tp, cp, dp, pp, ep, a["vpp"], a["schedule"])
            st = structs.get(sk, _batch._UNKNOWN)
            if st is _batch._UNKNOWN:
                st = structs[sk] = self.structure(a, training)
            if st is None:  # a schedule this path does not cover
                self.fallback.append(i)
                continue
            expert_tp, vpp, m, fid = st
            mk = (_MEMORY(a), expert_tp, info.layer_id)
            mid = mids.get(mk)
            if mid is None and (mid := self.new_mid(mk, i)) is None:
                self.fallback.append(i)
                continue
            pid = pids.get((mid, pp))
            if pid is None and (pid := new_pid(self, mid, pp, i)) is None:
                self.fallback.append(i)
                continue
            zc = a["zero"] >= 3 and a["zero3_collectives"] == "per_layer_copy_out"
            if a["zero"] >= 3 and a["zero3_collectives"] == "per_tensor_list":
                self.fallback.append(i)  # DeepSpeed 0.3's per-tensor collectives
                continue
            # stages.rank_costs: p2p hidden in the steady state of the interleaved schedule
            opp = (
                a["overlap_pp_comm"]
                and (a["schedule"] or default_schedule_name(a["vpp"])) == "interleaved"
            )
            gk = (pp, a["zero"], a["zero3_reshard_after_forward"])
            group = self.groups.get(gk)
            if group is None:
                group = self.groups[gk] = []
            group.append(
                (i, mid, pid, fid, info.tix, vpp, m, tp, cp, dp, ep, expert_tp,
                 a["overlap_dp_grad_reduce"], a["overlap_zero3_param_gather"],
                 a["pp_scatter_gather"], a["overlap_tp_comm"], a["overlap_ep_comm"], opp, zc)
            )  # fmt: skip

    def structure(self, a: dict, training: Training) -> tuple | None:
        """(expert TP, chunks per rank, micro-batches, activations-in-flight id) of a layout of
        field values ``a`` and ``training``; None under a schedule this path does not cover
        (a V placement, a bubble other than the 1F1B / interleaved one)."""
        name, vpp, pp = a["schedule"], a["vpp"], a["pp"]
        sched = SCHEDULES[name or default_schedule_name(vpp)]  # schedule_of's
        if pp > 1 and (sched.placement != "loop" or type(sched).bubble_s is not _LOOP):
            return None
        tp, cp, dp, ep = a["tp"], a["cp"], a["dp"], a["ep"]
        chunks = vpp or 1
        m = training.global_batch // (training.micro_batch * dp)
        fid = self.memo["flight"].get((pp, chunks, m, sched))
        if fid is None:
            fid = new_flight(self.memo, self.sim.model.layers, pp, chunks, m, sched)
        return (tp if (dp * cp) % ep == 0 else 1), chunks, m, fid

    def violation(self, i: int, key: tuple, tr: Training) -> Exception | None:
        """What the stack cannot run of candidate ``i``, kept under ``key`` (the one-layout
        path's, BatchSimulator._applied)."""
        sim = self.sim
        err = sim._violations[key] = sim._model_violation or stack_violation(
            sim.stack, self.layout(i), tr
        )
        return err

    def layout(self, i: int) -> Layout:
        """Candidate ``i``'s Layout under the stack (``stack_layout``'s copy)."""
        layout, update = self.cands[i][1], self.row_of[i][1]
        return quick_copy(layout, update) if update else layout

    def ctx(self, i: int):  # noqa: ANN201 - a stages.Context
        """The Context of candidate ``i`` (the one-layout path's), for a cache miss."""
        if self.last_ctx[0] != i:
            layout = self.layout(i)
            self.last_ctx = (i, self.sim._context(layout, self.row_of[i][0].applied))
        return self.last_ctx[1]

    def new_mid(self, mk: tuple, i: int) -> int | None:
        """Intern a memory key, costing its layer memory from candidate ``i``; None: refused."""
        try:
            ctx = self.ctx(i)
        except Exception:  # noqa: BLE001 - the one-layout path raises it again
            return None
        mkey = _batch.memory_key(ctx.layout, ctx.training)
        part = self.sim._layer_part(mkey, ctx)
        mids = self.memo["mid"]
        mid = mids[mk] = len(mids)
        self.memo["mid_rows"].append((mkey, part))
        self.memo["mid_num"].append(mid_row(part))
        return mid

    # ---- the groups ---------------------------------------------------------------------
    def run(self) -> list:
        self.prepare()
        with np.errstate(all="ignore"):
            for (pp, zero, reshard), rows in self.groups.items():
                self.group(pp, zero, reshard, rows)
        sim = self.sim
        for i in sorted(self.fallback):
            _gpus, layout, training = self.cands[i]
            try:
                self.out[i] = sim.figures(layout, training, self.limit)
            except (_batch.PlannerError, ArithmeticError) as exc:
                self.out[i] = exc
        return self.out

    def group(self, pp: int, zero: int, reshard: bool, rows: list[tuple]) -> None:
        """The figures of one group's candidates: memory for all, time for those that fit."""
        r = np.array(rows, dtype=np.int64)
        cols = memory_inputs(self, pp, r)
        mem = memory_columns(cols, pp, zero, reshard)
        finite = np.isfinite(mem.table).all(axis=1) & np.isfinite(mem.total)
        fit = finite if self.limit is None else finite & (mem.total <= self.limit)
        self.fallback.extend(r[~finite, ROW.i].tolist())
        if self.memory_only_figures:
            self.memory_only(pp, r[finite & ~fit], mem.take(np.flatnonzero(finite & ~fit)))
        idx = np.flatnonzero(fit)
        if not len(idx):
            return
        r, sub, mem = r[idx], cols.take(idx), mem.take(idx)
        tcols = time_inputs(self, pp, zero, r, sub, CATEGORIES)
        if tcols is None:
            self.fallback.extend(r[:, ROW.i].tolist())
            return
        untied = 0.0 if self.sim.model.tied_embeddings else 1.0
        t = time_columns(sub, tcols, pp, zero, reshard, self.sim.model.layers, untied)
        self.timed(r, mem, t)

    def memory_only(self, pp: int, r: np.ndarray, mem: Columns) -> None:
        """The memory-only Figures of the candidates over the limit (rows ``r``)."""
        sim = self.sim
        gpus = (r[:, ROW.tp] * r[:, ROW.cp] * r[:, ROW.dp] * pp).tolist()
        for j, (i, m) in enumerate(r[:, [ROW.i, ROW.m]].tolist()):
            total = float(mem.total[j])
            self.out[i] = Figures(
                False, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, gpus[j], m, {},
                dict(zip(MEM_KEYS, mem.table[j].tolist(), strict=True)),
                total, STAGE_NAMES[int(mem.stage[j])], sim.usable, self.stack_name,
                self.reserved(total),
            )  # fmt: skip

    @property
    def stack_name(self) -> str:
        return self.sim.stack.name if self.sim.stack is not None else ""

    def reserved(self, total: float) -> float | None:
        return reserved_peak_gib(self.sim.stack, total) if self.sim.stack is not None else None

    def timed(self, r: np.ndarray, mem: Columns, t: Columns) -> None:
        """Figures of the timed candidates (rows ``r``); one with a non-finite figure goes to
        the fallback."""
        sim = self.sim
        ok = np.isfinite(t.table).all(axis=1) & np.isfinite(t.scalars).all(axis=1)
        small = ok & (np.abs(t.table) < BOUND).all(axis=1) & (np.abs(t.scalars) < BOUND).all(axis=1)
        small &= (np.abs(mem.table) < BOUND).all(axis=1) & (np.abs(mem.total) < BOUND)
        self.bounded.update(r[small, ROW.i].tolist())
        ok = ok.tolist()
        scal, times, mems = t.scalars.tolist(), t.table.tolist(), mem.table.tolist()
        totals, stages = mem.total.tolist(), mem.stage.tolist()
        usable, name = sim.usable, self.stack_name
        reserved = self.reserved
        for j, (i, m) in enumerate(r[:, [ROW.i, ROW.m]].tolist()):
            if not ok[j]:
                self.fallback.append(i)
                continue
            step, tps, mfu, hfu, mf, gpus = scal[j]
            gpus = int(gpus)
            total = totals[j]
            self.out[i] = Figures(
                True, step, tps, tps / gpus, mfu, hfu, mf, gpus, m,
                dict(zip(TIME_KEYS, times[j], strict=True)),
                dict(zip(MEM_KEYS, mems[j], strict=True)),
                total, STAGE_NAMES[stages[j]], usable, name, reserved(total),
            )  # fmt: skip


_LOOP = OneF1B.bubble_s
# a figure below this in magnitude: a sum of a few dozen of them is finite (Evaluator._accept)
BOUND = 1e300
MEM_KEYS = ("weights", "gradients", "optimizer_states", "activations", "logits", "overhead")
STAGE_NAMES = ("first", "last", "only", "middle")
# the time breakdown: the rank categories (stages.stage_categories), then the step's own
CATEGORIES = tuple(stage_categories(0.0, dict.fromkeys(PER_LAYER, 0.0), 0.0, 0.0, {}))
TIME_KEYS = (*CATEGORIES, "pipeline_bubble", "optimizer")


def figures_many(
    sim: BatchSimulator,
    cands: Sequence[Candidate],
    memory_limit_gib: float | None = None,
    memory_only: bool = True,
    bounded: set[int] | None = None,
) -> list[Figures | Exception | None]:
    """``sim.figures(layout, training, memory_limit_gib)`` of every (gpus, layout, training),
    in order: the Figures, or the PlannerError / ArithmeticError it raises. ``memory_only``
    False: None instead of the memory-only Figures of a candidate over the limit (GiB);
    ``bounded``: receives the candidates whose timed figures are all below BOUND in magnitude."""
    vp = VectorPass(sim, cands, memory_limit_gib)
    vp.memory_only_figures = memory_only
    vp.bounded = bounded if bounded is not None else set()
    out = vp.run()
    if not memory_only:  # the fallback's memory-only figures too
        out = [None if type(f) is Figures and not f.timed else f for f in out]
    return out


__all__ = ["TIME_KEYS", "figures_many"]
