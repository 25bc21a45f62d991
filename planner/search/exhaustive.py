"""Exact enumeration: simulate every legal candidate once; the ground truth of the search."""

from __future__ import annotations

from collections.abc import Callable

from planner.search.evaluate import Evaluated, Evaluator
from planner.search.space import SearchSpace, legal_layouts
from planner.specs.layout import Training


def count_candidates(evaluator: Evaluator, training: Training, space: SearchSpace) -> int:
    """How many legal candidates the space holds (enumerates, does not simulate)."""
    return sum(1 for _ in legal_layouts(evaluator.model, evaluator.cluster, training, space))


def exhaustive(
    evaluator: Evaluator,
    training: Training,
    space: SearchSpace,
    progress: Callable[[int], None] | None = None,
) -> list[Evaluated]:
    """Every legal candidate, evaluated; sorted best first (feasible ones before the rest)."""
    results = []
    for i, (gpus, layout, tr) in enumerate(
        legal_layouts(evaluator.model, evaluator.cluster, training, space)
    ):
        results.append(evaluator(gpus, layout, tr))
        if progress is not None and i % 1000 == 0:
            progress(i)
    results.sort(key=lambda e: (not e.feasible, -e.score))
    return results
