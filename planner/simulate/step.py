"""Compose the named stages into a StepPlan and its StepReport (pure: no I/O).

layer costs (planner/simulate/layers.py) -> stage costs, data-parallel traffic
(planner/simulate/stages.py) -> pipeline (the schedule's bubble) -> memory peak ->
utilisation -> plan and report.
"""

from __future__ import annotations

from collections.abc import Callable

from planner.costs import elementwise, flops, host_offload, memory, pipeline
from planner.costs.blocks import mixer_costs
from planner.legality import check_layout
from planner.plan import StageRecipe, StageSpec, StepPlan, build_stages, pass_times
from planner.profile import CalibrationProfile
from planner.report import StepReport
from planner.schedules import StageTimes
from planner.simulate.data_parallel import (
    DataParallel,
    dp_traffic,
    owned_params,
    stage_param_tensors,
)
from planner.simulate.notes import default_assumptions, host_note, power_note, schedule_notes
from planner.simulate.planning import stage_plans
from planner.simulate.stages import (
    Context,
    Params,
    RankCosts,
    Stack,
    edge_costs,
    edge_work,
    layer_stack,
    make_context,
    params_per_gpu,
    pp_send_s,
    rank_costs,
    stage_counts,
)
from planner.specs.hardware import Cluster
from planner.specs.layout import Layout, Training
from planner.specs.model import ModelSpec


def build_step(
    model: ModelSpec,
    cluster: Cluster,
    layout: Layout,
    training: Training,
    profile: CalibrationProfile,
    check: bool,
) -> StepReport:
    """The StepReport of one step, its ``plan`` attached."""
    if check:
        check_layout(model, cluster, layout, training)
    ctx = make_context(model, cluster, layout, training, profile)
    m = ctx.microbatches
    stack = layer_stack(ctx)
    edges = edge_costs(ctx, stack)
    pp_s = pp_send_s(ctx)
    params = params_per_gpu(ctx, stack)
    dp = dp_traffic(ctx, stack, params)
    emb, head = edge_work(ctx, stack, edges)
    ranks = rank_costs(ctx, stack, emb, head, pp_s, dp)
    specs, recipe, bottleneck = stage_plans(ctx, stack, edges, emb, head, pp_s, dp, ranks)

    plan = timed_plan(ctx, ranks, specs, recipe, bottleneck, params, dp)
    step, breakdown = plan.step_time_s, dict(plan.breakdown_s)
    mfu, hfu, mf_tok, tps = utilisation(ctx, stack, step)
    mem, stage_name, by_rank = memory_peak(ctx, stack, params)
    peak_mem = sum(mem.values())
    usable = cluster.accelerator.hbm_usable_gib
    fits = peak_mem <= usable
    feas = (
        []
        if fits
        else [
            f"out of memory: needs {peak_mem:.1f} GiB per GPU on the {stage_name} pipeline stage, "
            f"{usable:.1f} GiB usable ({peak_mem - usable:.1f} GiB over)"
        ]
    )
    return StepReport(
        step_time_s=step,
        tokens_per_step=training.tokens_per_step,
        tokens_per_s=tps,
        tokens_per_s_per_gpu=tps / layout.world_size,
        mfu_pct=mfu,
        hfu_pct=hfu,
        mfu_training_precision_pct=_precision_mfu(ctx, mfu),
        model_flops_per_token=mf_tok,
        gpus=layout.world_size,
        microbatches=m,
        time_breakdown_s=breakdown,
        memory_breakdown_gib=mem,
        peak_memory_gib=peak_mem,
        peak_memory_stage=stage_name,
        memory_by_stage_gib=by_rank,
        usable_memory_gib=usable,
        fits=fits,
        feasibility=feas,
        placement=_placement(ctx),
        profile=profile.id,
        assumptions=default_assumptions(layout, training)
        + schedule_notes(ctx.schedule, layout)
        + host_note(breakdown, step, ctx.dev)
        + power_note(ctx.cluster.accelerator),
        plan=plan,
    )


def timed_plan(
    ctx: Context,
    ranks: RankCosts,
    specs: tuple[StageSpec, ...],
    recipe: StageRecipe,
    bottleneck: int,
    params: Params,
    dp: DataParallel,
) -> StepPlan:
    """The pipeline under the layout's schedule, the optimizer step, and the plan they time."""
    steady, bubble, optimizer_s, breakdown = step_times(ctx, ranks, params, dp, (specs, recipe))
    return StepPlan(
        schedule=ctx.schedule.name,
        pp=ctx.layout.pp,
        chunks=ctx.vpp,
        microbatches=ctx.microbatches,
        stage_specs=specs,
        recipe=recipe,
        bottleneck_rank=bottleneck,
        steady_s=steady,
        bubble_s=bubble,
        dp_step_s=dp.step,
        dp_hidden_s=max(0.0, dp.raw_step - dp.step),
        optimizer_s=optimizer_s,
        step_time_s=steady + bubble + dp.step + optimizer_s,
        breakdown_s=breakdown,
    )


def optimizer_time_s(ctx: Context, params: Params) -> float:
    """Seconds of the AdamW update over the locally owned (sharded) parameters: memory bound,
    or bound by the host issuing its ops when it runs per tensor (one op per kernel step and
    parameter tensor, ``elementwise.ADAM_OPS``; foreach / fused issue a handful per step)."""
    kernel = ctx.training.optimizer_kernel
    owned = owned_params(ctx, params)
    if ctx.training.optimizer_offload:  # the CPU updates, the weights come back (host_offload)
        host_bw = ctx.cluster.spec.host_memory_bandwidth_gb_per_s
        link = ctx.cluster.accelerator.host_link_gb_per_s
        assert host_bw is not None and link is not None  # check_layout
        sharing = min(ctx.layout.world_size, ctx.cluster.spec.gpus_per_node)  # one node's GPUs
        return host_offload.offloaded_optimizer_s(owned, sharing, host_bw, link)
    gpu = (
        owned
        * elementwise.adam_bytes_per_param(kernel, ctx.training.optimizer_states)
        / ctx.dev.adam_bytes_per_s
    )
    ops = float(elementwise.ADAM_OPS[kernel])
    if kernel == "per_tensor":
        ops *= stage_param_tensors(ctx, params.stage_layers)
    return max(gpu, ops * ctx.dev.host_op_s)


def step_times(
    ctx: Context,
    ranks: RankCosts,
    params: Params,
    dp: DataParallel,
    stage_plan: tuple[tuple[StageSpec, ...], StageRecipe] | Callable[[], tuple],
) -> tuple[float, float, float, dict[str, float]]:
    """(steady-state s, bubble s, optimizer s, breakdown by category in s) of one step.

    ``stage_plan``: (stage specs, recipe), or a function returning them, read only by the
    schedules that time forward, input- and weight-gradient passes apart (zero bubble, V).
    The step time is steady + bubble + ``dp.step`` + optimizer."""
    m = ctx.microbatches
    times = StageTimes(ranks.t_max, ranks.t_sum)
    if ctx.schedule.needs_pass_times:  # zero-bubble and V schedules time F, I and W apart
        specs, recipe = stage_plan() if callable(stage_plan) else stage_plan
        stages = build_stages(specs, recipe)
        times = StageTimes(ranks.t_max, ranks.t_sum, pass_times(stages, ctx.layout.pp))
    steady, bubble = pipeline.schedule_time_s(ctx.schedule, m, times, ctx.vpp)

    optimizer_s = optimizer_time_s(ctx, params)

    breakdown = {k: v * m for k, v in ranks.stages[ranks.bottleneck].items()}
    breakdown["dp_comm"] += dp.step
    breakdown["pipeline_bubble"] = bubble
    breakdown["optimizer"] = optimizer_s
    return steady, bubble, optimizer_s, breakdown


def _precision_mfu(ctx: Context, mfu: float) -> float | None:
    """MFU % against the training precision's dense peak when it is not the bf16 one (fp8)."""
    accel, training = ctx.cluster.accelerator, ctx.training
    work = accel.peak_flops_per_s(training.work_precision)
    gemm = accel.peak_flops_per_s(training.precision)
    return None if gemm == work else mfu * work / gemm


def utilisation(
    ctx: Context, stack: Stack, step: float, work: tuple[float, float] | None = None
) -> tuple[float, float, float, float]:
    """(MFU %, HFU %, model FLOPs per token, tokens/s). ``work``: :func:`flops_per_token`'s
    result when the caller has it."""
    gpus = ctx.layout.world_size
    tps = ctx.training.tokens_per_step / step
    mf_tok, hw_tok = work or flops_per_token(ctx, stack)
    peak = ctx.cluster.accelerator.peak_flops_per_s(ctx.training.work_precision)
    mfu = 100.0 * mf_tok * tps / (gpus * peak)
    hfu = 100.0 * hw_tok * tps / (gpus * peak)
    return mfu, hfu, mf_tok, tps


def flops_per_token(ctx: Context, stack: Stack) -> tuple[float, float]:
    """(model FLOPs per token by the MFU convention, hardware FLOPs per token the GPUs run:
    without the causal half fused attention skips, with the recompute)."""
    model, layout, training = ctx.model, ctx.layout, ctx.training
    mf_tok = flops.model_flops_per_token(model, training.seq_len)
    # hardware FLOPs differ from the convention by the causal half of fused attention
    per_gpu_tokens = training.micro_batch * training.seq_len / (layout.tp * layout.cp)
    saving = core_hw = 0.0  # per token
    for layer, count in model.layer_kinds():
        if mixer_costs(layer.mixer).softmax_attention:
            hw, conv = flops.attention_core_flops(model, layout, training, layer.mixer.window)
            if training.attention_kernel == "unfused":
                hw = conv  # materialised scores: the masked half is computed too
            saving += 3.0 * count * (conv - hw) / per_gpu_tokens
            core_hw += count * hw / per_gpu_tokens
    recompute_per_tok = 0.0
    if training.recompute == "full":
        recompute_per_tok = (mf_tok - saving) / 3.0 * training.recompute_share
    elif training.recompute == "selective":
        if "core_attn" in training.selective_modules:
            recompute_per_tok = core_hw
        recompute_per_tok += (
            sum(c.recompute_flops * w for c, w in stack.costs) * model.layers / per_gpu_tokens
        )
    return mf_tok, mf_tok - saving + recompute_per_tok


def activation_terms(ctx: Context, stack: Stack) -> tuple[float, float, float]:
    """(bytes of the one layer full recompute rebuilds at a time, 0 without it; bytes of one
    micro-batch's logits at the loss, the main head's and each MTP module's; bytes the MTP
    modules keep besides, :func:`planner.costs.memory.mtp_activation_bytes`)."""
    model, layout, training = ctx.model, ctx.layout, ctx.training
    full_one = 0.0
    if training.recompute == "full":
        no_recompute = memory.without_recompute(training)
        full_one = max(
            memory.layer_activation_bytes(model, layout, no_recompute, layer)
            for layer, _ in stack.kinds
        )
    logits = memory.logits_bytes(model, layout, training) * (1 + model.mtp_layers)
    mtp = memory.mtp_activation_bytes(model, layout, training, stack.kinds[-1][0])
    return full_one, logits, mtp


def memory_peak(
    ctx: Context, stack: Stack, params: Params, terms: tuple[float, float, float] | None = None
) -> tuple[dict[str, float], str, dict[str, float]]:
    """(GiB by category on the peak rank, which rank: first, middle, last or only, the GiB
    total of each pipeline rank the peak was chosen from). Each looped pipeline rank holds its
    own layers' parameters and states (the embedding on the first, the head and MTP modules on
    the last) and its own activations in flight. ``terms``: :func:`activation_terms`' result
    when the caller has it."""
    layout, training = ctx.layout, ctx.training
    full_one, logits_mem, mtp_act = terms or activation_terms(ctx, stack)
    pp, vpp, m = layout.pp, ctx.vpp, ctx.microbatches
    first_layers, last_layers, middle_layers = stage_counts(ctx)
    in_flight = memory.layers_in_flight(first_layers, pp, vpp, m, ctx.schedule)
    if training.offload_layers:
        # offloaded layers leave the GPU but for the one in transit (pp is 1: legality)
        in_flight -= training.offload_layers - 1
    if training.checkpoint_offload:
        # the checkpoints go to the host as each layer ends: one being copied down, one being
        # brought back for the recompute stay on the GPU (pp is 1: legality)
        in_flight = min(in_flight, 2.0)
    activations = stack.act_layer * in_flight
    if training.recompute == "full":
        activations += full_one  # one layer recomputed at a time
    if pp > 1 and not ctx.both_ends:
        # the last stage holds its micro-batches in flight (one, for 1F1B), the logits and
        # the MTP modules of one micro-batch
        last_act = (
            stack.act_layer * last_layers / vpp * ctx.schedule.peak_chunks(pp - 1, pp, vpp, m)
        )
        last_act = last_act + mtp_act
        ranks = [("first", activations, 0.0), ("last", last_act, logits_mem)]
        if pp > 2:
            # the second rank holds one micro-batch fewer than the first, of its own layers:
            # the peak where the middle ranks carry more layers than the edges
            mid_act = stack.act_layer * memory.layers_in_flight(
                middle_layers, pp, vpp, m, ctx.schedule, rank=1
            )
            ranks.insert(1, ("middle", mid_act + full_one, 0.0))
        tables = {
            name: _rank_memory(ctx, params, params.rank(name), act, logits)
            for name, act, logits in ranks
        }
    else:  # one rank, or a V: rank 0 holds the first and the last chunk
        name = "first" if pp > 1 else "only"
        local = (params.stage_layers, params.dense, params.stage_experts)
        tables = {name: _rank_memory(ctx, params, local, activations + mtp_act, logits_mem)}
    totals = {name: sum(t.values()) for name, t in tables.items()}
    stage_name = max(totals, key=totals.__getitem__)
    return tables[stage_name], stage_name, totals


def _rank_memory(
    ctx: Context, params: Params, local: tuple[float, float, float], act: float, logits: float
) -> dict[str, float]:
    """GiB by category of one rank holding ``local`` (layers, dense parameters, expert
    parameters per GPU), ``act`` activation bytes and ``logits`` bytes at its peak."""
    layout, training = ctx.layout, ctx.training
    n_layers, dense, experts = local
    # ZeRO-3: the unsharded parameters of the layer being computed
    gathered = unreduced = 0.0
    if layout.zero >= 3 and layout.zero3_reshard_after_forward:
        gathered = params.dense_layer_params + params.expert_layer_params
    elif layout.zero >= 3:  # the stage stays gathered; its gradients wait for the last backward
        gathered = unreduced = dense + experts
    elif layout.zero == 2 and not layout.zero3_reshard_after_forward:
        unreduced = dense + experts  # ZeRO 2 under the same deferred gradient sync
    layer_params = n_layers * params.dense_layer_params + experts
    st = memory.state_bytes(dense, experts, layout, training, gathered, unreduced, layer_params)
    overhead = memory.OVERHEAD_FIXED_BYTES + memory.OVERHEAD_ACTIVATION_FRACTION * act
    g = memory.GIB
    return {
        "weights": st.weights / g,
        "gradients": st.grads / g,
        "optimizer_states": st.optimizer / g,
        "activations": act / g,
        "logits": logits / g,
        "overhead": overhead / g,
    }


def placement_text(size: int, per_domain: int, domains: int) -> str:
    """'8 GPUs in 1 scale-up domain', '16 GPUs over 2 scale-up domains, 8 in each', or, when
    the group does not split evenly, '3 GPUs over 2 scale-up domains (2 + 1)'."""
    if size == 1:
        return "single GPU"
    if domains == 1:
        return f"{size} GPUs in 1 scale-up domain"
    full, rest = divmod(size, per_domain)
    if rest == 0:
        return f"{size} GPUs over {domains} scale-up domains, {per_domain} in each"
    counts = " + ".join([str(per_domain)] * full + [str(rest)])
    return f"{size} GPUs over {domains} scale-up domains ({counts})"


def _placement(ctx: Context) -> dict[str, str]:
    groups = ctx.groups
    return {
        name: placement_text(p.size, p.per_domain, p.domains)
        for name, p in (
            ("tp", groups.tp),
            ("cp", groups.cp),
            ("dp", groups.dp),
            ("ep", groups.ep),
            ("pp", groups.pp),
        )
    }
