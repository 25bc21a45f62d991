"""Compare hardware: one model and token budget on each accelerator generation.

For each cluster preset the layout search (exhaustive over a coarse space, 5 % memory
headroom, the app's time budget per generation) finds the fastest layout at a GPU count, or, in
budget mode, the fastest GPU count whose run fits the budget; then time to train, GPU-hours,
cost and energy follow. Each row names the calibration profile it used.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from typing import Any

import streamlit as st

import planner
from app_pages import common as c
from app_pages import stacks, vega_charts
from planner.cli.search import gpu_counts
from planner.errors import PlannerError
from planner.search.space import coarse_space
from planner.specs.hardware import Cluster

GENERATIONS = ("dgx-a100-80gb", "dgx-h100", "dgx-h200", "dgx-b200", "gb200-nvl72", "mi300x-8x")
GPU_COUNT = "GPU count"
BUDGET = "Budget"
HEADROOM = 0.05

DEFAULTS: dict[str, Any] = {
    "cmp_model": "llama3.1-70b",
    "cmp_stack": stacks.NO_STACK,
    "cmp_tokens_t": 15.0,
    "cmp_seq_len": 8192,
    "cmp_global_batch": 1024,
    "cmp_mode": GPU_COUNT,
    "cmp_gpus": 1024,
    "cmp_budget_musd": 20.0,
    "cmp_gpus_max": 16384,
    "cmp_pue": 1.2,
}


@st.cache_data(show_spinner=False)
def default_prices() -> dict[str, tuple[float, str]]:
    """Price per GPU-hour of every shipped cluster and where it comes from: the preset's
    ``price_per_gpu_hour_usd``, else that of the priced preset whose accelerator has the
    nearest bf16 peak (stated as such)."""
    clusters = [c.load_cluster(i) for i in c.cluster_ids()]
    priced = [x for x in clusters if x.spec.price_per_gpu_hour_usd]
    out: dict[str, tuple[float, str]] = {}
    for cl in clusters:
        if cl.spec.price_per_gpu_hour_usd:
            out[cl.id] = (cl.spec.price_per_gpu_hour_usd, "preset")
            continue
        peak = cl.accelerator.peak_flops_per_s("bf16")
        ref = min(priced, key=lambda x: abs(x.accelerator.peak_flops_per_s("bf16") - peak))
        out[cl.id] = (
            ref.spec.price_per_gpu_hour_usd or 0.0,
            f"no shipped price: {ref.id}'s (nearest bf16 peak)",
        )
    return out


@st.cache_data(show_spinner=False, max_entries=256)
def best_per_count(
    model_id: str,
    cluster_id: str,
    counts: tuple[int, ...],
    global_batch: int,
    seq_len: int,
    prof_key: str,
    _model: planner.ModelSpec,
    _profile: planner.CalibrationProfile,
    stack_id: str = stacks.NO_STACK,
) -> dict[int, dict[str, Any]]:
    """For each GPU count, the fastest feasible layout (coarse exhaustive search, 5 % headroom,
    under the stack ``stack_id``, or none) as plain numbers; counts with none are left out."""
    cluster = c.load_cluster(cluster_id)
    stack = stacks.stack_or_none(stack_id)
    result = planner.search(
        _model,
        cluster,
        counts if len(counts) > 1 else counts[0],
        global_batch,
        seq_len=seq_len,
        method="exhaustive",
        memory_headroom=HEADROOM,
        space=coarse_space(_model, cluster, counts, seq_len, stack),
        profile=_profile,
        time_budget_s=c.SEARCH_BUDGET_S,
        stack=stack,
    )
    out: dict[int, dict[str, Any]] = {}
    for e in result.ranked:
        if e.feasible and e.gpus not in out and _finite(e.report):
            out[e.gpus] = {
                "gpus": e.gpus,
                "layout": c.layout_text(e.layout, e.training),
                "tokens_per_s": e.report.tokens_per_s,
                "tokens_per_s_per_gpu": e.report.tokens_per_s_per_gpu,
                "mfu_pct": e.report.mfu_pct,
                "peak_memory_gib": e.report.peak_memory_gib,
                "step_time_s": e.report.step_time_s,
            }
    if not out:
        out[-1] = {"reason": ", ".join(f"{k} ({v:,})" for k, v in result.infeasible.items())}
    return out


def _finite(report: Any) -> bool:
    """Whether a report's figures are finite and physical (:func:`common.check_report`)."""
    try:
        c.check_report(report)
    except PlannerError:
        return False
    return True


def row_for(
    cluster_id: str,
    option: dict[str, Any] | None,
    tokens: float,
    price: float,
    pue: float,
    note: str = "",
    profile: str = "",
) -> dict[str, Any]:
    """One table row: the searched layout and what training ``tokens`` would take
    (``option["error"]``: the search failed, e.g. ran past its time budget)."""
    cl = c.load_cluster(cluster_id)
    row: dict[str, Any] = {
        "cluster": cl.id,
        "accelerator": cl.accelerator.name,
        "profile": profile,
        "GPUs": None,
        "best layout": None,
        "tokens/s": None,
        "tokens/s/GPU": None,
        "MFU (%)": None,
        "time to train (days)": None,
        "GPU-hours (M)": None,
        "price ($/GPU-h)": price,
        "cost ($M)": None,
        "TDP (W)": cl.accelerator.tdp_w,
        "energy (MWh)": None,
        "note": note,
    }
    if option is not None and "error" in option:
        row["note"] = option["error"]
        return row
    if option is None or "tokens_per_s" not in option:
        row["note"] = "no feasible layout" + (f": {option['reason']}" if option else "")
        return row
    seconds = tokens / option["tokens_per_s"]
    gpu_hours = option["gpus"] * seconds / 3600.0
    row.update(
        {
            "GPUs": option["gpus"],
            "best layout": option["layout"],
            "tokens/s": round(option["tokens_per_s"]),
            "tokens/s/GPU": round(option["tokens_per_s_per_gpu"]),
            "MFU (%)": round(option["mfu_pct"], 1),
            "time to train (days)": round(seconds / 86400.0, 2),
            "GPU-hours (M)": round(gpu_hours / 1e6, 3),
            "cost ($M)": round(gpu_hours * price / 1e6, 3),
            "energy (MWh)": (
                round(cl.accelerator.tdp_w * gpu_hours * pue / 1e6, 1)
                if cl.accelerator.tdp_w
                else None
            ),
        }
    )
    return row


def choose_in_budget(
    options: dict[int, dict[str, Any]], tokens: float, price: float, budget_usd: float
) -> tuple[dict[str, Any] | None, str]:
    """The fastest option whose run costs at most the budget, else the cheapest (noted)."""
    valid = [o for o in options.values() if "tokens_per_s" in o]
    if not valid:
        return (options.get(-1), "")

    def cost(o: dict[str, Any]) -> float:
        return o["gpus"] * tokens / o["tokens_per_s"] / 3600.0 * price

    within = [o for o in valid if cost(o) <= budget_usd]
    if within:
        return max(within, key=lambda o: o["tokens_per_s"]), "fastest count within budget"
    cheapest = min(valid, key=cost)
    return cheapest, f"over budget: the cheapest count costs {c.fmt_usd(cost(cheapest))}"


def to_csv(rows: list[dict[str, Any]]) -> str:
    """The table as CSV text."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


@dataclass(frozen=True)
class Job:
    """The Compare form: one model and token budget, sized by a GPU count or a budget."""

    model_id: str
    tokens: float
    seq_len: int
    global_batch: int
    mode: str
    gpus: int
    budget_usd: float
    gpus_max: int
    pue: float
    stack: str = stacks.NO_STACK  # a shipped stack id, or none


def _init_page_state(clusters: list[str], prices: dict[str, tuple[float, str]]) -> None:
    """Default the chosen clusters (the shipped generations) and each cluster's price."""
    if "cmp_clusters" not in st.session_state:
        st.session_state["cmp_clusters"] = [g for g in GENERATIONS if g in clusters]
    for cid in clusters:
        st.session_state.setdefault(f"cmp_price_{cid}", float(prices[cid][0]))


def _workload_inputs() -> tuple[str, float, int, int]:
    """The first input row: (model id, tokens, seq len, global batch)."""
    cols = st.columns(4)
    model_id = cols[0].selectbox("Model", c.model_ids(), key="cmp_model")
    tokens_t = cols[1].number_input(
        "token budget (trillions of tokens)", min_value=1e-6, max_value=1e4, key="cmp_tokens_t"
    )
    seq_len = int(
        cols[2].number_input("seq len", min_value=1, max_value=10_000_000, key="cmp_seq_len")
    )
    global_batch = int(
        cols[3].number_input(
            "global batch (sequences)", min_value=1, max_value=10_000_000, key="cmp_global_batch"
        )
    )
    return model_id, float(tokens_t) * 1e12, seq_len, global_batch


def _sizing_inputs() -> tuple[str, int, float, int, float]:
    """The second input row: (mode, GPUs, budget in $, at most GPUs, PUE); GPUs is 0 in
    budget mode, the budget 0 and at most GPUs the GPU count in GPU-count mode."""
    cols = st.columns(4)
    mode = cols[0].radio("Size the job by", (GPU_COUNT, BUDGET), key="cmp_mode", horizontal=True)
    if mode == GPU_COUNT:
        gpus = int(cols[1].number_input("GPUs", min_value=1, max_value=1_000_000, key="cmp_gpus"))
        budget_usd, gpus_max = 0.0, gpus
    else:
        budget_usd = (
            float(
                cols[1].number_input("budget ($ millions)", min_value=0.001, key="cmp_budget_musd")
            )
            * 1e6
        )
        gpus_max = int(
            cols[2].number_input(
                "at most GPUs", min_value=8, max_value=1_000_000, key="cmp_gpus_max"
            )
        )
        gpus = 0
    pue = float(
        cols[3].number_input(
            "PUE (facility power / IT power)",
            min_value=1.0,
            max_value=3.0,
            step=0.05,
            key="cmp_pue",
        )
    )
    return mode, gpus, budget_usd, gpus_max, pue


def _price_inputs(chosen: list[str], prices: dict[str, tuple[float, str]]) -> None:
    """The expander of editable prices per GPU-hour, one per chosen cluster."""
    with st.expander("Price per GPU-hour (editable)"):
        pcols = st.columns(3)
        for i, cid in enumerate(chosen):
            pcols[i % 3].number_input(
                f"{cid} ($/GPU-h)",
                min_value=0.0,
                step=0.05,
                key=f"cmp_price_{cid}",
                help=f"default: {prices[cid][1]}",
            )
        fallback = [f"{cid}: {prices[cid][1]}" for cid in chosen if prices[cid][1] != "preset"]
        st.caption(
            "Defaults: each preset's indicative on-demand price (hardware_specs/clusters, "
            "volatile)." + (" " + "; ".join(fallback) + "." if fallback else "")
        )


def _counts_for(cluster: Cluster, job: Job) -> tuple[int, ...]:
    """The GPU counts to search on ``cluster``: the one count, or in budget mode the counts
    from one node (at most ``job.gpus_max``) up to ``job.gpus_max``."""
    if job.mode == GPU_COUNT:
        return (job.gpus,)
    first = min(cluster.spec.gpus_per_node, job.gpus_max)
    return gpu_counts(first, job.gpus_max, cluster.spec.scale_up_domain_gpus)


def _cluster_row(
    cid: str, job: Job, model: planner.ModelSpec, prices: dict[str, tuple[float, str]]
) -> dict[str, Any]:
    """Search one cluster and return its table row (a failed search is said in its note)."""
    cl = c.load_cluster(cid)
    price = float(st.session_state.get(f"cmp_price_{cid}", prices[cid][0]))
    profile = c.profile_for(cl)
    counts = _counts_for(cl, job)
    try:
        options = best_per_count(
            job.model_id,
            cid,
            counts,
            job.global_batch,
            job.seq_len,
            c.profile_key(profile),
            model,
            profile,
            job.stack,
        )
    except PlannerError as exc:  # this generation's search failed: say so in its row
        options = {-1: {"error": c.one_line(exc, markdown=False)}}
    if job.mode == GPU_COUNT:
        option, note = options.get(job.gpus, options.get(-1)), ""
    else:
        option, note = choose_in_budget(options, job.tokens, price, job.budget_usd)
    return row_for(cid, option, job.tokens, price, job.pue, note, c.profile_label(profile))


def _search_rows(
    chosen: list[str],
    job: Job,
    model: planner.ModelSpec,
    prices: dict[str, tuple[float, str]],
    table: Any,
) -> list[dict[str, Any]]:
    """One row per chosen cluster, searched in turn under a progress bar; the rows found so
    far are shown in ``table`` (an ``st.empty`` slot) as each generation completes."""
    rows: list[dict[str, Any]] = []
    bar = st.progress(0.0, text="searching layouts")
    for i, cid in enumerate(chosen):
        rows.append(_cluster_row(cid, job, model, prices))
        bar.progress((i + 1) / len(chosen), text=f"searched {cid}")
        if i + 1 < len(chosen):
            table.dataframe(rows, hide_index=True)
    bar.empty()
    return rows


def _table_caption(job: Job, model: planner.ModelSpec) -> str:
    """How the table's figures are found and computed."""
    return (
        f"{model.name}, {c.fmt_count(job.tokens, 'tokens')}, global batch {job.global_batch:,} x "
        f"{job.seq_len:,} tokens; stack {job.stack}; layouts from an exhaustive search over a "
        "coarse space (micro-batch "
        "1/2, recompute none/selective/full, ZeRO 1, SP and TP overlap on, vpp 1/2/4) keeping "
        f"{HEADROOM:.0%} of usable HBM free. Time to train = tokens / tokens/s; GPU-hours = "
        "GPUs x time; cost = GPU-hours x price; energy = TDP x GPUs x time x PUE "
        f"(PUE {job.pue:.2f}; board power only, hosts and network inside the PUE)."
        + (
            f" Budget mode: per cluster, the fastest GPU count (up to {job.gpus_max:,}) whose run "
            f"costs at most {c.fmt_usd(job.budget_usd)}."
            if job.mode == BUDGET
            else ""
        )
    )


def _charts(ok: list[dict[str, Any]], pue: float) -> None:
    """Throughput, time to train, cost and energy bars of the rows with a feasible layout."""
    names = [r["cluster"] for r in ok]
    panels = (
        ("tokens/s", "Throughput", "tokens/s", "cmp_chart_tps"),
        ("time to train (days)", "Time to train", "days", "cmp_chart_time"),
        ("cost ($M)", "Cost", "$ millions", "cmp_chart_cost"),
        ("energy (MWh)", f"Energy (PUE {pue:.2f})", "MWh", "cmp_chart_energy"),
    )
    cols = st.columns(2)
    for i, (column, title, unit, key) in enumerate(panels):
        spec = vega_charts.compare_bars_spec(names, [r[column] for r in ok], title, unit)
        cols[i % 2].vega_lite_chart(spec, key=key, width="stretch")


def body() -> None:
    """The Compare hardware page."""
    c.init_state(DEFAULTS)
    st.title("Compare hardware")
    st.caption(
        "The same model, batch and sequence length on each accelerator generation: the searched "
        "best layout, throughput, time to train, GPU-hours, cost and energy."
    )
    c.sidebar_status()
    clusters = c.cluster_ids()
    prices = default_prices()
    _init_page_state(clusters, prices)
    stack_id = stacks.search_stack_choice("cmp_stack", "each generation")
    job = Job(*_workload_inputs(), *_sizing_inputs(), stack=stack_id)
    chosen = st.multiselect("Clusters", clusters, key="cmp_clusters")
    _price_inputs(chosen, prices)
    if not chosen:
        st.info("Choose at least one cluster.")
        return

    model = c.load_model(job.model_id)
    table = st.empty()
    rows = _search_rows(chosen, job, model, prices, table)
    ok = [r for r in rows if r["tokens/s"] is not None]
    table.dataframe(rows, hide_index=True)
    st.caption(_table_caption(job, model))
    if ok:
        _charts(ok, job.pue)
    st.download_button(
        "Download the table (CSV)",
        data=to_csv(rows),
        file_name=f"compare-{model.name}.csv",
        mime="text/csv",
        on_click="ignore",
        key="cmp_csv",
    )


c.run_page(body)
