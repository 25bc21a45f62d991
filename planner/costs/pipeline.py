"""Pipeline schedule: step time from per-stage micro-batch times.

With m micro-batches, stage times t_s (forward + backward of one micro-batch) and v virtual
stages per rank, a synchronous 1F1B / interleaved-1F1B step takes

    T = m * max_s t_s + (sum_s t_s - max_s t_s) / v

which for equal stages is (m + (p-1)/v) t, the bubble of Narayanan et al. 2021, section 2.2
(fraction (p-1)/(v m)). Unequal stages (embedding on the first, logits and loss on the last)
make the slowest stage set the steady-state rate. Every schedule (planner/schedules/) gives its
own bubble from the same stage times, split into forward, input-gradient and weight-gradient
passes where it schedules them apart (zero bubble, Qi et al. 2023).
"""

from __future__ import annotations

import math

from planner.schedules import Schedule, StageTimes


def microbatches_per_step(global_batch: int, micro_batch: int, dp: int) -> int:
    """Gradient-accumulation count: global_batch / (micro_batch x dp) (caller checks divisibility)."""
    return global_batch // (micro_batch * dp)


def layers_on_bottleneck_stage(layers: int, pp: int) -> int:
    """Layers on the most loaded stage (Megatron splits evenly; leftovers go to some stages)."""
    return math.ceil(layers / pp)


def layers_on_edge_stage(layers: int, pp: int) -> int:
    """Layers on the first and last stages. When pp does not divide the layers, frameworks give
    the edge stages, which also hold the embedding and the loss, the smaller share (Megatron
    ``--decoder-first/last-pipeline-num-layers``, account-for-embedding/loss splits), as long as
    the middle stages can absorb the remainder."""
    if pp <= 2 or layers % pp == 0 or layers % pp > pp - 2:
        return math.ceil(layers / pp)
    return layers // pp


def stage_layer_counts(
    layers: int, pp: int, first: int | None = None, last: int | None = None
) -> tuple[int, int, int]:
    """(layers the step model costs on the first rank, on the last rank, on the busiest middle
    rank). Stated ``first`` / ``last`` (checked by :func:`stated_split_error`): the ranks'
    own counts. Otherwise both edge ranks :func:`layers_on_edge_stage` and the middle
    :func:`layers_on_bottleneck_stage` (with pp = 2 both ranks the larger share)."""
    if first is None and last is None:
        edge = layers_on_edge_stage(layers, pp) if pp > 1 else layers
        return edge, edge, layers_on_bottleneck_stage(layers, pp)
    ranks = layers_per_rank(layers, pp, first, last)
    return ranks[0], ranks[-1], max(ranks[1:-1], default=0)


def _stated(first: int | None, last: int | None) -> str:
    return ", ".join(f"{k} {v}" for k, v in (("first", first), ("last", last)) if v is not None)


def stated_split_error(
    layers: int, pp: int, first: int | None, last: int | None
) -> tuple[str, str] | None:
    """(what is wrong, what would be valid) with a stated first / last rank layer count, or
    None when the split runs: the ranks whose count is not stated share the other layers
    evenly and none of them is left empty (Megatron-Core TransformerConfig's uneven-PP checks:
    ``num_layers_in_first/last_pipeline_stage``)."""
    if first is None and last is None:
        return None
    if pp == 1:
        return "a first / last stage layer count needs pp > 1", "pp >= 2, or leave both unset"
    stated = (first or 0) + (last or 0)
    free = pp - (first is not None) - (last is not None)
    rest = layers - stated
    if rest < 0 or (free == 0 and rest) or (free and (rest <= 0 or rest % free)):
        valid = (
            f"first + last = {layers} (pp = 2: no other rank)"
            if free == 0
            else f"counts that leave a positive multiple of {free} layers to the {free} "
            "rank(s) not stated"
        )
        return (
            f"{layers} layers do not split as {_stated(first, last)} over pp = {pp}: "
            f"{rest} layers left for {free} rank(s)",
            valid,
        )
    return None


def layers_per_rank(
    layers: int, pp: int, first: int | None = None, last: int | None = None
) -> list[int]:
    """Layers of each pipeline rank. Stated ``first`` / ``last`` (Layout.first_stage_layers /
    last_stage_layers, checked by :func:`stated_split_error`): the other ranks share the rest
    evenly. Otherwise the edge ranks' share (:func:`layers_on_edge_stage`), the rest over the
    middle ranks, the larger counts first (with pp = 2 the first rank takes the odd layer; the
    step model costs both ranks with the larger share)."""
    if pp == 1:
        return [layers]
    if first is not None or last is not None:
        free = pp - (first is not None) - (last is not None)
        each = (layers - (first or 0) - (last or 0)) // free if free else 0
        return (
            [each if first is None else first]
            + [each] * (pp - 2)
            + [each if last is None else last]
        )
    edge = layers_on_edge_stage(layers, pp)
    middle = layers - 2 * edge
    if pp == 2:
        return [edge, layers - edge]
    base, extra = divmod(middle, pp - 2)
    return [edge] + [base + (1 if i < extra else 0) for i in range(pp - 2)] + [edge]


def pipeline_time_s(
    microbatches: int, stage_max_s: float, stage_sum_s: float, vpp: int
) -> tuple[float, float]:
    """(steady-state time m * t_max, bubble time) of one 1F1B / interleaved step, seconds."""
    steady = microbatches * stage_max_s
    bubble = max(stage_sum_s - stage_max_s, 0.0) / max(vpp, 1)
    return steady, bubble


def schedule_time_s(
    schedule: Schedule, microbatches: int, stages: StageTimes, chunks: int
) -> tuple[float, float]:
    """(steady-state time m * t_max, bubble time) of one step under ``schedule``, seconds.

    For 1F1B and interleaved 1F1B this is :func:`pipeline_time_s`; the zero-bubble and V
    schedules take the bubble of their op order (planner/schedules/)."""
    steady = microbatches * stages.max_s
    return steady, schedule.bubble_s(stages, microbatches, chunks)
