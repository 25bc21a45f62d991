"""Load specs from YAML: a shipped id (file stem) or a path. Every failure is a PlannerError."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from planner.errors import PlannerError, pydantic_error_to_planner
from planner.resources import ACCELERATORS_DIR, CLUSTERS_DIR, MODELS_DIR, STACKS_DIR, data_root
from planner.safe_io import MAX_SPEC_BYTES, MAX_SPEC_NODES, load_yaml, read_text
from planner.specs.hardware import AcceleratorSpec, Cluster, ClusterSpec
from planner.specs.model import ModelSpec
from planner.specs.stack import StackSpec

REPO_ROOT = data_root()  # the checkout, or planner/_data in an installed wheel

T = TypeVar("T", bound=BaseModel)


def shipped_ids(directory: Path) -> list[str]:
    """Ids (file stems) of the YAML specs shipped in ``directory``."""
    return sorted(p.stem for p in directory.glob("*.yaml"))


def read_yaml_text(
    text: str, what: str, max_bytes: int = MAX_SPEC_BYTES, max_nodes: int = MAX_SPEC_NODES
) -> Any:
    """Parse YAML safely (no object tags, bounded size, node count, depth and alias
    expansion); a syntax error names the line."""
    return load_yaml(text, what, max_bytes, max_nodes)


def read_yaml_file(
    path: str | Path, what: str, max_bytes: int = MAX_SPEC_BYTES, max_nodes: int = MAX_SPEC_NODES
) -> Any:
    """A YAML file read with its size checked first and strict UTF-8 (planner.safe_io)."""
    return load_yaml(read_text(path, what, max_bytes), what, max_bytes, max_nodes)


def parse_spec(data: Any, cls: type[T], what: str) -> T:
    """Validate a parsed YAML mapping as ``cls``; errors name the field path."""
    if not isinstance(data, dict):
        raise PlannerError(
            what,
            f"expected a mapping of fields, got {type(data).__name__}",
            ", ".join(cls.model_fields),
        )
    try:
        return cls.model_validate(data)
    except ValidationError as exc:
        raise pydantic_error_to_planner(exc, what) from None


def _resolve(id_or_path: str | Path, directory: Path, kind: str) -> Path:
    path = Path(id_or_path)
    if path.suffix in (".yaml", ".yml") or path.exists():
        if not path.is_file():
            raise PlannerError(kind, f"file not found: {path}")
        return path
    candidate = directory / f"{id_or_path}.yaml"
    if candidate.is_file():
        return candidate
    raise PlannerError(
        kind,
        f"unknown {kind} '{id_or_path}'",
        ", ".join(shipped_ids(directory)) + ", or a path to a YAML file",
    )


def _load(id_or_path: str | Path, directory: Path, cls: type[T], kind: str) -> T:
    path = _resolve(id_or_path, directory, kind)
    data = read_yaml_file(path, kind)
    return parse_spec(data, cls, kind)


HF_CONFIG_KEYS = ("model_type", "architectures")


def load_model(id_or_path: str | Path) -> ModelSpec:
    """A model spec from a shipped id (``models/<id>.yaml``), a model YAML path, or a
    HuggingFace ``config.json`` (recognised by its ``model_type`` / ``architectures`` keys and
    imported on the fly by :mod:`planner.hf_import`, as ``planner import-hf`` would)."""
    path = _resolve(id_or_path, MODELS_DIR, "model")
    if path.suffix == ".json":
        from planner.hf_import import load_hf_config, spec_from_hf_config

        config = load_hf_config(path)
        if not any(k in config for k in HF_CONFIG_KEYS):
            raise PlannerError(
                "model",
                f"{path.name} is JSON but not a HuggingFace config (no model_type)",
                "a shipped model id, a model YAML, or a HuggingFace config.json",
            )
        name = path.stem.lower() if path.stem != "config" else None
        try:
            return spec_from_hf_config(config, name=name)[0]
        except PlannerError as exc:
            raise PlannerError(f"{path.name}: {exc.field}", exc.message, exc.valid) from None
    return parse_spec(read_yaml_file(path, "model"), ModelSpec, "model")


def load_stack(id_or_path: str | Path) -> StackSpec:
    """A software stack from a shipped id (``stacks/<id>.yaml``) or a YAML path."""
    return _load(id_or_path, STACKS_DIR, StackSpec, "stack")


def load_accelerator(id_or_path: str | Path) -> AcceleratorSpec:
    """An accelerator spec from ``hardware_specs/accelerators/<id>.yaml`` or a path."""
    return _load(id_or_path, ACCELERATORS_DIR, AcceleratorSpec, "accelerator")


def load_cluster(id_or_path: str | Path) -> Cluster:
    """A cluster from ``hardware_specs/clusters/<id>.yaml`` or a path, its accelerator resolved."""
    path = _resolve(id_or_path, CLUSTERS_DIR, "cluster")
    spec = parse_spec(read_yaml_file(path, "cluster"), ClusterSpec, "cluster")
    acc_path = Path(spec.accelerator)
    if not acc_path.is_absolute() and not (ACCELERATORS_DIR / f"{spec.accelerator}.yaml").exists():
        acc_path = path.parent / spec.accelerator
    accel = load_accelerator(acc_path if acc_path.exists() else spec.accelerator)
    return Cluster(id=path.stem, spec=spec, accelerator=accel)
