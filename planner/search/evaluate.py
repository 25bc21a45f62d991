"""Evaluate candidates once each (cached), check memory with headroom, score an objective."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Literal

from planner.errors import PlannerError
from planner.profile import CalibrationProfile
from planner.report import StepReport
from planner.simulate import simulate_step
from planner.specs.hardware import Cluster
from planner.specs.layout import Layout, Training
from planner.specs.model import ModelSpec

Objective = Literal["tokens_per_s", "cost", "time_to_train"]


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

    def __post_init__(self) -> None:
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

    def __call__(self, gpus: int, layout: Layout, training: Training) -> Evaluated:
        key = (gpus, layout, training)
        hit = self.cache.get(key)
        if hit is not None:
            return hit
        report = simulate_step(
            self.model, self.cluster, layout, training, self.profile, check=False
        )
        self.simulated += 1
        limit = report.usable_memory_gib * (1.0 - self.memory_headroom)
        feasible = report.peak_memory_gib <= limit
        reason = (
            "" if feasible else (f"needs {report.peak_memory_gib:.1f} GiB, limit {limit:.1f} GiB")
        )
        if not feasible:
            self.infeasible["out of memory (with headroom)"] += 1
        out = Evaluated(gpus, layout, training, report, self.score(report), feasible, reason)
        self.cache[key] = out
        return out
