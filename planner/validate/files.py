"""Validation files read and checked: schema 1 (a list of cases) or 2 (``{schema: 2, cases:
[...]}``), bounded in size, ids unique, before any case runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from planner.errors import PlannerError
from planner.resources import cases_path
from planner.safe_io import MAX_CASES_BYTES, MAX_CASES_NODES, MAX_CASES_PER_FILE
from planner.specs.loading import read_yaml_file
from planner.validate.cases import SCHEMAS


def case_id(raw: Any) -> str:
    """The case's id as a short string for its result row; an id that is not a short string
    (a list, a YAML alias tree) is never copied into the results."""
    value = raw.get("id") if isinstance(raw, dict) else None
    if isinstance(value, str) and 0 < len(value) <= 200:
        return value
    return "?"


def check_case_list(data: Any, max_cases: int = MAX_CASES_PER_FILE) -> list[Any]:
    """A list of raw cases checked: at most ``max_cases`` cases, none a YAML alias of an
    earlier one (it would be simulated once per copy, a fan-out a small file can hide). A
    repeated id is no error here: each case runs, and :func:`note_repeated_ids` marks the
    later rows (``planner validate --strict``: :func:`repeated_ids` refuses it)."""
    if not isinstance(data, list):
        raise PlannerError(
            "FILE",
            f"expected a YAML list of cases, got {type(data).__name__}",
            "schema version 1 (a list of case mappings) or 2 ({schema: 2, cases: [...]})",
        )
    if len(data) > max_cases:
        raise PlannerError(
            "FILE", f"{len(data):,} cases", f"at most {max_cases:,} cases per file (split it)"
        )
    seen: dict[int, str] = {}
    for i, raw in enumerate(data):
        if id(raw) in seen:  # the same node twice: an alias of an earlier case
            raise PlannerError(
                f"FILE[{i}]", f"repeats case {seen[id(raw)]!r} (a YAML alias)", "unique cases"
            )
        seen[id(raw)] = case_id(raw)
    return data


def repeated_ids(data: list[Any], strict: bool = False) -> dict[int, int]:
    """Each case whose id an earlier case has: its index -> the first one's. ``strict``: a
    PlannerError naming the first repeat instead."""
    first: dict[str, int] = {}
    repeats: dict[int, int] = {}
    for i, raw in enumerate(data):
        name = case_id(raw)
        if name == "?":
            continue
        if name in first:
            if strict:
                raise PlannerError(f"FILE[{i}].id", f"duplicate id {name!r}", "unique case ids")
            repeats[i] = first[name]
        else:
            first[name] = i
    return repeats


def note_repeated_ids(data: list[Any], rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` (one per case of ``data``) with each repeated id said in its reason, so two
    rows of one id can be told apart by their place in the file."""
    for i, j in repeated_ids(data).items():
        said = f"id repeats FILE[{j}]'s (this is FILE[{i}])"
        rows[i]["reason"] = f"{said}; {rows[i]['reason']}" if rows[i]["reason"] else said
    return rows


def _short(value: Any, limit: int = 60) -> str:
    """A value as short text for an error line (a 400-digit number or a long key list is cut;
    an int too long for ``repr`` is described)."""
    try:
        text = repr(value)
    except ValueError:  # an int past Python's digit limit
        text = f"an integer of more than {limit} digits"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def case_file(data: Any) -> tuple[int, list[Any]]:
    """A parsed validation file as (schema version, raw cases): a bare list is schema 1, a
    mapping ``{schema: 2, cases: [...]}`` schema 2 (and ``{schema: 1, cases: [...]}`` the
    list of schema 1 in version 2's frame)."""
    if isinstance(data, dict):
        schema = data.get("schema")
        if schema not in SCHEMAS or isinstance(schema, bool) or set(data) - {"schema", "cases"}:
            raise PlannerError(
                "FILE.schema",
                f"{_short(schema)} with keys {_short(sorted(map(str, data)))}",
                "a list of cases (schema 1) or {schema: 2, cases: [...]}",
            )
        return int(schema), check_case_list(data.get("cases"))
    return 1, check_case_list(data)


def read_case_file(path: str | Path) -> tuple[int, list[Any]]:
    """A validation file (a path, or a shipped id: ``public``, ``heldout_moe``) as
    (schema version, raw cases)."""
    return case_file(read_yaml_file(cases_path(path), "FILE", MAX_CASES_BYTES, MAX_CASES_NODES))


__all__ = [
    "case_file",
    "case_id",
    "check_case_list",
    "note_repeated_ids",
    "read_case_file",
    "repeated_ids",
]
