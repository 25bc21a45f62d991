"""The inputs of :mod:`planner.simulate.vector_math` for one group of candidates: each shared
stage looked up (or costed, on first use, by the one-layout stage functions) under its key, and
gathered into numpy columns, one entry per candidate.

Every table here is a list of numeric rows kept in the simulator's memo (one row per distinct
key, appended on first use) and turned into an array once per group.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import TYPE_CHECKING

import numpy as np

from planner.costs import comms, memory, pipeline
from planner.costs.elementwise import hp_grad_pass_trains
from planner.simulate.data_parallel import (
    DP_BUCKET_PARAMS,
    deferred_accumulation,
    fsdp2_copies_s,
    hp_grad_pass,
)
from planner.simulate.layers import LAYER_KEYS
from planner.simulate.stages import params_per_gpu, shared_collective_s
from planner.simulate.vector_math import PER_LAYER, Columns

if TYPE_CHECKING:
    from planner.simulate.vector import VectorPass


# the integer row of one candidate in a group (planner/simulate/vector.py VectorPass.prepare)
ROW = SimpleNamespace(
    **{
        name: k
        for k, name in enumerate(
            ("i", "mid", "pid", "fid", "tix", "vpp", "m", "tp", "cp", "dp", "ep", "etp")
            + ("odp", "oz3", "psg", "otp", "oep", "opp", "zc")
        )
    }
)


def table(memo: dict, name: str) -> np.ndarray:
    """The memo's numeric rows ``name`` as a 2-D float array (rebuilt when rows were added)."""
    rows = memo[name]
    cached = memo.get((name, "array"))
    if cached is None or len(cached) != len(rows):
        cached = memo[name, "array"] = np.array(rows, dtype=np.float64).reshape(len(rows), -1)
    return cached


def mid_row(part) -> tuple[float, float, float, float]:  # noqa: ANN001 - a batch._Layers
    full_one, logits, mtp = part.terms
    return (part.act_layer, full_one, logits, mtp)


def new_pid(vp: VectorPass, mid: int, pp: int, i: int) -> int | None:
    """Parameters of memory key ``mid`` on ``pp`` stages, priced from candidate ``i``."""
    sim, memo = vp.sim, vp.memo
    try:
        ctx = vp.ctx(i)
        mkey, part = memo["mid_rows"][mid]
        split = (pp, None, None)  # the vector path's candidates split evenly (vector.py)
        stack = sim._stack(mkey, part.kinds, part.act_layer, split, None)
        pkey = (mkey, split, ctx.both_ends)
        params = sim._params.get(pkey)
        if params is None:
            params = sim._params[pkey] = params_per_gpu(ctx, stack)
        hp = hp_grad_pass(ctx, params) if hp_grad_pass_trains(ctx.training) else (0.0, 0.0)
        deferred = deferred_accumulation(ctx, params)  # read by groups with a deferred sync
    except (ArithmeticError, sim_errors()):
        return None
    pid = memo["pid"][mid, pp] = len(memo["pid_num"])
    bucket = min(1.0, DP_BUCKET_PARAMS / max(params.local, 1.0))
    memo["pid_num"].append(
        (
            params.dense,
            params.stage_experts,
            params.dense_layer_params,
            params.expert_layer_params,
            params.local,
            params.stage_layers,
            bucket,
            *hp,
            *deferred,
            *params.rank("first"),
            *params.rank("last"),
            *params.rank("middle"),
        )
    )
    memo["pid_params"].append(params)
    memo["pid_key"].append((params.dense, params.stage_experts, params.stage_layers))
    return pid


def sim_errors() -> type[Exception]:
    from planner.errors import PlannerError

    return PlannerError


def new_flight(memo: dict, layers: int, pp: int, vpp: int, m: int, sched) -> int:  # noqa: ANN001
    """Intern the activations in flight of (pp, vpp, micro-batches, schedule): the first
    rank's layers' worth (memory.layers_in_flight), the last rank's chunks and the second
    rank's layers' worth (0 without middle ranks)."""
    first, _, middle = pipeline.stage_layer_counts(layers, pp)
    fid = memo["flight"][pp, vpp, m, sched] = len(memo["flight_num"])
    in_flight = memory.layers_in_flight(first, pp, vpp, m, sched)
    last = sched.peak_chunks(pp - 1, pp, vpp, m) if pp > 1 else 0
    mid = memory.layers_in_flight(middle, pp, vpp, m, sched, rank=1) if pp > 2 else 0.0
    memo["flight_num"].append((in_flight, last, mid))
    return fid


# the columns of the memo's "mid_num" rows (mid_row) and "pid_num" rows (new_pid), in order
MID_COLUMNS = ("act", "full_one", "logits", "mtp")
PID_COLUMNS = ("dense", "experts", "dense_layer", "expert_layer", "local", "stage_layers", "bucket")
# the bf16 -> fp32 gradient pass of a layer and of a vocabulary table (data_parallel.hp_grad_pass,
# before its ZeRO condition, which time_columns applies per group)
PID_COLUMNS += ("hp_layer", "hp_table")
# the accumulation pass under a deferred gradient sync, first micro-batch and each later one
# (data_parallel.deferred_accumulation)
PID_COLUMNS += ("dfa_layer_1", "dfa_layer_n", "dfa_table_1", "dfa_table_n")
# each pipeline rank's own (layers, dense, expert parameters): stages.Params.rank
PID_COLUMNS += tuple(
    f"{r}_{k}" for r in ("first", "last", "mid") for k in ("n", "dense", "experts")
)


def memory_inputs(vp: VectorPass, pp: int, r: np.ndarray) -> Columns:
    """The memory columns of the rows ``r`` (ROW fields) of one pipeline depth."""
    memo = vp.memo
    mids, pidx, fidx, tix = r[:, ROW.mid], r[:, ROW.pid], r[:, ROW.fid], r[:, ROW.tix]
    mt, pt, ft, tt = (table(memo, n) for n in ("mid_num", "pid_num", "flight_num", "tconsts"))
    tp, cp, dp, ep, etp = (r[:, k] for k in (ROW.tp, ROW.cp, ROW.dp, ROW.ep, ROW.etp))
    shard = dp * cp
    return Columns(
        **{name: mt[mids, j] for j, name in enumerate(MID_COLUMNS)},
        **{name: pt[pidx, j] for j, name in enumerate(PID_COLUMNS)},
        in_flight=ft[fidx, 0],
        last_chunks=ft[fidx, 1],
        mid_in_flight=ft[fidx, 2],
        vpp=r[:, ROW.vpp].astype(np.float64),
        w_b=tt[tix, 0],
        o_b=tt[tix, 1],
        g_b=tt[tix, 2],
        gather_b=tt[tix, 3],
        cache_b=tt[tix, 11],
        shard=shard.astype(np.float64),
        eshard=np.maximum(1, tp * shard // (ep * etp)).astype(np.float64),
        tix=tix,
    )


def _lid_row(t, pp1_edge: dict, keys: tuple) -> tuple:  # noqa: ANN001 - a batch._Timed
    """Numeric row of a layer-cost key: per-layer seconds, their LAYER_KEYS sum, the edges by
    category (embedding rank, head rank, both on one rank), the FLOPs per token."""
    pl = t.stack.per_layer
    s_layer = sum(pl[k] for k in LAYER_KEYS)
    emb = [t.emb.get(k, 0.0) for k in keys]
    head = [t.head.get(k, 0.0) for k in keys]
    both = [pp1_edge.get(k, 0.0) for k in keys]
    return (*(pl[k] for k in PER_LAYER), s_layer, *emb, *head, *both, *t.work)


def _new_lid(vp: VectorPass, lk: tuple, mid: int, i: int, keys: tuple) -> int | None:
    sim, memo = vp.sim, vp.memo
    try:
        ctx = vp.ctx(i)
        mkey, part = memo["mid_rows"][mid]
        key = (mkey, (ctx.layout.overlap_tp_comm, ctx.layout.overlap_ep_comm))
        t = sim._timed(key, part, ctx)
    except (ArithmeticError, sim_errors()):
        return None
    lid = memo["lid"][lk] = len(memo["lid_num"])
    both = {**t.emb, **t.head}
    memo["lid_num"].append(_lid_row(t, both, keys))
    for known, edge in zip(memo["edge_keys"], (t.emb, t.head, both), strict=True):
        known.update(edge)
    memo["lid_key"].append(key)
    return lid


def _pp_send(
    vp: VectorPass, lid: int, i: int, pp: int, vpp: int, psg: bool, stride: int
) -> float | None:
    """``stages.pp_send_s`` of candidate ``i`` (layer-cost key ``lid``), under the simulator's
    own key when it has it: (layer key, pp, vpp, scatter/gather, the PP group's placement)."""
    sim = vp.sim
    group = comms.place(pp, stride, sim.fabric.domain_gpus)
    found = sim._pp_s.get((vp.memo["lid_key"][lid], pp, vpp, psg, group))
    if found is not None:
        return found
    try:
        ctx = vp.ctx(i)
        return sim._pp_send(vp.memo["lid_key"][lid], ctx)
    except (ArithmeticError, sim_errors()):
        return None


def _collectives(vp: VectorPass, pid: int, zero: int, groups: tuple, g_b: float, ga_b: float):  # noqa: ANN202
    """(first, second) raw DP collective seconds of ``stages.dp_traffic``: ZeRO-3 (all-gather,
    reduce-scatter) per step's units; ZeRO 0 (all-reduce, 0); ZeRO 1/2 (reduce-scatter,
    all-gather)."""
    sim = vp.sim
    params = vp.memo["pid_params"][pid]
    tp, cp, dp, ep, etp = groups
    domain = sim.fabric.domain_gpus
    dp_group = comms.place(dp * cp, tp, domain)
    edp = max(1, tp * dp * cp // (ep * etp))
    edp_group = comms.place(edp, ep * etp, domain)
    ns = SimpleNamespace(shared=sim._shared, fabric=sim.fabric)
    dense_p = params.dense

    def coll(kind: comms.Collective, nbytes_per_param: float, units: float = 1.0) -> float:
        return shared_collective_s(
            ns, kind, dense_p * nbytes_per_param / units, dp_group
        ) + shared_collective_s(
            ns, kind, params.stage_experts * nbytes_per_param / units, edp_group
        )

    if zero >= 3:
        units = max(params.stage_layers, 1.0)
        return units * coll("all_gather", ga_b, units), units * coll("reduce_scatter", g_b, units)
    if zero == 0:
        return coll("all_reduce", g_b), 0.0
    return coll("reduce_scatter", g_b), coll("all_gather", ga_b)


def _copies(vp: VectorPass, copies: dict, pid: int, tix: int, i: int) -> tuple[float, float]:
    """``data_parallel.fsdp2_copies_s`` of candidate ``i``'s parameters and training, kept
    under (parameter key, training)."""
    out = fsdp2_copies_s(vp.ctx(i), vp.memo["pid_params"][pid])
    copies[vp.memo["pid_key"][pid], tix] = out
    return out


def time_inputs(
    vp: VectorPass, pp: int, zero: int, r: np.ndarray, mem: Columns, keys: tuple
) -> Columns | None:
    """The time columns of the timed rows ``r`` (``mem``: their memory columns); None when a
    shared stage could not be costed (the rows then go to the fallback)."""
    memo = vp.memo
    lids, pps, colls = memo["lid"], memo["pp_s"], memo["coll"]
    tt_l, pnum = memo["tconsts"], memo["pid_key"]
    lid_l, pps_l, c1_l, c2_l, cp_l, rsi_l = [], [], [], [], [], []
    copies = memo["copies"]
    for row in r.tolist():
        (
            i,
            mid,
            pid,
            _fid,
            tix,
            vpp,
            _m,
            tp,
            cp,
            dp,
            ep,
            etp,
            _odp,
            _oz3,
            psg,
            otp,
            oep,
            _opp,
            zc,
        ) = row
        lk = (mid, otp, oep)
        lid = lids.get(lk)
        if lid is None and (lid := _new_lid(vp, lk, mid, i, keys)) is None:
            return None
        sk = (lid, pp, vpp, psg, tp * cp * dp)  # the PP group's stride
        pp_s = pps.get(sk)
        if pp_s is None:
            pp_s = _pp_send(vp, lid, i, pp, vpp, bool(psg), tp * cp * dp)
            if pp_s is None:
                return None
            pps[sk] = pp_s
        g_b, ga_b = tt_l[tix][2], tt_l[tix][3]
        # what dp_traffic's collectives read: the parameters, the groups, the bytes
        ck = (pnum[pid], zero, dp, cp, tp, ep, etp, g_b, ga_b)
        c = colls.get(ck)
        if c is None:
            c = colls[ck] = _collectives(vp, pid, zero, (tp, cp, dp, ep, etp), g_b, ga_b)
        copy_out = rs_in = 0.0
        if zc:  # FSDP2's copies (data_parallel.fsdp2_copies_s): the parameters and the bytes
            copy_out, rs_in = copies.get((pnum[pid], tix)) or _copies(vp, copies, pid, tix, i)
        cp_l.append(copy_out)
        rsi_l.append(rs_in)
        lid_l.append(lid)
        pps_l.append(pp_s)
        c1_l.append(c[0])
        c2_l.append(c[1])
    lt = table(memo, "lid_num")
    tt = table(memo, "tconsts")
    return Columns(
        lid=lt[np.array(lid_l, dtype=np.intp)],
        pp_s=np.array(pps_l, dtype=np.float64),
        c1=np.array(c1_l, dtype=np.float64),
        c2=np.array(c2_l, dtype=np.float64),
        copy_out=np.array(cp_l, dtype=np.float64),
        rs_in=np.array(rsi_l, dtype=np.float64),
        m=r[:, ROW.m].astype(np.float64),
        odp=r[:, ROW.odp] > 0,
        oz3=r[:, ROW.oz3] > 0,
        opp=r[:, ROW.opp] > 0,
        gpus=(r[:, ROW.tp] * r[:, ROW.cp] * r[:, ROW.dp] * pp).astype(np.float64),
        dpcp=(r[:, ROW.dp] * r[:, ROW.cp]).astype(np.float64),
        consts=tt[mem.tix],
        keys=keys,
        edge_keys=tuple(frozenset(k) for k in memo["edge_keys"]),
        contention=vp.sim.fabric.overlap_contention,
    )
