"""scaling-planner: predict step time, tokens/s, MFU and memory of LLM training layouts.

>>> import planner
>>> model = planner.load_model("llama3.1-8b")
>>> cluster = planner.load_cluster("dgx-h100")
>>> layout = planner.Layout(tp=1, pp=1, dp=8)
>>> training = planner.Training(seq_len=8192, global_batch=64, micro_batch=1)
>>> report = planner.simulate(model, cluster, layout, training)
>>> report.tokens_per_s_per_gpu > 0
True

The public API is re-exported here: the specs and their loaders, ``simulate``, ``check_layout``,
``search`` and ``legal_layouts``. The levers and goodput live in ``planner.advise`` and
``planner.goodput`` (a function of the same name here would hide the module); the command line
in ``planner.cli``.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from planner.errors import PlannerError
from planner.legality import check_layout
from planner.profile import CalibrationProfile, check_profile_device, load_profile
from planner.report import MFU_CONVENTION, StepReport
from planner.simulate import simulate_step
from planner.specs import (
    AcceleratorSpec,
    Cluster,
    ClusterSpec,
    Layout,
    ModelSpec,
    Training,
    load_accelerator,
    load_cluster,
    load_model,
    load_stack,
)
from planner.specs.stack import StackSpec

__version__ = "0.1.0"


@lru_cache(maxsize=64)
def _cached_profile(id_or_path: str) -> CalibrationProfile:
    return load_profile(id_or_path)


def default_profile(cluster: Cluster) -> CalibrationProfile:
    """The cluster's named profile, else its accelerator's default (public-figure) profile."""
    return _cached_profile(cluster.spec.profile or cluster.accelerator.profile)


def simulate(
    model: ModelSpec,
    cluster: Cluster,
    layout: Layout,
    training: Training,
    profile: CalibrationProfile | str | Path | None = None,
    profile_for_any_device: bool = False,
    stack: StackSpec | str | Path | None = None,
) -> StepReport:
    """Predict one training step; ``profile`` defaults to the cluster's calibration profile.

    A ``profile`` measured on another accelerator than the cluster's is a PlannerError unless
    ``profile_for_any_device`` is True (a CPU profile on an H100 cluster is 100x off).
    ``stack``: a software stack (a StackSpec, a shipped id such as ``"torchtitan-compiled"``,
    or a YAML path) whose defaults fill the fields ``layout`` and ``training`` leave unset and
    whose capabilities the layout must respect (None: the inputs as given).
    """
    if profile is None:
        prof = default_profile(cluster)
    elif isinstance(profile, CalibrationProfile):
        prof = profile
    else:
        prof = _cached_profile(str(profile))
    if profile is not None:
        check_profile_device(prof, cluster, profile_for_any_device)
    spec = stack if isinstance(stack, StackSpec) or stack is None else load_stack(stack)
    return simulate_step(model, cluster, layout, training, prof, stack=spec)


# ``planner.search`` is the search subpackage, callable as ``planner.search(...)``
from planner.search import SearchResult, legal_layouts  # noqa: E402

__all__ = [
    "MFU_CONVENTION",
    "AcceleratorSpec",
    "CalibrationProfile",
    "Cluster",
    "ClusterSpec",
    "Layout",
    "ModelSpec",
    "PlannerError",
    "SearchResult",
    "StepReport",
    "Training",
    "check_layout",
    "default_profile",
    "legal_layouts",
    "load_accelerator",
    "load_cluster",
    "load_model",
    "load_stack",
    "StackSpec",
    "load_profile",
    "search",
    "simulate",
]
