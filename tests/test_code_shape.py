"""The shape issue 13 asks of the code: no module of planner/, app_pages/ or calibration/ over
500 lines, no function over 80 (a reader holds a whole module and a whole function in mind)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 80


def _sources() -> list[Path]:
    files = [ROOT / "app.py"]
    for folder in ("planner", "app_pages", "calibration"):
        files += sorted((ROOT / folder).rglob("*.py"))
    return files


def test_modules_and_functions_stay_small() -> None:
    too_long = []
    for path in _sources():
        text = path.read_text()
        name = path.relative_to(ROOT)
        if text.count("\n") > MAX_MODULE_LINES:
            too_long.append(f"{name}: {text.count(chr(10))} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    too_long.append(f"{name}:{node.lineno} {node.name}: {length} lines")
    assert not too_long, too_long
