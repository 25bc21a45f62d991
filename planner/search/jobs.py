"""The jobs of one search: one per (global batch, seq_len) combination, each with its Training
and space; counting them (keeping the candidates for exhaustive search), running them
exhaustively or with Optuna, and ranking their candidates together."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from pydantic import ValidationError

from planner.errors import PlannerError, pydantic_error_to_planner
from planner.search.budget import Deadline
from planner.search.evaluate import Evaluated, Evaluator, rank
from planner.search.exhaustive import count_candidates, exhaustive, gc_paused
from planner.search.space import SearchSpace, check_schedules, stack_space
from planner.specs.layout import Training
from planner.specs.stack import StackSpec

# counted candidates kept for exhaustive search instead of enumerating them twice (about 1 KB
# each: at most ~200 MB)
KEEP_CANDIDATES = 200_000


@dataclass(frozen=True)
class Job:
    """One (global batch, seq_len) combination of a search: the Training its candidates start
    from and the space it searches (the default space's CP degrees depend on seq_len).

    A search over several combinations runs one job each with the one Evaluator (it caches on
    (gpus, layout, training), so jobs never collide) and ranks all their candidates together by
    the objective's score; exhaustive enumerates the union of the jobs (auto counts that union),
    Optuna runs one study per job with the full trial budget."""

    training: Training
    space: SearchSpace
    # the legal candidates as counted (planner.search._count), when they were kept
    candidates: list = field(default_factory=list, compare=False)


def parse_recompute_fractions(text: str | None) -> tuple[float, ...]:
    """``--recompute-fractions`` (comma-separated numbers; None: none) as numbers; their range
    is checked by :func:`check_recompute_fractions`."""
    if text is None:
        return ()
    try:
        values = tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise PlannerError(
            "--recompute-fractions", f"{text!r} is not a list of numbers", "e.g. 0.25,0.5,0.75"
        ) from None
    if not values:
        raise PlannerError("--recompute-fractions", "no value given", "e.g. 0.25,0.5,0.75")
    return values


# at most this many recompute shares in one search: each multiplies the knob settings
MAX_RECOMPUTE_FRACTIONS = 16


def check_recompute_fractions(values: Sequence[float]) -> tuple[float, ...]:
    """The distinct shares, ascending; each must lie in (0, 1) (1 is every layer, which full
    recompute always tries), at most MAX_RECOMPUTE_FRACTIONS of them."""
    if len(values) > MAX_RECOMPUTE_FRACTIONS:
        raise PlannerError(
            "search.recompute_fractions",
            f"{len(values):,} shares (each multiplies the knob settings searched)",
            f"at most {MAX_RECOMPUTE_FRACTIONS}, e.g. 0.25,0.5,0.75",
        )
    for v in values:
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not 0.0 < v < 1.0:
            raise PlannerError(
                "search.recompute_fractions",
                f"{v!r} is not a share of the layers",
                "numbers above 0 and below 1, e.g. 0.25,0.5,0.75",
            )
    return tuple(sorted({float(v) for v in values}))


def make_jobs(
    batches: tuple[int, ...],
    seqs: tuple[int, ...],
    precision: str | None,
    cross_entropy: str | None,
    space_for: Callable[[int], SearchSpace],
    schedules: Sequence[str] | None,
    stack: StackSpec | None,
    offload: tuple[bool, bool] = (False, False),
    recompute_fractions: Sequence[float] = (),
) -> list[Job]:
    """One job per (global batch, seq_len), batches outer; ``space_for(seq_len)``: the space
    before the schedules and the stack narrow it (one per seq_len, shared by its jobs);
    ``offload``: (optimizer_offload, checkpoint_offload) of every candidate;
    ``recompute_fractions``: shares of the layers full recompute may also re-run."""
    trainings = [
        search_training(s, b, precision, cross_entropy, offload)
        for b, s in itertools.product(batches, seqs)
    ]
    spaces = {s: search_space(space_for(s), schedules, stack, recompute_fractions) for s in seqs}
    return [Job(t, spaces[t.seq_len]) for t in trainings]


def search_space(
    space: SearchSpace,
    schedules: Sequence[str] | None,
    stack: StackSpec | None,
    recompute_fractions: Sequence[float] = (),
) -> SearchSpace:
    """``space`` with the requested schedules and recompute shares (besides every layer),
    then only what ``stack`` runs."""
    if schedules is not None:
        space = replace(space, schedules=check_schedules(schedules))
    if recompute_fractions:
        shares = check_recompute_fractions(recompute_fractions)
        space = replace(space, recompute_fraction=(None, *shares))
    return stack_space(space, stack) if stack is not None else space


def search_training(
    seq_len: int,
    global_batch: int,
    precision: str | None,
    cross_entropy: str | None,
    offload: tuple[bool, bool] = (False, False),
) -> Training:
    """The searched Training settings (None: left unset, for a stack to fill; ``offload``:
    optimizer_offload and checkpoint_offload, set only when on); pydantic's rejection as a
    PlannerError on ``training``."""
    given: dict[str, object] = {"precision": precision, "cross_entropy": cross_entropy}
    given |= {
        k: True
        for k, on in zip(("optimizer_offload", "checkpoint_offload"), offload, strict=True)
        if on
    }
    try:
        return Training(
            seq_len=seq_len,
            global_batch=global_batch,
            **{k: v for k, v in given.items() if v is not None},
        )
    except ValidationError as exc:
        raise pydantic_error_to_planner(exc, "training") from None


def spaces(jobs: Sequence[Job]) -> list[SearchSpace]:
    """The distinct spaces the jobs search (jobs of one seq_len share theirs)."""
    return list({id(j.space): j.space for j in jobs}.values())


def reset_rule_counts(jobs: Sequence[Job], method: str, sizes: Sequence[int] | None) -> None:
    """Clear the spaces' rule counts before the enumeration that follows the count, unless
    exhaustive search runs on the candidates the count kept (its counts are those)."""
    kept = method == "exhaustive" and sizes is not None
    kept = kept and all(len(j.candidates) == n for j, n in zip(jobs, sizes, strict=True))
    if not kept:
        for searched in spaces(jobs):
            searched.rejected.clear()


def count_jobs(
    evaluator: Evaluator, jobs: Sequence[Job], limit: int, deadline: Deadline
) -> list[int]:
    """Legal candidates of each job, counted until the total passes ``limit`` (the jobs after
    that are not counted). Up to KEEP_CANDIDATES in all, each job keeps the candidates it
    counted (``job.candidates``) so that exhaustive search does not enumerate them again."""
    sizes: list[int] = []
    with gc_paused():
        for job in jobs:
            left = limit - sum(sizes)
            job.candidates.clear()
            room = max(0, KEEP_CANDIDATES - sum(sizes))
            sizes.append(
                count_candidates(
                    evaluator, job.training, job.space, left, deadline, job.candidates, room
                )
            )
            if sum(sizes) > limit:
                break
    return sizes


def run_exhaustive(
    evaluator: Evaluator,
    jobs: Sequence[Job],
    sizes: Sequence[int],
    progress: Callable[[int, int], None] | None,
    deadline: Deadline,
) -> list[Evaluated]:
    """Every job enumerated in full (``sizes``: their counts), ranked together; ``progress``
    sees one count over all of them."""
    total, done, ranked = sum(sizes), 0, []
    with gc_paused():
        for job, size in zip(jobs, sizes, strict=True):
            report = (lambda i, d=done: progress(d + i, total)) if progress and total else None
            kept = job.candidates if len(job.candidates) == size else None
            ranked += exhaustive(evaluator, job.training, job.space, report, deadline, kept)
            done += size
        return rank(ranked)


def run_optuna(
    evaluator: Evaluator,
    jobs: Sequence[Job],
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
    """One Optuna study per job, ``trials`` each (imported only when used), ranked together;
    note how many studies ran and that several workers interleave."""
    from planner.search.optuna_search import DEFAULT_STUDY, optuna_search

    ranked: list[Evaluated] = []
    for k, job in enumerate(jobs):
        ranked += optuna_search(
            evaluator,
            job.training,
            job.space,
            sampler=sampler,
            trials=trials,
            storage=storage,
            study_name=study if len(jobs) == 1 else study_name(study or DEFAULT_STUDY, job),
            workers=workers,
            seed=seed,
            progress=job_progress(progress, k, len(jobs)),
            notes=notes,
            deadline=deadline,
        )
    if len(jobs) > 1:
        notes.append(
            f"optuna: one study per (global batch, seq_len) combination, {trials} trials each "
            f"({len(jobs)} studies)"
        )
    if workers > 1:
        notes.append(
            f"{workers} workers: their trials interleave as the processes are scheduled, so "
            "the seed reproduces single-worker searches only"
        )
    return rank(ranked)


def study_name(study: str, job: Job) -> str:
    """The study of one job of a sweep: ``study`` with its global batch and seq_len."""
    return f"{study}-gb{job.training.global_batch}-seq{job.training.seq_len}"


def job_progress(
    progress: Callable[[int, int], None] | None, k: int, n: int
) -> Callable[[int, int], None] | None:
    """``progress`` of job ``k`` of ``n``, each ``total`` trials: one count over all jobs."""
    if progress is None or n == 1:
        return progress
    return lambda done, total: progress(k * total + done, n * total)
