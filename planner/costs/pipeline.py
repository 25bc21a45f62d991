"""Pipeline schedule: step time from per-stage micro-batch times.

With m micro-batches, stage times t_s (forward + backward of one micro-batch) and v virtual
stages per rank, a synchronous 1F1B / interleaved-1F1B step takes

    T = m * max_s t_s + (sum_s t_s - max_s t_s) / v

which for equal stages is (m + (p-1)/v) t, the bubble of Narayanan et al. 2021, section 2.2
(fraction (p-1)/(v m)). Unequal stages (embedding on the first, logits and loss on the last)
make the slowest stage set the steady-state rate.
"""

from __future__ import annotations

import math


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


def pipeline_time_s(
    microbatches: int, stage_max_s: float, stage_sum_s: float, vpp: int
) -> tuple[float, float]:
    """(steady-state time m * t_max, bubble time) of one step, seconds."""
    steady = microbatches * stage_max_s
    bubble = max(stage_sum_s - stage_max_s, 0.0) / max(vpp, 1)
    return steady, bubble
