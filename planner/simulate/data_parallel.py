"""Data-parallel traffic: gradient reduction and ZeRO / FSDP parameter gathers per step.

Where DP communication is costed: :func:`dp_traffic` returns the exposed seconds per
micro-batch and per step for ZeRO 0-3 / FSDP under the layout's overlaps, over the DP x CP
group (experts over their own DP group), with the collectives of
:mod:`planner.costs.comms`. Under hybrid sharding (``Layout.dp_shard``, HSDP) the dense
reduce-scatter and all-gather run within a shard group, and each gradient shard is all-reduced
across the groups.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from planner.costs import comms, elementwise, flops, host_offload, memory
from planner.simulate.stages import Context, Params, Stack, shared_collective_s, shared_value
from planner.specs.layout import Layout, Training
from planner.specs.model import ModelSpec

# Megatron-Core DDP bucket: max(40M, 1M x dp) parameters; the last bucket cannot overlap.
DP_BUCKET_PARAMS = 40e6


@dataclass(slots=True)
class DataParallel:
    """Exposed data-parallel seconds per micro-batch and per step, and what they came from."""

    per_mb: float  # exposed, every micro-batch (ZeRO-2 reduce-scatter, ZeRO-3 traffic)
    per_mb_f: float  # its forward part (ZeRO-3 parameter all-gather)
    step: float  # exposed, once per step (ZeRO 0/1 reduction and gather)
    raw_per_mb: float  # before overlap
    raw_step: float
    # the bf16 -> fp32 gradient-accumulation pass (hp_grad_pass), seconds per micro-batch:
    # of one layer's parameters, and of one vocabulary table (stages.rank_costs places them)
    hp_layer: float = 0.0
    hp_table: float = 0.0


def param_tensors(
    model: ModelSpec, layout: Layout, stage_layers: float, bias: bool = False
) -> float:
    """Parameter tensors a rank of ``stage_layers`` layers holds: each GEMM weight (a routed
    expert's own per local expert) and two norms per layer, at the model's mix of layer kinds,
    plus the embedding, the output head and the final norm. ``bias``: every linear has a bias
    and every norm one too (Megatron's GPT: a layer's 6 tensors become 12)."""
    return stage_layers * layer_param_tensors(model, layout, bias) + (4.0 if bias else 3.0)


def layer_param_tensors(model: ModelSpec, layout: Layout, bias: bool = False) -> float:
    """Parameter tensors of one layer, averaged over the model's layer kinds
    (:func:`param_tensors` without the embedding, head and final norm)."""
    total = per_layer = 0.0
    for layer, count in model.layer_kinds():
        g = flops.layer_flops(model, layout, Training(seq_len=1, global_batch=1), layer).gemms
        per_layer += count * (sum(x.count for x in g) + 2.0)
        total += count
    return per_layer * (2.0 if bias else 1.0) / max(total, 1.0)


def stage_param_tensors(ctx: Context, stage_layers: float) -> float:
    """:func:`param_tensors` of ``ctx``'s layout for a rank of ``stage_layers`` layers, shared
    between the layouts of one search (it reads the model, the EP split and the layer count)."""
    bias = ctx.training.linear_bias
    return shared_value(
        ctx,
        ("param_tensors", ctx.layout.ep, stage_layers, bias),
        lambda: param_tensors(ctx.model, ctx.layout, stage_layers, bias),
    )


def dp_traffic(ctx: Context, stack: Stack, params: Params) -> DataParallel:
    """Gradient reduction and parameter gathers over DP x CP (experts over their group); with
    optimizer offload, each micro-batch also copies its gradient shard to the host during
    backward, and what that backward cannot hide shows (:mod:`planner.costs.host_offload`)."""
    dp = _collectives(ctx, stack, params)
    if elementwise.hp_grad_pass_applies(ctx.layout, ctx.training):
        share = elementwise.grad_pass_share(ctx.training, ctx.microbatches)
        layer_s, table_s = hp_grad_pass(ctx, params)
        dp.hp_layer, dp.hp_table = share * layer_s, share * table_s
    elif elementwise.deferred_accumulation_applies(ctx.layout):
        first_l, later_l, first_t, later_t = deferred_accumulation(ctx, params)
        m = float(ctx.microbatches)
        dp.hp_layer = (first_l + (m - 1.0) * later_l) / m
        dp.hp_table = (first_t + (m - 1.0) * later_t) / m
    if ctx.training.optimizer_offload:
        link = ctx.cluster.accelerator.host_link_gb_per_s
        assert link is not None  # check_layout: optimizer_offload_needs_host
        copy = host_offload.link_copy_s(
            owned_params(ctx, params) * host_offload.GRAD_TO_HOST_BYTES, link
        )
        stage_bwd = params.stage_layers * (stack.per_layer["bwd"] + stack.per_layer["recompute"])
        dp.per_mb += max(0.0, copy - stage_bwd)
        dp.raw_per_mb += copy
    return dp


def deferred_accumulation(ctx: Context, params: Params) -> tuple[float, float, float, float]:
    """(s per layer of the first micro-batch's accumulation pass, of each later one's, s per
    vocabulary table of the first, of each later one) under a deferred gradient sync
    (:func:`planner.costs.elementwise.deferred_accumulation_cost`; the step averages them)."""
    first, later = elementwise.deferred_accumulation_cost(ctx.training)
    (first_l, first_t), (later_l, later_t) = (
        hp_grad_pass(ctx, params, first),
        hp_grad_pass(ctx, params, later),
    )
    return first_l, later_l, first_t, later_t


def hp_grad_pass(
    ctx: Context, params: Params, cost: tuple[float, float] | None = None
) -> tuple[float, float]:
    """(s per layer, s per vocabulary table) of one micro-batch's bf16 -> fp32 gradient
    accumulation (Training.fp32_grad_accumulation_pass; ``elementwise.hp_grad_pass_s``): a
    layer's parameters on this GPU (dense, and its local experts') in its parameter tensors,
    and a TP shard of the padded vocabulary table. Exposed: DeepSpeed's pipeline engine runs it
    after each backward pass, before the gradient is sent on (pipe/engine.py)."""
    model, layout, training, dev = ctx.model, ctx.layout, ctx.training, ctx.dev
    bias = training.linear_bias
    tensors = shared_value(
        ctx,
        ("layer_param_tensors", layout.ep, bias),
        lambda: layer_param_tensors(model, layout, bias),
    )
    per_layer = params.dense_layer_params + params.expert_layer_params
    cost = elementwise.grad_pass_cost(training) if cost is None else cost
    bw, kernel = dev.hbm_bytes_per_s, dev.mem_fixed_s
    layer_s = elementwise.hp_grad_pass_s(per_layer, tensors, bw, kernel, cost)
    table = flops.padded_vocab(model, layout, training) * model.hidden / layout.tp
    table_s = elementwise.hp_grad_pass_s(table, 1.0, bw, kernel, cost)
    return layer_s, table_s


def owned_params(ctx: Context, params: Params) -> float:
    """Parameters whose optimizer state this GPU holds (its ZeRO shard, or all of its own):
    dense parameters sharded over DP x CP, experts over their own data-parallel group."""
    if ctx.layout.zero < 1:
        return params.local
    return params.dense / ctx.layout.zero_shard + params.stage_experts / ctx.layout.expert_dp


def _collectives(ctx: Context, stack: Stack, params: Params) -> DataParallel:
    """:func:`dp_traffic`'s collectives."""
    layout, training, fabric, m = ctx.layout, ctx.training, ctx.fabric, ctx.microbatches
    grad_b = memory.grad_bytes(training)
    dp_group = ctx.groups.dp_cp
    edp_group = comms.place(layout.expert_dp, layout.ep * layout.expert_tp, fabric.domain_gpus)
    per_layer = stack.per_layer
    stage_fwd = params.stage_layers * per_layer["fwd"]
    stage_bwd = params.stage_layers * (per_layer["bwd"] + per_layer["recompute"])
    dense_p = params.dense

    # hybrid sharding (Layout.dp_shard): dense state is sharded within groups of zero_shard
    # ranks; each gradient shard is then all-reduced across the groups that hold it (torchtitan
    # HSDP's replicate dimension, Megatron-Core's inter-instance all-reduce)
    shard_group = ctx.groups.dp_shard if layout.dp_replicas > 1 else dp_group

    def coll(kind: comms.Collective, nbytes_per_param: float, units: float = 1.0) -> float:
        """One of ``units`` equal collectives over the stage's parameters (dense over DP x
        CP or its shard group, experts over their DP group)."""
        return shared_collective_s(
            ctx, kind, dense_p * nbytes_per_param / units, shard_group
        ) + shared_collective_s(
            ctx, kind, params.stage_experts * nbytes_per_param / units, edp_group
        )

    def across(nbytes_per_param: float, units: float = 1.0) -> float:
        """The all-reduce of one of ``units`` equal dense gradient shards across the groups
        holding it (0 without hybrid sharding)."""
        if layout.dp_replicas == 1:
            return 0.0
        shard_b = dense_p * nbytes_per_param / (units * layout.zero_shard)
        return shared_collective_s(ctx, "all_reduce", shard_b, ctx.groups.dp_replicate)

    bucket_frac = min(1.0, DP_BUCKET_PARAMS / max(params.local, 1.0))
    if layout.zero >= 3 and layout.zero3_collectives == "per_tensor_list":
        return _per_tensor_list(ctx, params, coll)
    if layout.zero >= 3:
        # one all-gather and one reduce-scatter per layer and pass: ZeRO-3 / FSDP shard each
        # transformer block as a unit (torchtitan fully_shard per TransformerBlock, FSDP1
        # auto-wrap per block), so every layer pays the collective's latency once
        units = max(params.stage_layers, 1.0)
        ag = units * coll("all_gather", memory.param_gather_bytes(training), units)
        rs = units * (coll("reduce_scatter", grad_b, units) + across(grad_b, units))
        copy_out = 0.0  # seconds per gather of the stage, exposed (the compute stream)
        if layout.zero3_collectives == "per_layer_copy_out":
            copy_out, rs_copy_in = fsdp2_copies_s(ctx, params)
            rs += rs_copy_in  # on the reduce-scatter stream, before its collective
        if not layout.zero3_reshard_after_forward:
            # the stage stays gathered: one all-gather per layer and step (the first forward,
            # prefetched) and one reduce-scatter per layer after the last backward has ended
            # (torch.distributed.pipelining runs FSDP's post-backward by hand then: exposed)
            gather = ag
            if layout.overlap_zero3_param_gather:
                gather = comms.exposed_time_s(ag, stage_fwd, fabric) + ag / units
            return DataParallel(0.0, 0.0, gather + rs + copy_out, 0.0, ag + rs + copy_out)
        raw = 2 * (ag + copy_out) + rs
        if not layout.overlap_zero3_param_gather:
            return DataParallel(raw, ag + copy_out, 0.0, raw, 0.0)
        first_layer = ag / units
        fwd = comms.exposed_time_s(ag, stage_fwd, fabric) + copy_out
        dp_per_mb = fwd + comms.exposed_time_s(ag + rs, stage_bwd, fabric) + copy_out
        dp_per_mb += first_layer
        return DataParallel(dp_per_mb, fwd + first_layer, 0.0, raw, 0.0)
    if layout.zero == 0:
        reduce = coll("all_reduce", grad_b)
        gather = 0.0
    else:
        reduce = coll("reduce_scatter", grad_b) + across(grad_b)
        gather = coll("all_gather", memory.param_gather_bytes(training))
    raw = reduce + gather
    if layout.overlap_dp_grad_reduce:
        reduce = comms.exposed_time_s(reduce, stage_bwd, fabric, bucket_frac)
        gather = comms.exposed_time_s(gather, stage_fwd, fabric, bucket_frac)
    if layout.zero == 2 and m > 1 and layout.zero3_reshard_after_forward:
        # sharded gradients cannot accumulate locally: every micro-batch reduce-scatters its
        # gradients into the shard (ZeRO-2, Rajbhandari et al. 2020, section 5.2); not where
        # the pipeline defers the gradient sync to the last micro-batch (torch.distributed.
        # pipelining under torchtitan's FSDP, Layout.zero3_reshard_after_forward false): once
        return DataParallel(reduce, 0.0, gather, raw - gather, gather)
    return DataParallel(0.0, 0.0, reduce + gather, 0.0, raw)


def _per_tensor_list(
    ctx: Context, params: Params, coll: Callable[[comms.Collective, float, float], float]
) -> DataParallel:
    """ZeRO-3 as DeepSpeed 0.3.x (2021) ran it, all exposed, per micro-batch.

    Read at v0.3.13 (deepspeed/runtime/zero/partition_parameters.py, stage3.py): each
    sub-module's parameters are fetched one tensor at a time (``_allgather_param``), each
    gather after a ``torch.cuda.synchronize()``, so no gather overlaps compute, and the
    sub-module hooks fetch again for the recompute forward under full recompute; gradients are
    reduce-scattered one tensor at a time (``_reduce_scatter_gradient``). Both use PyTorch's
    list-form collectives: one copy kernel per rank to and from the flat NCCL buffer
    (``ctx.dev.mem_fixed_s`` each)."""
    training = ctx.training
    tensors = stage_param_tensors(ctx, params.stage_layers)
    copies = ctx.layout.zero_shard * ctx.dev.mem_fixed_s
    ag = tensors * (coll("all_gather", memory.param_gather_bytes(training), tensors) + copies)
    rs = tensors * (coll("reduce_scatter", memory.grad_bytes(training), tensors) + copies)
    gathers = 2.0 + training.recompute_share  # the recomputed layers gather once more
    return DataParallel(gathers * ag + rs, ag, 0.0, gathers * ag + rs, 0.0)


def fsdp2_copies_s(ctx: Context, params: Params) -> tuple[float, float]:
    """(seconds to copy one gather of the stage's parameters out of the all-gather buffer,
    seconds to copy its gradients into the reduce-scatter buffer), HBM bound.

    FSDP2 (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py; _composable/fsdp before
    torch 2.6): ``foreach_all_gather_copy_out`` waits for the all-gather on the current
    (compute) stream and ``split_with_sizes_copy``-s the flat output into each parameter's
    unsharded tensor, reading and writing every gathered byte; ``foreach_reduce``
    ``_chunk_cat``-s the unsharded gradients into the reduce-scatter input (in the reduce
    dtype) on the reduce-scatter stream. Expert parameters count as dense ones here."""
    training, bw = ctx.training, ctx.dev.hbm_bytes_per_s
    n = params.dense + params.stage_experts
    gather_b = memory.param_gather_bytes(training)
    copy_out = n * 2.0 * gather_b / bw
    rs_in = n * (training.act_bytes + memory.grad_bytes(training)) / bw
    return copy_out, rs_in
