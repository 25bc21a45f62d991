"""The encoded space of the Optuna search: legal structures as log2 vectors, and the repair.

Each trial suggests the structure in an encoded numeric space (log2 of tp, cp, pp, vpp, ep,
micro-batch and GPU count; integer exponents where every legal value is a power of two, else a
float log2) plus the knobs as categoricals (and the pipeline schedule, a categorical over the
``Structure.schedule`` values of the legal structures, when there are several);
:meth:`Encoding.repair` maps the point to the nearest legal structure (weighted L1 distance in
the encoded space, plus SCHEDULE_WEIGHT when the schedule differs). planner/search/optuna_search.py
runs the study.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from optuna.trial import Trial

from planner.errors import PlannerError
from planner.search.budget import NO_DEADLINE, Deadline
from planner.search.space import Knobs, SearchSpace, Structure, structures
from planner.specs.hardware import Cluster
from planner.specs.layout import Training
from planner.specs.model import ModelSpec

# the encoded matrix holds every legal structure (~200 bytes each with its row): a bound on memory
MAX_STRUCTURES = 2_000_000
# structural axes in the order of the encoded vector; weights of the repair distance (a change of
# GPU count changes the problem most, a change of micro-batch or interleaving the least)
AXES = ("tp", "cp", "pp", "vpp", "ep", "micro_batch", "gpus")
AXIS_WEIGHTS = {
    "tp": 2.0,
    "cp": 2.0,
    "pp": 2.0,
    "vpp": 1.0,
    "ep": 2.0,
    "micro_batch": 1.0,
    "gpus": 4.0,
}
SCHEDULE_WEIGHT = 1.0  # repair distance of another schedule: as one step of vpp or micro-batch
SCHEDULE_PARAM = "schedule"
KNOB_AXES = (
    "recompute",
    "zero",
    "sequence_parallel",
    "overlap_tp_comm",
    "overlap_dp_grad_reduce",
    "overlap_ep_comm",
)


# ---- encoding and repair ----------------------------------------------------------------------


@dataclass(frozen=True)
class _Dim:
    """One suggested structural axis: param ``log2_<axis>`` in [low, high] (log2 units)."""

    axis: str
    low: float
    high: float
    integer: bool

    @property
    def param(self) -> str:
        return f"log2_{self.axis}"


class Encoding:
    """The legal structures of one problem, their encoded matrix, and the trial parameters.

    Row i of ``matrix`` is log2 of (tp, cp, pp, vpp, ep, micro_batch, gpus) of ``structs[i]``; a
    point is such a row plus the index of its schedule in ``schedules``.
    Axes with one legal value and knobs with one allowed value are not suggested at all; every
    other domain depends only on the problem, so it is identical in every trial of a study.
    """

    def __init__(self, structs: Sequence[Structure], space: SearchSpace) -> None:
        if not structs:
            raise PlannerError(
                "search",
                "no legal layout in the search space",
                "more GPUs, another global batch, or wider axes",
            )
        self.structs = list(structs)
        self.matrix = np.log2(
            np.array([[getattr(s, a) for a in AXES] for s in self.structs], dtype=float)
        )
        self.weights = np.array([AXIS_WEIGHTS[a] for a in AXES])
        self.dims: list[tuple[int, _Dim]] = []
        for j, axis in enumerate(AXES):
            col = self.matrix[:, j]
            lo, hi = float(col.min()), float(col.max())
            if lo == hi:
                continue
            integer = bool(np.all(col == np.round(col)))
            if integer:
                lo, hi = float(round(lo)), float(round(hi))
            self.dims.append((j, _Dim(axis, lo, hi, integer)))
        # Structure.schedule values (None: the default for the vpp); suggested only when several
        self.schedules = tuple(dict.fromkeys(s.schedule for s in self.structs))
        self.schedule_col = np.array([self.schedules.index(s.schedule) for s in self.structs])
        self.fixed = np.append(self.matrix[0], 0.0)  # the first structure, schedule index 0
        self.knob_choices: dict[str, tuple[Any, ...]] = {
            name: tuple(getattr(space, name)) for name in KNOB_AXES
        }
        for name, choices in self.knob_choices.items():
            if not choices:
                raise PlannerError(f"space.{name}", "empty domain", "at least one value")

    def suggest(self, trial: Trial) -> tuple[np.ndarray, Knobs]:
        """The trial's encoded structural point (not yet legal) and its knobs."""
        x = self.fixed.copy()
        for j, d in self.dims:
            if d.integer:
                x[j] = trial.suggest_int(d.param, int(d.low), int(d.high))
            else:
                x[j] = trial.suggest_float(d.param, d.low, d.high)
        if len(self.schedules) > 1:
            sched = trial.suggest_categorical(SCHEDULE_PARAM, self.schedules)
            x[len(AXES)] = self.schedules.index(sched)
        knobs = {
            name: (choices[0] if len(choices) == 1 else trial.suggest_categorical(name, choices))
            for name, choices in self.knob_choices.items()
        }
        return x, Knobs(**knobs)

    def repair(self, x: np.ndarray) -> Structure:
        """The legal structure nearest to ``x`` (weighted L1 in log2 units; ties: first in
        generator order, i.e. the smaller values)."""
        dist = np.abs(self.matrix - x[: len(AXES)]) @ self.weights
        dist += SCHEDULE_WEIGHT * (self.schedule_col != x[len(AXES)])
        return self.structs[int(np.argmin(dist))]

    def params(self, s: Structure, k: Knobs) -> dict[str, Any]:
        """Trial parameters that repair exactly to ``s`` with knobs ``k`` (for enqueue_trial)."""
        out: dict[str, Any] = {}
        for _, d in self.dims:
            v = math.log2(getattr(s, d.axis))
            out[d.param] = round(v) if d.integer else v
        if len(self.schedules) > 1:
            out[SCHEDULE_PARAM] = s.schedule
        for name, choices in self.knob_choices.items():
            if len(choices) > 1:
                out[name] = getattr(k, name)
        return out


def legal_structures(
    model: ModelSpec,
    cluster: Cluster,
    training: Training,
    space: SearchSpace,
    deadline: Deadline = NO_DEADLINE,
) -> list[Structure]:
    """Every legal structure, refusing more than MAX_STRUCTURES (the encoding holds them all)."""
    structs = list(
        itertools.islice(structures(model, cluster, training, space, deadline), MAX_STRUCTURES + 1)
    )
    if len(structs) > MAX_STRUCTURES:
        raise PlannerError(
            "search",
            f"more than {MAX_STRUCTURES:,} legal structures to encode",
            "a smaller space: fewer GPU counts, a fixed tp/pp",
        )
    return structs
