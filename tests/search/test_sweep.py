"""One search over several global batches and sequence lengths (``planner.search`` with lists):
the union of the single searches, ranked together, with fronts across them."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest

import planner
from planner.errors import PlannerError
from planner.search import MAX_SWEEP_VALUES, SearchResult, SearchSpace, pareto_front

BATCHES = (8, 16)
SEQS = (1024, 2048)
# a narrow space (one GPU count, few knobs) keeps each exhaustive search under a second
NARROW = dict(micro_batch=(1, 2), recompute=("none", "full"), zero=(1,), vpp=(1, 2))


@pytest.fixture(scope="module")
def problem():
    return planner.load_model("llama3.1-8b"), planner.load_cluster("dgx-h100")


def _narrow() -> SearchSpace:
    return SearchSpace(gpus=(8,), **NARROW)


@pytest.fixture(scope="module")
def sweep(problem) -> SearchResult:
    model, cluster = problem
    return planner.search(
        model,
        cluster,
        gpus=8,
        global_batch=list(BATCHES),
        seq_len=list(SEQS),
        method="exhaustive",
        space=_narrow(),
        pareto=True,
    )


@pytest.fixture(scope="module")
def singles(problem) -> dict[tuple[int, int], SearchResult]:
    model, cluster = problem
    return {
        (b, s): planner.search(
            model, cluster, gpus=8, global_batch=b, seq_len=s, method="exhaustive", space=_narrow()
        )
        for b, s in itertools.product(BATCHES, SEQS)
    }


def test_sweep_best_is_the_best_of_the_single_searches(sweep, singles) -> None:
    best = max(singles.values(), key=lambda r: r.best.score).best
    assert sweep.best.score == best.score
    assert (sweep.best.training, sweep.best.layout) == (best.training, best.layout)
    # every combination's own winner is in the sweep's ranking, with the same score
    by_key = {(e.layout, e.training): e.score for e in sweep.ranked}
    for r in singles.values():
        assert by_key[(r.best.layout, r.best.training)] == r.best.score


def test_sweep_is_the_union_of_the_single_searches(sweep, singles) -> None:
    assert len(sweep.ranked) == sum(len(r.ranked) for r in singles.values())
    assert sweep.space_size == sum(r.space_size or 0 for r in singles.values())
    assert sweep.evaluated == sum(r.evaluated for r in singles.values())
    rules = sum((Counter(r.rejected_by_rule) for r in singles.values()), Counter())
    assert sweep.rejected_by_rule == dict(rules)
    scores = [e.score for e in sweep.ranked if e.feasible]
    assert scores == sorted(scores, reverse=True)
    feasible = [e.feasible for e in sweep.ranked]
    assert feasible == sorted(feasible, reverse=True)  # feasible first


def test_each_row_carries_its_own_batch_and_sequence(sweep, singles) -> None:
    combos = Counter((e.training.global_batch, e.training.seq_len) for e in sweep.ranked)
    assert set(combos) == set(itertools.product(BATCHES, SEQS))
    for key, r in singles.items():
        assert combos[key] == len(r.ranked)
        assert all((e.training.global_batch, e.training.seq_len) == key for e in r.ranked)
    for e in sweep.ranked:  # the report is the simulation of the row's own training
        tokens = e.training.global_batch * e.training.seq_len
        assert e.report.tokens_per_s == pytest.approx(tokens / e.report.step_time_s)
    assert any(
        "global batches searched: 8, 16; sequence lengths: 1024, 2048" in n for n in sweep.notes
    )


def test_pareto_fronts_span_every_combination(sweep) -> None:
    assert set(sweep.pareto) == {
        "tokens_per_s_vs_memory_headroom",
        "tokens_per_s_vs_gpus",
        "tokens_per_s_vs_batch_tokens",
    }
    feasible = [e for e in sweep.ranked if e.feasible]
    front = sweep.pareto["tokens_per_s_vs_batch_tokens"]
    assert front[0].score == sweep.best.score
    # the smallest batch in tokens has a member: nothing smaller can beat its fastest layout
    smallest = min(e.training.tokens_per_step for e in feasible)
    assert front[-1].training.tokens_per_step == smallest
    for e in front:  # no feasible candidate is at least as fast with a batch no larger
        rivals = [
            o
            for o in feasible
            if o.report.tokens_per_s > e.report.tokens_per_s
            and o.training.tokens_per_step <= e.training.tokens_per_step
        ]
        assert not rivals, (e.training, rivals[0].training)
    again = pareto_front(front, ("tokens_per_s", "fewer_batch_tokens"))
    assert len(again) == len(front)
    headroom = sweep.pareto["tokens_per_s_vs_memory_headroom"]
    assert headroom[0].score == sweep.best.score  # across all combinations, not one


def test_one_batch_has_no_batch_front(problem) -> None:
    model, cluster = problem
    r = planner.search(
        model, cluster, gpus=8, global_batch=16, seq_len=1024, space=_narrow(), pareto=True
    )
    assert set(r.pareto) == {"tokens_per_s_vs_memory_headroom", "tokens_per_s_vs_gpus"}
    assert not any("global batches searched" in n for n in r.notes)


def test_each_sequence_length_gets_its_own_default_space(problem) -> None:
    """CP is searched only where the sequence is long enough (default_space(seq_len))."""
    model, cluster = problem
    r = planner.search(model, cluster, gpus=8, global_batch=8, seq_len=[4096, 16384])
    cp_by_seq = {
        s: {e.layout.cp for e in r.ranked if e.training.seq_len == s} for s in (4096, 16384)
    }
    assert cp_by_seq[4096] == {1}
    assert max(cp_by_seq[16384]) > 1


def test_progress_counts_once_over_every_combination(problem) -> None:
    model, cluster = problem
    calls: list[tuple[int, int]] = []
    r = planner.search(
        model,
        cluster,
        gpus=8,
        global_batch=[8, 16, 32],
        seq_len=1024,
        method="exhaustive",
        space=_narrow(),
        progress=lambda done, total: calls.append((done, total)),
    )
    assert calls and {t for _, t in calls} == {r.space_size}
    done = [d for d, _ in calls]
    assert done == sorted(done) and done[-1] < (r.space_size or 0)
    assert len(calls) >= 3  # one report at the start of each combination at least


def test_optuna_runs_one_study_per_combination(problem, tmp_path) -> None:
    optuna = pytest.importorskip("optuna")
    from planner.search.optuna_storage import open_storage, storage_spec

    model, cluster = problem
    storage = str(tmp_path / "sweep.journal")
    kwargs = dict(gpus=8, global_batch=[8, 16], seq_len=1024, method="optuna", trials=8)
    r = planner.search(model, cluster, storage=storage, study="s", **kwargs)
    assert {e.training.global_batch for e in r.ranked} == {8, 16}
    note = "one study per (global batch, seq_len) combination, 8 trials each (2 studies)"
    assert any(note in n for n in r.notes)
    summaries = optuna.study.get_all_study_summaries(open_storage(storage_spec(storage)))
    assert {s.study_name: s.n_trials for s in summaries} == {
        "s-gb8-seq1024": 8,
        "s-gb16-seq1024": 8,
    }
    again = planner.search(model, cluster, storage=storage, study="s", **kwargs)  # resumes both
    assert again.best.score == r.best.score and again.evaluated <= r.evaluated


@pytest.mark.parametrize(
    ("kwargs", "field", "text"),
    [
        ({"global_batch": []}, "global_batch", "no value"),
        ({"global_batch": [16, 0]}, "global_batch", "below 1"),
        ({"global_batch": "16"}, "global_batch", "not an integer"),
        ({"global_batch": 16, "seq_len": [1024, 2.5]}, "seq_len", "not an integer"),
        ({"global_batch": 16, "seq_len": 0}, "seq_len", "must be positive"),
        ({"global_batch": list(range(1, MAX_SWEEP_VALUES + 2))}, "global_batch", "values"),
    ],
)
def test_bad_sweep_values_name_the_argument(problem, kwargs, field, text) -> None:
    model, cluster = problem
    with pytest.raises(PlannerError, match=text) as exc:
        planner.search(model, cluster, gpus=8, **kwargs)
    assert exc.value.field == field
    assert exc.value.valid and "integer" in exc.value.valid
