"""Shared helpers of the web app: cached loaders, uploads, the active profile, formatting.

Every page calls :func:`run_page` with its body, so a bad input (a
:class:`planner.PlannerError`) or an unexpected exception becomes one ``st.error`` line, never a
traceback. Uploads go through :func:`read_upload` (size checked before decoding, strict UTF-8)
and are parsed with :mod:`planner.safe_io` (safe YAML tags, bounded nesting and alias
expansion; strict JSON), so no upload can build Python objects, expand a "billion laughs" or
recurse without end. Long work runs under a :class:`Deadline`, and report figures that are not
finite are an error line (:func:`check_report`), never a NaN on the page.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import streamlit as st
from streamlit.runtime.scriptrunner_utils.exceptions import ScriptControlException

import planner
from app_pages.fmt import (
    fmt_count,
    fmt_energy_kwh,
    fmt_gib,
    fmt_pct,
    fmt_seconds,
    fmt_tokens_per_s,
    fmt_usd,
    layout_text,
    md_escape,
)
from planner.errors import PlannerError
from planner.profile import CalibrationProfile, check_profile_device
from planner.report import StepReport
from planner.resources import shipped_cases
from planner.safe_io import MAX_CASES_BYTES, MAX_SPEC_NODES, decode_text, load_json, load_yaml
from planner.search import SearchResult
from planner.specs.hardware import Cluster
from planner.specs.layout import Layout, Training
from planner.specs.loading import (
    CLUSTERS_DIR,
    MODELS_DIR,
    parse_spec,
    shipped_ids,
)
from planner.specs.model import ModelSpec
from planner.specs.stack import StackSpec

REPO_ROOT = Path(__file__).resolve().parents[1]
VALIDATION_FILE = shipped_cases()["public"]  # calibration/validation/, in the wheel too
HELDOUT_FILE = shipped_cases()["heldout_moe"]
MAX_UPLOAD_BYTES = 1_000_000  # "1 MB", as planner.safe_io.MAX_SPEC_BYTES
MAX_CASES_UPLOAD_BYTES = min(MAX_CASES_BYTES, 5_000_000)  # a validation upload
SEARCH_BUDGET_S = 20.0  # one search on the Search page, one generation on the Compare page
CASES_BUDGET_S = 60.0  # simulating an uploaded validation file
DEFAULT_MODEL = "llama3.1-8b"
DEFAULT_CLUSTER = "dgx-h100"

# session_state keys shared by the pages
ACTIVE_PROFILE = "active_profile"  # CalibrationProfile | None (None: each cluster's shipped one)
PROFILE_ALL = "active_profile_all_accelerators"  # bool: use it on every accelerator
UPLOADED_MODEL = "uploaded_model"  # ModelSpec from the Estimate page's upload, or None
LAST_CLUSTER = "last_cluster"  # the cluster id chosen last on any page


class Uploaded(Protocol):
    """What the app reads of a Streamlit ``UploadedFile``."""

    name: str

    def getvalue(self) -> bytes: ...


# ---- page wrapper -------------------------------------------------------------------------------
def one_line(exc: BaseException, markdown: bool = True) -> str:
    """An exception as one line of text (no traceback); ``markdown``: escaped for st.error /
    st.caption, which render Markdown (False for table cells, shown as plain text)."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return md_escape(text) if markdown else text


def run_page(body: Callable[[], None]) -> None:
    """Run a page body; a PlannerError or any other exception becomes one ``st.error`` line.

    Streamlit's own control-flow exceptions (``st.stop``, ``st.rerun``, ``st.switch_page``)
    pass through.
    """
    try:
        body()
    except ScriptControlException:
        raise
    except PlannerError as exc:
        st.error(one_line(exc))
    except (MemoryError, RecursionError) as exc:
        st.error(
            f"input: too large or too deeply nested to process ({type(exc).__name__}) "
            "(valid: smaller specs and files)"
        )
    except Exception as exc:  # never show a traceback
        st.error(f"Unexpected error ({type(exc).__name__}): {one_line(exc)}")


class Deadline:
    """A time budget for work done in steps (cases, searches): :meth:`check` between steps
    raises a one-line PlannerError naming ``field`` once ``seconds`` have passed."""

    def __init__(self, field: str, seconds: float, what: str) -> None:
        self.field, self.seconds, self.what = field, seconds, what
        self.start = time.perf_counter()

    def check(self, done: str = "") -> None:
        """Raise when the budget is spent (``done`` says how far the work got)."""
        if time.perf_counter() - self.start > self.seconds:
            raise PlannerError(
                self.field,
                f"{self.what} took longer than the app's {self.seconds:g} s budget"
                + (f" ({done})" if done else ""),
                "a smaller job, or the command line (planner) for long runs",
            )


def init_state(defaults: dict[str, Any]) -> None:
    """Give widget keys their first value through session_state (widgets then take no
    ``value=``/``index=``, so a test or another page can preset them without a warning)."""
    for key, value in defaults.items():
        if key not in st.session_state:
            st.session_state[key] = value


# ---- shipped specs (cached) ---------------------------------------------------------------------
@st.cache_data(show_spinner=False)
def model_ids() -> list[str]:
    """Ids of the shipped model specs (``models/*.yaml``)."""
    return shipped_ids(MODELS_DIR)


@st.cache_data(show_spinner=False)
def cluster_ids() -> list[str]:
    """Ids of the shipped cluster presets (``hardware_specs/clusters/*.yaml``)."""
    return shipped_ids(CLUSTERS_DIR)


@st.cache_resource(show_spinner=False)
def load_model(model_id: str) -> ModelSpec:
    """A shipped model spec (frozen, shared between sessions)."""
    return planner.load_model(model_id)


@st.cache_resource(show_spinner=False)
def load_cluster(cluster_id: str) -> Cluster:
    """A shipped cluster with its accelerator (frozen, shared between sessions)."""
    return planner.load_cluster(cluster_id)


@st.cache_resource(show_spinner=False)
def shipped_profile(cluster_id: str) -> CalibrationProfile:
    """The shipped calibration profile of a cluster (its own, else its accelerator's)."""
    return planner.default_profile(load_cluster(cluster_id))


def index_of(options: Sequence[str], value: str, fallback: int = 0) -> int:
    """Position of ``value`` in ``options``, else ``fallback``."""
    return list(options).index(value) if value in options else fallback


# ---- the active calibration profile -------------------------------------------------------------
def active_profile() -> CalibrationProfile | None:
    """The profile chosen on the Calibration page, or None (shipped profiles)."""
    prof = st.session_state.get(ACTIVE_PROFILE)
    return prof if isinstance(prof, CalibrationProfile) else None


def profile_resolver() -> Callable[[Cluster], CalibrationProfile]:
    """``cluster -> profile`` as the pages use it (see :func:`profile_for`), bound to the
    current session's choice, so it can run inside a cached function."""
    prof = active_profile()
    everywhere = bool(st.session_state.get(PROFILE_ALL, False))

    def resolve(cluster: Cluster) -> CalibrationProfile:
        if prof is not None:
            try:
                check_profile_device(prof, cluster, any_device=everywhere)
                return prof
            except PlannerError:
                pass  # measured on another accelerator: the cluster's shipped profile
        return shipped_profile(cluster.id)

    return resolve


def profile_for(cluster: Cluster) -> CalibrationProfile:
    """The profile a page uses for ``cluster``: the active one when it was measured on this
    cluster's accelerator (:func:`planner.profile.check_profile_device`) or the user applied it
    to other accelerators, else the shipped one."""
    return profile_resolver()(cluster)


def profile_state() -> str:
    """A cache key for the session's profile choice."""
    prof = active_profile()
    if prof is None:
        return "shipped"
    return f"{profile_key(prof)}:{bool(st.session_state.get(PROFILE_ALL, False))}"


def profile_key(profile: CalibrationProfile) -> str:
    """A short fingerprint of a profile (cache key)."""
    digest = hashlib.sha256(profile.model_dump_json().encode()).hexdigest()[:16]
    return f"{profile.id}:{digest}"


def profile_caption(cluster: Cluster, profile: CalibrationProfile) -> str:
    """One line saying which calibration profile a result used, and why."""
    active = active_profile()
    name = f"**{profile.id}** (measured on `{profile.accelerator}`)"
    if active is not None and profile_key(profile) == profile_key(active):
        return f"Calibration profile: {name}, uploaded on the Calibration page."
    text = f"Calibration profile: {name}, the shipped default of {cluster.spec.name}."
    if active is not None:
        text += (
            f" The active uploaded profile `{active.id}` was measured on "
            f"`{active.accelerator}`, not `{cluster.spec.accelerator}`: not used here (tick "
            "'use this profile on another accelerator' on the Calibration page to use it)."
        )
    return text


def sidebar_status() -> None:
    """The active profile, in the sidebar of every page."""
    prof = active_profile()
    with st.sidebar:
        if prof is None:
            st.caption("Calibration: shipped profiles (one per accelerator).")
        else:
            scope = (
                "every accelerator"
                if st.session_state.get(PROFILE_ALL, False)
                else f"accelerator `{prof.accelerator}` only"
            )
            st.caption(
                f"Calibration: uploaded profile `{prof.id}` (measured on `{prof.accelerator}`), "
                f"used for {scope}."
            )


# ---- simulation (cached on the frozen specs) -----------------------------------------------------
@st.cache_data(show_spinner=False, max_entries=2048)
def _simulate(
    model: ModelSpec,
    cluster: Cluster,
    layout: Layout,
    training: Training,
    prof_key: str,
    _profile: CalibrationProfile,
    stack: StackSpec | None = None,
) -> StepReport:
    """The cached simulation (``prof_key`` stands for the unhashed ``_profile``)."""
    # the page chose the profile through active_profile / use_profile, which apply
    # check_profile_device and the user's "another accelerator" choice
    kwargs = {"profile": _profile, "profile_for_any_device": True, "stack": stack}
    return planner.simulate(model, cluster, layout, training, **kwargs)


def simulate(
    model: ModelSpec,
    cluster: Cluster,
    layout: Layout,
    training: Training,
    profile: CalibrationProfile,
    stack: StackSpec | None = None,
) -> StepReport:
    """``planner.simulate`` behind ``st.cache_data`` keyed by the frozen specs and the
    profile's fingerprint (under ``stack`` when given); raises PlannerError for an illegal
    layout or a report whose figures are not finite (:func:`check_report`)."""
    key = profile_key(profile)
    return check_report(_simulate(model, cluster, layout, training, key, profile, stack))


_HEADLINE = (
    "tokens_per_s",
    "tokens_per_s_per_gpu",
    "mfu_pct",
    "hfu_pct",
    "step_time_s",
    "peak_memory_gib",
    "usable_memory_gib",
    "memory_headroom_gib",
)


def check_report(report: StepReport) -> StepReport:
    """``report`` when its figures are finite and physical (positive step time and throughput,
    MFU within 0..100 %), else a one-line PlannerError naming the first bad figure: the app
    shows an error, never NaN, inf or an MFU above 100 %."""
    figures = {name: getattr(report, name) for name in _HEADLINE}
    figures.update({f"time_breakdown_s.{k}": v for k, v in report.time_breakdown_s.items()})
    for name, value in figures.items():
        if not isinstance(value, int | float) or not math.isfinite(value):
            raise PlannerError(
                f"report.{name}",
                f"the simulation gave a non-finite value ({value}); check the calibration "
                "profile and the specs",
                "finite figures",
            )
    for name in ("tokens_per_s", "step_time_s"):
        if figures[name] <= 0:
            raise PlannerError(f"report.{name}", f"{figures[name]:g} is not positive", "> 0")
    if not 0.0 <= report.mfu_pct <= 100.0:
        raise PlannerError(
            "report.mfu_pct",
            f"MFU {report.mfu_pct:.1f} % is not physical; check the calibration profile's "
            "efficiencies",
            "0 to 100 %",
        )
    return report


# ---- search -------------------------------------------------------------------------------------
@dataclass
class SearchRun:
    """A finished search and what it was asked (kept in session_state across reruns; defined
    here, in an imported module, because page scripts are re-executed on every rerun)."""

    model: ModelSpec
    cluster: Cluster
    objective: str
    result: SearchResult
    profile_id: str
    profile_accelerator: str = ""
    stack: StackSpec | None = None  # the stack searched under (its exports' dialects)


# ---- uploads ------------------------------------------------------------------------------------
def read_upload(upload: Uploaded, what: str, max_bytes: int = MAX_UPLOAD_BYTES) -> str:
    """The text of an uploaded file: its size is checked before it is decoded as strict UTF-8;
    either failure is a one-line PlannerError."""
    data = upload.getvalue()
    if len(data) > max_bytes:
        limit = f"{max_bytes / 1e6:g} MB"
        raise PlannerError(
            what,
            f"{upload.name} is {len(data) / 1e6:.1f} MB, larger than the {limit} limit",
            f"a file under {limit}",
        )
    return decode_text(data, what)


def parse_yaml(
    text: str, what: str, max_bytes: int = MAX_UPLOAD_BYTES, max_nodes: int = MAX_SPEC_NODES
) -> Any:
    """Untrusted YAML through :func:`planner.safe_io.load_yaml` (safe tags, bounded size,
    nesting and alias expansion); a tag that would build a Python object is refused with a
    message that says so."""
    try:
        return load_yaml(text, what, max_bytes, max_nodes)
    except PlannerError as exc:
        if "constructor for the tag" in exc.message:
            raise PlannerError(
                what,
                "YAML object tags (such as !!python/object) are not allowed",
                "plain YAML: mappings, lists, strings and numbers",
            ) from None
        raise


def _hf_import() -> Any:
    """``planner.hf_import`` when this build has it, else None."""
    try:
        from planner import hf_import
    except ImportError:
        return None
    return hf_import if hasattr(hf_import, "spec_from_hf_config") else None


def hf_available() -> bool:
    """Whether HuggingFace ``config.json`` import is available."""
    return _hf_import() is not None


@st.cache_data(show_spinner=False, max_entries=64)
def parse_model_upload(
    text: str, hf: bool = False, name: str | None = None
) -> tuple[ModelSpec, list[str]]:
    """A ModelSpec from an uploaded model YAML, or (``hf``) a HuggingFace ``config.json`` named
    ``name`` (None: from the config), and notes on the import. Raises PlannerError naming the
    bad field."""
    if hf:
        data = load_json(text, "config", MAX_UPLOAD_BYTES)
        if not isinstance(data, dict):
            raise PlannerError(
                "config", f"expected a JSON object, got {type(data).__name__}", "a JSON object"
            )
        hf = _hf_import()
        if hf is None:
            raise PlannerError(
                "config",
                "HuggingFace config.json import is not available in this build",
                "a planner model YAML",
            )
        spec, notes = hf.spec_from_hf_config(data, name=name)
        return spec, list(notes)
    return parse_spec(parse_yaml(text, "model"), ModelSpec, "model"), []


def parse_profile_text(text: str) -> CalibrationProfile:
    """A calibration profile from JSON text: strict JSON first (:func:`planner.safe_io.load_json`:
    bounded size and depth, no NaN/Infinity), then checked as ``planner.load_profile`` checks a
    file (``schema_version``, the pydantic schema)."""
    load_json(text, "profile", MAX_UPLOAD_BYTES)
    return planner.profile.parse_profile_text(text)


def use_profile(
    profile: CalibrationProfile, cluster: Cluster, any_device: bool = False
) -> CalibrationProfile:
    """``profile`` for ``cluster`` after :func:`planner.profile.check_profile_device`: a profile
    measured on another accelerator is a PlannerError unless ``any_device``."""
    check_profile_device(profile, cluster, any_device=any_device)
    return profile


def profile_label(profile: CalibrationProfile) -> str:
    """'h100-sxm5-80gb (measured on h100-sxm5-80gb)': a profile and its accelerator."""
    return f"{profile.id} (measured on {profile.accelerator})"


__all__ = [
    "ACTIVE_PROFILE",
    "DEFAULT_CLUSTER",
    "DEFAULT_MODEL",
    "LAST_CLUSTER",
    "CASES_BUDGET_S",
    "Deadline",
    "MAX_CASES_UPLOAD_BYTES",
    "MAX_UPLOAD_BYTES",
    "SEARCH_BUDGET_S",
    "PROFILE_ALL",
    "SearchRun",
    "UPLOADED_MODEL",
    "VALIDATION_FILE",
    "HELDOUT_FILE",
    "active_profile",
    "check_report",
    "cluster_ids",
    "fmt_count",
    "fmt_energy_kwh",
    "fmt_gib",
    "fmt_pct",
    "fmt_seconds",
    "fmt_tokens_per_s",
    "fmt_usd",
    "hf_available",
    "index_of",
    "init_state",
    "layout_text",
    "load_cluster",
    "load_model",
    "model_ids",
    "one_line",
    "parse_model_upload",
    "parse_profile_text",
    "parse_yaml",
    "profile_caption",
    "profile_for",
    "profile_key",
    "profile_label",
    "profile_resolver",
    "profile_state",
    "read_upload",
    "run_page",
    "shipped_profile",
    "sidebar_status",
    "simulate",
    "use_profile",
]
