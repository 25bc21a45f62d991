"""Optuna search over legal layouts only: suggest, repair to the nearest legal structure, evaluate.

Each trial suggests the structure in an encoded numeric space (log2 of tp, cp, pp, vpp, ep,
micro-batch and GPU count; integer exponents where every legal value is a power of two, else a
float log2) plus the knobs as categoricals (and the pipeline schedule, a categorical over the
``Structure.schedule`` values of the legal structures, when there are several), then *repairs*
the point to the nearest legal candidate that no finished trial holds yet (weighted L1
distance in the encoded space, the implied dp = gpus / (tp * cp * pp) included, plus a step per
knob or schedule change; planner/search/optuna_encoding.py), so every simulated layout is legal
and a trial is not spent on a known one. The study starts from rule-of-thumb layouts
(planner/search/heuristics.py), and after every trial the sampler proposed a local step
(:class:`LocalSteps`) tries the nearest unexplored neighbour of the best trial. The objective
is the evaluator's score (maximised); memory feasibility is a soft constraint
``memory_over_gib`` = peak - limit (GiB, <= 0 feasible) set with ``Trial.set_constraint``.

A study may live in memory, in an RDB or in a journal file (planner/search/optuna_storage.py);
a stored study is resumed (only the missing trials are run) and may be shared by several local
worker processes, or by workers on other hosts started as
``python -m planner.search.optuna_search --storage ... --study ...``. A local worker that dies
is reported; the others finish the study.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import optuna
from optuna.trial import FrozenTrial, Trial, TrialState

from planner.errors import PlannerError
from planner.search.budget import NO_DEADLINE, Deadline
from planner.search.evaluate import Evaluated, Evaluator, rank
from planner.search.heuristics import heuristic_candidates
from planner.search.optuna_encoding import AXES as AXES
from planner.search.optuna_encoding import AXIS_WEIGHTS as AXIS_WEIGHTS
from planner.search.optuna_encoding import KNOB_AXES as KNOB_AXES
from planner.search.optuna_encoding import MAX_STRUCTURES as MAX_STRUCTURES
from planner.search.optuna_encoding import SCHEDULE_PARAM as SCHEDULE_PARAM
from planner.search.optuna_encoding import SCHEDULE_WEIGHT as SCHEDULE_WEIGHT
from planner.search.optuna_encoding import (
    Encoding,
    Explored,
    candidate_attr,
    candidate_from_attr,
    legal_structures,
    structure_of,
)
from planner.search.optuna_storage import (
    FINISHED,
    StorageSpec,
    check_fingerprint,
    fail_orphans,
    fingerprint,
    finished_trials,
    open_storage,
    open_study,
    storage_spec,
)
from planner.search.space import SearchSpace, Structure
from planner.specs.layout import Layout, Training

SAMPLERS = ("tpe", "nsga2", "gp", "random")
DEFAULT_STUDY = "planner-search"
MAX_SEED = 2**32 - 1  # numpy's RandomState, behind every Optuna sampler
CONSTRAINT = "memory_over_gib"
WARM_START = 5  # heuristic layouts enqueued before the sampler takes over
# how far a local step may go from its centre, in the encoded distance of optuna_encoding: one
# step of tp, cp or pp (dp follows), a factor of two moved between two of them, one step of
# ep, or two steps of vpp, micro-batch, schedule and knobs
LOCAL_RADIUS = 2.0
LOCAL_OVER = 3  # trials over the memory limit that local steps may start from


# ---- candidates stored in trials --------------------------------------------------------------


def _collect(
    study: optuna.Study, evaluator: Evaluator, training: Training
) -> tuple[list[Evaluated], int]:
    """Every distinct candidate of the study's COMPLETE trials, re-evaluated through the
    evaluator's cache (so each is simulated at most once here), ranked; and the COMPLETE trial
    count. (A trial whose candidate the evaluator rejects is PRUNED, not COMPLETE.)"""
    seen: dict[tuple[int, Layout, Training], Evaluated] = {}
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    for t in complete:
        attr = t.user_attrs.get("candidate")
        if attr is None:
            continue
        key = candidate_from_attr(attr, training)
        if key not in seen:
            seen[key] = evaluator(*key)
    return rank([e for e in seen.values() if e is not None]), len(complete)


# ---- the objective ----------------------------------------------------------------------------


class LayoutObjective:
    """Suggest, repair, evaluate, record. ``rank``: the worker that runs it (0 in-process).

    The repair goes to the nearest legal candidate that no finished trial of the study holds
    yet (:meth:`Explored.novel`; the nearest known one only when MAX_PROBES candidates are all
    known): TPE keeps proposing points near its best ones, and each such proposal becomes an
    unexplored neighbour instead of a repeat. A candidate the evaluator rejects ends its trial
    PRUNED: it counts towards the trial budget (so a space of rejected candidates cannot loop
    forever) but is never returned."""

    def __init__(
        self, enc: Encoding, evaluator: Evaluator, training: Training, rank: int = 0
    ) -> None:
        self.enc = enc
        self.evaluator = evaluator
        self.training = training
        self.rank = rank
        self.duplicates = 0  # trials whose candidate a finished trial of the study already held
        self.host = socket.gethostname()
        self.explored = Explored(enc, evaluator.model, evaluator.cluster, training)

    def __call__(self, trial: Trial) -> float:
        # host and pid first: they identify the trial's process if it is killed (orphans)
        trial.set_user_attr("host", self.host)
        trial.set_user_attr("pid", os.getpid())
        trial.set_user_attr("worker", self.rank)
        self.explored.sync(trial.study)
        x, knobs = self.enc.suggest(trial)
        found = self.explored.novel(x, knobs)
        key = found[2] if found else self.explored.candidate(self.enc.repair(x), knobs)
        duplicate = key in self.explored.known
        self.duplicates += duplicate
        self.explored.known.add(key)
        ev = self.evaluator(*key)
        trial.set_user_attr("candidate", candidate_attr(*key))
        trial.set_user_attr("duplicate", duplicate)
        if ev is None:  # the simulator refused it (counted in evaluator.infeasible)
            raise optuna.TrialPruned("candidate rejected by the simulator")
        limit = ev.figures.usable_memory_gib * (1.0 - self.evaluator.memory_headroom)
        trial.set_user_attr("tokens_per_s", ev.figures.tokens_per_s)
        trial.set_user_attr("peak_memory_gib", ev.figures.peak_memory_gib)
        trial.set_constraint(CONSTRAINT, ev.figures.peak_memory_gib - limit)
        return ev.score


class LocalSteps:
    """A study callback that alternates the sampler with local steps: after each trial the
    sampler proposed, it enqueues the nearest candidate no trial holds yet within LOCAL_RADIUS
    of a centre (one step of one axis of the encoding, a factor of two moved between two of
    tp, cp, pp and dp, or two lighter steps). The centres, in order: the best feasible trial,
    then up to LOCAL_OVER trials that score higher but exceed the memory limit, the least over
    first (the optimum usually sits at the memory limit, between the two). No step is taken
    while no trial is feasible, or when every centre's neighbourhood is explored.

    TPE, given its best trials, samples the values they share and rarely tries another value
    of an axis on which they agree (a second CP degree, another ZeRO stage); the local steps
    try those one at a time. Each step is a function of the study's trials, so a seeded
    search with one worker stays reproducible."""

    def __init__(self, explored: Explored, trials: int) -> None:
        self.explored = explored
        self.trials = trials

    def __call__(self, study: optuna.Study, trial: FrozenTrial) -> None:
        if trial.state not in FINISHED or "origin" in trial.user_attrs:
            return  # enqueued (a warm start or a local step): the sampler's turn comes next
        if finished_trials(study) >= self.trials:
            return
        self.explored.sync(study)
        enc = self.explored.enc
        for attr in _centres(study):
            s, k = structure_of(candidate_from_attr(attr, self.explored.training))
            found = self.explored.novel(enc.point(s), k, LOCAL_RADIUS)
            if found is not None:
                params = enc.params(found[0], found[1])
                study.enqueue_trial(params, user_attrs={"origin": "local"}, skip_if_exists=True)
                return


def _centres(study: optuna.Study) -> list[dict[str, Any]]:
    """The candidates local steps start from (see :class:`LocalSteps`), in order."""
    done = [
        t
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if "candidate" in t.user_attrs
    ]
    over = {t.number: max(t.constraints.values(), default=0.0) for t in done}
    feasible = [t for t in done if over[t.number] <= 0]
    if not feasible:
        return []
    best = max(feasible, key=lambda t: (t.values[0], -t.number))
    above = sorted(
        (t for t in done if over[t.number] > 0 and t.values[0] > best.values[0]),
        key=lambda t: (over[t.number], t.number),
    )
    return [t.user_attrs["candidate"] for t in [best, *above[:LOCAL_OVER]]]


# ---- samplers and storages --------------------------------------------------------------------


def make_sampler(name: str, seed: int | None, trials: int = 300) -> optuna.samplers.BaseSampler:
    """The Optuna sampler called ``name`` (one of SAMPLERS), seeded with ``seed``."""
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "nsga2":
        # a few generations even on small budgets
        return optuna.samplers.NSGAIISampler(
            seed=seed, population_size=max(10, min(50, trials // 6))
        )
    if name == "gp":
        try:
            import torch  # noqa: F401
        except ImportError as exc:
            raise PlannerError(
                "sampler",
                f"'gp' needs torch, which cannot be imported ({exc})",
                ", ".join(s for s in SAMPLERS if s != "gp") + " (or install torch)",
            ) from exc
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.samplers.GPSampler(seed=seed, deterministic_objective=True)
    raise PlannerError("sampler", f"unknown sampler {name!r}", ", ".join(SAMPLERS))


def check_seed(seed: int | None, workers: int) -> None:
    if seed is not None and not 0 <= seed <= MAX_SEED - (workers - 1):
        raise PlannerError(
            "seed", f"{seed} is out of range", f"an integer from 0 to {MAX_SEED - (workers - 1)}"
        )


# ---- the search -------------------------------------------------------------------------------


def optuna_search(
    evaluator: Evaluator,
    training: Training,
    space: SearchSpace,
    sampler: str = "tpe",
    trials: int = 300,
    storage: str | os.PathLike[str] | None = None,
    study_name: str | None = None,
    workers: int = 1,
    seed: int | None = 0,
    progress: Callable[[int, int], None] | None = None,
    stats: dict[str, int] | None = None,
    notes: list[str] | None = None,
    deadline: Deadline = NO_DEADLINE,
) -> list[Evaluated]:
    """Search legal layouts with an Optuna sampler; every evaluated candidate, best first.

    ``trials``: finished trials (COMPLETE, or PRUNED when the simulator rejected the candidate)
    the study should hold at the end (a resumed study runs only the remainder). ``storage``:
    None (in memory), an RDB URL, or a journal file (``*.log``, ``*.journal``,
    ``journal:PATH``). ``workers``: local processes sharing the study (a temporary journal file
    when ``storage`` is None); worker r uses seed ``seed + r``. Their trials interleave as the
    processes are scheduled, so ``seed`` makes a search reproducible only with one worker.
    ``progress(done, total)``: called after each trial of the in-process path. ``stats``, when
    given, receives trials (finished in the study), resumed (finished before this call),
    rejected (PRUNED), distinct (candidates returned), duplicates (COMPLETE trials - distinct)
    and orphans (trials of dead workers marked FAIL). ``notes``, when given, receives a line per
    worker that died while the others finished the study. ``deadline``: checked after every
    trial (in-process) or while waiting for the workers (which are then terminated).

    The result holds the distinct candidates of *all* COMPLETE trials of the study, ranked as by
    :func:`exhaustive` (feasible first, then by score), each simulated at most once by
    ``evaluator``. When every worker dies before the study is complete, a PlannerError says so
    and how to resume.
    """
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    _check_arguments(sampler, trials, workers, seed)
    model, cluster = evaluator.model, evaluator.cluster
    spec, tmpdir = _study_storage(storage, workers)
    name = study_name or DEFAULT_STUDY
    keep_tmpdir = False
    try:
        structs = legal_structures(model, cluster, training, space, deadline)
        enc = Encoding(structs, space)
        store = open_storage(spec)
        study = open_study(store, name, make_sampler(sampler, seed, trials))
        check_fingerprint(study, fingerprint(evaluator, training, space), str(spec[1]))
        orphans = fail_orphans(study, store)
        resumed = finished_trials(study)
        if resumed < trials:
            _warm_start(study, enc, evaluator, training, space, structs, trials - resumed)
        if workers == 1:
            if resumed < trials:
                _optimize_here(study, enc, evaluator, training, trials, resumed, progress, deadline)
        elif resumed < trials:
            study, lost, said = _optimize_in_workers(
                evaluator, training, space, spec, name, sampler, trials, workers, seed, deadline
            )
            orphans += lost
            done = finished_trials(study)
            keep_tmpdir = tmpdir is not None and 0 < done < trials
            _check_workers_finished(done, trials, workers, said, spec, name, storage is None)
            if notes is not None:
                notes += [f"{line}; the others finished the study" for line in said]
        ranked, n_complete = _collect(study, evaluator, training)
        n_finished = finished_trials(study)
    finally:
        if tmpdir is not None and not keep_tmpdir:
            shutil.rmtree(tmpdir, ignore_errors=True)
    if stats is not None:
        _record_stats(stats, n_finished, resumed, n_complete, len(ranked), orphans)
    return ranked


def _check_arguments(sampler: str, trials: int, workers: int, seed: int | None) -> None:
    """Refuse an unknown sampler, fewer than one trial or worker, or an out-of-range seed."""
    if sampler not in SAMPLERS:
        raise PlannerError("sampler", f"unknown sampler {sampler!r}", ", ".join(SAMPLERS))
    if trials < 1:
        raise PlannerError("trials", f"{trials}", "an integer >= 1")
    if workers < 1:
        raise PlannerError("workers", f"{workers}", "an integer >= 1")
    check_seed(seed, workers)


def _study_storage(
    storage: str | os.PathLike[str] | None, workers: int
) -> tuple[StorageSpec, str | None]:
    """The study's storage spec, and the temporary directory made for it (else None): several
    workers without a storage share a journal file in a new temporary directory."""
    spec = storage_spec(storage)
    tmpdir = None
    if workers > 1 and spec[0] == "memory":
        tmpdir = tempfile.mkdtemp(prefix="planner-optuna-")
        spec = ("journal", os.path.join(tmpdir, "study.log"))
    return spec, tmpdir


def _warm_start(
    study: optuna.Study,
    enc: Encoding,
    evaluator: Evaluator,
    training: Training,
    space: SearchSpace,
    structs: list[Structure],
    missing: int,
) -> None:
    """Enqueue up to WARM_START heuristic layouts (at most ``missing``, the trials still to run)
    before the sampler takes over; trials already enqueued are skipped."""
    warm = heuristic_candidates(
        evaluator.model,
        evaluator.cluster,
        training,
        space,
        k=min(WARM_START, missing),
        legal=structs,
    )
    for s, k in warm:
        study.enqueue_trial(
            enc.params(s, k), user_attrs={"origin": "heuristic"}, skip_if_exists=True
        )


def _optimize_in_workers(
    evaluator: Evaluator,
    training: Training,
    space: SearchSpace,
    spec: StorageSpec,
    name: str,
    sampler: str,
    trials: int,
    workers: int,
    seed: int | None,
    deadline: Deadline,
) -> tuple[optuna.Study, int, list[str]]:
    """Run the missing trials in ``workers`` local processes; then the study reopened, the
    trials of dead workers marked FAIL (their count), and a line per worker that died."""
    from planner.search.optuna_workers import spawn_workers  # imports this module

    dead = spawn_workers(
        evaluator, training, space, spec, name, sampler, trials, workers, seed, deadline
    )
    store = open_storage(spec)
    study = open_study(store, name, make_sampler(sampler, seed, trials))
    orphans = fail_orphans(study, store)
    said = [d.describe(finished_trials(study, d.pid)) for d in dead]
    return study, orphans, said


def _check_workers_finished(
    done: int,
    trials: int,
    workers: int,
    said: list[str],
    spec: StorageSpec,
    name: str,
    temporary: bool,
) -> None:
    """Raise when the workers all stopped before the study held ``trials`` finished trials
    (``done`` of them), with what each dead worker said and how to resume."""
    if done < trials:
        raise PlannerError(
            "workers",
            f"all {workers} workers stopped with the study at {done} of {trials} "
            f"trials: {'; '.join(said)}",
            _resume_hint(spec, name, temporary, done),
        )


def _record_stats(
    stats: dict[str, int],
    n_finished: int,
    resumed: int,
    n_complete: int,
    distinct: int,
    orphans: int,
) -> None:
    """Fill ``stats`` (trial counts, see :func:`optuna_search`): PRUNED trials are the finished
    ones not COMPLETE, duplicates the COMPLETE ones beyond the ``distinct`` candidates."""
    stats.update(
        trials=n_finished,
        resumed=resumed,
        rejected=n_finished - n_complete,
        distinct=distinct,
        duplicates=n_complete - distinct,
        orphans=orphans,
    )


def _resume_hint(spec: StorageSpec, name: str, temporary: bool, done: int) -> str:
    """How to resume a study whose workers all died."""
    if not temporary:
        return f"rerun with the same storage ({spec[1]}) and study ({name}) to resume"
    if done:
        return f"rerun with --storage {spec[1]} to resume from the {done} finished trials"
    return "rerun; with --storage FILE.log a later run resumes from the finished trials"


def _optimize_here(
    study: optuna.Study,
    enc: Encoding,
    evaluator: Evaluator,
    training: Training,
    trials: int,
    done: int,
    progress: Callable[[int, int], None] | None,
    deadline: Deadline = NO_DEADLINE,
) -> None:
    """Run the missing trials in this process, reporting progress(done, trials) and checking
    the deadline after each trial."""
    counter = [done]

    def after(_: optuna.Study, t: FrozenTrial) -> None:
        if t.state in FINISHED:
            counter[0] += 1
        if progress is not None:
            progress(counter[0], trials)
        deadline.check()

    fn = LayoutObjective(enc, evaluator, training)
    local = LocalSteps(fn.explored, trials)
    while counter[0] < trials:
        study.optimize(fn, n_trials=trials - counter[0], callbacks=[after, local])


# ---- command line: one worker on a shared study (planner/search/optuna_workers.py) -----------


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m planner.search.optuna_search``: see :func:`optuna_workers.main`."""
    from planner.search.optuna_workers import main as worker_main

    return worker_main(argv)


if __name__ == "__main__":
    raise SystemExit(main())
