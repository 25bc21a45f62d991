"""Run validation cases: each case simulated under its stack, its unstated knobs tuned.

One policy for what a case leaves open (:mod:`planner.unknowns`): every unstated knob
(micro-batch, interleaving depth, recompute, ZeRO stage) takes the fastest legal value under
the case's stack that fits in memory (what the tuned, published run used), and the row carries
the range of tokens/s/GPU over every value that fits. A case that cannot be read or costed
gets status "error" naming the field at fault; the run goes on.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from planner.errors import PlannerError, pydantic_error_to_planner
from planner.simulate import simulate_step
from planner.specs.layout import Training
from planner.stacks import (
    applied_violation,
    apply_stack,
    model_violations,
)
from planner.uncertainty import error_band
from planner.unknowns import lightest_setting, tuned_prediction
from planner.validate.cases import Case, CaseV2
from planner.validate.fallbacks import fitting, with_fallback
from planner.validate.files import (
    case_file,
    case_id,
    check_case_list,
    note_repeated_ids,
    read_case_file,
    repeated_ids,
)
from planner.validate.inputs import CaseInputs, case_inputs, v1_zero3_stack
from planner.validate.leniency import forgive
from planner.validate.summary import summarize
from planner.validate.v1_readings import schema_1_readings


def _empty_row(case_id: str) -> dict[str, Any]:
    return {
        "id": case_id,
        "status": "error",
        "reason": "",
        "predicted_tokens_per_s_per_gpu": None,
        "measured_tokens_per_s_per_gpu": None,
        "error_pct": None,
        "predicted_mfu_pct": None,
        "predicted_mfu_training_precision_pct": None,
        "predicted_peak_memory_gib": None,
        "measured_peak_memory_gib": None,
    }


def parse_case(raw: Any, schema: int = 1) -> Case | CaseV2:
    """One raw case mapping of ``schema`` as its model; a PlannerError naming the field."""
    if not isinstance(raw, dict):
        raise PlannerError("case", "expected a mapping", f"a case of schema version {schema}")
    try:
        return (CaseV2 if schema == 2 else Case).model_validate(raw)
    except ValidationError as exc:
        raise pydantic_error_to_planner(exc) from None


def run_case(raw: Any, profile_for: Any, schema: int = 1, strict: bool = False) -> dict:
    """Simulate one raw case mapping; never raises: any failure is this case's error row.
    ``strict``: a schema 1 framework outside the framework table is an error, and so is what
    :func:`planner.validate.leniency.forgive` would read (a field outside the schema)."""
    out = _empty_row(case_id(raw))
    try:
        raw, read = forgive(raw) if schema == 1 and not strict else (raw, [])
        case = parse_case(raw, schema)
        out["measured_tokens_per_s_per_gpu"] = case.measured.tokens_per_s_per_gpu
        out["measured_peak_memory_gib"] = case.measured.peak_memory_gib
        out["scored"] = case.scored and case.measured.tokens_per_s_per_gpu is not None
        out["cluster"] = case.cluster
        out["source"] = case.source.split(",")[0]
        inputs = case_inputs(case, strict)
        if case.measured.tokens_per_s_per_gpu is None:
            read.append("measured.tokens_per_s_per_gpu not stated: simulated, not scored")
        inputs.notes[:0] = read
        out["stack"] = inputs.stack.name
        return _simulate_case(out, case, inputs, profile_for(inputs.cluster))
    except PlannerError as exc:
        out["reason"] = " ".join(str(exc).split())
    except Exception as exc:  # noqa: BLE001 - any failure is this case's row; the others run
        # (inputs are bounded where they are read, so this names a planner bug for this case)
        out["reason"] = f"case: cannot be simulated ({type(exc).__name__}: {str(exc)[:200]})"
    return out


def _simulate_case(out: dict, case: Case | CaseV2, inputs: CaseInputs, profile: Any) -> dict:
    """The row of one case: its stated inputs under its stack, the unstated knobs tuned."""
    i = schema_1_readings(case, inputs, profile)
    notes = list(i.notes)
    violations = [
        *model_violations(i.stack, i.model),
        *filter(None, [applied_violation(i.stack, i.model, i.layout, i.training)]),
    ]
    if violations and i.enforce_stack:
        raise violations[0]
    for violation in violations:
        notes.append(f"{' '.join(str(violation).split())}: costed as the case states it")
    rep = None  # the stated inputs' report, where no tuned one replaces it
    costed = (i.layout, i.training)  # the inputs behind ``rep``
    untuned = False  # no setting of the unstated knobs fits at the stated inputs
    if i.unstated:
        try:
            tuned = _tuned(i, i.training, profile)
        except PlannerError as exc:
            notes.append(f"not stated: {', '.join(i.unstated)}; {' '.join(str(exc).split())}")
            untuned = True
        else:
            rep, costed = _record_tuned(out, case, tuned, notes), (tuned.layout, tuned.training)
    if untuned:  # the fallbacks are sought at the unstated knobs' lightest setting
        lay, tr, lightest = lightest_setting(i.model, i.layout, i.training, i.unstated, i.stack)
        light = replace(i, layout=lay, training=tr)
        rep, costed = _stated_report(light, profile, i.stack), (lay, tr)
        values = ", ".join(f"{k} {'none' if v is None else v}" for k, v in lightest.items())
        notes.append(f"the inputs below are at the lightest setting in memory: {values}")
    if rep is None:
        rep = _stated_report(i, profile, i.stack)
    if rep.fits and i.other_code_bases:
        _over_code_bases(out, case, i, rep, profile, notes)
    if not rep.fits and not isinstance(case, CaseV2):
        rep, change, others = fitting(
            rep, i, *apply_stack(i.stack, i.model, *costed), profile, notes
        )
        known = None  # the other fallbacks' ranges, where they were tuned here already
        if untuned and change is not None:  # the fallbacks that fit: unstated knobs tuned there
            each = _tuned_fallbacks(i, (change, *others), profile)
            found = max(filter(lambda e: e[1] is not None, each), key=_rate, default=None)
            if found is not None:  # the fastest (the lightest of a tie: max keeps the first)
                picked, tuned = found
                if picked is not change:
                    notes.append(_fallback_note(i, picked, change, tuned))
                rest = [(c, t) for c, t in each if c is not picked]
                others = tuple(c for c, _ in rest)
                known = [_tuned_range(t) for _, t in rest]
                rep = _record_tuned(out, case, tuned, notes)
            elif rep.fits:  # fits only at the lightest setting the fallback was found at
                notes.append("costed at that lightest setting: no other fits with the saver")
        if rep.fits and others:
            _over_fallbacks(out, case, i, rep, others, profile, notes, known)
    if not rep.fits and "zero" in i.unstated:
        rep = _at_zero3(out, case, i, rep, profile, notes)
    return _case_result(out, case, rep, notes, i.memory_kind, i.model.moe is not None)


def _at_zero3(
    out: dict, case: Case | CaseV2, i: CaseInputs, rep: Any, profile: Any, notes: list[str]
) -> Any:
    """A schema 1 case that leaves its ZeRO stage null and fits under no setting of its
    framework's stack: its unstated knobs tuned under the code base the name stands for at
    ZeRO 3 (:func:`planner.validate.inputs.v1_zero3_stack`), where that fits; else ``rep``."""
    stack = v1_zero3_stack(case, i)
    if stack is None:
        return rep
    try:
        tuned = _tuned(i, i.training, profile, stack)
    except PlannerError:
        return rep
    out["stack"] = stack.name
    notes.append(
        f"zero not stated and nothing fits under {i.stack.name}: costed under {stack.name}, "
        f"the code base {getattr(case, 'framework', '')!r} stands for at ZeRO 3"
    )
    return _record_tuned(out, case, tuned, notes)


def _tuned_fallbacks(
    i: CaseInputs, changes: tuple[dict[str, Any], ...], profile: Any
) -> list[tuple[dict[str, Any], Any]]:
    """Each recompute fallback that fits (:func:`planner.validate.fallbacks.fitting`, lightest
    first) with the tuned prediction of the case's unstated knobs under it (None: none of
    their settings fits there). Where no setting of the unstated knobs fits at the stated
    recompute, the stated recompute is doubtful too, so it is tuned with them: the fastest of
    these is the prediction (a heavier recompute may let an interleaved schedule or a larger
    micro-batch fit, which more than pays for the re-run forward)."""
    out = []
    for change in changes:
        try:
            out.append((change, _tuned(i, with_fallback(i, change), profile)))
        except PlannerError:
            out.append((change, None))
    return out


def _rate(entry: tuple[dict[str, Any], Any]) -> float:
    """A tuned fallback's predicted tokens/s/GPU (:func:`_tuned_fallbacks`)."""
    return entry[1].report.tokens_per_s_per_gpu


def _tuned_range(tuned: Any) -> tuple[float, float] | None:
    """A tuned prediction's range of tokens/s/GPU (None: nothing was tuned)."""
    return (
        None if tuned is None else (tuned.tokens_per_s_per_gpu_min, tuned.tokens_per_s_per_gpu_max)
    )


def _fallback_note(
    i: CaseInputs, picked: dict[str, Any], lightest: dict[str, Any], tuned: Any
) -> str:
    """Say that the fastest recompute fallback, not the lightest, is the prediction."""

    def label(change: dict[str, Any]) -> str:
        modules = change.get("recompute_modules")
        return change["recompute"] + (f" ({', '.join(modules)})" if modules else "")

    return (
        f"with {', '.join(i.unstated)} tuned under each recompute that fits, "
        f"recompute {label(picked)} is the fastest "
        f"({tuned.report.tokens_per_s_per_gpu:,.0f} tokens/s/GPU), not the lightest "
        f"({label(lightest)})"
    )


def _over_code_bases(
    out: dict, case: Case | CaseV2, i: CaseInputs, rep: Any, profile: Any, notes: list[str]
) -> None:
    """Widen the case's predicted range over the other code bases its schema 1 framework
    name could stand for (:func:`planner.validate.frameworks.code_bases`): each costed at the
    stated inputs, its unstated knobs tuned over the same grid; one that cannot run or fit
    them is left out. The prediction stays the one the framework table picks."""
    spanned = [i.stack.name]
    found = [(other.name, _rates(i, profile, i.training, other)) for other in i.other_code_bases]
    spanned += [name for name, rates in found if rates is not None]
    if len(spanned) == 1:
        return
    lo, hi = _widen(out, case, rep, [rates for _, rates in found])
    out["range_code_bases"] = spanned
    framework = getattr(case, "framework", None) or ""
    notes.append(
        f"framework {framework!r} does not say which of its code bases ran: costed as "
        f"{i.stack.name}; the range spans {', '.join(spanned)} ({lo:,.0f}-{hi:,.0f} "
        "tokens/s/GPU)"
    )


def _over_fallbacks(
    out: dict,
    case: Case | CaseV2,
    i: CaseInputs,
    rep: Any,
    others: tuple[dict[str, Any], ...],
    profile: Any,
    notes: list[str],
    known: list[tuple[float, float] | None] | None = None,
) -> None:
    """Widen the case's predicted range over the other recompute settings that also fit where
    the stated ones do not (:func:`planner.validate.fallbacks.fitting`): schema 1 cannot say
    which the run used; each costed with its unstated knobs tuned (``known``: their ranges,
    where :func:`_tuned_fallbacks` tuned them already). The prediction stays the one the
    fallback picked (the lightest, or with unstated knobs the fastest)."""
    found = known
    if found is None:
        found = [_rates(i, profile, with_fallback(i, change), i.stack) for change in others]
    lo, hi = _widen(out, case, rep, found)
    notes.append(
        f"the range spans the {len(others) + 1} recompute settings that fit "
        f"({lo:,.0f}-{hi:,.0f} tokens/s/GPU)"
    )


def _rates(
    i: CaseInputs, profile: Any, training: Training, stack: Any
) -> tuple[float, float] | None:
    """The case's tokens/s/GPU at ``training`` under ``stack``: the range over its unstated
    knobs tuned, or the stated inputs' rate twice; None where nothing fits or it cannot be
    costed."""
    try:
        if i.unstated:
            tuned = _tuned(i, training, profile, stack)
            return tuned.tokens_per_s_per_gpu_min, tuned.tokens_per_s_per_gpu_max
        report = simulate_step(
            i.model, i.cluster, i.layout, training, profile, stack=stack, enforce_stack=False
        )
    except PlannerError:
        return None
    return (report.tokens_per_s_per_gpu,) * 2 if report.fits else None


def _widen(
    out: dict, case: Case | CaseV2, rep: Any, found: list[tuple[float, float] | None]
) -> tuple[float, float]:
    """The row's predicted range (else its prediction) widened by ``found`` (None: left out),
    and whether the measurement lies in it, written to ``out``; the new (low, high)."""
    lo, hi = out.get("predicted_range_tokens_per_s_per_gpu") or [rep.tokens_per_s_per_gpu] * 2
    for rates in filter(None, found):
        lo, hi = min(lo, rates[0]), max(hi, rates[1])
    out["predicted_range_tokens_per_s_per_gpu"] = [round(lo, 2), round(hi, 2)]
    _mark_in_range(out, case, lo, hi)
    return lo, hi


def _mark_in_range(out: dict, case: Case | CaseV2, lo: float, hi: float) -> None:
    """Whether the measurement lies in [lo, hi] tokens/s/GPU (nothing without one)."""
    meas = case.measured.tokens_per_s_per_gpu
    if meas is not None:
        out["in_range"] = bool(lo <= meas <= hi)


def _stated_report(i: CaseInputs, profile: Any, stack: Any) -> Any:
    """The case's stated inputs costed under ``stack`` (what the stack cannot run is costed as
    stated: the row says so)."""
    return simulate_step(
        i.model, i.cluster, i.layout, i.training, profile, stack=stack, enforce_stack=False
    )


def _tuned(i: CaseInputs, training: Training, profile: Any, stack: Any = None) -> Any:
    """The tuned prediction of the case's unstated knobs under ``training`` and ``stack``
    (None: the case's own)."""
    return tuned_prediction(
        i.model,
        i.cluster,
        i.layout,
        training,
        profile,
        i.unstated,
        i.stack if stack is None else stack,
        enforce_stack=i.enforce_stack,
    )


def _searched(tuned: Any) -> str:
    """How much of a tuned prediction's space was costed, where not all of it."""
    if tuned.exhaustive:
        return ""
    return (
        f"; {tuned.searched:,} of {tuned.combinations:,} combinations costed (a log-spread "
        "grid, then one knob at a time from the fastest)"
    )


def _record_tuned(out: dict, case: Case | CaseV2, tuned: Any, notes: list[str]) -> Any:
    """Say which settings were picked (and, with more than one legal, the range and whether
    the measurement lies in it); the tuned report."""
    lo, hi = tuned.tokens_per_s_per_gpu_min, tuned.tokens_per_s_per_gpu_max
    picked = ", ".join(f"{k} {v if v is not None else 'none'}" for k, v in tuned.picked.items())
    if tuned.legal == 1:  # e.g. vpp on a stack that runs no interleaved schedule
        notes.append(
            f"not stated, determined: {picked}, the only legal setting under the stack "
            "and layout (no range: nothing was left to tune)"
        )
    else:
        out["predicted_range_tokens_per_s_per_gpu"] = [round(lo, 2), round(hi, 2)]
        _mark_in_range(out, case, lo, hi)
        notes.append(
            f"not stated, tuned: {picked}, the fastest of {tuned.settings} settings "
            f"that fit ({lo:,.0f}-{hi:,.0f} tokens/s/GPU){_searched(tuned)}"
        )
    return tuned.report


def _case_result(
    out: dict, case: Case | CaseV2, rep: Any, notes: list[str], memory_kind: str, moe: bool
) -> dict:
    """Fill a case's result row from its report (every figure finite: simulate checks);
    ``moe``: the model routes to experts (the band of its kind, planner/uncertainty.py)."""
    pred = rep.tokens_per_s_per_gpu
    meas = case.measured.tokens_per_s_per_gpu
    peak = rep.peak_reserved_gib if memory_kind == "reserved" else rep.peak_memory_gib
    rank = getattr(case.measured, "peak_memory_rank", None)
    if rank is not None:
        peak = _rank_peak(rep, rank, peak, notes)
    out.update(
        {
            "status": "ok" if rep.fits else "infeasible",
            "reason": "; ".join(notes + rep.feasibility),
            "predicted_tokens_per_s_per_gpu": round(pred, 2),
            "error_pct": None if meas is None else round((pred - meas) / meas * 100.0, 2),
            "predicted_mfu_pct": round(rep.mfu_pct, 2),
            "predicted_mfu_training_precision_pct": (
                None
                if rep.mfu_training_precision_pct is None
                else round(rep.mfu_training_precision_pct, 2)
            ),
            "predicted_peak_memory_gib": round(peak, 2),
            "predicted_peak_memory_kind": memory_kind,
        }
    )
    # the planner's error band (planner/uncertainty.py) around the range, else the prediction
    lo, hi = out.get("predicted_range_tokens_per_s_per_gpu") or (pred, pred)
    band = error_band(moe).interval(lo, hi)
    out["predicted_band_tokens_per_s_per_gpu"] = [round(band[0], 2), round(band[1], 2)]
    if meas is not None:
        out["in_band"] = bool(band[0] <= meas <= band[1])
    return out


def _rank_peak(rep: Any, rank: str, peak: float, notes: list[str]) -> float:
    """The predicted peak of the pipeline rank ``rank`` (first or last) the source logged, of
    the kind ``peak`` is (allocated or reserved): the rank's allocated peak scaled as the peak
    is. Without a pipeline the one rank; under a V placement, whose ranks the report does not
    split, the peak (said in the row)."""
    by_rank = rep.memory_by_stage_gib
    if "only" in by_rank:
        return peak
    if rank not in by_rank:
        notes.append(
            f"measured peak_memory_rank {rank}: the placement's ranks are not costed apart, "
            "compared with the peak over the ranks"
        )
        return peak
    notes.append(f"memory compared on the {rank} pipeline rank, as the source logged it")
    return by_rank[rank] * (peak / rep.peak_memory_gib)


def validate_cases(
    schema: int, raw_cases: list[Any], profile_for: Any, strict: bool = False
) -> dict:
    """Rows and summary for raw cases of ``schema`` (a repeated id is said in its row;
    ``strict``: it is the file's error)."""
    if strict:
        repeated_ids(raw_cases, strict)  # the first repeated id is the file's error
    cases = [run_case(raw, profile_for, schema, strict) for raw in raw_cases]
    note_repeated_ids(raw_cases, cases)
    return {"schema": schema, "cases": cases, "summary": summarize(cases)}


def validate_file(path: str | Path, profile_for: Any, strict: bool = False) -> dict:
    """Run every case of a validation file (a path, or a shipped id: ``public``,
    ``heldout_moe``); ``profile_for(cluster) -> CalibrationProfile``."""
    schema, raw_cases = read_case_file(path)
    return validate_cases(schema, raw_cases, profile_for, strict)


__all__ = [
    "case_file",
    "check_case_list",
    "note_repeated_ids",
    "parse_case",
    "read_case_file",
    "run_case",
    "summarize",
    "validate_cases",
    "validate_file",
]
