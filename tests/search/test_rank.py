"""rank(): best first, feasible before the rest, ties in the order given."""

from __future__ import annotations

import random
from types import SimpleNamespace

from planner.search.evaluate import rank


def test_rank_is_the_sort_by_feasibility_then_score() -> None:
    rng = random.Random(16)
    scores = [rng.choice((-1.0, 0.0, -0.0, 2.5, 3.0)) * rng.choice((1, 1e-3)) for _ in range(500)]
    items = [
        SimpleNamespace(score=s, feasible=rng.random() < 0.7, n=k) for k, s in enumerate(scores)
    ]
    want = sorted(items, key=lambda e: (not e.feasible, -e.score))
    assert [e.n for e in rank(items)] == [e.n for e in want]
