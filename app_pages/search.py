"""Search: the layout search with a progress bar, the top layouts, Pareto fronts and exports.

The search runs under the app's time budget (``common.SEARCH_BUDGET_S``): a space too large
to finish is one error line, never a pinned server thread.
"""

from __future__ import annotations

import json
import time
from typing import Any

import streamlit as st

import planner
from app_pages import charts, stacks
from app_pages import common as c
from planner.cli.search import breakdown_differences, entry, gpu_counts, setting_differences
from planner.errors import PlannerError
from planner.render import objective_text
from planner.search import SearchResult
from planner.search.evaluate import Evaluated
from planner.search.export import DIALECTS, exports
from planner.search.space import coarse_space

OBJECTIVES = {
    "tokens_per_s": "tokens/s (fastest)",
    "cost": "cost ($ per million tokens)",
    "time_to_train": "time to train a token budget",
}
METHODS = ("auto", "exhaustive", "optuna")
SPACES = {
    "full": "every legal layout (default space)",
    "coarse": "coarse: micro-batch 1/2, ZeRO 1 (or the stack's lightest sharding), SP + TP "
    "overlap on, vpp 1/2/4",
}
UPLOADED = "uploaded on the Estimate page: "
MAX_PLOTTED = 1500
STATE = "search_state"

OFFLOAD_LABEL = (
    "optimizer offload (ZeRO-Offload: optimizer states and Adam on the CPU; DeepSpeed stacks, "
    "ZeRO 1-3)"
)
DEFAULTS = {
    "srch_model": c.DEFAULT_MODEL,
    "srch_gpus": 16,
    "srch_gpus_max": 0,
    "srch_global_batch": 64,
    "srch_seq_len": 4096,
    "srch_objective": "tokens_per_s",
    "srch_tokens_b": 1000.0,
    "srch_method": "auto",
    "srch_trials": 300,
    "srch_headroom": 0.05,
    "srch_space": "full",
    "srch_optimizer_offload": False,
    "srch_stack": "none",
    "srch_top": 10,
}


def _progress_callback(bar: Any) -> Any:
    """``progress(done, total)`` for planner.search, updating ``bar`` at most every 1 % / 50 ms."""
    last = [-1.0, 0.0]

    def update(done: int, total: int | None) -> None:
        frac = min(done / total, 1.0) if total else 0.0
        now = time.perf_counter()
        if frac - last[0] >= 0.01 and now - last[1] >= 0.05 or frac >= 1.0:
            last[0], last[1] = frac, now
            bar.progress(frac, text=f"searching: {done:,} of {total or '?':,} layouts")

    return update


def _form() -> dict[str, Any] | None:
    """The search form; its values when submitted, else None."""
    models = c.model_ids()
    uploaded = st.session_state.get(c.UPLOADED_MODEL)
    upload_label = UPLOADED + uploaded.name if uploaded is not None else None
    options = ([upload_label] if upload_label else []) + models
    if st.session_state.get("srch_model") not in options:
        st.session_state["srch_model"] = c.DEFAULT_MODEL
    clusters = c.cluster_ids()
    if "srch_cluster" not in st.session_state:
        last = st.session_state.get(c.LAST_CLUSTER, c.DEFAULT_CLUSTER)
        st.session_state["srch_cluster"] = last if last in clusters else c.DEFAULT_CLUSTER
    with st.form("search_form"):
        cols = st.columns(4)
        model_choice = cols[0].selectbox("Model", options, key="srch_model")
        cluster_id = cols[1].selectbox("Cluster", clusters, key="srch_cluster")
        gpus = cols[2].number_input(
            "GPUs", min_value=1, max_value=1_000_000, step=1, key="srch_gpus"
        )
        gpus_max = cols[3].number_input(
            "up to GPUs (0: only the count at left)",
            min_value=0,
            max_value=1_000_000,
            step=1,
            key="srch_gpus_max",
            help="Search the powers of two and doublings of the scale-up domain in between.",
        )
        cols = st.columns(4)
        global_batch = cols[0].number_input(
            "global batch (sequences)", min_value=1, max_value=10_000_000, key="srch_global_batch"
        )
        seq_len = cols[1].number_input(
            "seq len", min_value=1, max_value=10_000_000, key="srch_seq_len"
        )
        objective = cols[2].selectbox(
            "Objective", list(OBJECTIVES), format_func=OBJECTIVES.get, key="srch_objective"
        )
        tokens_b = cols[3].number_input(
            "token budget (billions, time to train)",
            min_value=0.001,
            max_value=1e9,
            key="srch_tokens_b",
        )
        cols = st.columns(4)
        method = cols[0].selectbox("Method", METHODS, key="srch_method")
        trials = cols[1].number_input(
            "Optuna trials", min_value=1, max_value=100_000, key="srch_trials"
        )
        headroom = cols[2].number_input(
            "memory headroom (fraction of usable HBM kept free)",
            min_value=0.0,
            max_value=0.9,
            step=0.01,
            key="srch_headroom",
        )
        space = cols[3].selectbox("Space", list(SPACES), format_func=SPACES.get, key="srch_space")
        stack_id = stacks.search_stack_choice("srch_stack", "the layouts")
        offload = st.checkbox(OFFLOAD_LABEL, key="srch_optimizer_offload")
        submitted = st.form_submit_button("Run search", type="primary", key="srch_submit")
    if not submitted:
        return None
    return {
        "model": uploaded if model_choice == upload_label else c.load_model(model_choice),
        "cluster": c.load_cluster(cluster_id),
        "gpus": int(gpus),
        "gpus_max": int(gpus_max) or None,
        "global_batch": int(global_batch),
        "seq_len": int(seq_len),
        "objective": objective,
        "tokens": float(tokens_b) * 1e9,
        "method": method,
        "trials": int(trials),
        "headroom": float(headroom),
        "space": space,
        "stack": stacks.stack_or_none(stack_id),
        "optimizer_offload": bool(offload),
    }


def run(params: dict[str, Any]) -> c.SearchRun:
    """Run the search the form describes, with a progress bar."""
    model, cluster = params["model"], params["cluster"]
    counts = gpu_counts(params["gpus"], params["gpus_max"], cluster.spec.scale_up_domain_gpus)
    profile = c.profile_for(cluster)
    space = (
        coarse_space(model, cluster, counts, params["seq_len"], params.get("stack"))
        if params["space"] == "coarse"
        else None
    )
    bar = st.progress(0.0, text="searching layouts")
    result = planner.search(
        model,
        cluster,
        counts if len(counts) > 1 else counts[0],
        params["global_batch"],
        seq_len=params["seq_len"],
        objective=params["objective"],
        tokens=params["tokens"] if params["objective"] == "time_to_train" else None,
        method=params["method"],
        trials=params["trials"],
        memory_headroom=params["headroom"],
        space=space,
        profile=profile,
        pareto=True,
        progress=_progress_callback(bar),
        time_budget_s=c.SEARCH_BUDGET_S,
        stack=params.get("stack"),
        optimizer_offload=params.get("optimizer_offload", False),
    )
    bar.progress(
        1.0, text=f"done: {result.evaluated:,} layouts simulated in {result.seconds:.2f} s"
    )
    if len(counts) > 1:
        result.notes.append(f"GPU counts searched: {', '.join(map(str, counts))}")
    return c.SearchRun(
        model,
        cluster,
        params["objective"],
        result,
        profile.id,
        profile.accelerator,
        params.get("stack"),
    )


def _row(rank: int, e: Evaluated, objective: str) -> dict[str, Any]:
    """One row of the top-layouts table (units in the column names)."""
    r = e.report
    return {
        "rank": rank,
        "layout": c.layout_text(e.layout, e.training),
        "GPUs": e.gpus,
        "tokens/s": round(r.tokens_per_s),
        "tokens/s/GPU": round(r.tokens_per_s_per_gpu),
        "MFU (%)": round(r.mfu_pct, 1),
        "step (s)": round(r.step_time_s, 3),
        "memory (GiB)": round(r.peak_memory_gib, 1),
        "headroom (GiB)": round(r.memory_headroom_gib, 1),
        "objective": objective_text(objective, e.score),
    }


def _point(e: Evaluated) -> dict[str, Any]:
    """One point of the Pareto charts."""
    return {
        "tokens_per_s": e.report.tokens_per_s,
        "memory_headroom_gib": e.report.memory_headroom_gib,
        "gpus": e.gpus,
        "label": f"{c.layout_text(e.layout, e.training)} on {e.gpus} GPUs",
    }


def report_json(run_: c.SearchRun, top: list[Evaluated]) -> str:
    """The search as JSON (the shape of ``planner search --json``)."""
    result, best = run_.result, top[0]
    runner = top[1] if len(top) > 1 else None
    out = {
        "model": run_.model.name,
        "cluster": run_.cluster.id,
        "profile": run_.profile_id,
        "method": result.method,
        "objective": run_.objective,
        "best": entry(best),
        "top": [entry(e) for e in top],
        "evaluated": result.evaluated,
        "infeasible": result.infeasible,
        "seconds": result.seconds,
        "space_size": result.space_size,
        "notes": result.notes,
        "why": breakdown_differences(best, runner) if runner else [],
        "exports": exports(
            run_.model, best.gpus, best.layout, best.training, run_.stack, run_.cluster
        ),
        "pareto": {k: [entry(e) for e in v] for k, v in result.pareto.items()},
    }
    return json.dumps(out, indent=2)


def _infeasible_reasons(result: SearchResult) -> str:
    """Why layouts were rejected, most frequent first: "reason (count), ..."."""
    return ", ".join(
        f"{c.md_escape(k)} ({v:,})"
        for k, v in sorted(result.infeasible.items(), key=lambda kv: -kv[1])
    )


def _summary(run_: c.SearchRun, best: Evaluated, reasons: str) -> None:
    """The best layout's headline metrics and a caption on how the search went."""
    result = run_.result
    st.subheader(f"Best: {c.layout_text(best.layout, best.training)} on {best.gpus} GPUs")
    cols = st.columns(4)
    cols[0].metric("Tokens/s", c.fmt_tokens_per_s(best.report.tokens_per_s))
    cols[1].metric("MFU", c.fmt_pct(best.report.mfu_pct))
    cols[2].metric("Step time", c.fmt_seconds(best.report.step_time_s))
    cols[3].metric("Memory per GPU", c.fmt_gib(best.report.peak_memory_gib))
    st.caption(
        f"{run_.model.name} on {run_.cluster.spec.name}, calibration profile "
        f"{run_.profile_id} (measured on {run_.profile_accelerator}); method "
        f"{result.method}: {result.evaluated:,} layouts simulated"
        + (f" of {result.space_size:,} legal" if result.space_size else "")
        + f" in {result.seconds:.2f} s. Rejected or infeasible: {reasons or 'none'}."
        + ("".join(f" {n}." for n in result.notes))
    )


def _why_best(best: Evaluated, runner: Evaluated) -> None:
    """Where the best layout's step time beats the runner-up's, per category."""
    diffs = breakdown_differences(best, runner)
    settings = setting_differences(best, runner)
    lines = [
        f"{charts.CATEGORY_LABELS.get(d['category'], d['category'])}: "
        f"{d['best_s']:.3f} s vs {d['runner_up_s']:.3f} s ({d['difference_s']:+.3f} s per step)"
        for d in diffs
    ]
    st.markdown(
        "**Why the best beats the runner-up** ("
        + ("; ".join(settings) or "same settings")
        + "):\n"
        + "\n".join(f"- {line}" for line in lines)
    )


def _pareto_charts(result: SearchResult) -> None:
    """Two tabs of Pareto charts (tokens/s vs memory headroom, vs GPUs) and their caption."""
    feasible = [e for e in result.ranked if e.feasible][:MAX_PLOTTED]
    points = [_point(e) for e in feasible]
    tabs = st.tabs(["tokens/s vs memory headroom", "tokens/s vs GPUs"])
    fronts = result.pareto
    tabs[0].plotly_chart(
        charts.pareto_figure(
            points,
            [_point(e) for e in fronts.get("tokens_per_s_vs_memory_headroom", [])],
            "memory_headroom_gib",
            "memory headroom (GiB per GPU)",
        ),
        key="srch_pareto_mem",
    )
    tabs[1].plotly_chart(
        charts.pareto_figure(
            points,
            [_point(e) for e in fronts.get("tokens_per_s_vs_gpus", [])],
            "gpus",
            "GPUs",
        ),
        key="srch_pareto_gpus",
    )
    if len({e.gpus for e in result.ranked}) <= 1:
        tabs[1].caption("One GPU count was searched: set a maximum GPU count to compare them.")
    st.caption(
        f"Plotted: the {len(points):,} best feasible layouts (of "
        f"{sum(e.feasible for e in result.ranked):,}); the front: no other layout is better on "
        "both axes."
    )


def _export_downloads(run_: c.SearchRun, top: list[Evaluated]) -> None:
    """Download buttons for the best layout's exports (the search's stack's launch files, or
    Megatron-LM arguments and torchtitan TOML without one) and the JSON report, and a preview."""
    best = top[0]
    texts = exports(run_.model, best.gpus, best.layout, best.training, run_.stack, run_.cluster)
    st.markdown("**Export the best layout**")
    files = [
        (DIALECTS[k].label, text, DIALECTS[k].file_name, DIALECTS[k].mime)
        for k, text in texts.items()
    ]
    files.append(("JSON report", report_json(run_, top), "search_report.json", "application/json"))
    for col, (label, data, name, mime) in zip(st.columns(len(files)), files, strict=True):
        col.download_button(
            label, data=data, file_name=name, mime=mime, on_click="ignore", key=f"srch_dl_{name}"
        )
    with st.expander("Preview the exports"):
        for key in [*(k for k in texts if k != "layout_yaml"), "layout_yaml"]:
            st.code(texts[key], language=DIALECTS[key].language)


def show(run_: c.SearchRun) -> None:
    """Summary, top table, why the winner wins, Pareto charts and downloads."""
    result = run_.result
    top = result.top(int(st.session_state.get("srch_top", 10)))
    reasons = _infeasible_reasons(result)
    if not top:
        st.error(
            f"search: no feasible layout of {run_.model.name} on {run_.cluster.id}: "
            f"{reasons or 'no candidates'} (valid: more GPUs, a smaller global batch, a "
            "global batch divisible by micro_batch*dp, or memory headroom 0)"
        )
        return
    for e in top:  # an error line, never a NaN or an MFU above 100 % in the table
        c.check_report(e.report)
    best = top[0]
    _summary(run_, best, reasons)
    st.dataframe([_row(i + 1, e, run_.objective) for i, e in enumerate(top)], hide_index=True)
    if len(top) > 1:
        _why_best(best, top[1])
    _pareto_charts(result)
    _export_downloads(run_, top)


def body() -> None:
    """The Search page."""
    c.init_state(DEFAULTS)
    st.title("Search")
    st.caption(
        "Every legal layout (TP, PP, VPP, CP, EP, DP, micro-batch, recompute, ZeRO, overlaps) "
        "simulated and ranked; Optuna for spaces too large to enumerate."
    )
    c.sidebar_status()
    params = _form()
    if params is not None:
        try:
            st.session_state[STATE] = run(params)
        except PlannerError as exc:
            st.session_state.pop(STATE, None)
            st.error(c.one_line(exc))
            return
    run_ = st.session_state.get(STATE)
    if isinstance(run_, c.SearchRun):
        show(run_)
    else:
        st.info("Set the job and press **Run search**.")


c.run_page(body)
