"""Layout search: one legal-layout generator, exact enumeration, Optuna proposals, Pareto fronts.

>>> import planner
>>> model, cluster = planner.load_model("llama3.1-8b"), planner.load_cluster("dgx-h100")
>>> result = planner.search(model, cluster, gpus=16, global_batch=64, seq_len=4096)
>>> result.best.report.tokens_per_s > 0
True
>>> sweep = planner.search(model, cluster, gpus=8, global_batch=[32, 64], seq_len=[2048, 4096])
>>> sorted({(e.training.global_batch, e.training.seq_len) for e in sweep.ranked})
[(32, 2048), (32, 4096), (64, 2048), (64, 4096)]
"""

from __future__ import annotations

import numbers
import sys
import time
import types
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from planner.errors import PlannerError
from planner.profile import CalibrationProfile
from planner.search.budget import Deadline
from planner.search.evaluate import Evaluated, Evaluator, Objective
from planner.search.jobs import (
    Job,
    count_jobs,
    make_jobs,
    reset_rule_counts,
    run_exhaustive,
    run_optuna,
    spaces,
)
from planner.search.pareto import pareto_front
from planner.search.space import (
    MEGATRON_SCHEDULES,
    SearchSpace,
    default_space,
    legal_layouts,
    parse_schedules,
)
from planner.specs.hardware import Cluster
from planner.specs.model import ModelSpec
from planner.specs.stack import StackSpec
from planner.stacks import check_model_stack

# exhaustive when the space holds at most this many candidates (~10-20 s at ~15k evals/s)
AUTO_EXHAUSTIVE_LIMIT = 200_000
# method="exhaustive" keeps every evaluated candidate (about 5 KB each with its report), so it
# refuses spaces above this many (~5 GB); auto and optuna keep only the trials they ran
EXHAUSTIVE_MAX_CANDIDATES = 1_000_000
METHODS = ("auto", "exhaustive", "optuna")

# global batches (and sequence lengths) one search takes at most: each combination is one job
MAX_SWEEP_VALUES = 64


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
    global_batch: int | Sequence[int],
    seq_len: int | Sequence[int] = 4096,
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
    optimizer_offload: bool = False,
    checkpoint_offload: bool = False,
    recompute_fractions: Sequence[float] = (),
) -> SearchResult:
    """Find the best legal layout of ``model`` on ``cluster`` for ``objective``.

    ``gpus``: one count, or several (cost / time-to-train objectives trade GPU count against
    speed). ``global_batch`` (sequences per step) and ``seq_len`` (tokens per sequence): one
    value each, or several: every (global batch, seq_len) combination is searched in one call,
    each candidate's Training carrying its own, and the ranking and Pareto fronts span them all
    (exhaustive: their union; Optuna: one study of ``trials`` trials per combination, named
    ``STUDY-gbB-seqS`` when several). ``method``: exhaustive enumeration (ground truth; refused
    above EXHAUSTIVE_MAX_CANDIDATES legal candidates), Optuna, or auto (exhaustive when the
    space holds at most AUTO_EXHAUSTIVE_LIMIT candidates). ``seed`` reproduces an Optuna search
    with ``workers=1`` only. ``time_budget_s``: a cooperative deadline (checked every few dozen
    candidates and trials; past it a PlannerError on ``search.time_budget_s``; finished trials
    stay in ``storage``). ``schedules``: the pipeline
    schedules paired with each vpp when pp > 1 (``SearchSpace.schedules``; default: those
    Megatron-LM runs, 1f1b and interleaved; ``tuple(planner.schedules.SCHEDULES)``: all).
    ``stack``: the software stack every candidate runs under: the space keeps only what it can
    run (:func:`~planner.search.space.stack_space`) and each candidate gets its defaults for the
    fields the search does not set (``precision`` / ``cross_entropy`` None: the stack's, else
    bf16 / fp32_copy). ``optimizer_offload``, ``checkpoint_offload``: set on every candidate.
    ``recompute_fractions``: shares of each model chunk's layers full recompute may re-run
    besides every layer (``Training.recompute_fraction``; under a stack that runs them).
    """
    deadline = Deadline(time_budget_s)
    counts, batches, seqs = _check_arguments(method, gpus, global_batch, seq_len)
    if stack is not None:
        check_model_stack(stack, model)  # no layout helps a model the stack cannot express
    from planner import default_profile

    prof = profile or default_profile(cluster)

    def space_for(seq: int) -> SearchSpace:
        return space or default_space(model, cluster, counts, seq)

    kinds = (precision, cross_entropy, space_for, schedules, stack)
    offload = (optimizer_offload, checkpoint_offload)
    jobs = make_jobs(batches, seqs, *kinds, offload, recompute_fractions)
    evaluator = Evaluator(model, cluster, prof, objective, memory_headroom, tokens, stack=stack)
    start = time.perf_counter()
    notes = _stack_notes(stack) + _sweep_notes(batches, seqs)
    method, sizes = _choose_method(method, evaluator, jobs, deadline, notes)
    reset_rule_counts(jobs, method, sizes)
    if method == "exhaustive":
        ranked = run_exhaustive(evaluator, jobs, sizes or [], progress, deadline)
    else:
        optuna_kw = {"storage": storage, "study": study, "workers": workers, "seed": seed}
        ranked = run_optuna(
            evaluator, jobs, notes, deadline, progress, sampler=sampler, trials=trials, **optuna_kw
        )
    return _result(method, ranked, evaluator, jobs, start, sizes, notes, pareto)


def _stack_notes(stack: StackSpec | None) -> list[str]:
    """The search's opening notes: which stack it runs under, if any."""
    if stack is None:
        return []
    return [f"stack {stack.name}: only what it runs, with its kernels and execution"]


def _sweep_notes(batches: tuple[int, ...], seqs: tuple[int, ...]) -> list[str]:
    """A note naming the global batches and sequence lengths, when several are searched."""
    if len(batches) * len(seqs) == 1:
        return []
    return [
        f"global batches searched: {', '.join(map(str, batches))}; sequence lengths: "
        f"{', '.join(map(str, seqs))} ({len(batches) * len(seqs)} combinations, ranked together)"
    ]


def _check_arguments(
    method: str,
    gpus: int | Sequence[int],
    global_batch: int | Sequence[int],
    seq_len: int | Sequence[int],
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """Refuse an unknown method, no or non-positive GPU counts, global batches or sequence
    lengths (tokens); return the GPU counts as given, and the distinct global batches and
    sequence lengths in increasing order."""
    if method not in METHODS:
        raise PlannerError("method", f"unknown method {method!r}", ", ".join(METHODS))
    counts = (gpus,) if isinstance(gpus, int) else tuple(gpus)
    if not counts or min(counts) < 1:
        raise PlannerError("gpus", f"{gpus}", "one or more positive GPU counts")
    batches = _positive("global_batch", global_batch)
    return counts, batches, _positive("seq_len", seq_len)


def _positive(name: str, given: int | Sequence[int]) -> tuple[int, ...]:
    """``given`` (one integer or several) as its distinct values, increasing; a PlannerError on
    ``name`` when there is none, or one is not an integer >= 1."""
    several = isinstance(given, Sequence) and not isinstance(given, str)
    valid = f"1 to {MAX_SWEEP_VALUES} integers >= 1" if several else "an integer >= 1"
    if several and len(given) > MAX_SWEEP_VALUES:
        raise PlannerError(name, f"{len(given):,} values", valid)
    values = tuple(given) if several else (given,)
    if not all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in values):
        raise PlannerError(name, f"{given!r} is not an integer", valid)
    if not values:
        raise PlannerError(name, "no value", valid)
    if min(values) < 1:
        raise PlannerError(
            name, f"{given!r} has a value below 1" if several else "must be positive", valid
        )
    return tuple(sorted({int(v) for v in values}))


def _choose_method(
    method: str,
    evaluator: Evaluator,
    jobs: Sequence[Job],
    deadline: Deadline,
    notes: list[str],
) -> tuple[str, list[int] | None]:
    """The method to run and each job's count of legal candidates (None: not counted, or the
    total is past the limit).

    auto: exhaustive up to AUTO_EXHAUSTIVE_LIMIT legal candidates in all, else optuna (noted in
    ``notes``); exhaustive: refused above EXHAUSTIVE_MAX_CANDIDATES; optuna: not counted.
    """
    if method not in ("auto", "exhaustive"):
        return method, None
    # counting stops past the limit: a huge space is never walked (nor held) in full
    limit = AUTO_EXHAUSTIVE_LIMIT if method == "auto" else EXHAUSTIVE_MAX_CANDIDATES
    sizes = count_jobs(evaluator, jobs, limit, deadline)
    size = sum(sizes)
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
            "auto or optuna, or a smaller space: fewer GPU counts, global batches or sequence "
            "lengths, a fixed tp/pp",
        )
    return method, (None if over else sizes)


def _result(
    method: str,
    ranked: list[Evaluated],
    evaluator: Evaluator,
    jobs: Sequence[Job],
    start: float,
    sizes: list[int] | None,
    notes: list[str],
    pareto: bool,
) -> SearchResult:
    """Assemble the SearchResult: infeasible counts are the rules' rejections (summed over the
    jobs' spaces) plus the evaluator's; ``start``: time.perf_counter() at the search's start,
    seconds; ``sizes``: each job's count of legal candidates (None: not counted)."""
    rejected: Counter = Counter()
    for searched in spaces(jobs):
        rejected.update(searched.rejected)
    result = SearchResult(
        method,
        ranked,
        evaluator.simulated,
        dict(rejected + evaluator.infeasible),
        time.perf_counter() - start,
        None if sizes is None else sum(sizes),
        notes,
        rejected_by_rule=dict(rejected),
    )
    if pareto:
        batches = {j.training.tokens_per_step for j in jobs}
        result.pareto = _pareto_fronts(ranked, len(batches) > 1)
    return result


def _pareto_fronts(ranked: list[Evaluated], batches: bool = False) -> dict[str, list[Evaluated]]:
    """The Pareto fronts a search reports: tokens/s against memory headroom (GiB) and GPUs, and
    with ``batches`` (jobs of several batch sizes in tokens, global_batch * seq_len) against
    that size, a smaller one preferred (more optimizer steps per token)."""
    fronts = {
        "tokens_per_s_vs_memory_headroom": pareto_front(
            ranked, ("tokens_per_s", "memory_headroom_gib")
        ),
        "tokens_per_s_vs_gpus": pareto_front(ranked, ("tokens_per_s", "fewer_gpus")),
    }
    if batches:
        fronts["tokens_per_s_vs_batch_tokens"] = pareto_front(
            ranked, ("tokens_per_s", "fewer_batch_tokens")
        )
    return fronts


class _CallableModule(types.ModuleType):
    """Lets ``planner.search(...)`` call :func:`search` while ``planner.search`` stays the
    subpackage that holds the generator and the methods."""

    def __call__(self, *args: Any, **kwargs: Any) -> SearchResult:
        return search(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule

__all__ = [
    "MAX_SWEEP_VALUES",
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
