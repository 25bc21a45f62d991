"""The simulated training step as a Chrome trace (Perfetto / chrome://tracing timeline).

:func:`build_timeline` draws a report's :class:`~planner.plan.StepPlan` in the Chrome Trace
Event Format: ``{"traceEvents": [...], "displayTimeUnit": "ms"}`` with complete events
(``"ph": "X"``, ``ts`` and ``dur`` in microseconds) and ``process_name`` / ``thread_name``
metadata events.

* one process per pipeline rank (``pid`` = rank), one thread per stream: ``compute`` (tid 0),
  ``tp_comm``, ``cp_comm``, ``ep_comm``, ``pp_comm``, ``dp_comm`` (tids 1-5), so overlapping
  work never shares a thread and slices on one thread nest strictly;
* the schedule's op order (planner/schedules/): ``F mb3`` forward, ``B mb3`` full backward,
  ``I mb3`` input-gradient and ``W mb3`` weight-gradient backward (zero-bubble and V
  schedules), `` chunk1`` appended with two or more chunks per rank; each op's child slices
  are its compute categories and its *exposed* TP / CP / EP (and ZeRO-2/3 DP) collectives;
  a ``send activations`` / ``send gradients`` slice on ``pp_comm`` after each op;
* ``bubble`` slices wherever the rank idles; the data-parallel gradient reduction (ZeRO 0/1)
  drawn overlapping the last backward (category ``dp_comm_overlapped``, not part of the step
  time) and its exposed part after the pipeline drains; then the optimizer step.

Every rank is drawn with its own costs (the plan's per-rank, per-chunk F / I / W seconds): the
first rank with its embedding, the last with its logits and loss. Start times come from running
the order on those costs; each rank's idle gaps are then scaled so that its ops and bubbles
span the report's pipeline time. Under a schedule that tiles steps (ZB-H2, ZB-V, DualPipe-V: each rank
starts its next step when done, Qi et al.'s optimizer post-validation) a rank starts at its
natural offset and its own idle fills its window, so its events span the step from there. Hence on every rank the trace spans ``step_time_s``, and on
the bottleneck rank (``otherData.bottleneck_pid``) the slices of each category (the event's
``cat``) sum to ``time_breakdown_s[cat]``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planner.errors import PlannerError
from planner.plan import StepPlan
from planner.report import TIME_CATEGORIES, StepReport
from planner.schedules import Op
from planner.specs.layout import Layout, Training
from planner.specs.model import ModelSpec

THREADS = ("compute", "tp_comm", "cp_comm", "ep_comm", "pp_comm", "dp_comm")
TID = {name: i for i, name in enumerate(THREADS)}
US_PER_S = 1e6
ROUNDING = 1e-12  # relative: shorter idle than this is float rounding, not a bubble
OVERLAPPED_DP = "dp_comm_overlapped"  # drawn for context; not part of the step time
# forward + backward slices a trace may hold (a few hundred MB of JSON at most)
MAX_TRACE_OPS = 1_000_000
OP_CATEGORY = {"F": "forward", "B": "backward", "I": "backward_input", "W": "backward_weight"}


@dataclass(frozen=True, slots=True)
class _Segment:
    """A piece of an op, microseconds long, on one thread, of one planner category."""

    thread: str
    category: str
    name: str
    dur_us: float


def _tp_name(layout: Layout) -> str:
    if layout.sequence_parallel:
        return "all-gather + reduce-scatter tp (exposed)"
    return "allreduce tp (exposed)"


def _forward_plan(layout: Layout) -> list[tuple[str, str, str]]:
    return [
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


def _backward_plan(layout: Layout, weight_name: str) -> list[tuple[str, str, str]]:
    dp_name = (
        "all-gather params + reduce-scatter grads (ZeRO-3)"
        if layout.zero >= 3
        else "reduce-scatter grads (ZeRO-2)"
    )
    return [
        ("compute", "recompute", "recompute forward"),
        ("compute", "compute_logits_loss", "logits + loss backward"),
        ("ep_comm", "ep_comm", "all-to-all ep (dispatch + combine) backward"),
        ("tp_comm", "tp_comm", _tp_name(layout).replace(" (exposed)", " backward (exposed)")),
        ("compute", "compute_attention", "attention backward"),
        ("cp_comm", "cp_comm", "ring send/recv K,V,dK,dV cp (exposed)"),
        ("compute", "compute_gemm", weight_name),
        ("compute", "compute_memory_bound", "memory-bound backward"),
        ("compute", "host_overhead", "waiting for the host (launch-bound) backward"),
        ("dp_comm", "dp_comm", dp_name),
    ]


def _segments(kind: str, costs_s: dict[str, float], layout: Layout) -> list[_Segment]:
    """The slices of one op in time order (its pipeline send excluded)."""
    if kind == "F":
        plan = _forward_plan(layout)
    elif kind == "W":
        plan = [
            ("compute", "compute_gemm", "gemm weight gradient"),
            ("dp_comm", "dp_comm", "reduce-scatter grads (ZeRO-2)"),
        ]
    else:
        plan = _backward_plan(layout, "gemm backward" if kind == "B" else "gemm input gradient")
    return [
        _Segment(t, c, n, costs_s.get(c, 0.0) * US_PER_S)
        for t, c, n in plan
        if costs_s.get(c, 0.0) > 0.0
    ]


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
        """process_name / thread_name (and sort index) events for the ranks and threads."""
        out: list[dict[str, Any]] = []

        def meta(name: str, pid: int, tid: int, args: dict[str, Any]) -> dict[str, Any]:
            return {"name": name, "ph": "M", "ts": 0, "pid": pid, "tid": tid, "args": args}

        for pid in range(pp):
            out += [
                meta("process_name", pid, 0, {"name": f"stage {pid}"}),
                meta("process_sort_index", pid, 0, {"sort_index": pid}),
            ]
            for thread in THREADS:
                if thread != "compute" and thread not in self.used.get(pid, set()):
                    continue
                tid = TID[thread]
                out += [
                    meta("thread_name", pid, tid, {"name": thread}),
                    meta("thread_sort_index", pid, tid, {"sort_index": tid}),
                ]
        return out


def _send_name(plan: StepPlan, rank: int, op: Op) -> str:
    vs = plan.schedule_object.virtual_stage(rank, op.chunk, plan.pp)
    if op.kind == "F":
        return "recv activations" if vs == plan.pp * plan.chunks - 1 else "send activations"
    return "recv gradients" if vs == 0 else "send gradients"


def _emit_op(
    ev: _Events, plan: StepPlan, rank: int, op: Op, start_us: float, layout: Layout
) -> float:
    """Draw one op from ``start_us``; return its end (after the pipeline send), microseconds."""
    costs = plan.op_costs(rank, op)
    label = f"{op.kind} mb{op.mb}" + (f" chunk{op.chunk}" if plan.chunks > 1 else "")
    cursor = start_us
    for seg in _segments(op.kind, costs, layout):
        ev.slice(
            rank, seg.thread, seg.name, seg.category, cursor, seg.dur_us, {"microbatch": op.mb}
        )
        cursor += seg.dur_us
    ev.slice(
        rank,
        "compute",
        label,
        OP_CATEGORY[op.kind],
        start_us,
        cursor - start_us,
        {"microbatch": op.mb, "chunk": op.chunk},
    )
    send_us = costs.get("pp_comm", 0.0) * US_PER_S
    if send_us > 0.0:
        name = _send_name(plan, rank, op)
        ev.slice(rank, "pp_comm", name, "pp_comm", cursor, send_us, {"microbatch": op.mb})
        cursor += send_us
    return cursor


def _dp_step_name(layout: Layout) -> str:
    if layout.zero == 2:
        return "all-gather params (ZeRO-2)"  # its reduce-scatter runs every micro-batch
    return "all-reduce grads" if layout.zero == 0 else "reduce-scatter grads + all-gather params"


def _check_size(plan: StepPlan) -> None:
    per_chunk = 3 if plan.schedule_object.splits_backward else 2
    ops = per_chunk * plan.pp * plan.chunks * plan.microbatches
    if ops > MAX_TRACE_OPS:
        raise PlannerError(
            "--trace",
            f"the step has {ops:,} ops (pp {plan.pp} x {plan.chunks} chunks x "
            f"{plan.microbatches:,} micro-batches x {per_chunk} passes); a trace of it would "
            "not open in a viewer",
            f"at most {MAX_TRACE_OPS:,} ops: a larger micro-batch or fewer sequences per step",
        )


def _idle_scale(plan: StepPlan, durations: list[list[float]], natural_end: float) -> float:
    """The factor on every natural idle gap that makes the bottleneck rank's idle the
    report's bubble (1 whenever the analytic bubble is what the op order gives)."""
    natural_idle = natural_end - sum(durations[plan.bottleneck_rank])
    return plan.bubble_s / natural_idle if natural_idle > 0.0 else 0.0


def _draw_rank(
    ev: _Events,
    plan: StepPlan,
    rank: int,
    timed: tuple[list[Op], list[float], list[float]],
    scale: float,
    layout: Layout,
) -> tuple[float, float, tuple[float, float]]:
    """Draw one rank's ops with its natural idle gaps times ``scale`` and idle up to the
    report's pipeline time. Returns the rank's start and the end of its pipeline part, and the
    span of its last backward, microseconds.

    A schedule that tiles steps (``tiles_steps``: each rank starts its next step when done)
    starts the rank at its natural offset, fitting its own idle inside its window."""
    order, starts, durs = timed
    pipe_us = (plan.step_time_s - plan.dp_step_s - plan.optimizer_s) * US_PER_S
    idle_target = max(pipe_us - sum(durs) * US_PER_S, 0.0)
    if idle_target <= ROUNDING * pipe_us:
        idle_target = 0.0
    offset = starts[0] * US_PER_S if plan.schedule_object.tiles_steps and starts else 0.0
    ends = [0.0 if offset else None] + [st + du for st, du in zip(starts, durs, strict=True)]
    gaps = [max(0.0, st - (ends[i] if ends[i] is not None else 0.0)) for i, st in enumerate(starts)]
    if offset:
        gaps[0] = 0.0
        scale = idle_target / (sum(gaps) * US_PER_S) if sum(gaps) > 0.0 else 0.0
    elif scale * sum(gaps) * US_PER_S > idle_target * (1.0 + 1e-9):
        # the common factor would push this rank past the step: fit its own gaps
        scale = idle_target / (sum(gaps) * US_PER_S)
    cursor = offset
    if sum(gaps) <= 0.0 and idle_target > 0.0 and not offset:  # no idle to scale: up front
        ev.slice(
            rank, "compute", "bubble", "pipeline_bubble", 0.0, idle_target, {"phase": "warm-up"}
        )
        cursor = idle_target
    last_b = (0.0, 0.0)
    for i, (op, gap_s) in enumerate(zip(order, gaps, strict=True)):
        gap = gap_s * US_PER_S * scale
        if gap > 0.0:
            phase = "warm-up" if i == 0 else "steady"
            ev.slice(rank, "compute", "bubble", "pipeline_bubble", cursor, gap, {"phase": phase})
            cursor += gap
        begin = cursor
        cursor = _emit_op(ev, plan, rank, op, cursor, layout)
        if op.kind in ("B", "W", "I"):
            last_b = (begin, cursor)
    end = offset + pipe_us
    trailing = end - cursor
    if trailing > ROUNDING * pipe_us:  # not float rounding of the sums
        phase = {"phase": "cool-down"}
        ev.slice(rank, "compute", "bubble", "pipeline_bubble", cursor, trailing, phase)
    return offset, max(cursor, end), last_b


def build_timeline(report: StepReport, layout: Layout, training: Training) -> dict[str, Any]:
    """The simulated step of ``report`` (its plan) as a Chrome trace dict (times in
    microseconds).

    On every rank the events span ``report.step_time_s``; on the bottleneck rank the ``X``
    slices whose ``cat`` is a planner time category sum to ``report.time_breakdown_s``.
    ``otherData`` records the step time, the micro-batch count, the schedule and
    ``bottleneck_pid``.
    """
    plan = report.plan
    if plan is None:
        raise PlannerError("--trace", "the report has no step plan", "a report of simulate()")
    _check_size(plan)
    orders, starts, durations = plan.timed_ops()
    natural_end = max(
        (st[-1] + du[-1] for st, du in zip(starts, durations, strict=True) if st), default=0.0
    )
    scale = _idle_scale(plan, durations, natural_end)
    ev = _Events()
    dp_step_us = plan.dp_step_s * US_PER_S
    optimizer_us = plan.optimizer_s * US_PER_S
    for r in range(plan.pp):
        timed = (orders[r], starts[r], durations[r])
        _, cursor, last_b = _draw_rank(ev, plan, r, timed, scale, layout)
        if layout.zero < 2 and layout.overlap_dp_grad_reduce and layout.dp * layout.cp > 1:
            # the bucketed reduction runs behind the last backward; only its tail is exposed
            ev.slice(
                r,
                "dp_comm",
                _dp_step_name(layout) + " (overlapped with backward)",
                OVERLAPPED_DP,
                last_b[0],
                last_b[1] - last_b[0],
                {"note": "hidden behind the backward; not part of the step time"},
            )
        ev.slice(r, "dp_comm", _dp_step_name(layout) + " (exposed)", "dp_comm", cursor, dp_step_us)
        cursor += dp_step_us
        ev.slice(r, "compute", "optimizer step", "optimizer", cursor, optimizer_us)
    return {
        "traceEvents": ev.metadata(plan.pp) + ev.events,
        "displayTimeUnit": "ms",
        "otherData": {
            "generator": "scaling-planner timeline",
            "step_time_s": report.step_time_s,
            "microbatches": plan.microbatches,
            "pipeline_stages": plan.pp,
            "virtual_stages": plan.chunks,
            "schedule": plan.schedule if plan.pp > 1 else "none",
            "zero": layout.zero,
            "tokens_per_microbatch": training.micro_batch * training.seq_len,
            "bottleneck_pid": plan.bottleneck_rank,
            "categories": list(TIME_CATEGORIES),
            "note": "every rank is drawn with its own per-micro-batch costs; slice cat = "
            "planner time category; on bottleneck_pid the slices of each category sum to the "
            "report's breakdown",
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


__all__ = ["THREADS", "build_timeline", "write_trace"]
