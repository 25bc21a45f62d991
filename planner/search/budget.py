"""A cooperative time limit for a search, so that no request can hold a thread for long.

The search loops call :meth:`Deadline.tick` once per candidate (or trial); the clock is read on
the first tick and then every ``every`` ticks, so the overhead is one counter decrement per step.
"""

from __future__ import annotations

import math
import time

from planner.errors import PlannerError

BUDGET_HINT = "a smaller space: fewer GPU counts, a fixed tp/pp, or method optuna with fewer trials"


class Deadline:
    """Raises a PlannerError once ``budget_s`` seconds have passed since construction.

    ``budget_s`` None (or infinity) never expires. ``every``: ticks between clock reads.
    """

    def __init__(self, budget_s: float | None, every: int = 64) -> None:
        if budget_s is not None and not (budget_s > 0):  # also refuses NaN
            raise PlannerError(
                "search.time_budget_s", f"{budget_s} is not positive", "seconds > 0, or None"
            )
        self.budget_s = None if budget_s is None or math.isinf(budget_s) else float(budget_s)
        self.every = max(1, every)
        self._start = time.perf_counter()
        self._countdown = 0  # the first tick reads the clock

    def remaining_s(self) -> float | None:
        """Seconds left (may be negative); None without a budget."""
        if self.budget_s is None:
            return None
        return self.budget_s - (time.perf_counter() - self._start)

    def check(self) -> None:
        """Raise the budget error when the time is up."""
        left = self.remaining_s()
        if left is not None and left <= 0:
            raise PlannerError(
                "search.time_budget_s", f"search took longer than {self.budget_s:g} s", BUDGET_HINT
            )

    def tick(self) -> None:
        """One step of a loop: read the clock every ``every`` calls."""
        if self.budget_s is None:
            return
        self._countdown -= 1
        if self._countdown < 0:
            self._countdown = self.every - 1
            self.check()


NO_DEADLINE = Deadline(None)
