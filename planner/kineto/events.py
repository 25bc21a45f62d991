"""Reading a Kineto JSON (plain or gzip) into complete-event slices, with the helpers that pick
the top-level slices of each thread and the annotation windows of each process.

Times are microseconds, as Kineto writes them.
"""

from __future__ import annotations

import gzip
import io
import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planner.errors import PlannerError
from planner.safe_io import read_bytes

DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
TRACE_HINT = "a PyTorch profiler JSON written by export_chrome_trace (.json or .json.gz)"
_EPS_US = 1e-3  # Kineto writes microseconds with 3 decimals

# a profiler trace of a few steps is tens to hundreds of MB; refuse what would not fit in memory
MAX_TRACE_BYTES = 1_000_000_000


def _read_json(path: Path) -> Any:
    raw = read_bytes(path, "trace", MAX_TRACE_BYTES)
    if raw[:2] == b"\x1f\x8b":
        try:
            with gzip.GzipFile(fileobj=io.BytesIO(raw)) as fh:
                raw = fh.read(MAX_TRACE_BYTES + 1)  # a gzip bomb stops here
        except (OSError, EOFError) as exc:
            raise PlannerError(
                "trace", f"{path.name}: corrupted or truncated gzip ({exc})", TRACE_HINT
            ) from None
        if len(raw) > MAX_TRACE_BYTES:
            raise PlannerError(
                "trace", f"{path.name} decompresses to more than 1 GB", "a smaller trace"
            )
    if not raw.strip():
        raise PlannerError("trace", f"{path.name} is empty", TRACE_HINT)
    try:
        return json.loads(raw)
    except UnicodeDecodeError:
        raise PlannerError("trace", f"{path.name} is not UTF-8 text", TRACE_HINT) from None
    except RecursionError:
        raise PlannerError("trace", f"{path.name} is nested too deeply", TRACE_HINT) from None
    except json.JSONDecodeError as exc:
        raise PlannerError(
            "trace",
            f"{path.name} is not valid JSON ({exc.msg} at line {exc.lineno} column "
            f"{exc.colno}); truncated or corrupted?",
            TRACE_HINT,
        ) from None


def _events(data: Any, name: str) -> list[dict[str, Any]]:
    if isinstance(data, list):  # the Chrome format also allows a bare array of events
        events = data
    elif isinstance(data, dict) and "traceEvents" in data:
        events = data["traceEvents"]
        if not isinstance(events, list):
            raise PlannerError("trace", f"{name}: traceEvents is not a list", TRACE_HINT)
    else:
        raise PlannerError("trace", f"{name} has no traceEvents", TRACE_HINT)
    if not events:
        raise PlannerError("trace", f"{name}: traceEvents is empty", TRACE_HINT)
    return [e for e in events if isinstance(e, dict)]


@dataclass(frozen=True, slots=True)
class _Slice:
    name: str
    cat: str
    pid: str
    tid: str
    start: float  # microseconds
    end: float


def _complete(events: list[dict[str, Any]]) -> list[_Slice]:
    """Complete ("X") events with numeric ts and a non-negative dur."""
    out = []
    for e in events:
        if e.get("ph") != "X":
            continue
        ts, dur = e.get("ts"), e.get("dur")
        if not isinstance(ts, int | float) or not isinstance(dur, int | float) or dur < 0:
            continue
        out.append(
            _Slice(
                str(e.get("name", "")),
                str(e.get("cat", "")),
                str(e.get("pid", "")),
                str(e.get("tid", "")),
                float(ts),
                float(ts) + float(dur),
            )
        )
    return out


def _top_level(slices: list[_Slice]) -> list[_Slice]:
    """Slices not nested inside another of the list on the same (pid, tid)."""
    by_lane: dict[tuple[str, str], list[_Slice]] = defaultdict(list)
    for s in slices:
        by_lane[(s.pid, s.tid)].append(s)
    out = []
    for lane in by_lane.values():
        lane.sort(key=lambda s: (s.start, -s.end))
        open_end = float("-inf")
        for s in lane:
            if s.start >= open_end - _EPS_US:
                out.append(s)
                open_end = s.end
            elif s.end > open_end + _EPS_US:  # sticks out of the open slice: keep the rest
                out.append(_Slice(s.name, s.cat, s.pid, s.tid, open_end, s.end))
                open_end = s.end
    return out


def _windows(slices: list[_Slice], prefix: str) -> dict[str, list[tuple[float, float]]]:
    """(start, end) of the slices whose name starts with ``prefix``, by pid."""
    out: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for s in slices:
        if s.name.startswith(prefix):
            out[s.pid].append((s.start, s.end))
    return out
