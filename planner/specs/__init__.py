"""Declarative inputs: model, hardware, layout, training (pydantic v2, frozen, extra forbidden)."""

from planner.specs.hardware import AcceleratorSpec, Cluster, ClusterSpec, PeakTflops
from planner.specs.layout import Layout, Training
from planner.specs.loading import load_accelerator, load_cluster, load_model, load_stack
from planner.specs.model import MLASpec, ModelSpec, MoESpec

__all__ = [
    "AcceleratorSpec",
    "Cluster",
    "ClusterSpec",
    "Layout",
    "MLASpec",
    "ModelSpec",
    "MoESpec",
    "PeakTflops",
    "Training",
    "load_accelerator",
    "load_cluster",
    "load_model",
    "load_stack",
]
