"""Validation: predicted vs measured tokens/s per GPU for published training runs.

The public cases (the shipped copy of ``shared/validation/public.yaml``, schema version 2) and the held-out MoE rows
(``calibration/validation/heldout_moe.yaml``, read by no fit) are simulated with the active
calibration profile; users may upload their own cases in schema 1 or 2.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

import numpy as np
import streamlit as st

from app_pages import charts
from app_pages import common as c
from planner.errors import PlannerError
from planner.render.validation import MFU_NOTE
from planner.safe_io import MAX_CASES_NODES
from planner.validate import (
    case_file,
    check_case_list,
    note_repeated_ids,
    run_case,
    summarize,
    validate_file,
)

PUBLIC = "Public validation cases"
HELDOUT = "Held-out MoE rows"
UPLOADED = "My cases (upload)"
MAX_CASES = 500  # cases of one upload (the public file has about 120)


@st.cache_data(show_spinner="Simulating the public cases...", max_entries=16)
def public_results(path: str, mtime: float, prof_state: str, _profile_for: Any) -> dict:
    """``validate_file`` on the public cases (cached per file version and profile)."""
    return validate_file(path, _profile_for)


@st.cache_data(show_spinner="Simulating your cases...", max_entries=16)
def uploaded_results(text: str, prof_state: str, _profile_for: Any) -> dict:
    """The uploaded cases, run as ``planner validate`` runs a file, at most MAX_CASES of them
    within the app's time budget; a file that cannot be read or run is ``{"error": line}``
    (cached too, so a rerun does not spend the budget again)."""
    try:
        parsed = c.parse_yaml(text, "FILE", c.MAX_CASES_UPLOAD_BYTES, MAX_CASES_NODES)
        schema, data = case_file(parsed)
        data = check_case_list(data, MAX_CASES)
        deadline = c.Deadline("FILE", c.CASES_BUDGET_S, "simulating the cases")
        clusters = set(c.cluster_ids())
        cases = []
        for i, raw in enumerate(data):
            deadline.check(f"{i} of {len(data)} cases done")
            cases.append(_run_uploaded(raw, clusters, _profile_for, schema))
        note_repeated_ids(data, cases)
    except PlannerError as exc:
        return {"error": c.one_line(exc, markdown=False)}
    return {"cases": cases, "summary": summarize(cases)}


def _run_uploaded(
    raw: Any, clusters: set[str], profile_for: Any, schema: int = 1
) -> dict[str, Any]:
    """One uploaded case: its cluster must be a shipped preset (an upload never names a file
    on the server), its id is shown as short text, and a prediction that is not finite is an
    error, never a NaN in the table."""
    if isinstance(raw, dict) and "cluster" in raw and str(raw["cluster"]) not in clusters:
        case = run_case({"id": raw.get("id", "?")}, profile_for)
        case["reason"] = (
            f"cluster: unknown preset {str(raw['cluster'])[:60]!r} "
            f"(valid: {', '.join(sorted(clusters))})"
        )
    else:
        case = run_case(raw, profile_for, schema)
    case["id"] = " ".join(str(case.get("id", "?")).split())[:80]
    case["reason"] = " ".join(str(case.get("reason", "")).split())
    figures = ("predicted_tokens_per_s_per_gpu", "error_pct", "predicted_mfu_pct")
    if any(isinstance(case.get(k), float) and not math.isfinite(case[k]) for k in figures):
        case.update({k: None for k in figures})
        case.update(status="error", reason="the simulation gave a non-finite figure")
    return case


def per_source(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Errors per source over the scored cases with status ok."""
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for case in cases:
        groups[str(case.get("source", "?"))].append(case)
    rows = []
    for source, group in groups.items():
        ok = [
            x
            for x in group
            if x["status"] == "ok" and x.get("scored", True) and x.get("error_pct") is not None
        ]
        err = np.array([x["error_pct"] for x in ok], dtype=float)
        rows.append(
            {
                "source": source,
                "cases": len(group),
                "scored ok": len(ok),
                "MAPE (%)": round(float(np.mean(np.abs(err))), 1) if err.size else None,
                "mean signed error (%)": round(float(np.mean(err)), 1) if err.size else None,
                "max |error| (%)": round(float(np.max(np.abs(err))), 1) if err.size else None,
            }
        )
    rows.sort(key=lambda r: -r["cases"])
    return rows


def _pct(value: float | None) -> str:
    """A percentage, '-' for None."""
    return "-" if value is None else c.fmt_pct(value)


def show(result: dict[str, Any], key: str) -> None:
    """Summary metrics, the scatter, errors per source and every case."""
    cases, summary = result["cases"], result["summary"]
    cols = st.columns(5)
    cols[0].metric("MAPE", _pct(summary["mape_pct"]), help="mean |error| over scored ok cases")
    cols[1].metric("Median APE", _pct(summary["median_ape_pct"]))
    cols[2].metric("P90 APE", _pct(summary["p90_ape_pct"]))
    cols[3].metric("Cases scored", f"{summary['n_scored']} of {summary['n']}")
    cols[4].metric("Memory MAPE", _pct(summary["memory_mape_pct"]))
    if not any(x.get("predicted_tokens_per_s_per_gpu") for x in cases):
        st.warning("No case could be simulated: see the reasons below.")
    else:
        st.plotly_chart(charts.validation_figure(cases), key=f"val_scatter_{key}")
        st.caption(
            "Each point is one published run; x marks cases the planner predicts would not fit "
            "in memory (infeasible). Dotted lines: +-20 %. Errors are (predicted - measured) / "
            "measured."
        )
    st.subheader("Errors per source")
    st.dataframe(per_source(cases), hide_index=True, key=f"val_sources_{key}")
    with st.expander(f"All {len(cases)} cases"):
        st.dataframe(
            [
                {
                    "id": x["id"],
                    "status": x["status"],
                    "stack": x.get("stack"),  # the case's own (schema 2) or its framework's
                    "measured tokens/s/GPU": x["measured_tokens_per_s_per_gpu"],
                    "predicted tokens/s/GPU": x["predicted_tokens_per_s_per_gpu"],
                    "predicted range (tokens/s/GPU)": _range_text(x),
                    "error (%)": x["error_pct"],
                    "predicted MFU (%)": x["predicted_mfu_pct"],
                    "MFU of the fp8 peak (%)": x.get("predicted_mfu_training_precision_pct"),
                    "reason": x["reason"],
                }
                for x in cases
            ],
            hide_index=True,
            key=f"val_cases_{key}",
        )
        st.caption(c.md_escape(MFU_NOTE))


def _range_text(case: dict[str, Any]) -> str:
    """The tokens/s/GPU range over a case's unstated knobs or code bases ('': none)."""
    rng = case.get("predicted_range_tokens_per_s_per_gpu")
    return f"{rng[0]:,.0f}-{rng[1]:,.0f}" if rng else ""


def body() -> None:
    """The Validation page."""
    st.title("Validation")
    st.caption(
        "Published, measured training runs simulated by the planner: predicted vs measured "
        "tokens/s per GPU."
    )
    c.sidebar_status()
    if "val_source" not in st.session_state:
        st.session_state["val_source"] = PUBLIC
    source = st.radio("Cases", (PUBLIC, HELDOUT, UPLOADED), key="val_source", horizontal=True)
    if source in (PUBLIC, HELDOUT):
        path = c.VALIDATION_FILE if source == PUBLIC else c.HELDOUT_FILE
        if not path.is_file():
            st.warning(f"The case file is missing ({path}); upload your own cases instead.")
            return
        result = public_results(
            str(path), path.stat().st_mtime, c.profile_state(), c.profile_resolver()
        )
        st.caption(
            f"File: `{path.name}` ({len(result['cases'])} cases, schema version {result['schema']}). "
            + _profiles_caption()
        )
        show(result, "public" if source == PUBLIC else "heldout")
        return
    upload = st.file_uploader(
        "Validation cases YAML (schema version 1 or 2, at most 1 MB)",
        type=["yaml", "yml"],
        key="val_upload",
        help="A YAML list of cases (schema 1, shared/validation/README.md) or "
        "{schema: 2, cases: [...]} (docs/validation-schema.md).",
    )
    if upload is None:
        st.info("Upload validation cases in schema 1 or 2 (docs/validation-schema.md).")
        return
    try:
        text = c.read_upload(upload, "FILE")
    except PlannerError as exc:
        st.error(f"Could not read {upload.name}: {c.one_line(exc)}")
        return
    result = uploaded_results(text, c.profile_state(), c.profile_resolver())
    if "error" in result:
        st.error(f"Could not read {upload.name}: {result['error']}")
        return
    errors = [x for x in result["cases"] if x["status"] == "error"]
    if errors:
        st.warning(
            f"{len(errors)} of {len(result['cases'])} cases could not be read or simulated, "
            f"e.g. {errors[0]['id']}: {errors[0]['reason']}"
        )
    st.caption(_profiles_caption())
    show(result, "uploaded")


def _profiles_caption() -> str:
    """Which calibration profiles the cases were simulated with."""
    active = c.active_profile()
    if active is None:
        return "Calibration: the shipped profile of each case's accelerator."
    return (
        f"Calibration: `{c.profile_label(active)}` on "
        + ("every accelerator" if st.session_state.get(c.PROFILE_ALL) else "its accelerator")
        + ", the shipped profile elsewhere."
    )


c.run_page(body)
