"""Estimate: one model on one cluster under one layout -> tokens/s, MFU, step time, memory;
below the charts, goodput under failures and checkpoints and the ranked levers (lazy sections,
``app_pages/estimate_extras.py``).

Invalid combinations are explained inline (the planner's legality message plus the nearest
valid values); the simulation is cached on the frozen specs, so a widget change re-renders in
milliseconds.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable

import streamlit as st
from pydantic import ValidationError

from app_pages import charts, stacks, vega_charts
from app_pages import common as c
from app_pages import estimate_extras as extras
from planner.divisors import divisors
from planner.errors import PlannerError, pydantic_error_to_planner
from planner.fixes import NO_FIX, Fix, memory_fixes
from planner.legality import check_layout
from planner.render.simulation import rank_memory_text
from planner.report import StepReport
from planner.safe_io import dumps_strict
from planner.specs.base import MAX_POWER_W
from planner.specs.hardware import Cluster
from planner.specs.layout import Layout, Training
from planner.specs.model import ModelSpec
from planner.uncertainty import error_band

SHIPPED = "Shipped model"
UPLOAD_YAML = "Upload model YAML"
UPLOAD_HF = "Upload HuggingFace config.json"
SOURCES = (SHIPPED, UPLOAD_YAML, UPLOAD_HF)
TIMELINE_TITLE = "Step timeline (pp = 1: one stage, micro-batches back to back)"
TIMELINE_OPEN = "est_timeline_open"
DETAILS_TITLE = "Details: placement, assumptions, MFU convention"
DETAILS_OPEN = "est_details_open"

# widget keys -> first values where the page's differ from the specs' defaults
# (app_pages/estimate_extras.py field_defaults gives the others)
DEFAULTS = {
    "est_model_source": SHIPPED,
    "est_model": c.DEFAULT_MODEL,
    "est_cluster": c.DEFAULT_CLUSTER,
    "est_gpus": 8,
    "est_tp": 2,
    "est_vpp": 1,
    "est_seq_len": 4096,
    "est_global_batch": 64,
    "est_zero": 1,
    "est_sp": True,
    "est_overlap_tp": True,
    "est_cuda_graphs": False,
    "est_loss": "fp32_copy",
    "est_recompute_modules": ["core_attn"],
}


# ---- nearest valid values -----------------------------------------------------------------------
def nearest(values: Iterable[int], x: int) -> list[int]:
    """The closest values below and above ``x`` (x itself excluded)."""
    vals = sorted(set(values))
    below = [v for v in vals if v < x]
    above = [v for v in vals if v > x]
    return ([below[-1]] if below else []) + ([above[0]] if above else [])


def _join(values: Iterable[int]) -> str:
    """'1, 2, 4'."""
    return ", ".join(str(v) for v in values)


def legal_tp(model: ModelSpec, cluster: Cluster, gpus: int, pp: int, cp: int) -> list[int]:
    """TP sizes that divide the heads and KV heads, stay inside one scale-up domain and leave
    an integer DP for this GPU count."""
    domain = cluster.spec.scale_up_domain_gpus
    return [
        t
        for t in divisors(model.heads)
        if (model.mla is not None or model.n_kv_heads % t == 0)
        and t <= domain
        and gpus % (t * pp * cp) == 0
    ]


def suggestion(
    err: PlannerError,
    model: ModelSpec,
    cluster: Cluster,
    gpus: int,
    layout: Layout,
    training: Training,
) -> str:
    """Nearest valid values for the field a legality error names ('' when none apply)."""
    tp, pp, cp, dp, vpp = layout.tp, layout.pp, layout.cp, layout.dp, layout.virtual_stages
    if err.field == "layout.tp":
        ok = legal_tp(model, cluster, gpus, pp, cp)
        near = nearest(ok, tp)
        return (
            f"Nearest valid tp: {' or '.join(map(str, near))} "
            f"(tp dividing heads={model.heads} and kv_heads={model.n_kv_heads}, at most the "
            f"scale-up domain of {cluster.spec.scale_up_domain_gpus} GPUs and dividing "
            f"gpus/(pp*cp) = {gpus // (pp * cp) if gpus % (pp * cp) == 0 else 'n/a'}: "
            f"{_join(ok) or 'none'})."
            if ok
            else ""
        )
    if err.field == "layout.pp":
        ok = [p for p in divisors(gpus // (tp * cp)) if p * vpp <= model.layers]
        if not ok:
            return ""
        return f"Nearest valid pp: {' or '.join(map(str, nearest(ok, pp)))} (legal: {_join(ok)})."
    if err.field == "layout.vpp":
        return "Set vpp = 1, or pp > 1 to interleave."
    if err.field == "layout.cp":
        if "state-space" in err.message:
            return "Use cp = 1 for this model."
        ok = [x for x in divisors(gpus // (tp * pp)) if x == 1 or training.seq_len % (2 * x) == 0]
        if not ok:
            return ""
        return f"Nearest valid cp: {' or '.join(map(str, nearest(ok, cp)))} (legal: {_join(ok)})."
    if err.field == "layout.ep":
        if model.moe is None:
            return "Use ep = 1 (dense model)."
        grid = tp * dp * cp
        ok = [e for e in divisors(model.moe.experts) if grid % e == 0]
        if not ok:
            return ""
        return (
            f"Nearest valid ep: {' or '.join(map(str, nearest(ok, layout.ep)))} "
            f"(dividing experts={model.moe.experts} and tp*dp*cp={grid}: {_join(ok)})."
        )
    if err.field == "training.global_batch":
        per = training.micro_batch * dp
        gb = training.global_batch
        lo, hi = gb // per * per, math.ceil(gb / per) * per
        batches = [b for b in (lo, hi) if b > 0]
        text = f"Nearest valid global batch: {' or '.join(map(str, batches))} (multiples of {per})"
        if gb % dp == 0:
            mbs = [m for m in divisors(gb // dp) if m <= 64]
            near = nearest(mbs, training.micro_batch)
            if near:
                text += f"; or micro-batch {' or '.join(map(str, near))}"
        return text + "."
    return ""


def world_size_message(
    model: ModelSpec, cluster: Cluster, gpus: int, tp: int, pp: int, cp: int
) -> str:
    """Why tp*pp*cp does not fit the GPU count, with the nearest valid alternatives."""
    denom = tp * pp * cp
    lo, hi = gpus // denom * denom, math.ceil(gpus / denom) * denom
    counts = [g for g in (lo, hi) if g > 0]
    alt = ", ".join(f"{g} GPUs (dp = {g // denom})" for g in counts)
    tps = legal_tp(model, cluster, gpus, pp, cp)
    pps = [p for p in divisors(gpus) if gpus % (tp * p * cp) == 0 and p <= model.layers]
    text = (
        f"layout: tp*pp*cp = {tp}*{pp}*{cp} = {denom} does not divide gpus = {gpus}, so "
        f"dp = gpus/(tp*pp*cp) = {gpus / denom:.3g} is not an integer. "
        f"Nearest valid GPU counts: {alt}."
    )
    if tps:
        text += f" With {gpus} GPUs: tp in {_join(nearest(tps, tp))} (legal: {_join(tps)})"
        text += f", or pp in {_join(nearest(pps, pp))}." if pps else "."
    return text


# ---- inputs -------------------------------------------------------------------------------------
def model_input() -> ModelSpec | None:
    """The model: a shipped id, or an uploaded model YAML / HuggingFace config.json."""
    source = st.radio("Model source", SOURCES, key="est_model_source", horizontal=True)
    if source == SHIPPED:
        return c.load_model(st.selectbox("Model", c.model_ids(), key="est_model"))
    if source == UPLOAD_HF and not c.hf_available():
        st.error("config: HuggingFace config.json import is not available in this build.")
        return None
    kinds = ["json"] if source == UPLOAD_HF else ["yaml", "yml"]
    upload = st.file_uploader(
        f"{source} (at most 1 MB)",
        type=kinds,
        key="est_upload",
        help="Model YAML: the schema of models/*.yaml (safe YAML only). "
        "config.json: a HuggingFace transformers config.",
    )
    if upload is None:
        st.info("Upload a file to estimate its throughput.")
        return None
    try:
        text = c.read_upload(upload, "model")
        stem = upload.name.rsplit(".", 1)[0].lower()
        hf_name = None if stem in ("config", "") else stem
        spec, notes = c.parse_model_upload(text, hf=source == UPLOAD_HF, name=hf_name)
    except PlannerError as exc:
        st.error(f"Could not read {upload.name}: {c.one_line(exc)}")
        return None
    st.session_state[c.UPLOADED_MODEL] = spec
    st.success(
        f"Loaded **{spec.name}**: {spec.layers} layers, hidden {spec.hidden}, "
        f"{spec.total_params / 1e9:.2f} B parameters ({spec.active_params / 1e9:.2f} B active)."
    )
    if notes:
        with st.expander(f"Import notes ({len(notes)})"):
            for note in notes:
                st.markdown(f"- {note}")
    return spec


@st.cache_data(show_spinner=False, max_entries=256)
def _timeline(key: str, pp: int, vpp: int, _report: StepReport) -> charts.Timeline:
    """The schematic timeline, cached on the report's totals (``key``)."""
    return charts.pipeline_timeline(_report, pp, vpp)


def _report_key(report: StepReport) -> str:
    """The report totals the timeline depends on, as a cache key."""
    return json.dumps(
        [report.step_time_s, report.microbatches, sorted(report.time_breakdown_s.items())]
    )


def misfit_text(report: StepReport, fixes: list[Fix]) -> str:
    """The memory verdict of a layout that does not fit: by how much, and what fits."""
    text = (
        f"Does not fit in memory: {c.fmt_gib(report.peak_memory_gib)} needed, "
        f"{c.fmt_gib(report.usable_memory_gib)} usable. " + " ".join(report.feasibility)
    )
    if not fixes:
        return text + f" {NO_FIX}: try the Search page."
    changes = "; ".join(
        f"{' '.join(f.flags)} ({f.tokens_per_s_per_gpu:,.0f} tokens/s/GPU, "
        f"{c.fmt_gib(f.peak_memory_gib)})"
        for f in fixes
    )
    return text + f"  \nCheapest changes that fit: {c.md_escape(changes)}."


def show_report(
    model: ModelSpec,
    cluster: Cluster,
    layout: Layout,
    report: StepReport,
    fixes: list[Fix] | None = None,
) -> None:
    """Headline numbers, memory verdict (with ``fixes``, the cheapest changes that fit, when
    it does not fit), the memory and time charts, the pipeline timeline and the details."""
    cols = st.columns(5)
    cols[0].metric(
        "Tokens/s", c.fmt_count(report.tokens_per_s), help="tokens per second, whole job"
    )
    band = error_band(model.moe is not None)
    lo, hi = band.interval(report.tokens_per_s_per_gpu)
    cols[1].metric(
        "Tokens/s per GPU",
        f"{report.tokens_per_s_per_gpu:,.0f}",
        help=f"planner's error band: {lo:,.0f} to {hi:,.0f} tokens/s/GPU ({band.text()})",
    )
    cols[2].metric("MFU", c.fmt_pct(report.mfu_pct), help=report.mfu_convention)
    cols[3].metric("Step time", c.fmt_seconds(report.step_time_s))
    cols[4].metric(
        "Memory per GPU",
        c.fmt_gib(report.peak_memory_gib),
        delta=f"{report.memory_headroom_gib:+,.1f} GiB headroom",
        delta_color="normal",
    )
    if report.fits:
        st.success(
            f"Fits in memory: {c.fmt_gib(report.peak_memory_gib)} of "
            f"{c.fmt_gib(report.usable_memory_gib)} usable on the {report.peak_memory_stage} "
            f"pipeline stage ({c.fmt_gib(report.memory_headroom_gib)} free)."
        )
    else:
        st.warning(misfit_text(report, fixes or []))
    by_rank = rank_memory_text(report)
    if by_rank:
        st.caption(by_rank[0].upper() + by_rank[1:] + ".")
    left, right = st.columns(2)
    capacity = cluster.accelerator.hbm_capacity_gib
    left.vega_lite_chart(
        vega_charts.memory_spec(report, capacity), key="est_mem_chart", width="stretch"
    )
    time_chart = vega_charts.time_spec(report)
    right.vega_lite_chart(
        time_chart, key="est_time_chart", width="stretch", height=time_chart["height"]
    )
    if layout.pp == 1:
        one_stage_timeline(layout, report)
    elif layout.pp > charts.MAX_DRAWN_STAGES:
        st.info(
            f"Pipeline timeline not drawn: pp = {layout.pp} stages (at most "
            f"{charts.MAX_DRAWN_STAGES} are drawn)."
        )
    else:
        show_timeline(layout, report)
    show_details(model, cluster, report)


def one_stage_timeline(layout: Layout, report: StepReport) -> None:
    """Without a pipeline the timeline is one row of micro-batches back to back, which the
    time breakdown already shows: drawn only while its expander is open (a plotly chart costs
    a widget change about 100 ms in the browser, tests/app/test_browser.py)."""
    box = st.expander(
        TIMELINE_TITLE, key=TIMELINE_OPEN, on_change="rerun", icon=":material/timeline:"
    )
    if box.open:
        with box:
            show_timeline(layout, report)


def show_timeline(layout: Layout, report: StepReport) -> None:
    """The schematic pipeline timeline and how it was derived."""
    timeline = _timeline(_report_key(report), layout.pp, layout.virtual_stages, report)
    st.plotly_chart(charts.pipeline_figure(timeline), key="est_pipeline_chart")
    scale, unit = charts.time_unit(timeline.end_s)
    st.caption(
        f"Schematic: {timeline.derivation}; per micro-batch on the bottleneck stage: forward "
        f"{timeline.forward_s * scale:.3g} {unit}, backward {timeline.backward_s * scale:.3g} "
        f"{unit}, exposed communication {timeline.comm_s * scale:.3g} {unit}; DP communication "
        "and the optimizer step close the step. "
        f"Drawn bubble on stage 1: {timeline.bubble_drawn_s * scale:.3g} {unit} "
        f"(report: {report.time_breakdown_s.get('pipeline_bubble', 0.0) * scale:.3g} {unit}); "
        f"drawn step {timeline.end_s * scale:.4g} {unit} (report: "
        f"{report.step_time_s * scale:.4g} {unit})."
        + (" " + "; ".join(timeline.notes) + "." if timeline.notes else "")
    )


def show_details(model: ModelSpec, cluster: Cluster, report: StepReport) -> None:
    """Placement, assumptions and the report download. The details are drawn only while
    their expander is open: drawn collapsed, they cost a widget change in the browser (20
    alternating changes on the 2-core host: 436 ms median drawn, 367 ms lazy)."""
    box = st.expander(DETAILS_TITLE, key=DETAILS_OPEN, on_change="rerun", icon=":material/info:")
    if box.open:
        with box:
            st.markdown(
                f"**{model.name}** on {report.gpus} x {cluster.accelerator.name} "
                f"({cluster.spec.name}); {report.microbatches} micro-batches per step; "
                f"{report.tokens_per_step:,} tokens per step; model FLOPs per token "
                f"{report.model_flops_per_token / 1e9:,.2f} GFLOP; HFU "
                f"{c.fmt_pct(report.hfu_pct)}."
            )
            st.table(
                {"group": list(report.placement), "placement": list(report.placement.values())}
            )
            for note in report.assumptions:
                st.markdown(f"- {note}")
            st.caption(report.mfu_convention)
    st.download_button(
        "Download the report (JSON)",
        data=dumps_strict(report.to_dict()),
        file_name=f"{model.name}-{cluster.id}-{report.gpus}gpus.json",
        mime="application/json",
        on_click="ignore",
        key="est_download",
    )


def power_limit_input(cluster: Cluster) -> Cluster:
    """``cluster`` with its GPUs at the power limit the user sets (W; 0: the board power of the
    cluster's accelerator): below the power its peaks are rated at, the tensor clock falls as
    the cube root of the ratio (``Cluster.with_power_limit``, docs/model.md). One widget with
    fixed bounds for every cluster, so a cluster change does not rebuild it in the browser; a
    limit outside the accelerator's range is an error naming it."""
    watts = st.number_input(
        "GPU power limit (W, 0 = the accelerator's own)",
        min_value=0.0,
        max_value=MAX_POWER_W,
        step=25.0,
        format="%.0f",
        key="est_power_limit",
        help="nvidia-smi -pl: below the board power the peaks are rated at, the GEMMs and "
        "attention run at (limit / rated)^(1/3) of the rated clock (HBM, links unchanged); "
        "from a quarter of the rated power up to it",
    )
    return cluster.with_power_limit(watts) if watts else cluster


def cluster_input() -> Cluster | None:
    """The cluster column: the preset, what its accelerator offers and the GPUs' power limit
    (None: the limit is out of range, and an error line says so)."""
    cluster_id = st.selectbox("Cluster", c.cluster_ids(), key="est_cluster")
    cluster = c.load_cluster(cluster_id)
    st.session_state[c.LAST_CLUSTER] = cluster_id
    st.caption(
        f"{cluster.accelerator.name}: {cluster.accelerator.peak_tflops.bf16 or 0:,.0f} "
        f"TFLOP/s bf16, {cluster.accelerator.hbm_usable_gib:.1f} GiB usable HBM; "
        f"scale-up domain {cluster.spec.scale_up_domain_gpus} GPUs."
    )
    try:
        return power_limit_input(cluster)
    except PlannerError as exc:
        st.error(c.one_line(exc))
        return None


def body() -> None:
    """The Estimate page."""
    c.init_state(extras.field_defaults() | DEFAULTS)
    st.title("Estimate")
    st.caption(
        "Step time, tokens/s, MFU and memory per GPU of one layout, from the analytic model."
    )
    c.sidebar_status()
    top = st.columns([2, 1])
    with top[0]:
        model = model_input()
    with top[1]:
        cluster = cluster_input()
    if cluster is None:
        return
    stack = stacks.stack_selector()
    st.subheader("Layout")
    gpus, values, cuda_graphs = extras.spec_inputs()
    if model is None:
        return
    tp, pp, cp, seq_len = values["tp"], values["pp"], values["cp"], values["seq_len"]
    if gpus % (tp * pp * cp):
        vpp = values["vpp"] or 1
        # a tp/pp/vpp/cp that is illegal for the model whatever the GPU count says so first
        try:
            probe = Layout(tp=tp, pp=pp, dp=1, cp=cp, vpp=vpp if vpp > 1 else None)
            check_layout(model, cluster, probe, Training(seq_len=seq_len, global_batch=1))
        except PlannerError as exc:
            if exc.field in ("layout.tp", "layout.pp", "layout.vpp", "layout.cp"):
                hint = suggestion(
                    exc, model, cluster, gpus, probe, Training(seq_len=seq_len, global_batch=1)
                )
                st.error(c.one_line(exc) + (f"  \n{hint}" if hint else ""))
                return
        except ValidationError:
            pass
        st.error(world_size_message(model, cluster, gpus, tp, pp, cp))
        return
    dp = gpus // (tp * pp * cp)
    st.caption(f"dp = gpus / (tp x pp x cp) = {gpus} / {tp * pp * cp} = **{dp}**")
    try:
        layout, training = extras.specs_from_inputs(values, dp)
    except ValidationError as exc:
        st.error(c.one_line(pydantic_error_to_planner(exc, "layout")))
        return
    try:
        check_layout(model, cluster, layout, training, gpus=gpus)
    except PlannerError as exc:
        hint = suggestion(exc, model, cluster, gpus, layout, training)
        st.error(c.one_line(exc) + (f"  \n{hint}" if hint else ""))
        return
    if tp > cluster.spec.scale_up_domain_gpus:
        st.warning(
            f"tp = {tp} spans {math.ceil(tp / cluster.spec.scale_up_domain_gpus)} scale-up "
            f"domains of {cluster.spec.scale_up_domain_gpus} GPUs: its all-reduces cross the "
            "network (the layout search never picks this)."
        )
    profile = c.profile_for(cluster)
    if cuda_graphs:
        profile = profile.with_host_op_us(0.0)
    try:
        report = c.simulate(model, cluster, layout, training, profile, stack)
    except PlannerError as exc:
        st.error(c.one_line(exc))
        return
    fixes = [] if report.fits else memory_fixes(model, cluster, layout, training, profile, stack)
    show_report(model, cluster, layout, report, fixes)
    st.caption(c.profile_caption(cluster, profile))
    stacks.report_caption(report)
    stacks.compare_section(model, cluster, layout, training, profile)
    extras.goodput_section(model, cluster, layout, training, report)
    extras.levers_section(model, cluster, layout, training, profile, report)


c.run_page(body)
