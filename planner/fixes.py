"""What makes a layout that does not fit in memory fit: the cheapest changes, ranked.

A layout whose peak memory exceeds the usable HBM is a dead end unless the planner says which
changes bring it under. :func:`memory_fixes` tries the memory levers a training engineer turns
first, alone and combined (at most ``MAX_CHANGES`` at once): a higher ZeRO stage (shards
optimizer states, then gradients, then weights over DP), selective then full activation
recomputation (full of a quarter, half or three quarters of the layers first, where the stack
runs it), a smaller micro-batch (more micro-batches per step), a larger TP or PP
degree (DP shrinks to keep the GPU count), fewer layers on the first or the last pipeline rank
(Megatron-Core ``--decoder-first/last-pipeline-num-layers``: each rank holds its own layers'
state and activations, and the first holds the most micro-batches in flight), and host
offloads. Each candidate must be legal
(:func:`planner.legality.first_violation`) and runnable by the stack; it is simulated, and those
that fit are ranked by how many flags change (fewest first), then by tokens/s (most first).
When none fits, :func:`search_command` is the ``planner search`` call that looks further.
"""

from __future__ import annotations

import itertools
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from planner.costs.pipeline import stage_layer_counts, stated_split_error
from planner.errors import PlannerError
from planner.legality import first_violation
from planner.profile import CalibrationProfile
from planner.report import StepReport
from planner.specs.hardware import Cluster
from planner.specs.layout import Layout, Training
from planner.specs.model import ModelSpec
from planner.specs.stack import StackSpec
from planner.unknowns import RECOMPUTE_FRACTIONS

MAX_CHANGES = 3
MAX_FIXES = 3
EDGE_MOVES = 4  # at most this many layers moved off an edge pipeline rank
# what a misfit report says when no candidate of memory_fixes fits (the CLI and the app)
NO_FIX = (
    "No change of ZeRO stage, recompute, micro-batch, TP, PP, the edge ranks' layer counts or host "
    "offload (up to three at once) fits"
)
RECOMPUTE_ORDER = ("none", "selective", "full")


@dataclass(frozen=True, slots=True)
class Fix:
    """One set of flag changes that fits: the flags, and the prediction under them."""

    flags: tuple[str, ...]  # e.g. ("--zero 3", "--recompute full")
    layout: Layout
    training: Training
    tokens_per_s_per_gpu: float
    peak_memory_gib: float
    usable_gib: float

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: flags, tokens/s/GPU, peak GiB, usable GiB, layout and training."""
        return {
            "flags": list(self.flags),
            "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu,
            "peak_memory_gib": self.peak_memory_gib,
            "usable_gib": self.usable_gib,
            "layout": self.layout.model_dump(mode="json"),
            "training": self.training.model_dump(mode="json"),
        }


def _zero_options(layout: Layout) -> list[tuple[str, dict, dict]]:
    return [(f"--zero {z}", {"zero": z}, {}) for z in range(layout.zero + 1, 4)]


def _shard_options(layout: Layout) -> list[tuple[str, dict, dict]]:
    """Wider hybrid-sharding groups (Layout.dp_shard), up to the whole DP x CP group."""
    if layout.dp_replicas == 1:
        return []
    out, shard, grid = [], layout.zero_shard * 2, layout.dp * layout.cp
    while shard <= grid and grid % shard == 0:
        out.append((f"--dp-shard {shard}", {"dp_shard": shard}, {}))
        shard *= 2
    return out


def _modules(recompute: str) -> dict[str, Any]:
    """The module list belongs to selective recompute only (Training's validator)."""
    return {} if recompute == "selective" else {"recompute_modules": None}


def _recompute_options(training: Training) -> list[tuple[str, dict, dict]]:
    """Heavier recompute: the next levels, and full recompute of a larger share of the layers
    (:data:`planner.unknowns.RECOMPUTE_FRACTIONS`; a stack without partial recompute refuses
    those in ``simulate``, so they are never proposed there)."""
    share = training.recompute_share
    start = RECOMPUTE_ORDER.index(training.recompute) + 1
    out = [
        (f"--recompute {r}", {}, {"recompute": r, "recompute_fraction": None} | _modules(r))
        for r in RECOMPUTE_ORDER[start:]
    ]
    if share < 1.0:
        out += [
            (
                f"--recompute full --recompute-fraction {f:g}",
                {},
                {"recompute": "full", "recompute_fraction": f, "recompute_modules": None},
            )
            for f in RECOMPUTE_FRACTIONS
            if f > share
        ]
    if training.recompute == "full" and share < 1.0:  # every layer: the flag unset
        out.append(("--recompute-fraction 1", {}, {"recompute_fraction": None}))
    return out


def _micro_batch_options(training: Training) -> list[tuple[str, dict, dict]]:
    out, mb = [], training.micro_batch // 2
    while mb >= 1:
        out.append((f"--micro-batch {mb}", {}, {"micro_batch": mb}))
        mb //= 2
    return out


def _split_options(layout: Layout) -> list[tuple[str, dict, dict]]:
    """Larger TP (sequence parallel on) or PP, DP shrinking so the GPU count stays."""
    out = []
    for factor in (2, 4, 8):
        if layout.dp % factor:
            break
        dp = layout.dp // factor
        tp = layout.tp * factor
        out.append((f"--tp {tp} --sequence-parallel", {"tp": tp, "dp": dp}, {}))
        out.append((f"--pp {layout.pp * factor}", {"pp": layout.pp * factor, "dp": dp}, {}))
    return out


def _edge_options(layout: Layout, layers: int) -> list[tuple[str, dict, dict]]:
    """Up to ``EDGE_MOVES`` fewer layers on the first rank, on the last, or on both, where the
    other ranks can share the rest evenly (:func:`stated_split_error`); with pp > 1 only."""
    if layout.pp < 2:
        return []
    first, last, _ = stage_layer_counts(
        layers, layout.pp, layout.first_stage_layers, layout.last_stage_layers
    )
    out = []
    for d in range(1, EDGE_MOVES + 1):
        moves = (
            ({"first_stage_layers": first - d}, f"--first-stage-layers {first - d}"),
            ({"last_stage_layers": last - d}, f"--last-stage-layers {last - d}"),
            (
                {"first_stage_layers": first - d, "last_stage_layers": last - d},
                f"--first-stage-layers {first - d} --last-stage-layers {last - d}",
            ),
        )
        for change, flag in moves:
            if min(change.values()) < 1:
                continue
            new_first = change.get("first_stage_layers", layout.first_stage_layers)
            new_last = change.get("last_stage_layers", layout.last_stage_layers)
            if stated_split_error(layers, layout.pp, new_first, new_last) is None:
                out.append((flag, change, {}))
    return out


def _offload_options(training: Training) -> list[tuple[str, dict, dict]]:
    """Host-memory offloads not in use yet (a stack that cannot run one refuses it in
    ``simulate``, so it is never proposed there)."""
    out = []
    if not training.optimizer_offload:
        out.append(("--optimizer-offload", {}, {"optimizer_offload": True}))
    if not training.checkpoint_offload:
        out.append(("--checkpoint-offload", {}, {"checkpoint_offload": True}))
    return out


def _groups(layout: Layout, training: Training, layers: int) -> list[list[tuple[str, dict, dict]]]:
    return [
        _zero_options(layout),
        _shard_options(layout),
        _recompute_options(training),
        _micro_batch_options(training),
        _split_options(layout),
        _edge_options(layout, layers),
        _offload_options(training),
    ]


def _candidates(
    layout: Layout, training: Training, layers: int
) -> Iterator[tuple[tuple[str, ...], Any, Any]]:
    """(flags, layout, training) for every combination of up to MAX_CHANGES groups."""
    groups = _groups(layout, training, layers)
    for n in range(1, MAX_CHANGES + 1):
        for chosen in itertools.combinations(range(len(groups)), n):
            for picks in itertools.product(*(groups[i] for i in chosen)):
                lay: dict = {}
                tr: dict = {}
                for _, dl, dt in picks:
                    lay.update(dl)
                    tr.update(dt)
                if "tp" in lay and lay["tp"] > 1:
                    lay["sequence_parallel"] = True
                new_layout = layout.model_copy(update=lay)
                new_training = training.model_copy(update=tr)
                yield tuple(p[0] for p in picks), new_layout, new_training


def memory_fixes(
    model: ModelSpec,
    cluster: Cluster,
    layout: Layout,
    training: Training,
    profile: CalibrationProfile | str | None = None,
    stack: StackSpec | None = None,
    limit: int = MAX_FIXES,
) -> list[Fix]:
    """Up to ``limit`` changes that make ``layout`` fit, fewest flags first, then fastest."""
    from planner import simulate  # planner/__init__ imports this module's specs first

    found: list[tuple[int, float, Fix]] = []
    seen: set[tuple] = set()
    for flags, lay, tr in _candidates(layout, training, model.layers):
        key = (lay.model_dump_json(), tr.model_dump_json())
        if key in seen:
            continue
        seen.add(key)
        if first_violation(model, cluster, lay, tr, gpus=layout.world_size) is not None:
            continue
        try:
            rep: StepReport = simulate(model, cluster, lay, tr, profile, stack=stack)
        except PlannerError:
            continue
        if not rep.fits:
            continue
        fix = Fix(
            flags,
            lay,
            tr,
            rep.tokens_per_s_per_gpu,
            rep.peak_memory_gib,
            cluster.accelerator.hbm_usable_gib,
        )
        found.append((len(flags), -rep.tokens_per_s_per_gpu, fix))
    found.sort(key=lambda t: (t[0], t[1]))
    return [f for _, _, f in found[:limit]]


def search_command(
    model_arg: str, cluster_arg: str, gpus: int, training: Training, stack_arg: str | None
) -> str:
    """The ``planner search`` command line for the same job (model, cluster, GPUs, batch)."""
    parts = ["planner", "search", "--model", model_arg, "--cluster", cluster_arg]
    parts += ["--gpus", str(gpus), "--global-batch", str(training.global_batch)]
    parts += ["--seq-len", str(training.seq_len)]
    if stack_arg:
        parts += ["--stack", stack_arg]
    return shlex.join(parts)


__all__ = ["NO_FIX", "Fix", "memory_fixes", "search_command"]
