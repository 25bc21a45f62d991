"""Helpers of the command-line tests: run ``planner`` in-process for its JSON, or for its
one-line error."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout
from typing import Any

import pytest

from planner.cli import main


def run_json(argv: list[str]) -> dict[str, Any]:
    """Run argv (exit status 0) and parse what it printed as JSON."""
    buf = io.StringIO()
    with redirect_stdout(buf):
        assert main(argv) == 0
    return json.loads(buf.getvalue())


def one_line_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """Run argv, assert exit status 2, nothing on stdout and a single ``error: `` line on
    stderr without a traceback; return that line."""
    assert main(argv) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("error: ") and "Traceback" not in captured.err
    assert captured.out == ""
    return lines[0]
