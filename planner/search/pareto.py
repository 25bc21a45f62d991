"""Pareto fronts over evaluated candidates (non-dominated sets, every objective maximised)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from planner.search.evaluate import Evaluated

Axis = Callable[[Evaluated], float]

# name -> value to maximise
AXES: dict[str, Axis] = {
    "tokens_per_s": lambda e: e.report.tokens_per_s,
    "memory_headroom_gib": lambda e: e.report.memory_headroom_gib,
    "fewer_gpus": lambda e: -float(e.gpus),
}


def pareto_front(results: Sequence[Evaluated], axes: Sequence[str]) -> list[Evaluated]:
    """Feasible candidates no other feasible candidate beats on every axis (ties kept once),
    sorted by the first axis, best first."""
    fns = [AXES[a] for a in axes]
    pts = [(tuple(f(e) for f in fns), e) for e in results if e.feasible]
    pts.sort(key=lambda p: p[0], reverse=True)
    front: list[tuple[tuple[float, ...], Evaluated]] = []
    for vals, e in pts:
        dominated = any(all(o >= v for o, v in zip(other, vals, strict=True)) for other, _ in front)
        if not dominated:
            front.append((vals, e))
    return [e for _, e in front]
