"""The two case schemas ``planner validate`` reads, generated from the planner's own specs.

Version 1 (``shared/validation/README.md``): a bare list of cases whose training software is
the free-text ``framework``. Version 2 (``docs/validation-schema.md``): ``{schema: 2, cases:
[...]}``, where the software is a shipped ``stack`` and every fact v1 kept in notes is a field
(``unstated`` knobs, ``model.mtp_layers``, ``training.offload_layers``, ``training.execution``,
``measured.peak_memory_kind``). The ``layout:`` and ``training:`` sections of both are
generated from Layout and Training, so a field added there is accepted by cases too.
"""

from __future__ import annotations

import copy
from typing import Any, Literal

from pydantic import Field, create_model, model_validator
from pydantic_core import PydanticUndefined

from planner.specs.base import MAX_GPUS, MAX_POWER_W, Spec
from planner.specs.layout import Layout, Training
from planner.specs.model import ModelSpec, MoESpec

SCHEMAS = (1, 2)
Knob = Literal["micro_batch", "vpp", "recompute", "zero", "ep"]
MemoryKind = Literal["allocated", "reserved"]
MemoryRank = Literal["first", "last"]


def case_section(name: str, spec: type[Spec], required: tuple[str, ...], doc: str) -> type[Spec]:
    """A case's ``layout:`` or ``training:`` model generated from ``spec``'s own fields: the
    same types, ranges and descriptions (one source of truth), ``required`` as in schema 1 and
    every other field optional, ``None`` meaning "not stated" (the stack's value, then the
    planner's default, applies). A field added to Layout or Training is accepted by cases too."""
    fields: dict[str, Any] = {}
    for fname, info in spec.model_fields.items():
        copied = copy.copy(info)
        if fname not in required:
            copied.default = None
            fields[fname] = (info.annotation | None, copied)
        else:
            copied.default = PydanticUndefined
            fields[fname] = (info.annotation, copied)
    return create_model(name, __base__=Spec, __doc__=doc, **fields)


CaseLayout = case_section(
    "CaseLayout",
    Layout,
    ("tp", "pp"),
    "A case's layout (tp, pp required; dp None: num_gpus / (tp * pp * cp)).",
)
CaseTraining = case_section(
    "CaseTraining",
    Training,
    ("seq_len", "global_batch"),
    "A case's training (seq_len, global_batch required; micro_batch None: not published).",
)


class CaseMeasured(Spec):
    """What the source measured (schema 1). A case without a tokens/s figure (only a peak, or
    nothing measured) is simulated and shown, never scored."""

    tokens_per_s_per_gpu: float | None = Field(
        default=None, ge=0.001, le=1e9, description="tokens/s per GPU; None: not measured"
    )
    mfu_pct: float | None = Field(default=None, ge=0, le=1000, description="%, as published")
    peak_memory_gib: float | None = Field(default=None, gt=0, le=16_384, description="GiB")


class CaseMeasuredV2(CaseMeasured):
    """What the source measured (schema 2): the memory figure says which peak it is."""

    peak_memory_kind: MemoryKind | None = Field(
        default=None,
        description="allocated (max_memory_allocated) or reserved (the caching allocator's "
        "max_memory_reserved); required with peak_memory_gib",
    )

    peak_memory_rank: MemoryRank | None = Field(
        default=None,
        description="the pipeline rank whose peak the source logged: first (global rank 0) or "
        "last (Megatron's TensorBoard / W&B writer, the last rank); absent: the largest over "
        "the ranks (torchtitan's published tables), or a run without a pipeline",
    )

    @model_validator(mode="after")
    def _kind_with_peak(self) -> CaseMeasuredV2:
        if self.peak_memory_gib is not None and self.peak_memory_kind is None:
            raise ValueError(
                "peak_memory_kind: required with peak_memory_gib (allocated, reserved)"
            )
        if self.peak_memory_rank is not None and self.peak_memory_gib is None:
            raise ValueError(
                "peak_memory_rank: only with peak_memory_gib (leave it out, or state the peak)"
            )
        return self


# the model fields a case may leave null that have a default of their own: null reads as "not
# stated", so the default applies (tied_embeddings: untied; position table, MTP: none). Not the
# activation: its default (GeLU) would silently misprice a GLU model's MLP
def _defaulted(spec: type[Spec], but: tuple[str, ...] = ()) -> frozenset[str]:
    return frozenset(
        name
        for name, info in spec.model_fields.items()
        if not info.is_required() and info.default is not None and name not in but
    )


NULL_IS_DEFAULT = _defaulted(ModelSpec, but=("activation",))
# and in model.moe: no shared experts, no leading dense layers, every layer MoE, ...
MOE_NULL_IS_DEFAULT = _defaulted(MoESpec)


# the case fields whose values are lower-case words: a value written in another case
# ("BF16", "Full", "SwiGLU", "DGX-H100") names the same one (the cluster with "_" or spaces as "-")
_WORDS = (
    (None, "quality"),
    (None, "cluster"),
    ("model", "activation"),
    ("training", "precision"),
    ("training", "recompute"),
)


# other names the same value is published under, per field (after lower case, "_" as "-"):
# the dtype names of PyTorch and the papers, NeMo's "fp8-hybrid" (E4M3 forward, E5M2 backward:
# Transformer Engine's delayed scaling), the scaling recipes written into the precision (with
# the recipe they name, where the case states none), Hugging Face's hidden_act names of a GLU
# MLP ("silu" in a LLaMA config is SwiGLU) and of the squared ReLU, and the plain words for no
# and full activation checkpointing
_ALIASES: dict[tuple[str | None, str], dict[str, tuple[str, dict[str, str]]]] = {
    ("training", "precision"): {
        "bfloat16": ("bf16", {}),
        "float16": ("fp16", {}),
        "half": ("fp16", {}),
        "float32": ("fp32", {}),
        "float8": ("fp8", {}),
        "fp8-hybrid": ("fp8", {"fp8_recipe": "delayed"}),
        "fp8-delayed": ("fp8", {"fp8_recipe": "delayed"}),
        "fp8-tensorwise": ("fp8", {"fp8_recipe": "tensorwise"}),
        "fp8-current-scaling": ("fp8", {"fp8_recipe": "tensorwise"}),
        "fp8-cs": ("fp8", {"fp8_recipe": "tensorwise"}),
        "fp8-rowwise": ("fp8", {"fp8_recipe": "rowwise"}),
        "fp8-blockwise": ("fp8", {"fp8_recipe": "blockwise"}),
        "mxfp8": ("fp8", {"fp8_recipe": "mxfp8"}),
        "fp8-mx": ("fp8", {"fp8_recipe": "mxfp8"}),
    },
    ("model", "activation"): {
        "silu": ("swiglu", {}),
        "swish": ("swiglu", {}),
        "squared-relu": ("relu2", {}),
        "relu-squared": ("relu2", {}),
        "gelu-new": ("gelu", {}),
        "gelu-tanh": ("gelu", {}),
        "gelu-pytorch-tanh": ("gelu", {}),
        "gated-gelu": ("geglu", {}),
    },
    ("training", "recompute"): {
        "off": ("none", {}),
        "no": ("none", {}),
        "disabled": ("none", {}),
        "full-recompute": ("full", {}),
        "activation-checkpointing": ("full", {}),
    },
}


def _lower_case_words(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with the string values of :data:`_WORDS` stripped and in lower case, and each
    name of :data:`_ALIASES` read as the value it stands for."""
    out = dict(data)
    for section, name in _WORDS:
        holder = out if section is None else out.get(section)
        if not isinstance(holder, dict) or not isinstance(holder.get(name), str):
            continue
        word = holder[name].strip().lower()
        extra: dict[str, str] = {}
        if name == "cluster":
            word = "-".join(word.replace("_", " ").split())  # "DGX H100", "dgx_h100"
        elif (section, name) in _ALIASES:
            aliases = _ALIASES[(section, name)]
            word, extra = aliases.get(word.replace("_", "-"), (word, {}))
        if section is None:
            out[name] = word
        else:
            stated = {k: v for k, v in extra.items() if holder.get(k) is None}
            out[section] = {**holder, name: word, **stated}
    return out


# the case fields that do not reach the simulation: null reads as not stated
_NULL_IS_UNSTATED = ("scored", "notes", "source", "quality", "measured")


class _CaseBase(Spec):
    id: str = Field(min_length=1, max_length=200)
    source: str = Field(default="", max_length=10_000)
    quality: Literal["verified_primary", "verified_secondary", "partial"] | None = None
    scored: bool = True
    model: ModelSpec
    cluster: str = Field(min_length=1, max_length=1000)
    num_gpus: int = Field(ge=1, le=MAX_GPUS)
    layout: CaseLayout
    training: CaseTraining
    notes: str = Field(default="", max_length=100_000)

    @model_validator(mode="before")
    @classmethod
    def _nulls_not_stated(cls, data: Any) -> Any:
        """A null ``scored``, ``notes``, ``source``, ``quality`` or ``measured``, or a null
        model (or model.moe) field that has a default, is not stated: the default applies (an
        error otherwise, for a null the field cannot hold)."""
        if not isinstance(data, dict):
            return data
        out = {k: v for k, v in data.items() if not (v is None and k in _NULL_IS_UNSTATED)}
        out = _lower_case_words(out)
        model = out.get("model")
        if isinstance(model, dict):
            model = {k: v for k, v in model.items() if not (v is None and k in NULL_IS_DEFAULT)}
            if isinstance(model.get("moe"), dict):
                model["moe"] = {
                    k: v
                    for k, v in model["moe"].items()
                    if not (v is None and k in MOE_NULL_IS_DEFAULT)
                }
            out["model"] = model
        return out


class Case(_CaseBase):
    """A schema 1 case: ``framework`` is free text, mapped to a stack by
    :data:`planner.validate.frameworks.FRAMEWORK_STACKS`."""

    framework: str | None = Field(default="", max_length=1000)
    measured: CaseMeasured = Field(default_factory=CaseMeasured)


class CaseV2(_CaseBase):
    """A schema 2 case (docs/validation-schema.md)."""

    stack: str = Field(min_length=1, max_length=200, description="a shipped stack id or path")
    unstated: tuple[Knob, ...] = Field(
        default=(), max_length=5, description="knobs the source does not state"
    )
    measured: CaseMeasuredV2 = Field(default_factory=CaseMeasuredV2)
    power_limit_w: float | None = Field(
        default=None,
        gt=0,
        le=MAX_POWER_W,
        description="the GPUs' power limit, W, where the source states one below the cluster "
        "accelerator's rated power (nvidia-smi -pl; Cluster.with_power_limit checks the range)",
    )

    @model_validator(mode="after")
    def _unstated_not_given(self) -> CaseV2:
        for knob in self.unstated:
            section = self.layout if knob in Layout.model_fields else self.training
            if getattr(section, knob) is not None:
                raise ValueError(
                    f"unstated: {knob} is listed as not stated but "
                    f"{'layout' if section is self.layout else 'training'}.{knob} gives a value "
                    "(drop one of them)"
                )
        return self


__all__ = [
    "MOE_NULL_IS_DEFAULT",
    "NULL_IS_DEFAULT",
    "SCHEMAS",
    "Case",
    "CaseLayout",
    "CaseMeasured",
    "CaseMeasuredV2",
    "CaseTraining",
    "CaseV2",
    "Knob",
    "MemoryKind",
    "MemoryRank",
    "case_section",
]
