"""Unstated knobs: the tuned prediction and the range over what a run could have used.

A published run rarely states every knob; one that does not state its micro-batch,
interleaving depth, recompute, ZeRO stage or (for an MoE model) expert-parallel size was tuned
by its authors. :func:`tuned_prediction`
enumerates the legal values of each unknown knob (under the software stack, when given),
simulates every combination, and returns the fastest one that fits in memory (what a tuned run
used) together with the range of tokens/s/GPU over all combinations that fit, and the values it
picked. The enumeration is exact up to ``MAX_COMBINATIONS`` settings; a larger space (five
unknown knobs of an MoE model: thousands of combinations) is searched in two bounded stages,
and the result says so (:attr:`TunedPrediction.exhaustive`): every combination of a log-spread
of the numeric grids (micro-batch, expert-parallel size, interleaving depth; the smallest and
the largest value of each kept, so the lightest setting in memory is always among them), then
one knob at a time over its full grid from the fastest setting found, until no single change
is faster (coordinate search from the ``SEARCH_STARTS`` fastest, at most ``MAX_PASSES``
passes each).
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
# the shares of the layers a partial full recompute is tried at (Training.recompute_fraction,
# where the stack runs it): between no recompute and every layer's
RECOMPUTE_FRACTIONS = (0.25, 0.5, 0.75)
MAX_COMBINATIONS = 1_000
# coordinate-search passes after the spread grid, where the full space is larger than the bound
MAX_PASSES = 4
# the fastest settings of the spread grid each coordinate search starts from
SEARCH_STARTS = 4
# the knobs whose grids are numeric, so that a log-spread of them stands for the rest
THINNABLE = ("micro_batch", "ep", "vpp")


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
    combinations: int = 0  # the full space: the product of the unknown knobs' grids
    searched: int = 0  # the combinations costed or ruled out (= combinations when exhaustive)

    @property
    def exhaustive(self) -> bool:
        """Whether every combination of the unknown knobs' values was tried."""
        return self.searched >= self.combinations


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


def _spread_grid(values: tuple[Any, ...], most: int) -> tuple[Any, ...]:
    """:func:`spread` of a grid whose first value may be None (no interleaving): None kept."""
    if values and values[0] is None:
        return (None, *spread(values[1:], most - 1)) if len(values) > 2 else values
    return spread(values, most)


def thinned(grids: list[tuple[Any, ...]], unknown: tuple[str, ...]) -> list[tuple[Any, ...]]:
    """The grids cut to at most :data:`MAX_COMBINATIONS` combinations where they can be: the
    longest :data:`THINNABLE` grid loses one value at a time (its count; each is then a
    log-spread of the full grid, the ends kept), the others kept whole."""
    sizes = [len(g) for g in grids]
    while math.prod(sizes) > MAX_COMBINATIONS:
        cut = [k for k, u in enumerate(unknown) if u in THINNABLE and sizes[k] > 2]
        if not cut:
            break
        k = max(cut, key=lambda k: (sizes[k], -k))
        sizes[k] -= 1
    return [g if n == len(g) else _spread_grid(g, n) for g, n in zip(grids, sizes, strict=True)]


def _choices(
    name: str, stack: StackSpec | None, model: ModelSpec, layout: Layout, training: Training
) -> tuple[Any, ...]:
    """The values an unknown knob takes. Recompute: the stack's levels, full recompute of a
    share of the layers where the stack runs it (:data:`RECOMPUTE_FRACTIONS`; a value
    ``("full", share)``), and, where its selective recompute takes a module list (``capabilities.recompute_modules``), its
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
        partial = stack is None or stack.capabilities.partial_recompute
        shares = RECOMPUTE_FRACTIONS if partial and "full" in levels else ()
        part = tuple(("full", share) for share in shares)
        if stack is None or "selective" not in levels:
            return (*levels, *part)
        at = training.with_changes(recompute="selective", recompute_modules=None)
        wider = wider_selective(stack, model, at)
        return (*levels, *part, *(("selective", modules) for modules in wider))
    return stack.capabilities.zero_stages if stack else (0, 1, 2, 3)


def lightest_setting(
    model: ModelSpec,
    layout: Layout,
    training: Training,
    unknown: tuple[str, ...],
    stack: StackSpec | None = None,
) -> tuple[Layout, Training, dict[str, Any]]:
    """``layout`` and ``training`` with each unknown knob at the value that needs the least
    memory per GPU (recompute is left as given: the caller's fallbacks raise it): the highest
    ZeRO stage the stack runs with this layout, the smallest micro-batch, the largest
    expert-parallel size, no interleaving (fewer micro-batches in flight); with the values
    set. Where nothing fits
    under any setting, this is the one whose memory says by how much."""
    picked: dict[str, Any] = {}
    for name in unknown:
        grid = _choices(name, stack, model, layout, training)
        if name == "ep":
            picked[name] = max(grid)
        elif name == "micro_batch":
            picked[name] = min(grid)
        elif name == "vpp":
            picked[name] = None

    def at(zero: int | None = None) -> tuple[Layout, Training]:
        given = picked if zero is None else {**picked, "zero": zero}
        lay = layout.with_changes(**{k: v for k, v in given.items() if k in Layout.model_fields})
        return lay, training.with_changes(
            **{k: v for k, v in given.items() if k in Training.model_fields}
        )

    def runs(zero: int) -> bool:
        """Whether the stack runs ZeRO stage ``zero`` with this layout (DeepSpeed's pipeline
        engine does not run stages 2 and 3)."""
        return (
            stack is None or stack_violation(stack, *apply_stack(stack, model, *at(zero))) is None
        )

    if "zero" in unknown:  # the highest stage the stack runs here
        stages = sorted(_choices("zero", stack, model, layout, training), reverse=True)
        picked["zero"] = next(filter(runs, stages), stages[0])
    return (*at(), picked)


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
    full = [_choices(u, stack, model, layout, training) for u in unknown]
    grids = thinned(full, unknown)
    if math.prod(len(g) for g in grids) > MAX_COMBINATIONS:  # recompute x zero alone too many
        raise PlannerError(
            "unknown", f"more than {MAX_COMBINATIONS:,} settings", "fewer unknown knobs"
        )
    tolerated = _stated_violation(model, layout, training, stack, enforce_stack)
    tried: dict[tuple[Any, ...], tuple[StepReport, Layout, Training, dict[str, Any]] | None] = {}

    def cost(values: tuple[Any, ...]) -> Any:
        """The costed setting (None: not legal); each combination costed once."""
        if values not in tried:
            tried[values] = _setting(
                model, cluster, layout, training, profile, stack, tolerated, unknown, values
            )
        return tried[values]

    for values in itertools.product(*grids):
        cost(values)
    combinations = math.prod(len(g) for g in full)
    if combinations > len(tried):  # the full space is larger: one knob at a time from the best
        _coordinate_search(full, cost, tried)
    legal = sum(1 for got in tried.values() if got is not None)
    fitting = [got for got in tried.values() if got is not None and got[0].fits]
    if not fitting:
        raise PlannerError(
            "unknown",
            f"no legal setting of {', '.join(unknown)} fits in memory",
            "a layout with more GPUs per model copy (tp, pp) or recompute",
        )
    rates = [f[0].tokens_per_s_per_gpu for f in fitting]
    best = max(fitting, key=lambda f: f[0].tokens_per_s_per_gpu)
    return TunedPrediction(
        best[0],
        best[1],
        best[2],
        best[3],
        min(rates),
        max(rates),
        len(fitting),
        legal,
        combinations,
        len(tried),
    )


def _setting(
    model: ModelSpec,
    cluster: Cluster,
    layout: Layout,
    training: Training,
    profile: CalibrationProfile,
    stack: StackSpec | None,
    tolerated: str | None,
    unknown: tuple[str, ...],
    values: tuple[Any, ...],
) -> tuple[StepReport, Layout, Training, dict[str, Any]] | None:
    """One setting of the unknown knobs costed: its report, the layout and training costed
    and the values picked; None where it is not legal for the model, layout or stack."""
    picked = dict(zip(unknown, values, strict=True))
    l_update = {k: v for k, v in picked.items() if k in Layout.model_fields}
    t_update = {k: v for k, v in picked.items() if k in Training.model_fields}
    if isinstance(picked.get("recompute"), tuple) and picked["recompute"][0] == "full":
        t_update["recompute"], t_update["recompute_fraction"] = picked["recompute"]
        picked = {**picked, "recompute": "full", "recompute_fraction": picked["recompute"][1]}
        t_update["recompute_modules"] = None
    elif isinstance(picked.get("recompute"), tuple):  # selective with a wider module set
        t_update["recompute"], t_update["recompute_modules"] = picked["recompute"]
        picked = {**picked, "recompute": "selective"}
        picked["recompute_modules"] = ", ".join(t_update["recompute_modules"])
    elif t_update.get("recompute", training.recompute) != "selective":
        t_update["recompute_modules"] = None
    if "recompute" in picked and "recompute_fraction" not in t_update:
        t_update["recompute_fraction"] = None  # a whole level: every layer
    try:  # fields the caller left unset stay unset, for the stack to fill
        tr = training.with_changes(**t_update)
        lay = layout.with_changes(**l_update)
        if stack is not None:  # the returned layout and training are the ones costed
            lay, tr = apply_stack(stack, model, lay, tr)
            violation = stack_violation(stack, lay, tr)
            if violation is not None and str(violation) != tolerated:
                return None  # a tuned value the stack cannot run: not what the run used
        check_layout(model, cluster, lay, tr)
        report = simulate_step(model, cluster, lay, tr, profile, stack=stack, enforce_stack=False)
    except (PlannerError, ValueError):
        return None  # not a legal setting for this model, layout or stack
    return report, lay, tr, picked


def _coordinate_search(
    full: list[tuple[Any, ...]],
    cost: Any,
    tried: dict[tuple[Any, ...], Any],
) -> None:
    """From each of the :data:`SEARCH_STARTS` fastest fitting settings in ``tried``, change one
    knob at a time over its full grid and move to the fastest that fits, until no single
    change is faster (at most :data:`MAX_PASSES` passes); every combination costed lands in
    ``tried``."""

    def rate(values: tuple[Any, ...] | None) -> float:
        got = None if values is None else tried.get(values)
        return got[0].tokens_per_s_per_gpu if got is not None and got[0].fits else -1.0

    starts = sorted((v for v in tried if rate(v) >= 0), key=rate, reverse=True)[:SEARCH_STARTS]
    for best in starts:  # nothing fits on the spread grid (it holds the lightest): no start
        for _ in range(MAX_PASSES):
            start = best
            for k, grid in enumerate(full):
                for value in grid:
                    values = (*best[:k], value, *best[k + 1 :])
                    cost(values)
                    if rate(values) > rate(best):
                        best = values
            if best == start:
                break


__all__ = [
    "MAX_COMBINATIONS",
    "MAX_PASSES",
    "thinned",
    "ep_choices",
    "TunedPrediction",
    "UNKNOWABLE",
    "lightest_setting",
    "micro_batch_choices",
    "tuned_prediction",
]
