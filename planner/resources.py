"""Where the shipped data lives, in a checkout and in an installed wheel.

The repository's top-level folders are the source of truth (``models/``, ``hardware_specs/``,
``calibration/profiles/``, ``calibration/validation/``, ``app.py`` with ``app_pages/``). A built
wheel carries copies of ``models/``, ``hardware_specs/``, ``stacks/`` and the web app under
``planner/_data/`` (pyproject.toml ``force-include``) and the ``calibration`` package with its
profiles and cases. Everything is found through :mod:`importlib.resources`, so an installed
planner works from any directory, without the checkout and without ``../shared``.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path


def _as_path(traversable: object) -> Path:
    # pip installs wheels unpacked, so package resources are real directories
    return Path(str(traversable))


_PLANNER = _as_path(resources.files("planner"))
_PACKAGED = _PLANNER / "_data"
_CHECKOUT = _PLANNER.parent


def data_root() -> Path:
    """``planner/_data`` of an installed wheel, else the repository root of a checkout."""
    return _PACKAGED if _PACKAGED.is_dir() else _CHECKOUT


def calibration_dir() -> Path:
    """The ``calibration`` package (profiles, validation cases, global parameters)."""
    return _as_path(resources.files("calibration"))


MODELS_DIR = data_root() / "models"
ACCELERATORS_DIR = data_root() / "hardware_specs" / "accelerators"
CLUSTERS_DIR = data_root() / "hardware_specs" / "clusters"
STACKS_DIR = data_root() / "stacks"
PROFILES_DIR = calibration_dir() / "profiles"
MEASURED_PROFILES_DIR = calibration_dir() / "measured"  # profiles planner calibrate measured
CASES_DIR = calibration_dir() / "validation"
APP_DIR = data_root() / "app" if _PACKAGED.is_dir() else _CHECKOUT


def shipped_cases() -> dict[str, Path]:
    """Shipped validation case files by id (``public``: the published runs the global fit
    reads; ``heldout_moe``: Megatron-Bridge MoE rows no fit reads)."""
    return {p.stem: p for p in sorted(CASES_DIR.glob("*.yaml"))}


def cases_path(id_or_path: str | Path) -> Path:
    """A shipped case file id (``public``) or a path, as given."""
    return shipped_cases().get(str(id_or_path), Path(id_or_path))
