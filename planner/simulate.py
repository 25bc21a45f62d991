"""Compose the cost modules into a StepReport for one layout (pure: no I/O)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from planner.costs import comms, compute, elementwise, flops, host, memory, pipeline, recompute
from planner.errors import PlannerError
from planner.legality import check_layout
from planner.profile import CalibrationProfile
from planner.report import StepReport
from planner.specs.blocks import AttentionMixer, LayerSpec, MoEMLP
from planner.specs.hardware import Cluster
from planner.specs.layout import Layout, Training
from planner.specs.model import ModelSpec

# With TP communication overlap (Transformer Engine userbuffers), the share of a collective that
# can hide behind the GEMM it feeds; the rest stays exposed (chunk pipeline fill and drain).
TP_OVERLAP_FRACTION = 0.8
# Megatron-Core DDP bucket: max(40M, 1M x dp) parameters; the last bucket cannot overlap.
DP_BUCKET_PARAMS = 40e6


@dataclass(slots=True)
class _Layer:
    """Per-micro-batch seconds of one layer on one GPU, by category (forward, backward)."""

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


def moe_imbalance(model: ModelSpec) -> float:
    """Busiest expert's load over the mean: the configured imbalance, capped by the capacity
    factor when tokens beyond capacity are dropped."""
    if model.moe is None:
        return 1.0
    imb = model.moe.load_imbalance
    if model.moe.capacity_factor is not None:
        imb = min(imb, max(model.moe.capacity_factor, 1.0))
    return imb


def _layer_costs(
    model: ModelSpec,
    layout: Layout,
    training: Training,
    layer: LayerSpec,
    dev: compute.Device,
    fabric: comms.Fabric,
    groups: comms.Groups,
) -> _Layer:
    tokens = flops.tokens_per_gpu(layout, training)
    lf = flops.layer_flops(model, layout, training, layer)
    g_f, g_b = compute.gemms_time_s(lf.gemms, dev)
    is_moe = isinstance(layer.mlp, MoEMLP) and model.moe is not None
    imbalance = moe_imbalance(model) if is_moe else 1.0
    # routed experts' GEMM seconds (mean load), forward and backward
    ex_f, ex_b = (
        compute.gemms_time_s(tuple(g for g in lf.gemms if g.name.startswith("expert_")), dev)
        if is_moe
        else (0.0, 0.0)
    )
    # the slowest EP rank sets the pace: its experts see imbalance x the mean tokens
    g_f += (imbalance - 1.0) * ex_f
    g_b += (imbalance - 1.0) * ex_b
    attention = isinstance(layer.mixer, AttentionMixer)
    if not attention:
        a_f, a_b = compute.attention_time_s(lf.attention_fwd_flops, training.seq_len, dev, 2.0)
    elif training.attention_kernel == "unfused":
        if model.mla:
            d_qk = model.mla.qk_nope_head_dim + model.mla.qk_rope_head_dim
            d_v = model.mla.v_head_dim
        else:
            d_qk = d_v = model.d_head
        a_f, a_b = compute.unfused_attention_time_s(
            tokens, training.seq_len, model.heads / layout.tp, d_qk, d_v, training.dropout, dev
        )
    else:
        a_f, a_b = compute.attention_time_s(
            lf.attention_fwd_flops, training.seq_len, dev, head_dim=flops.attention_head_dim(model)
        )
    ew = elementwise.layer_elementwise(
        model,
        layout,
        tokens,
        layer,
        lf.gemms,
        training.precision == "fp8",
        training.dropout,
        training.act_bytes,
    )
    e_f, e_b = compute.memory_bound_time_s(ew, dev, elementwise.BACKWARD_BYTES_FACTOR)

    # TP: one all-reduce per block (mixer, MLP) forward and one backward (or all-gather +
    # reduce-scatter pairs with SP, the same bus volume), each over the full [s, b, h]
    # activation (Korthikanti et al. 2022, Fig. 5).
    act_bytes = tokens * model.hidden * training.act_bytes
    if layout.sequence_parallel:
        one = comms.collective_time_s(
            "all_gather", act_bytes, groups.tp, fabric
        ) + comms.collective_time_s("reduce_scatter", act_bytes, groups.tp, fabric)
    else:
        one = comms.collective_time_s("all_reduce", act_bytes, groups.tp, fabric)
    blocks = 1 if layer.mlp.kind == "none" else 2
    tp_f = tp_b = blocks * one
    if layout.overlap_tp_comm:
        tp_f = comms.exposed_time_s(tp_f, g_f, fabric, 1.0 - TP_OVERLAP_FRACTION)
        tp_b = comms.exposed_time_s(tp_b, g_b, fabric, 1.0 - TP_OVERLAP_FRACTION)

    # CP: ring exchange of K and V chunks, overlapped with the attention blocks it feeds; the
    # backward also returns dK and dV (Megatron-Core / Transformer Engine context parallelism).
    cp_f = cp_b = 0.0
    if layout.cp > 1 and attention:
        if model.mla:
            kv_width = model.heads * (
                model.mla.qk_nope_head_dim + model.mla.qk_rope_head_dim + model.mla.v_head_dim
            )
        else:
            kv_width = 2 * model.kv_dim
        chunk = tokens * kv_width / layout.tp * training.act_bytes
        hop = comms.collective_time_s("send_recv", chunk, groups.cp, fabric)
        cp_f = comms.exposed_time_s((layout.cp - 1) * hop, a_f, fabric)
        cp_b = comms.exposed_time_s(2 * (layout.cp - 1) * hop, a_b, fabric)

    # EP: token dispatch and combine all-to-all, forward and backward; the busiest rank
    # receives imbalance x the mean. With overlap (Megatron-Core batch-level EP overlap) each
    # all-to-all hides behind the other micro-batch's compute of the same layer.
    ep_f = ep_b = 0.0
    if is_moe and layout.ep > 1:
        seq_split = layout.tp if layout.sequence_parallel else 1
        routed = tokens / seq_split * model.moe.top_k * model.hidden * training.act_bytes
        ep_f = ep_b = (
            2.0 * imbalance * comms.collective_time_s("all_to_all", routed, groups.ep, fabric)
        )
        if layout.overlap_ep_comm:
            ep_f = comms.exposed_time_s(ep_f, g_b + a_b, fabric)
            ep_b = comms.exposed_time_s(ep_b, g_f + a_f, fabric)

    fwd = g_f + a_f + e_f + tp_f + cp_f + ep_f
    bwd = g_b + a_b + e_b + tp_b + cp_b + ep_b

    # host: the GPU waits where issuing the layer's ops takes longer than running them
    collectives = (2.0 * blocks if layout.tp > 1 else 0.0) + (
        layout.cp - 1.0 if attention and layout.cp > 1 else 0.0
    )
    ops_f = host.forward_ops(
        lf.gemms,
        ew.fwd_kernels,
        training.precision == "fp8",
        collectives,
        is_moe,
        layout.ep,
    )
    if is_moe and model.moe.capacity_factor is None:
        # dropless: the token counts' device-to-host copy drains the queue once per layer, so
        # the host cannot carry a lead from the GPU-heavy attention into the launch-heavy
        # experts: each side of the sync waits for its own slower party
        act_f = e_f * (ew.mlp_act_bytes / ew.fwd_bytes if ew.fwd_bytes else 0.0)
        after_f, after_b = imbalance * ex_f + act_f + ep_f, imbalance * ex_b + 2.0 * act_f + ep_b
        ops_x = host.expert_ops(lf.gemms, training.precision == "fp8", layout.ep)
        k = host.BACKWARD_OP_FACTOR
        host_f = host.stall_s(fwd - after_f, ops_f - ops_x, dev.host_op_s) + host.stall_s(
            after_f, ops_x, dev.host_op_s
        )
        host_b = host.stall_s(bwd - after_b, k * (ops_f - ops_x), dev.host_op_s) + host.stall_s(
            after_b, k * ops_x, dev.host_op_s
        )
    else:
        host_f = host.stall_s(fwd, ops_f, dev.host_op_s)
        host_b = host.stall_s(bwd, host.BACKWARD_OP_FACTOR * ops_f, dev.host_op_s)
    fwd += host_f
    bwd += host_b
    recompute_s = recompute_flops = 0.0
    if training.recompute == "full":
        recompute_s = fwd
    elif training.recompute == "selective":
        act = (ew.mlp_act_bytes, 0.0) if is_moe else (0.0, ew.mlp_act_bytes)
        rc = recompute.selective(training.selective_modules, lf.gemms, dev, a_f, ew, act, ep_f)
        recompute_s = rc.seconds
        recompute_flops = rc.gemm_flops
    return _Layer(
        g_f + g_b,
        a_f + a_b,
        e_f + e_b,
        tp_f + tp_b,
        cp_f + cp_b,
        ep_f + ep_b,
        recompute_s,
        host_f + host_b,
        fwd,
        bwd,
        recompute_flops,
    )


def _layer_params_per_gpu(
    model: ModelSpec, layer: LayerSpec, layout: Layout
) -> tuple[float, float]:
    """(non-expert, expert) parameters of one layer held by one GPU: TP splits the mixer, the
    dense MLP and shared experts; routed experts split over EP x expert-TP; the router is
    replicated."""
    total, _ = model.layer_params(layer)
    if not isinstance(layer.mlp, MoEMLP) or model.moe is None:
        return total / layout.tp, 0.0
    experts = model.moe.experts * model.mlp_params(model.moe.expert_ffn_hidden)
    router = model.hidden * model.moe.experts
    return (total - experts - router) / layout.tp + router, experts / (layout.ep * layout.expert_tp)


_LAYER_KEYS = ("gemm", "attention", "memory_bound", "recompute", "tp", "cp", "ep", "host")


def _mean(costs: list[tuple[_Layer, float]]) -> dict[str, float]:
    """Per-layer seconds averaged over layer kinds weighted by their share of the stack."""
    keys = (*_LAYER_KEYS, "fwd", "bwd")
    return {k: sum(getattr(c, k) * w for c, w in costs) for k in keys}


# Achieved over peak host-link bandwidth: nvbandwidth on 8 x H200 measures 55.4 GB/s
# host-to-device and 55.1 GB/s device-to-host on PCIe Gen5 x16 (63 GB/s; shared/reference
# hardware.md A3).
HOST_LINK_EFFICIENCY = 0.88


def offload_exposed_s(
    act_layer_bytes: float, per_layer: dict[str, float], host_link_gb_per_s: float
) -> float:
    """Exposed seconds of offloading one layer's activations (``act_layer_bytes``), per
    micro-batch.

    Transformer Engine's CPU offload copies layer i's saved tensors to the host while layer
    i + 1 runs forward and brings them back one layer ahead in backward: each copy hides behind
    one layer's compute and the excess shows.
    """
    copy = act_layer_bytes / (host_link_gb_per_s * 1e9 * HOST_LINK_EFFICIENCY)
    return max(0.0, copy - per_layer["fwd"]) + max(0.0, copy - per_layer["bwd"])


def default_assumptions(layout: Layout, training: Training) -> list[str]:
    """Modelling assumptions that apply to this run, printed with the report."""
    kernel = {
        "fused": "fused (flash) attention",
        "flash2": "FlashAttention-2",
        "unfused": "unfused attention (materialised scores)",
    }[training.attention_kernel]
    notes = [
        f"{kernel}; {'with' if training.dropout else 'no'} dropout",
        f"gradient buffer and DP reduction in {training.grad_reduce_dtype}",
        "loss: online-softmax cross-entropy, gradient written into the logits"
        if training.cross_entropy == "in_place"
        else "loss: cross-entropy keeps an fp32 softmax of the logits",
    ]
    if training.offload_layers:
        notes.append(
            f"activations of {training.offload_layers} layers offloaded to host memory; each "
            "copy hides behind one layer's compute"
        )
    if layout.ep > 1:
        notes.append(f"expert tensor parallel size = {layout.expert_tp}; balanced routing")
    if layout.overlap_tp_comm:
        notes.append(f"TP comm overlap hides up to {TP_OVERLAP_FRACTION:.0%} behind GEMMs")
    return notes


def simulate_step(
    model: ModelSpec,
    cluster: Cluster,
    layout: Layout,
    training: Training,
    profile: CalibrationProfile,
    check: bool = True,
) -> StepReport:
    """Predict one optimizer step of ``model`` on ``cluster`` under ``layout``.

    Raises PlannerError for an illegal layout; a legal one that does not fit in memory returns
    a report with ``fits=False`` and the reason in ``feasibility``. Every figure of the report
    is finite: a non-finite one (or an arithmetic overflow) is a PlannerError naming the
    figure and the inputs it comes from, never a report.
    """
    try:
        report = _simulate_step(model, cluster, layout, training, profile, check)
    except (OverflowError, ZeroDivisionError) as exc:
        raise PlannerError(
            "inputs",
            f"the step cannot be costed ({type(exc).__name__}: {exc})",
            "specs and profile within their documented ranges (docs/limits.md)",
        ) from None
    return check_finite(report)


# the inputs each figure is computed from, for the error of a non-finite figure
_FIGURE_INPUTS = {
    "compute": "accelerator peak_tflops and hbm_bandwidth, profile gemm/attention/memory",
    "recompute": "accelerator peak_tflops, profile gemm/attention efficiencies",
    "comm": "cluster bandwidths and latencies, profile comm efficiencies",
    "ep_comm": "model.moe (load_imbalance, capacity_factor), cluster bandwidths, profile comm",
    "host_overhead": "profile host.op_us",
    "activation_offload": "accelerator host_link_gb_per_s",
    "pipeline_bubble": "layout pp/vpp, the per-stage costs",
    "optimizer": "accelerator hbm_bandwidth, profile memory efficiency",
    "memory": "model widths, training seq_len/micro_batch",
}


def _inputs_of(figure: str) -> str:
    name = figure.split(".")[-1]
    for key in (name, name.split("_")[-1], name.split("_")[0]):
        if key in _FIGURE_INPUTS:
            return _FIGURE_INPUTS[key]
    if figure.startswith("memory"):
        return _FIGURE_INPUTS["memory"]
    return "the model, cluster and profile figures"


def check_finite(report: StepReport) -> StepReport:
    """``report`` when every figure is finite, else a PlannerError naming the first
    non-finite figure and the inputs it is computed from."""
    figures = {
        "step_time_s": report.step_time_s,
        "tokens_per_s": report.tokens_per_s,
        "mfu_pct": report.mfu_pct,
        "hfu_pct": report.hfu_pct,
        "model_flops_per_token": report.model_flops_per_token,
        "peak_memory_gib": report.peak_memory_gib,
        "usable_memory_gib": report.usable_memory_gib,
        **{f"time_breakdown_s.{k}": v for k, v in report.time_breakdown_s.items()},
        **{f"memory_breakdown_gib.{k}": v for k, v in report.memory_breakdown_gib.items()},
    }
    if all(math.isfinite(v) for v in figures.values()):
        return report
    # name the breakdown entry first: it points at the mechanism, the totals follow from it
    bad = sorted(
        (k for k, v in figures.items() if not math.isfinite(v)), key=lambda k: "." not in k
    )
    raise PlannerError(
        f"report.{bad[0]}",
        f"the model gives {figures[bad[0]]} (not a finite number); it is computed from "
        f"{_inputs_of(bad[0])}",
        "inputs within their documented ranges (docs/limits.md)",
    )


def _simulate_step(
    model: ModelSpec,
    cluster: Cluster,
    layout: Layout,
    training: Training,
    profile: CalibrationProfile,
    check: bool,
) -> StepReport:
    if check:
        check_layout(model, cluster, layout, training)
    accel = cluster.accelerator
    dev = compute.make_device(
        accel,
        profile,
        training.precision,
        training.attention_kernel,
        "layernorm" if model.activation == "gelu" else "rmsnorm",
    )
    fabric = comms.make_fabric(cluster, profile)
    groups = comms.place_groups(
        layout.tp, layout.cp, layout.dp, layout.pp, layout.ep, fabric.domain_gpus, layout.expert_tp
    )
    m = pipeline.microbatches_per_step(training.global_batch, training.micro_batch, layout.dp)
    tokens = flops.tokens_per_gpu(layout, training)
    vpp = layout.virtual_stages

    # ---- per-layer costs, each layer kind once -------------------------------------------
    kinds = [(layer, count / model.layers) for layer, count in model.layer_kinds()]
    costs = [
        (_layer_costs(model, layout, training, layer, dev, fabric, groups), w) for layer, w in kinds
    ]
    layer_max = pipeline.layers_on_bottleneck_stage(model.layers, layout.pp)
    per_layer = _mean(costs)

    # ---- first-stage embedding and last-stage logits + loss ------------------------------
    logit = flops.logits_gemm(model, layout, training)
    lg_f, lg_b = compute.gemms_time_s((logit,), dev)
    loss_s = (
        elementwise.logits_loss_bytes(
            model, layout, tokens, training.act_bytes, training.cross_entropy
        )
        / dev.xent_bytes_per_s
    )
    logits_s = lg_f + lg_b + loss_s
    mtp: dict[str, float] = {}
    if model.mtp_layers:
        # each multi-token-prediction module: one more layer of the last kind, an h x 2h
        # projection and its own logits + loss, on the last stage (DeepSeek-V3 section 2.2)
        last = next(
            c for (layer, _), (c, _w) in zip(kinds, costs, strict=True) if layer == kinds[-1][0]
        )
        proj_f, proj_b = compute.gemms_time_s(
            (flops.Gemm("mtp_proj", tokens, model.hidden / layout.tp, 2 * model.hidden),), dev
        )
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
    emb_s = 3.0 * tokens * model.hidden * training.act_bytes / dev.hbm_bytes_per_s

    # ---- pipeline point-to-point: one send forward and one backward per virtual stage ----
    pp_s = 0.0
    if layout.pp > 1:
        full = tokens * model.hidden * training.act_bytes
        split = layout.sequence_parallel or layout.pp_scatter_gather
        hop = comms.collective_time_s(
            "send_recv", full / layout.tp if split else full, groups.pp, fabric
        )
        if layout.pp_scatter_gather and not layout.sequence_parallel:
            # the receiver rebuilds the full activation from the TP ranks' slices
            hop += comms.collective_time_s("all_gather", full, groups.tp, fabric)
        pp_s = 2.0 * vpp * hop

    # ---- parameters held per GPU (bottleneck stage) --------------------------------------
    stage_layers = float(layer_max)
    dense_layer_params = expert_layer_params = 0.0  # per GPU, averaged over the stack
    for layer, w in kinds:
        dense_k, expert_k = _layer_params_per_gpu(model, layer, layout)
        dense_layer_params += w * dense_k
        expert_layer_params += w * expert_k
    emb_params = model.vocab * model.hidden / layout.tp
    first_dense = stage_layers * dense_layer_params + emb_params
    last_dense = stage_layers * dense_layer_params + (
        emb_params if (layout.pp > 1 or not model.tied_embeddings) else 0.0
    )
    if layout.pp == 1:
        first_dense = stage_layers * dense_layer_params + emb_params * (
            1 if model.tied_embeddings else 2
        )
        last_dense = first_dense
    stage_experts = stage_layers * expert_layer_params
    if model.mtp_layers:  # the MTP modules live on the last stage
        mtp_dense, mtp_experts = _layer_params_per_gpu(model, kinds[-1][0], layout)
        last_dense += model.mtp_layers * (mtp_dense + 2 * model.hidden**2 / layout.tp)
        stage_experts += model.mtp_layers * mtp_experts
        if layout.pp == 1:
            first_dense = last_dense
    local_params = max(first_dense, last_dense) + stage_experts

    # ---- data-parallel gradient and parameter traffic ------------------------------------
    grad_b = memory.grad_bytes(training)
    dp_group = groups.dp_cp
    edp = max(1, layout.tp * layout.dp * layout.cp // (layout.ep * layout.expert_tp))
    edp_group = comms.place(edp, layout.ep * layout.expert_tp, fabric.domain_gpus)
    stage_fwd = stage_layers * per_layer["fwd"]
    stage_bwd = stage_layers * (per_layer["bwd"] + per_layer["recompute"])
    dense_p = max(first_dense, last_dense)

    def coll(kind: comms.Collective, nbytes_per_param: float) -> float:
        return comms.collective_time_s(
            kind, dense_p * nbytes_per_param, dp_group, fabric
        ) + comms.collective_time_s(kind, stage_experts * nbytes_per_param, edp_group, fabric)

    dp_per_mb = 0.0
    dp_step = 0.0
    bucket_frac = min(1.0, DP_BUCKET_PARAMS / max(local_params, 1.0))
    if layout.zero >= 3:
        ag = coll("all_gather", 2.0)
        rs = coll("reduce_scatter", grad_b)
        if layout.overlap_zero3_param_gather:
            first_layer = ag / max(stage_layers, 1.0)
            dp_per_mb = (
                comms.exposed_time_s(ag, stage_fwd, fabric)
                + comms.exposed_time_s(ag + rs, stage_bwd, fabric)
                + first_layer
            )
        else:
            dp_per_mb = 2 * ag + rs
    else:
        if layout.zero == 0:
            reduce = coll("all_reduce", grad_b)
            gather = 0.0
        else:
            reduce = coll("reduce_scatter", grad_b)
            gather = coll("all_gather", 2.0)
        if layout.overlap_dp_grad_reduce:
            reduce = comms.exposed_time_s(reduce, stage_bwd, fabric, bucket_frac)
            gather = comms.exposed_time_s(gather, stage_fwd, fabric, bucket_frac)
        if layout.zero == 2 and m > 1:
            # sharded gradients cannot accumulate locally: every micro-batch reduce-scatters
            # its gradients into the shard (ZeRO-2, Rajbhandari et al. 2020, section 5.2)
            dp_per_mb = reduce
            dp_step = gather
        else:
            dp_step = reduce + gather

    # ---- stage times and the pipeline ----------------------------------------------------
    def stage(n_layers: float, edge: dict[str, float]) -> dict[str, float]:
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

    emb = {"compute_memory_bound": emb_s}
    # activation bytes one micro-batch keeps per layer (mean over the layer kinds)
    act_layer = sum(
        w * memory.layer_activation_bytes(model, layout, training, layer) for layer, w in kinds
    )
    if training.offload_layers:
        assert accel.host_link_gb_per_s is not None  # check_layout
        emb["activation_offload"] = training.offload_layers * offload_exposed_s(
            act_layer, per_layer, accel.host_link_gb_per_s
        )
    head = {"compute_logits_loss": logits_s}
    for key, value in mtp.items():
        head[key] = head.get(key, 0.0) + value
    if layout.pp == 1:
        stages = [stage(model.layers, {**emb, **head})]
        t_sum_extra = 0.0
    else:
        edge_layers = pipeline.layers_on_edge_stage(model.layers, layout.pp)
        stages = [stage(edge_layers, emb), stage(edge_layers, head)]
        if layout.pp > 2:
            stages.append(stage(layer_max, {}))
            middle = model.layers - 2 * edge_layers  # over pp - 2 stages
            t_sum_extra = middle * sum(per_layer[k] for k in _LAYER_KEYS) + (layout.pp - 2) * (
                pp_s + dp_per_mb
            )
        else:
            t_sum_extra = 0.0
    totals = [sum(c.values()) for c in stages]
    mb_cats = stages[max(range(len(stages)), key=totals.__getitem__)]
    t_max = max(totals)
    t_sum = totals[0] + (totals[1] if layout.pp > 1 else 0.0) + t_sum_extra
    steady, bubble = pipeline.pipeline_time_s(m, t_max, t_sum, vpp)

    # optimizer: fused AdamW over the locally owned (sharded) parameters, memory bound
    owned = local_params / (dp_group.size if layout.zero >= 1 else 1)
    optimizer_s = owned * elementwise.adam_bytes_per_param() / dev.adam_bytes_per_s

    breakdown = {k: v * m for k, v in mb_cats.items()}
    breakdown["dp_comm"] += dp_step
    breakdown["pipeline_bubble"] = bubble
    breakdown["optimizer"] = optimizer_s
    step = steady + bubble + dp_step + optimizer_s

    # ---- throughput and utilisation ------------------------------------------------------
    gpus = layout.world_size
    tokens_step = training.tokens_per_step
    tps = tokens_step / step
    mf_tok = flops.model_flops_per_token(model, training.seq_len)
    peak = accel.peak_flops_per_s(training.work_precision)
    mfu = 100.0 * mf_tok * tps / (gpus * peak)
    # hardware FLOPs differ from the convention by the causal half of fused attention
    per_gpu_tokens = training.micro_batch * training.seq_len / (layout.tp * layout.cp)
    saving = core_hw = 0.0  # per token
    for layer, count in model.layer_kinds():
        if isinstance(layer.mixer, AttentionMixer):
            hw, conv = flops.attention_core_flops(model, layout, training, layer.mixer.window)
            if training.attention_kernel == "unfused":
                hw = conv  # materialised scores: the masked half is computed too
            saving += 3.0 * count * (conv - hw) / per_gpu_tokens
            core_hw += count * hw / per_gpu_tokens
    per_tok_attn_saving = saving
    recompute_per_tok = 0.0
    if training.recompute == "full":
        recompute_per_tok = (mf_tok - per_tok_attn_saving) / 3.0
    elif training.recompute == "selective":
        if "core_attn" in training.selective_modules:
            recompute_per_tok = core_hw
        recompute_per_tok += (
            sum(c.recompute_flops * w for c, w in costs) * model.layers / per_gpu_tokens
        )
    hfu = 100.0 * (mf_tok - per_tok_attn_saving + recompute_per_tok) * tps / (gpus * peak)

    # ---- memory ---------------------------------------------------------------------------
    first_layers = (
        pipeline.layers_on_edge_stage(model.layers, layout.pp) if layout.pp > 1 else model.layers
    )
    in_flight = memory.layers_in_flight(first_layers, layout.pp, vpp, m)
    if training.offload_layers:
        # offloaded layers leave the GPU but for the one in transit (pp is 1: legality)
        in_flight -= training.offload_layers - 1
    activations = act_layer * in_flight
    if training.recompute == "full":
        no_recompute = training.model_copy(update={"recompute": "none"})
        full_one = max(
            memory.layer_activation_bytes(model, layout, no_recompute, layer) for layer, _ in kinds
        )
        activations += full_one  # one layer recomputed at a time
    logits_mem = memory.logits_bytes(model, layout, training)
    # ZeRO-3: the unsharded parameters of the layer being computed
    gathered = (dense_layer_params + expert_layer_params) if layout.zero >= 3 else 0.0
    st = memory.state_bytes(dense_p, stage_experts, layout, training, gathered)
    if layout.pp > 1:
        # the last stage holds one micro-batch of activations, but the logits
        last_act = act_layer * first_layers / vpp
        first_total = activations
        last_total = last_act + logits_mem
        stage_name = "first" if first_total >= last_total else "last"
        act_peak, logit_peak = (
            (activations, 0.0) if stage_name == "first" else (last_act, logits_mem)
        )
    else:
        stage_name, act_peak, logit_peak = "only", activations, logits_mem
    overhead = memory.OVERHEAD_FIXED_BYTES + memory.OVERHEAD_ACTIVATION_FRACTION * act_peak
    g = memory.GIB
    mem = {
        "weights": st.weights / g,
        "gradients": st.grads / g,
        "optimizer_states": st.optimizer / g,
        "activations": act_peak / g,
        "logits": logit_peak / g,
        "overhead": overhead / g,
    }
    peak_mem = sum(mem.values())
    usable = accel.hbm_usable_gib
    fits = peak_mem <= usable
    feas = (
        []
        if fits
        else [
            f"out of memory: needs {peak_mem:.1f} GiB per GPU on the {stage_name} pipeline stage, "
            f"{usable:.1f} GiB usable ({peak_mem - usable:.1f} GiB over)"
        ]
    )
    placement = {
        name: (
            "single GPU"
            if p.size == 1
            else f"{p.size} GPUs, {p.per_domain} per scale-up domain x {p.domains} domain(s)"
        )
        for name, p in (
            ("tp", groups.tp),
            ("cp", groups.cp),
            ("dp", groups.dp),
            ("ep", groups.ep),
            ("pp", groups.pp),
        )
    }
    return StepReport(
        step_time_s=step,
        tokens_per_step=tokens_step,
        tokens_per_s=tps,
        tokens_per_s_per_gpu=tps / gpus,
        mfu_pct=mfu,
        hfu_pct=hfu,
        model_flops_per_token=mf_tok,
        gpus=gpus,
        microbatches=m,
        time_breakdown_s=breakdown,
        memory_breakdown_gib=mem,
        peak_memory_gib=peak_mem,
        peak_memory_stage=stage_name,
        usable_memory_gib=usable,
        fits=fits,
        feasibility=feas,
        placement=placement,
        profile=profile.id,
        assumptions=default_assumptions(layout, training) + _host_note(breakdown, step, dev),
    )


def _host_note(breakdown: dict[str, float], step_s: float, dev: compute.Device) -> list[str]:
    """A note when the step waits for the host, with what would relieve it."""
    waiting = breakdown.get("host_overhead", 0.0)
    if waiting <= 0.05 * step_s:
        return []
    return [
        f"host-bound: the GPU waits {waiting:.2f} s ({100 * waiting / step_s:.0f}% of the step) "
        f"for the host to issue kernels ({dev.host_op_s * 1e6:.1f} us per framework op); larger micro-batches, fewer "
        "local experts or CUDA graphs (--host-op-us 0 to model them) relieve it"
    ]
