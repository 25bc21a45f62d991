"""Every fit script names the files it reads, and none reads the independent check set."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FITS = (
    "calibration.fit_global",
    "calibration.fit_public_profiles",
    "calibration.fit_measured",
    "calibration.fit_device_ratio",
)
INDEPENDENT = "benchmarks/independent"


def _fit_modules() -> list[Path]:
    return sorted(ROOT.glob("calibration/fit_*.py"))


def test_every_fit_script_is_listed():
    assert {f"calibration.{p.stem}" for p in _fit_modules()} == set(FITS)


@pytest.mark.parametrize("name", FITS)
def test_fit_declares_what_it_reads_and_not_the_independent_set(name):
    module = importlib.import_module(name)
    reads = module.READS
    assert isinstance(reads, tuple) and all(isinstance(r, str) for r in reads)
    assert not any(INDEPENDENT in r or "independent" in r for r in reads)
    source = (ROOT / (name.replace(".", "/") + ".py")).read_text()
    assert INDEPENDENT not in source and "independent/" not in source
    # every path-like string literal the module holds is one of its READS (or an output)
    literals = {
        n.value
        for n in ast.walk(ast.parse(source))
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.endswith(".yaml")
    }
    for lit in literals:
        assert any(lit in r or r.endswith(lit) for r in reads), (name, lit)


def test_fit_global_reads_only_its_listed_case_file():
    from calibration import fit_global

    listed = ROOT / fit_global.READS[0]
    assert fit_global.DEFAULT_CASES.resolve() == listed.resolve()
    assert listed.is_file()


def test_independent_set_is_not_shipped_case_data():
    """The independent set lives under benchmarks/ (not in the wheel's case files)."""
    from planner.resources import shipped_cases

    for path in shipped_cases().values():
        assert INDEPENDENT not in str(path)
