"""Schema 1 readings that need the case costed: what a written field means where the run, as
written, could not have fitted in memory. Each is said in the case's row.

* :func:`sequence_parallel_read`: a written ``sequence_parallel: false`` on a stack whose TP
  shards the sequence by default (:data:`~planner.validate.frameworks.
  SEQUENCE_PARALLEL_BY_DEFAULT`) is read as on where the case does not fit without it.
* :func:`hybrid_shard_read`: a framework name that says hybrid sharding
  (:data:`~planner.validate.frameworks.HYBRID_SHARD_WORDS`) shards the ZeRO state within
  groups (``Layout.dp_shard``): the smallest group of whole scale-up domains (FSDP's
  ``HYBRID_SHARD`` shards within a node by default) in which the case fits, doubling from one
  domain's DP x CP ranks.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from planner.costs import comms
from planner.errors import PlannerError
from planner.simulate import simulate_step
from planner.unknowns import lightest_setting
from planner.validate.cases import Case, CaseV2
from planner.validate.frameworks import HYBRID_SHARD_WORDS, SEQUENCE_PARALLEL_BY_DEFAULT
from planner.validate.inputs import CaseInputs


def schema_1_readings(case: Case | CaseV2, i: CaseInputs, profile: Any) -> CaseInputs:
    """``i`` after the readings of this module (schema 2 cases state every field: ``i``)."""
    if isinstance(case, CaseV2):
        return i
    return hybrid_shard_read(case, sequence_parallel_read(case, i, profile), profile)


def sequence_parallel_read(case: Case, i: CaseInputs, profile: Any) -> CaseInputs:
    """A schema 1 case that writes ``sequence_parallel: false`` with TP under a stack whose TP
    shards the sequence by default (:data:`~planner.validate.frameworks.
    SEQUENCE_PARALLEL_BY_DEFAULT`): where its stated inputs (unstated knobs at their lightest)
    do not fit without sequence parallelism, ``i`` with it on, said in the row (the memory
    fallbacks then start from the stack's default); else ``i``. Schema 1 has no null reading
    of the field that writers use (its example says false); the run happened."""
    if (
        case.layout.sequence_parallel is not False
        or i.layout.tp == 1
        or i.stack.name not in SEQUENCE_PARALLEL_BY_DEFAULT
    ):
        return i
    if _fits_lightest(i, profile):
        return i
    on = replace(i, layout=i.layout.with_changes(sequence_parallel=True))
    on.notes = [
        *i.notes,
        f"layout.sequence_parallel false: {i.stack.name} runs TP {i.layout.tp} with sequence "
        "parallelism by default, and the case does not fit in memory without it: costed on",
    ]
    return on


def _fits_lightest(i: CaseInputs, profile: Any) -> bool:
    """Whether the case fits with its unstated knobs at their lightest setting (False where
    it cannot be costed)."""
    lay, tr, _ = lightest_setting(i.model, i.layout, i.training, i.unstated, i.stack)
    try:
        return simulate_step(
            i.model, i.cluster, lay, tr, profile, stack=i.stack, enforce_stack=False
        ).fits
    except PlannerError:
        return False


def hybrid_shard_read(case: Case, i: CaseInputs, profile: Any) -> CaseInputs:
    """A schema 1 case whose framework name says hybrid sharding, at ZeRO 1-3 over several
    scale-up domains under a stack that runs it: ``i`` with ``dp_shard`` the smallest group of
    whole domains in which the case fits (its unstated knobs at their lightest), else the
    whole DP x CP group; said in the row. Else ``i``."""
    framework, lay = case.framework or "", i.layout
    grid = lay.dp * lay.cp
    per = comms.place(grid, lay.tp, i.cluster.spec.scale_up_domain_gpus).per_domain
    if not HYBRID_SHARD_WORDS.search(framework) or lay.zero == 0 or per >= grid:
        return i
    said = f"framework {framework!r} says hybrid sharding"
    if not i.stack.capabilities.hybrid_shard or grid % per:
        return replace(i, notes=[*i.notes, f"{said}: not costed under {i.stack.name}"])
    shard = per
    while shard < grid:
        trial = replace(i, layout=lay.with_changes(dp_shard=shard))
        if _fits_lightest(trial, profile):
            note = (
                f"{said}: ZeRO state sharded within groups of {shard} DP x CP ranks (whole "
                f"scale-up domains, the smallest that fits), replicated across {grid // shard}"
            )
            return replace(trial, notes=[*i.notes, note])
        shard *= 2
    note = f"{said}: no group smaller than the {grid} DP x CP ranks fits; costed over all"
    return replace(i, notes=[*i.notes, note])
