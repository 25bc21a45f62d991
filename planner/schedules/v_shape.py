"""V-shaped schedules: two chunks per rank, rank r holding stages r and 2p - 1 - r.

The forward runs down the ranks and back up (the V), so rank 0 holds both the first chunk
(with the embedding) and the last (with the logits and the loss), and the turn at rank p - 1
needs no send. Orders follow torch.distributed.pipelining (``ScheduleZBVZeroBubble``,
``ScheduleDualPipeV``). Neither has a closed-form bubble for unequal F, I and W (PyTorch's
docstring: ZB-V has zero bubble only when T_F = T_B = T_W), so the bubble is what the op order
gives: the orders run on each rank's own chunk times (:func:`planner.schedules.run.run_orders`)
with at most 2p micro-batches, past which the bubble no longer changes (tested), and the bubble
is the longest rank's window less its work, as Qi et al. count it (their optimizer
post-validation lets the next step start on each rank as soon as it is done).
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

from planner.schedules.base import (
    Op,
    PassTimes,
    Schedule,
    StageTimes,
    Violation,
    enough_microbatches,
    needs_pipeline,
    v_split,
    windows_s,
)
from planner.schedules.run import run_orders

# deeper V pipelines are timed on this many ranks (the op-order run grows as ranks squared)
MAX_SIMULATED_RANKS = 32

if TYPE_CHECKING:
    from planner.specs.layout import Layout, Training
    from planner.specs.model import ModelSpec


def zbv_order(rank: int, pp: int, microbatches: int) -> list[Op]:
    """ZB-V (Qi et al. 2024 section 6; PyTorch ``ScheduleZBVZeroBubble``): 2(p - r) - 1
    forwards of chunk 0, r pairs of chunk-1 and chunk-0 forwards, p - r rounds of F I W on
    chunk 1, then F I W on each chunk in turn; the drain runs the input gradients first and
    the pending weight gradients last."""
    n = max(2 * pp - 1, microbatches)  # PyTorch pads to fill the V, then drops the padding
    order: list[Op] = []
    f = [0, 0]
    b = [0, 0]

    def fwd(c: int) -> None:
        order.append(Op("F", f[c], c))
        f[c] += 1

    def bwd(c: int, weight: bool = True) -> None:
        order.append(Op("I", b[c], c))
        if weight:
            order.append(Op("W", b[c], c))
        b[c] += 1

    for _ in range(2 * (pp - rank) - 1):
        fwd(0)
    for _ in range(rank):
        fwd(1)
        fwd(0)
    for _ in range(pp - rank):
        fwd(1)
        bwd(1)
    while f[1] < f[0] or f[0] < n:
        if f[0] < n:
            fwd(0)
        bwd(0)
        fwd(1)
        bwd(1)
    w = list(b)
    for _ in range(rank):
        bwd(0, weight=False)
        bwd(1, weight=False)
    for _ in range(pp - rank):
        bwd(0, weight=False)
        order.append(Op("W", w[0], 0))
        w[0] += 1
    order += [Op("W", mb, 1) for mb in range(w[1], b[1])]
    order += [Op("W", mb, 0) for mb in range(w[0], b[0])]
    return [op for op in order if op.mb < microbatches]


def dualpipev_order(rank: int, pp: int, microbatches: int) -> list[Op]:
    """DualPipe-V (DeepSeek-AI 2024, DualPipe cut in half; PyTorch ``ScheduleDualPipeV``).
    Its main phase overlaps the forward of one chunk with the full backward (B) of the other;
    here the pair is an F followed by a B (the planner hides the EP all-to-all in the layer
    costs when ``overlap_ep_comm`` is set). The last ranks' drain splits I and W."""
    order: list[Op] = []
    nxt: dict[tuple[int, str], int] = {}
    pending_w: list[tuple[int, int]] = []

    def add(c: int, kind: str) -> None:
        key = (c, "F" if kind == "F" else "I")
        mb = nxt.get(key, 0)
        order.append(Op(kind, mb, c))
        nxt[key] = mb + 1
        if kind == "I":
            pending_w.append((c, mb))

    def weight() -> None:
        if pending_w:
            c, mb = pending_w.pop(0)
            order.append(Op("W", mb, c))

    for _ in range((pp - rank - 1) * 2):
        add(0, "F")
    for _ in range(rank + 1):
        add(0, "F")
        add(1, "F")
    for _ in range(pp - rank - 1):
        add(1, "I")
        weight()
        add(1, "F")
    for _ in range(microbatches - 2 * pp + rank + 1):
        add(0, "F")
        add(1, "B")
        add(1, "F")
        add(0, "B")
    for _ in range(pp - rank - 1):
        add(1, "B")
        add(1, "F")
        add(0, "B")
    split = False
    for i in range(rank + 1):
        if i == (rank + 1) // 2 and rank % 2 == 1:
            split = True
        add(1, "I" if split else "B")
        if i == (rank + 1) // 2 and rank % 2 == 0:
            split = True
        add(0, "I" if split else "B")
    for _ in range(pp - rank - 1):
        weight()
        add(0, "I" if split else "B")
    for _ in range(rank + 1):
        weight()
    return order


class _VShape(Schedule):
    placement = "v"
    tiles_steps = True
    splits_backward = True
    needs_pass_times = True
    valid_vpp = "vpp 2"
    saturation_factor = 2  # the bubble stops changing from this many micro-batches per rank

    def chunks(self, vpp: int | None) -> int:
        return 2

    def vpp_error(self, vpp: int | None) -> str | None:
        if vpp != 2:
            return f"schedule {self.name!r} places exactly two model chunks per rank: set vpp = 2"
        return None

    def violation(self, model: ModelSpec, layout: Layout, training: Training) -> Violation | None:
        return (
            super().violation(model, layout, training)
            or needs_pipeline(self, layout)
            or v_split(self, model, layout)
            or enough_microbatches(self, layout, training, self.needed_microbatches(layout.pp))
        )

    def needed_microbatches(self, pp: int) -> int:
        return pp

    def order(self, rank: int, pp: int, microbatches: int) -> list[Op]:
        raise NotImplementedError

    def orders(self, pp: int, chunks: int, microbatches: int) -> list[list[Op]]:
        return [list(o) for o in _cached_orders(self, pp, microbatches)]

    def bubble_s(self, stages: StageTimes, microbatches: int, chunks: int) -> float:
        ranks = stages.ranks
        pp = len(ranks)
        scale = 1.0
        if pp > MAX_SIMULATED_RANKS:
            # the bubble per rank levels off with depth (within ~2% from 32 to 64 ranks):
            # run rank 0 and an even sample of the others, and scale by the hops
            n = MAX_SIMULATED_RANKS
            picks = [0] + [1 + round(i * (pp - 2) / (n - 2)) for i in range(n - 1)]
            ranks, scale = tuple(ranks[r] for r in picks), (pp - 1) / (n - 1)
        m = min(microbatches, self.saturation_factor * len(ranks))
        return scale * _window_bubble_s(self, ranks, m)


@lru_cache(maxsize=128)
def _cached_orders(sched: _VShape, pp: int, microbatches: int) -> tuple[tuple[Op, ...], ...]:
    return tuple(tuple(sched.order(r, pp, microbatches)) for r in range(pp))


@lru_cache(maxsize=4096)
def _window_bubble_s(
    sched: _VShape, ranks: tuple[tuple[PassTimes, ...], ...], microbatches: int
) -> float:
    """The longest rank window of the order run on ``ranks``' chunk times, less the slowest
    rank's work: the bubble of one step."""
    pp = len(ranks)
    orders = _cached_orders(sched, pp, microbatches)

    def duration(r: int, op: Op) -> float:
        return ranks[r][op.chunk].duration_s(op.kind)

    starts = run_orders(orders, sched, pp, 2, duration)
    if starts is None:  # pragma: no cover - tested deadlock-free
        raise RuntimeError(f"{sched.name}: the op order deadlocks (pp {pp})")
    work = max(microbatches * sum(p.total_s for p in passes) for passes in ranks)
    return max(0.0, max(windows_s(orders, starts, duration)) - work)


class ZBV(_VShape):
    """ZB-V: zero bubble at T_F = T_B = T_W with 1F1B's activation memory."""

    name = "zbv"
    title = "zero bubble V (ZB-V)"
    reference = "Qi et al. 2024 (Pipeline Parallelism with Controllable Memory), ZB-V"
    torchtitan = "ZBVZeroBubble"
    torchtitan_note = "no torch.compile of the stage modules (PyTorch refuses it)"
    megatron = None
    megatron_note = (
        "not in Megatron-LM; the sail-sg/zero-bubble-pipeline-parallelism fork of Megatron-LM "
        "runs it: --zero-bubble-v-schedule --enable-optimizer-post-validation"
    )

    def order(self, rank: int, pp: int, microbatches: int) -> list[Op]:
        return zbv_order(rank, pp, microbatches)

    def peak_chunks(self, rank: int, pp: int, chunks: int, microbatches: int) -> int:
        return min(2 * microbatches, 2 * pp)


class DualPipeV(_VShape):
    """DualPipe-V: forward and backward of two micro-batches overlapped, V placement."""

    name = "dualpipev"
    title = "DualPipe-V"
    reference = "DeepSeek-AI 2024 (DeepSeek-V3 report, DualPipe); PyTorch ScheduleDualPipeV"
    torchtitan = "DualPipeV"
    torchtitan_note = "overlaps the forward and backward of two micro-batches (MoE all-to-all)"
    megatron = None
    megatron_note = "not in Megatron-LM (DeepSeek's DualPipe is a standalone PyTorch library)"

    def needed_microbatches(self, pp: int) -> int:
        return 2 * pp  # PyTorch: at least as many micro-batches as stages

    def order(self, rank: int, pp: int, microbatches: int) -> list[Op]:
        return dualpipev_order(rank, pp, microbatches)

    def peak_chunks(self, rank: int, pp: int, chunks: int, microbatches: int) -> int:
        return 2 * pp + 1  # DualPipe README: PP + 1 chunk activations per device
