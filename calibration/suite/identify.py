"""Which shipped accelerator a measured GPU is, from its torch device name and memory.

A profile's ``accelerator`` must name the cluster's accelerator for the planner to use it
(:func:`planner.profile.check_profile_device`), so ``planner calibrate --device cuda`` names
the shipped spec (a file stem of ``hardware_specs/accelerators/``) when the device is one:

* the spec's model token (the first part of its id: ``h100``, ``gb200``, ``mi300x``) is a
  whole word of the device name (``NVIDIA H100 80GB HBM3``; ``GB200`` is not ``B200``);
* the name is not of a form factor the shipped specs are not: ``PCIe``, ``NVL`` (PCIe boards
  with other clocks and power) or a ``MIG`` slice;
* the memory torch reports is within 8% of the spec's ``hbm_capacity_gib``, the closest one
  winning (it tells H100 80 GB from 96 GB, A100 40 GB from 80 GB). Without a memory figure the
  token alone decides when exactly one spec has it.

Anything else (a consumer card, a PCIe board, an unknown part) is None: the profile then keeps
the raw device name. Importing this module does not import torch.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import planner
from planner.specs.loading import ACCELERATORS_DIR, shipped_ids

MEMORY_TOLERANCE = 0.08
"""Relative gap allowed between the memory torch reports and the datasheet capacity (torch's
``total_memory`` is a little under nvidia-smi's ``memory.total``)."""

OTHER_FORM_FACTORS = frozenset({"PCIE", "NVL", "MIG"})


def _words(text: str) -> list[str]:
    return re.findall(r"[A-Z0-9]+", text.upper())


def _model_token(accelerator_id: str) -> str:
    """``h100-sxm5-80gb`` -> ``H100``, ``mi300x`` -> ``MI300X``."""
    return accelerator_id.split("-")[0].upper()


def shipped_capacities() -> dict[str, float]:
    """HBM capacity (GiB) of every shipped accelerator, by id."""
    return {
        acc_id: planner.load_accelerator(acc_id).hbm_capacity_gib
        for acc_id in shipped_ids(ACCELERATORS_DIR)
    }


def identify_accelerator(
    device_name: str,
    memory_gib: float | None,
    capacities: Mapping[str, float] | None = None,
) -> str | None:
    """The shipped accelerator id of a torch device (``torch.cuda.get_device_name``, and its
    ``total_memory`` in GiB), or None when it is none of them.

    >>> identify_accelerator("NVIDIA H200", 139.8)
    'h200-sxm-141gb'
    >>> identify_accelerator("NVIDIA H100 PCIe", 79.2) is None
    True
    """
    specs = shipped_capacities() if capacities is None else capacities
    words = set(_words(device_name))
    if words & OTHER_FORM_FACTORS:
        return None
    candidates = {acc_id: gib for acc_id, gib in specs.items() if _model_token(acc_id) in words}
    if memory_gib is None:
        return next(iter(candidates)) if len(candidates) == 1 else None
    gaps = {
        acc_id: abs(memory_gib - gib) / gib
        for acc_id, gib in candidates.items()
        if abs(memory_gib - gib) <= MEMORY_TOLERANCE * gib
    }
    return min(gaps, key=gaps.__getitem__) if gaps else None
