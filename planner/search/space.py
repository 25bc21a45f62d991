"""The one generator of legal layouts, used by every search method.

A candidate is a (gpus, Layout, Training). The generator enumerates the structural part (tp, cp,
pp, vpp, ep, dp, micro-batch) over the space's domains (tp within one scale-up domain by default,
pp among the divisors of the layers and the powers of two) and multiplies it by the knobs
(recompute, ZeRO stage, sequence parallelism, overlap switches). With pp > 1 the pipeline schedule
is part of the structure: each vpp is paired with the schedules of ``SearchSpace.schedules`` that
run that many chunks (vpp 1: 1f1b, zb-h1, zb-h2; vpp >= 2: interleaved, interleaved-zb; vpp 2:
zbv, dualpipev); a schedule that is the default for its vpp is left unnamed (``None``), so the
default space (the Megatron-LM schedules) proposes exactly the layouts it did before schedules
were a knob. Every legality decision is a
rule's (``planner.legality.SEARCH_RULES``): each rule is checked at the first of three levels
where every field it reads is set: (gpus, tp, cp, pp), then (vpp, ep, micro-batch), then the
knobs. ``SearchSpace.rejected`` counts, per rule name, the distinct candidates it removed (a
rejection at an outer level removes every candidate below it); within a level the first broken
rule in rule order takes the count.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Literal, get_args, get_origin

from planner.divisors import divisors
from planner.errors import PlannerError
from planner.legality import SEARCH_RULES, Candidate, Rule, check_layout
from planner.schedules import SCHEDULES, default_schedule_name
from planner.search.budget import NO_DEADLINE, Deadline
from planner.search.verdicts import UNSEEN, knob_verdicts
from planner.simulate.copying import quick_copy
from planner.specs.hardware import Cluster
from planner.specs.layout import Layout, Training
from planner.specs.model import ModelSpec
from planner.specs.stack import StackSpec

POW2 = (1, 2, 4, 8, 16, 32, 64, 128)
# the schedules Megatron-LM runs (each schedule object knows): the default search knob
MEGATRON_SCHEDULES: tuple[str, ...] = tuple(
    n for n, s in SCHEDULES.items() if s.megatron is not None
)


def parse_schedules(text: str) -> tuple[str, ...]:
    """``all``, ``megatron`` or comma-separated schedule names -> the names, in SCHEDULES order.

    >>> parse_schedules("megatron")
    ('1f1b', 'interleaved')
    >>> parse_schedules("zbv, 1f1b")
    ('1f1b', 'zbv')
    """
    if text.strip() == "all":
        return tuple(SCHEDULES)
    if text.strip() == "megatron":
        return MEGATRON_SCHEDULES
    return check_schedules([n.strip() for n in text.split(",") if n.strip()])


def check_schedules(names: Sequence[str]) -> tuple[str, ...]:
    """``names`` in SCHEDULES order, or PlannerError naming the unknown ones."""
    unknown = [n for n in names if n not in SCHEDULES]
    if unknown or not names:
        raise PlannerError(
            "schedules",
            f"unknown schedule {', '.join(map(repr, unknown))}" if unknown else "no schedule",
            "all, megatron, or names from " + ", ".join(SCHEDULES),
        )
    return tuple(n for n in SCHEDULES if n in names)


def schedule_choices(schedules: Sequence[str], pp: int, vpp: int) -> tuple[str | None, ...]:
    """The ``Structure.schedule`` values paired with (pp, vpp): the schedules of ``schedules``
    that run ``vpp`` chunks per rank (their ``vpp_error``), the default for ``vpp`` as None.
    pp 1 schedules nothing: None only (the other schedule rules are checked per candidate)."""
    if pp == 1:
        return (None,)
    v = vpp if vpp > 1 else None
    default = default_schedule_name(v)
    return tuple(
        None if n == default else n
        for n in SCHEDULES
        if n in schedules and SCHEDULES[n].vpp_error(v) is None
    )


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
    schedule: str | None = None  # Layout.schedule: None is the default for vpp

    @property
    def schedule_name(self) -> str:
        """The schedule this structure runs (its own, else the default for its vpp)."""
        return self.schedule or default_schedule_name(self.vpp)


def field_choices(spec: type[Layout] | type[Training], name: str) -> tuple:
    """Every value of a spec field with finite choices (a ``Literal`` or a bool), in the order
    the spec declares them: the search's axis for that field is the spec's own."""
    annotation = spec.model_fields[name].annotation
    if annotation is bool:
        return (False, True)
    choices = get_args(annotation)
    if get_origin(annotation) is not Literal or not choices:
        raise PlannerError(f"{spec.__name__}.{name}", "not a field with finite choices")
    return choices


@dataclass(frozen=True)
class Knobs:
    """The switches of a candidate (the knob rules of ``SEARCH_RULES`` may reject some); each
    is the Layout or Training field of the same name (a test checks)."""

    recompute: str
    zero: int
    sequence_parallel: bool
    overlap_tp_comm: bool
    overlap_dp_grad_reduce: bool
    overlap_ep_comm: bool = False
    recompute_fraction: float | None = None  # with recompute full; None: every layer


@dataclass
class SearchSpace:
    """What the search may vary; None means "every legal value" for that axis (tp: powers of two
    within one scale-up domain; tp above the domain is never searched). ``schedules``: the
    pipeline schedules the search may pair with a vpp when pp > 1 (default: those Megatron-LM
    runs; ``tuple(planner.schedules.SCHEDULES)`` opens the zero-bubble and V ones). ``rejected``:
    rule name -> candidates that rule removed in the last enumeration (see the module
    docstring)."""

    gpus: tuple[int, ...]
    tp: tuple[int, ...] | None = None
    cp: tuple[int, ...] = (1,)
    pp: tuple[int, ...] | None = None
    vpp: tuple[int, ...] = (1, 2, 3, 4, 6, 8)
    ep: tuple[int, ...] | None = None
    micro_batch: tuple[int, ...] = (1, 2, 4, 8)
    recompute: tuple[str, ...] = field(default_factory=lambda: field_choices(Training, "recompute"))
    zero: tuple[int, ...] = field(default_factory=lambda: field_choices(Layout, "zero"))
    sequence_parallel: tuple[bool, ...] = (False, True)
    overlap_tp_comm: tuple[bool, ...] = (False, True)
    overlap_dp_grad_reduce: tuple[bool, ...] = (True,)
    overlap_ep_comm: tuple[bool, ...] = (False,)
    # shares of the layers full recompute may re-run (Training.recompute_fraction; None: every
    # layer); tried with recompute full only
    recompute_fraction: tuple[float | None, ...] = (None,)
    schedules: tuple[str, ...] = MEGATRON_SCHEDULES
    rejected: Counter = field(default_factory=Counter)

    def knobs(self) -> list[Knobs]:
        """Every knob combination (sequence parallel / TP overlap only matter with tp > 1; a
        recompute share only with full recompute)."""
        return [
            Knobs(*k)
            for k in itertools.product(
                self.recompute,
                self.zero,
                self.sequence_parallel,
                self.overlap_tp_comm,
                self.overlap_dp_grad_reduce,
                self.overlap_ep_comm,
                self.recompute_fraction,
            )
            if k[-1] is None or k[0] == "full"
        ]


def stack_space(space: SearchSpace, stack: StackSpec) -> SearchSpace:
    """``space`` without what ``stack`` cannot run (its ``capabilities``): a parallelism it
    lacks is held at 1, ZeRO stages, recompute granularities and schedules are intersected with
    its own, and TP overlap is only tried where the stack offers it. An axis left empty is a
    PlannerError naming the stack."""
    c = stack.capabilities

    def keep(values: tuple, allowed: tuple, field_name: str) -> tuple:
        kept = tuple(v for v in values if v in allowed)
        if not kept:
            raise PlannerError(
                f"search.{field_name}",
                f"stack {stack.name!r} runs none of {', '.join(map(str, values))}",
                ", ".join(map(str, allowed)),
            )
        return kept

    one = (1,)
    return replace(
        space,
        tp=space.tp if c.tp else one,
        pp=space.pp if c.pp else one,
        cp=space.cp if c.cp else one,
        ep=space.ep if c.ep else one,
        zero=keep(space.zero, c.zero_stages, "zero"),
        recompute=keep(space.recompute, c.recompute, "recompute"),
        schedules=keep(space.schedules, c.schedules, "schedules"),
        sequence_parallel=space.sequence_parallel if c.sequence_parallel else (False,),
        overlap_tp_comm=space.overlap_tp_comm if c.tp_comm_overlap else (False,),
        recompute_fraction=space.recompute_fraction if c.partial_recompute else (None,),
    )


def default_space(
    model: ModelSpec, cluster: Cluster, gpus: tuple[int, ...], seq_len: int
) -> SearchSpace:
    """Axes worth searching for this model: CP for long sequences, EP for MoE."""
    cp = tuple(c for c in (1, 2, 4, 8) if seq_len >= 8192 * c // 2) if seq_len >= 8192 else (1,)
    ep = tuple(e for e in POW2 if model.moe and model.moe.experts % e == 0) if model.moe else (1,)
    overlap_ep = (False, True) if model.moe else (False,)
    return SearchSpace(gpus=gpus, cp=cp or (1,), ep=ep or (1,), overlap_ep_comm=overlap_ep)


# the fields each level of the enumeration sets; every other field is constant within a search
OUTER_FIELDS = frozenset({"gpus", "tp", "cp", "pp", "dp"})
INNER_FIELDS = frozenset({"vpp", "ep", "micro_batch", "schedule"})
KNOB_FIELDS = frozenset(f.name for f in fields(Knobs))


def coarse_space(
    model: ModelSpec,
    cluster: Cluster,
    gpus: tuple[int, ...],
    seq_len: int,
    stack: StackSpec | None = None,
) -> SearchSpace:
    """The default space's structure (TP, PP, CP, EP, DP) with fewer knobs (the app's quick
    searches): micro-batch 1/2, recompute none/selective/full, ZeRO 1 (under a stack without
    it: its lightest sharding), sequence parallelism and TP overlap on, vpp 1/2/4."""
    base = default_space(model, cluster, gpus, seq_len)
    zero = (1,)
    if stack is not None and 1 not in stack.capabilities.zero_stages:
        zero = (min((z for z in stack.capabilities.zero_stages if z), default=0),)
    return SearchSpace(
        gpus=gpus,
        cp=base.cp,
        ep=base.ep,
        micro_batch=(1, 2),
        recompute=("none", "selective", "full"),
        zero=zero,
        sequence_parallel=(True,),
        overlap_tp_comm=(True,),
        vpp=(1, 2, 4),
    )


def rule_levels(rules: Sequence[Rule]) -> tuple[tuple[Rule, ...], ...]:
    """``rules`` split by the level that sets all they read: outer, inner, knobs (rule order)."""

    def level(rule: Rule) -> int:
        return 2 if rule.reads & KNOB_FIELDS else 1 if rule.reads & INNER_FIELDS else 0

    return tuple(tuple(r for r in rules if level(r) == i) for i in range(3))


OUTER_RULES, INNER_RULES, KNOB_RULES = rule_levels(SEARCH_RULES)


def _broken(rules: Sequence[Rule], c: Candidate) -> str | None:
    """Name of the first rule ``c`` breaks."""
    for rule in rules:
        if rule.check(c) is not None:
            return rule.name
    return None


def _collapse(k: Knobs, tp: int, ep: int) -> Knobs:
    """Knobs that cannot matter switched off: sequence parallelism and TP overlap at tp 1, EP
    overlap at ep 1 (so one layout is never produced twice)."""
    if tp > 1 and ep > 1:
        return k
    return replace(
        k,
        sequence_parallel=k.sequence_parallel and tp > 1,
        overlap_tp_comm=k.overlap_tp_comm and tp > 1,
        overlap_ep_comm=k.overlap_ep_comm and ep > 1,
    )


def _distinct_knobs(space: SearchSpace) -> dict[tuple[bool, bool], int]:
    """(tp > 1, ep > 1) -> how many distinct knob settings a structure of that kind has."""
    knobs = space.knobs()
    return {
        (tp > 1, ep > 1): len({_collapse(k, tp, ep) for k in knobs})
        for tp, ep in itertools.product((1, 2), (1, 2))
    }


def structures(
    model: ModelSpec,
    cluster: Cluster,
    training: Training,
    space: SearchSpace,
    deadline: Deadline = NO_DEADLINE,
) -> Iterator[Structure]:
    """Every structure that no outer or inner rule rejects; ``space.rejected`` counts, per rule,
    the candidates (structures times their distinct knob settings) each rejection removed.

    ``deadline`` is ticked once per structural combination tried (legal or not). The pipeline
    degrees come from :func:`planner.divisors.divisors` (O(sqrt layers), none listed above
    1e12 layers), so no layer count makes the generator loop for long."""
    domain = cluster.spec.scale_up_domain_gpus
    tps = tuple(t for t in (space.tp or POW2) if t <= domain)
    # divisors of the layers, and powers of two with an uneven split (Megatron gives the edge
    # stages fewer layers; --account-for-embedding/loss-in-pipeline-split)
    pps = space.pp or tuple(
        sorted(set(divisors(model.layers)) | {p for p in POW2 if p <= model.layers})
    )
    eps = space.ep or (1,)
    knobs = _distinct_knobs(space)
    schedules = check_schedules(space.schedules)
    pairs = {  # pp > 1 -> vpp -> the schedules paired with it
        piped: {v: schedule_choices(schedules, 2 if piped else 1, v) for v in space.vpp}
        for piped in (False, True)
    }
    below_outer = {
        (tp, piped): sum(map(len, pairs[piped].values()))
        * len(space.micro_batch)
        * sum(knobs[tp > 1, ep > 1] for ep in eps)
        for tp in tps
        for piped in (False, True)
    }
    trainings = {mb: training.model_copy(update={"micro_batch": mb}) for mb in space.micro_batch}
    rej = space.rejected
    for gpus in space.gpus:
        for tp, cp, pp in itertools.product(tps, space.cp, pps):
            deadline.tick()
            # unchecked: the world-size rule is what rejects a pp (or dp) past the spec's caps
            dp = max(1, gpus // (tp * cp * pp))
            outer = Layout.model_construct(tp=tp, pp=pp, dp=dp, cp=cp)
            broken = _broken(OUTER_RULES, Candidate(model, cluster, outer, training, gpus))
            if broken:
                rej[broken] += below_outer[tp, pp > 1]
                continue
            for vpp, ep in itertools.product(space.vpp, eps):
                for sched in pairs[pp > 1][vpp]:
                    vpp_or_none = vpp if vpp > 1 else None
                    inner = Layout(
                        tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, vpp=vpp_or_none, schedule=sched
                    )
                    for mb in space.micro_batch:
                        deadline.tick()
                        c = Candidate(model, cluster, inner, trainings[mb], gpus)
                        broken = _broken(INNER_RULES, c)
                        if broken:
                            rej[broken] += knobs[tp > 1, ep > 1]
                            continue
                        yield Structure(gpus, tp, cp, pp, vpp, ep, dp, mb, sched)


def make_candidate(s: Structure, k: Knobs, training: Training) -> tuple[Layout, Training]:
    """The Layout and Training of one structure and knob setting (knobs that cannot matter
    switched off); not checked against the knob rules (see :func:`repaired_candidate`)."""
    k = _collapse(k, s.tp, s.ep)
    return _layout(s, k), _training(s, k, training)


def _layout(s: Structure, k: Knobs) -> Layout:
    """The Layout of a structure and collapsed knobs."""
    return Layout(
        tp=s.tp,
        pp=s.pp,
        dp=s.dp,
        cp=s.cp,
        ep=s.ep,
        vpp=s.vpp if s.vpp > 1 else None,
        schedule=s.schedule,
        **_knob_fields(k),
    )


def _knob_fields(k: Knobs) -> dict:
    """The Layout fields of collapsed knobs (as :func:`_layout` sets them)."""
    return {
        "sequence_parallel": k.sequence_parallel,
        "zero": k.zero,
        "overlap_tp_comm": k.overlap_tp_comm,
        "overlap_dp_grad_reduce": k.overlap_dp_grad_reduce,
        "overlap_ep_comm": k.overlap_ep_comm,
    }


def _training(s: Structure, k: Knobs, training: Training) -> Training:
    share = k.recompute_fraction if k.recompute == "full" else None
    return training.model_copy(
        update={"micro_batch": s.micro_batch, "recompute": k.recompute, "recompute_fraction": share}
    )


def repaired_candidate(
    model: ModelSpec, cluster: Cluster, s: Structure, k: Knobs, training: Training
) -> tuple[Layout, Training]:
    """The candidate of a legal structure and any knobs: each boolean knob a rule rejects is
    switched off (Optuna suggests the knobs independently of the structure)."""
    while True:  # each pass switches one knob off, or raises
        layout, tr = make_candidate(s, k, training)
        c = Candidate(model, cluster, layout, tr, s.gpus)
        v = next((v for v in (r.on(c) for r in KNOB_RULES) if v is not None), None)
        if v is None:
            return layout, tr
        knob = v.field.rpartition(".")[2]
        if getattr(k, knob, None) is not True:  # not a switch: the structure was not legal
            raise v.error()
        k = replace(k, **{knob: False})


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
    # the distinct knob settings of each kind of structure, and each (micro-batch, recompute)
    # Training once: a structure's candidates differ only in these
    distinct = {
        (tp, ep): tuple(dict.fromkeys(_collapse(k, tp, ep) for k in knobs))
        for tp, ep in itertools.product((1, 2), (1, 2))
    }
    fields = {kind: [_knob_fields(k) for k in ks] for kind, ks in distinct.items()}
    verdict = knob_verdicts(model, cluster, KNOB_RULES)
    trainings: dict[tuple, list[Training]] = {}  # (kind, micro-batch) -> each knob's
    known: dict[tuple, str | None] = {}  # (structure's reads, knob) -> the rule broken
    for s in structures(model, cluster, training, space, deadline):
        kind = (min(s.tp, 2), min(s.ep, 2))
        trs = trainings.get((kind, s.micro_batch))
        if trs is None:
            trs = trainings[kind, s.micro_batch] = _trainings(s, distinct[kind], training)
        base = _layout(s, knobs[0]) if knobs else None
        # the knob rules read structure fields (the same for every knob) and knob fields
        # (those of the knob): their verdict is kept per structure reads and knob
        reads = (verdict.layout_reads(base), kind, s.micro_batch, s.gpus)
        for j, update in enumerate(fields[kind]):
            deadline.tick()
            tr = trs[j]
            broken = known.get((reads, j), UNSEEN)
            # the knobs are switches and a ZeRO stage, which the Layout validator does not
            # read (it checks the world size and the schedule's chunk count, the structure's):
            # one validated Layout per structure, copied with each knob setting
            layout = None
            if broken is UNSEEN:
                layout = quick_copy(base, update)
                broken = known[reads, j] = verdict(s.gpus, layout, tr)
            if broken:
                space.rejected[broken] += 1
                continue
            yield s.gpus, layout or quick_copy(base, update), tr


def _trainings(s: Structure, knobs: Sequence[Knobs], training: Training) -> list[Training]:
    """The Training of each knob setting of a structure, one object per (micro-batch,
    recompute, share)."""
    made: dict[tuple[str, float | None], Training] = {}
    for k in knobs:
        if (k.recompute, k.recompute_fraction) not in made:
            made[k.recompute, k.recompute_fraction] = _training(s, k, training)
    return [made[k.recompute, k.recompute_fraction] for k in knobs]


def assert_legal(
    model: ModelSpec, cluster: Cluster, gpus: int, layout: Layout, training: Training
) -> None:
    """The generator's output passes the one validator (used by the tests)."""
    try:
        check_layout(model, cluster, layout, training, gpus=gpus)
    except PlannerError as exc:  # pragma: no cover - a generator bug
        raise AssertionError(f"generator produced an illegal layout: {exc}") from exc
