"""Reading a config's fields: the ``_Fields`` reader that records what was read, the ``_Draft`` a
family builder returns, and the field readers and notes every builder shares (the common header
and final ModelSpec fields, activation, head_dim, sliding windows, bias and quantization notes).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from planner.errors import PlannerError
from planner.specs.base import MAX_LAYERS
from planner.specs.blocks import LayerSpec
from planner.specs.model import Activation

_GATED = {"silu": "swiglu", "swish": "swiglu"}
_GATED_GELU = ("gelu", "gelu_new", "gelu_pytorch_tanh", "gelu_fast")
_MISSING = object()

MAX_INT = 2**31 - 1
"""Largest integer any size field may hold (a signed 32-bit integer, as in transformers'
configs); the model schema then checks each field's own range (``planner.specs.base``)."""


def shown(value: Any) -> str:
    """A JSON value as an error line names it: ``true``/``false``/``null``, a number (a long
    integer by its digit count), a quoted string (cut at 40 characters), or its kind
    (``list``, ``object``)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        if value.bit_length() <= 64:
            return str(value)
        digits = int(value.bit_length() * 0.30103) + 1  # str() of 10**5000 would raise
        return f"{'a negative' if value < 0 else 'an'} integer of about {digits} digits"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        return repr(value if len(value) <= 40 else value[:37] + "...")
    if isinstance(value, list):
        return "list"
    if isinstance(value, Mapping):
        return "object"
    return type(value).__name__


def check_keys(data: Mapping[Any, Any], where: str) -> None:
    """Every key of a config mapping is a string (JSON objects always are; a dict built in
    Python may not be)."""
    for key in data:
        if not isinstance(key, str):
            raise PlannerError(where, f"field name {shown(key)} is not a string", "JSON objects")


class _Fields:
    """The config mapping of one text model; records which fields were read."""

    def __init__(self, data: Mapping[str, Any], model_type: str, prefix: str) -> None:
        self.data = data
        self.model_type = model_type
        self.prefix = prefix
        self.used: set[str] = {"model_type"}

    def path(self, key: str) -> str:
        return self.prefix + key

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def consume(self, *keys: str) -> None:
        """Mark fields as handled without reading them."""
        self.used.update(keys)

    def get(self, key: str, default: Any = None) -> Any:
        self.used.add(key)
        value = self.data.get(key)
        return default if value is None else value

    def require(self, key: str) -> Any:
        self.used.add(key)
        value = self.data.get(key)
        if value is None:
            raise PlannerError(
                self.path(key),
                f"required for model_type '{self.model_type}' but missing from the config",
                "the value from the model's config.json",
            )
        return value

    def integer(
        self, key: str, default: Any = _MISSING, minimum: int = 1, maximum: int = MAX_INT
    ) -> int:
        """An integer field from ``minimum`` to ``maximum``; required unless ``default`` is
        given. A boolean is not an integer here (``"hidden_size": true`` is an error)."""
        value = self.require(key) if default is _MISSING else self.get(key, default)
        valid = f"an integer from {minimum:,} to {maximum:,}"
        if isinstance(value, bool) or not isinstance(value, int):
            raise PlannerError(self.path(key), f"expected an integer, got {shown(value)}", valid)
        if not minimum <= value <= maximum:
            raise PlannerError(self.path(key), f"{shown(value)} is out of range", valid)
        return value

    def flag(self, key: str, default: bool) -> bool:
        value = self.get(key, default)
        if not isinstance(value, bool):
            raise PlannerError(
                self.path(key), f"expected true or false, got {shown(value)}", "true or false"
            )
        return value

    def string(self, key: str, default: Any = _MISSING) -> Any:
        """A string field; required unless ``default`` is given (returned when missing)."""
        value = self.require(key) if default is _MISSING else self.get(key, default)
        if value is None or isinstance(value, str):  # None only as the default
            return value
        raise PlannerError(self.path(key), f"expected a string, got {shown(value)}")

    def unread(self) -> list[str]:
        return sorted(k for k in self.data if k not in self.used)


@dataclass
class _Draft:
    """What a builder extracts: ModelSpec fields, one LayerSpec per planner layer, the MoE block."""

    fields: dict[str, Any]
    layers: list[LayerSpec]
    moe: dict[str, Any] | None = None


@dataclass(frozen=True)
class _Header:
    """The fields every family's config starts with."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int


# ---- the header and the final fields ------------------------------------------------------------
def _read_header(f: _Fields) -> _Header:
    """num_hidden_layers, hidden_size, num_attention_heads and num_key_value_heads (default: one
    KV head per attention head), read in that order."""
    n = f.integer("num_hidden_layers", maximum=MAX_LAYERS)
    hidden = f.integer("hidden_size")
    heads = f.integer("num_attention_heads")
    return _Header(n, hidden, heads, f.integer("num_key_value_heads", default=heads))


def _spec_fields(
    f: _Fields,
    h: _Header,
    *,
    ffn_hidden: int,
    activation: Activation,
    head_dim: int | None = None,
    layers: int | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """The ModelSpec fields of a draft: the header's sizes (``layers`` overrides the HF layer
    count), kv_heads and head_dim unless ``head_dim`` is None (MLA), ``extra`` and
    :func:`_common_fields`."""
    fields: dict[str, Any] = {
        "layers": h.layers if layers is None else layers,
        "hidden": h.hidden,
        "ffn_hidden": ffn_hidden,
        "activation": activation,
        "heads": h.heads,
    }
    if head_dim is not None:
        fields.update(kv_heads=h.kv_heads, head_dim=head_dim)
    return {**fields, **extra, **_common_fields(f)}


def _common_fields(f: _Fields) -> dict[str, Any]:
    """Vocabulary, tying and positions (RoPE models: no learned position table)."""
    return {
        "vocab": f.integer("vocab_size"),
        "tied_embeddings": f.flag("tie_word_embeddings", False),
        "learned_position_embeddings": False,
        "max_positions": f.integer("max_position_embeddings", default=2048),
    }


# ---- field readers ------------------------------------------------------------------------------
def _gated_activation(f: _Fields, notes: list[str]) -> Activation:
    """Gated MLPs (Llama-style gate/up/down): silu -> swiglu, gelu -> geglu."""
    if not f.has("hidden_act"):
        notes.append("hidden_act missing: the transformers default 'silu' (SwiGLU) was used.")
    act = f.string("hidden_act", "silu")
    if act in _GATED:
        return "swiglu"
    if act in _GATED_GELU:
        return "geglu"
    raise PlannerError(
        f.path("hidden_act"),
        f"activation {shown(act)} of a gated MLP is not supported",
        "silu (SwiGLU) or gelu (GeGLU)",
    )


def _head_dim(f: _Fields, hidden: int, heads: int, required: bool = False) -> int:
    """Explicit ``head_dim`` (Qwen3, gpt-oss: heads x head_dim != hidden) or hidden / heads."""
    if f.has("head_dim") or required:
        return f.integer("head_dim")
    f.consume("head_dim")
    if hidden % heads:
        raise PlannerError(
            f.path("head_dim"),
            f"missing, and num_attention_heads ({heads}) does not divide hidden_size ({hidden})",
            "an explicit head_dim",
        )
    return hidden // heads


def _windows(f: _Fields, n: int) -> list[int | None]:
    """Sliding-window size per layer (None: full causal attention)."""
    f.consume("sliding_window")
    types = f.get("layer_types")
    if types is not None:
        valid = ("full_attention", "sliding_attention")
        if not isinstance(types, list) or len(types) != n:
            raise PlannerError(
                f.path("layer_types"),
                f"expected a list of {n} layer types (one per num_hidden_layers)",
                ", ".join(valid),
            )
        bad = sorted({shown(t) for t in types if t not in valid})
        if bad:
            raise PlannerError(
                f.path("layer_types"),
                f"unsupported layer type(s): {', '.join(bad[:5])}",
                ", ".join(valid),
            )
        window = f.integer("sliding_window") if "sliding_attention" in types else None
        f.consume("use_sliding_window", "max_window_layers")
        return [window if t == "sliding_attention" else None for t in types]
    if f.model_type.startswith("qwen"):
        # Qwen2/3: the window applies only when use_sliding_window, to layers >= max_window_layers.
        if not f.flag("use_sliding_window", False):
            f.consume("max_window_layers")
            return [None] * n
        first = f.integer("max_window_layers", minimum=0)
        window = f.integer("sliding_window")
        return [window if i >= first else None for i in range(n)]
    return [_first_int(f, "sliding_window")] * n


def _first_int(f: _Fields, *keys: str) -> int | None:
    """The first present of several spellings of one field (HF vs vLLM NemotronHConfig), or the
    value of one optional field; None when none is set."""
    f.consume(*keys)
    for key in keys:
        if f.has(key):
            return f.integer(key)
    return None


def _first_required(f: _Fields, *keys: str) -> int:
    """:func:`_first_int`, but a missing field is an error naming the first spelling."""
    value = _first_int(f, *keys)
    return f.integer(keys[0]) if value is None else value


def _period_offset(f: _Fields, period_key: str, offset_key: str) -> tuple[int, int]:
    """A layer period and the offset (below the period) of the layers it selects."""
    period = f.integer(period_key)
    offset = f.integer(offset_key, minimum=0)
    if offset >= period:
        raise PlannerError(f.path(offset_key), f"must be below {period_key} ({period})")
    return period, offset


# ---- notes --------------------------------------------------------------------------------------
def _attention_bias_note(f: _Fields, notes: list[str]) -> None:
    if f.flag("attention_bias", False):
        notes.append("attention_bias is true: the attention projection biases are not counted.")


def _mlp_bias_note(f: _Fields, notes: list[str]) -> None:
    if f.flag("mlp_bias", False):
        notes.append("mlp_bias is true: the MLP biases are not counted.")


def _quantization_note(f: _Fields, notes: list[str]) -> None:
    q = f.get("quantization_config")
    if q is not None:
        method = q.get("quant_method") if isinstance(q, dict) else None
        method = method[:40] if isinstance(method, str) else "?"
        notes.append(
            f"quantization_config ({method}) describes the released weights; parameters are "
            "counted as elements and the training precision is a run option (--precision)."
        )
