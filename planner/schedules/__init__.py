"""Pipeline schedules as objects, one per ``Layout.schedule`` value.

Each :class:`Schedule` knows its bubble (given per-rank forward, input-gradient and
weight-gradient times), the activations it keeps in flight, its op order per rank, the name
torchtitan / torch.distributed.pipelining give it and whether Megatron-LM runs it. The cost
model (planner/costs/pipeline.py, planner/costs/memory.py), the step plan, the Chrome trace,
the app chart, legality and the exports all ask these objects.

>>> from planner.specs.layout import Layout
>>> schedule_of(Layout(pp=4, vpp=2)).name  # no schedule named: interleaved iff vpp > 1
'interleaved'
>>> SCHEDULES["zbv"].torchtitan
'ZBVZeroBubble'
>>> SCHEDULES["zb-h1"].megatron is None  # not in Megatron-LM
True
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from planner.schedules.base import (
    OP_KINDS,
    Op,
    PassTimes,
    Schedule,
    StageTimes,
    Violation,
)
from planner.schedules.one_f_one_b import Interleaved1F1B, OneF1B
from planner.schedules.run import peak_in_flight, run_orders
from planner.schedules.v_shape import ZBV, DualPipeV
from planner.schedules.zero_bubble import ZBH1, ZBH2, InterleavedZB

if TYPE_CHECKING:
    from planner.specs.layout import Layout, Training
    from planner.specs.model import ModelSpec

SCHEDULES: dict[str, Schedule] = {
    s.name: s
    for s in (OneF1B(), Interleaved1F1B(), ZBH1(), ZBH2(), InterleavedZB(), ZBV(), DualPipeV())
}


def default_schedule_name(vpp: int | None) -> str:
    """The schedule a layout that names none runs: interleaved iff vpp > 1."""
    return "interleaved" if (vpp or 1) > 1 else "1f1b"


def schedule_of(layout: Layout) -> Schedule:
    """The Schedule object of ``layout`` (its ``schedule``, else the default for its vpp)."""
    return SCHEDULES[layout.schedule or default_schedule_name(layout.vpp)]


def vpp_error(schedule: str | None, vpp: int | None) -> str | None:
    """Why ``vpp`` cannot go with ``schedule`` (None: the default schedule), or None.

    The Layout validator's rule: ``Layout(pp=4, vpp=2, schedule="1f1b")`` is an error, not a
    synonym of ``schedule="interleaved"``."""
    if schedule is None:
        return None
    return SCHEDULES[schedule].vpp_error(vpp)


def schedule_violation(model: ModelSpec, layout: Layout, training: Training) -> Violation | None:
    """(field, message, valid values) when ``layout``'s schedule cannot run this model and
    batch, else None: the chunk count (1f1b, zb-h1, zb-h2: vpp 1; interleaved, interleaved-zb:
    vpp >= 2 and pp > 1; zbv, dualpipev: vpp 2), a pipeline to schedule (pp > 1 for the
    zero-bubble and V schedules), the layers of a V placement (layers % (2 pp) == 0) and the
    micro-batches the warm-up needs (zb-h1, interleaved-zb, zbv: pp; zb-h2: 2 pp - 1;
    dualpipev: 2 pp)."""
    return schedule_of(layout).violation(model, layout, training)


__all__ = [
    "OP_KINDS",
    "SCHEDULES",
    "DualPipeV",
    "Interleaved1F1B",
    "InterleavedZB",
    "OneF1B",
    "Op",
    "PassTimes",
    "Schedule",
    "StageTimes",
    "Violation",
    "ZBH1",
    "ZBH2",
    "ZBV",
    "default_schedule_name",
    "peak_in_flight",
    "run_orders",
    "schedule_of",
    "schedule_violation",
    "vpp_error",
]
