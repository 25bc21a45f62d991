"""Evaluate candidates once each (cached), check memory with headroom, score an objective."""

from __future__ import annotations

import math
import operator
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal, get_args

from planner.errors import PlannerError
from planner.profile import CalibrationProfile
from planner.report import StepReport
from planner.simulate import simulate_step
from planner.simulate.batch import Figures, shared_simulator
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
_FINITE = operator.attrgetter(*FINITE_FIELDS)


OUT_OF_MEMORY = "out of memory (with headroom)"


@dataclass(frozen=True)
class Evaluated:
    """One simulated candidate and its objective score (higher is better).

    ``figures``: what the search ranks and prints (planner/simulate/batch.py); ``report``: the
    full StepReport with its plan, built by ``simulate_step`` the first time it is read (only
    for the candidates a caller shows)."""

    gpus: int
    layout: Layout
    training: Training
    figures: Figures
    score: float
    feasible: bool
    reason: str = ""
    build: Callable[[Layout, Training], StepReport] | None = field(
        default=None, compare=False, repr=False
    )

    @cached_property
    def report(self) -> StepReport:
        """The full StepReport of this candidate (simulated on first read)."""
        if self.build is None:
            raise PlannerError("report", "this candidate was evaluated without a simulator")
        return self.build(self.layout, self.training)


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
        self.sim = shared_simulator(self.model, self.cluster, self.profile, self.stack)

    def score(self, report: StepReport | Figures) -> float:
        """Objective value, oriented so that higher is better."""
        if self.objective == "tokens_per_s":
            return report.tokens_per_s
        if self.objective == "cost":
            price = self.cluster.spec.price_per_gpu_hour_usd or 0.0
            return -price * report.gpus / 3600.0 / report.tokens_per_s * 1e6
        return -(self.tokens or 0.0) / report.tokens_per_s / 3600.0

    def __call__(self, gpus: int, layout: Layout, training: Training) -> Evaluated | None:
        """The candidate's evaluation, or None when it is rejected (see the class docstring);
        each distinct candidate is simulated once (cached)."""
        key = (gpus, layout, training)
        if key in self.cache:
            return self.cache[key]
        out = self.cache[key] = self.evaluate(gpus, layout, training)
        return out

    def evaluate(
        self, gpus: int, layout: Layout, training: Training, prune: bool = False
    ) -> Evaluated | None:
        """The candidate's evaluation (not cached), or None when it is rejected. ``prune``:
        a candidate over the memory limit is rejected as out of memory without costing its
        time (exhaustive search), instead of returned with ``feasible`` False."""
        self.simulated += 1
        limit = self.sim.usable * (1.0 - self.memory_headroom)
        try:
            fig = self.sim.figures(layout, training, limit if prune else None)
        except (PlannerError, ArithmeticError) as exc:
            return self._refused(exc)
        return self._accept(gpus, layout, training, fig, limit)

    def evaluate_many(self, candidates: Sequence[tuple[int, Layout, Training]]) -> list[Evaluated]:
        """``evaluate(gpus, layout, training, prune=True)`` of every candidate (not cached),
        the accepted ones in order: the simulator's vector path (planner/simulate/vector.py)
        prices them together, the same figures and the same rejections."""
        self.simulated += len(candidates)
        limit = self.sim.usable * (1.0 - self.memory_headroom)
        out = []
        bounded: set[int] = set()  # figures the vector path found finite and bounded
        from planner.simulate import vector  # numpy, imported by the first exhaustive search

        figures = vector.figures_many(self.sim, candidates, limit, False, bounded)
        for j, ((gpus, layout, training), fig) in enumerate(zip(candidates, figures, strict=True)):
            if fig is None:
                self.infeasible[OUT_OF_MEMORY] += 1
            elif type(fig) is not Figures:
                self._refused(fig)
            else:
                ev = self._accept(gpus, layout, training, fig, limit, j in bounded)
                if ev is not None:
                    out.append(ev)
        return out

    def _refused(self, exc: BaseException) -> None:
        """Reject a candidate the simulator refused (a PlannerError) or failed on (an
        overflow or division by zero on extreme inputs)."""
        if isinstance(exc, PlannerError):
            return self._reject(f"simulator refused ({exc.field})")
        return self._reject(f"simulator failed ({type(exc).__name__})")

    def _accept(
        self,
        gpus: int,
        layout: Layout,
        training: Training,
        fig: Figures,
        limit: float,
        bounded: bool = False,
    ) -> Evaluated | None:
        """The Evaluated of a priced candidate (``limit``: usable GiB with headroom), or None
        when it is rejected (out of memory, a non-finite figure or score, no throughput).
        ``bounded``: every figure is known finite and below 1e300 in magnitude (the vector
        path checked), so the sum below is finite and is not taken."""
        if not fig.timed:
            return self._reject(OUT_OF_MEMORY)
        if not bounded:
            # one sum: a NaN or an infinity among the figures makes it non-finite (and so does
            # an overflow of their sum, which only figures near 1e308 could reach)
            total = sum(map(abs, _FINITE(fig)))
            total += sum(map(abs, fig.time_breakdown_s.values()))
            total += sum(map(abs, fig.memory_breakdown_gib.values()))
            if not math.isfinite(total):
                return self._reject("non-finite simulation result")
        if fig.tokens_per_s <= 0:
            return self._reject("no throughput (tokens/s <= 0)")
        score = self.score(fig)
        if not math.isfinite(score):
            return self._reject("non-finite objective score")
        feasible = fig.peak_memory_gib <= limit
        reason = "" if feasible else (f"needs {fig.peak_memory_gib:.1f} GiB, limit {limit:.1f} GiB")
        if not feasible:
            self.infeasible[OUT_OF_MEMORY] += 1
        return Evaluated(gpus, layout, training, fig, score, feasible, reason, self._report)

    def _report(self, layout: Layout, training: Training) -> StepReport:
        """The full StepReport of a candidate this evaluator accepted."""
        return simulate_step(
            self.model, self.cluster, layout, training, self.profile, False, self.stack
        )

    def _reject(self, reason: str) -> None:
        self.infeasible[reason] += 1


def rank(results: Iterable[Evaluated]) -> list[Evaluated]:
    """Best first, feasible candidates before the rest: the order every method returns."""
    # two stable sorts by score, highest first: the order of the key (not feasible, -score),
    # ties kept in their given order, with float comparisons only
    feasible, rest = [], []
    for e in results:
        (feasible if e.feasible else rest).append(e)
    feasible.sort(key=_SCORE, reverse=True)
    rest.sort(key=_SCORE, reverse=True)
    return feasible + rest


_SCORE = operator.attrgetter("score")
