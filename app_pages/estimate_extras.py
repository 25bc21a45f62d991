"""The Estimate page's layout and training inputs, and its lazy sections: goodput under failures
and checkpoints, and levers.

The inputs are generated from the fields of :data:`LAYOUT_SPEC` and :data:`TRAINING_SPEC`
(``planner.specs.fields.input_fields``, as the command line's flags): a ``Literal`` is a select
box, a ``bool`` a checkbox, an ``int`` a number input within the field's bounds, a tuple of
choices a multiselect, the description the help. The fields the page has always shown keep
their place, label and key (:data:`ROWS`, :data:`LABELS`, :data:`KEYS`); any other field,
one added to a spec included, is drawn under "More layout and training settings" with the key
``est_<field>``.

The goodput and levers sections live in expanders that track their state (``on_change="rerun"``), so their inputs and
numbers are computed only while the expander is open and the Estimate rerun stays as fast as
the cached simulation. :func:`planner.goodput.goodput` is pure arithmetic (tens of
microseconds); :func:`planner.advise.advise` re-simulates about ten layouts and is cached on
the frozen specs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, get_args

import streamlit as st

from app_pages import common as c
from planner.advise import Lever, advise
from planner.goodput import (
    DEFAULT_MTBF_HOURS_PER_GPU,
    DEFAULT_RESTART_MINUTES,
    DEFAULT_WRITE_GB_PER_S_PER_NODE,
    GoodputReport,
    GoodputSettings,
    goodput,
)
from planner.profile import CalibrationProfile
from planner.report import StepReport
from planner.specs.fields import InputField, input_fields
from planner.specs.hardware import Cluster
from planner.specs.knobs import CrossEntropy
from planner.specs.layout import Layout, Training
from planner.specs.model import ModelSpec

GOODPUT_OPEN = "est_goodput_open"
LEVERS_OPEN = "est_levers_open"
GOODPUT_TITLE = "Goodput under failures and checkpoints"
LEVERS_TITLE = "Levers"

# widget keys -> first values (the planner's defaults, planner/goodput.py)
DEFAULTS: dict[str, Any] = {
    "est_gp_mtbf": float(DEFAULT_MTBF_HOURS_PER_GPU),
    "est_gp_write": float(DEFAULT_WRITE_GB_PER_S_PER_NODE),
    "est_gp_restart": float(DEFAULT_RESTART_MINUTES),
    "est_gp_async": False,
}


# ---- layout and training inputs ----------------------------------------------------------------
# The specs the inputs describe; read on every run, so a subclass can stand in
LAYOUT_SPEC: type[Layout] = Layout
TRAINING_SPEC: type[Training] = Training
# drawn by hand: dp follows from the GPU count, the loss kernel is the "in-place loss" switch
HAND_DRAWN = frozenset({"dp", "cross_entropy"})
# the page's rows (after the GPU count); the switches row ends with CUDA graphs and the loss
ROWS = (
    ("tp", "pp", "cp", "ep", "vpp"),
    ("seq_len", "global_batch", "micro_batch", "recompute", "zero", "precision"),
    ("recompute_modules",),
    ("recompute_fraction",),
    ("offload_layers",),
    ("sequence_parallel", "overlap_tp_comm", "overlap_dp_grad_reduce", "overlap_ep_comm"),
)
LABELS = {
    "seq_len": "seq len",
    "global_batch": "global batch (sequences)",
    "micro_batch": "micro-batch",
    "zero": "ZeRO stage",
    "recompute_modules": "selective recompute modules (Megatron-Core --recompute-modules)",
    "recompute_fraction": "share of each model chunk's layers re-run (empty: every layer)",
    "offload_layers": "offload activations of this many layers to host memory",
    "sequence_parallel": "sequence parallel",
    "overlap_tp_comm": "overlap TP communication",
    "overlap_dp_grad_reduce": "overlap DP gradient reduction",
    "overlap_ep_comm": "overlap EP all-to-all",
}
KEYS = {
    "sequence_parallel": "est_sp",
    "overlap_tp_comm": "est_overlap_tp",
    "overlap_dp_grad_reduce": "est_overlap_dp",
    "overlap_ep_comm": "est_overlap_ep",
}
STEPS = {"seq_len": 1024, "recompute_fraction": 0.25}
# inputs that apply only with some other values (hidden, they take the spec's default)
SHOWN_WHEN: dict[str, Callable[[dict[str, Any]], bool]] = {
    "recompute_modules": lambda v: v["recompute"] == "selective",
    "recompute_fraction": lambda v: v["recompute"] == "full",
    "offload_layers": lambda v: v["recompute"] == "none" and v["pp"] == 1,
}


def spec_fields() -> dict[str, InputField]:
    """The layout and training fields the page draws from the specs."""
    fields = [*input_fields(LAYOUT_SPEC), *input_fields(TRAINING_SPEC)]
    return {f.name: f for f in fields if f.name not in HAND_DRAWN}


def widget_key(name: str) -> str:
    """The session_state key of a field's widget."""
    return KEYS.get(name, f"est_{name}")


def field_defaults() -> dict[str, Any]:
    """Widget key -> the spec's default (a multiselect starts from a list)."""
    out = {}
    for f in spec_fields().values():
        value = list(f.default or ()) if f.kind == "list" else f.default
        out[widget_key(f.name)] = value
    return out


def _choice_label(value: Any) -> str:
    return "auto" if value is None else str(value)


def field_widget(box: Any, field: InputField) -> Any:
    """Draw ``field``'s widget in ``box`` (a column, an expander or ``st``); its value."""
    label, key, tip = LABELS.get(field.name, field.name), widget_key(field.name), field.description
    if field.kind == "bool":
        return bool(box.checkbox(label, key=key, help=tip))
    if field.kind == "choice":
        options = (None, *field.choices) if field.optional else field.choices
        return box.selectbox(label, options, key=key, help=tip, format_func=_choice_label)
    if field.kind == "list":
        return tuple(box.multiselect(label, field.choices, key=key, help=tip))
    if field.kind == "str":
        return box.text_input(label, key=key, help=tip) or (None if field.optional else "")
    number = int if field.kind == "int" else float
    value = box.number_input(
        label,
        min_value=None if field.minimum is None else number(field.minimum),
        max_value=None if field.maximum is None else number(field.maximum),
        step=number(STEPS.get(field.name, 1)),
        key=key,
        help=tip,
    )
    return None if value is None else number(value)


def _draw(
    fields: dict[str, InputField], names: tuple[str, ...], boxes: Any, values: dict[str, Any]
) -> None:
    """Draw the widgets of ``names`` in ``boxes`` (one each) and record their values; a field
    hidden by :data:`SHOWN_WHEN` takes its default."""
    for name, box in zip(names, boxes, strict=False):
        if name not in fields:
            continue
        shown = SHOWN_WHEN.get(name)
        if shown is not None and not shown(values):
            values[name] = fields[name].default
        else:
            values[name] = field_widget(box, fields[name])


def spec_inputs() -> tuple[int, dict[str, Any], bool]:
    """The Layout section: the GPU count, every field's value (field -> value) and the
    CUDA-graphs switch."""
    fields = spec_fields()
    values: dict[str, Any] = {}
    cols = st.columns(6)
    gpus = int(
        cols[0].number_input("GPUs", min_value=1, max_value=1_000_000, step=1, key="est_gpus")
    )
    _draw(fields, ROWS[0], cols[1:], values)
    _draw(fields, ROWS[1], st.columns(6), values)
    for row in ROWS[2:5]:
        _draw(fields, row, [st], values)
    cols = st.columns(6)
    _draw(fields, ROWS[5], cols[:4], values)
    cuda_graphs = cols[4].checkbox(
        "CUDA graphs",
        key="est_cuda_graphs",
        help="kernels replayed from graphs: the host never holds the GPU back "
        "(host overhead 0 instead of the profile's cost per framework op)",
    )
    values["cross_entropy"] = cols[5].selectbox(
        "loss kernel",
        get_args(CrossEntropy),
        key="est_loss",
        help="fp32_copy: Megatron's vocab-parallel loss keeps an fp32 softmax (6 B per logit); "
        "in_place: Transformer Engine's online-softmax loss writes the gradient into the logits "
        "(2 B); fp32_log_softmax: PyTorch F.cross_entropy on an fp32 copy, as torchtitan eager (12 "
        "B in backward); compiled: that loss under torch.compile (4 B)",
    )
    drawn = {name for row in ROWS for name in row}
    rest = tuple(name for name in fields if name not in drawn)
    if rest:
        with st.expander("More layout and training settings"):
            cols = st.columns(3)
            for i, name in enumerate(rest):
                _draw(fields, (name,), [cols[i % 3]], values)
    return gpus, values, bool(cuda_graphs)


def specs_from_inputs(values: dict[str, Any], dp: int) -> tuple[Layout, Training]:
    """The Layout and Training of the inputs (a pydantic ValidationError when they are not
    valid); vpp 1 is no interleaving, and switches that need tp > 1 or ep > 1 are off below."""
    v = dict(values)
    v["vpp"] = v["vpp"] if (v.get("vpp") or 1) > 1 else None
    v["sequence_parallel"] = v["sequence_parallel"] and v["tp"] > 1
    v["overlap_tp_comm"] = v["overlap_tp_comm"] and v["tp"] > 1
    v["overlap_ep_comm"] = v["overlap_ep_comm"] and v["ep"] > 1
    layout = LAYOUT_SPEC(**{k: x for k, x in v.items() if k in LAYOUT_SPEC.model_fields}, dp=dp)
    training = TRAINING_SPEC(**{k: x for k, x in v.items() if k in TRAINING_SPEC.model_fields})
    return layout, training


# ---- goodput ------------------------------------------------------------------------------------
def goodput_settings() -> GoodputSettings:
    """The goodput inputs (MTBF, write bandwidth, restart time, async checkpoints) as settings."""
    cols = st.columns(4)
    mtbf = cols[0].number_input(
        "MTBF per GPU (hours)",
        min_value=1.0,
        max_value=1e9,
        step=1000.0,
        format="%.0f",
        key="est_gp_mtbf",
        persist_state="page",
        help="Mean GPU-hours between unexpected job interruptions, per GPU (the job's MTBF is "
        "this / GPUs). Default: Llama 3, 419 unexpected interruptions in 54 days on 16,384 H100s.",
    )
    write = cols[1].number_input(
        "checkpoint write (GB/s per node)",
        min_value=0.01,
        max_value=1e4,
        step=1.0,
        format="%.2f",
        key="est_gp_write",
        persist_state="page",
        help="Write bandwidth one node sustains to the shared file system (an assumption); "
        "the job's aggregate is capped at 2 TB/s.",
    )
    restart = cols[2].number_input(
        "restart (minutes)",
        min_value=0.0,
        max_value=1e4,
        step=1.0,
        format="%.1f",
        key="est_gp_restart",
        persist_state="page",
        help="Detection, rescheduling, launch and NCCL set-up after a failure (an assumption); "
        "the checkpoint load is added on top.",
    )
    cols[3].write("")  # align the toggle with the inputs
    is_async = cols[3].toggle(
        "asynchronous checkpoint",
        key="est_gp_async",
        persist_state="page",
        help="Training pauses only for a device-to-host snapshot; the write runs in the "
        "background (Megatron --async-save, torch.distributed.checkpoint async_save).",
    )
    return GoodputSettings(
        mtbf_hours_per_gpu=float(mtbf),
        checkpoint_write_gb_per_s=float(write),
        restart_minutes=float(restart),
        async_checkpoint=bool(is_async),
    )


def wall_time_split(g: GoodputReport) -> list[dict[str, Any]]:
    """Where the wall-clock time goes: one row per share (percent of wall time)."""
    return [
        {"share": "training (goodput)", "% of wall time": g.goodput_pct},
        {"share": "checkpoint pauses", "% of wall time": g.checkpoint_overhead_pct},
        {"share": "re-done work after failures", "% of wall time": g.rework_pct},
        {"share": "restarts", "% of wall time": g.restart_pct},
    ]


def _count(n: int, noun: str) -> str:
    """'1 node', '8 nodes'."""
    return f"{n:,} {noun}" + ("" if n == 1 else "s")


def show_goodput(g: GoodputReport) -> None:
    """Checkpoint size, interval, goodput, effective MFU and the wall-time split."""
    cols = st.columns(4)
    cols[0].metric(
        "Checkpoint size",
        c.fmt_gib(g.checkpoint_gib),
        help=f"{g.checkpoint_bytes_per_param:g} B per parameter (weights + fp32 master weights "
        f"and Adam moments); {c.fmt_gib(g.checkpoint_gib_per_writer_node)} from the busiest node",
    )
    source = {"daly": "Daly optimum", "user": "as set", "write-bound": "the write time"}
    cols[1].metric(
        "Optimal checkpoint interval",
        c.fmt_seconds(g.checkpoint_interval_s),
        help=f"{source.get(g.interval_source, g.interval_source)}, rounded to "
        f"{g.checkpoint_interval_steps:,} whole steps (Young: "
        f"{c.fmt_seconds(g.young_interval_s)})",
    )
    cols[2].metric(
        "Goodput",
        c.fmt_pct(g.goodput_pct, 2),
        help="share of wall-clock time that trains new steps",
    )
    cols[3].metric(
        "Effective MFU",
        c.fmt_pct(g.effective_mfu_pct),
        delta=f"{g.effective_mfu_pct - g.mfu_pct:+.2f} points",
        delta_color="normal",
        help="MFU x goodput",
    )
    left, right = st.columns([1, 2])
    left.dataframe(
        wall_time_split(g),
        hide_index=True,
        column_config={"% of wall time": st.column_config.NumberColumn(format="%.3f")},
        key="est_gp_split",
    )
    right.markdown(
        f"Job MTBF **{g.job_mtbf_hours:,.2f} h** ({g.failures_per_day:.3g} failures per day on "
        f"{_count(g.gpus, 'GPU')}, {_count(g.nodes, 'node')}). One checkpoint writes in "
        f"{c.fmt_seconds(g.checkpoint_write_s)} ({g.checkpoint_write_gb_per_s:,.1f} GB/s "
        f"aggregate) and pauses training {c.fmt_seconds(g.checkpoint_blocking_s)}; a failure "
        f"costs {c.fmt_seconds(g.rework_per_failure_s)} of re-done work and a "
        f"{c.fmt_seconds(g.restart_s)} restart."
    )
    for note in g.assumptions:
        right.markdown(f"- {note}")


def goodput_section(
    model: ModelSpec, cluster: Cluster, layout: Layout, training: Training, report: StepReport
) -> None:
    """The lazy "Goodput under failures and checkpoints" section."""
    c.init_state(DEFAULTS)
    box = st.expander(
        GOODPUT_TITLE, key=GOODPUT_OPEN, on_change="rerun", icon=":material/restart_alt:"
    )
    if not box.open:
        return
    with box:
        settings = goodput_settings()
        show_goodput(goodput(model, cluster, layout, training, report, settings))
        st.caption("Young (1974) / Daly (2006) checkpoint interval; derivation in docs/goodput.md.")


# ---- levers -------------------------------------------------------------------------------------
@st.cache_data(show_spinner=False, max_entries=256)
def _levers(
    model: ModelSpec,
    cluster: Cluster,
    layout: Layout,
    training: Training,
    prof_key: str,
    _profile: CalibrationProfile,
    _baseline: StepReport,
) -> list[Lever]:
    """``advise`` with unavailable levers, cached (``prof_key`` stands for ``_profile``; the
    baseline report follows from the other arguments)."""
    return advise(
        model, cluster, layout, training, _profile, include_unavailable=True, baseline=_baseline
    )


def lever_rows(levers: list[Lever]) -> list[dict[str, Any]]:
    """The applicable levers as table rows (ranked as ``advise`` ranks them)."""
    return [
        {
            "lever": lv.name,
            "gain (%)": lv.gain_pct,
            "memory change (GiB)": lv.memory_change_gib,
            "fits": lv.fits,
            "what": lv.description,
        }
        for lv in levers
        if lv.applicable
    ]


def levers_section(
    model: ModelSpec,
    cluster: Cluster,
    layout: Layout,
    training: Training,
    profile: CalibrationProfile,
    report: StepReport,
) -> None:
    """The lazy "Levers" section: each single change's predicted gain and memory cost."""
    box = st.expander(LEVERS_TITLE, key=LEVERS_OPEN, on_change="rerun", icon=":material/tune:")
    if not box.open:
        return
    with box:
        levers = _levers(model, cluster, layout, training, c.profile_key(profile), profile, report)
        rows = lever_rows(levers)
        if rows:
            st.dataframe(
                rows,
                hide_index=True,
                column_config={
                    "gain (%)": st.column_config.NumberColumn(format="%+.1f"),
                    "memory change (GiB)": st.column_config.NumberColumn(format="%+.2f"),
                    "fits": st.column_config.CheckboxColumn(),
                },
                key="est_levers_table",
            )
        else:
            st.info("No single lever applies to this layout.")
        st.caption(
            "One change at a time, re-simulated with the same calibration profile: gain in "
            "tokens/s and change in peak memory per GPU against this layout; levers that fit "
            "first, then by gain."
        )
        unavailable = [lv for lv in levers if not lv.applicable]
        if unavailable:
            st.caption(
                "Not available here: "
                + "; ".join(f"{lv.name} ({' '.join(lv.reason.split())})" for lv in unavailable)
                + "."
            )
