"""The base of every spec: frozen, unknown fields refused, finite numbers only, and no booleans
where a number goes (pydantic's lax mode would read ``hidden: true`` as 1).

Every numeric field of a spec declares a finite range with ``Field(ge=..., le=...)``; the caps
that several specs share are named here. ``docs/limits.md`` lists every field's range
(regenerate it with ``python -m planner.specs.limits``).
"""

from __future__ import annotations

import types
from typing import Any, Literal, Self, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, model_validator

# Shared caps (inclusive). Far above any real system or model, low enough that no product of
# them overflows a float and no loop over them is long.
MAX_GPUS = 1_048_576  # 2^20 accelerators in one job
MAX_LAYERS = 10_000
MAX_WIDTH = 4_194_304  # hidden / FFN widths, elements (2^22)
MAX_HEADS = 65_536
MAX_HEAD_DIM = 16_384
MAX_VOCAB = 16_777_216  # 2^24 tokens
MAX_SEQ_LEN = 16_777_216  # tokens per sequence (2^24)
MAX_GLOBAL_BATCH = 16_777_216  # sequences per step
MAX_MICRO_BATCH = 65_536
MAX_EXPERTS = 65_536
MAX_TFLOPS = 100_000.0  # per accelerator, dense
MAX_MEMORY_GIB = 16_384.0  # per accelerator
MAX_BANDWIDTH_GB_PER_S = 100_000.0  # one link or memory, GB/s
MAX_LATENCY_US = 100_000.0  # one message or launch, us (0.1 s)
MAX_PRICE_USD = 10_000.0  # per GPU-hour
MAX_POWER_W = 100_000.0  # board power or power limit of one accelerator, W
MAX_TEXT = 10_000  # characters of a name, description or source


def _accepts_bool(annotation: Any) -> bool:
    """True when a field's type admits a bool (bool itself, Any, a union holding one, or a
    Literal of booleans)."""
    if annotation is bool or annotation is Any:
        return True
    origin = get_origin(annotation)
    if origin is Literal:
        return any(isinstance(a, bool) for a in get_args(annotation))
    if origin in (Union, types.UnionType):
        return any(_accepts_bool(a) for a in get_args(annotation))
    return origin is not None and origin not in (list, tuple, dict, Literal)


# per Spec class, the fields whose type admits no boolean (filled on first validation)
_NO_BOOL: dict[type, frozenset[str]] = {}


class Spec(BaseModel):
    """Base of every declarative input (model, hardware, layout, training, profile, case)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _no_bool_for_numbers(cls, data: Any) -> Any:
        if isinstance(data, dict):
            no_bool = _NO_BOOL.get(cls)
            if no_bool is None:
                no_bool = _NO_BOOL[cls] = frozenset(
                    n for n, f in cls.model_fields.items() if not _accepts_bool(f.annotation)
                )
            for name, value in data.items():
                if isinstance(value, bool) and name in no_bool:
                    # "field: ..." is turned into the field path by pydantic_error_to_planner
                    raise ValueError(f"{name}: a boolean is not accepted here")
        return data

    def with_changes(self, **changes: Any) -> Self:
        """A validated copy with ``changes``; the fields it counts as set are this spec's and
        the changed ones (so a software stack still fills the rest, planner/stacks.py)."""
        return type(self).model_validate(self.model_dump(include=self.model_fields_set) | changes)


def no_bool(value: Any) -> Any:
    """A ``BeforeValidator`` for numbers inside containers (``dict[str, float]``)."""
    if isinstance(value, bool):
        raise ValueError("a boolean is not accepted here")
    return value


# ---- the documented range of a field, for one-line errors --------------------------------------
def _bound_text(metadata: list[Any]) -> str | None:
    """'1 to 1,048,576', '> 0 and <= 1' from a field's annotated-types constraints."""
    lo = hi = None
    lo_open = hi_open = False
    for m in metadata:
        for name in ("ge", "gt", "le", "lt"):
            v = getattr(m, name, None)
            if v is None:
                continue
            if name in ("ge", "gt"):
                lo, lo_open = v, name == "gt"
            else:
                hi, hi_open = v, name == "lt"
    if lo is None and hi is None:
        return None

    def num(v: Any) -> str:
        return f"{v:,}" if isinstance(v, int) else f"{v:g}"

    if lo is not None and hi is not None and not lo_open and not hi_open:
        return f"{num(lo)} to {num(hi)}"
    parts = []
    if lo is not None:
        parts.append(f"{'>' if lo_open else '>='} {num(lo)}")
    if hi is not None:
        parts.append(f"{'<' if hi_open else '<='} {num(hi)}")
    return " and ".join(parts)


def _unwrap(tp: Any, meta: list[Any]) -> tuple[Any, list[Any]]:
    """Strip Annotated (keeping its constraints) and Optional."""
    while True:
        origin = get_origin(tp)
        if origin is not None and hasattr(tp, "__metadata__"):
            for m in tp.__metadata__:
                meta = meta + list(getattr(m, "metadata", [m]))
            tp = get_args(tp)[0]
            continue
        if origin in (Union, types.UnionType):
            args = [a for a in get_args(tp) if a is not type(None)]
            if len(args) == 1:
                tp = args[0]
                continue
        return tp, meta


def _step(tp: Any, part: Any) -> tuple[Any, list[Any]] | None:
    tp, _ = _unwrap(tp, [])
    origin = get_origin(tp)
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        field = tp.model_fields.get(str(part))
        return (field.annotation, list(field.metadata)) if field else None
    if origin in (list, tuple) and isinstance(part, int):
        return get_args(tp)[0], []
    if origin is dict:
        return get_args(tp)[1], []
    if origin in (Union, types.UnionType):
        for arg in get_args(tp):
            arg, _ = _unwrap(arg, [])
            kind = getattr(arg, "model_fields", {}).get("kind")
            if kind is not None and kind.default == part:
                return arg, []
    return None


def field_range(model_name: str, loc: tuple[Any, ...]) -> str | None:
    """The documented range of the field at ``loc`` of the spec class named ``model_name``
    (as a ``ValidationError`` reports them), or None where it has no numeric bounds."""
    classes = {c.__name__: c for c in _all_specs()}
    tp: Any = classes.get(model_name)
    meta: list[Any] = []
    if tp is None:
        return None
    for part in loc:
        stepped = _step(tp, part)
        if stepped is None:
            return None
        tp, meta = stepped
    _, meta = _unwrap(tp, meta)
    return _bound_text(meta)


def _all_specs() -> list[type[BaseModel]]:
    out: list[type[BaseModel]] = []
    todo: list[type[BaseModel]] = [Spec]
    while todo:
        cls = todo.pop()
        out.append(cls)
        todo.extend(cls.__subclasses__())
    return out
