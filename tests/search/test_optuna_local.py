"""Optuna search: the walk outward from a point, the repair to unexplored candidates, the local
steps around the best trial, the warm start with context parallelism, and reproducibility."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
from optuna.storages.journal import JournalFileBackend, JournalStorage
from optuna.trial import TrialState, create_trial

import planner
from planner.search import optuna_encoding as encoding_mod
from planner.search.evaluate import Evaluator
from planner.search.heuristics import heuristic_candidates
from planner.search.optuna_encoding import (
    KNOB_WEIGHT,
    Encoding,
    Explored,
    candidate_attr,
    candidate_from_attr,
    legal_structures,
    structure_of,
)
from planner.search.optuna_search import CONSTRAINT, WARM_START, _centres, optuna_search
from planner.search.space import Knobs, SearchSpace, default_space
from planner.specs.layout import Training

GPUS, BATCH = 16, 64


def _problem(seq: int) -> tuple:
    model, cluster = planner.load_model("llama3.1-8b"), planner.load_cluster("dgx-h100")
    training = Training(seq_len=seq, global_batch=BATCH)
    space = default_space(model, cluster, (GPUS,), seq)
    return model, cluster, training, space


@pytest.fixture(scope="module")
def short() -> tuple:
    return _problem(4096)  # cp 1 only


@pytest.fixture(scope="module")
def long() -> tuple:
    return _problem(8192)  # cp 1 or 2


def _encoding(problem: tuple) -> Encoding:
    model, cluster, training, space = problem
    return Encoding(legal_structures(model, cluster, training, space), space)


@pytest.mark.parametrize("prefix", [4, 10_000])
def test_nearest_walks_every_pair_once_outward_from_the_repair(
    short: tuple, prefix: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(encoding_mod, "NEAREST_PREFIX", prefix)
    enc = _encoding(short)
    s = enc.structs[len(enc.structs) // 2]
    knobs = enc.knob_settings[len(enc.knob_settings) // 3]
    walked = list(enc.nearest(enc.point(s), knobs))
    dists = [d for d, _, _ in walked]
    assert dists == sorted(dists)
    assert len({(i, j) for _, i, j in walked}) == len(walked)
    assert len(walked) == len(enc.structs) * len(enc.knob_settings)
    assert 4 < len(enc.structs) < 10_000  # the walk passes a prefix of 4, not one of 10,000
    d_struct = enc.distances(enc.point(s))

    def knob_steps(k: Knobs) -> int:
        return sum(
            abs(c.index(getattr(k, n)) - c.index(getattr(knobs, n)))
            for n, c in enc.knob_choices.items()
        )

    for d, i, j in walked[:: max(1, len(walked) // 500)]:  # each its own distance
        assert d == pytest.approx(d_struct[i] + KNOB_WEIGHT * knob_steps(enc.knob_settings[j]))
    d0, i0, j0 = walked[0]
    assert (d0, enc.structs[i0], enc.knob_settings[j0]) == (0.0, s, knobs)
    assert enc.repair(enc.point(s)) == s


def test_a_factor_moved_between_tp_and_cp_costs_as_much_as_between_tp_and_dp(
    long: tuple,
) -> None:
    enc = _encoding(long)
    by_shape = {(s.tp, s.cp, s.pp, s.vpp, s.micro_batch): s for s in enc.structs}
    base = by_shape[2, 1, 1, 1, 1]
    tp_to_cp, tp_to_dp = by_shape[1, 2, 1, 1, 1], by_shape[1, 1, 1, 1, 1]
    assert (base.dp, tp_to_cp.dp, tp_to_dp.dp) == (8, 8, 16)
    dist = enc.distances(enc.point(base))
    i_cp, i_dp = enc.structs.index(tp_to_cp), enc.structs.index(tp_to_dp)
    assert dist[enc.structs.index(base)] == 0.0
    assert dist[i_cp] == pytest.approx(dist[i_dp]) == pytest.approx(2.0)


def test_explored_skips_known_candidates_within_its_radius(short: tuple) -> None:
    model, cluster, training, _ = short
    enc = _encoding(short)
    explored = Explored(enc, model, cluster, training)
    s, k = enc.structs[0], enc.knob_settings[0]
    x = enc.point(s)
    first = explored.novel(x, k)
    assert first is not None and first[2] == explored.candidate(s, k)
    explored.known.add(first[2])
    second = explored.novel(x, k)
    assert second is not None and second[2] != first[2]
    assert explored.novel(x, k, radius=0.0) is None  # the only pair at distance 0 is known
    assert structure_of(first[2])[0] == s


def _trial(key: tuple, value: float, over_gib: float) -> optuna.trial.FrozenTrial:
    return create_trial(
        value=value,
        params={},
        distributions={},
        user_attrs={"candidate": candidate_attr(*key)},
        system_attrs={f"constraints:{CONSTRAINT}": over_gib},
    )


def test_local_steps_start_from_the_best_feasible_then_the_least_over_memory(
    short: tuple,
) -> None:
    model, cluster, training, _ = short
    enc = _encoding(short)
    explored = Explored(enc, model, cluster, training)
    keys = [explored.candidate(s, enc.knob_settings[0]) for s in enc.structs[:6]]
    study = optuna.create_study(direction="maximize")
    assert _centres(study) == []
    study.add_trial(_trial(keys[0], 30.0, 4.0))  # over the limit, nothing feasible yet
    assert _centres(study) == []
    for key, value, over in [
        (keys[1], 10.0, -1.0),
        (keys[2], 20.0, -0.5),  # the best feasible
        (keys[3], 25.0, 1.0),  # better but over: least over first
        (keys[4], 15.0, 2.0),  # over and worse than the best feasible: never a centre
    ]:
        study.add_trial(_trial(key, value, over))
    centres = [candidate_from_attr(a, training) for a in _centres(study)]
    assert centres == [keys[2], keys[3], keys[0]]


def test_every_trial_new_and_local_steps_follow_sampler_trials(
    short: tuple, tmp_path: Path
) -> None:
    model, cluster, training, space = short
    ev = Evaluator(model, cluster, planner.default_profile(cluster))
    path, stats = tmp_path / "s.log", {}
    optuna_search(ev, training, space, trials=60, seed=0, storage=str(path), stats=stats)
    assert stats["trials"] == 60 and stats["duplicates"] == 0 == stats["rejected"]
    study = optuna.load_study(
        study_name="planner-search", storage=JournalStorage(JournalFileBackend(str(path)))
    )
    trials = study.get_trials(states=(TrialState.COMPLETE,))
    keys = [candidate_from_attr(t.user_attrs["candidate"], training) for t in trials]
    assert len(set(keys)) == len(keys) == 60
    origins = [t.user_attrs.get("origin") for t in trials]
    assert origins[:WARM_START] == ["heuristic"] * WARM_START
    local = [i for i, o in enumerate(origins) if o == "local"]
    assert len(local) >= 10  # about one trial in two once a trial is feasible
    assert all(origins[i - 1] is None for i in local)  # each follows a sampler trial


def test_seeded_search_is_reproducible_with_one_worker(short: tuple) -> None:
    model, cluster, training, space = short
    profile = planner.default_profile(cluster)

    def run(seed: int) -> list[tuple]:
        ev = Evaluator(model, cluster, profile)
        ranked = optuna_search(ev, training, space, trials=40, seed=seed)
        return [(e.gpus, e.layout, e.training) for e in ranked]

    first = run(3)
    assert run(3) == first and run(4) != first


def test_warm_start_tries_context_parallelism_when_the_space_has_it(
    short: tuple, long: tuple
) -> None:
    def cps(problem: tuple) -> set[int]:
        model, cluster, training, space = problem
        return {s.cp for s, _ in heuristic_candidates(model, cluster, training, space, k=5)}

    assert cps(long) == {1, 2} and cps(short) == {1}
    model, cluster, training, space = long
    one_cp = SearchSpace(**{**vars(space), "cp": (1,), "rejected": space.rejected.copy()})
    assert {s.cp for s, _ in heuristic_candidates(model, cluster, training, one_cp)} == {1}
