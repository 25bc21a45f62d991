""":func:`load_kineto`: read a profiler trace, pick its busy intervals, classify them and sum
busy and exposed time per category (see the :mod:`planner.kineto` docstring)."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

from planner.errors import PlannerError
from planner.kineto.categories import EXPOSURE_ORDER, TRACE_CATEGORIES, classify
from planner.kineto.events import (
    DEVICE_CATS,
    TRACE_HINT,
    _complete,
    _events,
    _read_json,
    _Slice,
    _top_level,
    _windows,
)
from planner.kineto.exposure import _exposure, _inside, _union_s
from planner.kineto.result import TOP_NAMES, US_PER_S, KinetoTrace

_STEP = re.compile(r"^ProfilerStep#\d+$")
_GPU_COLLECTIVE_ANNOTATION = re.compile(r"^(gloo|nccl):")


def _busy_slices(slices: list[_Slice], name: str) -> tuple[str, list[_Slice]]:
    """The trace's kind and busy intervals: its device events ("gpu"), else the top-level CPU
    operators and collective annotations ("cpu"). Raises PlannerError when there are none."""
    device = [s for s in slices if s.cat.lower() in DEVICE_CATS]
    if device:
        kind, busy = "gpu", device
    else:
        kind = "cpu"
        busy = _top_level(
            [
                s
                for s in slices
                if s.cat == "cpu_op"
                or (s.cat == "user_annotation" and _GPU_COLLECTIVE_ANNOTATION.match(s.name))
            ]
        )
    if not busy:
        raise PlannerError(
            "trace",
            f"{name}: no GPU kernels (cat 'kernel') or CPU operators (cat 'cpu_op') found",
            TRACE_HINT,
        )
    return kind, busy


def load_kineto(path: str | Path) -> KinetoTrace:
    """Read and classify a Kineto trace (see the module docstring).

    Raises PlannerError (field ``trace``) for a missing, empty, truncated or malformed file, a
    JSON without ``traceEvents``, or a trace with neither device kernels nor CPU operators.
    """
    p = Path(path)
    slices = _complete(_events(_read_json(p), p.name))
    kind, busy = _busy_slices(slices, p.name)
    step_spans = [s for s in slices if _STEP.match(s.name)]
    steps = len({s.name for s in step_spans})
    optimizer_windows = _windows(slices, "Optimizer.step")
    w0 = min(s.start for s in (*busy, *step_spans))
    w1 = max(s.end for s in (*busy, *step_spans))

    busy_us: dict[str, float] = dict.fromkeys(EXPOSURE_ORDER, 0.0)
    names: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    per_device: dict[str, list[tuple[float, float, str]]] = defaultdict(list)
    per_lane: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for s in busy:
        mid = 0.5 * (s.start + s.end)
        category = classify(s.name, s.cat.lower(), _inside(mid, optimizer_windows.get(s.pid, [])))
        dur = s.end - s.start
        busy_us[category] += dur
        names[category][s.name] += dur
        per_device[s.pid].append((s.start, s.end, category))
        per_lane[f"{s.pid}/{s.tid}"].append((s.start, s.end))

    exposed: dict[str, float] = dict.fromkeys(TRACE_CATEGORIES, 0.0)
    for ivs in per_device.values():
        for cat, us in _exposure(ivs, w0, w1).items():
            exposed[cat] += us
    top = {
        cat: [
            (n, us / US_PER_S)
            for n, us in sorted(by_name.items(), key=lambda kv: -kv[1])[:TOP_NAMES]
        ]
        for cat, by_name in names.items()
    }
    return KinetoTrace(
        path=str(p),
        kind=kind,
        steps=steps,
        window_s=(w1 - w0) / US_PER_S,
        devices=tuple(sorted(per_device)),
        busy_s={c: us / US_PER_S for c, us in busy_us.items()},
        exposed_s={c: us / US_PER_S for c, us in exposed.items()},
        idle_by_lane_s={
            lane: (w1 - w0 - _union_s(ivs)) / US_PER_S for lane, ivs in sorted(per_lane.items())
        },
        top_names=top,
        intervals=len(busy),
    )
