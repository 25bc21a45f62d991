"""Evaluate candidates once each (cached), check memory with headroom, score an objective."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Literal, get_args

from planner.errors import PlannerError
from planner.profile import CalibrationProfile
from planner.report import StepReport
from planner.simulate import simulate_step
from planner.specs.hardware import Cluster
from planner.specs.layout import Layout, Training
from planner.specs.model import ModelSpec
from planner.specs.stack import StackSpec

Objective = Literal["tokens_per_s", "cost", "time_to_train"]
OBJECTIVES: tuple[str, ...] = get_args(Objective)
# report figures the search ranks, filters or prints (with both breakdowns); a candidate with
# any of them non-finite is rejected (the simulator refuses most such reports itself)
FINITE_FIELDS = (
    "step_time_s",
    "tokens_per_s",
    "tokens_per_s_per_gpu",
    "mfu_pct",
    "hfu_pct",
    "peak_memory_gib",
    "usable_memory_gib",
)


@dataclass(frozen=True)
class Evaluated:
    """One simulated candidate and its objective score (higher is better)."""

    gpus: int
    layout: Layout
    training: Training
    report: StepReport
    score: float
    feasible: bool
    reason: str = ""


@dataclass
class Evaluator:
    """Simulates each distinct candidate once and scores it.

    ``memory_headroom``: fraction of usable HBM kept free (0.05 = fit within 95%).
    Scores (higher is better): tokens/s; minus dollars per million tokens (cost); minus
    hours to train ``tokens`` tokens (time_to_train).

    A candidate the simulator refuses (a PlannerError or an arithmetic error from extreme
    inputs) or whose report or score is not a finite number is *rejected*: the call returns
    None, the reason is counted in ``infeasible`` and the rejection is cached like a result, so
    one bad candidate never stops a search and never becomes its winner.
    """

    model: ModelSpec
    cluster: Cluster
    profile: CalibrationProfile
    objective: Objective = "tokens_per_s"
    memory_headroom: float = 0.0
    tokens: float | None = None
    cache: dict = field(default_factory=dict)
    infeasible: Counter = field(default_factory=Counter)
    simulated: int = 0
    stack: StackSpec | None = None  # the software stack every candidate runs under

    def __post_init__(self) -> None:
        if self.objective not in OBJECTIVES:
            raise PlannerError(
                "objective", f"unknown objective {self.objective!r}", ", ".join(OBJECTIVES)
            )
        if self.objective == "cost" and self.cluster.spec.price_per_gpu_hour_usd is None:
            raise PlannerError(
                "objective",
                f"cluster {self.cluster.id} has no price per GPU-hour",
                "tokens_per_s, time_to_train, or a priced cluster",
            )
        if self.objective == "time_to_train" and not self.tokens:
            raise PlannerError("tokens", "time_to_train needs a token budget", "--tokens > 0")
        if not 0.0 <= self.memory_headroom < 1.0:
            raise PlannerError("memory_headroom", f"{self.memory_headroom}", "0 <= x < 1")

    def score(self, report: StepReport) -> float:
        """Objective value, oriented so that higher is better."""
        if self.objective == "tokens_per_s":
            return report.tokens_per_s
        if self.objective == "cost":
            price = self.cluster.spec.price_per_gpu_hour_usd or 0.0
            return -price * report.gpus / 3600.0 / report.tokens_per_s * 1e6
        return -(self.tokens or 0.0) / report.tokens_per_s / 3600.0

    def __call__(self, gpus: int, layout: Layout, training: Training) -> Evaluated | None:
        """The candidate's evaluation, or None when it is rejected (see the class docstring)."""
        key = (gpus, layout, training)
        if key in self.cache:
            return self.cache[key]
        self.simulated += 1
        try:
            report = simulate_step(
                self.model, self.cluster, layout, training, self.profile, False, self.stack
            )
        except PlannerError as exc:
            return self._reject(key, f"simulator refused ({exc.field})")
        except ArithmeticError as exc:  # overflow or division by zero on extreme inputs
            return self._reject(key, f"simulator failed ({type(exc).__name__})")
        figures = (
            *(getattr(report, f) for f in FINITE_FIELDS),
            *report.time_breakdown_s.values(),
            *report.memory_breakdown_gib.values(),
        )
        if not all(math.isfinite(v) for v in figures):
            return self._reject(key, "non-finite simulation result")
        if report.tokens_per_s <= 0:
            return self._reject(key, "no throughput (tokens/s <= 0)")
        score = self.score(report)
        if not math.isfinite(score):
            return self._reject(key, "non-finite objective score")
        limit = report.usable_memory_gib * (1.0 - self.memory_headroom)
        feasible = report.peak_memory_gib <= limit
        reason = (
            "" if feasible else (f"needs {report.peak_memory_gib:.1f} GiB, limit {limit:.1f} GiB")
        )
        if not feasible:
            self.infeasible["out of memory (with headroom)"] += 1
        out = Evaluated(gpus, layout, training, report, score, feasible, reason)
        self.cache[key] = out
        return out

    def _reject(self, key: tuple[int, Layout, Training], reason: str) -> None:
        self.infeasible[reason] += 1
        self.cache[key] = None
