"""Optuna search over legal layouts only: suggest, repair to the nearest legal structure, evaluate.

Each trial suggests the structure in an encoded numeric space (log2 of tp, cp, pp, vpp, ep,
micro-batch and GPU count; integer exponents where every legal value is a power of two, else a
float log2) plus the knobs as categoricals, then *repairs* the point to the nearest legal
structure (weighted L1 distance in the encoded space), so every simulated layout is legal. The
objective is the evaluator's score (maximised); memory feasibility is a soft constraint
``memory_over_gib`` = peak - limit (GiB, <= 0 feasible) set with ``Trial.set_constraint``.

A study may live in memory, in an RDB (``sqlite:///x.db``, ``postgresql://...``) or in a journal
file (``x.log``, ``x.journal``, ``journal:PATH``); a stored study is resumed (only the missing
COMPLETE trials are run) and may be shared by several local worker processes, or by workers on
other hosts started as ``python -m planner.search.optuna_search --storage ... --study ...``.
A fingerprint of the problem is kept in the study so that a study is never resumed for another
problem.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import math
import multiprocessing
import os
import shutil
import socket
import tempfile
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import optuna
from optuna.storages import BaseStorage
from optuna.trial import FrozenTrial, Trial, TrialState

from planner.errors import PlannerError
from planner.profile import CalibrationProfile
from planner.search.evaluate import Evaluated, Evaluator, Objective
from planner.search.heuristics import heuristic_candidates
from planner.search.space import (
    Knobs,
    SearchSpace,
    Structure,
    default_space,
    make_candidate,
    structures,
)
from planner.specs.hardware import Cluster
from planner.specs.layout import CROSS_ENTROPY_KINDS, Layout, Training
from planner.specs.model import ModelSpec

SAMPLERS = ("tpe", "nsga2", "gp", "random")
DEFAULT_STUDY = "planner-search"
CONSTRAINT = "memory_over_gib"
FINGERPRINT_ATTR = "planner_fingerprint"
# structural axes in the order of the encoded vector; weights of the repair distance (a change of
# GPU count changes the problem most, a change of micro-batch or interleaving the least)
AXES = ("tp", "cp", "pp", "vpp", "ep", "micro_batch", "gpus")
AXIS_WEIGHTS = {
    "tp": 2.0,
    "cp": 2.0,
    "pp": 2.0,
    "vpp": 1.0,
    "ep": 2.0,
    "micro_batch": 1.0,
    "gpus": 4.0,
}
KNOB_AXES = (
    "recompute",
    "zero",
    "sequence_parallel",
    "overlap_tp_comm",
    "overlap_dp_grad_reduce",
    "overlap_ep_comm",
)
WARM_START = 5  # heuristic layouts enqueued before the sampler takes over
# A journal writer holds the file lock only while it appends and fsyncs one record (ms); a worker
# killed meanwhile leaves the lock behind, which the others break after this many seconds
# without a write (Optuna's default, 30 s, stalls a resume after a kill for that long).
JOURNAL_LOCK_GRACE_S = 5

StorageSpec = tuple[str, str | None]  # ("memory", None) | ("journal", path) | ("rdb", url)


# ---- encoding and repair ----------------------------------------------------------------------


@dataclass(frozen=True)
class _Dim:
    """One suggested structural axis: param ``log2_<axis>`` in [low, high] (log2 units)."""

    axis: str
    low: float
    high: float
    integer: bool

    @property
    def param(self) -> str:
        return f"log2_{self.axis}"


class Encoding:
    """The legal structures of one problem, their encoded matrix, and the trial parameters.

    Row i of ``matrix`` is log2 of (tp, cp, pp, vpp, ep, micro_batch, gpus) of ``structs[i]``.
    Axes with one legal value and knobs with one allowed value are not suggested at all; every
    other domain depends only on the problem, so it is identical in every trial of a study.
    """

    def __init__(self, structs: Sequence[Structure], space: SearchSpace) -> None:
        if not structs:
            raise PlannerError(
                "search",
                "no legal layout in the search space",
                "more GPUs, another global batch, or wider axes",
            )
        self.structs = list(structs)
        self.matrix = np.log2(
            np.array([[getattr(s, a) for a in AXES] for s in self.structs], dtype=float)
        )
        self.weights = np.array([AXIS_WEIGHTS[a] for a in AXES])
        self.fixed = self.matrix[0].copy()
        self.dims: list[tuple[int, _Dim]] = []
        for j, axis in enumerate(AXES):
            col = self.matrix[:, j]
            lo, hi = float(col.min()), float(col.max())
            if lo == hi:
                continue
            integer = bool(np.all(col == np.round(col)))
            if integer:
                lo, hi = float(round(lo)), float(round(hi))
            self.dims.append((j, _Dim(axis, lo, hi, integer)))
        self.knob_choices: dict[str, tuple[Any, ...]] = {
            name: tuple(getattr(space, name)) for name in KNOB_AXES
        }
        for name, choices in self.knob_choices.items():
            if not choices:
                raise PlannerError(f"space.{name}", "empty domain", "at least one value")

    def suggest(self, trial: Trial) -> tuple[np.ndarray, Knobs]:
        """The trial's encoded structural point (not yet legal) and its knobs."""
        x = self.fixed.copy()
        for j, d in self.dims:
            if d.integer:
                x[j] = trial.suggest_int(d.param, int(d.low), int(d.high))
            else:
                x[j] = trial.suggest_float(d.param, d.low, d.high)
        knobs = {
            name: (choices[0] if len(choices) == 1 else trial.suggest_categorical(name, choices))
            for name, choices in self.knob_choices.items()
        }
        return x, Knobs(**knobs)

    def repair(self, x: np.ndarray) -> Structure:
        """The legal structure nearest to ``x`` (weighted L1 in log2 units; ties: first in
        generator order, i.e. the smaller values)."""
        dist = np.abs(self.matrix - x) @ self.weights
        return self.structs[int(np.argmin(dist))]

    def params(self, s: Structure, k: Knobs) -> dict[str, Any]:
        """Trial parameters that repair exactly to ``s`` with knobs ``k`` (for enqueue_trial)."""
        out: dict[str, Any] = {}
        for _, d in self.dims:
            v = math.log2(getattr(s, d.axis))
            out[d.param] = round(v) if d.integer else v
        for name, choices in self.knob_choices.items():
            if len(choices) > 1:
                out[name] = getattr(k, name)
        return out


# ---- candidates stored in trials --------------------------------------------------------------


def _candidate_attr(gpus: int, layout: Layout, training: Training) -> dict[str, Any]:
    """The JSON-able record of one evaluated candidate kept in a trial's user attrs."""
    return {
        "gpus": gpus,
        "layout": layout.model_dump(mode="json"),
        "micro_batch": training.micro_batch,
        "recompute": training.recompute,
    }


def _candidate_from_attr(attr: dict[str, Any], training: Training) -> tuple[int, Layout, Training]:
    layout = Layout.model_validate(attr["layout"])
    tr = training.model_copy(
        update={"micro_batch": attr["micro_batch"], "recompute": attr["recompute"]}
    )
    return int(attr["gpus"]), layout, tr


def _rank(results: Sequence[Evaluated]) -> list[Evaluated]:
    """Best first, feasible candidates before the rest (as :func:`exhaustive`)."""
    return sorted(results, key=lambda e: (not e.feasible, -e.score))


def _collect(
    study: optuna.Study, evaluator: Evaluator, training: Training
) -> tuple[list[Evaluated], int]:
    """Every distinct candidate of the study's COMPLETE trials, re-evaluated through the
    evaluator's cache (so each is simulated at most once here), ranked; and the trial count."""
    seen: dict[tuple[int, Layout, Training], Evaluated] = {}
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    for t in complete:
        attr = t.user_attrs.get("candidate")
        if attr is None:
            continue
        key = _candidate_from_attr(attr, training)
        if key not in seen:
            seen[key] = evaluator(*key)
    return _rank(list(seen.values())), len(complete)


# ---- the objective ----------------------------------------------------------------------------


class _Objective:
    """Suggest, repair, evaluate, record. ``rank``: the worker that runs it (0 in-process)."""

    def __init__(
        self, enc: Encoding, evaluator: Evaluator, training: Training, rank: int = 0
    ) -> None:
        self.enc = enc
        self.evaluator = evaluator
        self.training = training
        self.rank = rank
        self.duplicates = 0  # trials whose candidate this process had already evaluated
        self.host = socket.gethostname()

    def __call__(self, trial: Trial) -> float:
        # host and pid first: they identify the trial's process if it is killed (orphans)
        trial.set_user_attr("host", self.host)
        trial.set_user_attr("pid", os.getpid())
        trial.set_user_attr("worker", self.rank)
        x, knobs = self.enc.suggest(trial)
        s = self.enc.repair(x)
        layout, tr = make_candidate(s, knobs, self.training)
        duplicate = (s.gpus, layout, tr) in self.evaluator.cache
        self.duplicates += duplicate
        ev = self.evaluator(s.gpus, layout, tr)
        limit = ev.report.usable_memory_gib * (1.0 - self.evaluator.memory_headroom)
        trial.set_user_attr("candidate", _candidate_attr(s.gpus, layout, tr))
        trial.set_user_attr("duplicate", duplicate)
        trial.set_user_attr("tokens_per_s", ev.report.tokens_per_s)
        trial.set_user_attr("peak_memory_gib", ev.report.peak_memory_gib)
        trial.set_constraint(CONSTRAINT, ev.report.peak_memory_gib - limit)
        return ev.score


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


def storage_spec(storage: str | os.PathLike[str] | None) -> StorageSpec:
    """Classify a ``storage`` argument: None (memory), a journal file, or an RDB URL."""
    if storage is None:
        return ("memory", None)
    text = os.fspath(storage)
    if text.startswith("journal:"):
        path = text[len("journal:") :]
        if not path:
            raise PlannerError("storage", "journal: needs a file path", "journal:PATH")
        return ("journal", path)
    if text.endswith((".log", ".journal")):
        return ("journal", text)
    if "://" in text:
        return ("rdb", text)
    raise PlannerError(
        "storage",
        f"cannot tell what storage {text!r} is",
        "an RDB URL (sqlite:///x.db, postgresql://...), a path ending in .log or .journal, "
        "or journal:PATH",
    )


def open_storage(spec: StorageSpec) -> BaseStorage | None:
    """The Optuna storage of ``spec`` (None: let create_study make an in-memory one)."""
    kind, target = spec
    if kind == "memory":
        return None
    assert target is not None
    if kind == "journal":
        from optuna.storages.journal import (
            JournalFileBackend,
            JournalFileSymlinkLock,
            JournalStorage,
        )

        parent = os.path.dirname(os.path.abspath(target))
        os.makedirs(parent, exist_ok=True)
        lock = JournalFileSymlinkLock(target, grace_period=JOURNAL_LOCK_GRACE_S)
        return JournalStorage(JournalFileBackend(target, lock_obj=lock))
    # heartbeats let a resumed or shared study fail the trials of killed workers
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.storages.RDBStorage(target, heartbeat_interval=60, grace_period=180)


def _fingerprint(evaluator: Evaluator, training: Training, space: SearchSpace) -> str:
    """A hash of everything that determines the candidates and their scores."""
    axes = {
        f.name: getattr(space, f.name) for f in dataclasses.fields(space) if f.name != "rejected"
    }
    blob = json.dumps(
        {
            "model": evaluator.model.model_dump(mode="json"),
            "cluster": evaluator.cluster.model_dump(mode="json"),
            "profile": evaluator.profile.model_dump(mode="json"),
            "objective": evaluator.objective,
            "memory_headroom": evaluator.memory_headroom,
            "tokens": evaluator.tokens,
            "training": training.model_dump(mode="json"),
            "space": axes,
        },
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _open_study(
    storage: BaseStorage | None, name: str, sampler: optuna.samplers.BaseSampler
) -> optuna.Study:
    return optuna.create_study(
        storage=storage,
        study_name=name,
        sampler=sampler,
        direction="maximize",
        load_if_exists=True,
    )


def _check_fingerprint(study: optuna.Study, fingerprint: str, where: str) -> None:
    """Stamp a new study with the problem's fingerprint; refuse one made for another problem."""
    have = study.user_attrs.get(FINGERPRINT_ATTR)
    if have is None:
        if study.get_trials(deepcopy=False):
            raise PlannerError(
                "study",
                f"study {study.study_name!r} in {where} was not made by the planner",
                "a new study name",
            )
        study.set_user_attr(FINGERPRINT_ATTR, fingerprint)
    elif have != fingerprint:
        raise PlannerError(
            "study",
            f"study {study.study_name!r} in {where} was made for another problem "
            "(model, cluster, profile, training, objective or search space differ)",
            "a new study name, or the same problem",
        )


def _pid_dead(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def _fail_orphans(study: optuna.Study, storage: BaseStorage | None) -> int:
    """Mark RUNNING trials of dead processes on this host FAIL (a killed worker leaves its last
    trial RUNNING forever in a journal file); returns how many. RDB storages use heartbeats.

    A trial killed before it recorded its host and pid stays RUNNING; that is harmless (only
    COMPLETE trials are counted and returned)."""
    if storage is None:
        return 0
    if isinstance(storage, optuna.storages.RDBStorage):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            before = _count(study, TrialState.FAIL)
            optuna.storages.fail_stale_trials(study)
            return _count(study, TrialState.FAIL) - before
    host, n = socket.gethostname(), 0
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        pid = t.user_attrs.get("pid")
        if t.user_attrs.get("host") == host and isinstance(pid, int) and _pid_dead(pid):
            try:
                storage.set_trial_state_values(t._trial_id, TrialState.FAIL)
                n += 1
            except (RuntimeError, ValueError):  # finished meanwhile
                pass
    return n


def _count(study: optuna.Study, state: TrialState) -> int:
    return len(study.get_trials(deepcopy=False, states=(state,)))


def _complete(study: optuna.Study) -> int:
    return _count(study, TrialState.COMPLETE)


# ---- workers ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class WorkerConfig:
    """Everything a worker process needs, as plain picklable data."""

    model: dict[str, Any]
    cluster: dict[str, Any]
    profile: dict[str, Any]
    training: dict[str, Any]
    space: dict[str, Any]
    objective: str
    memory_headroom: float
    tokens: float | None
    sampler: str
    storage: StorageSpec
    study_name: str
    trials: int
    seed: int | None
    rank: int


def _space_axes(space: SearchSpace) -> dict[str, Any]:
    return {
        f.name: getattr(space, f.name) for f in dataclasses.fields(space) if f.name != "rejected"
    }


def run_worker(cfg: WorkerConfig) -> int:
    """Join the study in ``cfg.storage`` and run trials until it holds ``cfg.trials`` COMPLETE
    ones (counting every worker's), at least one of them this worker's (a worker that starts
    after the others have finished still reports in); returns how many trials it ran."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    model = ModelSpec.model_validate(cfg.model)
    cluster = Cluster.model_validate(cfg.cluster)
    profile = CalibrationProfile.model_validate(cfg.profile)
    training = Training.model_validate(cfg.training)
    space = SearchSpace(**cfg.space)
    objective: Objective = cfg.objective  # type: ignore[assignment]
    evaluator = Evaluator(model, cluster, profile, objective, cfg.memory_headroom, cfg.tokens)
    enc = Encoding(list(structures(model, cluster, training, space)), space)
    storage = open_storage(cfg.storage)
    if storage is None:
        raise PlannerError("storage", "a worker needs a shared storage", "a journal file or URL")
    study = _open_study(storage, cfg.study_name, make_sampler(cfg.sampler, cfg.seed, cfg.trials))
    _check_fingerprint(study, _fingerprint(evaluator, training, space), str(cfg.storage[1]))
    fn = _Objective(enc, evaluator, training, cfg.rank)
    ran = 0
    while ran == 0 or _complete(study) < cfg.trials:
        study.optimize(fn, n_trials=1)
        ran += 1
    return ran


def _run_workers(cfgs: Sequence[WorkerConfig]) -> None:
    ctx = multiprocessing.get_context("spawn")
    procs = [
        ctx.Process(target=run_worker, args=(c,), name=f"planner-optuna-{c.rank}") for c in cfgs
    ]
    for p in procs:
        p.start()
    try:
        for p in procs:
            p.join()
    finally:
        for p in procs:
            if p.is_alive():  # the parent was interrupted: take the workers down with it
                p.terminate()
                p.join()
    bad = [(p.name, p.exitcode) for p in procs if p.exitcode != 0]
    if bad:
        raise PlannerError(
            "workers",
            "worker processes failed: " + ", ".join(f"{n} exit {c}" for n, c in bad),
            "see their stderr; finished trials are kept in the storage",
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
) -> list[Evaluated]:
    """Search legal layouts with an Optuna sampler; every evaluated candidate, best first.

    ``trials``: COMPLETE trials the study should hold at the end (a resumed study runs only the
    remainder). ``storage``: None (in memory), an RDB URL, or a journal file (``*.log``,
    ``*.journal``, ``journal:PATH``). ``workers``: local processes sharing the study (a
    temporary journal file when ``storage`` is None); worker r uses seed ``seed + r``.
    ``progress(done, total)``: called after each trial of the in-process path. ``stats``, when
    given, receives trials (COMPLETE in the study), resumed (COMPLETE before this call),
    distinct (candidates returned), duplicates (trials - distinct) and orphans (trials of dead
    workers marked FAIL).

    The result holds the distinct candidates of *all* COMPLETE trials of the study, ranked as by
    :func:`exhaustive` (feasible first, then by score), each simulated at most once by
    ``evaluator``.
    """
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if sampler not in SAMPLERS:
        raise PlannerError("sampler", f"unknown sampler {sampler!r}", ", ".join(SAMPLERS))
    if trials < 1:
        raise PlannerError("trials", f"{trials}", "an integer >= 1")
    if workers < 1:
        raise PlannerError("workers", f"{workers}", "an integer >= 1")
    model, cluster = evaluator.model, evaluator.cluster
    spec = storage_spec(storage)
    tmpdir = None
    if workers > 1 and spec[0] == "memory":
        tmpdir = tempfile.mkdtemp(prefix="planner-optuna-")
        spec = ("journal", os.path.join(tmpdir, "study.log"))
    name = study_name or DEFAULT_STUDY
    try:
        structs = list(structures(model, cluster, training, space))
        enc = Encoding(structs, space)
        store = open_storage(spec)
        study = _open_study(store, name, make_sampler(sampler, seed, trials))
        _check_fingerprint(study, _fingerprint(evaluator, training, space), str(spec[1]))
        orphans = _fail_orphans(study, store)
        resumed = _complete(study)
        if resumed < trials:
            warm = heuristic_candidates(
                model, cluster, training, space, k=min(WARM_START, trials - resumed), legal=structs
            )
            for s, k in warm:
                study.enqueue_trial(enc.params(s, k), skip_if_exists=True)
        if workers == 1:
            if resumed < trials:
                _optimize_here(study, enc, evaluator, training, trials, resumed, progress)
        elif resumed < trials:
            base = {
                "model": model.model_dump(),
                "cluster": cluster.model_dump(),
                "profile": evaluator.profile.model_dump(),
                "training": training.model_dump(),
                "space": _space_axes(space),
                "objective": evaluator.objective,
                "memory_headroom": evaluator.memory_headroom,
                "tokens": evaluator.tokens,
                "sampler": sampler,
                "storage": spec,
                "study_name": name,
                "trials": trials,
            }
            _run_workers(
                [
                    WorkerConfig(**base, seed=None if seed is None else seed + r, rank=r)
                    for r in range(workers)
                ]
            )
            study = _open_study(open_storage(spec), name, make_sampler(sampler, seed, trials))
        ranked, n_complete = _collect(study, evaluator, training)
    finally:
        if tmpdir is not None:
            shutil.rmtree(tmpdir, ignore_errors=True)
    if stats is not None:
        stats.update(
            trials=n_complete,
            resumed=resumed,
            distinct=len(ranked),
            duplicates=n_complete - len(ranked),
            orphans=orphans,
        )
    return ranked


def _optimize_here(
    study: optuna.Study,
    enc: Encoding,
    evaluator: Evaluator,
    training: Training,
    trials: int,
    done: int,
    progress: Callable[[int, int], None] | None,
) -> None:
    """Run the missing trials in this process, reporting progress(done, trials)."""
    counter = [done]

    def after(_: optuna.Study, t: FrozenTrial) -> None:
        if t.state == TrialState.COMPLETE:
            counter[0] += 1
        if progress is not None:
            progress(counter[0], trials)

    fn = _Objective(enc, evaluator, training)
    while counter[0] < trials:
        study.optimize(fn, n_trials=trials - counter[0], callbacks=[after])


# ---- command line: one worker on a shared study -----------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m planner.search.optuna_search``: join a shared study as one worker.

    Uses the default search space and calibration profile of the model and cluster; the study's
    fingerprint check refuses to join a study made for another problem.
    """
    import planner

    ap = argparse.ArgumentParser(prog="python -m planner.search.optuna_search")
    ap.add_argument("--storage", required=True, help="RDB URL, *.log / *.journal, journal:PATH")
    ap.add_argument("--study", default=DEFAULT_STUDY)
    ap.add_argument("--model", required=True)
    ap.add_argument("--cluster", required=True)
    ap.add_argument("--gpus", required=True, help="GPU count(s), comma separated")
    ap.add_argument("--global-batch", type=int, required=True)
    ap.add_argument("--seq-len", type=int, default=4096)
    ap.add_argument("--precision", default="bf16")
    ap.add_argument("--cross-entropy", default="fp32_copy", choices=CROSS_ENTROPY_KINDS)
    ap.add_argument("--objective", default="tokens_per_s")
    ap.add_argument("--tokens", type=float, default=None)
    ap.add_argument("--memory-headroom", type=float, default=0.0)
    ap.add_argument("--sampler", default="tpe", choices=SAMPLERS)
    ap.add_argument("--trials", type=int, default=300)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--rank", type=int, default=0)
    a = ap.parse_args(argv)
    try:
        model, cluster = planner.load_model(a.model), planner.load_cluster(a.cluster)
        gpus = tuple(int(g) for g in a.gpus.split(","))
        training = Training(
            seq_len=a.seq_len,
            global_batch=a.global_batch,
            precision=a.precision,
            cross_entropy=a.cross_entropy,
        )
        space = default_space(model, cluster, gpus, a.seq_len)
        spec = storage_spec(a.storage)
        if spec[0] == "memory":  # pragma: no cover - storage_spec never returns it for a string
            raise PlannerError("storage", "a worker needs a shared storage", "a file or URL")
        cfg = WorkerConfig(
            model=model.model_dump(),
            cluster=cluster.model_dump(),
            profile=planner.default_profile(cluster).model_dump(),
            training=training.model_dump(),
            space=_space_axes(space),
            objective=a.objective,
            memory_headroom=a.memory_headroom,
            tokens=a.tokens,
            sampler=a.sampler,
            storage=spec,
            study_name=a.study,
            trials=a.trials,
            seed=a.seed,
            rank=a.rank,
        )
        ran = run_worker(cfg)
    except PlannerError as exc:
        print(f"error: {exc}")
        return 2
    print(f"worker {a.rank}: ran {ran} trials")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
