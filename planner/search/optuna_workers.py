"""Local and remote worker processes of an Optuna layout search sharing one stored study.

``optuna_search(workers=W)`` starts W local processes (:func:`spawn_workers`); a worker that
dies is reported and the others finish the study. Workers on other hosts join with
``python -m planner.search.optuna_search --storage ... --study ...`` (:func:`main`).
"""

from __future__ import annotations

import argparse
import dataclasses
import multiprocessing
import multiprocessing.connection
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

import optuna
from pydantic import ValidationError

from planner.errors import PlannerError, pydantic_error_to_planner
from planner.profile import CalibrationProfile
from planner.search.budget import NO_DEADLINE, Deadline
from planner.search.evaluate import OBJECTIVES, Evaluator, Objective
from planner.search.optuna_search import (
    DEFAULT_STUDY,
    SAMPLERS,
    Encoding,
    LayoutObjective,
    LocalSteps,
    check_seed,
    legal_structures,
    make_sampler,
)
from planner.search.optuna_storage import (
    StorageSpec,
    check_fingerprint,
    fingerprint,
    finished_trials,
    open_storage,
    open_study,
    storage_spec,
)
from planner.search.space import SearchSpace, default_space
from planner.specs.hardware import Cluster
from planner.specs.knobs import CROSS_ENTROPY_KINDS
from planner.specs.layout import Training
from planner.specs.model import ModelSpec
from planner.specs.stack import StackSpec

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
    stack: dict[str, Any] | None = None  # StackSpec fields; None: candidates as given


@dataclass(frozen=True)
class WorkerExit:
    """A local worker process that ended with a non-zero exit code (negative: killed by that
    signal, as in :attr:`multiprocessing.Process.exitcode`)."""

    rank: int
    pid: int
    exitcode: int

    def describe(self, trials: int) -> str:
        how = (
            f"died with signal {-self.exitcode}"
            if self.exitcode < 0
            else f"exited with status {self.exitcode}"
        )
        return f"worker {self.rank} (pid {self.pid}) {how} after {trials} trial" + (
            "" if trials == 1 else "s"
        )


def space_axes(space: SearchSpace) -> dict[str, Any]:
    return {
        f.name: getattr(space, f.name) for f in dataclasses.fields(space) if f.name != "rejected"
    }


def run_worker(cfg: WorkerConfig) -> int:
    """Join the study in ``cfg.storage`` and run trials until it holds ``cfg.trials`` finished
    ones (COMPLETE or PRUNED, counting every worker's), at least one of them this worker's (a
    worker that starts after the others have finished still reports in); returns how many
    trials it ran."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    model = ModelSpec.model_validate(cfg.model)
    cluster = Cluster.model_validate(cfg.cluster)
    profile = CalibrationProfile.model_validate(cfg.profile)
    training = Training.model_validate(cfg.training)
    space = SearchSpace(**cfg.space)
    objective: Objective = cfg.objective  # type: ignore[assignment]
    evaluator = Evaluator(model, cluster, profile, objective, cfg.memory_headroom, cfg.tokens)
    evaluator.stack = StackSpec.model_validate(cfg.stack) if cfg.stack else None
    enc = Encoding(legal_structures(model, cluster, training, space), space)
    storage = open_storage(cfg.storage)
    if storage is None:
        raise PlannerError("storage", "a worker needs a shared storage", "a journal file or URL")
    study = open_study(storage, cfg.study_name, make_sampler(cfg.sampler, cfg.seed, cfg.trials))
    check_fingerprint(study, fingerprint(evaluator, training, space), str(cfg.storage[1]))
    fn = LayoutObjective(enc, evaluator, training, cfg.rank)
    local = LocalSteps(fn.explored, cfg.trials)
    ran = 0
    while ran == 0 or finished_trials(study) < cfg.trials:
        study.optimize(fn, n_trials=1, callbacks=[local])
        ran += 1
    return ran


def _worker_process(cfg: WorkerConfig) -> None:
    """Target of a local worker process: a bad input is one stderr line and exit status 2."""
    try:
        run_worker(cfg)
    except PlannerError as exc:
        sys.stderr.write(f"error: worker {cfg.rank}: {exc}\n")
        raise SystemExit(2) from None
    except KeyboardInterrupt:  # the parent was interrupted too and reports it
        raise SystemExit(130) from None


def run_workers(cfgs: Sequence[WorkerConfig], deadline: Deadline = NO_DEADLINE) -> list[WorkerExit]:
    """Run one process per config until all have ended; the ones that failed (killed, or
    exited non-zero). Past the deadline (or on an interrupt) the workers are terminated."""
    ctx = multiprocessing.get_context("spawn")
    procs = [
        ctx.Process(target=_worker_process, args=(c,), name=f"planner-optuna-{c.rank}")
        for c in cfgs
    ]
    try:
        for p in procs:
            p.start()
        running = list(procs)
        while running:
            left = deadline.remaining_s()
            multiprocessing.connection.wait(
                [p.sentinel for p in running], timeout=None if left is None else max(left, 0.0)
            )
            running = [p for p in running if p.exitcode is None]
            deadline.check()
    finally:
        for p in procs:
            if p.is_alive():  # interrupted or out of time: take the workers down too
                p.terminate()
            if p.pid is not None:
                p.join()
    return [
        WorkerExit(c.rank, p.pid or 0, p.exitcode or 0)
        for c, p in zip(cfgs, procs, strict=True)
        if p.exitcode
    ]


def spawn_workers(
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
) -> list[WorkerExit]:
    base = {
        "model": evaluator.model.model_dump(),
        "cluster": evaluator.cluster.model_dump(),
        "profile": evaluator.profile.model_dump(),
        "training": training.model_dump(include=training.model_fields_set),
        "space": space_axes(space),
        "objective": evaluator.objective,
        "stack": evaluator.stack.model_dump() if evaluator.stack else None,
        "memory_headroom": evaluator.memory_headroom,
        "tokens": evaluator.tokens,
        "sampler": sampler,
        "storage": spec,
        "study_name": name,
        "trials": trials,
    }
    cfgs = [
        WorkerConfig(**base, seed=None if seed is None else seed + r, rank=r)
        for r in range(workers)
    ]
    return run_workers(cfgs, deadline)


# ---- command line: one worker on a shared study -----------------------------------------------


class _OneLineParser(argparse.ArgumentParser):
    """Usage errors as one ``error:`` line and exit status 2 (the full usage on --help)."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"error: {self.prog}: {message}\n")
        raise SystemExit(2)


def _gpu_list(text: str) -> tuple[int, ...]:
    try:
        gpus = tuple(int(g) for g in text.split(","))
    except ValueError:
        gpus = ()
    if not gpus or min(gpus) < 1:
        raise PlannerError("--gpus", f"{text!r}", "positive GPU counts, comma separated")
    return gpus


def _parser() -> _OneLineParser:
    """The command line of one worker (``python -m planner.search.optuna_search``)."""
    ap = _OneLineParser(prog="python -m planner.search.optuna_search")
    ap.add_argument("--storage", required=True, help="RDB URL, *.log / *.journal, journal:PATH")
    ap.add_argument("--study", default=DEFAULT_STUDY)
    ap.add_argument("--model", required=True)
    ap.add_argument("--cluster", required=True)
    ap.add_argument("--gpus", required=True, help="GPU count(s), comma separated")
    ap.add_argument("--global-batch", type=int, required=True)
    ap.add_argument("--seq-len", type=int, default=4096)
    ap.add_argument("--precision", default=None, help="default: the --stack's, else bf16")
    ap.add_argument(
        "--stack", default=None, help="as planner search --stack; must match the study's"
    )
    ap.add_argument("--cross-entropy", default=None, choices=CROSS_ENTROPY_KINDS)
    ap.add_argument("--optimizer-offload", action="store_true", help="as planner search's")
    ap.add_argument("--checkpoint-offload", action="store_true", help="as planner search's")
    ap.add_argument(
        "--recompute-fractions", default=None, help="as planner search's; must match the study's"
    )
    ap.add_argument("--objective", default="tokens_per_s", choices=OBJECTIVES)
    ap.add_argument("--tokens", type=float, default=None)
    ap.add_argument("--memory-headroom", type=float, default=0.0)
    ap.add_argument("--sampler", default="tpe", choices=SAMPLERS)
    ap.add_argument("--trials", type=int, default=300)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument(
        "--schedules",
        default="megatron",
        help="as planner search --schedules (all | megatron | a,b,c); must match the study's",
    )
    return ap


def _worker_config(a: argparse.Namespace) -> WorkerConfig:
    """The worker's config from its parsed command line: the default search space and
    calibration profile of the model and cluster. Raises PlannerError on bad input."""
    import planner

    if a.trials < 1:
        raise PlannerError("--trials", f"{a.trials} is below 1", "an integer >= 1")
    check_seed(a.seed, 1)
    model, cluster = planner.load_model(a.model), planner.load_cluster(a.cluster)
    gpus = _gpu_list(a.gpus)
    from planner.search.jobs import search_training  # lazy, as parse_schedules below

    offload = (a.optimizer_offload, a.checkpoint_offload)
    training = search_training(a.seq_len, a.global_batch, a.precision, a.cross_entropy, offload)
    space = default_space(model, cluster, gpus, a.seq_len)
    from planner.search import parse_schedules  # lazy: the package imports this module
    from planner.search.jobs import parse_recompute_fractions, search_space

    stack = planner.load_stack(a.stack) if a.stack else None
    shares = parse_recompute_fractions(a.recompute_fractions)
    space = search_space(space, parse_schedules(a.schedules), stack, shares)
    spec = storage_spec(a.storage)
    if spec[0] == "memory":  # pragma: no cover - storage_spec never returns it for a string
        raise PlannerError("storage", "a worker needs a shared storage", "a file or URL")
    return WorkerConfig(
        model=model.model_dump(),
        cluster=cluster.model_dump(),
        profile=planner.default_profile(cluster).model_dump(),
        training=training.model_dump(include=training.model_fields_set),
        space=space_axes(space),
        objective=a.objective,
        stack=stack.model_dump() if stack else None,
        memory_headroom=a.memory_headroom,
        tokens=a.tokens,
        sampler=a.sampler,
        storage=spec,
        study_name=a.study,
        trials=a.trials,
        seed=a.seed,
        rank=a.rank,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m planner.search.optuna_search``: join a shared study as one worker.

    Uses the default search space and calibration profile of the model and cluster; the study's
    fingerprint check refuses to join a study made for another problem. Bad input is one
    ``error:`` line on stderr and exit status 2.
    """
    a = _parser().parse_args(argv)
    try:
        ran = run_worker(_worker_config(a))
    except PlannerError as exc:
        err: PlannerError = exc
    except ValidationError as exc:
        err = pydantic_error_to_planner(exc, "input")
    except OSError as exc:
        err = PlannerError(a.storage, f"cannot use the storage: {exc.strerror or exc}")
    else:
        print(f"worker {a.rank}: ran {ran} trials")
        return 0
    sys.stderr.write("error: " + " ".join(str(err).split()) + "\n")
    return 2
