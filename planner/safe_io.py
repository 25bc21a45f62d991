"""Reading untrusted files and uploads: bounded size, strict UTF-8, guarded YAML and JSON.

Every failure is a one-line :class:`PlannerError` naming what was read. The guards make the
work and memory of a read proportional to the file's size, whatever it holds:

* the size is checked (``stat``, then a bounded read) before anything is parsed;
* YAML is first walked as libyaml's event stream, which refuses more nodes than the document
  kind allows (``MAX_SPEC_NODES``, ``MAX_CASES_NODES``: parse time grows with nodes, not
  bytes), nesting deeper than ``MAX_DEPTH`` and aliases that would expand to more than
  ``MAX_EXPANDED_NODES`` nodes (a 1 KB "billion laughs" file expands to 10^9), before any
  Python object is built;
* JSON nesting deeper than ``MAX_DEPTH`` is refused before ``json.loads`` recurses.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from planner.errors import PlannerError

MAX_SPEC_BYTES = 1_000_000  # a model, cluster, layout or profile file
MAX_CASES_BYTES = 10_000_000  # a validation file (the shipped public file is 0.21 MB)
MAX_SPEC_NODES = 20_000  # YAML nodes (scalars, aliases, collections) of a spec: shipped <= 300
MAX_CASES_NODES = 250_000  # YAML nodes of a validation file: the public file has 10,524
MAX_CASES_PER_FILE = 2_000  # cases of one validation file (the public file has 120)
MAX_DEPTH = 64  # mapping/sequence nesting of any document
MAX_EXPANDED_NODES = 1_000_000  # YAML nodes after alias expansion


def _size_text(n: int) -> str:
    return f"{n / 1e6:g} MB" if n >= 1_000_000 else f"{n / 1e3:g} KB"


def decode_text(data: bytes, what: str) -> str:
    """``data`` as UTF-8 text (a BOM is dropped); anything else is one line naming the byte."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise PlannerError(
            what,
            f"not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})",
            "a UTF-8 text file",
        ) from None


def read_bytes(path: str | Path, what: str, max_bytes: int = MAX_SPEC_BYTES) -> bytes:
    """At most ``max_bytes`` of a regular file; larger files are refused before reading."""
    p = Path(path)
    try:
        if not p.is_file():
            raise PlannerError(what, f"file not found: {p}")
        size = p.stat().st_size
        if size > max_bytes:
            raise PlannerError(
                what,
                f"file is {_size_text(size)}, larger than {_size_text(max_bytes)}",
                f"a file under {_size_text(max_bytes)}",
            )
        with p.open("rb") as fh:
            data = fh.read(max_bytes + 1)  # a file that grew since stat stops here
    except OSError as exc:
        raise PlannerError(what, f"cannot read {p}: {exc.strerror or exc}") from None
    if len(data) > max_bytes:
        raise PlannerError(what, f"file is larger than {_size_text(max_bytes)}", "a smaller file")
    return data


def read_text(path: str | Path, what: str, max_bytes: int = MAX_SPEC_BYTES) -> str:
    """A bounded UTF-8 text file (see :func:`read_bytes`, :func:`decode_text`)."""
    return decode_text(read_bytes(path, what, max_bytes), what)


# libyaml's parser when PyYAML was built with it (PyPI's wheels are): about 1 us per event
_CLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _too_many(what: str, max_nodes: int) -> PlannerError:
    return PlannerError(
        what, f"more than {max_nodes:,} YAML nodes", f"a document of at most {max_nodes:,} values"
    )


def _check_events(text: str, what: str, max_nodes: int) -> None:
    """Walk the YAML event stream once (no Python object built) and refuse, at the first event
    that crosses a limit: more than ``max_nodes`` nodes, nesting deeper than ``MAX_DEPTH``,
    aliases that expand the document past ``MAX_EXPANDED_NODES`` nodes, or an alias inside the
    node it names. The work is one C event per node, so bounded by ``max_nodes``."""
    stack: list[list[Any]] = []  # per open collection: [expanded nodes so far, anchor]
    expanded: dict[str, int] = {}  # anchor -> its node's expanded size
    open_anchors: set[str] = set()
    nodes = total = 0

    def add(size: int) -> None:
        nonlocal total
        if stack:
            stack[-1][0] += size
        else:
            total += size
        if (stack[0][0] if stack else total) > MAX_EXPANDED_NODES:
            raise PlannerError(
                what,
                f"aliases expand the document to more than {MAX_EXPANDED_NODES:,} nodes",
                "a document without alias bombs (fewer or shallower aliases)",
            )

    for event in yaml.parse(text, Loader=_CLoader):
        if isinstance(event, yaml.NodeEvent):  # scalar, alias or collection start
            nodes += 1
            if nodes > max_nodes:
                raise _too_many(what, max_nodes)
        if isinstance(event, yaml.AliasEvent):
            if event.anchor in open_anchors:
                raise PlannerError(
                    what,
                    f"alias *{event.anchor} refers to itself (it is inside the node it names, "
                    f"line {event.start_mark.line + 1})",
                    "aliases to complete nodes only",
                )
            add(expanded.get(event.anchor, 1))
        elif isinstance(event, yaml.ScalarEvent):
            if event.anchor:
                expanded[event.anchor] = 1
            add(1)
        elif isinstance(event, yaml.CollectionStartEvent):
            if len(stack) >= MAX_DEPTH:
                raise PlannerError(
                    what,
                    f"nesting deeper than {MAX_DEPTH} levels at line {event.start_mark.line + 1}",
                    f"a document nested at most {MAX_DEPTH} levels",
                )
            stack.append([1, event.anchor])
            if event.anchor:
                open_anchors.add(event.anchor)
        elif isinstance(event, yaml.CollectionEndEvent):
            size, anchor = stack.pop()
            if anchor:
                expanded[anchor] = size
                open_anchors.discard(anchor)
            add(size)


def load_yaml(
    text: str, what: str, max_bytes: int = MAX_SPEC_BYTES, max_nodes: int = MAX_SPEC_NODES
) -> Any:
    """Parse untrusted YAML: safe tags only; size, node count, depth and alias expansion
    checked on the event stream before any object is built; a syntax error names its line."""
    if len(text) > max_bytes or len(text.encode("utf-8", "surrogatepass")) > max_bytes:
        raise PlannerError(
            what, f"text is larger than {_size_text(max_bytes)}", "a smaller document"
        )
    try:
        _check_events(text, what, max_nodes)
        return yaml.load(text, Loader=_CLoader)  # noqa: S506 - a safe loader
    except PlannerError:
        raise
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "malformed YAML"
        if isinstance(exc, yaml.reader.ReaderError):
            char = chr(exc.character) if isinstance(exc.character, int) else exc.character
            problem = f"control character {char!r} at offset {exc.position}"
        raise PlannerError(
            what, f"invalid YAML{where}: {' '.join(str(problem).split())[:160]}", "a YAML mapping"
        ) from None
    except RecursionError:
        raise PlannerError(
            what, "nesting too deep", f"a document nested at most {MAX_DEPTH} levels"
        ) from None
    except ValueError as exc:  # an integer of thousands of digits, a bad timestamp
        raise PlannerError(
            what, f"invalid value: {' '.join(str(exc).split())[:120]}", "values in range"
        ) from None


def _json_depth_ok(text: str) -> bool:
    """True when no bracket nesting in ``text`` exceeds MAX_DEPTH (strings skipped)."""
    depth = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                return False
        elif ch in "]}":
            depth -= 1
    return True


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"{text[:40]} overflows a 64-bit float")
    return value


def load_json(text: str, what: str, max_bytes: int = MAX_SPEC_BYTES) -> Any:
    """Parse untrusted JSON strictly: bounded size and depth, no NaN/Infinity literals."""
    if len(text) > max_bytes:
        raise PlannerError(
            what, f"text is larger than {_size_text(max_bytes)}", "a smaller document"
        )
    if not _json_depth_ok(text):
        raise PlannerError(
            what, f"nesting deeper than {MAX_DEPTH} levels", "a JSON document of normal depth"
        )
    try:
        return json.loads(text, parse_constant=_no_constant, parse_float=_finite_float)
    except json.JSONDecodeError as exc:
        raise PlannerError(what, f"invalid JSON at line {exc.lineno}: {exc.msg}") from None
    except ValueError as exc:  # NaN / Infinity, or an integer with too many digits
        raise PlannerError(what, f"invalid JSON: {' '.join(str(exc).split())[:120]}") from None
    except RecursionError:
        raise PlannerError(what, "nesting too deep", "a JSON document of normal depth") from None


def dumps_strict(data: Any, indent: int | None = 2) -> str:
    """JSON text of ``data`` that any strict parser accepts: a NaN or infinity is an error
    naming where it is, never ``NaN``/``Infinity`` in the output."""
    try:
        return json.dumps(data, indent=indent, allow_nan=False)
    except ValueError:
        raise PlannerError(
            "output", f"non-finite number at {_first_non_finite(data) or '?'}", "finite figures"
        ) from None


def _first_non_finite(data: Any, path: str = "") -> str | None:
    if isinstance(data, float) and data != data or data in (float("inf"), float("-inf")):
        return path or "(root)"
    if isinstance(data, dict):
        for k, v in data.items():
            found = _first_non_finite(v, f"{path}.{k}" if path else str(k))
            if found:
                return found
    elif isinstance(data, list | tuple):
        for i, v in enumerate(data):
            found = _first_non_finite(v, f"{path}[{i}]")
            if found:
                return found
    return None
