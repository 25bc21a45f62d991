"""A schema 1 value written as a phrase read as the word of the schema it names.

Tables and papers print a precision, a recompute level or an activation in a phrase ("BF16
mixed", "FP8 (hybrid)", "selective (core attention)", "silu_glu") and a cluster as its GPUs
("8x H100 80GB", "DGX A100 40GB"). Each function here reads one such phrase as the value it
names, or returns None where the phrase names none or more than one (that value stays the
field's error). ``planner.validate.leniency`` applies them to schema 1 cases and names each
reading in the row; schema 2 and ``--strict`` read none of them.

Words are read as whole tokens (letters and digits between other characters), so ``fp8`` in
``fp8-hybrid`` counts and ``b200`` inside ``gb200`` does not.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any, get_args

from planner.resources import CLUSTERS_DIR
from planner.specs.knobs import Recompute, TrainPrecision
from planner.specs.loading import shipped_ids
from planner.specs.model import Activation
from planner.validate.cases import _ALIASES

# precision tokens: PyTorch dtype names and the words papers print; a phrase naming fp8 beside
# bf16 or fp16 is an FP8 run (its other tensors are bf16), one naming bf16 or fp16 beside fp32
# is mixed precision with fp32 master weights: the lowest precision named is the run's, except
# that bf16 and fp16 together name no one precision. TF32 is not read: it is fp32 storage with
# TF32 tensor-core math, a peak the schema's fp32 does not state
PRECISION_TOKENS: dict[str, str] = {
    **dict.fromkeys(("fp8", "float8", "mxfp8", "e4m3", "fp8e4m3"), "fp8"),
    **dict.fromkeys(("bf16", "bfloat16"), "bf16"),
    **dict.fromkeys(("fp16", "float16", "half"), "fp16"),
    **dict.fromkeys(("fp32", "float32"), "fp32"),
}
# whole phrases that name a precision without a dtype word: PyTorch Lightning's precision
# settings ("16-mixed", "32-true", "transformer-engine": Transformer Engine FP8) and Composer's
# ("amp_fp8" reads through its tokens)
PRECISION_PHRASES: dict[str, str] = {
    "16-mixed": "fp16",
    "16-true": "fp16",
    "32-true": "fp32",
    "transformer-engine": "fp8",
}
# an FP8 scaling recipe named beside fp8 (NeMo's "fp8-hybrid" is Transformer Engine's delayed
# scaling; "current" scaling is tensorwise; MX is microscaling)
FP8_RECIPE_TOKENS: dict[str, str] = {
    **dict.fromkeys(("hybrid", "delayed"), "delayed"),
    **dict.fromkeys(("tensorwise", "current", "cs"), "tensorwise"),
    "rowwise": "rowwise",
    **dict.fromkeys(("blockwise", "block"), "blockwise"),
    **dict.fromkeys(("mxfp8", "mx"), "mxfp8"),
}
# recompute tokens that name a level (Megatron-LM's "uniform" and "block" recompute methods
# apply to full-layer recompute only; a flag's words read as the flag does)
RECOMPUTE_TOKENS: dict[str, str] = {
    **dict.fromkeys(("none", "no", "off", "disabled", "without", "false"), "none"),
    "selective": "selective",
    **dict.fromkeys(("full", "uniform", "block", "yes", "on", "enabled", "true"), "full"),
}
# words that say activations are recomputed without saying which: whole layers, the plain
# meaning of activation checkpointing, where no level word is given
RECOMPUTE_ANY = frozenset(
    {"checkpointing", "checkpoint", "checkpointed", "recompute", "recomputation", "remat"}
)
# activation tokens: Hugging Face hidden_act names (silu in a gated MLP is SwiGLU), and
# "glu" or "gated" beside a GELU naming GEGLU. A plain ReLU (OPT, the original Transformer) is
# costed as gelu, the schema's one ungated activation of one elementwise pass: the same two
# GEMMs, one pointwise kernel each way and the same saved input
ACTIVATION_TOKENS: dict[str, str] = {
    **dict.fromkeys(("swiglu", "silu", "swish"), "swiglu"),
    "geglu": "geglu",
    "gelu": "gelu",
    **dict.fromkeys(("relu2", "squared", "sqrelu"), "relu2"),
    "relu": "gelu",
}


def tokens(text: str) -> list[str]:
    """The lower-case runs of letters and digits in ``text``."""
    return re.findall(r"[a-z0-9]+", text.lower())


def _one(named: set[str]) -> str | None:
    return next(iter(named)) if len(named) == 1 else None


def precision(text: str) -> tuple[str, str | None] | None:
    """(precision, FP8 recipe or None) ``text`` names, or None (no precision, or bf16 and
    fp16 both)."""
    words = tokens(text)
    phrase = "-".join(words)
    named = {PRECISION_TOKENS[w] for w in words if w in PRECISION_TOKENS}
    if phrase in PRECISION_PHRASES:
        named = {PRECISION_PHRASES[phrase]}
    if "fp8" in named:
        recipes = {FP8_RECIPE_TOKENS[w] for w in words if w in FP8_RECIPE_TOKENS}
        return "fp8", _one(recipes)
    if {"bf16", "fp16"} <= named:
        return None
    if len(named) > 1:  # bf16 or fp16 with fp32 master weights
        named.discard("fp32")
    value = _one(named)
    return None if value is None else (value, None)


def recompute(text: str) -> str | None:
    """The recompute level ``text`` names, or None (none, or two levels: "full and
    selective")."""
    words = tokens(text)
    named = {RECOMPUTE_TOKENS[w] for w in words if w in RECOMPUTE_TOKENS}
    if not named and RECOMPUTE_ANY & set(words):
        named = {"full"}
    return _one(named)


def activation(text: str) -> str | None:
    """The activation ``text`` names, or None (none, or two)."""
    words = tokens(text)
    named = {ACTIVATION_TOKENS[w] for w in words if w in ACTIVATION_TOKENS}
    if named == {"gelu"} and {"glu", "gated"} & set(words):
        named = {"geglu"}
    if "squared" in words:  # "squared ReLU": relu2, not the plain ReLU's gelu
        named.discard("gelu" if "relu" in words else "relu2")
    return _one(named)


# the preset a GPU named without its system stands for: the vendor's reference system of that
# GPU (an A100 named without its memory: the 80 GB DGX; its 40 GB sibling is named by "40GB")
FAMILY_PRESET: dict[str, str] = {
    "a100": "dgx-a100-80gb",
    "h100": "dgx-h100",
    "h200": "dgx-h200",
    "h800": "hgx-h800",
    "b200": "dgx-b200",
    "gb200": "gb200-nvl72",
    "gb300": "gb300-nvl72",
    "mi300x": "mi300x-8x",
}
# preset-id words that name no system ("8x")
_PLAIN_WORDS = frozenset({"x", "8x"})


@functools.lru_cache(maxsize=1)
def _presets() -> tuple[tuple[str, str, frozenset[str]], ...]:
    """(preset id, GPU family, the id's other words) of each shipped cluster preset."""
    out = []
    for preset in shipped_ids(CLUSTERS_DIR):
        words = preset.split("-")
        family = next((w for w in words if w in FAMILY_PRESET), None)
        if family is not None:
            out.append((preset, family, frozenset(words) - {family} - _PLAIN_WORDS))
    return tuple(out)


def cluster(text: str) -> str | None:
    """The shipped cluster preset ``text`` names by its GPU ("8x H100 80GB", "DGX A100 40 GB",
    "H100 SXM5 on RoCE"), or None (no GPU family, or two). Among one family's presets the one
    whose id shares the most other words with ``text`` ("40gb", "roce", "hgx"), else the
    family's reference system (:data:`FAMILY_PRESET`)."""
    spaced = re.sub(
        r"(?<![a-z0-9])(\d+)\s*[x×]\s*", r"\1 x ", text.lower()
    )  # "8xH100" -> "8 x h100"
    spaced = re.sub(r"(\d+)\s*-?\s*gi?b\b", r"\1gb", spaced)  # "80 GB" -> "80gb"
    words = set(tokens(spaced))
    families = {family for _, family, _ in _presets() if family in words}
    if len(families) != 1:
        return None
    family = families.pop()
    scored = [(len(rest & words), preset) for preset, f, rest in _presets() if f == family]
    best = max(score for score, _ in scored)
    top = [preset for score, preset in scored if score == best]
    if len(top) == 1 and best > 0:
        return top[0]
    return FAMILY_PRESET[family] if FAMILY_PRESET[family] in top else None


def _literals(annotation: Any) -> frozenset[str]:
    return frozenset(a for a in get_args(annotation) if isinstance(a, str))


# the fields read as phrases: (section, field, the field's words)
_PHRASED = (
    ("training", "precision", _literals(TrainPrecision)),
    ("training", "recompute", _literals(Recompute)),
    ("model", "activation", _literals(Activation)),
)


def read_phrases(case: dict[str, Any]) -> list[str]:
    """A precision, recompute level or activation written as a phrase ("BF16 mixed", "fp8
    (hybrid)", "selective (core attention)"), and a cluster written as its GPUs ("8x H100
    80GB"), read as the word they name (planner.validate.words); what was."""
    done = []
    for section, name, valid in _PHRASED:
        holder = case.get(section)
        value = holder.get(name) if isinstance(holder, dict) else None
        if not isinstance(value, str) or len(value) > 200:
            continue
        word = value.strip().lower().replace("_", "-")
        if word in valid or word in _ALIASES.get((section, name), {}):
            continue
        read: Any = _READERS[name](value)
        if read is None:
            continue
        if name == "precision":
            read, recipe = read
            if recipe is not None and holder.get("fp8_recipe") is None:
                holder["fp8_recipe"] = recipe
            read_as = f"fp8 ({holder['fp8_recipe']})" if recipe is not None else read
        else:
            read_as = read
        holder[name] = read
        done.append(f"{section}.{name} {value.strip()[:30]!r} read as {read_as}")
    done += _cluster_phrase(case)
    return done


def _cluster_phrase(case: dict[str, Any]) -> list[str]:
    value = case.get("cluster")
    if not isinstance(value, str) or not 0 < len(value) <= 200:
        return []
    if "-".join(value.lower().replace("_", " ").split()) in shipped_ids(CLUSTERS_DIR):
        return []
    if value.strip().endswith((".yaml", ".yml")) or Path(value).exists():
        return []
    preset = cluster(value)
    if preset is None:
        return []
    case["cluster"] = preset
    return [f"cluster {value.strip()[:40]!r} read as {preset}"]


_READERS = {"precision": precision, "recompute": recompute, "activation": activation}


__all__ = [
    "ACTIVATION_TOKENS",
    "FAMILY_PRESET",
    "FP8_RECIPE_TOKENS",
    "PRECISION_PHRASES",
    "PRECISION_TOKENS",
    "RECOMPUTE_ANY",
    "RECOMPUTE_TOKENS",
    "activation",
    "cluster",
    "precision",
    "read_phrases",
    "recompute",
    "tokens",
]
