"""Inputs declared once: the fields of a spec (a pydantic model) as typed input descriptions.

:func:`input_fields` reads ``model_fields`` of a spec class: each field becomes an
:class:`InputField` (its kind, the choices of a ``Literal``, the bounds of ``ge``/``le``, its
default and its ``Field(description=...)``). Every front end is generated from these: the
command line's flags (``planner/cli/fields.py``), the search space's knobs and the app's
Estimate-page widgets (``app_pages/estimate_extras.py``), so a field added to a spec appears in
each with no edit there.

>>> from planner.specs.layout import Layout
>>> tp = next(f for f in input_fields(Layout) if f.name == "tp")
>>> (tp.kind, tp.default, tp.minimum)
('int', 1, 1)
"""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass
from typing import Any, Literal, get_args, get_origin

from pydantic import BaseModel

Kind = Literal["bool", "int", "float", "str", "choice", "list"]
_SCALARS: dict[type, Kind] = {bool: "bool", int: "int", float: "float", str: "str"}


@dataclass(frozen=True)
class InputField:
    """One user-settable field of a spec, as every front end needs it.

    ``choices`` are the values of a ``choice`` field, or the allowed items of a ``list`` field
    (empty: any). ``optional``: None is a valid value. ``minimum`` / ``maximum``: the field's
    ``ge`` / ``le`` bounds (``gt`` / ``lt`` are kept as they are, exclusive). ``required``: the
    spec has no default (``default`` is then None).
    """

    name: str
    kind: Kind
    default: Any
    required: bool = False
    optional: bool = False
    choices: tuple[Any, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    description: str | None = None

    @property
    def flag(self) -> str:
        """The field's own flag: ``--field-name`` (``--no-field-name`` for a bool on by
        default)."""
        dashed = self.name.replace("_", "-")
        return f"--no-{dashed}" if self.kind == "bool" and self.default else f"--{dashed}"


def _unwrap_optional(annotation: Any) -> tuple[Any, bool]:
    """``X | None`` -> (X, True); anything else -> (annotation, False)."""
    if get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        if len(args) == 1 and len(args) < len(get_args(annotation)):
            return args[0], True
    return annotation, False


def _kind(name: str, annotation: Any) -> tuple[Kind, tuple[Any, ...]]:
    """The kind of a (non-optional) annotation and its choices."""
    if get_origin(annotation) is Literal:
        return "choice", get_args(annotation)
    if get_origin(annotation) in (tuple, list):
        args = [a for a in get_args(annotation) if a is not Ellipsis]
        item = args[0] if len(set(args)) == 1 else None
        if item is not None and get_origin(item) is Literal:
            return "list", get_args(item)
        if item in (str, int, float):
            return "list", ()
    if annotation in _SCALARS:
        return _SCALARS[annotation], ()
    raise TypeError(
        f"field {name!r} has type {annotation!r}, which has no input form: give it a "
        "scalar, Literal or tuple-of-Literal type, or render it by hand (planner/specs/fields.py)"
    )


def _bound(metadata: list[Any], *names: str) -> float | None:
    for item in metadata:
        for name in names:
            value = getattr(item, name, None)
            if value is not None:
                return value
    return None


def input_fields(spec: type[BaseModel]) -> tuple[InputField, ...]:
    """The fields of ``spec`` in declaration order, as :class:`InputField`."""
    out = []
    for name, info in spec.model_fields.items():
        annotation, optional = _unwrap_optional(info.annotation)
        kind, choices = _kind(name, annotation)
        required = info.is_required()
        out.append(
            InputField(
                name=name,
                kind=kind,
                default=None if required else info.get_default(call_default_factory=True),
                required=required,
                optional=optional,
                choices=choices,
                minimum=_bound(info.metadata, "ge", "gt"),
                maximum=_bound(info.metadata, "le", "lt"),
                description=info.description,
            )
        )
    return tuple(out)


__all__ = ["InputField", "Kind", "input_fields"]
