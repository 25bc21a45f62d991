"""``planner validate``: simulate published training runs and compare with their measurements.

Implements shared/validation/README.md (schema version 1): cases in, one JSON object out.
A case that cannot be read gets status "error" with the field at fault; the run goes on.
"""

from __future__ import annotations

import copy
import math
import re
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import Field, ValidationError, create_model
from pydantic_core import PydanticUndefined

from planner.errors import PlannerError, pydantic_error_to_planner
from planner.profile import CalibrationProfile
from planner.resources import cases_path
from planner.safe_io import MAX_CASES_BYTES, MAX_CASES_NODES, MAX_CASES_PER_FILE
from planner.simulate import simulate_step
from planner.specs.base import MAX_GPUS, Spec
from planner.specs.hardware import Cluster
from planner.specs.layout import Layout, Training
from planner.specs.loading import load_cluster, read_yaml_file
from planner.specs.model import ModelSpec
from planner.unknowns import tuned_prediction

_Strict = Spec


def case_section(name: str, spec: type[Spec], required: tuple[str, ...], doc: str) -> type[Spec]:
    """A case's ``layout:`` or ``training:`` model generated from ``spec``'s own fields: the
    same types, ranges and descriptions (one source of truth), ``required`` as in schema 1 and
    every other field optional, ``None`` meaning "not stated" (the spec's default, or the
    framework's, applies). A field added to Layout or Training is accepted by cases too."""
    fields: dict[str, Any] = {}
    for fname, info in spec.model_fields.items():
        copied = copy.copy(info)
        if fname not in required:
            copied.default = None
            fields[fname] = (info.annotation | None, copied)
        else:
            copied.default = PydanticUndefined
            fields[fname] = (info.annotation, copied)
    return create_model(name, __base__=_Strict, __doc__=doc, **fields)


CaseLayout = case_section(
    "CaseLayout", Layout, ("tp", "pp", "dp"), "A case's layout (schema 1: tp, pp, dp required)."
)
CaseTraining = case_section(
    "CaseTraining",
    Training,
    ("seq_len", "global_batch"),
    "A case's training (schema 1: seq_len, global_batch; micro_batch None: not published).",
)


class CaseMeasured(_Strict):
    tokens_per_s_per_gpu: float = Field(ge=0.001, le=1e9)
    mfu_pct: float | None = Field(default=None, ge=0, le=1000)
    peak_memory_gib: float | None = Field(default=None, gt=0, le=16_384)


class Case(_Strict):
    id: str = Field(min_length=1, max_length=200)
    source: str = Field(max_length=10_000)
    quality: Literal["verified_primary", "verified_secondary", "partial"]
    scored: bool = True
    model: ModelSpec
    cluster: str = Field(min_length=1, max_length=1000)
    num_gpus: int = Field(ge=1, le=MAX_GPUS)
    framework: str = Field(default="", max_length=1000)
    layout: CaseLayout
    training: CaseTraining
    measured: CaseMeasured
    notes: str = Field(default="", max_length=100_000)


def framework_overlaps(
    framework: str, sequence_parallel: bool, tp: int, source: str = ""
) -> dict[str, bool]:
    """Overlap and communication switches a framework used by default in its published runs.

    NeMo and Megatron-Bridge performance recipes enable Transformer Engine TP communication
    overlap with sequence parallelism (NeMo ``tp_comm_overlap``); Megatron-LM leaves it opt-in
    (``--tp-comm-overlap``); all overlap DP gradient reduction. Megatron-LM up to 2022
    scattered pipeline messages over the TP ranks (``--scatter-gather-tensors-in-pipeline``,
    default on; Narayanan et al. 2021, section 4.1); Megatron-Core dropped it for sequence
    parallelism.
    """
    fw = framework.lower()
    tp_overlap = sequence_parallel and tp > 1 and ("nemo" in fw or "bridge" in fw)
    legacy_megatron = _published_by_2022(source) and "megatron" in fw and "deepspeed" not in fw
    return {
        "overlap_tp_comm": tp_overlap,
        "overlap_dp_grad_reduce": True,
        "overlap_zero3_param_gather": True,
        "pp_scatter_gather": legacy_megatron,
    }


def _published_by_2022(source: str) -> bool:
    """True when the earliest year a source cites is 2022 or before."""
    years = [int(y) for y in re.findall(r"\b(20[12]\d)\b", source)]
    return bool(years) and min(years) <= 2022


def framework_kernels(framework: str, source: str) -> dict[str, Any]:
    """Kernel generation and training defaults a published run most likely used.

    FlashAttention appeared in mid-2022 and reached Megatron/NeMo in 2023: runs published up
    to 2022 (Megatron-LM papers, Megatron-DeepSpeed) used materialised attention scores and
    GPT-3-style dropout. llm-foundry's MPT benchmarks use FlashAttention-2. NeMo and
    Megatron-Bridge performance recipes use cuDNN fused attention and reduce gradients in bf16
    (``grad_reduce_in_fp32=False``).
    """
    fw = framework.lower()
    legacy = _published_by_2022(source) or "deepspeed" in fw
    if legacy:
        return {"attention_kernel": "unfused", "dropout": True}
    if "foundry" in fw:
        return {"attention_kernel": "flash2"}
    if "bridge" in fw:
        return {
            "attention_kernel": "fused",
            "grad_reduce_dtype": "bf16",
            "cross_entropy": "in_place",
        }
    if "nemo" in fw:
        return {"attention_kernel": "fused", "grad_reduce_dtype": "bf16"}
    return {"attention_kernel": "fused"}


# "with MTP" / "w/ MTP" in a case's notes or id: the run trained multi-token prediction modules
_MTP_STATED = re.compile(r"\b(?:with|w/)\s*MTP\b|_mtp\b", re.IGNORECASE)


def framework_recompute(framework: str, model: ModelSpec, recompute: str) -> dict[str, Any]:
    """The submodules a framework's performance recipes recompute under ``selective``.

    Megatron-Core's default module is ``core_attn``. The Megatron-Bridge DeepSeek-V3 performance
    presets (scripts/performance/configs/deepseek/*workload_base_configs.py) recompute the MLA
    up-projection (``recompute_modules=["mla_up_proj"]``, with ``mlp`` on some systems), which
    replaces core attention in that list.
    """
    fw = framework.lower()
    if recompute == "selective" and model.mla is not None and ("nemo" in fw or "bridge" in fw):
        return {"recompute_modules": ("mla_up_proj",)}
    return {}


# "recompute: not stated" in a case's notes: the field holds the case author's assumption
_RECOMPUTE_UNSTATED = re.compile(r"\brecompute:\s*not stated", re.IGNORECASE)


def recompute_stated(case: Case) -> bool:
    """False where the case's notes say the source did not state activation recompute."""
    return not _RECOMPUTE_UNSTATED.search(case.notes)


def recompute_ladder(model: ModelSpec, training: Training) -> list[Training]:
    """Recompute settings to try, lightest first, for a run whose recompute is unknown.

    A published run fitted its memory, so a recipe that did not state its recompute used at
    least as much as the lightest setting that fits. The ladder follows the cost of what is
    re-run: selective with the elementwise modules (Megatron-Core ``layernorm``, and ``moe_act``
    on MoE models, as the Megatron-Bridge MoE presets use), then every layer (full). None with
    activation offloading, which Megatron-Core does not combine with recompute.
    """
    if training.recompute != "none" or training.offload_layers:
        return []
    cheap = ("layernorm", "moe_act") if model.moe is not None else ("core_attn", "layernorm")
    return [
        training.model_copy(update={"recompute": "selective", "recompute_modules": cheap}),
        training.model_copy(update={"recompute": "full", "recompute_modules": None}),
    ]


# "offloads activations of 40 layers" in a case's notes (schema v1 has no field)
_OFFLOAD_STATED = re.compile(
    r"offload(?:s|ing)?\s+(?:the\s+)?activations\s+of\s+(\d+)\s+layers", re.I
)


def stated_offload_layers(case: Case) -> int:
    """Layers whose activations the run offloaded to host memory, where its notes say so
    (Megatron-Bridge ``cpu_offloading_num_layers``), else 0."""
    m = _OFFLOAD_STATED.search(case.notes)
    return int(m.group(1)) if m else 0


def stated_mtp_layers(case: Case) -> int:
    """Multi-token-prediction depth a case states in its notes or id (schema v1 has no field):
    1 (DeepSeek-V3's depth) where the run is said to train "with MTP", else the model's own."""
    if case.model.mtp_layers:
        return case.model.mtp_layers
    return 1 if _MTP_STATED.search(f"{case.id} {case.notes}") else 0


def case_inputs(case: Case) -> tuple[ModelSpec, Cluster, Layout, Training, list[str]]:
    """Specs for one case, and the assumptions made where the case is silent."""
    notes = []
    cl = load_cluster(case.cluster)
    lay = case.layout
    mb = case.training.micro_batch
    if mb is None:
        mb = 1
        notes.append("micro_batch not published: assumed 1")
    stated_layout = lay.model_dump(exclude_none=True)
    overlaps = framework_overlaps(case.framework, bool(lay.sequence_parallel), lay.tp, case.source)
    layout = Layout(**{**overlaps, **stated_layout})  # what the case states wins
    t = case.training
    recompute = t.recompute or "none"
    framework = {
        **framework_kernels(case.framework, case.source),
        **framework_recompute(case.framework, case.model, recompute),
    }
    training = Training(**{**framework, **t.model_dump(exclude_none=True), "micro_batch": mb})
    offload = stated_offload_layers(case)
    if offload:
        training = training.model_copy(update={"offload_layers": offload})
        notes.append(f"activations of {offload} layers offloaded to host memory (the case says so)")
    if training.recompute_modules:
        notes.append(
            "selective recompute of " + ", ".join(training.recompute_modules) + " (recipe default)"
        )
    model = case.model
    mtp = stated_mtp_layers(case)
    if mtp != model.mtp_layers:
        model = model.model_copy(update={"mtp_layers": mtp})
        notes.append(f"mtp_layers: {mtp} (the case says the run trained with MTP)")
    if layout.world_size != case.num_gpus:
        raise PlannerError(
            "layout",
            f"tp*cp*dp*pp = {layout.world_size} but num_gpus = {case.num_gpus}",
            "factors whose product equals num_gpus",
        )
    return model, cl, layout, training, notes


def _case_id(raw: Any) -> str:
    """The case's id as a short string for its result row; an id that is not a short string
    (a list, a YAML alias tree) is never copied into the results."""
    value = raw.get("id") if isinstance(raw, dict) else None
    if isinstance(value, str) and 0 < len(value) <= 200:
        return value
    return "?"


def run_case(raw: Any, profile_for: Any) -> dict:
    """Simulate one raw case mapping; never raises: any failure is this case's error row."""
    case_id = _case_id(raw)
    out: dict[str, Any] = {
        "id": case_id,
        "status": "error",
        "reason": "",
        "predicted_tokens_per_s_per_gpu": None,
        "measured_tokens_per_s_per_gpu": None,
        "error_pct": None,
        "predicted_mfu_pct": None,
        "predicted_peak_memory_gib": None,
        "measured_peak_memory_gib": None,
    }
    try:
        if not isinstance(raw, dict):
            raise PlannerError("case", "expected a mapping", "a case of schema version 1")
        try:
            case = Case.model_validate(raw)
        except ValidationError as exc:
            raise pydantic_error_to_planner(exc) from None
        out["measured_tokens_per_s_per_gpu"] = case.measured.tokens_per_s_per_gpu
        out["measured_peak_memory_gib"] = case.measured.peak_memory_gib
        out["scored"] = case.scored
        out["cluster"] = case.cluster
        out["source"] = case.source.split(",")[0]
        model, cl, layout, training, notes = case_inputs(case)
        profile = profile_for(cl)
        rep = simulate_step(model, cl, layout, training, profile)
        if case.training.micro_batch is None:
            rep = _tuned_over_unknowns(model, cl, layout, training, profile, rep, notes, out)
        if not rep.fits and not recompute_stated(case):
            for lighter in recompute_ladder(model, training):
                trial = simulate_step(model, cl, layout, lighter, profile)
                if trial.fits:
                    what = ", ".join(lighter.selective_modules) or lighter.recompute
                    notes.append(
                        f"recompute not stated and none needs {rep.peak_memory_gib:.1f} GiB of "
                        f"{rep.usable_memory_gib:.1f} GiB: assumed recompute of {what}, the "
                        "lightest that fits"
                    )
                    rep = trial
                    break
        return _case_result(out, case, rep, notes)
    except PlannerError as exc:
        out["reason"] = " ".join(str(exc).split())
    except Exception as exc:  # noqa: BLE001 - any failure is this case's row; the others run
        # (inputs are bounded where they are read, so this names a planner bug for this case)
        out["reason"] = f"case: cannot be simulated ({type(exc).__name__}: {str(exc)[:200]})"
    return out


def _tuned_over_unknowns(
    model: ModelSpec,
    cl: Cluster,
    layout: Layout,
    training: Training,
    profile: CalibrationProfile,
    rep: Any,
    notes: list[str],
    out: dict,
) -> Any:
    """An unpublished micro-batch: the tuned prediction (the fastest micro-batch that fits,
    what a tuned run used; :mod:`planner.unknowns`) and the range over those that fit
    (``out["predicted_range_tokens_per_s_per_gpu"]``). None fits: the micro-batch 1 report."""
    try:
        tuned = tuned_prediction(model, cl, layout, training, profile, ("micro_batch",))
    except PlannerError:
        return rep
    lo, hi = tuned.tokens_per_s_per_gpu_min, tuned.tokens_per_s_per_gpu_max
    out["predicted_range_tokens_per_s_per_gpu"] = [round(lo, 2), round(hi, 2)]
    notes[:] = [n for n in notes if not n.startswith("micro_batch not published")]
    notes.append(
        f"micro_batch not published: tuned, {tuned.picked['micro_batch']} is the fastest of "
        f"{tuned.settings} that fit ({lo:,.0f}-{hi:,.0f} tokens/s/GPU)"
    )
    return tuned.report


def _case_result(out: dict, case: Case, rep: Any, notes: list[str]) -> dict:
    """Fill a case's result row from its report (every figure finite: simulate checks)."""
    pred = rep.tokens_per_s_per_gpu
    meas = case.measured.tokens_per_s_per_gpu
    out.update(
        {
            "status": "ok" if rep.fits else "infeasible",
            "reason": "; ".join(notes + rep.feasibility),
            "predicted_tokens_per_s_per_gpu": round(pred, 2),
            "error_pct": round((pred - meas) / meas * 100.0, 2),
            "predicted_mfu_pct": round(rep.mfu_pct, 2),
            "predicted_peak_memory_gib": round(rep.peak_memory_gib, 2),
        }
    )
    return out


def summarize(cases: list[dict]) -> dict:
    """Error summary over scored cases with status ok (shared/validation/README.md)."""
    ok = [c for c in cases if c["status"] == "ok" and _finite(c.get("error_pct"))]
    scored = [c for c in ok if c.get("scored", True)]
    ape = np.array([abs(c["error_pct"]) for c in scored], dtype=float)
    mem = [
        abs(c["predicted_peak_memory_gib"] - c["measured_peak_memory_gib"])
        / c["measured_peak_memory_gib"]
        * 100
        for c in ok
        if c.get("measured_peak_memory_gib")
    ]

    def stat(fn: Any) -> float | None:
        return round(float(fn(ape)), 2) if ape.size else None

    return {
        "n": len(cases),
        "n_ok": len(ok),
        "n_scored": len(scored),
        "mape_pct": stat(np.mean),
        "median_ape_pct": stat(np.median),
        "p90_ape_pct": stat(lambda a: np.percentile(a, 90)),
        "max_ape_pct": stat(np.max),
        "memory_mape_pct": round(float(np.mean(mem)), 2) if mem else None,
    }


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and math.isfinite(value)


def check_case_list(data: Any, max_cases: int = MAX_CASES_PER_FILE) -> list[Any]:
    """A parsed validation file as its list of raw cases: a list of at most ``max_cases``
    cases whose ids are unique (a case repeated through YAML aliases would be simulated once
    per copy, and its rows could not be told apart)."""
    if not isinstance(data, list):
        raise PlannerError(
            "FILE",
            f"expected a YAML list of cases, got {type(data).__name__}",
            "schema version 1 (a list of case mappings)",
        )
    if len(data) > max_cases:
        raise PlannerError(
            "FILE", f"{len(data):,} cases", f"at most {max_cases:,} cases per file (split it)"
        )
    seen: dict[int, str] = {}
    ids: set[str] = set()
    for i, raw in enumerate(data):
        if id(raw) in seen:  # the same node twice: an alias of an earlier case
            raise PlannerError(
                f"FILE[{i}]", f"repeats case {seen[id(raw)]!r} (a YAML alias)", "unique cases"
            )
        case_id = _case_id(raw)
        seen[id(raw)] = case_id
        if case_id != "?" and case_id in ids:
            raise PlannerError(f"FILE[{i}].id", f"duplicate id {case_id!r}", "unique case ids")
        ids.add(case_id)
    return data


def validate_file(path: str | Path, profile_for: Any) -> dict:
    """Run every case of a validation file (a path, or a shipped id: ``public``,
    ``heldout_moe``); ``profile_for(cluster) -> CalibrationProfile``."""
    data = read_yaml_file(cases_path(path), "FILE", MAX_CASES_BYTES, MAX_CASES_NODES)
    cases = [run_case(raw, profile_for) for raw in check_case_list(data)]
    return {"cases": cases, "summary": summarize(cases)}


__all__ = [
    "Case",
    "CalibrationProfile",
    "check_case_list",
    "run_case",
    "summarize",
    "validate_file",
]
