"""The one exception type of the planner: every bad input names its field and what is valid."""

from __future__ import annotations

import re

# a model validator's message that starts with a field name: 'Value error, hidden: ...'
_MODEL_FIELD_MSG = re.compile(r"^Value error, ([a-z_][a-z0-9_]*): (.*)$", re.S)


class PlannerError(ValueError):
    """Bad input (spec, layout, flag, file) or an impossible request.

    ``field`` is a dotted path to the offending field (``layout.tp``), ``valid`` says what would be
    accepted. ``str(err)`` is a single line suitable for a CLI or an app error box.
    """

    def __init__(self, field: str, message: str, valid: str | None = None) -> None:
        self.field = field
        self.message = message
        self.valid = valid
        text = f"{field}: {message}"
        if valid:
            text += f" (valid: {valid})"
        super().__init__(text)


def pydantic_error_to_planner(exc: Exception, prefix: str = "") -> PlannerError:
    """Turn the first error of a ``pydantic.ValidationError`` into a one-line PlannerError."""
    errors = getattr(exc, "errors", None)
    if not callable(errors):
        return PlannerError(prefix or "input", str(exc))
    first = exc.errors()[0]  # type: ignore[attr-defined]
    loc = ".".join(str(p) for p in first.get("loc", ()))
    msg = first.get("msg", "invalid value")
    named = _MODEL_FIELD_MSG.match(msg)
    if named:  # a model validator's "field: message" names the field
        loc = ".".join(p for p in (loc, named.group(1)) if p)
        msg = named.group(2)
    field = ".".join(p for p in (prefix, loc) if p) or "input"
    kind = first.get("type", "")
    if kind == "missing":
        msg = "required field is missing"
    elif kind == "extra_forbidden":
        msg = "unknown field"
    ctx = first.get("ctx") or {}
    valid = None
    if "expected" in ctx:
        valid = str(ctx["expected"])
    elif kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        from planner.specs.base import field_range

        bounds = field_range(getattr(exc, "title", ""), tuple(first.get("loc", ())))
        valid = bounds or msg.replace("Input should be ", "")
        msg = f"{_shown(first.get('input'))} is out of range"
    elif kind == "finite_number":
        msg = "must be a finite number (not inf or nan)"
    n_more = len(exc.errors()) - 1  # type: ignore[attr-defined]
    if n_more > 0:
        msg += f" (and {n_more} more error{'s' if n_more > 1 else ''})"
    return PlannerError(field, msg, valid)


def _shown(value: object) -> str:
    """A short text of an input value for an error line (a 400-digit number is elided)."""
    text = repr(value)
    return text if len(text) <= 24 else f"{text[:10]}...{text[-6:]} ({len(text)} characters)"
