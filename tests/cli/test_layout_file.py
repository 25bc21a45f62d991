"""A layout file that names its model and cluster is enough on its own (issue 15 item 5)."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout
from pathlib import Path

import pytest
import yaml

from planner.cli import main

SEARCH = ["search", "--model", "llama3.1-8b", "--cluster", "dgx-h100", "--gpus", "8"]
SEARCH += ["--global-batch", "32", "--method", "exhaustive", "--top", "1", "--json"]


def _json(argv: list[str]) -> dict:
    buf = io.StringIO()
    with redirect_stdout(buf):
        assert main(argv) == 0
    return json.loads(buf.getvalue())


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path]:
    out = tmp_path_factory.mktemp("layout")
    return _json([*SEARCH, "--export-dir", str(out)]), out / "layout.yaml"


def test_the_file_names_model_and_cluster(exported):
    _, path = exported
    doc = yaml.safe_load(path.read_text())
    assert doc["model"] == "llama3.1-8b" and doc["cluster"] == "dgx-h100"
    assert "planner simulate --layout THIS_FILE" in path.read_text()


def test_simulate_takes_the_file_alone(exported):
    found, path = exported
    data = _json(["simulate", "--layout", str(path), "--stack", "none", "--json"])
    assert data["model"]["name"] == "llama3.1-8b"
    assert data["step_time_s"] == pytest.approx(found["best"]["report"]["step_time_s"], rel=1e-9)


@pytest.mark.parametrize(
    ("flag", "value", "named"),
    [("--model", "llama2-7b", "llama3.1-8b"), ("--cluster", "dgx-a100-80gb", "dgx-h100")],
)
def test_a_flag_that_contradicts_the_file_is_an_error(exported, capsys, flag, value, named):
    _, path = exported
    assert main(["simulate", "--layout", str(path), flag, value]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith(f"error: {flag}:") and value in err[0] and named in err[0]


def test_the_same_names_as_flags_are_fine(exported):
    _, path = exported
    argv = ["simulate", "--layout", str(path), "--model", "llama3.1-8b"]
    assert _json([*argv, "--cluster", "dgx-h100", "--json"])["gpus"] == 8


def test_a_file_without_a_cluster_still_needs_the_flag(exported, tmp_path, capsys):
    _, path = exported
    doc = yaml.safe_load(path.read_text())
    del doc["cluster"]
    old = tmp_path / "old.yaml"
    old.write_text(yaml.safe_dump(doc))
    assert main(["simulate", "--layout", str(old)]) == 2
    err = capsys.readouterr().err
    assert "--cluster: required" in err
    assert _json(["simulate", "--layout", str(old), "--cluster", "dgx-h100", "--json"])["fits"]
