"""Messages a new user meets in the first hour (issue 15 items 8 and 9)."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from planner.cli import calibrate, closed_loop, main

ROOT = Path(__file__).resolve().parents[2]


def test_a_usage_error_is_one_line(capsys):
    with pytest.raises(SystemExit) as info:
        main(["simulate", "--model", "llama3.1-8b", "--zero", "7"])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith("error: planner simulate: argument --zero")
    assert "planner simulate --help" in err[0]


def test_an_unknown_command_is_one_line(capsys):
    with pytest.raises(SystemExit):
        main(["simulat"])
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'simulate'" in err[0]


def test_global_batch_help_says_it_is_required(capsys):
    with pytest.raises(SystemExit):
        main(["simulate", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "sequences per optimizer step (required, unless --layout FILE gives it)" in out


def test_readme_synopsis_matches_the_flags():
    text = (ROOT / "README.md").read_text()
    assert "planner simulate --model M --cluster C --gpus N --global-batch B" in text
    assert "--precision bf16|fp16|fp8|fp32" in text


def test_calibrate_progress_is_plain_lines_off_a_terminal(capsys):
    ctx, update = calibrate._progress_lines()
    with ctx:
        update("gemm", 0, 3)
        update("gemm", 1, 3)
        update("gemm", 3, 3)
    err = capsys.readouterr().err.splitlines()
    assert err == ["calibrate: gemm: 3 measurements", "calibrate: gemm: done"]


def test_closed_loop_says_it_calibrates_first(monkeypatch, capsys):
    pytest.importorskip("torch")

    class Stop(Exception):
        pass

    def stop(*_a, **_k):
        raise Stop

    monkeypatch.setattr(calibrate, "run_calibration", stop)
    with pytest.raises(Stop):
        closed_loop.closed_loop("gpt-tiny", "cpu", 1, 64, 1, 1, None)
    err = capsys.readouterr().err
    assert "microbenchmarks run first" in err and "--profile" in err


def test_simulate_trace_confirms_the_file(tmp_path, capsys):
    path = tmp_path / "step.json"
    argv = ["simulate", "--model", "llama3.1-8b", "--cluster", "dgx-h100", "--gpus", "8"]
    argv += ["--global-batch", "64", "--zero", "1", "--trace", str(path), "--json"]
    buf = io.StringIO()
    with redirect_stdout(buf):
        assert main(argv) == 0
    json.loads(buf.getvalue())  # stdout stays pure JSON
    assert path.is_file()
    assert f"wrote {path}" in capsys.readouterr().err


SEARCH8 = ["search", "--model", "llama3.1-8b", "--cluster", "dgx-h100", "--gpus", "8"]
SEARCH8 += ["--global-batch", "32", "--method", "exhaustive", "--top", "1"]


def _text(argv: list[str]) -> str:
    buf = io.StringIO()
    with redirect_stdout(buf):
        assert main(argv) == 0
    return buf.getvalue()


def test_pareto_with_one_gpu_count_says_how_to_get_the_gpu_front():
    out = _text([*SEARCH8, "--pareto"])
    assert "Pareto front: tokens per s vs memory headroom" in out
    assert "Pareto front: tokens per s vs gpus" not in out
    assert "--gpus-max N" in out


def test_search_summary_says_what_was_simulated_and_what_was_not():
    out = _text(SEARCH8)
    assert "candidates, before simulating" in out
    assert "rejected after simulating" in out
