"""Run op orders against their dependencies: when does every op start.

An F waits for the previous virtual stage's F of the same micro-batch; an I or B for the next
virtual stage's I or B (on the last virtual stage, for its own F); a W for its own I. Each rank
runs its order in sequence, an op starting when both the rank and its input are free.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from planner.schedules.base import Durations, Op

if TYPE_CHECKING:
    from planner.schedules.base import Schedule

_DONE_KEY = {"F": "F", "B": "G", "I": "G", "W": "W"}  # G: the input gradient is out


def dependency(op: Op, vs: int, last_vs: int) -> tuple[str, int, int] | None:
    """(done key, micro-batch, virtual stage) that ``op`` on virtual stage ``vs`` waits for."""
    if op.kind == "F":
        return ("F", op.mb, vs - 1) if vs > 0 else None
    if op.kind == "W":
        return ("G", op.mb, vs)
    return ("G", op.mb, vs + 1) if vs < last_vs else ("F", op.mb, vs)


def run_orders(
    orders: Sequence[Sequence[Op]],
    schedule: Schedule,
    pp: int,
    chunks: int,
    duration: Durations,
) -> list[list[float]] | None:
    """Start time of every op of ``orders`` (one list per rank); None if they deadlock."""
    last_vs = pp * chunks - 1
    vstage = [[schedule.virtual_stage(r, c, pp) for c in range(chunks)] for r in range(pp)]
    done: dict[tuple[str, int, int], float] = {}
    starts: list[list[float]] = [[] for _ in range(pp)]
    free = [0.0] * pp
    ptr = [0] * pp
    remaining = sum(len(o) for o in orders)
    while remaining:
        progressed = False
        for r in range(pp):
            order = orders[r]
            while ptr[r] < len(order):
                op = order[ptr[r]]
                vs = vstage[r][op.chunk]
                dep = dependency(op, vs, last_vs)
                if dep is not None and dep not in done:
                    break
                start = max(free[r], done[dep]) if dep is not None else free[r]
                end = start + duration(r, op)
                done[(_DONE_KEY[op.kind], op.mb, vs)] = end
                if op.kind == "B":
                    done[("W", op.mb, vs)] = end
                starts[r].append(start)
                free[r] = end
                ptr[r] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            return None
    return starts


def peak_in_flight(order: Sequence[Op]) -> int:
    """Most micro-batch chunks whose forward has run and whose weight gradient has not."""
    held = peak = 0
    for op in order:
        if op.kind == "F":
            held += 1
            peak = max(peak, held)
        elif op.kind in ("B", "W"):
            held -= 1
    return peak
