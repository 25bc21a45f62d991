"""Shared helpers of the web app: cached loaders, uploads, the active profile, formatting.

Every page calls :func:`run_page` with its body, so a bad input (a
:class:`planner.PlannerError`) or an unexpected exception becomes one ``st.error`` line, never a
traceback. Uploads go through :func:`read_upload` (1 MB limit, UTF-8) and are parsed with
``yaml.safe_load`` (through :func:`planner.specs.loading.read_yaml_text`), so YAML tags that
build Python objects are refused.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import streamlit as st
from streamlit.runtime.scriptrunner_utils.exceptions import ScriptControlException

import planner
from planner.errors import PlannerError
from planner.profile import CalibrationProfile
from planner.report import StepReport
from planner.search import SearchResult, SearchSpace, default_space
from planner.specs.hardware import Cluster
from planner.specs.layout import Layout, Training
from planner.specs.loading import (
    CLUSTERS_DIR,
    MODELS_DIR,
    parse_spec,
    read_yaml_text,
    shipped_ids,
)
from planner.specs.model import ModelSpec

REPO_ROOT = Path(__file__).resolve().parents[1]
VALIDATION_FILE = REPO_ROOT.parent / "shared" / "validation" / "public.yaml"
HELDOUT_FILE = REPO_ROOT / "benchmarks" / "heldout" / "bridge_archive_moe.yaml"
MAX_UPLOAD_BYTES = 1_000_000  # "1 MB", as planner.specs.loading.MAX_SPEC_BYTES
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
def one_line(exc: BaseException) -> str:
    """An exception as one line of text (no traceback)."""
    text = " ".join(str(exc).split())
    return text or type(exc).__name__


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
    except Exception as exc:  # never show a traceback
        st.error(f"Unexpected error ({type(exc).__name__}): {one_line(exc)}")


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
        if prof is not None and (everywhere or prof.accelerator == cluster.spec.accelerator):
            return prof
        return shipped_profile(cluster.id)

    return resolve


def profile_for(cluster: Cluster) -> CalibrationProfile:
    """The profile a page uses for ``cluster``: the active one when it was measured on this
    cluster's accelerator (or the user applied it to every accelerator), else the shipped one."""
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
    if active is not None and profile_key(profile) == profile_key(active):
        return f"Calibration profile: **{profile.id}** (uploaded on the Calibration page)."
    text = f"Calibration profile: **{profile.id}** (shipped default of {cluster.spec.name})."
    if active is not None:
        text += (
            f" The active uploaded profile `{active.id}` was measured on "
            f"`{active.accelerator}`, not `{cluster.spec.accelerator}`: not used here."
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
                else f"accelerator `{prof.accelerator}`"
            )
            st.caption(f"Calibration: uploaded profile `{prof.id}`, used for {scope}.")


# ---- simulation (cached on the frozen specs) -----------------------------------------------------
@st.cache_data(show_spinner=False, max_entries=2048)
def _simulate(
    model: ModelSpec,
    cluster: Cluster,
    layout: Layout,
    training: Training,
    prof_key: str,
    _profile: CalibrationProfile,
) -> StepReport:
    """The cached simulation (``prof_key`` stands for the unhashed ``_profile``)."""
    return planner.simulate(model, cluster, layout, training, profile=_profile)


def simulate(
    model: ModelSpec,
    cluster: Cluster,
    layout: Layout,
    training: Training,
    profile: CalibrationProfile,
) -> StepReport:
    """``planner.simulate`` behind ``st.cache_data`` keyed by the frozen specs and the
    profile's fingerprint; raises PlannerError for an illegal layout."""
    return _simulate(model, cluster, layout, training, profile_key(profile), profile)


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


def coarse_space(
    model: ModelSpec, cluster: Cluster, gpus: tuple[int, ...], seq_len: int
) -> SearchSpace:
    """The default space's structure (TP, PP, CP, EP, DP) with fewer knobs: micro-batch 1/2,
    recompute none/selective/full, ZeRO 1, sequence parallelism and TP overlap on, vpp 1/2/4."""
    base = default_space(model, cluster, gpus, seq_len)
    return SearchSpace(
        gpus=gpus,
        cp=base.cp,
        ep=base.ep,
        micro_batch=(1, 2),
        recompute=("none", "selective", "full"),
        zero=(1,),
        sequence_parallel=(True,),
        overlap_tp_comm=(True,),
        vpp=(1, 2, 4),
    )


# ---- uploads ------------------------------------------------------------------------------------
def read_upload(upload: Uploaded, what: str) -> str:
    """The text of an uploaded file: at most 1 MB of UTF-8, else a PlannerError."""
    data = upload.getvalue()
    if len(data) > MAX_UPLOAD_BYTES:
        raise PlannerError(
            what,
            f"{upload.name} is {len(data) / 1e6:.1f} MB, larger than the 1 MB limit",
            "a file under 1 MB",
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise PlannerError(what, f"{upload.name} is not UTF-8 text", "a text file") from None


def parse_yaml(text: str, what: str) -> Any:
    """Safe YAML (``yaml.safe_load``); a tag that would build a Python object is refused with
    a message that says so."""
    try:
        return read_yaml_text(text, what)
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
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise PlannerError(
                "config", f"invalid JSON at line {exc.lineno}: {exc.msg}", "a JSON object"
            ) from None
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
    """A calibration profile from JSON text, checked as ``planner.load_profile`` checks a file
    (JSON syntax, ``schema_version``, the pydantic schema)."""
    return planner.profile.parse_profile_text(text)


# ---- formatting ---------------------------------------------------------------------------------
def _si(value: float, units: Sequence[tuple[float, str]], digits: int = 3) -> str:
    """``value`` scaled by the first (scale, suffix) it reaches."""
    for scale, suffix in units:
        if abs(value) >= scale:
            return f"{_sig(value / scale, digits)} {suffix}".rstrip()
    scale, suffix = units[-1]
    return f"{_sig(value / scale, digits)} {suffix}".rstrip()


def _sig(x: float, digits: int = 3) -> str:
    """``x`` with ``digits`` significant figures, thousands separated, no exponent."""
    if x == 0 or not math.isfinite(x):
        return f"{x:g}"
    decimals = max(0, digits - 1 - int(math.floor(math.log10(abs(x)))))
    return f"{x:,.{decimals}f}"


def fmt_tokens_per_s(value: float) -> str:
    """Tokens per second with an SI prefix: '166 k tokens/s', '1.45 M tokens/s'."""
    return _si(
        value, ((1e9, "G tokens/s"), (1e6, "M tokens/s"), (1e3, "k tokens/s"), (1, "tokens/s"))
    )


def fmt_count(value: float, unit: str = "") -> str:
    """A count with an SI prefix: '15 T tokens', '1.2 M'."""
    units = ((1e12, f"T {unit}"), (1e9, f"G {unit}"), (1e6, f"M {unit}"), (1e3, f"k {unit}"))
    return _si(value, (*units, (1, unit)))


def fmt_seconds(seconds: float) -> str:
    """A duration in the unit that reads best: ms, s, min, h or days."""
    if seconds < 1:
        return f"{_sig(seconds * 1e3)} ms"
    if seconds < 120:
        return f"{_sig(seconds)} s"
    if seconds < 7200:
        return f"{_sig(seconds / 60)} min"
    if seconds < 3 * 86400:
        return f"{_sig(seconds / 3600)} h"
    return f"{_sig(seconds / 86400)} days"


def fmt_pct(value: float, digits: int = 1) -> str:
    """A percentage: '54.3 %'."""
    return f"{value:.{digits}f} %"


def fmt_gib(value: float) -> str:
    """Memory in GiB: '45.5 GiB'."""
    return f"{value:,.1f} GiB"


def fmt_usd(value: float) -> str:
    """Dollars with an SI prefix: '$12.3 M', '$950'."""
    if abs(value) >= 1e9:
        return f"${_sig(value / 1e9)} B"
    if abs(value) >= 1e6:
        return f"${_sig(value / 1e6)} M"
    if abs(value) >= 1e3:
        return f"${_sig(value / 1e3)} k"
    return f"${value:,.2f}"


def fmt_energy_kwh(kwh: float) -> str:
    """Energy: kWh, MWh or GWh."""
    if kwh >= 1e6:
        return f"{_sig(kwh / 1e6)} GWh"
    if kwh >= 1e3:
        return f"{_sig(kwh / 1e3)} MWh"
    return f"{_sig(kwh)} kWh"


def layout_text(layout: Layout, training: Training) -> str:
    """A compact layout: 'TP2 PP1 DP4 CP1 EP1 VPP1 mb1 rc:none Z1 SP+ ov:dp+tp'."""
    from planner.render import compact_layout

    return compact_layout(layout, training)


__all__ = [
    "ACTIVE_PROFILE",
    "DEFAULT_CLUSTER",
    "DEFAULT_MODEL",
    "LAST_CLUSTER",
    "MAX_UPLOAD_BYTES",
    "PROFILE_ALL",
    "SearchRun",
    "UPLOADED_MODEL",
    "VALIDATION_FILE",
    "HELDOUT_FILE",
    "active_profile",
    "cluster_ids",
    "coarse_space",
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
    "profile_resolver",
    "profile_state",
    "read_upload",
    "run_page",
    "shipped_profile",
    "sidebar_status",
    "simulate",
]
