"""Build the StepPlan's stages from the stage costs: which ranks share costs, and the recipe
of each rank's pass split (planner/plan.py ``split_chunks``).

The edges: the embedding 1:2 forward : backward (lookup, then the scatter-add of its gradient);
the logits GEMM forward and half the loss traffic in F; the head's weight gradient stays in I
(deferring it would keep the vocabulary-sized logits gradient).
"""

from __future__ import annotations

from planner.costs import pipeline
from planner.plan import StageRecipe, StageSpec
from planner.simulate.data_parallel import DataParallel
from planner.simulate.stages import (
    Context,
    Edges,
    RankCosts,
    Stack,
    stage_categories,
    stage_counts,
)


def _edge_forward(edges: Edges, emb: dict, head: dict) -> tuple[dict, dict]:
    """Forward parts of the embedding rank's and the head rank's edge work."""
    emb_f = {"compute_memory_bound": edges.emb_s / 3.0}
    if "activation_offload" in emb:
        emb_f["activation_offload"] = emb["activation_offload"]  # drawn with the forward
    head_f = dict(edges.mtp_f)
    head_f["compute_logits_loss"] = head_f.get("compute_logits_loss", 0.0) + edges.logits_f
    return emb_f, head_f


def _hides(ctx: Context) -> dict[str, str]:
    layout = ctx.layout
    return {
        "tp_comm": "the GEMMs it feeds (TP overlap)" if layout.overlap_tp_comm else "nothing",
        "cp_comm": "the attention blocks",
        "ep_comm": "the other micro-batch's GEMMs and attention (EP overlap)"
        if layout.overlap_ep_comm
        else "nothing",
    }


def stage_plans(
    ctx: Context,
    stack: Stack,
    edges: Edges,
    emb: dict,
    head: dict,
    pp_s: float,
    dp: DataParallel,
    ranks: RankCosts,
) -> tuple[tuple[StageSpec, ...], StageRecipe, int]:
    """(the stages covering every rank, the recipe of their pass split, the bottleneck rank)."""
    model, pp, v = ctx.model, ctx.layout.pp, ctx.vpp
    emb_f, head_f = _edge_forward(edges, emb, head)

    recipe = StageRecipe(
        stack.per_layer,
        tuple(stack.costs),
        v,
        pp_s,
        dp.per_mb,
        dp.per_mb_f,
        ctx.layout.zero == 2,
        _hides(ctx),
        dp.raw_per_mb,
        dp.step,
        dp.raw_step,
        ctx.layout.zero,
    )

    def plan(rks, role, n, cats, edge) -> StageSpec:
        return (tuple(rks), role, n, cats, edge)

    if pp == 1:
        # merged as the step model merges them (rank_costs: a head key replaces an embedding key)
        both = ((0, {**emb, **head}, {**emb_f, **head_f}),)
        return (plan((0,), "only", model.layers, ranks.stages[0], both),), recipe, 0
    if ctx.schedule.placement == "v":
        both = ((0, emb, emb_f), (1, head, head_f))
        plans = (
            plan((0,), "first+last", stack.layer_max, ranks.stages[0], both),
            plan(range(1, pp), "middle", stack.layer_max, ranks.stages[1], ()),
        )
        return plans, recipe, 0 if ranks.bottleneck == 0 else 1
    first_n, last_n, middle_n = stage_counts(ctx)
    layout = ctx.layout
    plans = [plan((0,), "first", first_n, ranks.stages[0], ((0, emb, emb_f),))]
    per_rank = pipeline.layers_per_rank(
        model.layers, pp, layout.first_stage_layers, layout.last_stage_layers
    )[1:-1]
    if per_rank:
        per_rank[0] = middle_n  # the middle rank the step model costs
    groups: dict[float, list[int]] = {}
    for r, n in enumerate(per_rank, start=1):
        groups.setdefault(n, []).append(r)
    for n, rks in groups.items():
        cats = ranks.stages[2] if n == middle_n else None
        if cats is None:
            cats = stage_categories(n, stack.per_layer, pp_s, dp.per_mb, {})
        plans.append(plan(rks, "middle", n, cats, ()))
    plans.append(plan((pp - 1,), "last", last_n, ranks.stages[1], ((v - 1, head, head_f),)))
    bottleneck = (0, pp - 1, 1)[ranks.bottleneck]
    return tuple(plans), recipe, bottleneck
