"""Layout search: one legal-layout generator, exact enumeration, Optuna proposals, Pareto fronts.

>>> import planner
>>> model, cluster = planner.load_model("llama3.1-8b"), planner.load_cluster("dgx-h100")
>>> result = planner.search(model, cluster, gpus=16, global_batch=64, seq_len=4096)
>>> result.best.report.tokens_per_s > 0
True
"""

from __future__ import annotations

import sys
import time
import types
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic import ValidationError

from planner.errors import PlannerError, pydantic_error_to_planner
from planner.profile import CalibrationProfile
from planner.search.budget import Deadline
from planner.search.evaluate import Evaluated, Evaluator, Objective
from planner.search.exhaustive import count_candidates, exhaustive
from planner.search.pareto import pareto_front
from planner.search.space import (
    MEGATRON_SCHEDULES,
    SearchSpace,
    check_schedules,
    default_space,
    legal_layouts,
    parse_schedules,
    stack_space,
)
from planner.specs.hardware import Cluster
from planner.specs.layout import Training
from planner.specs.model import ModelSpec
from planner.specs.stack import StackSpec

# exhaustive when the space holds at most this many candidates (~10-20 s at ~15k evals/s)
AUTO_EXHAUSTIVE_LIMIT = 200_000
# method="exhaustive" keeps every evaluated candidate (about 5 KB each with its report), so it
# refuses spaces above this many (~5 GB); auto and optuna keep only the trials they ran
EXHAUSTIVE_MAX_CANDIDATES = 1_000_000
METHODS = ("auto", "exhaustive", "optuna")


@dataclass
class SearchResult:
    """What a search found. ``ranked``: evaluated candidates, best first (feasible first).
    ``rejected_by_rule``: rule name -> candidates that legality rule removed before simulation
    (``planner.legality.SEARCH_RULES``; with Optuna, the structural levels only).
    ``infeasible``: reason -> candidates dropped, those rules' counts included."""

    method: str
    ranked: list[Evaluated]
    evaluated: int
    infeasible: dict[str, int]
    seconds: float
    space_size: int | None
    notes: list[str] = field(default_factory=list)
    pareto: dict[str, list[Evaluated]] = field(default_factory=dict)
    rejected_by_rule: dict[str, int] = field(default_factory=dict)

    @property
    def best(self) -> Evaluated:
        if not self.ranked or not self.ranked[0].feasible:
            raise PlannerError(
                "search",
                "no feasible layout: "
                + ", ".join(f"{k} ({v})" for k, v in self.infeasible.items()),
                "more GPUs, a smaller model, or another global batch",
            )
        return self.ranked[0]

    def top(self, k: int = 10) -> list[Evaluated]:
        return [e for e in self.ranked if e.feasible][:k]


def search(
    model: ModelSpec,
    cluster: Cluster,
    gpus: int | Sequence[int],
    global_batch: int,
    seq_len: int = 4096,
    precision: str | None = "bf16",
    cross_entropy: str | None = "fp32_copy",
    objective: Objective = "tokens_per_s",
    tokens: float | None = None,
    method: str = "auto",
    sampler: str = "tpe",
    trials: int = 300,
    storage: str | None = None,
    study: str | None = None,
    workers: int = 1,
    memory_headroom: float = 0.0,
    space: SearchSpace | None = None,
    profile: CalibrationProfile | None = None,
    pareto: bool = False,
    seed: int = 0,
    progress: Callable[[int, int], None] | None = None,
    time_budget_s: float | None = None,
    schedules: Sequence[str] | None = None,
    stack: StackSpec | None = None,
) -> SearchResult:
    """Find the best legal layout of ``model`` on ``cluster`` for ``objective``.

    ``gpus``: one count, or several (cost / time-to-train objectives trade GPU count against
    speed). ``method``: exhaustive enumeration (ground truth; refused above
    EXHAUSTIVE_MAX_CANDIDATES legal candidates), Optuna, or auto (exhaustive when the space
    holds at most AUTO_EXHAUSTIVE_LIMIT candidates). ``seed`` reproduces an Optuna search with
    ``workers=1`` only: with several workers the trials interleave as the processes are
    scheduled. ``time_budget_s``: a cooperative deadline, checked every few dozen candidates and
    after every trial; past it the search stops with a PlannerError on
    ``search.time_budget_s`` (finished trials stay in ``storage``). ``schedules``: the pipeline
    schedules paired with each vpp when pp > 1 (``SearchSpace.schedules``; default: those
    Megatron-LM runs, 1f1b and interleaved; ``tuple(planner.schedules.SCHEDULES)``: all).
    ``stack``: the software stack every candidate runs under: the space keeps only what it can
    run (:func:`~planner.search.space.stack_space`) and each candidate gets its defaults for the
    fields the search does not set (``precision`` / ``cross_entropy`` None: the stack's, else
    bf16 / fp32_copy).
    """
    deadline = Deadline(time_budget_s)
    counts = _check_arguments(method, gpus, global_batch, seq_len)
    from planner import default_profile

    prof = profile or default_profile(cluster)
    training = _search_training(seq_len, global_batch, precision, cross_entropy)
    space = _search_space(space or default_space(model, cluster, counts, seq_len), schedules, stack)
    evaluator = Evaluator(model, cluster, prof, objective, memory_headroom, tokens, stack=stack)
    start = time.perf_counter()
    notes = _stack_notes(stack)
    method, size = _choose_method(method, evaluator, training, space, deadline, notes)
    space.rejected.clear()
    if method == "exhaustive":
        ranked = exhaustive(
            evaluator,
            training,
            space,
            (lambda i: progress(i, size)) if progress and size else None,
            deadline,
        )
    else:
        ranked = _run_optuna(
            evaluator,
            training,
            space,
            notes,
            deadline,
            progress,
            sampler=sampler,
            trials=trials,
            storage=storage,
            study=study,
            workers=workers,
            seed=seed,
        )
    return _result(method, ranked, evaluator, space, start, size, notes, pareto)


def _stack_notes(stack: StackSpec | None) -> list[str]:
    """The search's opening notes: which stack it runs under, if any."""
    if stack is None:
        return []
    return [f"stack {stack.name}: only what it runs, with its kernels and execution"]


def _search_space(
    space: SearchSpace, schedules: Sequence[str] | None, stack: StackSpec | None
) -> SearchSpace:
    """``space`` with the requested schedules, then only what ``stack`` runs."""
    if schedules is not None:
        space = replace(space, schedules=check_schedules(schedules))
    return stack_space(space, stack) if stack is not None else space


def _check_arguments(
    method: str, gpus: int | Sequence[int], global_batch: int, seq_len: int
) -> tuple[int, ...]:
    """Refuse an unknown method, no or non-positive GPU counts, or a non-positive batch or
    sequence length (tokens); return the GPU counts as a tuple."""
    if method not in METHODS:
        raise PlannerError("method", f"unknown method {method!r}", ", ".join(METHODS))
    counts = (gpus,) if isinstance(gpus, int) else tuple(gpus)
    if not counts or min(counts) < 1:
        raise PlannerError("gpus", f"{gpus}", "one or more positive GPU counts")
    if global_batch < 1 or seq_len < 1:
        raise PlannerError(
            "global_batch" if global_batch < 1 else "seq_len", "must be positive", "an integer >= 1"
        )
    return counts


def _search_training(
    seq_len: int, global_batch: int, precision: str | None, cross_entropy: str | None
) -> Training:
    """The searched Training settings (None: left unset, for a stack to fill); pydantic's
    rejection as a PlannerError on ``training``."""
    given = {"precision": precision, "cross_entropy": cross_entropy}
    try:
        return Training(
            seq_len=seq_len,
            global_batch=global_batch,
            **{k: v for k, v in given.items() if v is not None},
        )
    except ValidationError as exc:
        raise pydantic_error_to_planner(exc, "training") from None


def _choose_method(
    method: str,
    evaluator: Evaluator,
    training: Training,
    space: SearchSpace,
    deadline: Deadline,
    notes: list[str],
) -> tuple[str, int | None]:
    """The method to run and the space size (None: not counted, or past the limit).

    auto: exhaustive up to AUTO_EXHAUSTIVE_LIMIT legal candidates, else optuna (noted in
    ``notes``); exhaustive: refused above EXHAUSTIVE_MAX_CANDIDATES; optuna: not counted.
    """
    if method not in ("auto", "exhaustive"):
        return method, None
    # counting stops past the limit: a huge space is never walked (nor held) in full
    limit = AUTO_EXHAUSTIVE_LIMIT if method == "auto" else EXHAUSTIVE_MAX_CANDIDATES
    size = count_candidates(evaluator, training, space, limit, deadline)
    over = size > limit
    if method == "auto":
        method = "optuna" if over else "exhaustive"
        how_many = f"more than {limit:,}" if over else f"{size:,}"
        notes.append(
            f"auto chose {method}: {how_many} legal candidates "
            f"(exhaustive up to {AUTO_EXHAUSTIVE_LIMIT:,})"
        )
    elif over:
        raise PlannerError(
            "method",
            f"exhaustive search of more than {limit:,} legal candidates would hold them "
            "all in memory",
            "auto or optuna, or a smaller space: fewer GPU counts, a fixed tp/pp",
        )
    return method, (None if over else size)


def _run_optuna(
    evaluator: Evaluator,
    training: Training,
    space: SearchSpace,
    notes: list[str],
    deadline: Deadline,
    progress: Callable[[int, int], None] | None,
    *,
    sampler: str,
    trials: int,
    storage: str | None,
    study: str | None,
    workers: int,
    seed: int,
) -> list[Evaluated]:
    """Run the Optuna search (imported only when used); note that several workers interleave."""
    from planner.search.optuna_search import optuna_search

    ranked = optuna_search(
        evaluator,
        training,
        space,
        sampler=sampler,
        trials=trials,
        storage=storage,
        study_name=study,
        workers=workers,
        seed=seed,
        progress=progress,
        notes=notes,
        deadline=deadline,
    )
    if workers > 1:
        notes.append(
            f"{workers} workers: their trials interleave as the processes are scheduled, so "
            "the seed reproduces single-worker searches only"
        )
    return ranked


def _result(
    method: str,
    ranked: list[Evaluated],
    evaluator: Evaluator,
    space: SearchSpace,
    start: float,
    size: int | None,
    notes: list[str],
    pareto: bool,
) -> SearchResult:
    """Assemble the SearchResult: infeasible counts are the rules' rejections plus the
    evaluator's; ``start``: time.perf_counter() at the search's start, seconds."""
    infeasible = Counter(space.rejected) + evaluator.infeasible
    result = SearchResult(
        method,
        ranked,
        evaluator.simulated,
        dict(infeasible),
        time.perf_counter() - start,
        size,
        notes,
        rejected_by_rule=dict(space.rejected),
    )
    if pareto:
        result.pareto = _pareto_fronts(ranked)
    return result


def _pareto_fronts(ranked: list[Evaluated]) -> dict[str, list[Evaluated]]:
    """The Pareto fronts a search reports: tokens/s against memory headroom (GiB) and GPUs."""
    return {
        "tokens_per_s_vs_memory_headroom": pareto_front(
            ranked, ("tokens_per_s", "memory_headroom_gib")
        ),
        "tokens_per_s_vs_gpus": pareto_front(ranked, ("tokens_per_s", "fewer_gpus")),
    }


class _CallableModule(types.ModuleType):
    """Lets ``planner.search(...)`` call :func:`search` while ``planner.search`` stays the
    subpackage that holds the generator and the methods."""

    def __call__(self, *args: Any, **kwargs: Any) -> SearchResult:
        return search(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule

__all__ = [
    "MEGATRON_SCHEDULES",
    "Evaluated",
    "Evaluator",
    "SearchResult",
    "SearchSpace",
    "default_space",
    "legal_layouts",
    "pareto_front",
    "parse_schedules",
    "search",
]
