"""Zero-bubble schedules: the backward split into input gradient (I) and weight gradient (W).

Qi et al. 2023, "Zero Bubble Pipeline Parallelism" (arXiv 2401.10241, ICLR 2024). An I pass on
one stage waits only for the I of the next stage, so the weight-gradient passes, which nothing
downstream waits for, fill the bubble. Table 1 of the paper, per-stage times T_F, T_B (input
gradient, our I), T_W and activation memory M_B of one micro-batch:

=========  =====================  ===========
schedule   bubble                 peak memory
=========  =====================  ===========
1F1B       (p-1)(T_F + T_B + T_W)  p M_B
ZB-H1      (p-1)(T_F + T_B - T_W)  p M_B
ZB-H2      (p-1)(T_F + T_B - 2T_W) (2p-1) M_B
=========  =====================  ===========

The orders here reproduce those bubbles when T_W <= T_B and T_F + T_B >= 2 T_W (tests run
them); outside that range the W passes cannot fill all the idle time and the bubble is
(p-1)(T_F + T_B - min(T_B, T_W)) for ZB-H1 and (p-1) max(T_F + T_B - 2 T_W, 0) for ZB-H2. A
micro-batch awaiting only its W keeps nearly all its activations (M_W = 32 sbh of M_B = 34 sbh
per layer without the attention scores, Qi et al. Table 2): it counts as in flight until its W.
ZB-H2's zero bubble assumes the paper's optimizer post-validation (section 4): no all-reduce
before the optimizer step, so a stage's parallelogram is not cut at the step boundary.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, ClassVar

from planner.schedules.base import (
    Op,
    Schedule,
    StageTimes,
    Violation,
    enough_microbatches,
    needs_pipeline,
)

if TYPE_CHECKING:
    from planner.specs.layout import Layout, Training
    from planner.specs.model import ModelSpec

_FORK = "the sail-sg/zero-bubble-pipeline-parallelism fork of Megatron-LM runs it"


def zb1p_order(rank: int, pp: int, chunks: int, microbatches: int) -> list[Op]:
    """ZB-H1 (one chunk) or its interleaved form, as torch.distributed.pipelining
    ``ScheduleInterleavedZeroBubble`` orders it: Megatron's warm-up with one forward less per hop
    (``(chunks - 1) * per_round + pp - 1 - rank``), then one forward and one input gradient in
    turn, and from the ``rank``-th step on the oldest pending weight gradient after each."""
    rounds = max(1, microbatches // pp)
    per_round = microbatches // rounds
    total = chunks * microbatches
    warm = min((chunks - 1) * per_round + pp - 1 - rank, total)

    def fwd_chunk(step: int) -> int:
        return (step // per_round) % chunks

    def bwd_chunk(step: int) -> int:
        return chunks - 1 - ((step - warm) // per_round) % chunks

    f_next = [0] * chunks
    i_next = [0] * chunks
    w_next = [0] * chunks
    order: list[Op] = []
    backward_steps: list[int] = []
    for step in range(warm + total):
        if step < total:
            c = fwd_chunk(step)
            order.append(Op("F", f_next[c], c))
            f_next[c] += 1
        if step < warm:
            continue
        c = bwd_chunk(step)
        order.append(Op("I", i_next[c], c))
        i_next[c] += 1
        backward_steps.append(step)
        if step - warm >= rank:
            c = bwd_chunk(backward_steps[sum(w_next)])
            order.append(Op("W", w_next[c], c))
            w_next[c] += 1
    while sum(w_next) < len(backward_steps):
        c = bwd_chunk(backward_steps[sum(w_next)])
        order.append(Op("W", w_next[c], c))
        w_next[c] += 1
    return order


def _sum_others(stages: StageTimes, per_rank) -> float:
    k = stages.bottleneck
    return sum(per_rank(stages.ranks[r]) for r in range(len(stages.ranks)) if r != k)


class ZBH1(Schedule):
    """ZB-H1: 1F1B's warm-up and memory, weight gradients deferred to fill the drain."""

    name = "zb-h1"
    title = "zero bubble ZB-H1"
    reference = "Qi et al. 2023 (arXiv 2401.10241), section 3.1 and Table 1"
    torchtitan = None
    torchtitan_note = (
        "torchtitan runs zero-bubble schedules with two or more stages per rank only "
        "(InterleavedZeroBubble, ZBVZeroBubble); torch.distributed.pipelining "
        "ScheduleInterleavedZeroBubble with one stage per rank runs this order"
    )
    megatron = None
    megatron_note = (
        f"not in Megatron-LM; {_FORK}: --enable-zero-bubble --zero-bubble-max-pending-backward "
        "PP --enable-optimizer-post-validation"
    )
    splits_backward = True
    needs_pass_times = True
    min_microbatches_per_stage: ClassVar[int] = 1

    def vpp_error(self, vpp: int | None) -> str | None:
        if (vpp or 1) > 1:
            return (
                f"schedule {self.name!r} runs one model chunk per pipeline rank, but vpp = {vpp} "
                "(vpp > 1 is schedule 'interleaved-zb')"
            )
        return None

    def needed_microbatches(self, pp: int) -> int:
        return pp

    def violation(self, model: ModelSpec, layout: Layout, training: Training) -> Violation | None:
        return (
            super().violation(model, layout, training)
            or needs_pipeline(self, layout)
            or enough_microbatches(self, layout, training, self.needed_microbatches(layout.pp))
        )

    def bubble_s(self, stages: StageTimes, microbatches: int, chunks: int) -> float:
        # Table 1 per rank, summed over the ranks other than the slowest (as 1F1B's sum_s - max_s)
        return _sum_others(
            stages,
            lambda passes: sum(
                p.forward_s + p.input_grad_s - min(p.input_grad_s, p.weight_grad_s) for p in passes
            ),
        ) / max(chunks, 1)

    def peak_chunks(self, rank: int, pp: int, chunks: int, microbatches: int) -> int:
        return min(microbatches, pp)

    def orders(self, pp: int, chunks: int, microbatches: int) -> list[list[Op]]:
        return [zb1p_order(r, pp, 1, microbatches) for r in range(pp)]


class InterleavedZB(ZBH1):
    """ZB-H1 over ``vpp`` chunks per rank (ZB1P interleaved, torchtitan InterleavedZeroBubble)."""

    name = "interleaved-zb"
    title = "interleaved zero bubble (ZB1P)"
    reference = "Qi et al. 2023 (arXiv 2401.10241); torch.distributed.pipelining"
    torchtitan = "InterleavedZeroBubble"
    torchtitan_note = "no torch.compile of the stage modules (PyTorch refuses it)"
    valid_vpp = "vpp >= 2"

    def vpp_error(self, vpp: int | None) -> str | None:
        if (vpp or 1) < 2:
            return f"schedule {self.name!r} needs vpp >= 2 (one chunk per rank is 'zb-h1')"
        return None

    def violation(self, model: ModelSpec, layout: Layout, training: Training) -> Violation | None:
        found = super().violation(model, layout, training)
        m = training.global_batch // (training.micro_batch * layout.dp)
        rounds = max(1, m // layout.pp)
        if found is None and m % rounds:
            # torch.distributed.pipelining runs the micro-batches in rounds of equal size
            return (
                "training.global_batch",
                f"schedule 'interleaved-zb' runs {m} micro-batches in {rounds} rounds of "
                f"m // pp: {m} is not a multiple of {rounds}",
                f"micro-batches per step a multiple of max(1, m // pp), e.g. {rounds * layout.pp}",
            )
        return found

    def peak_chunks(self, rank: int, pp: int, chunks: int, microbatches: int) -> int:
        per_round = microbatches // max(1, microbatches // pp)
        return min(microbatches * chunks, (chunks - 1) * per_round + pp)

    def orders(self, pp: int, chunks: int, microbatches: int) -> list[list[Op]]:
        return [zb1p_order(r, pp, chunks, microbatches) for r in range(pp)]


@lru_cache(maxsize=64)
def zbh2_orders(pp: int, microbatches: int) -> tuple[tuple[Op, ...], ...]:
    """ZB-H2's order, from the heuristic of Qi et al. section 3 at T_F = T_B = T_W: at every
    time step a free stage runs the next input gradient if its input is there, else the next
    forward while fewer than 2p - 1 micro-batches are in flight, else the oldest pending weight
    gradient. Warm-up 2(p - s) - 1 forwards on stage s; W passes fill the drain."""
    limit = 2 * pp - 1
    f_end: dict[tuple[int, int], int] = {}
    i_end: dict[tuple[int, int], int] = {}
    nf, ni, nw = [0] * pp, [0] * pp, [0] * pp
    orders: list[list[Op]] = [[] for _ in range(pp)]
    never = 1 << 62
    t = 0
    while min(nw) < microbatches:
        for s in range(pp):
            dep_i = f_end if s == pp - 1 else i_end
            src = s if s == pp - 1 else s + 1
            if ni[s] < nf[s] and dep_i.get((ni[s], src), never) <= t:
                orders[s].append(Op("I", ni[s], 0))
                i_end[(ni[s], s)] = t + 1
                ni[s] += 1
            elif (
                nf[s] < microbatches
                and nf[s] - nw[s] < limit
                and (s == 0 or f_end.get((nf[s], s - 1), never) <= t)
            ):
                orders[s].append(Op("F", nf[s], 0))
                f_end[(nf[s], s)] = t + 1
                nf[s] += 1
            elif nw[s] < ni[s]:
                orders[s].append(Op("W", nw[s], 0))
                nw[s] += 1
        t += 1
    return tuple(tuple(o) for o in orders)


class ZBH2(ZBH1):
    """ZB-H2: more warm-up forwards (2p - 1 in flight) and no bubble when T_F + T_B <= 2 T_W."""

    name = "zb-h2"
    title = "zero bubble ZB-H2"
    tiles_steps = True
    reference = "Qi et al. 2023 (arXiv 2401.10241), section 3.1 and Table 1"
    megatron_note = (
        f"not in Megatron-LM; {_FORK}: --enable-zero-bubble --zero-bubble-max-pending-backward "
        "2PP --enable-optimizer-post-validation"
    )

    def needed_microbatches(self, pp: int) -> int:
        return 2 * pp - 1

    def bubble_s(self, stages: StageTimes, microbatches: int, chunks: int) -> float:
        return _sum_others(
            stages,
            lambda passes: sum(
                max(p.forward_s + p.input_grad_s - 2.0 * p.weight_grad_s, 0.0) for p in passes
            ),
        )

    def peak_chunks(self, rank: int, pp: int, chunks: int, microbatches: int) -> int:
        return min(microbatches, 2 * pp - 1)

    def orders(self, pp: int, chunks: int, microbatches: int) -> list[list[Op]]:
        return [list(o) for o in zbh2_orders(pp, microbatches)]
