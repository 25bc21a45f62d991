"""Pareto fronts over evaluated candidates (non-dominated sets, every objective maximised)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from planner.search.evaluate import Evaluated

Axis = Callable[[Evaluated], float]

# name -> value to maximise
AXES: dict[str, Axis] = {
    "tokens_per_s": lambda e: e.figures.tokens_per_s,
    "memory_headroom_gib": lambda e: e.figures.memory_headroom_gib,
    "fewer_gpus": lambda e: -float(e.gpus),
    # the global batch in tokens (global_batch * seq_len), comparable across sequence lengths: at
    # equal speed a smaller batch takes more optimizer steps per token, which matters above the
    # critical batch size (McCandlish et al. 2018, "An Empirical Model of Large-Batch Training")
    "fewer_batch_tokens": lambda e: -float(e.training.tokens_per_step),
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
