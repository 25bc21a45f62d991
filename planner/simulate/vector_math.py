"""The per-candidate arithmetic of ``simulate_step`` over numpy columns: the memory peak
(step.memory_peak, memory.state_bytes), the data-parallel exposure (stages.dp_traffic), the
rank costs (stages.rank_costs, whose ``stage_categories`` runs here on arrays as it is), the
1F1B / interleaved pipeline, the AdamW step and the utilisation (step.step_times,
step.utilisation), each in the operation order of the one-layout path so that every figure is
the same float. One call covers the candidates of one pipeline depth and ZeRO stage, under a
looped schedule (planner/simulate/vector.py routes the rest to the one-layout path).

Columns are float64 arrays with one entry per candidate; seconds, bytes and GiB as in the
functions they replay.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from planner.costs import memory, pipeline
from planner.costs.elementwise import HP_GRAD_MAX_ZERO
from planner.simulate.layers import LAYER_KEYS
from planner.simulate.stages import stage_categories


class Columns:
    """Named columns (numpy arrays, or scalars shared by every candidate)."""

    def __init__(self, **cols: Any) -> None:
        self.__dict__.update(cols)

    def take(self, idx: np.ndarray) -> Columns:
        """The columns of the candidates ``idx`` (scalars kept as they are)."""
        return Columns(
            **{k: v[idx] if isinstance(v, np.ndarray) else v for k, v in self.__dict__.items()}
        )


def memory_columns(c: Columns, pp: int, zero: int, reshard: bool) -> Columns:
    """``memory_peak`` of every candidate: ``table`` (GiB by category, MEM_KEYS order, of the
    peak rank), ``total`` (their sum), ``stage`` (0 first, 1 last, 2 only, 3 middle)."""
    activations = c.act * c.in_flight
    activations = activations + c.full_one  # 0 unless full recompute (activation_terms)
    if pp == 1:
        table, total = _rank_columns(
            c, zero, reshard, c.stage_layers, c.dense, c.experts, activations + c.mtp, c.logits
        )
        return Columns(table=table, total=total, stage=np.full(len(total), 2))
    last_act = c.act * c.last_n / c.vpp * c.last_chunks
    last_act = last_act + c.mtp  # the MTP modules of one micro-batch
    ranks = [
        (0, c.first_n, c.first_dense, c.first_experts, activations, 0.0),
        (1, c.last_n, c.last_dense, c.last_experts, last_act, c.logits),
    ]
    if pp > 2:
        mid_act = c.act * c.mid_in_flight + c.full_one
        ranks.insert(1, (3, c.mid_n, c.mid_dense, c.mid_experts, mid_act, 0.0))
    found = [_rank_columns(c, zero, reshard, *r[1:]) for r in ranks]
    totals = np.column_stack([total for _, total in found])
    k = np.argmax(totals, axis=1)  # the first of equal totals, as max() over the ranks
    rows = np.arange(len(k))
    table = np.stack([t for t, _ in found])[k, rows]
    stage = np.array([r[0] for r in ranks])[k]
    return Columns(table=table, total=totals[rows, k], stage=stage)


def _rank_columns(
    c: Columns, zero: int, reshard: bool, n: Any, dense: Any, experts: Any, act: Any, logits: Any
) -> tuple[np.ndarray, np.ndarray]:
    """step._rank_memory over columns: (GiB by category, their sum) of one pipeline rank."""
    local = dense + experts
    if zero >= 3 and reshard:
        gathered, unreduced = c.dense_layer + c.expert_layer, 0.0
    elif zero >= 3:
        gathered = unreduced = local
    elif zero == 2 and not reshard:  # the gradient sync deferred to the last micro-batch
        gathered, unreduced = 0.0, local
    else:
        gathered = unreduced = 0.0

    def split(params: np.ndarray, shard: np.ndarray) -> tuple:
        w = params * c.w_b
        g = params * c.g_b
        o = params * c.o_b
        if zero >= 3:
            w = w / shard
        if zero >= 2:
            g = g / shard
        if zero >= 1:
            o = o / shard
        return w, g, o

    wd, gd, od = split(dense, c.shard)
    we, ge, oe = split(experts, c.eshard)
    gathered_b = gathered * c.gather_b if zero >= 3 else 0.0
    unreduced_b = unreduced * c.g_b if zero >= 2 else 0.0
    weights = wd + we + gathered_b
    if zero < 3:  # the fp8 weight copies (memory.fp8_weight_cache_bytes)
        weights = weights + (n * c.dense_layer + experts) * c.cache_b
    grads, opt = gd + ge + unreduced_b, od + oe
    overhead = memory.OVERHEAD_FIXED_BYTES + memory.OVERHEAD_ACTIVATION_FRACTION * act
    g = memory.GIB
    parts = [weights / g, grads / g, opt / g, act / g, logits / g, overhead / g]
    size = len(c.tix)
    parts = [np.broadcast_to(p, (size,)) for p in parts]
    total = parts[0] + parts[1] + parts[2] + parts[3] + parts[4] + parts[5]
    return np.column_stack(parts), total


def exposed(comm: np.ndarray, window: np.ndarray, contention: float, frac: Any = 0.0) -> Any:
    """``comms.exposed_time_s`` elementwise."""
    e = np.maximum(np.maximum(comm - window, comm * frac), 0.0)
    return np.where(comm <= 0.0, 0.0, e + contention * (comm - e))


def dp_columns(c: Columns, t: Columns, pl: dict, zero: int, reshard: bool) -> tuple:
    """(exposed DP seconds per micro-batch, per step) of ``stages.dp_traffic``; ``t.c1`` and
    ``t.c2`` are its raw collectives (planner/simulate/vector_keys.py)."""
    cont = t.contention
    stage_fwd = c.stage_layers * pl["fwd"]
    stage_bwd = c.stage_layers * (pl["bwd"] + pl["recompute"])
    if zero >= 3:  # copy_out / rs_in: FSDP2's copies (0 for the other stacks)
        ag, rs, copy = t.c1, t.c2 + t.rs_in, t.copy_out
        units = np.maximum(c.stage_layers, 1.0)
        if not reshard:
            gather = np.where(t.oz3, exposed(ag, stage_fwd, cont) + ag / units, ag)
            return 0.0, gather + rs + copy
        first_layer = ag / units
        fwd = exposed(ag, stage_fwd, cont) + copy
        hidden = fwd + exposed(ag + rs, stage_bwd, cont) + copy
        hidden = hidden + first_layer
        return np.where(t.oz3, hidden, 2 * (ag + copy) + rs), 0.0
    reduce = np.where(t.odp, exposed(t.c1, stage_bwd, cont, c.bucket), t.c1)
    gather = np.where(t.odp, exposed(t.c2, stage_fwd, cont, c.bucket), t.c2)
    if zero == 2 and reshard:  # per micro-batch, unless the pipeline defers the gradient sync
        several = t.m > 1
        return np.where(several, reduce, 0.0), np.where(several, gather, reduce + gather)
    return 0.0, reduce + gather


def hide_pp_hops(cats: dict, total: np.ndarray, t: Columns) -> np.ndarray:
    """``stages._hide_pp_hops`` elementwise where ``t.opp`` (overlapped p2p under the
    interleaved schedule): ``cats["pp_comm"]`` updated; returns the stage's new total, s."""
    rest = total - t.pp_s
    shown = exposed(t.pp_s, rest, t.contention)
    cats["pp_comm"] = np.where(t.opp, shown, cats["pp_comm"])
    return np.where(t.opp, rest + shown, total)


def time_columns(
    c: Columns, t: Columns, pp: int, zero: int, reshard: bool, layers: int, untied: float = 0.0
) -> Columns:
    """Step time of every candidate: ``table`` (the time breakdown, TIME_KEYS order) and
    ``scalars`` (step s, tokens/s, MFU %, HFU %, model FLOPs per token, GPUs)."""
    keys, lid = t.keys, t.lid
    nk = len(PER_LAYER)
    pl = {k: lid[:, j] for j, k in enumerate(PER_LAYER)}
    s_layer = lid[:, nk]
    ncat = len(keys)
    edges = [
        {k: lid[:, nk + 1 + e * ncat + j] for j, k in enumerate(keys) if k in t.edge_keys[e]}
        for e in range(3)
    ]
    emb, head, both = edges
    per_mb, dp_step = dp_columns(c, t, pl, zero, reshard)
    # stages.rank_costs: the bf16 -> fp32 gradient pass (ZeRO 0 and 1 only) by layers and tables
    hp_on = 1.0 if zero <= HP_GRAD_MAX_ZERO else 0.0
    # elementwise.grad_pass_share: autograd's add skips the first micro-batch
    skips_first = t.consts[:, 10] > 0.0
    hp_on = hp_on * np.where(skips_first, np.maximum(t.m - 1.0, 0.0) / t.m, 1.0)
    hp_layer, hp_table = hp_on * c.hp_layer, hp_on * c.hp_table
    if zero >= 2 and not reshard:  # data_parallel.dp_traffic: the deferred sync's pass
        hp_layer = (c.dfa_layer_1 + (t.m - 1.0) * c.dfa_layer_n) / t.m
        hp_table = (c.dfa_table_1 + (t.m - 1.0) * c.dfa_table_n) / t.m

    def stage(n_layers: int, edge: dict, tables: float = 0.0) -> dict:
        cats = stage_categories(n_layers, pl, t.pp_s, per_mb, edge)
        cats["compute_memory_bound"] = cats["compute_memory_bound"] + (
            n_layers * hp_layer + tables * hp_table
        )
        return cats

    if pp == 1:
        stages = [stage(layers, both, 1.0 + untied)]
        extra = 0.0
    else:
        edge_layers = pipeline.layers_on_edge_stage(layers, pp)
        stages = [stage(edge_layers, emb, 1.0), stage(edge_layers, head, 1.0)]
        extra = 0.0
        if pp > 2:
            stages.append(stage(pipeline.layers_on_bottleneck_stage(layers, pp), {}))
            middle = layers - 2 * edge_layers
            extra = middle * (s_layer + hp_layer) + (pp - 2) * (t.pp_s + per_mb)
    totals = [sum(s.values()) for s in stages]
    t_sum = totals[0] + (totals[1] if pp > 1 else 0.0) + extra
    if pp > 1 and np.any(t.opp):
        totals = [hide_pp_hops(s, total, t) for s, total in zip(stages, totals, strict=True)]
    k, best = np.zeros(len(s_layer), dtype=np.intp), totals[0]
    for j in range(1, len(totals)):
        better = totals[j] > best
        k = np.where(better, j, k)
        best = np.where(better, totals[j], best)
    m = t.m
    steady = m * best
    bubble = np.maximum(t_sum - best, 0.0) / c.vpp
    adam_b, ops, adam_bps, host, tokens, peak = (t.consts[:, j] for j in range(4, 10))
    # dense parameters sharded over DP x CP, experts over their own data-parallel group
    owned = c.dense / t.dpcp + c.experts / c.eshard if zero >= 1 else c.local
    gpu = owned * adam_b / adam_bps
    issue = ops * host
    optimizer = np.where(issue > gpu, issue, gpu)
    n = len(s_layer)
    cols = []
    for cat in keys:
        value = stages[0][cat]
        for j in range(1, len(stages)):
            value = np.where(k == j, stages[j][cat], value)
        cols.append(np.broadcast_to(value * m, (n,)))
    cols[keys.index("dp_comm")] = cols[keys.index("dp_comm")] + dp_step
    cols += [np.broadcast_to(bubble, (n,)), optimizer]
    step = steady + bubble + dp_step + optimizer
    tps = tokens / step
    mf, hw = lid[:, -2], lid[:, -1]
    mfu = 100.0 * mf * tps / (t.gpus * peak)
    hfu = 100.0 * hw * tps / (t.gpus * peak)
    scalars = np.column_stack([step, tps, mfu, hfu, mf, t.gpus])
    return Columns(table=np.column_stack(cols), scalars=scalars)


PER_LAYER = (*LAYER_KEYS, "fwd", "bwd")
