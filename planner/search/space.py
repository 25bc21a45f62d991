"""The one generator of legal layouts, used by every search method.

A candidate is a (gpus, Layout, Training). The structural part (tp, cp, pp, vpp, ep, dp,
micro-batch) is enumerated under the divisibility rules of ``planner.legality.check_layout``
(heads and kv_heads by tp; layers, or layers + embedding + loss, by pp*vpp when interleaving;
global batch by micro_batch*dp; experts by ep; tp within one scale-up domain); the knobs (recompute, ZeRO stage, sequence parallelism, overlap
switches) multiply it. Structural rejections are counted with their reasons.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

from planner.divisors import divisors
from planner.errors import PlannerError
from planner.legality import check_layout
from planner.search.budget import NO_DEADLINE, Deadline
from planner.specs.hardware import Cluster
from planner.specs.layout import Layout, Training
from planner.specs.model import ModelSpec

POW2 = (1, 2, 4, 8, 16, 32, 64, 128)


@dataclass(frozen=True)
class Structure:
    """The structural part of a layout."""

    gpus: int
    tp: int
    cp: int
    pp: int
    vpp: int
    ep: int
    dp: int
    micro_batch: int


@dataclass(frozen=True)
class Knobs:
    """Switches that never break legality."""

    recompute: str
    zero: int
    sequence_parallel: bool
    overlap_tp_comm: bool
    overlap_dp_grad_reduce: bool
    overlap_ep_comm: bool = False


@dataclass
class SearchSpace:
    """What the search may vary; None means "every legal value" for that axis."""

    gpus: tuple[int, ...]
    tp: tuple[int, ...] | None = None
    cp: tuple[int, ...] = (1,)
    pp: tuple[int, ...] | None = None
    vpp: tuple[int, ...] = (1, 2, 3, 4, 6, 8)
    ep: tuple[int, ...] | None = None
    micro_batch: tuple[int, ...] = (1, 2, 4, 8)
    recompute: tuple[str, ...] = ("none", "selective", "full")
    zero: tuple[int, ...] = (0, 1, 2, 3)
    sequence_parallel: tuple[bool, ...] = (False, True)
    overlap_tp_comm: tuple[bool, ...] = (False, True)
    overlap_dp_grad_reduce: tuple[bool, ...] = (True,)
    overlap_ep_comm: tuple[bool, ...] = (False,)
    rejected: Counter = field(default_factory=Counter)

    def knobs(self) -> list[Knobs]:
        """Every knob combination (sequence parallel / TP overlap only matter with tp > 1)."""
        return [
            Knobs(*k)
            for k in itertools.product(
                self.recompute,
                self.zero,
                self.sequence_parallel,
                self.overlap_tp_comm,
                self.overlap_dp_grad_reduce,
                self.overlap_ep_comm,
            )
        ]


def default_space(
    model: ModelSpec, cluster: Cluster, gpus: tuple[int, ...], seq_len: int
) -> SearchSpace:
    """Axes worth searching for this model: CP for long sequences, EP for MoE."""
    cp = tuple(c for c in (1, 2, 4, 8) if seq_len >= 8192 * c // 2) if seq_len >= 8192 else (1,)
    ep = tuple(e for e in POW2 if model.moe and model.moe.experts % e == 0) if model.moe else (1,)
    overlap_ep = (False, True) if model.moe else (False,)
    return SearchSpace(gpus=gpus, cp=cp or (1,), ep=ep or (1,), overlap_ep_comm=overlap_ep)


def structures(
    model: ModelSpec,
    cluster: Cluster,
    training: Training,
    space: SearchSpace,
    deadline: Deadline = NO_DEADLINE,
) -> Iterator[Structure]:
    """Every legal structure; rejected ones are counted in ``space.rejected`` by reason.

    ``deadline`` is ticked once per structural combination tried (legal or not). The pipeline
    degrees come from :func:`planner.divisors.divisors` (O(sqrt layers), none listed above
    1e12 layers), so no layer count makes the generator loop for long."""
    domain = cluster.spec.scale_up_domain_gpus
    tps = space.tp or tuple(t for t in POW2 if t <= domain)
    # divisors of the layers, and powers of two with an uneven split (Megatron gives the edge
    # stages fewer layers; --account-for-embedding/loss-in-pipeline-split)
    pps = space.pp or tuple(
        sorted(set(divisors(model.layers)) | {p for p in POW2 if p <= model.layers})
    )
    eps = space.ep or (1,)
    rej = space.rejected
    for gpus in space.gpus:
        for tp, cp, pp in itertools.product(tps, space.cp, pps):
            deadline.tick()
            if model.heads % tp or (model.mla is None and model.n_kv_heads % tp):
                rej["tp does not divide heads or kv_heads"] += 1
                continue
            if tp > domain:
                rej["tp spans more than one scale-up domain"] += 1
                continue
            if gpus % (tp * cp * pp):
                rej["tp*cp*pp does not divide the GPU count"] += 1
                continue
            if cp > 1 and training.seq_len % (2 * cp):
                rej["seq_len not divisible by 2*cp"] += 1
                continue
            dp = gpus // (tp * cp * pp)
            for vpp, ep, mb in itertools.product(space.vpp, eps, space.micro_batch):
                deadline.tick()
                if vpp > 1 and (
                    pp == 1 or (model.layers % (pp * vpp) and (model.layers + 2) % (pp * vpp))
                ):
                    rej["layers (+ embedding and loss) not divisible by pp*vpp"] += 1
                    continue
                if ep > 1 and (model.moe is None or model.moe.experts % ep or (tp * dp * cp) % ep):
                    rej["ep does not divide experts or tp*dp*cp"] += 1
                    continue
                if training.global_batch % (mb * dp):
                    rej["global batch not divisible by micro_batch*dp"] += 1
                    continue
                yield Structure(gpus, tp, cp, pp, vpp, ep, dp, mb)


def make_candidate(s: Structure, k: Knobs, training: Training) -> tuple[Layout, Training]:
    """The Layout and Training of one structure and knob setting."""
    layout = Layout(
        tp=s.tp,
        pp=s.pp,
        dp=s.dp,
        cp=s.cp,
        ep=s.ep,
        vpp=s.vpp if s.vpp > 1 else None,
        sequence_parallel=k.sequence_parallel and s.tp > 1,
        zero=k.zero,
        overlap_tp_comm=k.overlap_tp_comm and s.tp > 1,
        overlap_dp_grad_reduce=k.overlap_dp_grad_reduce,
        overlap_ep_comm=k.overlap_ep_comm and s.ep > 1 and (s.pp == 1 or s.vpp > 1),
    )
    tr = training.model_copy(update={"micro_batch": s.micro_batch, "recompute": k.recompute})
    return layout, tr


def legal_layouts(
    model: ModelSpec,
    cluster: Cluster,
    training: Training,
    space: SearchSpace,
    deadline: Deadline = NO_DEADLINE,
) -> Iterator[tuple[int, Layout, Training]]:
    """(gpus, layout, training) for every legal candidate, each distinct one once.

    Knobs that cannot matter (sequence parallelism or TP overlap at tp = 1) are collapsed so the
    same layout is never produced twice. Two structures never give the same layout, so only the
    candidates of one structure are remembered (memory stays flat however large the space).
    ``deadline`` is ticked once per candidate (and per structure tried).
    """
    knobs = space.knobs()
    for s in structures(model, cluster, training, space, deadline):
        seen: set = set()
        for k in knobs:
            deadline.tick()
            layout, tr = make_candidate(s, k, training)
            key = (s.gpus, layout, tr)
            if key in seen:
                continue
            seen.add(key)
            yield s.gpus, layout, tr


def assert_legal(
    model: ModelSpec, cluster: Cluster, gpus: int, layout: Layout, training: Training
) -> None:
    """The generator's output passes the one validator (used by the tests)."""
    try:
        check_layout(model, cluster, layout, training, gpus=gpus)
    except PlannerError as exc:  # pragma: no cover - a generator bug
        raise AssertionError(f"generator produced an illegal layout: {exc}") from exc
