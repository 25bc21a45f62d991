"""A schema 1 case's model completed from what the case states.

Hand-written cases name a model and leave out what its name already says, or write null for a
field the schema gives a default. ``planner.validate.leniency`` applies these readings to
schema 1 cases (never to schema 2 or under ``--strict``) and names each in the row:

- a model written as its name (``model: llama3.1-70b``) is ``{name: llama3.1-70b}``;
- a model that leaves out a field it needs and is named after a shipped model (compared by
  letters and digits, after any Hugging Face organisation: ``meta-llama/Llama-3.1-70B`` is
  ``llama3.1-70b``) takes every schema 1 field it leaves out from that model;
- a null field that has a default takes the shipped namesake's value, else the default;
- a model whose every layer routes to experts needs no dense FFN width, and an MoE or MLA
  block that leaves out a field it needs takes the namesake's (an MoE block's expert width,
  without a namesake, the dense FFN width);
- a model without a name is named after the case.
"""

from __future__ import annotations

import functools
import re
from typing import Any

from planner.resources import MODELS_DIR
from planner.specs.loading import load_model, shipped_ids
from planner.specs.model import MLASpec, ModelSpec, MoESpec
from planner.validate.cases import MOE_NULL_IS_DEFAULT, NULL_IS_DEFAULT
from planner.validate.inputs import V1_MODEL_KEYS

# the schema 1 model fields (shared/validation/README.md) a model named after a shipped one
# takes from it where the case leaves them out
SCHEMA_1_MODEL = (*V1_MODEL_KEYS, "moe")


@functools.lru_cache(maxsize=64)
def _shipped(name: str) -> ModelSpec | None:
    return load_model(name) if name in shipped_ids(MODELS_DIR) else None


def shipped_model(name: Any) -> ModelSpec | None:
    """The shipped model whose id is ``name``, else None; read once per name (specs are
    frozen), as every case of a file with that model asks for it."""
    return _shipped(name) if isinstance(name, str) else None


def _name_key(name: str) -> str:
    """A model name as compared with the shipped ids: the part after a Hugging Face
    organisation, lower case, letters and digits only ("meta-llama/Llama-3.1-70B" and
    "llama3.1-70b" are one)."""
    return re.sub(r"[^a-z0-9]", "", name.rsplit("/", 1)[-1].lower())


def model_by_name(case: dict[str, Any]) -> list[str]:
    """A model written as its name (``model: llama3.1-70b``) read as ``{name: ...}``; one that
    leaves out a field it needs and is named after a shipped model takes every schema 1 field
    it leaves out from that model, and its id as the name; what was."""
    model = case.get("model")
    done = []
    if isinstance(model, str) and 0 < len(model) <= 200:
        model = case["model"] = {"name": model}
        done.append(f"model {model['name']!r} read as model.name")
    if not isinstance(model, dict) or not isinstance(model.get("name"), str):
        return done
    required = [f for f, info in ModelSpec.model_fields.items() if info.is_required()]
    if all(f in model for f in required):
        return done
    shipped = {_name_key(i): i for i in shipped_ids(MODELS_DIR)}.get(_name_key(model["name"]))
    if shipped is None:
        return done
    spec = _shipped(shipped).model_dump()
    missing = [f for f in SCHEMA_1_MODEL if f not in model]
    # named as shipped, so the readings that look for a namesake find it (null_values,
    # planner.validate.inputs.v1_model_structure)
    model.update({f: spec[f] for f in missing}, name=shipped)
    fields = "/".join(missing)
    return [*done, f"model fields {fields} not stated: as in the shipped {shipped!r}"]


def null_values(model: dict[str, Any]) -> list[str]:
    """Fill in ``model`` (and its ``moe``) each null that has a default (:data:`NULL_IS_DEFAULT`,
    :data:`MOE_NULL_IS_DEFAULT`): the shipped model of the case's name gives it where there is
    one (DeepSeek-V3's one shared expert and three dense layers, not none), else the default;
    what was filled, one phrase per field."""
    name = model.get("name")
    shipped = shipped_model(name)
    done: list[str] = []
    blocks = [("model.", model, ModelSpec, NULL_IS_DEFAULT, shipped)]
    if isinstance(model.get("moe"), dict):  # a fresh copy already (forgive reads it first)
        blocks.append(
            ("model.moe.", model["moe"], MoESpec, MOE_NULL_IS_DEFAULT, shipped and shipped.moe)
        )
    for where, block, spec, defaulted, namesake in blocks:
        for key in sorted(k for k in defaulted if k in block and block[k] is None):
            if namesake is not None:
                block[key] = getattr(namesake, key)
                done.append(f"{where}{key} null as in the shipped {name!r} ({block[key]})")
            else:
                block[key] = spec.model_fields[key].default
                done.append(f"{where}{key} null as the default ({block[key]})")
    return done


def unused_ffn(model: dict[str, Any]) -> list[str]:
    """A dense FFN width left out (missing or null) of a model whose every layer routes to
    experts (no leading dense layers, every layer MoE): it prices nothing there, so it is set
    to the expert width for the spec to hold; what was."""
    moe = model.get("moe")
    if model.get("ffn_hidden") is not None or not isinstance(moe, dict):
        return []
    if moe.get("dense_layers", 0) != 0 or moe.get("layer_freq", 1) != 1:
        return []
    width = moe.get("expert_ffn_hidden")
    if isinstance(width, bool) or not isinstance(width, int):
        return []
    model["ffn_hidden"] = width
    return ["model.ffn_hidden not stated: unused (every layer routes to experts)"]


def block_fields(model: dict[str, Any]) -> list[str]:
    """An MoE or MLA block that leaves out a field it needs (missing or null) takes it, and every
    other field it leaves out, from the shipped namesake's block; an MoE block without its
    experts' FFN width and no namesake to take it from, the model's dense ``ffn_hidden`` (each
    expert a copy of the dense FFN, as in GShard, Switch and Mixtral, whose Hugging Face config
    has one ``intermediate_size`` for both); what was."""
    name = model.get("name")
    shipped = shipped_model(name)
    done = []
    for key, spec in (("moe", MoESpec), ("mla", MLASpec)):
        block = model.get(key)
        namesake = getattr(shipped, key, None) if shipped is not None else None
        if not isinstance(block, dict):
            continue
        needed = [f for f, info in spec.model_fields.items() if info.is_required()]
        missing = [f for f in needed if block.get(f) is None]
        if namesake is not None and missing:  # an incomplete block: every field it leaves out
            missing += [f for f in spec.model_fields if f not in block and f not in missing]
            block.update({f: getattr(namesake, f) for f in missing})
            done.append(
                f"model.{key} fields {'/'.join(missing)} not stated: as in the shipped {name!r}"
            )
        elif key == "moe" and "expert_ffn_hidden" in missing:
            width = model.get("ffn_hidden")
            if isinstance(width, int) and not isinstance(width, bool):
                block["expert_ffn_hidden"] = width
                done.append(
                    f"model.moe.expert_ffn_hidden not stated: the dense ffn_hidden ({width})"
                )
    return done


def model_name(case: dict[str, Any]) -> list[str]:
    """A model without a name (missing or null) named after the case's id: the name only
    labels it (and finds a shipped namesake, which an id never is); what was."""
    model = case.get("model")
    if not isinstance(model, dict) or model.get("name") is not None:
        return []
    name = case.get("id")
    model["name"] = name if isinstance(name, str) and 0 < len(name) <= 200 else "unnamed"
    return [f"model.name not stated: named {model['name']!r}"]


__all__ = [
    "SCHEMA_1_MODEL",
    "shipped_model",
    "block_fields",
    "model_by_name",
    "model_name",
    "null_values",
    "unused_ffn",
]
