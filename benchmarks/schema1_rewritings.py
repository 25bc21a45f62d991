"""Schema 1 rewritings: the same case written the ways a hand-written file may write it.

    python benchmarks/schema1_rewritings.py [FILE] [--independent]

Each case of a schema 1 file (default: ``../shared/validation/public.yaml`` where it exists,
else the shipped public cases written back as schema 1) is rewritten in each of the ways below
(planner/validate/leniency.py and cases.py read them all) and run again; so are the
independent cases in their schema 1 form (``--independent``, benchmarks/independent_v1.py).
The table gives, per rewriting, the cases it applies to and how many changed status, predicted
tokens/s/GPU, or whether and against what figure the case is scored, against the case as
written: every count in the last three columns is a case a hidden set written that way would
have scored differently.
"""

from __future__ import annotations

import copy
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

import planner
from planner.resources import MODELS_DIR
from planner.specs.loading import load_model, shipped_ids
from planner.validate import read_case_file, run_case

sys.path.insert(0, str(Path(__file__).resolve().parent))
from independent_v1 import DIR, SKIP, to_v1  # noqa: E402

SHARED = Path(__file__).resolve().parents[2] / "shared" / "validation" / "public.yaml"
# Megatron-LM argument / Hugging Face config names of schema 1 fields (section, field, name)
_NAMES = (
    ("training", "micro_batch", "micro_batch_size"),
    ("training", "global_batch", "global_batch_size"),
    ("training", "seq_len", "seq_length"),
    ("layout", "tp", "tensor_model_parallel_size"),
    ("layout", "pp", "pipeline_model_parallel_size"),
    ("model", "hidden", "hidden_size"),
    ("model", "layers", "num_hidden_layers"),
    ("model", "heads", "num_attention_heads"),
    ("model", "kv_heads", "num_key_value_heads"),
    ("model", "vocab", "vocab_size"),
)


def _renamed(case: dict[str, Any]) -> bool:
    for section, field, name in _NAMES:
        if field in case[section]:
            case[section][name] = case[section].pop(field)
    return True


def _upper_layout(case: dict[str, Any]) -> bool:
    case["layout"] = {k.upper(): v for k, v in case["layout"].items()}
    return True


def _as_text(case: dict[str, Any]) -> bool:
    case["layout"]["tp"] = str(case["layout"]["tp"])
    case["num_gpus"] = f"{case['num_gpus']:,}"
    case["measured"]["tokens_per_s_per_gpu"] = f"{case['measured']['tokens_per_s_per_gpu']:,}"
    return True


def _spelled(case: dict[str, Any]) -> bool:
    case["cluster"] = case["cluster"].upper().replace("-", " ")
    case["training"]["precision"] = {"bf16": "bfloat16", "fp16": "float16"}.get(
        case["training"]["precision"], case["training"]["precision"].upper()
    )
    return True


def _extras(case: dict[str, Any]) -> bool:
    case.update(date="2025-01", url="https://example.org", tags=["x"])
    case["measured"]["step_time_s"] = 1.0
    case["training"]["optimizer"] = "adamw"
    return True


def _no_provenance(case: dict[str, Any]) -> bool:
    for key in ("source", "quality", "notes"):
        case.pop(key, None)
    if case.get("scored", True) is True:  # the default; an unscored case keeps saying so
        case.pop("scored", None)
    return True


def _na_for_null(case: dict[str, Any]) -> bool:
    nulls = [(s, k) for s in ("layout", "training") for k, v in case[s].items() if v is None]
    for section, key in nulls:
        case[section][key] = "n/a"
    return bool(nulls)


def _false_blocks(case: dict[str, Any]) -> bool:
    blocks = [k for k in ("moe", "mla") if case["model"].get(k) is None]
    for key in blocks:
        case["model"][key] = False
    return bool(blocks)


def _framework_list(case: dict[str, Any]) -> bool:
    if not str(case.get("framework", "")).startswith("megatron-deepspeed"):
        return False
    case["framework"] = ["Megatron-LM", "DeepSpeed"]
    return True


def _zero_word(case: dict[str, Any]) -> bool:
    words = {1: "distributed optimizer", 3: "FSDP"}
    if case["layout"].get("zero") not in words:
        return False
    case["layout"]["zero"] = words[case["layout"]["zero"]]
    return True


# precision and recompute as tables and papers print them
_PRECISION_PHRASES = {"bf16": "BF16 mixed precision", "fp16": "fp16 (fp32 master weights)"}
_RECOMPUTE_PHRASES = {
    "none": "no activation checkpointing",
    "selective": "selective (core attention)",
    "full": "full activation recompute",
}


def _phrased(case: dict[str, Any]) -> bool:
    training = case["training"]
    precision, recompute = training.get("precision"), training.get("recompute")
    if precision not in _PRECISION_PHRASES and recompute not in _RECOMPUTE_PHRASES:
        return False
    training["precision"] = _PRECISION_PHRASES.get(precision, precision)
    training["recompute"] = _RECOMPUTE_PHRASES.get(recompute, recompute)
    return True


# a cluster preset written as its GPUs
_GPUS = {
    "dgx-h100": "8x H100 SXM5 80GB",
    "dgx-a100-80gb": "DGX A100 80GB",
    "dgx-a100-40gb": "8x A100 40GB",
    "dgx-b200": "8x B200",
    "gb200-nvl72": "GB200 NVL72",
}


def _cluster_as_gpus(case: dict[str, Any]) -> bool:
    if case["cluster"] not in _GPUS:
        return False
    case["cluster"] = _GPUS[case["cluster"]]
    return True


def _model_by_name(case: dict[str, Any]) -> bool:
    """The model written as its name where it is the shipped model of that name (by letters
    and digits: ``llama-3.1-405b`` is ``llama3.1-405b``), field for field."""
    model = case["model"]
    key = re.sub(r"[^a-z0-9]", "", model["name"].lower())
    shipped = {re.sub(r"[^a-z0-9]", "", i): i for i in shipped_ids(MODELS_DIR)}.get(key)
    if shipped is None:
        return False
    spec = load_model(shipped).model_dump()
    stated = {k: v for k, v in model.items() if k != "name"}
    if any(
        spec[k] != (v if not isinstance(v, dict) else {**spec[k], **v}) for k, v in stated.items()
    ):
        return False
    case["model"] = model["name"]
    return True


def _step_time(case: dict[str, Any]) -> bool:
    """The measured tokens/s/GPU written as the job's step time, as vTrain publishes it."""
    tokens = case["measured"].get("tokens_per_s_per_gpu")
    if not isinstance(tokens, (int, float)):
        return False
    training = case["training"]
    step = training["global_batch"] * training["seq_len"] / (tokens * case["num_gpus"])
    del case["measured"]["tokens_per_s_per_gpu"]
    case["measured"]["step_time_s"] = step
    return True


REWRITINGS: dict[str, Callable[[dict[str, Any]], bool]] = {
    "Megatron / Hugging Face field names": _renamed,
    "upper-case layout keys": _upper_layout,
    "numbers as text ('8', '1,024')": _as_text,
    "spelled values (DGX H100, bfloat16)": _spelled,
    "facts outside the schema": _extras,
    "no source, quality, notes, scored": _no_provenance,
    "n/a for null": _na_for_null,
    "moe / mla: false": _false_blocks,
    "framework as a list": _framework_list,
    "zero as a word": _zero_word,
    "precision, recompute as phrases": _phrased,
    "cluster as its GPUs": _cluster_as_gpus,
    "model by its name alone": _model_by_name,
    "measured as the step time": _step_time,
}


def _close(a: float | None, b: float | None) -> bool:
    """Two measured figures equal up to the rounding a rewriting's arithmetic leaves."""
    return a == b or (a is not None and b is not None and abs(a - b) <= 1e-6 * abs(b))


def as_schema_1(case: dict[str, Any]) -> dict[str, Any]:
    """A shipped schema 2 case written back as schema 1: its stack named as the framework (the
    framework table reads a stack id as the code it names), each unstated knob as null, the
    fields schema 1 lacks dropped. The caller's case is not changed."""
    raw = copy.deepcopy(case)
    raw["framework"] = raw.pop("stack")
    for knob in raw.pop("unstated", []):
        raw["layout" if knob in ("vpp", "zero", "ep") else "training"][knob] = None
    raw.pop("power_limit_w", None)
    raw["measured"].pop("peak_memory_kind", None)
    raw["measured"].pop("peak_memory_rank", None)
    return raw


def _public() -> list[dict[str, Any]]:
    """``../shared/validation/public.yaml`` where it exists (a checkout beside the shared
    folder), else the shipped copy written back as schema 1."""
    if SHARED.exists():
        return read_case_file(SHARED)[1]
    return [as_schema_1(c) for c in read_case_file("public")[1]]


def _independent() -> list[dict[str, Any]]:
    cases = []
    for path in sorted(DIR.glob("*.yaml")):
        if path.name not in SKIP:
            cases += [to_v1(c) for c in read_case_file(path)[1]]
    return cases


def main(argv: list[str]) -> int:
    paths = [a for a in argv if not a.startswith("--")]
    cases = read_case_file(paths[0])[1] if paths else _public()
    if "--independent" in argv:
        cases += _independent()
    base = {c["id"]: run_case(c, planner.default_profile, 1) for c in cases}
    table = Table(title=f"Schema 1 rewritings of {len(cases)} cases")
    for name in ("rewriting", "cases", "status changed", "prediction changed", "scored changed"):
        table.add_column(name, justify="left" if name == "rewriting" else "right")
    for name, rewrite in REWRITINGS.items():
        applied = status = predicted = scored = 0
        for case in cases:
            written = copy.deepcopy(case)
            if not rewrite(written):
                continue
            applied += 1
            row, was = run_case(written, planner.default_profile, 1), base[case["id"]]
            status += row["status"] != was["status"]
            predicted += (
                row["predicted_tokens_per_s_per_gpu"] != was["predicted_tokens_per_s_per_gpu"]
            )
            measured = (
                row.get("measured_tokens_per_s_per_gpu"),
                was.get("measured_tokens_per_s_per_gpu"),
            )
            scored += (row.get("scored"), _close(*measured)) != (was.get("scored"), True)
        table.add_row(name, f"{applied:,}", f"{status:,}", f"{predicted:,}", f"{scored:,}")
    Console(width=120).print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
