"""Exact enumeration: simulate every legal candidate once; the ground truth of the search."""

from __future__ import annotations

from collections.abc import Callable

from planner.search.budget import NO_DEADLINE, Deadline
from planner.search.evaluate import Evaluated, Evaluator
from planner.search.space import SearchSpace, legal_layouts
from planner.specs.layout import Training


def count_candidates(
    evaluator: Evaluator,
    training: Training,
    space: SearchSpace,
    limit: int | None = None,
    deadline: Deadline = NO_DEADLINE,
) -> int:
    """How many legal candidates the space holds (enumerates, does not simulate). With
    ``limit``, counting stops at ``limit + 1`` ("more than limit")."""
    n = 0
    for _ in legal_layouts(evaluator.model, evaluator.cluster, training, space, deadline):
        n += 1
        if limit is not None and n > limit:
            break
    return n


def exhaustive(
    evaluator: Evaluator,
    training: Training,
    space: SearchSpace,
    progress: Callable[[int], None] | None = None,
    deadline: Deadline = NO_DEADLINE,
) -> list[Evaluated]:
    """Every legal candidate that fits in memory, evaluated; sorted best first. Candidates
    the simulator refuses, and those whose memory (priced first) exceeds the limit, are
    counted in ``evaluator.infeasible`` and left out without their time being costed."""
    results = []
    for i, (gpus, layout, tr) in enumerate(
        legal_layouts(evaluator.model, evaluator.cluster, training, space, deadline)
    ):
        ev = evaluator.evaluate(gpus, layout, tr, prune=True)
        if ev is not None:
            results.append(ev)
        if progress is not None and i % 1000 == 0:
            progress(i)
    results.sort(key=lambda e: (not e.feasible, -e.score))
    return results
