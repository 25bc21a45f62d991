"""What a pipeline schedule is: its ops, its bubble, its activations in flight.

Vocabulary (torch.distributed.pipelining's letters): an :class:`Op` is one pass of one
micro-batch through one model chunk of a pipeline rank: ``F`` forward, ``B`` full backward
(input and weight gradients in one pass), ``I`` input-gradient backward and ``W``
weight-gradient backward (Qi et al. 2023 call these B and W). A rank holds ``chunks`` model
chunks; chunk ``c`` of rank ``r`` is virtual stage ``c * pp + r`` in the looped placement
(Megatron-LM interleaving) or ``r`` / ``2 pp - 1 - r`` in the V placement (ZB-V, DualPipe-V).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:  # specs import nothing from here; keep it that way at run time
    from planner.specs.layout import Layout, Training
    from planner.specs.model import ModelSpec

OP_KINDS = ("F", "B", "I", "W")
Violation = tuple[str, str, str]  # (field, message, valid values), as PlannerError takes them


@dataclass(frozen=True, slots=True)
class Op:
    """One pass (``kind`` in OP_KINDS) of micro-batch ``mb`` through model chunk ``chunk``."""

    kind: str
    mb: int
    chunk: int


@dataclass(frozen=True, slots=True)
class PassTimes:
    """Seconds of one micro-batch through one model chunk: forward, input-gradient backward,
    weight-gradient backward (communication on the critical path included)."""

    forward_s: float
    input_grad_s: float
    weight_grad_s: float

    @property
    def total_s(self) -> float:
        return self.forward_s + self.input_grad_s + self.weight_grad_s

    def duration_s(self, kind: str) -> float:
        """Seconds of an op of ``kind`` (``B`` is ``I`` and ``W`` in one pass)."""
        if kind == "F":
            return self.forward_s
        if kind == "I":
            return self.input_grad_s
        if kind == "W":
            return self.weight_grad_s
        return self.input_grad_s + self.weight_grad_s


@dataclass(frozen=True, slots=True)
class StageTimes:
    """Per-micro-batch seconds of the pipeline ranks, as the step model sees them.

    ``max_s`` is the slowest rank's time and ``sum_s`` the sum over the ranks (forward plus
    backward of all its chunks); the 1F1B family needs nothing else. ``ranks[r][c]`` splits
    rank r's chunk c into F, I and W, for the schedules that time those apart (empty otherwise).
    """

    max_s: float
    sum_s: float
    ranks: tuple[tuple[PassTimes, ...], ...] = ()

    def rank_total_s(self, rank: int) -> float:
        return sum(p.total_s for p in self.ranks[rank])

    @property
    def bottleneck(self) -> int:
        """The rank with the largest per-micro-batch time (the first on a tie)."""
        totals = [self.rank_total_s(r) for r in range(len(self.ranks))]
        return max(range(len(totals)), key=totals.__getitem__)


Durations = Callable[[int, Op], float]  # (rank, op) -> seconds


class Schedule(ABC):
    """A pipeline schedule. Subclasses set the class attributes and the four methods."""

    name: ClassVar[str]  # the Layout.schedule value
    title: ClassVar[str]
    reference: ClassVar[str]
    # torch.distributed.pipelining get_schedule_class name (torchtitan's
    # pipeline_parallel_schedule); None where neither runs it
    torchtitan: ClassVar[str | None]
    torchtitan_note: ClassVar[str] = ""
    # Megatron-LM arguments that select it (besides the pipeline split); None: not in Megatron-LM
    megatron: ClassVar[tuple[str, ...] | None]
    megatron_note: ClassVar[str] = ""
    placement: ClassVar[str] = "loop"  # "loop" (Megatron interleaving) or "v"
    splits_backward: ClassVar[bool] = False  # backward as separate I and W ops
    needs_pass_times: ClassVar[bool] = False  # bubble_s reads StageTimes.ranks
    # each rank starts its next step as soon as it is done (Qi et al.'s optimizer
    # post-validation): the bubble is the idle inside a rank's window, not since the step began
    tiles_steps: ClassVar[bool] = False

    # ---- the layout -------------------------------------------------------------------------
    def chunks(self, vpp: int | None) -> int:
        """Model chunks per pipeline rank."""
        return vpp or 1

    @abstractmethod
    def vpp_error(self, vpp: int | None) -> str | None:
        """Why ``vpp`` cannot go with this schedule (a Layout field rule), or None."""

    def violation(self, model: ModelSpec, layout: Layout, training: Training) -> Violation | None:
        """(field, message, valid values) when this layout cannot run the schedule, else None."""
        msg = self.vpp_error(layout.vpp)
        if msg:
            return ("layout.schedule", msg, self.valid_vpp)
        return None

    valid_vpp: ClassVar[str] = "vpp 1"

    def virtual_stage(self, rank: int, chunk: int, pp: int) -> int:
        """Index of chunk ``chunk`` of ``rank`` in the model's order of stages."""
        if self.placement == "v":
            return rank if chunk == 0 else 2 * pp - 1 - rank
        return chunk * pp + rank

    # ---- the step ---------------------------------------------------------------------------
    @abstractmethod
    def bubble_s(self, stages: StageTimes, microbatches: int, chunks: int) -> float:
        """Seconds the slowest rank idles in one step beyond ``microbatches`` x its own time."""

    @abstractmethod
    def peak_chunks(self, rank: int, pp: int, chunks: int, microbatches: int) -> int:
        """Micro-batch chunks whose activations ``rank`` holds at its peak (forward done,
        weight gradient not yet)."""

    @abstractmethod
    def orders(self, pp: int, chunks: int, microbatches: int) -> list[list[Op]]:
        """The op order of every rank in one step."""

    def timed(
        self, pp: int, chunks: int, microbatches: int, duration: Durations
    ) -> tuple[list[list[Op]], list[list[float]]]:
        """(orders, start times) when each rank runs its order and an op waits for the op it
        depends on (:func:`planner.schedules.run.run_orders`)."""
        from planner.schedules.run import run_orders

        orders = self.orders(pp, chunks, microbatches)
        starts = run_orders(orders, self, pp, chunks, duration)
        if starts is None:  # pragma: no cover - every order here is deadlock-free (tested)
            raise RuntimeError(f"{self.name}: the op order deadlocks (pp {pp}, m {microbatches})")
        return orders, starts

    def __repr__(self) -> str:
        return f"<schedule {self.name}>"


def needs_pipeline(sched: Schedule, layout: Layout) -> Violation | None:
    """The violation of a schedule that only means something with pp > 1."""
    if layout.pp == 1:
        return (
            "layout.schedule",
            f"schedule {sched.name!r} schedules a pipeline, but pp = 1",
            "pp > 1, or schedule 1f1b",
        )
    return None


def enough_microbatches(
    sched: Schedule, layout: Layout, training: Training, needed: int
) -> Violation | None:
    """The violation of a schedule that needs at least ``needed`` micro-batches per step."""
    per_step = training.micro_batch * layout.dp
    m = training.global_batch // per_step
    if m < needed:
        return (
            "training.global_batch",
            f"schedule {sched.name!r} needs at least {needed} micro-batches per step with "
            f"pp = {layout.pp}; global_batch / (micro_batch x dp) = {m}",
            f"global_batch >= {needed * per_step}",
        )
    return None


def v_split(sched: Schedule, model: ModelSpec, layout: Layout) -> Violation | None:
    """The violation of a V placement whose 2 pp chunks cannot hold equal layer counts."""
    if model.layers % (2 * layout.pp):
        return (
            "layout.pp",
            f"schedule {sched.name!r} places two chunks of layers / (2 pp) on each rank: "
            f"{model.layers} layers do not split into 2 x pp = {2 * layout.pp} chunks",
            f"pp with {model.layers} % (2 pp) == 0",
        )
    return None


def windows_s(
    orders: Sequence[Sequence[Op]], starts: Sequence[Sequence[float]], duration: Durations
) -> list[float]:
    """Each rank's window: from its first op's start to its last op's end, seconds."""
    out = []
    for r, (order, st) in enumerate(zip(orders, starts, strict=True)):
        out.append(st[-1] + duration(r, order[-1]) - st[0] if order else 0.0)
    return out
