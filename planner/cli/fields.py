"""The fields of a spec (planner/specs/fields.py) as argparse flags.

:func:`add_field_flags` turns :func:`~planner.specs.fields.input_fields` into argparse flags
(``Literal`` -> ``choices``, ``bool`` -> ``--x`` or ``--no-x`` by its default, ``int`` /
``float`` -> ``type``, a tuple of choices -> a comma-separated list), so a field added to the
spec is a flag with no edit here.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Collection, Mapping
from typing import Any

from pydantic import BaseModel

from planner.specs.fields import InputField, input_fields


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
    elif field.kind == "bool" and field.default and text:
        text = f"turn off: {text}"
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
    unset: Collection[str] = (),
    required_note: str = "",
) -> tuple[str, ...]:
    """Add one flag per field of ``spec`` to ``parser`` (or an argument group), ``dest`` = the
    field name; return the field names.

    ``flags``: field -> flag name when it is not the field's own (:attr:`InputField.flag`);
    ``defaults``: field -> the command line's default when it is not the spec's (a required
    field without one defaults to None, for the caller to check); ``helps``: field -> help when
    the field has no description; ``custom``: field -> a function that adds that field's flag
    by hand, called in the field's place; ``unset``: fields whose flag defaults to None (not
    given: the software stack's value, else the spec's), a switch among them also gets its
    opposite (``--x`` and ``--no-x``); ``required_note``: appended to the help of a field the
    spec requires and the command line gives no default (the caller checks it is given).
    """
    flags, defaults, helps, custom = flags or {}, defaults or {}, helps or {}, custom or {}
    for field in input_fields(spec):
        if field.name in custom:
            custom[field.name](parser)
            continue
        default = defaults.get(field.name, field.default)
        kwargs: dict[str, Any] = {"dest": field.name, "default": default}
        text = _help(field, default, helps.get(field.name))
        if field.required and default is None and required_note:
            text = f"{text} {required_note}" if text else required_note.strip("() ")
        flag = flags.get(field.name, field.flag)
        if field.name in unset:
            kwargs["default"] = None
            text = f"{text} [unset: the stack's]" if text else "unset: the stack's"
        if field.kind == "bool":
            kwargs["action"] = "store_false" if field.default else "store_true"
            if field.name in unset:
                parser.add_argument(
                    _opposite(flag),
                    dest=field.name,
                    action="store_true" if field.default else "store_false",
                    default=None,
                    help=argparse.SUPPRESS,
                )
        elif field.kind == "choice":
            kwargs["choices"] = field.choices
            kinds = {type(c) for c in field.choices}
            if len(kinds) == 1 and kinds != {str}:
                kwargs["type"] = kinds.pop()
        elif field.kind == "list":
            kwargs.update(type=comma_list, metavar="A,B")
        else:
            kwargs["type"] = {"int": int, "float": float, "str": str}[field.kind]
        parser.add_argument(flag, help=text, **kwargs)
    return tuple(f.name for f in input_fields(spec))


def _opposite(flag: str) -> str:
    """``--x`` -> ``--no-x``, ``--no-x`` -> ``--x``."""
    return "--" + flag[5:] if flag.startswith("--no-") else "--no-" + flag[2:]


def field_values(args: argparse.Namespace, spec: type[BaseModel]) -> dict[str, Any]:
    """The values of ``spec``'s fields that :func:`add_field_flags` put on ``args`` (an unset
    field, None, is left out: the spec built from them does not count it as set)."""
    return {
        f.name: getattr(args, f.name)
        for f in input_fields(spec)
        if getattr(args, f.name, None) is not None
    }


__all__ = ["InputField", "add_field_flags", "comma_list", "field_values", "input_fields"]
