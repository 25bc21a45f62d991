"""Hostile and extreme input to the search: killed workers, time budgets, huge spaces and layer
counts, candidates the simulator refuses or reports as non-finite, strict JSON, and the
stand-alone worker's command line."""

from __future__ import annotations

import dataclasses
import math
import multiprocessing
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

import planner
import planner.search
import planner.search.evaluate as evaluate_mod
from planner.cli import main
from planner.errors import PlannerError
from planner.search.budget import Deadline
from planner.search.evaluate import Evaluator
from planner.search.exhaustive import exhaustive
from planner.search.optuna_search import main as worker_main
from planner.search.optuna_search import optuna_search
from planner.search.optuna_workers import WorkerConfig, run_workers, space_axes
from planner.search.space import POW2, default_space, legal_layouts, structures
from planner.simulate import vector
from planner.simulate.batch import BatchSimulator
from planner.specs.layout import Training

GPUS, BATCH, SEQ = 16, 64, 4096
HANG_GUARD_S = 300.0  # only stops a hung test; never a statement about speed
REAL_SIMULATE = evaluate_mod.simulate_step
REAL_FIGURES = BatchSimulator.figures
REAL_FIGURES_MANY = vector.figures_many


@pytest.fixture(scope="module")
def problem() -> tuple:
    model, cluster = planner.load_model("llama3.1-8b"), planner.load_cluster("dgx-h100")
    return (
        model,
        cluster,
        planner.default_profile(cluster),
        Training(seq_len=SEQ, global_batch=BATCH),
    )


def _space(problem: tuple):
    return default_space(problem[0], problem[1], (GPUS,), SEQ)


def _search(problem: tuple, **kw):
    model, cluster, _, _ = problem
    return planner.search(model, cluster, gpus=GPUS, global_batch=BATCH, seq_len=SEQ, **kw)


# ---- killed workers ---------------------------------------------------------------------------


@contextmanager
def _killer(ranks: set[int]) -> Iterator[dict[int, int]]:
    """Kill (SIGKILL) the local workers of these ranks as soon as each has started; yields
    rank -> pid of the killed ones. After HANG_GUARD_S every worker is killed, so a hung search
    ends in a failed test instead of a hung one."""
    killed: dict[int, int] = {}
    stop = threading.Event()

    def watch() -> None:
        start = time.monotonic()
        while not stop.is_set():
            hung = time.monotonic() - start > HANG_GUARD_S
            for p in multiprocessing.active_children():
                rank = int(p.name.rsplit("-", 1)[1]) if p.name.startswith("planner-optuna-") else -1
                if (rank in ranks and rank not in killed) or (hung and rank >= 0):
                    os.kill(p.pid, signal.SIGKILL)
                    killed.setdefault(rank, p.pid)
            stop.wait(0.01)

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    try:
        yield killed
    finally:
        stop.set()
        t.join()


def test_a_killed_worker_is_reported_and_the_others_finish(problem: tuple, tmp_path: Path) -> None:
    storage = str(tmp_path / "study.log")
    with _killer({1}) as killed:
        r = _search(problem, method="optuna", trials=60, workers=2, storage=storage, seed=7)
    assert set(killed) == {1}, "the watcher never saw worker 1"
    pid = killed[1]
    died = [n for n in r.notes if n.startswith("worker 1")]
    assert len(died) == 1 and re.fullmatch(
        rf"worker 1 \(pid {pid}\) died with signal 9 after \d+ trials?; "
        r"the others finished the study",
        died[0],
    )
    assert any("seed reproduces single-worker searches only" in n for n in r.notes)
    assert r.best.feasible and r.evaluated >= 1
    stats: dict[str, int] = {}  # the study is complete: a rerun runs nothing more
    model, cluster, profile, training = problem
    ev = Evaluator(model, cluster, profile, memory_headroom=0.0)
    optuna_search(ev, training, _space(problem), trials=60, storage=storage, stats=stats)
    assert stats["resumed"] >= 60


def test_all_workers_dead_is_one_error_that_says_how_to_resume(
    problem: tuple, tmp_path: Path
) -> None:
    storage = str(tmp_path / "study.log")
    with _killer({0, 1}) as killed, pytest.raises(PlannerError) as err:
        _search(problem, method="optuna", trials=200, workers=2, storage=storage)
    assert set(killed) == {0, 1}
    text = str(err.value)
    assert err.value.field == "workers" and "\n" not in text
    assert "all 2 workers stopped with the study at" in text and "signal 9" in text
    assert f"({storage})" in (err.value.valid or "") and "resume" in (err.value.valid or "")
    # resuming with the same storage completes the study
    r = _search(problem, method="optuna", trials=200, storage=storage)
    assert r.best.feasible


# ---- time budget ------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["exhaustive", "optuna", "auto"])
def test_a_tiny_time_budget_stops_the_search(problem: tuple, method: str) -> None:
    with pytest.raises(PlannerError) as err:
        _search(problem, method=method, trials=20, time_budget_s=1e-9)
    assert err.value.field == "search.time_budget_s"
    assert str(err.value).startswith("search.time_budget_s: search took longer than 1e-09 s")
    assert "fewer GPU counts" in (err.value.valid or "")


@pytest.mark.parametrize("budget", [0.0, -1.0, math.nan])
def test_a_time_budget_must_be_positive(problem: tuple, budget: float) -> None:
    with pytest.raises(PlannerError, match="search.time_budget_s"):
        _search(problem, method="exhaustive", time_budget_s=budget)


def test_a_generous_budget_changes_nothing(problem: tuple) -> None:
    a = _search(problem, method="optuna", trials=15, seed=3)
    b = _search(problem, method="optuna", trials=15, seed=3, time_budget_s=1e6)
    # one worker and one seed: the same trials, the same ranking
    assert [(e.gpus, e.layout, e.training) for e in a.ranked] == [
        (e.gpus, e.layout, e.training) for e in b.ranked
    ]


def test_workers_are_terminated_when_the_budget_runs_out(problem: tuple, tmp_path: Path) -> None:
    model, cluster, profile, training = problem
    cfg = WorkerConfig(
        model=model.model_dump(),
        cluster=cluster.model_dump(),
        profile=profile.model_dump(),
        training=training.model_dump(),
        space=space_axes(_space(problem)),
        objective="tokens_per_s",
        memory_headroom=0.0,
        tokens=None,
        sampler="random",
        storage=("journal", str(tmp_path / "study.log")),
        study_name="budget",
        trials=10**9,  # never finishes on its own
        seed=0,
        rank=0,
    )
    with pytest.raises(PlannerError, match="search.time_budget_s"):
        run_workers([cfg], Deadline(1e-9))
    assert not [p for p in multiprocessing.active_children() if p.name == "planner-optuna-0"]


# ---- huge spaces and numbers ------------------------------------------------------------------


def test_exhaustive_refuses_a_space_above_its_cap(
    problem: tuple, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(planner.search, "EXHAUSTIVE_MAX_CANDIDATES", 10)
    with pytest.raises(PlannerError) as err:
        _search(problem, method="exhaustive")
    assert err.value.field == "method" and "more than 10 legal candidates" in str(err.value)


def test_auto_counts_only_up_to_its_limit(problem: tuple, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(planner.search, "AUTO_EXHAUSTIVE_LIMIT", 10)
    r = _search(problem, trials=10)
    assert r.method == "optuna" and r.space_size is None
    assert "auto chose optuna: more than 10 legal candidates" in r.notes[0]


@pytest.mark.parametrize("layers", [999_999_999_989, 10**12 + 7, 2**60])
def test_huge_layer_counts_do_not_stall_the_generator(problem: tuple, layers: int) -> None:
    model, cluster, _, training = problem
    huge = model.model_copy(update={"layers": layers})
    space = default_space(huge, cluster, (GPUS,), SEQ)
    pps = {s.pp for s in structures(huge, cluster, training, space)}
    assert pps and pps <= set(POW2)  # only the pipeline degrees 16 GPUs can hold


# ---- candidates the simulator refuses ---------------------------------------------------------


def _hostile_figures(refuse_tp: int, nan_tp: int) -> Callable:
    def figures(self, layout, training, memory_limit_gib=None):  # noqa: ANN001, ANN202
        if layout.tp == refuse_tp:
            raise PlannerError("report.step_time_s", "not finite", "finite figures")
        fig = REAL_FIGURES(self, layout, training, memory_limit_gib)
        if layout.tp == nan_tp:
            return dataclasses.replace(fig, tokens_per_s=math.inf, step_time_s=0.0)
        return fig

    return figures


def _hostile_figures_many(refuse_tp: int, nan_tp: int) -> Callable:
    """The vector path (exhaustive search) made as hostile as :func:`_hostile_figures`."""

    def figures_many(sim, candidates, memory_limit_gib=None, memory_only=True, bounded=None):  # noqa: ANN001, ANN202
        real = REAL_FIGURES_MANY(sim, candidates, memory_limit_gib, memory_only, bounded)
        out = []
        for j, ((_gpus, layout, _training), fig) in enumerate(zip(candidates, real, strict=True)):
            if layout.tp == refuse_tp:
                fig = PlannerError("report.step_time_s", "not finite", "finite figures")
            elif layout.tp == nan_tp and fig is not None and not isinstance(fig, Exception):
                fig = dataclasses.replace(fig, tokens_per_s=math.inf, step_time_s=0.0)
                if bounded is not None:
                    bounded.discard(j)  # no longer what the vector path checked
            out.append(fig)
        return out

    return figures_many


def test_refused_and_non_finite_candidates_are_counted_not_ranked(
    problem: tuple, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(BatchSimulator, "figures", _hostile_figures(2, 4))
    monkeypatch.setattr(vector, "figures_many", _hostile_figures_many(2, 4))
    model, cluster, profile, training = problem
    ev = Evaluator(model, cluster, profile)
    ranked = exhaustive(ev, training, _space(problem))
    assert ranked and {e.layout.tp for e in ranked}.isdisjoint({2, 4})
    assert all(math.isfinite(e.score) for e in ranked)
    assert ev.infeasible["simulator refused (report.step_time_s)"] > 0
    assert ev.infeasible["non-finite simulation result"] > 0
    rejected = [
        k for k in legal_layouts(model, cluster, training, _space(problem)) if k[1].tp in (2, 4)
    ][:5]
    for key in rejected:
        assert ev(*key) is None
    before = ev.simulated
    for key in rejected:
        assert ev(*key) is None  # a rejection is cached too
    assert ev.simulated == before


def test_optuna_survives_a_space_the_simulator_refuses_entirely(
    problem: tuple, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*_a, **_k):  # noqa: ANN002, ANN003, ANN202
        raise PlannerError("report.tokens_per_s", "not finite")

    monkeypatch.setattr(BatchSimulator, "figures", refuse)
    model, cluster, profile, training = problem
    stats: dict[str, int] = {}
    ranked = optuna_search(
        Evaluator(model, cluster, profile), training, _space(problem), trials=12, stats=stats
    )
    assert ranked == [] and stats["trials"] == 12 == stats["rejected"]
    r = _search(problem, method="optuna", trials=5)
    with pytest.raises(
        PlannerError, match=r"no feasible layout: .*simulator refused \(report.tokens_per_s\) \(5\)"
    ):
        r.best  # noqa: B018


def test_search_json_is_strict(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def simulate(*a, **k):  # noqa: ANN002, ANN003, ANN202
        return dataclasses.replace(REAL_SIMULATE(*a, **k), model_flops_per_token=math.nan)

    monkeypatch.setattr(evaluate_mod, "simulate_step", simulate)
    argv = ["search", "--model", "llama3.1-8b", "--cluster", "dgx-h100", "--gpus", "8"]
    argv += ["--global-batch", "16", "--method", "optuna", "--trials", "5", "--json"]
    assert main(argv) == 2
    out = capsys.readouterr()
    assert out.out == "" and "NaN" not in out.err
    lines = out.err.strip().splitlines()
    assert len(lines) == 1 and "non-finite number at best.report.model_flops_per_token" in lines[0]


# ---- what --seed promises, and the stand-alone worker -----------------------------------------


def test_help_says_what_seed_promises_with_workers(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["search", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--workers 1 only" in text and "interleave across processes" in text


@pytest.mark.parametrize(
    "extra",
    [
        ["--gpus", "abc"],
        ["--gpus", "16", "--trials", "0"],
        ["--gpus", "16", "--seed", "-1"],
        ["--gpus", "16", "--global-batch", "0"],
        ["--gpus", "16", "--objective", "speed"],
        ["--gpus", "16", "--model", "no-such-model"],
        ["--gpus", "16", "--storage", "study.txt"],
        ["--gpus", "16", "--memory-headroom", "2"],
        ["--gpus", "16", "--trials", "many"],
    ],
)
def test_worker_command_line_bad_input_is_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, extra: list[str]
) -> None:
    argv = ["--storage", str(tmp_path / "s.log"), "--model", "llama3.1-8b"]
    argv += ["--cluster", "dgx-h100", "--global-batch", "64", *extra]
    try:
        rc = worker_main(argv)
    except SystemExit as exc:  # argparse usage errors
        rc = exc.code
    assert rc == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err


def test_worker_module_bad_input_has_no_traceback(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "planner.search.optuna_search", "--storage", str(tmp_path / "s.log")]
        + ["--model", "llama3.1-8b", "--cluster", "dgx-h100", "--gpus", "1e99"]
        + ["--global-batch", "64"],
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]
    assert proc.stderr.startswith("error: --gpus")
