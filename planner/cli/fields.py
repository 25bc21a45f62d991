"""Inputs declared once: the fields of a spec (a pydantic model) as typed input descriptions,
and as argparse flags.

:func:`input_fields` reads ``model_fields`` of a spec class: each field becomes an
:class:`InputField` (its kind, the choices of a ``Literal``, the bounds of ``ge``/``le``, its
default and its ``Field(description=...)``). :func:`add_field_flags` turns them into argparse
flags (``Literal`` -> ``choices``, ``bool`` -> ``--x`` or ``--no-x`` by its default, ``int`` /
``float`` -> ``type``, a tuple of choices -> a comma-separated list), so a field added to the
spec is a flag with no edit here. The app's Estimate page renders the same descriptions as
widgets (``app_pages/estimate_extras.py``).

>>> from planner.specs.layout import Layout
>>> tp = next(f for f in input_fields(Layout) if f.name == "tp")
>>> (tp.kind, tp.default, tp.minimum)
('int', 1, 1)
"""

from __future__ import annotations

import argparse
import types
import typing
from collections.abc import Callable, Mapping
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
        "scalar, Literal or tuple-of-Literal type, or render it by hand (planner/cli/fields.py)"
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


def comma_list(text: str) -> tuple[str, ...]:
    """``"a, b"`` -> ``("a", "b")`` (the spec checks the items)."""
    return tuple(item.strip() for item in text.split(",") if item.strip())


def _help(field: InputField, default: Any, fallback: str | None) -> str | None:
    """The field's description (else ``fallback``) with its default, or for a list what it
    takes; '%' escaped for argparse."""
    text = field.description or fallback or ""
    if field.kind == "list":
        items = ", ".join(map(str, field.choices))
        text = "comma-separated" + (f": {text}" if text else f" ({items})" if items else "")
    elif field.kind != "bool" and default is not None:
        text = f"{text} (default {default})" if text else f"default {default}"
    return text.replace("%", "%%") if text else None


def add_field_flags(
    parser: Any,
    spec: type[BaseModel],
    *,
    flags: Mapping[str, str] | None = None,
    defaults: Mapping[str, Any] | None = None,
    helps: Mapping[str, str] | None = None,
    custom: Mapping[str, Callable[[Any], None]] | None = None,
) -> tuple[str, ...]:
    """Add one flag per field of ``spec`` to ``parser`` (or an argument group), ``dest`` = the
    field name; return the field names.

    ``flags``: field -> flag name when it is not the field's own (:attr:`InputField.flag`);
    ``defaults``: field -> the command line's default when it is not the spec's (a required
    field without one defaults to None, for the caller to check); ``helps``: field -> help when
    the field has no description; ``custom``: field -> a function that adds that field's flag
    by hand, called in the field's place.
    """
    flags, defaults, helps, custom = flags or {}, defaults or {}, helps or {}, custom or {}
    for field in input_fields(spec):
        if field.name in custom:
            custom[field.name](parser)
            continue
        default = defaults.get(field.name, field.default)
        kwargs: dict[str, Any] = {"dest": field.name, "default": default}
        text = _help(field, default, helps.get(field.name))
        if field.kind == "bool":
            kwargs["action"] = "store_false" if field.default else "store_true"
        elif field.kind == "choice":
            kwargs["choices"] = field.choices
            kinds = {type(c) for c in field.choices}
            if len(kinds) == 1 and kinds != {str}:
                kwargs["type"] = kinds.pop()
        elif field.kind == "list":
            kwargs.update(type=comma_list, metavar="A,B")
        else:
            kwargs["type"] = {"int": int, "float": float, "str": str}[field.kind]
        parser.add_argument(flags.get(field.name, field.flag), help=text, **kwargs)
    return tuple(f.name for f in input_fields(spec))


def field_values(args: argparse.Namespace, spec: type[BaseModel]) -> dict[str, Any]:
    """The values of ``spec``'s fields that :func:`add_field_flags` put on ``args``."""
    return {f.name: getattr(args, f.name) for f in input_fields(spec) if hasattr(args, f.name)}


__all__ = ["InputField", "add_field_flags", "comma_list", "field_values", "input_fields"]
