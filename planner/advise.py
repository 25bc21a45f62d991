"""Advice: the predicted gain of each single lever on a given layout, ranked.

Each lever changes one thing (or one coupled pair, such as TP x2 with PP /2) of the layout or
the training settings, is checked by the legality rules (``planner.legality.RULES``, the ones
``planner.check_layout`` applies) and re-simulated with the same calibration profile as the
baseline. A lever's gain is its change in tokens/s; its memory cost is its change in peak memory
per GPU. Levers whose layout fits in memory come first, then by gain. Levers that break a rule
for this model, batch or accelerator are returned, with that rule's message, only when asked
(``include_unavailable``); levers already in effect are never returned. The schedule levers
(zb-h1, zbv, dualpipev, with pp > 1) say whether Megatron-LM runs the schedule.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from planner.advise_pipeline import (
    Candidate,
    changed_layout,
    changed_training,
    edge_split_lever,
    interleave_levers,
    schedule_levers,
)
from planner.costs import comms
from planner.costs.recompute import block_layers
from planner.errors import PlannerError
from planner.legality import check_layout, first_violation, violations
from planner.profile import CalibrationProfile
from planner.report import StepReport
from planner.specs.base import MAX_MICRO_BATCH
from planner.specs.hardware import Cluster
from planner.specs.layout import Layout, Training
from planner.specs.model import ModelSpec
from planner.specs.stack import StackSpec
from planner.unknowns import RECOMPUTE_FRACTIONS


@dataclass(frozen=True, slots=True)
class Lever:
    """One change to a layout and its predicted effect. Seconds, GiB, tokens per second, percent.

    ``applicable`` False: the change is illegal or unavailable here, ``reason`` says why, and the
    effect fields are None.
    """

    name: str
    description: str
    layout: Layout
    training: Training
    applicable: bool = True
    reason: str = ""
    tokens_per_s: float | None = None
    gain_pct: float | None = None  # change in tokens/s relative to the baseline
    step_time_change_s: float | None = None
    mfu_pct: float | None = None
    peak_memory_gib: float | None = None
    memory_change_gib: float | None = None  # change in peak memory per GPU
    fits: bool | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dictionary (layout and training as their spec dictionaries)."""
        return {
            "name": self.name,
            "description": self.description,
            "applicable": self.applicable,
            "reason": self.reason,
            "tokens_per_s": self.tokens_per_s,
            "gain_pct": self.gain_pct,
            "step_time_change_s": self.step_time_change_s,
            "mfu_pct": self.mfu_pct,
            "peak_memory_gib": self.peak_memory_gib,
            "memory_change_gib": self.memory_change_gib,
            "fits": self.fits,
            "layout": self.layout.model_dump(mode="json"),
            "training": self.training.model_dump(mode="json"),
        }


_RECOMPUTE_FLAGS = {
    "none": "no --recompute-granularity",
    "selective": "--recompute-granularity selective",
    "full": "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1",
}


def _candidates(
    model: ModelSpec, cluster: Cluster, layout: Layout, training: Training
) -> list[Candidate]:
    """Every lever that is not already in effect, illegal ones with their reason."""
    L, T = layout, training
    out: list[Candidate] = []
    if L.pp > 1:
        out += interleave_levers(model, L, T)
        out += schedule_levers(L, T)
    out += _tp_ep_levers(L, T)
    out += _recompute_levers(model, L, T)
    out += _dp_overlap_levers(L, T)
    out += _training_levers(model, T, L)
    out += _zero1_levers(L, T)
    out += _hybrid_shard_levers(cluster, L, T)
    out += _tp_pp_split_levers(model, cluster, L, T)
    return out


def _tp_ep_levers(L: Layout, T: Training) -> list[Candidate]:
    """Sequence parallelism and the TP and EP communication overlaps."""
    out: list[Candidate] = []
    if L.tp > 1 and not L.sequence_parallel:
        out.append(
            Candidate(
                "sequence parallel",
                "shard norms, dropout and the TP-replicated activations over TP "
                "(Megatron --sequence-parallel)",
                changed_layout(L, sequence_parallel=True),
                T,
            )
        )
    if L.tp > 1 and not L.overlap_tp_comm:
        extra = "" if L.sequence_parallel else " with --sequence-parallel (which it requires)"
        out.append(
            Candidate(
                "overlap TP comm",
                f"overlap TP collectives with the GEMMs (Megatron --tp-comm-overlap{extra})",
                changed_layout(L, overlap_tp_comm=True, sequence_parallel=True),
                T,
            )
        )
    if L.ep > 1 and not L.overlap_ep_comm:
        out.append(
            Candidate(
                "overlap EP comm",
                "hide the MoE all-to-all behind another micro-batch's compute "
                "(Megatron-Core --overlap-moe-expert-parallel-comm)",
                changed_layout(L, overlap_ep_comm=True),
                T,
            )
        )
    return out


def _recompute_levers(model: ModelSpec, L: Layout, T: Training) -> list[Candidate]:
    """The other activation-recomputation modes, full recompute of a share of the layers, and
    selective + SP in place of full."""
    out: list[Candidate] = []
    for r in ("selective", "none", "full"):
        if r == T.recompute and T.recompute_share in (0.0, 1.0):
            continue
        out.append(
            Candidate(
                f"recompute {r}",
                f"{r} instead of {T.recompute} activation recomputation ({_RECOMPUTE_FLAGS[r]})",
                L,
                # the modules list belongs to selective recompute only (Training's validator)
                changed_training(
                    T,
                    recompute=r,
                    recompute_fraction=None,
                    **({} if r == "selective" else {"recompute_modules": None}),
                ),
            )
        )
    for share in RECOMPUTE_FRACTIONS:
        if T.recompute == "full" and T.recompute_fraction == share:
            continue
        n, _ = block_layers(model.layers, L.pp, L.virtual_stages, share)
        out.append(
            Candidate(
                f"recompute full on {100 * share:g} %",
                f"full recomputation of {100 * share:g} % of each model chunk's layers, the "
                "others keeping their activations (Megatron --recompute-granularity full "
                f"--recompute-method block --recompute-num-layers {n})",
                L,
                changed_training(
                    T, recompute="full", recompute_fraction=share, recompute_modules=None
                ),
            )
        )
    if T.recompute == "full" and L.tp > 1 and not L.sequence_parallel:
        out.append(
            Candidate(
                "selective recompute + SP",
                "selective instead of full recomputation, with sequence parallelism to pay for "
                "its memory (Korthikanti et al. 2022; Megatron --recompute-granularity selective "
                "--sequence-parallel)",
                changed_layout(L, sequence_parallel=True),
                changed_training(T, recompute="selective"),
            )
        )
    return out


def _dp_overlap_levers(L: Layout, T: Training) -> list[Candidate]:
    """The data-parallel overlaps: gradient reduce and ZeRO-3 parameter gather."""
    out: list[Candidate] = []
    if L.dp * L.cp > 1 and not L.overlap_dp_grad_reduce:
        out.append(
            Candidate(
                "overlap DP grad reduce",
                "overlap the gradient reduce-scatter/all-reduce with backward "
                "(Megatron --overlap-grad-reduce)",
                changed_layout(L, overlap_dp_grad_reduce=True),
                T,
            )
        )
    if L.zero == 3 and not L.overlap_zero3_param_gather:
        out.append(
            Candidate(
                "overlap ZeRO-3 param gather",
                "prefetch the ZeRO-3 parameter all-gather behind compute "
                "(Megatron --overlap-param-gather, FSDP forward/backward prefetch)",
                changed_layout(L, overlap_zero3_param_gather=True),
                T,
            )
        )
    return out


def _training_levers(model: ModelSpec, T: Training, L: Layout) -> list[Candidate]:
    """Training-setting levers: offloading, the loss kernel, FP8 and a doubled micro-batch."""
    out: list[Candidate] = []
    # activation offloading (the rules: pp 1, no recompute, a host link)
    if T.offload_layers == 0 and T.recompute == "none":
        n = model.layers // 2
        out.append(
            Candidate(
                f"offload {n} layers",
                f"offload the activations of {n} layers to host memory "
                f"(Megatron --cpu-offloading --cpu-offloading-num-layers {n})",
                L,
                changed_training(T, offload_layers=n),
            )
        )
    if T.cross_entropy != "in_place":
        out.append(
            Candidate(
                "in-place cross-entropy",
                "online-softmax loss that keeps only the logits and writes their gradient into "
                "them (Megatron --cross-entropy-loss-fusion --cross-entropy-fusion-impl te)",
                L,
                changed_training(T, cross_entropy="in_place"),
            )
        )
    if T.precision in ("bf16", "fp16"):
        out.append(
            Candidate(
                "fp8",
                "FP8 GEMMs with Transformer Engine (Megatron --fp8-format hybrid)",
                L,
                changed_training(T, precision="fp8"),
            )
        )
    mb = 2 * T.micro_batch
    if mb <= MAX_MICRO_BATCH:
        out.append(
            Candidate(
                f"micro-batch {mb}",
                f"micro-batch {mb} instead of {T.micro_batch} (Megatron --micro-batch-size {mb})",
                L,
                changed_training(T, micro_batch=mb),
            )
        )
    return out


def _zero1_levers(L: Layout, T: Training) -> list[Candidate]:
    """ZeRO-1 (the distributed optimizer) where data parallelism exists and it is not in use."""
    if L.zero == 1 or L.dp * L.cp <= 1:
        return []
    return [
        Candidate(
            "ZeRO-1",
            f"ZeRO-1 instead of ZeRO-{L.zero}: shard the optimizer states over DP "
            "(Megatron --use-distributed-optimizer)",
            changed_layout(L, zero=1),
            T,
        )
    ]


def _hybrid_shard_levers(cluster: Cluster, L: Layout, T: Training) -> list[Candidate]:
    """Hybrid sharding within a scale-up domain, where ZeRO shards over DP x CP ranks in
    several domains (the gathers stay on the scale-up fabric; each GPU holds the domain's
    share of the state); full sharding again where hybrid sharding is in use."""
    if L.zero == 0:
        return []
    if L.dp_replicas > 1:
        return [
            Candidate(
                "full sharding",
                f"shard the ZeRO state over all {L.dp * L.cp} DP x CP ranks instead of groups "
                f"of {L.zero_shard} (less memory, wider collectives)",
                changed_layout(L, dp_shard=None),
                T,
            )
        ]
    per = comms.place(L.dp * L.cp, L.tp, cluster.spec.scale_up_domain_gpus).per_domain
    if per >= L.dp * L.cp or (L.dp * L.cp) % per:
        return []
    return [
        Candidate(
            "hybrid sharding",
            f"shard the ZeRO state within each scale-up domain ({per} DP x CP ranks) and "
            f"replicate it across the {L.dp * L.cp // per} domains (HSDP; Megatron "
            f"--num-distributed-optimizer-instances {L.dp * L.cp // per})",
            changed_layout(L, dp_shard=per),
            T,
        )
    ]


def _split_layout(
    model: ModelSpec, cluster: Cluster, L: Layout, T: Training, tp: int, pp: int
) -> Layout:
    """``L`` with tensor/pipeline sizes ``tp``, ``pp``; interleaving dropped if it breaks."""
    lay = changed_layout(
        L,
        tp=tp,
        pp=pp,
        vpp=L.vpp,
        schedule=L.schedule,
        first_stage_layers=None,  # a stated split belongs to the old pipeline depth
        last_stage_layers=None,
        sequence_parallel=L.sequence_parallel and tp > 1,
        overlap_tp_comm=L.overlap_tp_comm and tp > 1,
    )
    if L.vpp and _breaks_pipeline(model, cluster, lay, T):
        lay = changed_layout(lay, vpp=None, schedule=None)  # keep the split, drop interleaving
    return lay


def _tp_pp_split_levers(
    model: ModelSpec, cluster: Cluster, L: Layout, T: Training
) -> list[Candidate]:
    """Tensor/pipeline splits at constant tp*pp: TP x2 with PP /2, and TP /2 with PP x2."""
    out: list[Candidate] = []
    for name, tp, pp in (
        (f"tp{2 * L.tp} pp{L.pp // 2}", 2 * L.tp, L.pp // 2),
        (f"tp{L.tp // 2} pp{2 * L.pp}", L.tp // 2, 2 * L.pp),
    ):
        if tp * pp != L.tp * L.pp or min(tp, pp) < 1:
            continue
        lay = _split_layout(model, cluster, L, T, tp, pp)
        note = ""
        if tp > cluster.spec.scale_up_domain_gpus:
            note = f"; TP {tp} spans more than the {cluster.spec.scale_up_domain_gpus}-GPU NVLink domain"
        if L.vpp and not lay.vpp:
            note += "; interleaving dropped"
        out.append(
            Candidate(
                name,
                f"tp {tp}, pp {pp} instead of tp {L.tp}, pp {L.pp} (Megatron "
                f"--tensor-model-parallel-size {tp} --pipeline-model-parallel-size {pp}){note}",
                lay,
                T,
            )
        )
    return out


def _breaks_pipeline(
    model: ModelSpec, cluster: Cluster, layout: Layout, training: Training
) -> bool:
    """Whether ``layout`` breaks a rule about its (virtual) pipeline stages."""
    fields = ("layout.pp", "layout.vpp", "layout.schedule")
    return any(v.field in fields for v in violations(model, cluster, layout, training))


def _without_host(cluster: Cluster, profile: CalibrationProfile | str | None) -> CalibrationProfile:
    """``profile`` (or the cluster's default) with a free host: kernels replayed from graphs."""
    from planner import default_profile, load_profile

    if profile is None:
        prof = default_profile(cluster)
    elif isinstance(profile, str):
        prof = load_profile(profile)
    else:
        prof = profile
    return prof.with_host_op_us(0.0)


def _cuda_graphs_lever(L: Layout, T: Training) -> Candidate:
    """The layers captured in CUDA graphs: the host no longer binds."""
    return Candidate(
        "CUDA graphs",
        "capture the layers in CUDA graphs so the host no longer issues each kernel "
        "(Megatron --cuda-graph-impl transformer_engine; dropless MoE needs "
        "--moe-pad-expert-input-to-capacity or graph scopes without the experts); "
        "modelled as no host overhead",
        L,
        T,
        no_host=True,
    )


def _rank_key(lever: Lever) -> tuple[int, int, float]:
    if not lever.applicable:
        return (2, 0, 0.0)
    return (0 if lever.fits else 1, 0, -(lever.gain_pct or 0.0))


def advise(
    model: ModelSpec,
    cluster: Cluster,
    layout: Layout,
    training: Training,
    profile: CalibrationProfile | str | None = None,
    *,
    include_unavailable: bool = False,
    baseline: StepReport | None = None,
    stack: StackSpec | None = None,
) -> list[Lever]:
    """The predicted effect of each lever on ``layout``, ranked: levers that fit in memory first,
    then by gain in tokens/s (largest first); unavailable ones last when included.

    ``profile``: as for ``planner.simulate`` (default: the cluster's profile). ``baseline``:
    the layout's own StepReport when the caller already has it. Raises PlannerError when the
    baseline layout itself is illegal. ``stack``: every lever runs under it; one the stack
    cannot run is unavailable, naming the stack.
    """
    from planner import simulate  # planner/__init__ imports the specs this module uses

    check_layout(model, cluster, layout, training)
    base = baseline or simulate(model, cluster, layout, training, profile, stack=stack)
    levers: list[Lever] = []
    try:
        candidates = _candidates(model, cluster, layout, training)
    except ValidationError as exc:  # a derived layout that pydantic rejects: a bug, say so
        raise PlannerError("advise", f"could not build a lever: {exc}") from None
    if base.time_breakdown_s.get("host_overhead", 0.0) > 0.0:
        candidates.append(_cuda_graphs_lever(layout, training))
    edges = edge_split_lever(
        model,
        cluster,
        layout,
        training,
        base,
        lambda lay: simulate(model, cluster, lay, training, profile, stack=stack),
    )
    if edges is not None:
        candidates.append(edges)
    for c in candidates:
        rep: StepReport | None = None
        v = first_violation(model, cluster, c.layout, c.training, gpus=layout.world_size)
        reason = str(v.error()) if v is not None else ""
        if v is None:
            try:
                prof = _without_host(cluster, profile) if c.no_host else profile
                rep = simulate(model, cluster, c.layout, c.training, prof, stack=stack)
            except PlannerError as exc:
                reason = str(exc)
        if rep is None:
            if include_unavailable:
                levers.append(
                    Lever(c.name, c.description, c.layout, c.training, False, reason=reason)
                )
            continue
        levers.append(
            Lever(
                c.name,
                c.description,
                c.layout,
                c.training,
                tokens_per_s=rep.tokens_per_s,
                gain_pct=100.0 * (rep.tokens_per_s / base.tokens_per_s - 1.0),
                step_time_change_s=rep.step_time_s - base.step_time_s,
                mfu_pct=rep.mfu_pct,
                peak_memory_gib=rep.peak_memory_gib,
                memory_change_gib=rep.peak_memory_gib - base.peak_memory_gib,
                fits=rep.fits,
            )
        )
    return sorted(levers, key=_rank_key)
