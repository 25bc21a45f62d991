"""The simulated training step as a Chrome trace (Perfetto / chrome://tracing timeline).

:func:`build_timeline` turns a :class:`~planner.report.StepReport` into the Chrome Trace Event
Format: ``{"traceEvents": [...], "displayTimeUnit": "ms"}`` with complete events (``"ph": "X"``,
``ts`` and ``dur`` in microseconds) and ``process_name`` / ``thread_name`` metadata events.

Layout of the trace:

* one process per pipeline stage (``pid`` = stage), with one thread per stream: ``compute``
  (tid 0), ``tp_comm``, ``cp_comm``, ``ep_comm``, ``pp_comm``, ``dp_comm`` (tids 1-5), so
  overlapping work never shares a thread and slices on one thread nest strictly;
* the pipeline schedule over ``report.microbatches`` micro-batches: 1F1B (warm-up forwards,
  steady one-forward-one-backward, cool-down backwards), interleaved 1F1B with model chunks when
  ``layout.vpp > 1`` (Megatron-LM's order: groups of ``pp`` micro-batches run through every
  chunk before the next group);
* a forward slice ``F mb3`` (``F mb3 chunk1`` when interleaved) and a backward slice ``B mb3``
  per micro-batch and chunk on the compute thread, with child slices for each compute category
  (gemm, attention, memory-bound, logits + loss, recompute) and the *exposed* TP / CP / EP (and
  ZeRO-2/3 DP) collectives on their comm threads while the compute thread waits inside the
  slice; a ``send activations`` / ``send gradients`` slice on ``pp_comm`` after each one;
* ``bubble`` slices on the compute thread wherever the stage idles in the schedule;
* the data-parallel gradient reduction (ZeRO 0/1): drawn as overlapping the last backward
  (category ``dp_comm_overlapped``, not part of the step time) and its exposed part after the
  pipeline drains; then the optimizer step.

Costs come only from the report: the per-micro-batch time of a category is
``time_breakdown_s[cat] / microbatches``; compute is split 1:2 between forward and backward
(recompute wholly in backward), TP, EP and PP time 1:1, CP time 1:2 (the backward ring also
returns dK, dV), ZeRO-3 DP time 1:2 (forward all-gather; backward all-gather + reduce-scatter),
ZeRO-2 DP time wholly in backward. ``dp_comm`` is step-level for ZeRO 0/1 and per micro-batch for
ZeRO 2/3. Every stage is drawn with the bottleneck stage's per-micro-batch costs (the report
does not carry the others); the idle time the 1F1B pattern gives each stage is scaled so that
its bubble slices add up to ``time_breakdown_s["pipeline_bubble"]``. Hence on every stage (the
trace names ``bottleneck_pid`` 0) the trace spans exactly ``step_time_s`` and the slices of
each category (the event's ``cat``) sum to ``time_breakdown_s[cat]``.
"""

from __future__ import annotations

import heapq
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planner.errors import PlannerError
from planner.report import TIME_CATEGORIES, StepReport
from planner.specs.layout import Layout, Training
from planner.specs.model import ModelSpec

THREADS = ("compute", "tp_comm", "cp_comm", "ep_comm", "pp_comm", "dp_comm")
TID = {name: i for i, name in enumerate(THREADS)}
US_PER_S = 1e6
# forward share of each per-micro-batch category (the rest runs in backward)
FORWARD_SHARE = {
    "compute_gemm": 1.0 / 3.0,
    "compute_attention": 1.0 / 3.0,
    "compute_memory_bound": 1.0 / 3.0,
    "compute_logits_loss": 1.0 / 3.0,
    "recompute": 0.0,
    "tp_comm": 0.5,
    "cp_comm": 1.0 / 3.0,
    "ep_comm": 0.5,
    "pp_comm": 0.5,
    "host_overhead": 1.0 / 3.0,
    # drawn in the forward: reloads hide behind backward layers, twice as long
    "activation_offload": 1.0,
}
PER_MICROBATCH = tuple(FORWARD_SHARE)
ROUNDING = 1e-12  # relative: shorter idle than this is float rounding, not a bubble
OVERLAPPED_DP = "dp_comm_overlapped"  # drawn for context; not part of the step time


@dataclass(frozen=True, slots=True)
class _Op:
    """One forward or backward pass of one micro-batch through one model chunk of a stage."""

    kind: str  # "F" or "B"
    mb: int
    chunk: int


@dataclass(frozen=True, slots=True)
class _Segment:
    """A piece of an op, microseconds long, on one thread, of one planner category."""

    thread: str
    category: str
    name: str
    dur_us: float


# ---- schedule --------------------------------------------------------------------------------


# forward + backward slices a trace may hold (a few hundred MB of JSON at most)
MAX_TRACE_OPS = 1_000_000


def _tables(pp: int, vpp: int, microbatches: int) -> tuple[list[_Op], list[_Op]]:
    """(forward, backward) op tables: micro-batches in groups of ``pp`` go through every chunk
    before the next group (Megatron-LM ``get_schedule_table``); backwards visit chunks in
    reverse."""
    table = [
        (mb, c)
        for start in range(0, microbatches, pp)
        for c in range(vpp)
        for mb in range(start, min(start + pp, microbatches))
    ]
    return [_Op("F", mb, c) for mb, c in table], [_Op("B", mb, vpp - 1 - c) for mb, c in table]


def _warmup(stage: int, pp: int, vpp: int, total: int) -> int:
    """Warm-up forwards of ``stage`` before its first backward."""
    if vpp == 1:
        return min(pp - stage - 1, total)
    return min((pp - stage - 1) * 2 + (vpp - 1) * pp, total)


def stage_order(stage: int, pp: int, vpp: int, microbatches: int) -> list[_Op]:
    """The order in which ``stage`` runs its forward and backward ops in one step.

    Non-interleaved 1F1B (PipeDream-Flush, Narayanan et al. 2021): ``pp - stage - 1`` warm-up
    forwards, then alternate one forward and one backward, then the remaining backwards.
    Interleaved (``vpp > 1``, Megatron-LM ``forward_backward_pipelining_with_interleaving``):
    micro-batches go through the chunks in groups of ``pp``; ``(pp - stage - 1) * 2 +
    (vpp - 1) * pp`` warm-up forwards, then 1F1B over the (micro-batch, chunk) table, backwards
    visiting the chunks in reverse.
    """
    v = max(vpp, 1)
    fwd, bwd = _tables(pp, v, microbatches)
    total = len(fwd)
    warm = _warmup(stage, pp, v, total)
    order = fwd[:warm]
    for i in range(total - warm):
        order += [fwd[warm + i], bwd[i]]
    order += bwd[total - warm :]
    return order


def _dependency(op: _Op, stage: int, pp: int, vpp: int) -> tuple[str, int, int] | None:
    """(kind, micro-batch, virtual stage) of the op that ``op`` on ``stage`` waits for: the
    previous virtual stage's forward; the next virtual stage's backward, or on the last virtual
    stage its own forward."""
    vs = op.chunk * pp + stage
    if op.kind == "F":
        return ("F", op.mb, vs - 1) if vs > 0 else None
    return ("B", op.mb, vs + 1) if vs < pp * vpp - 1 else ("F", op.mb, vs)


def run_schedule(
    orders: list[list[_Op]], pp: int, vpp: int, f: float, b: float
) -> list[list[float]] | None:
    """Start time of every op when each stage runs its ``orders`` in sequence and an op waits
    for its :func:`_dependency`. ``f`` and ``b`` are one op's durations. None if the orders
    deadlock."""
    done: dict[tuple[str, int, int], float] = {}
    starts: list[list[float]] = [[] for _ in range(pp)]
    free = [0.0] * pp
    ptr = [0] * pp
    remaining = sum(len(o) for o in orders)
    while remaining:
        progressed = False
        for s in range(pp):
            while ptr[s] < len(orders[s]):
                op = orders[s][ptr[s]]
                dep = _dependency(op, s, pp, vpp)
                if dep is not None and dep not in done:
                    break
                start = max(free[s], done[dep] if dep is not None else 0.0)
                end = start + (f if op.kind == "F" else b)
                done[(op.kind, op.mb, op.chunk * pp + s)] = end
                starts[s].append(start)
                free[s] = end
                ptr[s] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            return None
    return starts


def _greedy_schedule(
    pp: int, vpp: int, microbatches: int, f: float, b: float
) -> tuple[list[list[_Op]], list[list[float]]]:
    """A work-conserving 1F1B: ops are committed in order of start time; a free stage runs its
    next forward or next backward (table order), preferring the backward once it holds as many
    micro-batches in flight as the 1F1B warm-up allows, and never idles while one of them can
    run. Cannot deadlock (the earliest pending forward, then backward, is always at the head of
    its stage's queue); used when the number of micro-batches is not a multiple of ``pp`` and
    the interleaved 1F1B order would deadlock."""
    fwd, bwd = _tables(pp, vpp, microbatches)
    total = len(fwd)
    cap = [_warmup(s, pp, vpp, total) + 1 for s in range(pp)]
    fi, bi = [0] * pp, [0] * pp
    free = [0.0] * pp
    done: dict[tuple[str, int, int], float] = {}
    orders: list[list[_Op]] = [[] for _ in range(pp)]
    starts: list[list[float]] = [[] for _ in range(pp)]
    version = [0] * pp
    heap: list[tuple[float, int, int, int, str]] = []

    def push(s: int) -> None:
        version[s] += 1
        prefer_b = fi[s] - bi[s] >= cap[s]
        for kind, idx, table in (("F", fi[s], fwd), ("B", bi[s], bwd)):
            if idx >= total or (kind == "B" and bi[s] >= fi[s]):
                continue
            dep = _dependency(table[idx], s, pp, vpp)
            if dep is not None and dep not in done:
                continue
            start = max(free[s], done[dep] if dep is not None else 0.0)
            pref = 0 if (kind == "B") == prefer_b else 1
            heapq.heappush(heap, (start, pref, s, version[s], kind))

    for s in range(pp):
        push(s)
    while heap:
        start, _, s, ver, kind = heapq.heappop(heap)
        if ver != version[s]:
            continue
        if kind == "F":
            op, fi[s] = fwd[fi[s]], fi[s] + 1
        else:
            op, bi[s] = bwd[bi[s]], bi[s] + 1
        free[s] = start + (f if kind == "F" else b)
        done[(kind, op.mb, op.chunk * pp + s)] = free[s]
        orders[s].append(op)
        starts[s].append(start)
        for t in {s, (s + 1) % pp, (s - 1) % pp}:
            push(t)
    return orders, starts


def schedule(
    pp: int, vpp: int, microbatches: int, f: float, b: float
) -> tuple[list[list[_Op]], list[list[float]]]:
    """(order, start times) of every stage's ops; ``f``, ``b`` are op durations (any unit).

    The 1F1B / interleaved 1F1B order of :func:`stage_order`; where that deadlocks (interleaved
    with a number of micro-batches that is not a multiple of ``pp``), the work-conserving
    :func:`_greedy_schedule`.
    """
    vpp = max(vpp, 1)
    orders = [stage_order(s, pp, vpp, microbatches) for s in range(pp)]
    starts = run_schedule(orders, pp, vpp, f, b)
    if starts is not None:
        return orders, starts
    return _greedy_schedule(pp, vpp, microbatches, f, b)


# ---- per-op content --------------------------------------------------------------------------


def _tp_name(layout: Layout) -> str:
    if layout.sequence_parallel:
        return "all-gather + reduce-scatter tp (exposed)"
    return "allreduce tp (exposed)"


def _op_segments(
    kind: str, per_mb_us: dict[str, float], vpp: int, layout: Layout
) -> list[_Segment]:
    """The slices of one forward or backward op of one chunk, in time order."""

    def share(cat: str) -> float:
        fwd = FORWARD_SHARE.get(cat, 0.0)
        if cat == "dp_comm":
            fwd = 1.0 / 3.0 if layout.zero >= 3 else 0.0
        return per_mb_us.get(cat, 0.0) * (fwd if kind == "F" else 1.0 - fwd) / vpp

    if kind == "F":
        plan = [
            ("dp_comm", "dp_comm", "all-gather params (ZeRO-3)"),
            ("compute", "compute_memory_bound", "memory-bound (norms, activations, residual)"),
            ("compute", "compute_gemm", "gemm"),
            ("cp_comm", "cp_comm", "ring send/recv K,V cp (exposed)"),
            ("compute", "compute_attention", "attention"),
            ("tp_comm", "tp_comm", _tp_name(layout)),
            ("ep_comm", "ep_comm", "all-to-all ep (dispatch + combine)"),
            ("compute", "compute_logits_loss", "logits + loss"),
            ("compute", "host_overhead", "waiting for the host (launch-bound)"),
            ("compute", "activation_offload", "waiting for activation offload to host"),
        ]
    else:
        dp_name = (
            "all-gather params + reduce-scatter grads (ZeRO-3)"
            if layout.zero >= 3
            else "reduce-scatter grads (ZeRO-2)"
        )
        plan = [
            ("compute", "recompute", "recompute forward"),
            ("compute", "compute_logits_loss", "logits + loss backward"),
            ("ep_comm", "ep_comm", "all-to-all ep (dispatch + combine) backward"),
            ("tp_comm", "tp_comm", _tp_name(layout).replace(" (exposed)", " backward (exposed)")),
            ("compute", "compute_attention", "attention backward"),
            ("cp_comm", "cp_comm", "ring send/recv K,V,dK,dV cp (exposed)"),
            ("compute", "compute_gemm", "gemm backward"),
            ("compute", "compute_memory_bound", "memory-bound backward"),
            ("compute", "host_overhead", "waiting for the host (launch-bound) backward"),
            ("dp_comm", "dp_comm", dp_name),
        ]
    return [_Segment(t, c, n, share(c)) for t, c, n in plan if share(c) > 0.0]


class _Events:
    """Accumulates Chrome trace events; times in microseconds."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.used: dict[int, set[str]] = {}

    def slice(
        self,
        pid: int,
        thread: str,
        name: str,
        cat: str,
        ts: float,
        dur: float,
        args: dict[str, Any] | None = None,
    ) -> None:
        """One complete ("X") event."""
        if dur <= 0.0:
            return
        event: dict[str, Any] = {
            "name": name,
            "cat": cat,
            "ph": "X",
            "pid": pid,
            "tid": TID[thread],
            "ts": ts,
            "dur": dur,
        }
        if args:
            event["args"] = args
        self.events.append(event)
        self.used.setdefault(pid, set()).add(thread)

    def metadata(self, pp: int) -> list[dict[str, Any]]:
        """process_name / thread_name (and sort index) events for the stages and threads."""
        out: list[dict[str, Any]] = []
        for pid in range(pp):
            out += [
                {
                    "name": "process_name",
                    "ph": "M",
                    "ts": 0,
                    "pid": pid,
                    "tid": 0,
                    "args": {"name": f"stage {pid}"},
                },
                {
                    "name": "process_sort_index",
                    "ph": "M",
                    "ts": 0,
                    "pid": pid,
                    "tid": 0,
                    "args": {"sort_index": pid},
                },
            ]
            for thread in THREADS:
                if thread != "compute" and thread not in self.used.get(pid, set()):
                    continue
                tid = TID[thread]
                out += [
                    {
                        "name": "thread_name",
                        "ph": "M",
                        "ts": 0,
                        "pid": pid,
                        "tid": tid,
                        "args": {"name": thread},
                    },
                    {
                        "name": "thread_sort_index",
                        "ph": "M",
                        "ts": 0,
                        "pid": pid,
                        "tid": tid,
                        "args": {"sort_index": tid},
                    },
                ]
        return out


def _emit_op(
    ev: _Events,
    pid: int,
    op: _Op,
    start_us: float,
    segments: list[_Segment],
    pp_us: float,
    vpp: int,
    last_virtual_stage: bool,
    first_virtual_stage: bool,
) -> float:
    """Draw one op from ``start_us``; return its end (after the pipeline send), microseconds."""
    label = f"{op.kind} mb{op.mb}" + (f" chunk{op.chunk}" if vpp > 1 else "")
    cursor = start_us
    for seg in segments:
        ev.slice(pid, seg.thread, seg.name, seg.category, cursor, seg.dur_us, {"microbatch": op.mb})
        cursor += seg.dur_us
    ev.slice(
        pid,
        "compute",
        label,
        "forward" if op.kind == "F" else "backward",
        start_us,
        cursor - start_us,
        {"microbatch": op.mb, "chunk": op.chunk},
    )
    if pp_us > 0.0:
        if op.kind == "F":
            name = "recv activations" if last_virtual_stage else "send activations"
        else:
            name = "recv gradients" if first_virtual_stage else "send gradients"
        ev.slice(pid, "pp_comm", name, "pp_comm", cursor, pp_us, {"microbatch": op.mb})
        cursor += pp_us
    return cursor


def _dp_step_name(layout: Layout) -> str:
    return "all-reduce grads" if layout.zero == 0 else "reduce-scatter grads + all-gather params"


def build_timeline(report: StepReport, layout: Layout, training: Training) -> dict[str, Any]:
    """The simulated step of ``report`` as a Chrome trace dict (times in microseconds).

    On every stage the events span ``report.step_time_s`` and the ``X`` slices whose ``cat``
    is a planner time category sum to ``report.time_breakdown_s`` (see the module docstring for
    the schedule and the forward/backward split). ``otherData`` records the step time, the
    micro-batch count, the schedule and ``bottleneck_pid``.
    """
    m = max(report.microbatches, 1)
    pp, vpp = layout.pp, layout.virtual_stages
    ops = 2 * pp * vpp * m
    if ops > MAX_TRACE_OPS:
        raise PlannerError(
            "--trace",
            f"the step has {ops:,} forward/backward ops (pp {pp} x vpp {vpp} x {m:,} "
            "micro-batches x 2); a trace of it would not open in a viewer",
            f"at most {MAX_TRACE_OPS:,} ops: a larger micro-batch or fewer sequences per step",
        )
    bd = report.time_breakdown_s
    zero_mb = layout.zero >= 2
    per_mb_us = {c: bd.get(c, 0.0) * US_PER_S / m for c in PER_MICROBATCH}
    per_mb_us["dp_comm"] = bd.get("dp_comm", 0.0) * US_PER_S / m if zero_mb else 0.0
    dp_step_us = 0.0 if zero_mb else bd.get("dp_comm", 0.0) * US_PER_S
    bubble_us = bd.get("pipeline_bubble", 0.0) * US_PER_S
    optimizer_us = bd.get("optimizer", 0.0) * US_PER_S

    seg_f = _op_segments("F", per_mb_us, vpp, layout)
    seg_b = _op_segments("B", per_mb_us, vpp, layout)
    pp_f = per_mb_us["pp_comm"] * FORWARD_SHARE["pp_comm"] / vpp
    pp_b = per_mb_us["pp_comm"] * (1.0 - FORWARD_SHARE["pp_comm"]) / vpp
    f_us = sum(s.dur_us for s in seg_f) + pp_f
    b_us = sum(s.dur_us for s in seg_b) + pp_b
    orders, starts = schedule(pp, vpp, m, f_us, b_us)
    natural_end = max(
        (
            st[-1] + (f_us if od[-1].kind == "F" else b_us)
            for od, st in zip(orders, starts, strict=True)
        )
    )
    busy_us = m * vpp * (f_us + b_us)
    natural_idle = natural_end - busy_us
    scale = bubble_us / natural_idle if natural_idle > 0.0 else 0.0
    lead_us = bubble_us if natural_idle <= 0.0 else 0.0  # no idle to scale: bubble up front

    ev = _Events()
    drain_end_us = busy_us + bubble_us  # every stage's last op (plus trailing idle) ends here
    for s in range(pp):
        cursor = 0.0
        if lead_us > 0.0:
            ev.slice(s, "compute", "bubble", "pipeline_bubble", 0.0, lead_us, {"phase": "warm-up"})
            cursor = lead_us
        prev_natural_end = 0.0
        last_b: tuple[float, float] = (0.0, 0.0)
        for i, (op, natural_start) in enumerate(zip(orders[s], starts[s], strict=True)):
            gap = (natural_start - prev_natural_end) * scale
            if gap > 0.0:
                phase = "warm-up" if i == 0 else "steady"
                ev.slice(s, "compute", "bubble", "pipeline_bubble", cursor, gap, {"phase": phase})
                cursor += gap
            vs = op.chunk * pp + s
            start = cursor
            cursor = _emit_op(
                ev,
                s,
                op,
                cursor,
                seg_f if op.kind == "F" else seg_b,
                pp_f if op.kind == "F" else pp_b,
                vpp,
                vs == pp * vpp - 1,
                vs == 0,
            )
            if op.kind == "B":
                last_b = (start, cursor)
            prev_natural_end = natural_start + (f_us if op.kind == "F" else b_us)
        trailing = drain_end_us - cursor
        if trailing > ROUNDING * drain_end_us:  # not float rounding of the sums
            ev.slice(
                s, "compute", "bubble", "pipeline_bubble", cursor, trailing, {"phase": "cool-down"}
            )
        cursor = max(cursor, drain_end_us)
        if not zero_mb and layout.overlap_dp_grad_reduce and layout.dp * layout.cp > 1:
            # the bucketed reduction runs behind the last backward; only its tail is exposed
            ev.slice(
                s,
                "dp_comm",
                _dp_step_name(layout) + " (overlapped with backward)",
                OVERLAPPED_DP,
                last_b[0],
                last_b[1] - last_b[0],
                {"note": "hidden behind the backward; not part of the step time"},
            )
        ev.slice(s, "dp_comm", _dp_step_name(layout) + " (exposed)", "dp_comm", cursor, dp_step_us)
        cursor += dp_step_us
        ev.slice(s, "compute", "optimizer step", "optimizer", cursor, optimizer_us)

    return {
        "traceEvents": ev.metadata(pp) + ev.events,
        "displayTimeUnit": "ms",
        "otherData": {
            "generator": "scaling-planner timeline",
            "step_time_s": report.step_time_s,
            "microbatches": m,
            "pipeline_stages": pp,
            "virtual_stages": vpp,
            "schedule": layout.pipeline_schedule if pp > 1 else "none",
            "zero": layout.zero,
            "tokens_per_microbatch": training.micro_batch * training.seq_len,
            "bottleneck_pid": 0,
            "categories": list(TIME_CATEGORIES),
            "note": "every stage is drawn with the bottleneck stage's per-micro-batch costs; "
            "slice cat = planner time category; bubble slices sum to pipeline_bubble",
        },
    }


def write_trace(
    report: StepReport,
    model: ModelSpec,
    layout: Layout,
    training: Training,
    path: str | Path,
) -> Path:
    """Write :func:`build_timeline` of ``report`` to ``path`` as JSON; return the path.

    Open it in https://ui.perfetto.dev or chrome://tracing. Raises PlannerError (field
    ``--trace``) when the file cannot be written.
    """
    trace = build_timeline(report, layout, training)
    trace["otherData"]["model"] = model.name
    p = Path(path)
    try:
        p.write_text(json.dumps(trace, separators=(",", ":")) + "\n")
    except OSError as exc:
        raise PlannerError("--trace", f"cannot write {p}: {exc.strerror or exc}") from None
    return p


__all__ = ["THREADS", "build_timeline", "schedule", "stage_order", "write_trace"]
