"""What reading a schema 1 case forgives, and says it did.

Schema 1 (``shared/validation/README.md``) is written by hand from papers and tables, so a
case may carry a figure the schema has no field for (``measured.step_time_s``, ``date``,
``training.optimizer``), a field in another spelling (``Micro_Batch``, ``kv_head``) or a
measured figure as the table printed it (``"12,345"``, ``"41 %"``). None of these stops the
case:

- a key that differs from an unstated field only in case, ``-`` or a space for ``_``, that is
  the field's name in Megatron-LM's arguments or a Hugging Face config (:data:`_SYNONYMS`:
  ``micro_batch_size``, ``num_key_value_heads``), or a slip of a letter or two (:data:`CLOSE`)
  is read as that field; any other unknown key is left out;
- a value a table prints for a figure it does not give (``n/a``, ``-``, :data:`NOT_GIVEN`) is
  read as null in the layout, the training, the measured figures and the model (its MoE and
  MLA blocks too), and a ``false``, ``none`` or ``n/a`` MoE or MLA block as none;
- a null model field that has a default (tied embeddings, the MoE block's shared experts,
  leading dense layers, layer frequency) takes the shipped model's value where the case's
  model has a shipped namesake, else the default;
- an interleaving depth written as 0 (a table's "not used") is read as 1, a context- or
  expert-parallel size written as 0 as not stated (:data:`ZERO_MEANS`), and a depth no
  pipeline of the model can have as not stated;
- a model without a name is named after the case's id, and one whose every layer routes to
  experts needs no dense FFN width; a model written as its name, or leaving out a field it
  needs, takes what it leaves out from the shipped model of that name
  (:mod:`planner.validate.model_fill`);
- a precision, recompute level or activation written as a phrase ("BF16 mixed", "fp8
  (hybrid)", "selective (core attention)", "silu_glu") and a cluster written as its GPUs
  ("8x H100 80GB", "DGX A100 40GB") are read as the word they name, where they name one
  (:mod:`planner.validate.words`);
- a job size left out is the product of the layout's TP, PP, DP and CP, and a TP or PP size
  left out (one of them) the one the job's size leaves;
- a case without tokens/s/GPU that gives the job's tokens/s, sequences/s or step time reads
  its tokens/s/GPU from it (:mod:`planner.validate.throughput`);
- a recompute written as a flag (``true``: full, as Megatron-LM's --checkpoint-activations;
  ``false``: none) is read as that level;
- a ZeRO stage written as what it shards (``ZeRO-1``, ``distributed optimizer``, ``FSDP``,
  ``full_shard``, ``DDP``: :data:`ZERO_WORDS`) is read as its number;
- a framework written as a list of names is read as their compound (``Megatron-LM +
  DeepSpeed``);
- a size written with thousands separators (``num_gpus: "1,024"``) is read as its number;
- a measured figure written with thousands separators or a percent sign is read as its number;
  one that still is no number is left out, except the scored tokens/s, which stays the
  field's error.

The case's row names each (:func:`forgive`), so nothing is dropped silently. Schema 2 is the
project's own format and refuses all of them (``docs/validation-schema.md``).
"""

from __future__ import annotations

import difflib
import math
import re
from typing import Any

from planner.specs.base import Spec
from planner.specs.model import MLASpec, ModelSpec, MoESpec
from planner.validate.cases import Case, CaseLayout, CaseMeasured, CaseTraining
from planner.validate.model_fill import (
    block_fields,
    model_by_name,
    model_name,
    null_values,
    unused_ffn,
)
from planner.validate.throughput import per_gpu
from planner.validate.words import read_phrases

# difflib's similarity ratio at or above which an unknown key is read as the field it nearly
# names ("kv_head" -> "kv_heads" 0.93, "micro_bach" -> "micro_batch" 0.95, "head" -> "heads"
# 0.89); below it ("micro_batch_size" -> "micro_batch" 0.81, "seq" -> "seq_len" 0.6) the key is
# left out and named
CLOSE = 0.85
# the most phrases a row's note lists one by one (the rest are counted)
NAMED = 6
# the most unknown keys of one section matched against its fields (the rest are left out):
# matching is a difflib ratio per field, so a section of 100,000 keys stays milliseconds
MATCHED = 64
# the figure a case is scored on: text that is no number stays its error
SCORED = "tokens_per_s_per_gpu"

# each section of a schema 1 case: (path in the case, its spec)
_SECTIONS: tuple[tuple[tuple[str, ...], type[Spec]], ...] = (
    ((), Case),
    (("model",), ModelSpec),
    (("model", "moe"), MoESpec),
    (("model", "mla"), MLASpec),
    (("layout",), CaseLayout),
    (("training",), CaseTraining),
    (("measured",), CaseMeasured),
)
# the names Megatron-LM's arguments (megatron/training/arguments.py, "-" as "_"), Hugging Face
# configs (LlamaConfig, MixtralConfig, Qwen3MoeConfig, DeepseekV3Config) and the columns of the
# NeMo / Megatron-Bridge performance tables (GBS, MBS, VP) give a schema 1 field, per
# section: read as that field. Left out on purpose: names whose meaning differs
# (--num-layers-per-virtual-pipeline-stage counts layers, not stages; Megatron's
# --moe-shared-expert-intermediate-size is all shared experts together; --untie-... inverts)
_SYNONYMS: dict[tuple[str, ...], dict[str, str]] = {
    (): {
        "stack": "framework",  # schema 2's name for it
        "software": "framework",
        "gpus": "num_gpus",
        "n_gpus": "num_gpus",
        "world_size": "num_gpus",
    },
    ("model",): {
        "num_layers": "layers",
        "num_hidden_layers": "layers",
        "n_layers": "layers",
        "hidden_size": "hidden",
        "d_model": "hidden",
        "ffn_hidden_size": "ffn_hidden",
        "intermediate_size": "ffn_hidden",
        "num_attention_heads": "heads",
        "n_heads": "heads",
        "num_query_groups": "kv_heads",
        "num_key_value_heads": "kv_heads",
        "n_kv_heads": "kv_heads",
        "kv_channels": "head_dim",
        "vocab_size": "vocab",
        "padded_vocab_size": "vocab",
        "tie_word_embeddings": "tied_embeddings",
    },
    ("model", "moe"): {
        "num_experts": "experts",
        "num_local_experts": "experts",
        "n_routed_experts": "experts",
        "moe_router_topk": "top_k",
        "num_experts_per_tok": "top_k",
        "moe_ffn_hidden_size": "expert_ffn_hidden",
        "moe_intermediate_size": "expert_ffn_hidden",
        "n_shared_experts": "shared_experts",
        "first_k_dense_replace": "dense_layers",
        "moe_layer_freq": "layer_freq",
    },
    ("layout",): {
        "tensor_model_parallel_size": "tp",
        "tensor_parallel_size": "tp",
        "pipeline_model_parallel_size": "pp",
        "pipeline_parallel_size": "pp",
        "data_parallel_size": "dp",
        "context_parallel_size": "cp",
        "expert_model_parallel_size": "ep",
        "expert_parallel_size": "ep",
        "virtual_pipeline_model_parallel_size": "vpp",
        "vp": "vpp",  # the column NeMo and Megatron-Bridge performance tables print
        "zero_stage": "zero",
    },
    ("training",): {
        "seq_length": "seq_len",
        "sequence_length": "seq_len",
        "max_seq_len": "seq_len",
        "micro_batch_size": "micro_batch",
        "mbs": "micro_batch",  # the columns NeMo and Megatron-Bridge tables print
        "global_batch_size": "global_batch",
        "gbs": "global_batch",
        "recompute_granularity": "recompute",
        "activation_checkpointing": "recompute",
        "checkpoint_activations": "recompute",
        "activation_recompute": "recompute",
        "dtype": "precision",
        "mixed_precision": "precision",
    },
}
# a number as tables print it: 12,345.6 (thousands separated by commas), 41.2 %, 1_000
_GROUPED = re.compile(r"^[+-]?\d{1,3}(,\d{3})+(\.\d+)?$")
_PLAIN = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")


def _normal(key: str) -> str:
    return key.strip().lower().replace("-", "_").replace(" ", "_")


def _match(key: str, free: list[str], synonyms: dict[str, str]) -> str | None:
    """The unstated field ``key`` names, if any (the same word, a synonym, else one within
    CLOSE)."""
    word = _normal(key)
    word = synonyms.get(word.lstrip("_"), word)
    if word in free:
        return word
    close = difflib.get_close_matches(word, free, n=1, cutoff=CLOSE)
    return close[0] if close else None


def _section(
    data: dict[Any, Any], spec: type[Spec], path: tuple[str, ...]
) -> tuple[dict, list[str]]:
    """A copy of ``data`` with its unknown keys read as the fields they name or left out;
    what was done, one phrase per key."""
    fields, where = set(spec.model_fields), "".join(f"{p}." for p in path)
    out = {k: v for k, v in data.items() if isinstance(k, str) and k in fields}
    done: list[str] = []
    for key, value in data.items():
        if isinstance(key, str) and key in fields:
            continue
        shown = f"{where}{' '.join(str(key)[:200].split())[:60]}"
        free = sorted(fields - set(out))
        matched = isinstance(key, str) and len(done) < MATCHED
        named = _match(key, free, _SYNONYMS.get(path, {})) if matched else None
        if named is None:
            done.append(f"{shown} left out")
        else:
            out[named] = value
            done.append(f"{shown} read as {where}{named}")
    return out, done


def _number(text: str) -> float | None:
    """``text`` as a finite number where it is one as printed (12,345.6 / 41.2 % / 1_000),
    else None."""
    word = text.strip().removesuffix("%").strip().replace("_", "")
    if _GROUPED.match(word):
        word = word.replace(",", "")
    number = float(word) if _PLAIN.match(word) else math.inf
    return number if math.isfinite(number) else None


def _figures(measured: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """``measured`` with each figure written as text read as its number, or left out (the
    scored one stays for the schema to refuse); what was done."""
    out, done = dict(measured), []
    for key, value in measured.items():
        if not isinstance(value, str):
            continue
        number = _number(value)
        if number is not None:
            out[key] = number
            done.append(f"measured.{key} {value.strip()[:30]!r} read as {number:g}")
        elif key != SCORED:
            del out[key]
            done.append(f"measured.{key} {value.strip()[:30]!r} left out (no number)")
    return out, done


def _holders(case: dict[str, Any], paths: tuple[tuple[str, ...], ...]) -> list[tuple[str, dict]]:
    """("section." as the row names it, the mapping) of each path of ``case`` that holds one."""
    out = []
    for path in paths:
        holder: Any = case
        for name in path:
            holder = holder.get(name) if isinstance(holder, dict) else None
        if isinstance(holder, dict):
            out.append(("".join(f"{p}." for p in path), holder))
    return out


def _grouped_sizes(case: dict[str, Any]) -> list[str]:
    """Read each size written with thousands separators ("1,024" GPUs, vocab "128,256") in the
    case, its model (and MoE block), layout and training as its number; what was."""
    done = []
    paths = ((), ("layout",), ("training",), ("model",), ("model", "moe"))
    for where, holder in _holders(case, paths):
        for key, value in holder.items():
            if isinstance(value, str) and _GROUPED.match(value.strip()):
                holder[key] = value.strip().replace(",", "")
                done.append(f"{where}{key} {value.strip()[:30]!r} read as {holder[key]}")
    return done


# what tables print for a figure they do not give: read as null (not stated) in the layout, the
# training and the measured figures (not "none": recompute none is a value), and as none for the
# model's MoE and MLA blocks (with "none" and "no" too)
NOT_GIVEN = frozenset({"", "-", "--", "n/a", "na", "null", "not stated", "unknown", "?"})
NO_BLOCK = NOT_GIVEN | {"none", "no", "false"}


def _not_given(value: Any, words: frozenset[str] = NOT_GIVEN) -> bool:
    return isinstance(value, str) and " ".join(value.lower().split()) in words


def _words_as_null(case: dict[str, Any]) -> list[str]:
    """Null each value of :data:`NOT_GIVEN` (and a ``false`` MoE or MLA block: none); what
    was."""
    done = []
    model = case.get("model")
    if isinstance(model, dict):
        for key in ("moe", "mla"):
            value = model.get(key)
            if value is False or _not_given(value, NO_BLOCK):
                model[key] = None
                done.append(f"model.{key} {value!r:.20} read as none")
    paths = (
        ("layout",),
        ("training",),
        ("measured",),
        ("model",),
        ("model", "moe"),
        ("model", "mla"),
    )
    for where, holder in _holders(case, paths):
        for key, value in holder.items():
            if key not in ("moe", "mla") and _not_given(value):
                holder[key] = None
                done.append(f"{where}{key} {value.strip()[:20]!r} read as null")
    return done


# a ZeRO stage written as the name of what it shards (shared/validation/README.md: 1 is the
# Megatron distributed optimizer, 3 FSDP full shard; PyTorch FSDP's SHARD_GRAD_OP is stage 2,
# NO_SHARD and plain DDP are 0)
ZERO_WORDS: dict[str, int] = {
    **{w: 0 for w in ("none", "no", "off", "ddp", "zero-0", "zero0", "no-shard")},
    **{w: 1 for w in ("zero-1", "zero1", "distributed-optimizer", "distopt")},
    **{w: 2 for w in ("zero-2", "zero2", "shard-grad-op")},
    **{w: 3 for w in ("zero-3", "zero3", "fsdp", "full-shard", "fsdp-full-shard")},
}


def _recompute_flag(case: dict[str, Any]) -> list[str]:
    """A ``training.recompute`` written as a flag (``true``: activation checkpointing on, as
    Megatron-LM's --checkpoint-activations, i.e. full; ``false``: none) read as that level;
    what was."""
    training = case.get("training")
    value = training.get("recompute") if isinstance(training, dict) else None
    if not isinstance(value, bool):
        return []
    training["recompute"] = "full" if value else "none"
    return [f"training.recompute {value} read as {training['recompute']}"]


def _zero_word(case: dict[str, Any]) -> list[str]:
    """A ``layout.zero`` written as a word of :data:`ZERO_WORDS` read as its stage; what was."""
    layout = case.get("layout")
    value = layout.get("zero") if isinstance(layout, dict) else None
    if not isinstance(value, str):
        return []
    word = "-".join(value.strip().lower().replace("_", " ").split())
    if word not in ZERO_WORDS:
        return []
    layout["zero"] = ZERO_WORDS[word]
    return [f"layout.zero {value.strip()[:30]!r} read as {layout['zero']}"]


def _framework_list(case: dict[str, Any]) -> list[str]:
    """A framework written as a list of names (``[Megatron-LM, DeepSpeed]``) read as the
    compound name ``Megatron-LM + DeepSpeed`` (planner.validate.frameworks reads its parts);
    what was."""
    value = case.get("framework")
    if not isinstance(value, list) or not value or len(value) > 8:
        return []
    if not all(isinstance(v, str) and 0 < len(v) <= 100 for v in value):
        return []
    case["framework"] = " + ".join(value)
    return [f"framework list read as {case['framework']!r}"]


# layout sizes a table prints as 0 for "not used": an interleaving depth read as 1 (not
# interleaved); a context- or expert-parallel size read as not stated, so the job's size gives
# the first (planner.validate.inputs.implied_cp: 1 where tp*pp*dp = num_gpus) and a dense
# model's EP is 1 while an MoE model's is tuned (planner.unknowns; its runs split the experts)
ZERO_MEANS: dict[str, int | None] = {"vpp": 1, "cp": None, "ep": None}


def _unused_sizes(layout: dict[str, Any]) -> list[str]:
    """Read each size of :data:`ZERO_MEANS` written as 0 (or "0"); what was."""
    done = []
    for key, unused in ZERO_MEANS.items():
        value = layout.get(key)
        if isinstance(value, bool) or value not in (0, "0"):
            continue
        layout[key] = unused
        done.append(f"layout.{key} 0 read as {'not stated' if unused is None else unused}")
    return done


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _num_gpus(case: dict[str, Any]) -> list[str]:
    """A job size left out (missing or null) read as the product of the layout's TP, PP, DP
    and CP (1 where not stated) when they are given as numbers; what was."""
    layout = case.get("layout")
    if case.get("num_gpus") is not None or not isinstance(layout, dict):
        return []
    sizes = [layout.get(k) for k in ("tp", "pp", "dp")] + [layout.get("cp") or 1]
    if not all(_int(v) for v in sizes):
        return []
    case["num_gpus"] = math.prod(sizes)
    return [f"num_gpus not stated: tp x pp x dp x cp = {case['num_gpus']}"]


def _model_parallel_size(case: dict[str, Any]) -> list[str]:
    """A TP or PP size left out (missing or null) where the other sizes, dp and num_gpus are
    given as numbers: the one num_gpus leaves, where it is whole; what was (both left out stay
    the fields' error: their split is not stated)."""
    layout = case.get("layout")
    if not isinstance(layout, dict) or not _int(case.get("num_gpus")):
        return []
    missing = [k for k in ("tp", "pp") if layout.get(k) is None]
    if len(missing) != 1:
        return []
    given = [layout.get(k) for k in ("tp", "pp", "dp") if k not in missing]
    given.append(layout.get("cp") or 1)
    if not all(_int(v) for v in given) or case["num_gpus"] % math.prod(given):
        return []
    layout[missing[0]] = case["num_gpus"] // math.prod(given)
    return [f"layout.{missing[0]} not stated: num_gpus / the other sizes = {layout[missing[0]]}"]


def _impossible_vpp(case: dict[str, Any]) -> list[str]:
    """An interleaving depth no pipeline of the model can have (pp x vpp above its layers plus
    the embedding and loss stages: a table's layers-per-chunk, or a slip) read as not stated,
    so the tuned depth is costed; what was."""
    layout, model = case.get("layout"), case.get("model")
    if not isinstance(layout, dict) or not isinstance(model, dict):
        return []
    vpp, pp, layers = layout.get("vpp"), layout.get("pp"), model.get("layers")
    if not all(_int(v) for v in (vpp, pp, layers)) or pp * vpp <= layers + 2:
        return []
    layout["vpp"] = None
    return [
        f"layout.vpp {vpp} read as not stated: pp x vpp = {pp * vpp} exceeds the {layers} layers"
    ]


def forgive(raw: Any) -> tuple[Any, list[str]]:
    """A raw schema 1 case read as this module's docstring says, and the row's note naming
    what was read or left out (none when nothing was). The caller's data is not changed; what
    is not a mapping is returned as it is, for the schema to refuse."""
    if not isinstance(raw, dict):
        return raw, []
    out: dict[Any, Any] = dict(raw)
    done: list[str] = []
    if isinstance(out.get("measured"), dict):  # a job-level figure in place of the scored one
        out["measured"] = dict(out["measured"])
        done += per_gpu(out)
    for path, spec in _SECTIONS:
        # sections are read outside in, and each is a fresh dict once read
        holder: Any = out
        for name in path[:-1]:
            holder = holder.get(name) if isinstance(holder, dict) else None
        if not path:
            out, phrases = _section(out, spec, path)
        elif isinstance(holder, dict) and isinstance(holder.get(path[-1]), dict):
            holder[path[-1]], phrases = _section(holder[path[-1]], spec, path)
        else:
            continue
        done += phrases
    done += _framework_list(out) + _words_as_null(out) + model_by_name(out) + model_name(out)
    done += _zero_word(out) + _recompute_flag(out) + read_phrases(out)
    done += _grouped_sizes(out) + _num_gpus(out) + _model_parallel_size(out)
    if isinstance(out.get("model"), dict):
        done += null_values(out["model"]) + block_fields(out["model"]) + unused_ffn(out["model"])
    if isinstance(out.get("layout"), dict):
        done += _unused_sizes(out["layout"]) + _impossible_vpp(out)
    if isinstance(out.get("measured"), dict):
        out["measured"], phrases = _figures(out["measured"])
        done += phrases
    if not done:
        return out, []
    more = f" and {len(done) - NAMED} more" if len(done) > NAMED else ""
    return out, [f"not as schema 1 writes it: {', '.join(done[:NAMED])}{more}"]


__all__ = [
    "CLOSE",
    "MATCHED",
    "NAMED",
    "NOT_GIVEN",
    "NO_BLOCK",
    "SCORED",
    "ZERO_MEANS",
    "ZERO_WORDS",
    "forgive",
]
