"""Fuzz slice of issue 12: seeded hostile inputs through the API, the CLI and the app's upload
parsers (``benchmarks/fuzz.py``; 3,000 of them here, the slower CLI and upload paths at a
smaller share than the benchmark's 80/15/5 so the slice stays well under a minute) each end in a
clean error or a finite report: no traceback, no non-finite figure. Timings are the benchmark's
to print, not asserted here.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import sys
from pathlib import Path

import pytest

import planner

FUZZ_FILE = Path(__file__).resolve().parents[1] / "benchmarks" / "fuzz.py"
SEED = 20261201
HANG_S = 3.0  # kill a stuck input sooner than the benchmark does (hangs are not asserted)


def _load_fuzz():
    spec = importlib.util.spec_from_file_location("planner_fuzz_benchmark", FUZZ_FILE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


fuzz = _load_fuzz()


def _failures(tally) -> dict:
    bad = ("traceback", "nonfinite")
    return {sig: e for sig, e in tally.classes.items() if e["outcome"] in bad}


@pytest.mark.parametrize(("path", "n"), [("api", 2650), ("cli", 250), ("upload", 100)])
def test_fuzz_slice_has_no_traceback_and_no_non_finite_figure(path, n):
    tally = fuzz.run_fuzz(n, seed=SEED, paths=(path,), hang_s=HANG_S)
    assert not tally.errors, tally.errors  # the harness itself ran
    assert tally.total("inputs") == n
    assert tally.total("finite") > 0  # some inputs got through to a report
    failures = _failures(tally)
    assert not failures, fuzz.failure_text(failures)


def test_inputs_replay_from_seed_and_index():
    ctx = fuzz.Context("api")
    first = fuzz.generate(ctx, "api", 7, 123)
    again = fuzz.generate(ctx, "api", 7, 123)
    assert first.describe() == again.describe()
    assert fuzz.generate(ctx, "api", 7, 124).describe() != first.describe()


def test_harness_reports_a_traceback_and_a_non_finite_figure(monkeypatch):
    """The slice can fail: a simulator that raises, or returns NaN, is caught and shrunk."""
    real = planner.simulate

    def broken(model, cluster, layout, training, profile=None):
        report = real(model, cluster, layout, training, profile)
        if layout.dp == 1:
            raise ZeroDivisionError("dp")
        return dataclasses.replace(report, mfu_pct=math.nan)

    monkeypatch.setattr(planner, "simulate", broken)
    tally = fuzz.run_fuzz(300, seed=SEED, paths=("api",), hang_s=HANG_S)
    outcomes = {e["outcome"] for e in _failures(tally).values()}
    assert outcomes == {"traceback", "nonfinite"}, fuzz.failure_text(tally.classes)
    text = fuzz.failure_text(_failures(tally))
    assert "ZeroDivisionError" in text and "non-finite mfu_pct" in text
