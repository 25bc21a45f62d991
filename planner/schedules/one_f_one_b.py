"""1F1B and interleaved 1F1B: one backward pass per forward, weight gradient included.

Bubble (Narayanan et al. 2021, section 2.2): with m micro-batches, v chunks per rank and
per-rank micro-batch times t_s, a step takes m max_s t_s + (sum_s t_s - max_s t_s) / v, i.e.
(p - 1) / (v m) of the steady state for equal ranks. Activations in flight on the first rank:
min(m, p) micro-batches (section 2.2.1); interleaved, Megatron-LM warms up
(p - 1) * 2 + (v - 1) * p chunks on rank 0, so p (v + 1) - 1 chunks of L / (p v) layers are
held. The last rank is counted as holding one chunk (the planner's memory model keeps its
logits and one micro-batch there).
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING, ClassVar

from planner.schedules.base import Durations, Op, Schedule, StageTimes, Violation
from planner.schedules.run import dependency, run_orders

if TYPE_CHECKING:
    from planner.specs.layout import Layout, Training
    from planner.specs.model import ModelSpec


def _loop_bubble_s(stages: StageTimes, chunks: int) -> float:
    # the expression of planner/costs/pipeline.py before schedules were objects: kept bit for bit
    return max(stages.sum_s - stages.max_s, 0.0) / max(chunks, 1)


def _tables(pp: int, chunks: int, microbatches: int) -> tuple[list[Op], list[Op]]:
    """(forward, backward) op tables: micro-batches in groups of ``pp`` go through every chunk
    before the next group (Megatron-LM ``get_schedule_table``); backwards visit chunks in
    reverse."""
    table = [
        (mb, c)
        for start in range(0, microbatches, pp)
        for c in range(chunks)
        for mb in range(start, min(start + pp, microbatches))
    ]
    return [Op("F", mb, c) for mb, c in table], [Op("B", mb, chunks - 1 - c) for mb, c in table]


def warmup_forwards(rank: int, pp: int, chunks: int, total: int) -> int:
    """Forwards ``rank`` runs before its first backward (Megatron-LM)."""
    if chunks == 1:
        return min(pp - rank - 1, total)
    return min((pp - rank - 1) * 2 + (chunks - 1) * pp, total)


def rank_order(rank: int, pp: int, chunks: int, microbatches: int) -> list[Op]:
    """Warm-up forwards, then one forward and one backward in turn, then the last backwards."""
    fwd, bwd = _tables(pp, chunks, microbatches)
    total = len(fwd)
    warm = warmup_forwards(rank, pp, chunks, total)
    order = fwd[:warm]
    for i in range(total - warm):
        order += [fwd[warm + i], bwd[i]]
    return order + bwd[total - warm :]


class OneF1B(Schedule):
    """1F1B (PipeDream-Flush): ``pp - rank - 1`` warm-up forwards, then alternate."""

    name = "1f1b"
    title = "1F1B"
    reference = "Narayanan et al. 2021 (PipeDream-Flush), section 2.2"
    torchtitan = "1F1B"
    megatron: ClassVar[tuple[str, ...] | None] = ()
    megatron_note = "the default pipeline schedule"
    valid_vpp = "vpp 1 (vpp > 1 is schedule interleaved)"

    def vpp_error(self, vpp: int | None) -> str | None:
        if (vpp or 1) > 1:
            return (
                f"schedule '1f1b' runs one model chunk per pipeline rank, but vpp = {vpp} "
                "(vpp > 1 is schedule 'interleaved')"
            )
        return None

    def bubble_s(self, stages: StageTimes, microbatches: int, chunks: int) -> float:
        return _loop_bubble_s(stages, chunks)

    def peak_chunks(self, rank: int, pp: int, chunks: int, microbatches: int) -> int:
        # rank r warms up with pp - r - 1 forwards, then holds one more (Megatron-LM
        # forward_backward_pipelining_without_interleaving: num_warmup_microbatches)
        return min(microbatches, pp - rank)

    def orders(self, pp: int, chunks: int, microbatches: int) -> list[list[Op]]:
        return [rank_order(r, pp, 1, microbatches) for r in range(pp)]


class Interleaved1F1B(OneF1B):
    """Interleaved 1F1B with ``vpp`` chunks per rank in Megatron-LM's order."""

    name = "interleaved"
    title = "interleaved 1F1B"
    reference = "Narayanan et al. 2021, section 2.2 (interleaved schedule)"
    torchtitan = "Interleaved1F1B"
    megatron = ("--num-layers-per-virtual-pipeline-stage",)
    megatron_note = (
        "--num-layers-per-virtual-pipeline-stage L/(pp vpp) (or "
        "--virtual-pipeline-model-parallel-size vpp)"
    )
    valid_vpp = "vpp >= 2"

    def vpp_error(self, vpp: int | None) -> str | None:
        if (vpp or 1) < 2:
            return "schedule 'interleaved' needs vpp >= 2"
        return None

    def violation(self, model: ModelSpec, layout: Layout, training: Training) -> Violation | None:
        found = super().violation(model, layout, training)
        if found is None and layout.pp == 1:
            return ("layout.vpp", "virtual pipeline stages need pp > 1", "vpp=1 or pp>1")
        return found

    def peak_chunks(self, rank: int, pp: int, chunks: int, microbatches: int) -> int:
        # Megatron-LM forward_backward_pipelining_with_interleaving: (pp - r - 1) * 2 +
        # (chunks - 1) * pp warm-up forward chunks, then one more in flight (rank 0:
        # pp * (chunks + 1) - 1)
        return min(microbatches * chunks, 2 * (pp - rank - 1) + (chunks - 1) * pp + 1)

    def orders(self, pp: int, chunks: int, microbatches: int) -> list[list[Op]]:
        return [rank_order(r, pp, chunks, microbatches) for r in range(pp)]

    def timed(
        self, pp: int, chunks: int, microbatches: int, duration: Durations
    ) -> tuple[list[list[Op]], list[list[float]]]:
        """Megatron-LM's order; where it deadlocks (a number of micro-batches that is not a
        multiple of ``pp``), the work-conserving order of :func:`greedy_interleaved`."""
        orders = self.orders(pp, chunks, microbatches)
        starts = run_orders(orders, self, pp, chunks, duration)
        if starts is not None:
            return orders, starts
        return greedy_interleaved(self, pp, chunks, microbatches, duration)


def greedy_interleaved(
    sched: Schedule, pp: int, chunks: int, microbatches: int, duration: Durations
) -> tuple[list[list[Op]], list[list[float]]]:
    """A work-conserving interleaved 1F1B: ops are committed in order of start time; a free
    rank runs its next forward or next backward (table order), preferring the backward once it
    holds as many chunks in flight as the warm-up allows, and never idles while one of them can
    run. Cannot deadlock (the earliest pending forward, then backward, is always at the head of
    its rank's queue)."""
    fwd, bwd = _tables(pp, chunks, microbatches)
    total = len(fwd)
    last_vs = pp * chunks - 1
    cap = [warmup_forwards(r, pp, chunks, total) + 1 for r in range(pp)]
    fi, bi = [0] * pp, [0] * pp
    free = [0.0] * pp
    done: dict[tuple[str, int, int], float] = {}
    orders: list[list[Op]] = [[] for _ in range(pp)]
    starts: list[list[float]] = [[] for _ in range(pp)]
    version = [0] * pp
    heap: list[tuple[float, int, int, int, str]] = []

    def push(r: int) -> None:
        version[r] += 1
        prefer_b = fi[r] - bi[r] >= cap[r]
        for kind, idx, table in (("F", fi[r], fwd), ("B", bi[r], bwd)):
            if idx >= total or (kind == "B" and bi[r] >= fi[r]):
                continue
            op = table[idx]
            dep = dependency(op, sched.virtual_stage(r, op.chunk, pp), last_vs)
            if dep is not None and dep not in done:
                continue
            start = max(free[r], done[dep]) if dep is not None else free[r]
            pref = 0 if (kind == "B") == prefer_b else 1
            heapq.heappush(heap, (start, pref, r, version[r], kind))

    for r in range(pp):
        push(r)
    while heap:
        start, _, r, ver, kind = heapq.heappop(heap)
        if ver != version[r]:
            continue
        if kind == "F":
            op, fi[r] = fwd[fi[r]], fi[r] + 1
        else:
            op, bi[r] = bwd[bi[r]], bi[r] + 1
        free[r] = start + duration(r, op)
        done[("F" if kind == "F" else "G", op.mb, sched.virtual_stage(r, op.chunk, pp))] = free[r]
        orders[r].append(op)
        starts[r].append(start)
        for t in {r, (r + 1) % pp, (r - 1) % pp}:
            push(t)
    return orders, starts
