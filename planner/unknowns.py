"""Unstated knobs: the tuned prediction and the range over what a run could have used.

A published run rarely states every knob; one that does not state its micro-batch,
interleaving depth, recompute, ZeRO stage or (for an MoE model) expert-parallel size was tuned
by its authors. :func:`tuned_prediction`
enumerates the legal values of each unknown knob (under the software stack, when given),
simulates every combination, and returns the fastest one that fits in memory (what a tuned run
used) together with the range of tokens/s/GPU over all combinations that fit, and the values it
picked. The enumeration is bounded: at most ``MAX_COMBINATIONS`` settings.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any

from planner.divisors import divisors
from planner.errors import PlannerError
from planner.legality import check_layout
from planner.profile import CalibrationProfile
from planner.report import StepReport
from planner.simulate import simulate_step
from planner.specs.hardware import Cluster
from planner.specs.layout import Layout, Training
from planner.specs.model import ModelSpec
from planner.specs.stack import StackSpec
from planner.stacks import (
    applied_violation,
    apply_stack,
    stack_violation,
    wider_selective,
)

UNKNOWABLE = ("micro_batch", "vpp", "recompute", "zero", "ep")
# The micro-batches tried where the per-replica batch (global_batch / dp) is not a whole number
# (no micro-batch is legal then; check_layout says why).
MICRO_BATCHES = (1, 2, 4, 8, 16)
# The largest micro-batch tried: published runs go up to a few dozen sequences (MosaicML's MPT
# tables: 26 for the 125M model at 2,048 tokens, 56 for 1B at 512), never beyond 64.
MAX_TUNED_MICRO_BATCH = 64
VPPS = (None, 2, 3, 4, 6, 8)
MAX_COMBINATIONS = 1_000


@dataclass(frozen=True)
class TunedPrediction:
    """The fastest setting of the unknown knobs that fits, and the range over all that fit."""

    report: StepReport
    layout: Layout
    training: Training
    picked: dict[str, Any]  # unknown knob -> the value the tuned prediction used
    tokens_per_s_per_gpu_min: float
    tokens_per_s_per_gpu_max: float
    settings: int  # legal settings that fit, over which the range is taken
    legal: int = 0  # legal settings, fitting or not (1: the stack and layout fix the knobs)


def micro_batch_choices(layout: Layout, training: Training) -> tuple[int, ...]:
    """The micro-batches a run of ``layout`` and ``training`` can step with: every divisor of
    its per-replica batch (``global_batch / dp`` sequences, split into whole micro-batches:
    Megatron-LM's ``global_batch_size % (micro_batch_size * data_parallel_size) == 0``) up to
    :data:`MAX_TUNED_MICRO_BATCH`, not only powers of two (MPT's tables ran 6, 14 and 26);
    :data:`MICRO_BATCHES` where the per-replica batch is not whole."""
    per_replica, rest = divmod(training.global_batch, layout.dp)
    if rest or per_replica < 1:
        return MICRO_BATCHES
    return tuple(d for d in divisors(per_replica) if d <= MAX_TUNED_MICRO_BATCH)


def ep_choices(model: ModelSpec, layout: Layout) -> tuple[int, ...]:
    """The expert-parallel sizes a layout can run the model with: the divisors of the routed
    experts that also divide tp x dp x cp, the ranks EP is carved from (legality
    ``ep_divides_experts``, ``ep_divides_tp_dp_cp``); 1 for a dense model."""
    if model.moe is None:
        return (1,)
    return tuple(divisors(math.gcd(model.moe.experts, layout.tp * layout.dp * layout.cp)))


def spread(values: tuple[int, ...], most: int) -> tuple[int, ...]:
    """At most ``most`` (at least 2) of the increasing ``values``, evenly spread on a log
    scale, the smallest and the largest always among them: all of them when they are few."""
    most = max(most, 2)
    if len(values) <= most:
        return values
    lo, hi = math.log(values[0]), math.log(values[-1])
    picks = {values[0], values[-1]}
    for k in range(1, most - 1):
        target = lo + (hi - lo) * k / (most - 1)
        picks.add(min(values, key=lambda v: abs(math.log(v) - target)))
    return tuple(sorted(picks))


def _choices(
    name: str, stack: StackSpec | None, model: ModelSpec, layout: Layout, training: Training
) -> tuple[Any, ...]:
    """The values an unknown knob takes. Recompute: the stack's levels, and, where its
    selective recompute takes a module list (``capabilities.recompute_modules``), its
    selective set widened one submodule at a time (:func:`planner.stacks.wider_selective`;
    a value ``("selective", modules)``): which modules a run re-ran is as unknown as its
    level."""
    if name == "micro_batch":
        return micro_batch_choices(layout, training)
    if name == "vpp":
        return VPPS
    if name == "ep":
        return ep_choices(model, layout)
    if name == "recompute":
        levels = stack.capabilities.recompute if stack else ("none", "selective", "full")
        if stack is None or "selective" not in levels:
            return levels
        at = training.with_changes(recompute="selective", recompute_modules=None)
        wider = wider_selective(stack, model, at)
        return (*levels, *(("selective", modules) for modules in wider))
    return stack.capabilities.zero_stages if stack else (0, 1, 2, 3)


def _stated_violation(
    model: ModelSpec,
    layout: Layout,
    training: Training,
    stack: StackSpec | None,
    enforce_stack: bool,
) -> str | None:
    """What the stack cannot run of the stated inputs, where that is tolerated (not
    ``enforce_stack``); tuned values may not add another violation."""
    if stack is None or enforce_stack:
        return None
    violation = applied_violation(stack, model, layout, training)
    return None if violation is None else str(violation)


def tuned_prediction(
    model: ModelSpec,
    cluster: Cluster,
    layout: Layout,
    training: Training,
    profile: CalibrationProfile,
    unknown: tuple[str, ...],
    stack: StackSpec | None = None,
    enforce_stack: bool = True,
) -> TunedPrediction:
    """The tuned prediction over the ``unknown`` knobs (names from :data:`UNKNOWABLE`); a
    PlannerError when a name is not one of them or no legal setting fits in memory.
    ``enforce_stack`` False: settings the stack cannot run are costed too (the stack of a
    published run that is only inferred from its framework name)."""
    unknown = tuple(dict.fromkeys(unknown))  # a knob named twice is one knob
    bad = [u for u in unknown if u not in UNKNOWABLE]
    if bad or not unknown:
        raise PlannerError("unknown", f"{', '.join(bad) or 'nothing'}", ", ".join(UNKNOWABLE))
    grids = [_choices(u, stack, model, layout, training) for u in unknown]
    if "micro_batch" in unknown:  # a per-replica batch with many divisors: a spread of them
        at = unknown.index("micro_batch")
        others = math.prod(len(g) for i, g in enumerate(grids) if i != at)
        grids[at] = spread(grids[at], MAX_COMBINATIONS // others)
    if math.prod(len(g) for g in grids) > MAX_COMBINATIONS:  # never a silently cut search
        raise PlannerError(
            "unknown", f"more than {MAX_COMBINATIONS:,} settings", "fewer unknown knobs"
        )
    tolerated = _stated_violation(model, layout, training, stack, enforce_stack)
    fitting: list[tuple[StepReport, Layout, Training, dict[str, Any]]] = []
    legal = 0
    for values in itertools.product(*grids):
        picked = dict(zip(unknown, values, strict=True))
        l_update = {k: v for k, v in picked.items() if k in Layout.model_fields}
        t_update = {k: v for k, v in picked.items() if k in Training.model_fields}
        if isinstance(picked.get("recompute"), tuple):  # selective with a wider module set
            t_update["recompute"], t_update["recompute_modules"] = picked["recompute"]
            picked = {**picked, "recompute": "selective"}
            picked["recompute_modules"] = ", ".join(t_update["recompute_modules"])
        elif t_update.get("recompute", training.recompute) != "selective":
            t_update["recompute_modules"] = None
        try:  # fields the caller left unset stay unset, for the stack to fill
            tr = training.with_changes(**t_update)
            lay = layout.with_changes(**l_update)
            if stack is not None:  # the returned layout and training are the ones costed
                lay, tr = apply_stack(stack, model, lay, tr)
                violation = stack_violation(stack, lay, tr)
                if violation is not None and str(violation) != tolerated:
                    continue  # a tuned value the stack cannot run: not what the run used
            check_layout(model, cluster, lay, tr)
            report = simulate_step(
                model, cluster, lay, tr, profile, stack=stack, enforce_stack=False
            )
        except (PlannerError, ValueError):
            continue  # not a legal setting for this model, layout or stack
        legal += 1
        if report.fits:
            fitting.append((report, lay, tr, picked))
    if not fitting:
        raise PlannerError(
            "unknown",
            f"no legal setting of {', '.join(unknown)} fits in memory",
            "a layout with more GPUs per model copy (tp, pp) or recompute",
        )
    rates = [f[0].tokens_per_s_per_gpu for f in fitting]
    best = max(fitting, key=lambda f: f[0].tokens_per_s_per_gpu)
    return TunedPrediction(
        best[0], best[1], best[2], best[3], min(rates), max(rates), len(fitting), legal
    )


__all__ = [
    "MAX_COMBINATIONS",
    "ep_choices",
    "TunedPrediction",
    "UNKNOWABLE",
    "micro_batch_choices",
    "tuned_prediction",
]
