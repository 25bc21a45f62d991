"""Calibration: inspect a profile's curves against the shipped one, and use it on every page.

A profile (JSON, the schema of ``calibration/profiles/*.json``, e.g. written by ``planner
calibrate``) is checked as ``planner.load_profile`` checks a file. Its curves are drawn on the
chosen cluster's hardware: GEMM efficiency (2mnk / time / bf16 peak) against the GEMM size, and
all-reduce bus bandwidth inside one node against the message size.
"""

from __future__ import annotations

import math

import streamlit as st

from app_pages import charts
from app_pages import common as c
from planner.costs.comms import collective_time_s, make_fabric, place
from planner.costs.compute import gemm_time_s, make_device
from planner.errors import PlannerError
from planner.profile import CalibrationProfile
from planner.specs.hardware import Cluster

GEMM_SIZES = (128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)
MESSAGE_BYTES = tuple(2**e for e in range(10, 31))  # 1 KiB .. 1 GiB
UPLOADED = "cal_uploaded_profile"


def gemm_curve(cluster: Cluster, profile: CalibrationProfile) -> list[float]:
    """GEMM efficiency (% of the bf16 peak) of square m = n = k GEMMs."""
    dev = make_device(cluster.accelerator, profile, "bf16")
    return [2.0 * d**3 / gemm_time_s(d, d, d, dev) / dev.gemm_peak_flops * 100 for d in GEMM_SIZES]


def allreduce_curve(cluster: Cluster, profile: CalibrationProfile) -> tuple[int, list[float]]:
    """(ranks, bus bandwidth GB/s per message size) of an all-reduce over one node."""
    fabric = make_fabric(cluster, profile)
    n = min(cluster.spec.gpus_per_node, cluster.spec.scale_up_domain_gpus)
    if n < 2:
        return n, [0.0 for _ in MESSAGE_BYTES]
    where = place(n, 1, cluster.spec.scale_up_domain_gpus)
    factor = 2.0 * (n - 1) / n
    return n, [
        factor * b / collective_time_s("all_reduce", b, where, fabric) / 1e9 for b in MESSAGE_BYTES
    ]


def parameters_table(profiles: list[tuple[str, CalibrationProfile]]) -> dict[str, list[str]]:
    """The main figures of each profile, side by side."""
    rows = {
        "id": lambda p: p.id,
        "accelerator": lambda p: p.accelerator,
        "method": lambda p: p.method,
        "GEMM eta_max bf16": lambda p: f"{p.gemm_eta_max('bf16'):.3f}",
        "GEMM eta_max fp8": lambda p: f"{p.gemm_eta_max('fp8'):.3f}",
        "GEMM dim_half": lambda p: f"{p.gemm.dim_half:g}",
        "GEMM fixed (us)": lambda p: f"{p.gemm.fixed_us:g}",
        "sustained fraction": lambda p: f"{p.gemm.sustained_fraction:.3f}",
        "attention eta fwd / bwd": lambda p: (
            f"{p.attention.eta_max_fwd:.3f} / {p.attention.eta_max_bwd:.3f}"
        ),
        "HBM eta": lambda p: f"{p.memory.eta_hbm:.3f}",
        "scale-up / scale-out eta": lambda p: (
            f"{p.comm.scale_up_eta:.3f} / {p.comm.scale_out_eta:.3f}"
        ),
        "NCCL base latency (us)": lambda p: f"{p.comm.base_latency_us:g}",
        "overlap contention": lambda p: f"{p.comm.overlap_contention:.2f}",
        "measured collectives": lambda p: str(len(p.collectives)),
    }
    table: dict[str, list[str]] = {"parameter": list(rows)}
    for name, prof in profiles:
        table[name] = [fn(prof) for fn in rows.values()]
    return table


def _upload() -> CalibrationProfile | None:
    """The uploaded profile (kept across pages), or None; a bad file shows st.error."""
    upload = st.file_uploader(
        "Calibration profile JSON (at most 1 MB)",
        type=["json"],
        key="cal_upload",
        help="The schema of calibration/profiles/*.json (schema_version 1), e.g. the output "
        "of planner calibrate.",
    )
    if upload is None:
        return st.session_state.get(UPLOADED)
    try:
        prof = c.parse_profile_text(c.read_upload(upload, "profile"))
    except PlannerError as exc:
        st.session_state.pop(UPLOADED, None)
        st.error(f"Could not read {upload.name}: {c.one_line(exc)}")
        return None
    st.session_state[UPLOADED] = prof
    return prof


ANY_DEVICE_LABEL = "use this profile on another accelerator"


def _finite_curves(
    cluster: Cluster, profiles: list[tuple[str, CalibrationProfile]]
) -> list[tuple[str, list[float], tuple[int, list[float]]]]:
    """(name, GEMM curve, all-reduce curve) of each profile whose curves are finite; a profile
    whose curves are not is one st.error line, never a NaN on a chart."""
    out = []
    for name, prof in profiles:
        try:
            gemm, (ranks, bw) = gemm_curve(cluster, prof), allreduce_curve(cluster, prof)
        except ArithmeticError:  # a zero or overflowing time: not drawable
            gemm, ranks, bw = [math.nan], 0, []
        if all(math.isfinite(v) and v >= 0 for v in (*gemm, *bw)):
            out.append((name, gemm, (ranks, bw)))
        else:
            st.error(
                f"profile: '{prof.id}' gives non-finite or negative efficiencies on "
                f"{cluster.accelerator.name} (valid: efficiencies between 0 and 1)"
            )
    return out


def _cluster_choice() -> Cluster:
    """The cluster whose hardware the curves use (defaulting to the one chosen last)."""
    clusters = c.cluster_ids()
    if "cal_cluster" not in st.session_state:
        last = st.session_state.get(c.LAST_CLUSTER, c.DEFAULT_CLUSTER)
        st.session_state["cal_cluster"] = last if last in clusters else c.DEFAULT_CLUSTER
    return c.load_cluster(
        st.selectbox("Cluster (hardware the curves use)", clusters, key="cal_cluster")
    )


def _offer_upload(
    uploaded: CalibrationProfile, cluster: Cluster, active: CalibrationProfile | None
) -> tuple[CalibrationProfile | None, CalibrationProfile | None]:
    """The any-accelerator checkbox and the "Use this profile" button of an uploaded profile;
    (uploaded, active) after them: uploaded None where it cannot apply to ``cluster``."""
    if "cal_all" not in st.session_state:
        st.session_state["cal_all"] = bool(st.session_state.get(c.PROFILE_ALL, False))
    any_device = st.checkbox(
        ANY_DEVICE_LABEL,
        key="cal_all",
        help="Off: a profile is used only on clusters of the accelerator it was measured "
        "on (elsewhere each cluster's shipped profile). On: on every accelerator, as "
        "planner --profile-for-any-device.",
    )
    st.session_state[c.PROFILE_ALL] = any_device
    try:
        c.use_profile(uploaded, cluster, any_device=any_device)
    except PlannerError as exc:
        st.error(f"{c.one_line(exc)}. Tick '{ANY_DEVICE_LABEL}' to apply it anyway.")
        return None, active
    if st.button("Use this profile", type="primary", key="cal_use"):
        st.session_state[c.ACTIVE_PROFILE] = uploaded
        active = uploaded
    if any_device and uploaded.accelerator != cluster.spec.accelerator:
        st.warning(
            f"`{uploaded.id}` was measured on `{uploaded.accelerator}`; the curves "
            f"below apply it to {cluster.accelerator.name}'s datasheet figures."
        )
    return uploaded, active


def _active_status(active: CalibrationProfile | None) -> None:
    """Which profile every page uses, with a button back to the shipped ones."""
    if active is not None:
        scope = (
            "every accelerator"
            if st.session_state.get(c.PROFILE_ALL)
            else f"`{active.accelerator}` only"
        )
        st.success(
            f"Active profile on every page: `{active.id}`, measured on `{active.accelerator}` "
            f"(for {scope})."
        )
        if st.button("Back to the shipped profiles", key="cal_reset"):
            st.session_state.pop(c.ACTIVE_PROFILE, None)
            st.rerun()
    else:
        st.info("Active: the shipped profile of each accelerator.")


def _profiles_to_draw(
    cluster: Cluster,
    shipped: CalibrationProfile,
    active: CalibrationProfile | None,
    uploaded: CalibrationProfile | None,
) -> list[tuple[str, CalibrationProfile]]:
    """(name, profile) of the shipped, active and uploaded profiles, each once; an active
    profile not applied to ``cluster`` is said in a caption instead."""
    profiles: list[tuple[str, CalibrationProfile]] = [(f"shipped: {shipped.id}", shipped)]
    in_use = c.profile_for(cluster)
    if active is not None and c.profile_key(in_use) == c.profile_key(active):
        if c.profile_key(active) != c.profile_key(shipped):
            profiles.append((f"active: {active.id}", active))
    elif active is not None:
        st.caption(
            f"The active profile `{active.id}` was measured on `{active.accelerator}`: not "
            f"applied to {cluster.accelerator.name} (tick '{ANY_DEVICE_LABEL}' after uploading "
            "it to apply it everywhere)."
        )
    if uploaded is not None and all(
        c.profile_key(uploaded) != c.profile_key(p) for _, p in profiles
    ):
        profiles.append((f"uploaded: {uploaded.id}", uploaded))
    return profiles


def _draw_curves(
    cluster: Cluster,
    curves: list[tuple[str, list[float], tuple[int, list[float]]]],
    profiles: list[tuple[str, CalibrationProfile]],
) -> None:
    """The GEMM-efficiency and all-reduce bus-bandwidth charts, and how they are computed."""
    left, right = st.columns(2)
    left.plotly_chart(
        charts.curves_figure(
            [(name, GEMM_SIZES, gemm) for name, gemm, _ in curves],
            f"GEMM efficiency on {cluster.accelerator.name} (bf16)",
            "GEMM size m = n = k (elements)",
            "efficiency (% of dense bf16 peak)",
            y_percent=True,
        ),
        key="cal_gemm_chart",
    )
    ranks = curves[0][2][0]
    right.plotly_chart(
        charts.curves_figure(
            [(name, MESSAGE_BYTES, bw) for name, _, (_, bw) in curves],
            f"All-reduce bus bandwidth, {ranks} GPUs in one node",
            "message size (bytes)",
            "bus bandwidth (GB/s)",
        ),
        key="cal_comm_chart",
    )
    st.caption(
        "GEMM efficiency = 2 m n k / predicted time / dense bf16 peak (profile's sustained "
        "fraction included). Bus bandwidth = 2 (n - 1) / n x bytes / predicted all-reduce time, "
        f"nccl-tests convention; NVLink {cluster.spec.scale_up_bandwidth_gb_per_s:g} GB/s per GPU "
        "each way. Profiles: " + "; ".join(c.profile_label(p) for _, p in profiles) + "."
    )


def body() -> None:
    """The Calibration page."""
    st.title("Calibration")
    st.caption(
        "Efficiency curves of a calibration profile against the shipped one, on one cluster's "
        "hardware; use an uploaded profile on every page."
    )
    cluster = _cluster_choice()
    shipped = c.shipped_profile(cluster.id)
    uploaded = _upload()
    active = c.active_profile()
    if uploaded is not None:
        uploaded, active = _offer_upload(uploaded, cluster, active)
    _active_status(active)
    c.sidebar_status()

    profiles = _profiles_to_draw(cluster, shipped, active, uploaded)
    curves = _finite_curves(cluster, profiles)
    if not curves:
        return
    _draw_curves(cluster, curves, profiles)
    st.subheader("Parameters")
    st.dataframe(parameters_table(profiles), hide_index=True)


c.run_page(body)
