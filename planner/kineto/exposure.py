"""Interval arithmetic on one device's busy intervals: membership, union length and the
exposure sweep that gives each instant to one category (:data:`EXPOSURE_ORDER`) or to idle.

Times are microseconds.
"""

from __future__ import annotations

from planner.kineto.categories import EXPOSURE_ORDER, TRACE_CATEGORIES


def _inside(t: float, windows: list[tuple[float, float]]) -> bool:
    return any(a <= t <= b for a, b in windows)


def _union_s(intervals: list[tuple[float, float]]) -> float:
    total, cur_a, cur_b = 0.0, None, None
    for a, b in sorted(intervals):
        if cur_b is None or a > cur_b:
            if cur_b is not None:
                total += cur_b - cur_a
            cur_a, cur_b = a, b
        else:
            cur_b = max(cur_b, b)
    if cur_b is not None:
        total += cur_b - cur_a
    return total


def _exposure(intervals: list[tuple[float, float, str]], w0: float, w1: float) -> dict[str, float]:
    """Sweep one device's intervals: each instant of [w0, w1] goes to the busy category first
    in EXPOSURE_ORDER, or to idle. Microseconds."""
    rank = {c: i for i, c in enumerate(EXPOSURE_ORDER)}
    points: list[tuple[float, int, int]] = []
    for a, b, c in intervals:
        a, b = max(a, w0), min(b, w1)
        if b > a:
            points += [(a, 1, rank[c]), (b, -1, rank[c])]
    points.sort()
    counts = [0] * len(EXPOSURE_ORDER)
    out = dict.fromkeys(TRACE_CATEGORIES, 0.0)
    prev = w0
    for t, delta, r in points:
        if t > prev:
            busy = next((i for i, n in enumerate(counts) if n > 0), None)
            out["idle" if busy is None else EXPOSURE_ORDER[busy]] += t - prev
            prev = t
        counts[r] += delta
    out["idle"] += max(w1 - prev, 0.0)
    return out
