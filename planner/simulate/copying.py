"""A fast shallow copy of a spec, for the layout generator's hot loop."""

from __future__ import annotations

from typing import TypeVar

from planner.specs.base import Spec

S = TypeVar("S", bound=Spec)


def quick_copy(spec: S, update: dict) -> S:
    """``spec.model_copy(update=update)``: pydantic's shallow copy, not validated again, the
    updated fields counted as set, without its general path (a spec has no extra or private
    attributes; one that had would be copied by pydantic)."""
    if spec.__pydantic_extra__ is not None or spec.__pydantic_private__ is not None:
        return spec.model_copy(update=update)
    cls = type(spec)
    new = cls.__new__(cls)
    values = spec.__dict__.copy()
    values.update(update)
    fields_set = spec.__pydantic_fields_set__.copy()
    fields_set.update(update)
    _setattr(new, "__dict__", values)
    _setattr(new, "__pydantic_extra__", None)
    _setattr(new, "__pydantic_fields_set__", fields_set)
    _setattr(new, "__pydantic_private__", None)
    return new


_setattr = object.__setattr__
