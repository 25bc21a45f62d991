""":class:`KinetoTrace`, what a profiler trace says about where the time went, and the units
and sizes it is reported in."""

from __future__ import annotations

from dataclasses import dataclass, field

from planner.errors import PlannerError
from planner.kineto.categories import TRACE_CATEGORIES

US_PER_S = 1e6
TOP_NAMES = 5


@dataclass(frozen=True, slots=True)
class KinetoTrace:
    """What a profiler trace says about where the time went. Times in seconds.

    ``busy_s``: summed duration of the busy intervals of each category over all lanes and
    devices (overlapping lanes both count). ``exposed_s``: per category, the time it was the
    highest-priority busy category on its device, plus ``idle``; summed over devices, so
    ``sum(exposed_s.values()) == window_s * len(devices)``. ``idle_by_lane_s``: the window
    minus the union of each lane's busy intervals. ``top_names``: the busiest op / kernel names
    of each category, (name, busy seconds).
    """

    path: str
    kind: str  # "gpu" (device kernels) or "cpu" (top-level CPU operators)
    steps: int  # ProfilerStep# spans found; 0 when the trace has none
    window_s: float
    devices: tuple[str, ...]
    busy_s: dict[str, float]
    exposed_s: dict[str, float]
    idle_by_lane_s: dict[str, float]
    top_names: dict[str, list[tuple[str, float]]] = field(default_factory=dict)
    intervals: int = 0  # busy intervals classified

    def resolve_steps(self, steps: int | None = None) -> int:
        """``steps`` if given (>= 1), else the ProfilerStep count, else 1."""
        if steps is not None:
            if steps < 1:
                raise PlannerError("--steps", f"steps={steps}", "an integer >= 1")
            return steps
        return self.steps or 1

    def per_step_s(self, steps: int | None = None) -> dict[str, float]:
        """Exposed seconds per step and per device, by trace category (idle included)."""
        div = self.resolve_steps(steps) * max(len(self.devices), 1)
        return {cat: self.exposed_s.get(cat, 0.0) / div for cat in TRACE_CATEGORIES}

    def step_time_s(self, steps: int | None = None) -> float:
        """Wall seconds per step: the analysed window over the step count."""
        return self.window_s / self.resolve_steps(steps)
