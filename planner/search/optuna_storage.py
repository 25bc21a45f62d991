"""Where an Optuna study lives and how it is kept sound: storages, the problem fingerprint,
and the trials of killed workers.

A study may live in memory, in an RDB (``sqlite:///x.db``, ``postgresql://...``) or in a journal
file (``x.log``, ``x.journal``, ``journal:PATH``). A fingerprint of the problem is kept in the
study so that a study is never resumed for another problem.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import socket
import warnings

import optuna
from optuna.storages import BaseStorage
from optuna.trial import TrialState

from planner.errors import PlannerError
from planner.search.evaluate import Evaluator
from planner.search.space import SearchSpace
from planner.specs.layout import Training

FINGERPRINT_ATTR = "planner_fingerprint"
# A journal writer holds the file lock only while it appends and fsyncs one record (ms); a worker
# killed meanwhile leaves the lock behind, which the others break after this many seconds
# without a write (Optuna's default, 30 s, stalls a resume after a kill for that long).
JOURNAL_LOCK_GRACE_S = 5
# trials that used up part of the budget: evaluated (COMPLETE) or rejected by the simulator
FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)

StorageSpec = tuple[str, str | None]  # ("memory", None) | ("journal", path) | ("rdb", url)


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


def fingerprint(evaluator: Evaluator, training: Training, space: SearchSpace) -> str:
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


def open_study(
    storage: BaseStorage | None, name: str, sampler: optuna.samplers.BaseSampler
) -> optuna.Study:
    """Create the study ``name`` (maximised), or load it when it exists."""
    return optuna.create_study(
        storage=storage,
        study_name=name,
        sampler=sampler,
        direction="maximize",
        load_if_exists=True,
    )


def check_fingerprint(study: optuna.Study, expected: str, where: str) -> None:
    """Stamp a new study with the problem's fingerprint; refuse one made for another problem."""
    have = study.user_attrs.get(FINGERPRINT_ATTR)
    if have is None:
        if study.get_trials(deepcopy=False):
            raise PlannerError(
                "study",
                f"study {study.study_name!r} in {where} was not made by the planner",
                "a new study name",
            )
        study.set_user_attr(FINGERPRINT_ATTR, expected)
    elif have != expected:
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


def fail_orphans(study: optuna.Study, storage: BaseStorage | None) -> int:
    """Mark RUNNING trials of dead processes on this host FAIL (a killed worker leaves its last
    trial RUNNING forever in a journal file); returns how many. RDB storages use heartbeats.

    A trial killed before it recorded its host and pid stays RUNNING; that is harmless (only
    finished trials are counted, and only COMPLETE ones returned)."""
    if storage is None:
        return 0
    if isinstance(storage, optuna.storages.RDBStorage):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            before = count_trials(study, TrialState.FAIL)
            optuna.storages.fail_stale_trials(study)
            return count_trials(study, TrialState.FAIL) - before
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


def count_trials(study: optuna.Study, state: TrialState) -> int:
    """Trials of the study in ``state``."""
    return len(study.get_trials(deepcopy=False, states=(state,)))


def finished_trials(study: optuna.Study, pid: int | None = None) -> int:
    """Trials that used up part of the budget (COMPLETE or PRUNED); only those run by the
    process ``pid`` when given."""
    trials = study.get_trials(deepcopy=False, states=FINISHED)
    if pid is None:
        return len(trials)
    return sum(1 for t in trials if t.user_attrs.get("pid") == pid)
