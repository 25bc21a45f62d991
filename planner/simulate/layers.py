"""Layer costs: seconds of one layer for one micro-batch on one GPU, by category and pass.

Each distinct layer kind is costed once (``LayerCosts``) and weighted by its share of the stack
(:func:`mean_costs`). Forward and backward are kept apart, and the backward's weight-gradient
GEMMs (W) apart from the rest (I), for the schedules that run them apart."""

from __future__ import annotations

import operator
from dataclasses import dataclass

from planner.costs import comms, compute, elementwise, flops, fp8, host, recompute
from planner.costs.blocks import mixer_costs
from planner.specs.blocks import LayerSpec, MoEMLP
from planner.specs.layout import Layout, Training
from planner.specs.model import ModelSpec, MoESpec

# With TP communication overlap (Transformer Engine userbuffers), the share of a collective that
# can hide behind the GEMM it feeds; the rest stays exposed (chunk pipeline fill and drain).
TP_OVERLAP_FRACTION = 0.8

# per-layer categories (forward + backward seconds) that a stage multiplies by its layers
LAYER_KEYS = ("gemm", "attention", "memory_bound", "recompute", "tp", "cp", "ep", "host")
# their forward parts, the weight-gradient GEMMs and communication before overlap (read by the
# plan's pass split, planner/plan.py, only when a view or a zero-bubble schedule asks)
PART_KEYS = (
    "gemm_f",
    "attention_f",
    "memory_bound_f",
    "tp_f",
    "cp_f",
    "ep_f",
    "host_f",
    "gemm_w",
    "tp_raw",
    "cp_raw",
    "ep_raw",
)


@dataclass(slots=True)
class LayerCosts:
    """Per-micro-batch seconds of one layer on one GPU, by category (forward + backward)."""

    gemm: float
    attention: float
    memory_bound: float
    tp: float
    cp: float
    ep: float
    recompute: float
    host: float  # GPU idle waiting for the host to issue this layer's ops
    fwd: float  # all forward seconds (for overlap windows)
    bwd: float
    recompute_flops: float = 0.0  # hardware FLOPs re-run by selective recompute
    # forward parts of the categories above and the weight-gradient GEMMs (part of gemm)
    gemm_f: float = 0.0
    attention_f: float = 0.0
    memory_bound_f: float = 0.0
    tp_f: float = 0.0
    cp_f: float = 0.0
    ep_f: float = 0.0
    host_f: float = 0.0
    # communication before overlap, forward + backward (the hidden part is raw - exposed)
    tp_raw: float = 0.0
    cp_raw: float = 0.0
    ep_raw: float = 0.0
    # what the weight-gradient GEMMs are costed from, when first asked for (gemm_w)
    gemms: tuple[flops.Gemm, ...] = ()
    dev: compute.Device | None = None
    imbalance: float = 1.0
    wgrad_fp8: bool = True  # the weight-gradient GEMMs run at the low precision (fp8 recipe)
    weight_s: float | None = None

    @property
    def gemm_w(self) -> float:
        """Seconds of the weight-gradient GEMMs (part of ``gemm``), experts at the busiest
        rank's load."""
        if self.weight_s is None:
            assert self.dev is not None
            experts = tuple(g for g in self.gemms if g.name.startswith("expert_"))
            w = weight_grad_s(self.gemms, self.dev, self.wgrad_fp8)
            if experts:
                w += (self.imbalance - 1.0) * weight_grad_s(experts, self.dev, self.wgrad_fp8)
            self.weight_s = w
        return self.weight_s


def moe_imbalance(model: ModelSpec) -> float:
    """Busiest expert's load over the mean: the configured imbalance, capped by the capacity
    factor when tokens beyond capacity are dropped."""
    if model.moe is None:
        return 1.0
    imb = model.moe.load_imbalance
    if model.moe.capacity_factor is not None:
        imb = min(imb, max(model.moe.capacity_factor, 1.0))
    return imb


def weight_grad_s(
    gemms: tuple[flops.Gemm, ...], dev: compute.Device, wgrad_fp8: bool = True
) -> float:
    """Seconds of the weight-gradient GEMMs of ``gemms`` (the second half of
    ``compute.gemms_time_s``'s backward: dW = X^T dY, a k x m by m x n product)."""
    total = 0.0
    for g in gemms:
        low = compute.low_precision(g, wgrad_fp8)
        align = compute.gemm_alignment(g, dev, low)
        total += g.count * compute.gemm_time_s(g.k, g.n, g.m, dev, low, g.count, align)
    return total


@dataclass(slots=True)
class _Compute:
    """(forward, backward) seconds of a layer's kernels, and what the costs after them need."""

    g_f: float
    g_b: float
    a_f: float
    a_b: float
    e_f: float
    e_b: float
    ex_f: float  # routed experts' GEMMs at mean load
    ex_b: float
    imbalance: float
    is_moe: bool
    attention: bool
    lf: flops.LayerFlops
    ew: elementwise.ElementwiseWork
    core_launches: float  # the token-mixer core's forward kernel launches (host.core_kernels)


def _fused_softmax(model: ModelSpec, layout: Layout, training: Training) -> bool:
    """Whether materialised-score attention runs Megatron's fused softmax kernel (16-bit
    scores of a kernel-friendly shape, :func:`compute.megatron_fused_softmax`)."""
    return training.precision != "fp32" and compute.megatron_fused_softmax(
        training.micro_batch, model.heads / layout.tp, training.seq_len
    )


def _compute(
    model: ModelSpec, layout: Layout, training: Training, layer: LayerSpec, dev: compute.Device
) -> _Compute:
    tokens = flops.tokens_per_gpu(layout, training)
    lf = flops.layer_flops(model, layout, training, layer)
    wgrad_fp8 = fp8.wgrad_fp8(training.fp8_recipe)
    g_f, g_b = compute.gemms_time_s(lf.gemms, dev, wgrad_fp8)
    is_moe = isinstance(layer.mlp, MoEMLP) and model.moe is not None
    imbalance = moe_imbalance(model) if is_moe else 1.0
    # routed experts' GEMM seconds (mean load), forward and backward
    ex_f, ex_b = (
        compute.gemms_time_s(
            tuple(g for g in lf.gemms if g.name.startswith("expert_")), dev, wgrad_fp8
        )
        if is_moe
        else (0.0, 0.0)
    )
    # the slowest EP rank sets the pace: its experts see imbalance x the mean tokens
    g_f += (imbalance - 1.0) * ex_f
    g_b += (imbalance - 1.0) * ex_b
    attention = mixer_costs(layer.mixer).softmax_attention
    fused_softmax = _fused_softmax(model, layout, training)
    if not attention:
        a_f, a_b = compute.attention_time_s(lf.attention_fwd_flops, training.seq_len, dev, 2.0)
    elif training.attention_kernel == "unfused":
        if model.mla:
            d_qk = model.mla.qk_nope_head_dim + model.mla.qk_rope_head_dim
            d_v = model.mla.v_head_dim
        else:
            d_qk = d_v = model.d_head
        a_f, a_b = compute.unfused_attention_time_s(
            tokens,
            training.seq_len,
            model.heads / layout.tp,
            d_qk,
            d_v,
            training.dropout,
            dev,
            fused_softmax,
        )
    else:
        span = compute.attention_span(training.seq_len, getattr(layer.mixer, "window", None))
        a_f, a_b = compute.attention_time_s(
            lf.attention_fwd_flops, span, dev, head_dim=flops.attention_head_dim(model)
        )
    ew = elementwise.layer_elementwise(
        model,
        layout,
        tokens,
        layer,
        lf.gemms,
        training.fp8_recipe if training.precision == "fp8" else None,
        training.dropout,
        training.act_bytes,
        training.unfused_elementwise,
        not (training.fp8_param_gather or training.fp8_weight_cache),  # cast once a step
    )
    e_f, e_b = compute.memory_bound_time_s(ew, dev, elementwise.BACKWARD_BYTES_FACTOR)
    core = host.core_kernels(training.attention_kernel, attention, training.dropout, fused_softmax)
    return _Compute(
        g_f, g_b, a_f, a_b, e_f, e_b, ex_f, ex_b, imbalance, is_moe, attention, lf, ew, core
    )


# the GEMMs whose input gradient the backward TP collective of a block carries: the
# column-parallel linears that read the block's (sequence-parallel) input. Under
# Training.overlap_tp_backward that collective runs under their weight-gradient GEMMs. Routed
# experts are not among them: the MoE token exchange is the dispatcher's, not a linear's.
COLUMN_PARALLEL = {
    "mixer": frozenset({"qkv", "q_proj", "q_down", "kv_down", "lin_qkv", "ssm_in_proj"}),
    "mlp": frozenset({"mlp_fc1", "shared_fc1"}),
}


def _column_wgrad_s(c: _Compute, names: frozenset[str], dev: compute.Device, fp8w: bool) -> float:
    """Seconds of the weight-gradient GEMMs of the column-parallel linears ``names``."""
    return weight_grad_s(tuple(g for g in c.lf.gemms if g.name in names), dev, fp8w)


def _tp_s(
    model: ModelSpec,
    layout: Layout,
    training: Training,
    layer: LayerSpec,
    c: _Compute,
    fabric: comms.Fabric,
    groups: comms.Groups,
    dev: compute.Device,
) -> tuple[float, float, float]:
    """(exposed forward, exposed backward, raw forward + backward) TP seconds.

    One all-reduce per block (mixer, MLP) forward and one backward (or all-gather +
    reduce-scatter pairs with SP, the same bus volume), each over the full [s, b, h] activation
    (Korthikanti et al. 2022, Fig. 5). With ``Training.overlap_tp_backward`` the backward
    collective of each block's column-parallel input (its all-reduce; with SP its
    reduce-scatter, plus the re-gather of the input the weight gradient reads) runs under that
    linear's weight-gradient GEMM (the data-gradient GEMM for the re-gather, taken as long),
    exposed only beyond it and at ``overlap_contention`` while hidden; with SP the all-gather
    of the output gradient before the block's data-gradient GEMMs stays exposed."""
    act_bytes = flops.tokens_per_gpu(layout, training) * model.hidden * training.act_bytes
    if layout.sequence_parallel:
        ag = comms.collective_time_s("all_gather", act_bytes, groups.tp, fabric)
        rs = comms.collective_time_s("reduce_scatter", act_bytes, groups.tp, fabric)
        one = ag + rs
    else:
        ag = 0.0
        rs = one = comms.collective_time_s("all_reduce", act_bytes, groups.tp, fabric)
    blocks = ("mixer",) if layer.mlp.kind == "none" else ("mixer", "mlp")
    tp_f = tp_b = len(blocks) * one
    raw = tp_f + tp_b
    if layout.overlap_tp_comm:
        tp_f = comms.exposed_time_s(tp_f, c.g_f, fabric, 1.0 - TP_OVERLAP_FRACTION)
        tp_b = comms.exposed_time_s(tp_b, c.g_b, fabric, 1.0 - TP_OVERLAP_FRACTION)
    elif training.overlap_tp_backward and layout.tp > 1 and one > 0.0:
        fp8w = fp8.wgrad_fp8(training.fp8_recipe)
        tp_b = 0.0
        for block in blocks:
            window = _column_wgrad_s(c, COLUMN_PARALLEL[block], dev, fp8w)
            tp_b += ag + comms.exposed_time_s(rs, window, fabric)
            tp_b += comms.exposed_time_s(ag, window, fabric)  # the input re-gather (SP)
        raw += len(blocks) * ag
    return tp_f, tp_b, raw


def _cp_s(
    model: ModelSpec,
    layout: Layout,
    training: Training,
    c: _Compute,
    fabric: comms.Fabric,
    groups: comms.Groups,
) -> tuple[float, float, float]:
    """(exposed forward, exposed backward, raw) CP seconds: ring exchange of K and V chunks,
    overlapped with the attention blocks it feeds; the backward also returns dK and dV
    (Megatron-Core / Transformer Engine context parallelism)."""
    if layout.cp == 1 or not c.attention:
        return 0.0, 0.0, 0.0
    if model.mla:
        kv_width = model.heads * (
            model.mla.qk_nope_head_dim + model.mla.qk_rope_head_dim + model.mla.v_head_dim
        )
    else:
        kv_width = 2 * model.kv_dim
    tokens = flops.tokens_per_gpu(layout, training)
    chunk = tokens * kv_width / layout.tp * training.act_bytes
    hop = comms.collective_time_s("send_recv", chunk, groups.cp, fabric)
    cp_f = comms.exposed_time_s((layout.cp - 1) * hop, c.a_f, fabric)
    cp_b = comms.exposed_time_s(2 * (layout.cp - 1) * hop, c.a_b, fabric)
    return cp_f, cp_b, 3 * (layout.cp - 1) * hop


def _ep_s(
    model: ModelSpec,
    layout: Layout,
    training: Training,
    c: _Compute,
    fabric: comms.Fabric,
    groups: comms.Groups,
) -> tuple[float, float, float]:
    """(exposed forward, exposed backward, raw) EP seconds: token dispatch and combine
    all-to-all, forward and backward; the busiest rank receives imbalance x the mean. With
    overlap (Megatron-Core batch-level EP overlap) each all-to-all hides behind the other
    micro-batch's compute of the same layer."""
    if not c.is_moe or layout.ep == 1:
        return 0.0, 0.0, 0.0
    assert model.moe is not None
    tokens = flops.tokens_per_gpu(layout, training)
    seq_split = layout.tp if layout.sequence_parallel else 1
    token_bytes = tokens / seq_split * model.hidden
    # dispatch and combine; FP8 dispatch sends 1 x 128 tiles with their scales
    fp8_tiles = training.fp8_dispatch and training.precision == "fp8"
    dispatch_bytes = fp8.TILE_BYTES if fp8_tiles else training.act_bytes
    remote = _remote_domains(model.moe, training, groups.ep)
    one_way = (
        _dispatch_s(token_bytes * b, model.moe.top_k, remote, groups.ep, fabric)
        for b in (dispatch_bytes, training.act_bytes)
    )
    ep_f = ep_b = c.imbalance * sum(one_way)
    raw = ep_f + ep_b
    if layout.overlap_ep_comm:
        ep_f = comms.exposed_time_s(ep_f, c.g_b + c.a_b, fabric)
        ep_b = comms.exposed_time_s(ep_b, c.g_f + c.a_f, fabric)
    return ep_f, ep_b, raw


def _remote_domains(moe: MoESpec, training: Training, ep: comms.Placement) -> float | None:
    """The other scale-up domains one token reaches under a dispatcher that sends it once per
    domain (deepep; :func:`planner.costs.comms.domains_hit`, the own domain as likely as any);
    None under alltoall, which sends one copy per routed expert."""
    if training.moe_dispatcher == "alltoall":
        return None
    hit = comms.domains_hit(
        moe.experts, moe.top_k, ep.domains, moe.router_groups, moe.router_group_topk
    )
    return hit * (ep.domains - 1) / ep.domains


def _dispatch_s(
    token_bytes: float,
    top_k: int,
    remote: float | None,
    ep: comms.Placement,
    fabric: comms.Fabric,
) -> float:
    """Seconds of one all-to-all of a rank's ``token_bytes`` to its tokens' routed experts:
    one copy per expert (``remote`` None: alltoall), or one per destination domain (deepep,
    :func:`planner.costs.comms.dispatch_time_s`)."""
    if remote is None:
        return comms.collective_time_s("all_to_all", token_bytes * top_k, ep, fabric)
    return comms.dispatch_time_s(token_bytes, top_k, remote, ep, fabric)


def _host_s(
    model: ModelSpec,
    layout: Layout,
    training: Training,
    layer: LayerSpec,
    c: _Compute,
    fwd: float,
    bwd: float,
    ep: tuple[float, float],
    dev: compute.Device,
) -> tuple[float, float]:
    """(forward, backward) seconds the GPU waits where issuing the layer's ops takes longer
    than running them."""
    blocks = 1 if layer.mlp.kind == "none" else 2
    # per block: the all-reduce after its row-parallel linear, or with sequence parallelism
    # the all-gather before its column-parallel linear and the reduce-scatter after
    per_block = 2.0 if layout.sequence_parallel else 1.0
    collectives = (per_block * blocks if layout.tp > 1 else 0.0) + (
        layout.cp - 1.0 if c.attention and layout.cp > 1 else 0.0
    )
    fp8 = training.precision == "fp8"
    ops_f = host.forward_ops(
        c.lf.gemms, c.ew.fwd_kernels, fp8, collectives, c.is_moe, layout.ep, c.core_launches
    )
    if not (c.is_moe and model.moe is not None and model.moe.capacity_factor is None):
        host_f = host.stall_s(fwd, ops_f, dev.host_op_s)
        host_b = host.stall_s(bwd, training.backward_host_ops * ops_f, dev.host_op_s)
        return host_f, host_b
    # dropless: the token counts' device-to-host copy drains the queue once per layer, so the
    # host cannot carry a lead from the GPU-heavy attention into the launch-heavy experts: each
    # side of the sync waits for its own slower party
    ep_f, ep_b = ep
    e_f = c.e_f
    after_bytes = c.ew.mlp_act_bytes + c.ew.expert_bias_bytes  # the expert side's elementwise
    act_f = e_f * (after_bytes / c.ew.fwd_bytes if c.ew.fwd_bytes else 0.0)
    after_f = c.imbalance * c.ex_f + act_f + ep_f
    after_b = c.imbalance * c.ex_b + 2.0 * act_f + ep_b
    ops_x = host.expert_ops(c.lf.gemms, fp8, layout.ep) + c.ew.expert_bias_kernels
    k = training.backward_host_ops
    host_f = host.stall_s(fwd - after_f, ops_f - ops_x, dev.host_op_s) + host.stall_s(
        after_f, ops_x, dev.host_op_s
    )
    host_b = host.stall_s(bwd - after_b, k * (ops_f - ops_x), dev.host_op_s) + host.stall_s(
        after_b, k * ops_x, dev.host_op_s
    )
    return host_f, host_b


# What the kernels of a layer (:func:`_compute`) read of the layout and the training: not the
# recompute, the overlaps, the gradient dtype, the offload or the loss kernel.
COMPUTE_LAYOUT = operator.attrgetter("tp", "cp", "ep", "expert_tp", "sequence_parallel")
COMPUTE_TRAINING = operator.attrgetter(
    "seq_len",
    "micro_batch",
    "precision",
    "attention_kernel",
    "dropout",
    "unfused_elementwise",
    "fp8_recipe",
    "fp8_param_gather",
    "fp8_weight_cache",
)


def layer_costs(
    model: ModelSpec,
    layout: Layout,
    training: Training,
    layer: LayerSpec,
    dev: compute.Device,
    fabric: comms.Fabric,
    groups: comms.Groups,
    shared: dict | None = None,
) -> LayerCosts:
    """The seconds of one layer of kind ``layer`` for one micro-batch on one GPU.

    ``shared``: a dict in which layouts of one model and cluster (and one ``dev``) share the
    kernel costs of the layer (planner/simulate/batch.py); None: costed afresh."""
    if shared is None:
        c = _compute(model, layout, training, layer, dev)
    else:
        key = (layer, COMPUTE_LAYOUT(layout), COMPUTE_TRAINING(training), id(dev))
        c = shared.get(key) or shared.setdefault(key, _compute(model, layout, training, layer, dev))
    tp_f, tp_b, tp_raw = _tp_s(model, layout, training, layer, c, fabric, groups, dev)
    cp_f, cp_b, cp_raw = _cp_s(model, layout, training, c, fabric, groups)
    ep_f, ep_b, ep_raw = _ep_s(model, layout, training, c, fabric, groups)
    fwd = c.g_f + c.a_f + c.e_f + tp_f + cp_f + ep_f
    bwd = c.g_b + c.a_b + c.e_b + tp_b + cp_b + ep_b
    host_f, host_b = _host_s(model, layout, training, layer, c, fwd, bwd, (ep_f, ep_b), dev)
    fwd += host_f
    bwd += host_b
    recompute_s = recompute_flops = 0.0
    if training.recompute == "full":  # the share of the layers re-run (recompute_fraction)
        recompute_s = fwd * training.recompute_share
    elif training.recompute == "selective":
        act = (c.ew.mlp_act_bytes, 0.0) if c.is_moe else (0.0, c.ew.mlp_act_bytes)
        rc = recompute.selective(
            training.selective_modules, c.lf.gemms, dev, c.a_f, c.ew, act, ep_f
        )
        recompute_s = rc.seconds
        recompute_flops = rc.gemm_flops
    return LayerCosts(
        c.g_f + c.g_b,
        c.a_f + c.a_b,
        c.e_f + c.e_b,
        tp_f + tp_b,
        cp_f + cp_b,
        ep_f + ep_b,
        recompute_s,
        host_f + host_b,
        fwd,
        bwd,
        recompute_flops,
        gemm_f=c.g_f,
        attention_f=c.a_f,
        memory_bound_f=c.e_f,
        tp_f=tp_f,
        cp_f=cp_f,
        ep_f=ep_f,
        host_f=host_f,
        tp_raw=tp_raw,
        cp_raw=cp_raw,
        ep_raw=ep_raw,
        gemms=c.lf.gemms,
        dev=dev,
        imbalance=c.imbalance,
        wgrad_fp8=fp8.wgrad_fp8(training.fp8_recipe),
    )


def mean_costs(
    costs: list[tuple[LayerCosts, float]] | tuple,
    keys: tuple[str, ...] = (*LAYER_KEYS, "fwd", "bwd"),
) -> dict[str, float]:
    """Per-layer seconds averaged over layer kinds weighted by their share of the stack."""
    return {k: sum(getattr(c, k) * w for c, w in costs) for k in keys}


def layer_params_per_gpu(model: ModelSpec, layer: LayerSpec, layout: Layout) -> tuple[float, float]:
    """(non-expert, expert) parameters of one layer held by one GPU: TP splits the mixer, the
    dense MLP and shared experts; routed experts split over EP x expert-TP; the router is
    replicated."""
    total, _ = model.layer_params(layer)
    if not isinstance(layer.mlp, MoEMLP) or model.moe is None:
        return total / layout.tp, 0.0
    experts = model.moe.experts * model.mlp_params(model.moe.expert_ffn_hidden)
    router = model.hidden * model.moe.experts
    return (total - experts - router) / layout.tp + router, experts / (layout.ep * layout.expert_tp)
