"""Stage costs: the layers of each pipeline rank plus its edge work, parameters and DP traffic.

The named stages of ``simulate_step`` between the layer costs and the pipeline: the edges
(embedding on the first rank, logits + loss and MTP on the last), the parameters each rank
holds, the data-parallel traffic, and the per-micro-batch seconds of every rank by category.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from planner.costs import comms, compute, elementwise, flops, host_offload, memory, pipeline
from planner.profile import CalibrationProfile
from planner.schedules import Schedule, schedule_of
from planner.simulate.layers import (
    LAYER_KEYS,
    LayerCosts,
    layer_costs,
    layer_params_per_gpu,
    mean_costs,
)
from planner.specs.blocks import LayerSpec
from planner.specs.hardware import Cluster
from planner.specs.layout import Layout, Training
from planner.specs.model import ModelSpec

if TYPE_CHECKING:
    from planner.simulate.data_parallel import DataParallel

T = TypeVar("T")


@dataclass(slots=True)
class Context:
    """The specs of one simulation and what every stage derives from them once."""

    model: ModelSpec
    cluster: Cluster
    layout: Layout
    training: Training
    profile: CalibrationProfile
    dev: compute.Device
    fabric: comms.Fabric
    groups: comms.Groups
    microbatches: int
    tokens: float  # per GPU per micro-batch
    vpp: int  # model chunks per rank
    schedule: Schedule
    shared: dict | None = None  # kernel costs shared between layouts (layers.layer_costs)

    @property
    def both_ends(self) -> bool:
        """Whether one rank holds the embedding and the loss (no pipeline, or a V)."""
        return self.layout.pp == 1 or self.schedule.placement == "v"


def make_device(
    model: ModelSpec, cluster: Cluster, profile: CalibrationProfile, training: Training
) -> compute.Device:
    """The accelerator under the profile for ``training``'s precision, kernels and execution."""
    return compute.make_device(
        cluster.accelerator,
        profile,
        training.precision,
        training.attention_kernel,
        "layernorm" if model.activation == "gelu" else "rmsnorm",
        training.execution,
    )


def make_groups(layout: Layout, fabric: comms.Fabric) -> comms.Groups:
    """The placement of every parallel group of ``layout`` on ``fabric``'s domains."""
    return comms.place_groups(
        layout.tp,
        layout.cp,
        layout.dp,
        layout.pp,
        layout.ep,
        fabric.domain_gpus,
        layout.expert_tp,
        layout.zero_shard,
    )


def make_context(
    model: ModelSpec,
    cluster: Cluster,
    layout: Layout,
    training: Training,
    profile: CalibrationProfile,
    dev: compute.Device | None = None,
    fabric: comms.Fabric | None = None,
    groups: comms.Groups | None = None,
    shared: dict | None = None,
) -> Context:
    """The Context of one layout; ``dev``, ``fabric`` and ``groups`` when the caller already
    has them (:func:`make_device`, ``comms.make_fabric``, :func:`make_groups`), ``shared`` the
    dict layouts of one search share results in (planner/simulate/batch.py)."""
    dev = dev or make_device(model, cluster, profile, training)
    fabric = fabric or comms.make_fabric(cluster, profile)
    groups = groups or make_groups(layout, fabric)
    m = pipeline.microbatches_per_step(training.global_batch, training.micro_batch, layout.dp)
    tokens = flops.tokens_per_gpu(layout, training)
    return Context(
        model,
        cluster,
        layout,
        training,
        profile,
        dev,
        fabric,
        groups,
        m,
        tokens,
        layout.virtual_stages,
        schedule_of(layout),
        shared,
    )


@dataclass(slots=True)
class Stack:
    """The layer kinds, their costs and the per-layer means."""

    kinds: list[tuple[LayerSpec, float]]  # (kind, share of the layers)
    costs: list[tuple[LayerCosts, float]]
    per_layer: dict[str, float]
    layer_max: int  # layers on the most loaded rank
    act_layer: float  # activation bytes one micro-batch keeps per layer (mean over kinds)


def stage_counts(ctx: Context) -> tuple[int, int, int]:
    """(layers on the first rank, on the last, on the busiest middle rank) of ``ctx``'s layout
    (:func:`planner.costs.pipeline.stage_layer_counts`: stated or the even split)."""
    layout = ctx.layout
    return pipeline.stage_layer_counts(
        ctx.model.layers, layout.pp, layout.first_stage_layers, layout.last_stage_layers
    )


def layer_memory(ctx: Context) -> tuple[list[tuple[LayerSpec, float]], float]:
    """(each layer kind and its share of the layers, the activation bytes one micro-batch keeps
    per layer, the mean over the kinds): what the memory peak needs of the layers."""
    model, layout, training = ctx.model, ctx.layout, ctx.training
    kinds = [(layer, count / model.layers) for layer, count in model.layer_kinds()]
    act_layer = sum(
        w * memory.layer_activation_bytes(model, layout, training, layer) for layer, w in kinds
    )
    return kinds, act_layer


def layer_stack(
    ctx: Context, kinds_memory: tuple[list[tuple[LayerSpec, float]], float] | None = None
) -> Stack:
    """Each layer kind costed once and weighted by its count. ``kinds_memory``:
    :func:`layer_memory`'s result when the caller has it."""
    model, layout, training = ctx.model, ctx.layout, ctx.training
    kinds, act_layer = kinds_memory or layer_memory(ctx)
    costs = [
        (
            layer_costs(
                model, layout, training, layer, ctx.dev, ctx.fabric, ctx.groups, ctx.shared
            ),
            w,
        )
        for layer, w in kinds
    ]
    return Stack(
        kinds,
        costs,
        mean_costs(costs),
        max(stage_counts(ctx)),
        act_layer,
    )


@dataclass(slots=True)
class Edges:
    """Per-micro-batch seconds of the first rank's embedding and the last rank's head."""

    emb_s: float
    logits_s: float  # logits GEMM forward + backward and the loss
    logits_f: float  # its forward part (GEMM forward, half the loss traffic)
    mtp: dict[str, float]  # MTP modules by category (forward + backward)
    mtp_f: dict[str, float]  # their forward parts


def edge_costs(ctx: Context, stack: Stack) -> Edges:
    """First-rank embedding, last-rank logits + loss and multi-token-prediction modules."""
    model, layout, training, dev = ctx.model, ctx.layout, ctx.training, ctx.dev
    logit = flops.logits_gemm(model, layout, training)
    lg_f, lg_b = compute.gemms_time_s((logit,), dev)
    loss_s = (
        elementwise.logits_loss_bytes(
            model,
            layout,
            ctx.tokens,
            training.act_bytes,
            training.cross_entropy,
            flops.padded_vocab(model, layout, training),
        )
        / dev.xent_bytes_per_s
    )
    logits_s = lg_f + lg_b + loss_s
    mtp: dict[str, float] = {}
    mtp_f: dict[str, float] = {}
    if model.mtp_layers:
        # each multi-token-prediction module: one more layer of the last kind, an h x 2h
        # projection and its own logits + loss, on the last stage (DeepSeek-V3 section 2.2)
        last = next(
            c
            for (layer, _), (c, _w) in zip(stack.kinds, stack.costs, strict=True)
            if layer == stack.kinds[-1][0]
        )
        proj = flops.Gemm("mtp_proj", ctx.tokens, model.hidden / layout.tp, 2 * model.hidden)
        proj_f, proj_b = compute.gemms_time_s((proj,), dev)
        n = model.mtp_layers
        mtp = {
            "compute_gemm": n * (last.gemm + proj_f + proj_b),
            "compute_attention": n * last.attention,
            "compute_memory_bound": n * last.memory_bound,
            "compute_logits_loss": n * logits_s,
            "tp_comm": n * last.tp,
            "ep_comm": n * last.ep,
            "cp_comm": n * last.cp,
            "recompute": n * last.recompute,
            "host_overhead": n * last.host,
        }
        mtp_f = {
            "compute_gemm": n * (last.gemm_f + proj_f),
            "compute_attention": n * last.attention_f,
            "compute_memory_bound": n * last.memory_bound_f,
            "compute_logits_loss": n * (lg_f + loss_s / 2.0),
            "tp_comm": n * last.tp_f,
            "ep_comm": n * last.ep_f,
            "cp_comm": n * last.cp_f,
            "host_overhead": n * last.host_f,
        }
    emb_s = 3.0 * ctx.tokens * model.hidden * training.act_bytes / dev.hbm_bytes_per_s
    return Edges(emb_s, logits_s, lg_f + loss_s / 2.0, mtp, mtp_f)


def pp_send_s(ctx: Context) -> float:
    """Pipeline point-to-point per micro-batch: one send forward and one backward per chunk."""
    layout = ctx.layout
    if layout.pp == 1:
        return 0.0
    full = ctx.tokens * ctx.model.hidden * ctx.training.act_bytes
    split = layout.sequence_parallel or layout.pp_scatter_gather
    hop = comms.collective_time_s(
        "send_recv", full / layout.tp if split else full, ctx.groups.pp, ctx.fabric
    )
    if layout.pp_scatter_gather and not layout.sequence_parallel:
        # the receiver rebuilds the full activation from the TP ranks' slices
        hop += comms.collective_time_s("all_gather", full, ctx.groups.tp, ctx.fabric)
    return 2.0 * ctx.vpp * hop


@dataclass(slots=True)
class Params:
    """Parameters held per GPU: on the bottleneck rank's layer count (``stage_layers``, what
    the step's time costs), and each pipeline rank's own (:meth:`rank`, what its memory holds)."""

    stage_layers: float
    dense_layer_params: float  # per layer, averaged over the stack
    expert_layer_params: float
    first_dense: float
    last_dense: float
    stage_experts: float
    # each rank's own layer count (first, last, busiest middle) and what its edges add
    rank_layers: tuple[float, float, float]
    first_extra: float  # dense parameters beyond the layers: the embedding
    last_extra: float  # the head (untied or on another rank) and the MTP modules
    last_extra_experts: float  # the MTP modules' experts

    @property
    def dense(self) -> float:
        return max(self.first_dense, self.last_dense)

    @property
    def local(self) -> float:
        return self.dense + self.stage_experts

    def rank(self, name: str) -> tuple[float, float, float]:
        """(layers, dense parameters, expert parameters) per GPU on the pipeline rank ``name``
        (first, last or middle) of a looped placement, at its own layer count."""
        k = ("first", "last", "middle").index(name)
        n = self.rank_layers[k]
        dense = n * self.dense_layer_params + (self.first_extra, self.last_extra, 0.0)[k]
        experts = n * self.expert_layer_params + (0.0, self.last_extra_experts, 0.0)[k]
        return n, dense, experts


def params_per_gpu(ctx: Context, stack: Stack) -> Params:
    """Dense and expert parameters of the first and last ranks (the embedding and the head on
    the ranks that hold them; both on one rank without a pipeline or with a V)."""
    model, layout = ctx.model, ctx.layout
    stage_layers = float(stack.layer_max)
    dense_layer_params = expert_layer_params = 0.0  # per GPU, averaged over the stack
    for layer, w in stack.kinds:
        dense_k, expert_k = shared_value(
            ctx,
            ("layer_params", layer, layout.tp, layout.ep, layout.expert_tp),
            lambda layer=layer: layer_params_per_gpu(model, layer, layout),
        )
        dense_layer_params += w * dense_k
        expert_layer_params += w * expert_k
    emb_params = flops.padded_vocab(model, layout, ctx.training) * model.hidden / layout.tp
    head = emb_params if (layout.pp > 1 or not model.tied_embeddings) else 0.0
    mtp_dense = mtp_experts = 0.0
    if model.mtp_layers:  # the MTP modules live on the last stage
        mtp_d, mtp_e = layer_params_per_gpu(model, stack.kinds[-1][0], layout)
        mtp_dense = model.mtp_layers * (mtp_d + 2 * model.hidden**2 / layout.tp)
        mtp_experts = model.mtp_layers * mtp_e
    first_dense = stage_layers * dense_layer_params + emb_params
    last_dense = stage_layers * dense_layer_params + head + mtp_dense
    if ctx.both_ends:
        first_dense = stage_layers * dense_layer_params + emb_params * (
            1 if model.tied_embeddings else 2
        )
        first_dense = last_dense = first_dense + mtp_dense
    return Params(
        stage_layers,
        dense_layer_params,
        expert_layer_params,
        first_dense,
        last_dense,
        stage_layers * expert_layer_params + mtp_experts,
        tuple(float(n) for n in stage_counts(ctx)),
        emb_params,
        head + mtp_dense,
        mtp_experts,
    )


def shared_value(ctx: Context, key: tuple, compute: Callable[[], T]) -> T:
    """``compute()``, kept under ``key`` in ``ctx.shared`` when the context has one (the
    layouts of one search share such pure results: planner/simulate/batch.py)."""
    if ctx.shared is None:
        return compute()
    out = ctx.shared.get(key)
    if out is None:
        out = ctx.shared[key] = compute()
    return out


def shared_collective_s(
    ctx: Context, kind: comms.Collective, nbytes: float, group: comms.Placement
) -> float:
    """``comms.collective_time_s`` on ``ctx``'s fabric (shared, :func:`shared_value`)."""
    return shared_value(
        ctx,
        ("collective", kind, nbytes, group),
        lambda: comms.collective_time_s(kind, nbytes, group, ctx.fabric),
    )


def stage_categories(
    n_layers: float, per_layer: dict[str, float], pp_s: float, dp_per_mb: float, edge: dict
) -> dict[str, float]:
    """Seconds of one micro-batch through a rank of ``n_layers`` layers plus ``edge`` work."""
    cats = {
        "compute_gemm": n_layers * per_layer["gemm"],
        "compute_attention": n_layers * per_layer["attention"],
        "compute_memory_bound": n_layers * per_layer["memory_bound"],
        "compute_logits_loss": 0.0,
        "recompute": n_layers * per_layer["recompute"],
        "tp_comm": n_layers * per_layer["tp"],
        "cp_comm": n_layers * per_layer["cp"],
        "ep_comm": n_layers * per_layer["ep"],
        "pp_comm": pp_s,
        "dp_comm": dp_per_mb,
        "host_overhead": n_layers * per_layer["host"],
        "activation_offload": 0.0,
    }
    for key, value in edge.items():
        cats[key] += value
    return cats


def edge_work(ctx: Context, stack: Stack, edges: Edges) -> tuple[dict, dict]:
    """(embedding rank's, head rank's) extra seconds by category, per micro-batch."""
    emb = {"compute_memory_bound": edges.emb_s}
    # activations (offload_layers) or full-recompute checkpoints (checkpoint_offload, every
    # layer) copied to the host and back, what one layer's compute cannot hide of each copy
    offloaded = ctx.training.offload_layers or (
        ctx.model.layers if ctx.training.checkpoint_offload else 0
    )
    if offloaded:
        link = ctx.cluster.accelerator.host_link_gb_per_s
        assert link is not None  # check_layout
        layer = stack.per_layer
        emb["activation_offload"] = offloaded * host_offload.layer_copy_exposed_s(
            stack.act_layer, layer["fwd"], layer["bwd"] + layer["recompute"], link
        )
    head = {"compute_logits_loss": edges.logits_s}
    for key, value in edges.mtp.items():
        head[key] = head.get(key, 0.0) + value
    return emb, head


@dataclass(slots=True)
class RankCosts:
    """Per-micro-batch seconds by category of the distinct ranks, as the step model sums them."""

    stages: list[dict[str, float]]  # first, last, bottleneck middle (loop); both ends, middle (V)
    t_max: float
    t_sum: float
    bottleneck: int  # index into stages


def rank_costs(
    ctx: Context, stack: Stack, emb: dict, head: dict, pp_s: float, dp: DataParallel
) -> RankCosts:
    """The ranks' per-micro-batch seconds, the slowest and their sum over the pipeline.

    The bf16 -> fp32 gradient pass (``dp.hp_layer``, ``dp.hp_table``) adds to each rank's
    memory-bound time its layers' and its vocabulary tables' share: the output head's table on
    the last rank (its own, or the tied copy a pipeline keeps there), the input embedding's on
    the first (with one rank and tied tables, one table)."""
    model, layout, per_layer = ctx.model, ctx.layout, stack.per_layer
    untied = 0.0 if model.tied_embeddings else 1.0

    def stage(n_layers: float, edge: dict, tables: float = 0.0) -> dict[str, float]:
        cats = stage_categories(n_layers, per_layer, pp_s, dp.per_mb, edge)
        cats["compute_memory_bound"] += n_layers * dp.hp_layer + tables * dp.hp_table
        return cats

    if layout.pp == 1:
        stages = [stage(model.layers, {**emb, **head}, 1.0 + untied)]
        t_sum_extra = 0.0
    elif ctx.schedule.placement == "v":
        both = dict(emb)
        for key, value in head.items():
            both[key] = both.get(key, 0.0) + value
        stages = [stage(stack.layer_max, both, 1.0 + untied), stage(stack.layer_max, {})]
        totals = [sum(c.values()) for c in stages]
        k = max(range(2), key=totals.__getitem__)
        return RankCosts(stages, totals[k], totals[0] + (layout.pp - 1) * totals[1], k)
    else:
        first_n, last_n, middle_n = stage_counts(ctx)
        stages = [stage(first_n, emb, 1.0), stage(last_n, head, 1.0)]
        if layout.pp > 2:
            stages.append(stage(middle_n, {}))
            middle = model.layers - first_n - last_n  # over pp - 2 stages
            layer_s = sum(per_layer[k] for k in LAYER_KEYS) + dp.hp_layer
            t_sum_extra = middle * layer_s + (layout.pp - 2) * (pp_s + dp.per_mb)
        else:
            t_sum_extra = 0.0
    totals = [sum(c.values()) for c in stages]
    t_sum = totals[0] + (totals[1] if layout.pp > 1 else 0.0) + t_sum_extra
    if layout.overlap_pp_comm and ctx.schedule.name == "interleaved" and pp_s > 0.0:
        totals = [_hide_pp_hops(c, pp_s, ctx.fabric) for c in stages]  # t_sum keeps the fill's
    k = max(range(len(stages)), key=totals.__getitem__)
    return RankCosts(stages, max(totals), t_sum, k)


def _hide_pp_hops(cats: dict[str, float], pp_s: float, fabric: comms.Fabric) -> float:
    """Overlapped pipeline p2p (interleaved schedule, Megatron-Core ``overlap_p2p_comm``): in
    the steady state each chunk's send and receive run while a neighbouring chunk computes,
    so only the hops' excess over the rank's compute shows, and the hidden part's contention
    (:func:`comms.exposed_time_s`). ``cats`` is updated in place; returns its new total,
    seconds per micro-batch."""
    rest = sum(cats.values()) - pp_s
    cats["pp_comm"] = comms.exposed_time_s(pp_s, rest, fabric)
    return rest + cats["pp_comm"]
