"""The Estimate page's software-stack selector and its side-by-side comparison of stacks.

Choosing a stack writes its kernels, overlaps and execution into the page's inputs (which the
user can then change: an input always wins), and every simulation of the page runs under it:
a layout the stack cannot run is refused naming it, and the reserved peak is shown. The
comparison runs the page's layout under every shipped stack with the stack's own values for
what a stack decides.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

import planner
from app_pages import common as c
from app_pages import estimate_extras as extras
from planner.cli.inputs import NO_STACK  # "none": the inputs costed as given, as --stack none
from planner.errors import PlannerError
from planner.profile import CalibrationProfile
from planner.report import StepReport
from planner.resources import STACKS_DIR
from planner.specs.hardware import Cluster
from planner.specs.layout import Layout, Training
from planner.specs.loading import shipped_ids
from planner.specs.model import ModelSpec
from planner.specs.stack import StackSpec
from planner.stacks import (
    DEFAULT_STACK,
    STACK_LAYOUT_FIELDS,
    STACK_TRAINING_FIELDS,
    layout_defaults,
    training_defaults,
)

STACK_KEY = "est_stack"
COMPARE_OPEN = "est_stacks_open"


@st.cache_data(show_spinner=False)
def stack_ids() -> list[str]:
    """Ids of the shipped software stacks (``stacks/*.yaml``)."""
    return shipped_ids(STACKS_DIR)


@st.cache_resource(show_spinner=False)
def load_stack(stack_id: str) -> StackSpec:
    """A shipped software stack (frozen, shared between sessions)."""
    return planner.load_stack(stack_id)


def stack_or_none(stack_id: str) -> StackSpec | None:
    """A stack selector's choice: the shipped stack, or None for :data:`NO_STACK`."""
    return None if stack_id == NO_STACK else load_stack(stack_id)


def search_stack_choice(key: str, what: str) -> str:
    """The Search and Compare pages' stack selector (default none, as ``planner search``):
    ``what`` is searched only over what the chosen stack runs."""
    return st.selectbox(
        "Software stack",
        [NO_STACK, *stack_ids()],
        key=key,
        help=f"Search {what} only over what the stack runs (its parallelisms, ZeRO stages, "
        "recompute and schedules) and cost each layout with its kernels, overlaps and "
        "execution (docs/stacks.md); none: every layout the planner models.",
    )


def _write_stack_inputs() -> None:
    """on_change of the selector: the chosen stack's values into the page's inputs."""
    if st.session_state[STACK_KEY] == NO_STACK:
        return  # no stack: the inputs stay as they are
    stack = load_stack(st.session_state[STACK_KEY])
    state = st.session_state
    tp = int(state.get(extras.widget_key("tp"), 1) or 1)
    probe = Layout(tp=tp, sequence_parallel=bool(state.get(extras.widget_key("sequence_parallel"))))
    values: dict[str, Any] = layout_defaults(stack, probe)
    values |= training_defaults(stack, None, Training(seq_len=1, global_batch=1))
    fields = extras.spec_fields()
    for name, value in values.items():
        if name == "cross_entropy":
            state["est_loss"] = value
        elif name in fields:
            state[extras.widget_key(name)] = list(value) if fields[name].kind == "list" else value
    state["est_cuda_graphs"] = False  # the stack's execution mode says it
    _fit_capabilities(stack, state)


def _fit_capabilities(stack: StackSpec, state: Any) -> None:
    """Move the page's inputs inside what ``stack`` runs: a parallelism it lacks to 1, the
    ZeRO stage to its nearest supported one, recompute to one it offers."""
    cap = stack.capabilities
    for name, allowed in (("tp", cap.tp), ("pp", cap.pp), ("cp", cap.cp), ("ep", cap.ep)):
        if not allowed:
            state[extras.widget_key(name)] = 1
    if not cap.sequence_parallel:
        state[extras.widget_key("sequence_parallel")] = False
    if not cap.tp_comm_overlap:
        state[extras.widget_key("overlap_tp_comm")] = False
    zero_key = extras.widget_key("zero")
    zero = state.get(zero_key, 0)
    if zero not in cap.zero_stages:
        state[zero_key] = min(cap.zero_stages, key=lambda z: (abs(z - zero), -z))
    recompute_key = extras.widget_key("recompute")
    if state.get(recompute_key) not in cap.recompute:
        state[recompute_key] = cap.recompute[-1]


def stack_selector() -> StackSpec | None:
    """The selector (default :data:`planner.stacks.DEFAULT_STACK`) and the chosen stack
    (None for ``none``: the inputs costed as given)."""
    c.init_state({STACK_KEY: DEFAULT_STACK})
    stack_id = st.selectbox(
        "Software stack",
        [*stack_ids(), NO_STACK],
        key=STACK_KEY,
        on_change=_write_stack_inputs,
        help="the framework that runs the layout: choosing one sets its kernels, overlaps and "
        "execution below (docs/stacks.md); a layout it cannot run is refused; none: the "
        "inputs as given, every schedule the planner models (ZB-H1, ZB-H2)",
    )
    if stack_id == NO_STACK:
        st.caption("No stack: the inputs below are costed as given, without a capability check.")
        return None
    stack = load_stack(stack_id)
    st.caption(" ".join(stack.description.split()))
    return stack


def report_caption(report: StepReport) -> None:
    """The stack a report was costed under and its reserved peak (nothing without a stack)."""
    if report.stack:
        st.caption(
            f"Stack {report.stack}: reserved peak {c.fmt_gib(report.peak_reserved_gib or 0.0)} "
            f"(caching allocator, {c.fmt_gib(report.peak_memory_gib)} allocated); its logs "
            f"report the {report.reported_peak} peak."
        )


def _unset_stack_fields(layout: Layout, training: Training) -> tuple[Layout, Training]:
    """``layout`` and ``training`` with the fields a stack decides left unset."""
    lay = type(layout)(**layout.model_dump(exclude=set(STACK_LAYOUT_FIELDS)))
    tr = type(training)(**training.model_dump(exclude=set(STACK_TRAINING_FIELDS)))
    return lay, tr


def comparison_rows(
    model: ModelSpec,
    cluster: Cluster,
    layout: Layout,
    training: Training,
    profile: CalibrationProfile,
) -> list[dict[str, Any]]:
    """One row per shipped stack: the layout under the stack's own kernels, overlaps and
    execution (tokens/s/GPU, MFU %, allocated and reserved GiB, time s per category), or why
    the stack cannot run it."""
    lay, tr = _unset_stack_fields(layout, training)
    rows = []
    for stack_id in stack_ids():
        row: dict[str, Any] = {"stack": stack_id}
        try:
            r = c.simulate(model, cluster, lay, tr, profile, load_stack(stack_id))
        except PlannerError as exc:
            rows.append(row | {"note": c.one_line(exc, markdown=False)})
            continue
        t = r.time_breakdown_s
        rows.append(
            row
            | {
                "tokens/s/GPU": round(r.tokens_per_s_per_gpu),
                "MFU %": round(r.mfu_pct, 1),
                "memory GiB": round(r.peak_memory_gib, 1),
                "reserved GiB": round(r.peak_reserved_gib or 0.0, 1),
                "memory-bound s": round(t.get("compute_memory_bound", 0.0), 3),
                "host s": round(t.get("host_overhead", 0.0), 3),
                "TP comm s": round(t.get("tp_comm", 0.0), 3),
                "note": ("fits" if r.fits else "does not fit")
                + f"; logs report the {r.reported_peak} peak",
            }
        )
    return rows


def compare_section(
    model: ModelSpec,
    cluster: Cluster,
    layout: Layout,
    training: Training,
    profile: CalibrationProfile,
) -> None:
    """The expander that runs the page's layout under every shipped stack."""
    box = st.expander(
        "Compare software stacks", key=COMPARE_OPEN, on_change="rerun", icon=":material/layers:"
    )
    if not box.open:
        return
    with box:
        st.caption(
            "The same model, cluster and layout under each shipped stack, each with its own "
            "kernels, overlaps and execution (the inputs above that a stack decides are "
            "replaced by the stack's)."
        )
        rows = comparison_rows(model, cluster, layout, training, profile)
        ran = [r for r in rows if "tokens/s/GPU" in r]
        if ran:
            st.dataframe(ran, hide_index=True, key="est_stacks_table")
        for r in rows:
            if "tokens/s/GPU" not in r:
                st.caption(f"{r['stack']} cannot run this layout: {r['note']}")
