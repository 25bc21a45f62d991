"""Schema 1 fallbacks: what a published run may have used that schema 1 cannot state.

A schema 1 case (``shared/validation/README.md``) has no field for the optimizer's state dtypes,
activation offload or host offload, and must state a recompute level even where its source
prints none. Where a case's stated inputs do not fit in memory, :func:`fitting` costs the first
of those memory savers that makes them fit (the fastest first, as unstated knobs are tuned) and
says which in the row; :func:`with_fallback` is the case's stated training with that change, so
that its unstated knobs are tuned under it (``planner/validate/run.py``). Schema 2 states all of
them, so nothing here runs for it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, get_args

from planner.costs import memory
from planner.errors import PlannerError
from planner.legality import check_layout
from planner.simulate import simulate_step
from planner.specs.knobs import Recompute, fp8_gatherable
from planner.specs.layout import Layout, Training
from planner.stacks import stack_training, stack_violations, training_defaults, wider_selective
from planner.validate.inputs import CaseInputs


def with_fallback(i: CaseInputs, change: dict[str, Any]) -> Training:
    """The case's stated training with a schema 1 fallback's change (:func:`fitting`) applied
    (a raised recompute level with its modules, :func:`_at_recompute`)."""
    rest = {k: v for k, v in change.items() if k != "recompute"}
    if "recompute" in change and change["recompute"] != i.training.recompute:
        return _at_recompute(i, i.training, change["recompute"]).with_changes(**rest)
    return i.training.with_changes(**rest)


# the reduced AdamW states a schema 1 case may have run, largest first (Training.optimizer_states)
REDUCED_STATES = ("fp32_remainders", "bf16")


def fitting(
    rep: Any, i: CaseInputs, layout: Layout, training: Training, profile: Any, notes: list[str]
) -> tuple[Any, dict[str, Any] | None, tuple[dict[str, Any], ...]]:
    """A measured run fitted. A schema 1 case cannot state the memory savers that leave the
    step's time as it is or nearly so: fp8 weights in place of the bf16 weights and their
    cached fp8 copies (Megatron ``--fp8-param-gather``), reduced AdamW state (Apex / Transformer Engine
    store_param_remainders, bf16 moments: NeMo 1's dgxc Nemotron-4 340B recipe sets the
    optimizer dtype bf16) or activation offload. Where its stated inputs do not fit, the first
    that fits, in that order (the fastest first, as unstated knobs are tuned): fp8 weights, the
    largest reduced state the stack runs, else the fewest offloaded layers (:func:`_offloaded`), else
    the lightest heavier recompute (:func:`_recomputed`), else host offload where the stack
    runs it (:func:`_host_offloaded`); the row says which. Else ``rep``
    unchanged. With the report, the training change the fallback made (None: none fits), so
    that unstated knobs the stated inputs could not fit are tuned under it, and the changes
    of the other recompute settings that also fit (the run may have used any of them: the
    row's range spans them)."""
    stated = _violations(i.stack, layout, training)  # costed as stated: not held against a trial
    fp8_weights = _fp8_weights(i, layout, training)
    if fp8_weights is None:
        return _savers(rep, i, layout, training, profile, notes, stated)
    # fp8 weights cost nothing (they halve the ZeRO gather): every saver below runs with them
    found = next(_fits(i, layout, [("", fp8_weights)], profile, stated), None)
    note = (
        f"stated inputs need {rep.peak_memory_gib:.1f} GiB of {rep.usable_memory_gib:.1f} "
        "with the fp8 copies of the weights beside the bf16 ones: schema 1 cannot state fp8 "
        "weights (Megatron --fp8-param-gather); costed with them"
    )
    base = {"fp8_param_gather": True}
    if found is not None:
        notes.append(note)
        return found[1], base, ()
    got, change, others = _savers(rep, i, layout, fp8_weights, profile, notes, stated)
    if change is None:
        return rep, None, ()
    notes.insert(
        len(notes) - 1,
        "schema 1 cannot state fp8 weights (Megatron --fp8-param-gather), which hold no fp8 "
        "copies beside bf16 ones: costed with them, and then",
    )
    return got, {**base, **change}, tuple({**base, **o} for o in others)


def _fp8_weights(i: CaseInputs, layout: Layout, training: Training) -> Training | None:
    """``training`` with fp8 weights (``fp8_param_gather``) where, under the case's stack, it
    keeps fp8 copies of bf16 weights (:func:`planner.costs.memory.fp8_weight_cache_bytes`;
    none at ZeRO-3, whose re-gathered weights TE does not cache, ``memory.state_bytes``) and
    its recipe can gather them; else None."""
    if i.stack is None or layout.zero >= 3:
        return None
    applied = stack_training(i.stack, i.model, training)
    if not memory.fp8_weight_cache_bytes(applied):
        return None
    if not fp8_gatherable(applied.precision, applied.fp8_recipe):
        return None
    return training.with_changes(fp8_param_gather=True)


def _savers(
    rep: Any,
    i: CaseInputs,
    layout: Layout,
    training: Training,
    profile: Any,
    notes: list[str],
    stated: frozenset[str],
) -> tuple[Any, dict[str, Any] | None, tuple[dict[str, Any], ...]]:
    """:func:`fitting`'s chain after fp8 weights: reduced AdamW state, activation offload,
    heavier recompute, host offload (the first that fits)."""
    bf16_weights = training.precision in ("bf16", "fp8")
    if bf16_weights and training.optimizer_states == "fp32":
        trials = ((s, training.with_changes(optimizer_states=s)) for s in REDUCED_STATES)
        found = next(_fits(i, layout, trials, profile, stated), None)
        if found is not None:
            notes.append(
                f"stated inputs need {rep.peak_memory_gib:.1f} GiB of "
                f"{rep.usable_memory_gib:.1f}: schema 1 cannot state the optimizer's state "
                f"dtypes; costed with optimizer_states {found[0]}, the largest that fits"
            )
            return found[1], {"optimizer_states": found[0]}, ()
    got, offload = _offloaded(rep, i, layout, training, profile, notes)
    if offload is not None:
        return got, {"offload_layers": offload}, ()
    got, change, others = _recomputed(rep, i, layout, training, profile, notes, stated)
    if change is not None:
        return got, change, others
    return (*_host_offloaded(rep, i, layout, training, profile, notes, stated), ())


# host-memory savers a DeepSpeed stack runs (capabilities.optimizer_offload, checkpoint_offload)
# that schema 1 cannot state: ZeRO-Offload's optimizer on the CPU, then full-recompute
# checkpoints in host memory as well
HOST_OFFLOAD_TRIALS: tuple[dict[str, bool], ...] = (
    {"optimizer_offload": True},
    {"optimizer_offload": True, "checkpoint_offload": True},
)


def _host_offloaded(
    rep: Any,
    i: CaseInputs,
    layout: Layout,
    training: Training,
    profile: Any,
    notes: list[str],
    stated: frozenset[str] = frozenset(),
) -> tuple[Any, dict[str, Any] | None]:
    """The fallback after every recompute level: the ZeRO-Offload a DeepSpeed run may have used
    (DeepSpeed's Azure blog runs of 1T-2T models on 1,024 A100s offload the optimizer and the
    checkpoints), at the lightest recompute level that then fits (checkpoints in host memory
    only with full recompute); else ``rep`` unchanged."""
    levels = RECOMPUTE_LEVELS[RECOMPUTE_LEVELS.index(training.recompute) :]
    trials = []
    for level in levels:
        at = _at_recompute(i, training, level) if level != training.recompute else training
        for flags in HOST_OFFLOAD_TRIALS:
            if flags.get("checkpoint_offload") and level != "full":
                continue
            label = ", ".join(flags) + (
                f", recompute {level}" if level != training.recompute else ""
            )
            trials.append((label, at.with_changes(**flags), {**flags, "recompute": level}))
    by_label = {label: change for label, _, change in trials}
    pairs = ((lb, t) for lb, t, _ in trials)
    found = next(_fits(i, layout, pairs, profile, stated), None)
    if found is None:
        return rep, None
    notes.append(
        f"stated inputs need {rep.peak_memory_gib:.1f} GiB of {rep.usable_memory_gib:.1f} and "
        f"no recompute level fits: schema 1 cannot state host offload; costed with {found[0]}, "
        "the first that fits"
    )
    return found[1], by_label[found[0]]


def _fits(
    i: CaseInputs,
    layout: Layout,
    trials: Iterable[tuple[str, Training]],
    profile: Any,
    stated: frozenset[str] = frozenset(),
) -> Iterator[tuple[str, Any]]:
    """Each ``(label, report)`` of ``trials``, in order, whose step fits in memory and that
    asks the case's stack for nothing it cannot run beyond ``stated`` (what the stated inputs
    already asked, costed as given). A trial the cluster cannot cost (host offload where its
    spec has no host memory figures) is skipped, not the case's error."""
    for label, trial in trials:
        if not _violations(i.stack, layout, trial) <= stated:
            continue
        try:
            got = simulate_step(
                i.model, i.cluster, layout, trial, profile, stack=i.stack, enforce_stack=False
            )
        except PlannerError:  # a saver this cluster cannot cost (no host link figures)
            continue
        if got.fits:
            yield label, got


# recompute levels lighter to heavier (Training.recompute): what a schema 1 fallback may raise to
RECOMPUTE_LEVELS: tuple[str, ...] = get_args(Recompute)


def _at_recompute(i: CaseInputs, training: Training, level: str) -> Training:
    """``training`` at recompute ``level`` (selective: with the stack's modules)."""
    trial = training.with_changes(recompute=level, recompute_modules=None)
    if level == "selective" and i.stack is not None:
        modules = training_defaults(i.stack, i.model, trial).get("recompute_modules")
        trial = trial.with_changes(recompute_modules=modules)
    return trial


def _wider_selective(i: CaseInputs, training: Training) -> list[tuple[str, Training]]:
    """``training`` (at recompute selective) with the stack's selective set widened one
    submodule at a time (:func:`planner.stacks.wider_selective`): what a schema 1
    ``selective`` may have re-run, as it cannot state the modules."""
    return [
        (f"selective ({', '.join(m)})", training.with_changes(recompute_modules=m))
        for m in wider_selective(i.stack, i.model, training)
    ]


def _recomputed(
    rep: Any,
    i: CaseInputs,
    layout: Layout,
    training: Training,
    profile: Any,
    notes: list[str],
    stated: frozenset[str] = frozenset(),
) -> tuple[Any, dict[str, Any] | None, tuple[dict[str, Any], ...]]:
    """The recompute fallback (only host offload, :func:`_host_offloaded`, comes after it).
    Schema 1 requires a recompute value even where the source gives none, so a stated
    ``none`` may be the case writer's assumption; a run that trained
    fit. Nor can it state which submodules selective recompute re-runs. Where nothing that
    leaves the recompute as stated fits, the lightest that fits of: selective with the stack's
    modules, that set widened one submodule at a time where the stack takes a module list
    (:func:`_wider_selective`), then full; with a note that says the stated inputs do not fit;
    else ``rep`` unchanged. Also the changes of the other settings that fit."""
    heavier = RECOMPUTE_LEVELS[RECOMPUTE_LEVELS.index(training.recompute) + 1 :]
    trials: list[tuple[str, Training]] = []
    changes: dict[str, dict[str, Any]] = {}
    for level in (training.recompute, *heavier):
        at = training if level == training.recompute else _at_recompute(i, training, level)
        if level != training.recompute:
            trials.append((level, at))
            changes[level] = {"recompute": level}
        if level == "selective":
            for label, trial in _wider_selective(i, at):
                trials.append((label, trial))
                changes[label] = {"recompute": level, "recompute_modules": trial.recompute_modules}
    fit = list(_fits(i, layout, trials, profile, stated))
    if not fit:
        return rep, None, ()
    label, got = fit[0]
    notes.append(
        f"stated inputs need {rep.peak_memory_gib:.1f} GiB of "
        f"{rep.usable_memory_gib:.1f} and nothing schema 1 cannot state makes them fit: "
        f"costed with recompute {label} (stated {training.recompute}), the lightest "
        "that fits; the run trained, so the stated recompute or layout is doubtful"
    )
    return got, changes[label], tuple(changes[other] for other, _ in fit[1:])


def _violations(stack: Any, layout: Layout, training: Training) -> frozenset[str]:
    """What the stack cannot run of ``training``, one message each (no stack: nothing)."""
    if stack is None:
        return frozenset()
    return frozenset(str(e) for e in stack_violations(stack, layout, training))


def _offloaded(
    rep: Any, i: CaseInputs, layout: Layout, training: Training, profile: Any, notes: list[str]
) -> tuple[Any, int | None]:
    """A schema 1 case cannot state activation offload (Megatron-Core's
    ``--cpu-offloading-num-layers``, which the GB200 recipes use): where its stated inputs do
    not fit, the fewest offloaded layers that make them fit, if any (pp 1, no recompute, a
    host link: :mod:`planner.legality`), with a note, and that count; else ``rep`` unchanged
    and None."""
    if layout.pp > 1 or training.recompute != "none" or training.offload_layers:

        def legal(_: int) -> bool:
            return False
    else:

        def legal(n: int) -> bool:
            try:
                check_layout(i.model, i.cluster, layout, training.with_changes(offload_layers=n))
            except PlannerError:
                return False
            return True

    def run(n: int) -> Any:
        return simulate_step(
            i.model,
            i.cluster,
            layout,
            training.with_changes(offload_layers=n),
            profile,
            stack=i.stack,
            enforce_stack=False,
        )

    top = i.model.layers - 1
    if top < 1 or not legal(top) or not run(top).fits:
        return rep, None
    lo, hi = 0, top  # memory falls as layers leave: the fewest that fit, by bisection
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if run(mid).fits else (mid, hi)
    notes.append(
        f"stated inputs need {rep.peak_memory_gib:.1f} GiB of {rep.usable_memory_gib:.1f}: "
        f"schema 1 cannot state activation offload; costed with the fewest offloaded layers "
        f"that fit ({hi})"
    )
    return run(hi), hi


__all__ = [
    "HOST_OFFLOAD_TRIALS",
    "RECOMPUTE_LEVELS",
    "REDUCED_STATES",
    "fitting",
    "with_fallback",
]
