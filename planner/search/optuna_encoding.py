"""The encoded space of the Optuna search: legal structures as log2 vectors, and the repair.

Each trial suggests the structure in an encoded numeric space (log2 of tp, cp, pp, vpp, ep,
micro-batch and GPU count; integer exponents where every legal value is a power of two, else a
float log2) plus the knobs as categoricals (and the pipeline schedule, a categorical over the
``Structure.schedule`` values of the legal structures, when there are several).
:meth:`Encoding.repair` maps the point to the nearest legal structure: weighted L1 distance in
the encoded space, the data-parallel degree the point implies (gpus / (tp * cp * pp)) counted
as an axis, so moving a factor of two between tp and cp costs as much as between tp and dp,
plus SCHEDULE_WEIGHT when the schedule differs. :meth:`Encoding.nearest` walks the (structure,
knob setting) pairs outward from a point, and :class:`Explored` uses it to find the nearest
candidate no finished trial holds yet. planner/search/optuna_search.py runs the study.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import optuna
from optuna.trial import Trial

from planner.errors import PlannerError
from planner.search.budget import NO_DEADLINE, Deadline
from planner.search.optuna_storage import FINISHED
from planner.search.space import Knobs, SearchSpace, Structure, repaired_candidate, structures
from planner.specs.hardware import Cluster
from planner.specs.layout import Layout, Training
from planner.specs.model import ModelSpec

# the encoded matrix holds every legal structure (~200 bytes each with its row): a bound on memory
MAX_STRUCTURES = 2_000_000
# structural axes in the order of the encoded vector; weights of the repair distance (a change of
# GPU count changes the problem most, a change of micro-batch or interleaving the least)
AXES = ("tp", "cp", "pp", "vpp", "ep", "micro_batch", "gpus")
AXIS_WEIGHTS = {
    "tp": 1.0,
    "cp": 1.0,
    "pp": 1.0,
    "vpp": 1.0,
    "ep": 2.0,
    "micro_batch": 1.0,
    "gpus": 4.0,
}
DP_WEIGHT = 1.0  # per log2 unit of the implied data-parallel degree gpus / (tp * cp * pp)
SCHEDULE_WEIGHT = 1.0  # repair distance of another schedule: as one step of vpp or micro-batch
SCHEDULE_PARAM = "schedule"
# repair distance of one step along a knob's domain (recompute none/selective/full and ZeRO 0-3
# are ordered, a switch is one step): as one step of vpp or micro-batch
KNOB_WEIGHT = 1.0
NEAREST_PREFIX = 256  # structures sorted at first by a walk outward (all of them when it passes)
MAX_PROBES = 4096  # candidates a search for an unexplored one tries before it gives up
Candidate = tuple[int, Layout, Training]  # (gpus, layout, training), as the evaluator takes
KNOB_AXES = (
    "recompute",
    "zero",
    "sequence_parallel",
    "overlap_tp_comm",
    "overlap_dp_grad_reduce",
    "overlap_ep_comm",
    "recompute_fraction",
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
        self.dp_col = np.log2(np.array([s.dp for s in self.structs], dtype=float))
        self._factors = [AXES.index(a) for a in ("tp", "cp", "pp")]
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
        # every knob setting, and the position of each of its values in its domain
        domains = list(self.knob_choices.values())
        self.knob_settings = [
            Knobs(**dict(zip(KNOB_AXES, combo, strict=True)))
            for combo in itertools.product(*domains)
        ]
        self.knob_matrix = np.array(
            list(itertools.product(*(range(len(c)) for c in domains))), dtype=float
        )

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
        return self.structs[int(np.argmin(self.distances(x)))]

    def distances(self, x: np.ndarray) -> np.ndarray:
        """The repair distance from the point ``x`` to every legal structure."""
        dist = np.abs(self.matrix - x[: len(AXES)]) @ self.weights
        # the data-parallel degree the point implies: gpus / (tp * cp * pp)
        dp = x[AXES.index("gpus")] - x[self._factors].sum()
        dist += DP_WEIGHT * np.abs(self.dp_col - dp)
        return dist + SCHEDULE_WEIGHT * (self.schedule_col != x[len(AXES)])

    def nearest(self, x: np.ndarray, knobs: Knobs) -> Iterator[tuple[float, int, int]]:
        """(distance, structure index, knob-setting index) in increasing distance from the point
        (``x``, ``knobs``): the weighted L1 distance of :meth:`repair` plus KNOB_WEIGHT per step
        along each knob's domain (a value outside it counts from its first value). The first is
        ``repair(x)`` with ``knobs``; ties go to the smaller indices. Lazy: nothing is sorted
        until a second pair is asked for, then the NEAREST_PREFIX nearest structures, and all of
        them only once the walk passes those."""
        d_struct = self.distances(x)
        at = [_position(self.knob_choices[n], getattr(knobs, n)) for n in KNOB_AXES]
        d_knob = KNOB_WEIGHT * np.abs(self.knob_matrix - np.array(at, dtype=float)).sum(axis=1)
        first = int(np.argmin(d_struct)), int(np.argmin(d_knob))
        yield float(d_struct[first[0]] + d_knob[first[1]]), *first
        s_order = _smallest_first(d_struct, NEAREST_PREFIX)
        k_order = np.argsort(d_knob, kind="stable")
        heap = [(float(d_struct[s_order[0]] + d_knob[k_order[0]]), 0, 0)]
        while heap:  # the k smallest sums of two sorted lists, each pair once
            dist, a, b = heapq.heappop(heap)
            pair = int(s_order[a]), int(k_order[b])
            if b + 1 < len(k_order):
                nxt = float(d_struct[s_order[a]] + d_knob[k_order[b + 1]])
                heapq.heappush(heap, (nxt, a, b + 1))
            if b == 0 and a + 1 == len(s_order) < len(d_struct):  # past the sorted prefix
                s_order = _smallest_first(d_struct, len(d_struct))
            if b == 0 and a + 1 < len(s_order):
                nxt = float(d_struct[s_order[a + 1]] + d_knob[k_order[0]])
                heapq.heappush(heap, (nxt, a + 1, 0))
            if pair != first:
                yield dist, *pair

    def point(self, s: Structure) -> np.ndarray:
        """The encoded point of structure ``s`` (its row and schedule index)."""
        sched = self.schedules.index(s.schedule) if s.schedule in self.schedules else 0
        return np.append(np.log2([getattr(s, a) for a in AXES]), float(sched))

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


# ---- candidates explored by a study -------------------------------------------------------------


def candidate_attr(gpus: int, layout: Layout, training: Training) -> dict[str, Any]:
    """The JSON-able record of one evaluated candidate kept in a trial's user attrs."""
    return {
        "gpus": gpus,
        "layout": layout.model_dump(mode="json"),
        "micro_batch": training.micro_batch,
        "recompute": training.recompute,
        "recompute_fraction": training.recompute_fraction,
    }


def candidate_from_attr(attr: dict[str, Any], training: Training) -> Candidate:
    layout = Layout.model_validate(attr["layout"])
    tr = training.model_copy(
        update={
            "micro_batch": attr["micro_batch"],
            "recompute": attr["recompute"],
            "recompute_fraction": attr.get("recompute_fraction"),
        }
    )
    return int(attr["gpus"]), layout, tr


class Explored:
    """The candidates the finished trials of a study hold, and the nearest candidates to a
    point that none holds yet (what keeps a trial from being spent on a known candidate)."""

    def __init__(self, enc: Encoding, model: ModelSpec, cluster: Cluster, training: Training):
        self.enc = enc
        self.model = model
        self.cluster = cluster
        self.training = training
        self.known: set[Candidate] = set()
        self._synced: set[int] = set()  # numbers of the finished trials read into ``known``
        self._pairs: dict[tuple[int, int], Candidate | None] = {}

    def sync(self, study: optuna.Study) -> None:
        """Add the candidates of finished trials not read yet (other workers' included)."""
        for t in study.get_trials(deepcopy=False, states=FINISHED):
            attr = t.user_attrs.get("candidate")
            if t.number not in self._synced and attr is not None:
                self._synced.add(t.number)
                self.known.add(candidate_from_attr(attr, self.training))

    def candidate(self, s: Structure, k: Knobs) -> Candidate:
        """The candidate of a legal structure and any knobs (see :func:`repaired_candidate`)."""
        return (s.gpus, *repaired_candidate(self.model, self.cluster, s, k, self.training))

    def _pair(self, i: int, j: int) -> Candidate | None:
        """The candidate of structure i and knob setting j, None when a knob rule refuses
        them (memoised: searches revisit the same pairs)."""
        if (i, j) not in self._pairs:
            try:
                c = self.candidate(self.enc.structs[i], self.enc.knob_settings[j])
            except PlannerError:
                c = None
            self._pairs[i, j] = c
        return self._pairs[i, j]

    def novel(
        self, x: np.ndarray, knobs: Knobs, radius: float = math.inf
    ) -> tuple[Structure, Knobs, Candidate] | None:
        """The nearest candidate to (``x``, ``knobs``) not in ``known``, with its structure and
        knob setting; None when none lies within ``radius`` among the first MAX_PROBES."""
        for dist, i, j in itertools.islice(self.enc.nearest(x, knobs), MAX_PROBES):
            if dist > radius:
                return None
            c = self._pair(i, j)
            if c is not None and c not in self.known:
                return self.enc.structs[i], self.enc.knob_settings[j], c
        return None


def structure_of(key: Candidate) -> tuple[Structure, Knobs]:
    """The structure and knobs of a candidate (knobs that cannot matter as it holds them)."""
    gpus, ly, tr = key
    s = Structure(gpus, ly.tp, ly.cp, ly.pp, ly.vpp or 1, ly.ep, ly.dp, tr.micro_batch, ly.schedule)
    k = Knobs(
        recompute=tr.recompute,
        zero=ly.zero,
        sequence_parallel=ly.sequence_parallel,
        overlap_tp_comm=ly.overlap_tp_comm,
        overlap_dp_grad_reduce=ly.overlap_dp_grad_reduce,
        overlap_ep_comm=ly.overlap_ep_comm,
        recompute_fraction=tr.recompute_fraction,
    )
    return s, k


def _smallest_first(values: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` smallest ``values`` (and of every value tied with the k-th), in
    increasing value, ties by index: a prefix of the full stable order, found in O(n)."""
    if k >= len(values):
        return np.argsort(values, kind="stable")
    kth = np.partition(values, k - 1)[k - 1]
    idx = np.flatnonzero(values <= kth)
    return idx[np.argsort(values[idx], kind="stable")]


def _position(domain: tuple[Any, ...], value: Any) -> int:  # noqa: ANN401
    return domain.index(value) if value in domain else 0


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
