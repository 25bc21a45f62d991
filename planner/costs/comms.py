"""Collective communication: where each process group sits and what its collectives cost.

Placement. Ranks are laid out TP innermost, then CP, then DP, then PP (Megatron-Core order);
a group of ``size`` ranks spaced ``stride`` apart has ``per_domain`` members inside one
scale-up domain (NVLink) and spans ``domains`` domains.

Cost. Alpha-beta with the nccl-tests bus-bandwidth factors (NVIDIA/nccl-tests doc/PERFORMANCE.md):
all-reduce moves 2(n-1)/n of the buffer per rank, all-gather / reduce-scatter / all-to-all (n-1)/n.
A group that spans domains runs hierarchically (intra-domain phase on NVLink, inter-domain phase
on the NIC carrying 1/per_domain of the buffer; ml-engineering "Inter-node speed depends on
intra-node speed"; jax-ml scaling-book gpus.md), the two phases partly pipelined.
Inside one domain, where the profile holds a measured bus-bandwidth-over-size curve (nccl-tests
all_reduce_perf; ``CommEfficiency.size_curve``), a collective takes the curve's time at its
message size (between about 1 and 256 MiB NCCL stays well below the large-message bandwidth:
A100, 16 MiB, 106 of 235 GB/s), and never less than the alpha-beta time.
Latency follows NCCL's model (src/graph/tuning.cc, via shared/reference/hardware.md B6(a)): a
base latency plus a per-step hardware latency. All-reduce across domains runs as a tree (ring
steps inside a domain, 2 log2 k tree steps across); all-gather and reduce-scatter run as rings
(NCCL has no tree for them), n - 1 steps of which k - 1 cross a domain boundary, so their
latency grows linearly with the group: about 7 ms for a 1,536-rank all-gather on A100 nodes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from planner.profile import CalibrationProfile
from planner.specs.hardware import Cluster

Collective = Literal["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv"]


@dataclass(frozen=True, slots=True)
class Placement:
    """How a process group maps onto the hierarchy."""

    size: int
    per_domain: int  # members inside one scale-up domain
    domains: int  # scale-up domains the group spans

    @property
    def spans_domains(self) -> bool:
        return self.domains > 1


@dataclass(frozen=True, slots=True)
class Fabric:
    """Achieved bandwidths and latencies of one cluster under one profile."""

    up_bytes_per_s: float
    out_bytes_per_s: float
    up_latency_s: float
    out_latency_s: float
    base_latency_s: float
    hierarchical_overlap: float
    domain_gpus: int
    overlap_contention: float = 0.0
    # measured (op, ranks) -> (latency s, bus bandwidth B/s), used for groups inside a domain
    measured: tuple[tuple[str, int, float, float], ...] = ()
    # measured in-domain bus bandwidth over message size: (log2 bytes, fraction) points
    size_curve: tuple[tuple[float, float], ...] = ()


def make_fabric(cluster: Cluster, profile: CalibrationProfile) -> Fabric:
    """Bind a cluster's links to a profile's achieved-bandwidth fractions."""
    s = cluster.spec
    return Fabric(
        up_bytes_per_s=s.scale_up_bandwidth_gb_per_s * 1e9 * profile.comm.scale_up_eta,
        out_bytes_per_s=s.scale_out_bandwidth_gb_per_s * 1e9 * profile.comm.scale_out_eta,
        up_latency_s=s.scale_up_latency_us * 1e-6,
        out_latency_s=s.scale_out_latency_us * 1e-6,
        base_latency_s=profile.comm.base_latency_us * 1e-6,
        hierarchical_overlap=profile.comm.hierarchical_overlap,
        domain_gpus=s.scale_up_domain_gpus,
        overlap_contention=profile.comm.overlap_contention,
        measured=tuple(
            (c.op, c.ranks, c.latency_us * 1e-6, c.bus_bandwidth_gb_per_s * 1e9)
            for c in profile.collectives
        ),
        size_curve=tuple((math.log2(b), f) for b, f in profile.comm.size_curve),
    )


def size_fraction(buffer_bytes: float, fabric: Fabric) -> float:
    """The measured in-domain bus bandwidth at ``buffer_bytes`` as a fraction of the
    large-message one: the curve interpolated in log2(bytes), its end values beyond it."""
    curve = fabric.size_curve
    x = math.log2(buffer_bytes)
    if x <= curve[0][0]:
        return curve[0][1]
    for (x0, f0), (x1, f1) in zip(curve, curve[1:], strict=False):
        if x <= x1:
            return f0 + (f1 - f0) * (x - x0) / (x1 - x0)
    return curve[-1][1]


def _measured_fit(kind: str, n: int, fabric: Fabric) -> tuple[float, float] | None:
    """(latency s, busbw B/s) of the measured fit for ``kind`` nearest to ``n`` ranks."""
    best = None
    for op, ranks, lat, bw in fabric.measured:
        if op == kind and (best is None or abs(ranks - n) < abs(best[0] - n)):
            best = (ranks, lat, bw)
    return None if best is None else (best[1], best[2])


def exposed_time_s(
    comm_s: float, window_s: float, fabric: Fabric, min_exposed_fraction: float = 0.0
) -> float:
    """Seconds of ``comm_s`` left on the critical path when it overlaps ``window_s`` of compute.

    At least ``min_exposed_fraction`` stays exposed (a last bucket, a pipeline fill); the hidden
    part still costs ``overlap_contention`` of its time (shared SMs and HBM bandwidth).
    """
    if comm_s <= 0.0:
        return 0.0
    exposed = max(comm_s - window_s, comm_s * min_exposed_fraction, 0.0)
    return exposed + fabric.overlap_contention * (comm_s - exposed)


def place(size: int, stride: int, domain_gpus: int) -> Placement:
    """Placement of a group of ``size`` ranks spaced ``stride`` apart (rank order TP-CP-DP-PP)."""
    if size <= 1:
        return Placement(1, 1, 1)
    per = 1 if stride >= domain_gpus else max(1, min(size, domain_gpus // stride))
    return Placement(size, per, math.ceil(size / per))


def _factor(kind: Collective, n: int) -> float:
    if n <= 1:
        return 0.0
    if kind == "all_reduce":
        return 2.0 * (n - 1) / n
    if kind == "send_recv":
        return 1.0
    return (n - 1) / n


def _steps(kind: Collective, n: int) -> int:
    return 2 * (n - 1) if kind == "all_reduce" else max(n - 1, 1)


def collective_time_s(
    kind: Collective, buffer_bytes: float, where: Placement, fabric: Fabric
) -> float:
    """Seconds for one collective over ``buffer_bytes`` (the full, unsharded array).

    ``all_to_all`` buffers are the bytes one rank sends in total; ``send_recv`` the message.
    """
    if where.size <= 1 or buffer_bytes <= 0:
        return 0.0
    g, k = where.per_domain, where.domains
    if k == 1 and fabric.measured:
        fit = _measured_fit(kind, g, fabric)
        if fit is not None:
            return fit[0] + _factor(kind, g) * buffer_bytes / fit[1]
    if kind == "all_to_all":
        # every rank sends (n-1)/n of its buffer; the share bound for other domains uses the NIC
        n = where.size
        return _exchange_s(buffer_bytes * (g - 1) / n, buffer_bytes * (n - g) / n, where, fabric)
    if kind == "send_recv":
        bw = fabric.out_bytes_per_s if k > 1 else fabric.up_bytes_per_s
        lat = fabric.out_latency_s if k > 1 else fabric.up_latency_s
        return buffer_bytes / bw + lat
    intra = _factor(kind, g) * buffer_bytes / fabric.up_bytes_per_s
    intra_lat = _steps(kind, g) * fabric.up_latency_s if g > 1 else 0.0
    if k == 1:
        alpha_beta = fabric.base_latency_s + intra_lat + intra
        if not fabric.size_curve:
            return alpha_beta
        # the measured curve: NCCL's protocol and chunk pipeline below the large-message
        # bandwidth (its latency included), never faster than the alpha-beta bound
        return max(alpha_beta, intra / size_fraction(buffer_bytes, fabric))
    inter = _factor(kind, k) * (buffer_bytes / g) / fabric.out_bytes_per_s
    if kind == "all_reduce":  # NCCL's tree across domains: log latency
        inter_lat = 2 * math.log2(k) * fabric.out_latency_s
    else:  # all-gather / reduce-scatter run as rings: n - 1 steps, k - 1 of them across domains
        intra_lat = (where.size - k) * fabric.up_latency_s
        inter_lat = (k - 1) * fabric.out_latency_s
    hidden = fabric.hierarchical_overlap * min(intra, inter)
    return fabric.base_latency_s + intra_lat + inter_lat + intra + inter - hidden


def domains_hit(
    experts: int,
    top_k: int,
    domains: int,
    groups: int | None = None,
    group_topk: int | None = None,
) -> float:
    """Expected number of the ``domains`` scale-up domains (nodes) an expert-parallel group
    spans that one token's ``top_k`` routed experts reach, the experts split evenly and in order
    over the domains and the routing uniform (the force-balanced routing of published MoE
    benchmarks). With group-limited routing (``groups`` equal groups in expert order, the
    token's experts from ``group_topk`` of them: DeepSeek-V3's node-limited routing, M = 4 of 8
    nodes) where the groups tile the domains (``groups`` a multiple of ``domains``), the chosen
    groups are uniform too; otherwise the limit is ignored (the count is then an upper bound).

    A domain holding ``r`` of the groups is missed when none of the token's experts lies in the
    ``j`` chosen groups it holds (j hypergeometric over the chosen groups): with ``c`` experts
    per group, P(miss | j) = C((group_topk - j) c, top_k) / C(group_topk c, top_k)."""
    if domains <= 1:
        return 1.0
    if not groups or not group_topk or groups % domains or experts % groups:
        groups, group_topk = domains, domains  # any expert: each domain one group, all chosen
    per_group = experts // groups
    held = groups // domains  # groups in one domain
    pool = group_topk * per_group  # experts the token chooses among
    # in logarithms (lgamma): exact binomials of 65,536 experts are numbers of thousands of
    # digits, and a sum over as many terms of them does not finish
    chosen = _log_comb(groups, group_topk)
    total = _log_comb(pool, top_k)
    miss = 0.0
    for j in range(max(0, group_topk - (groups - held)), min(held, group_topk) + 1):
        rest = pool - j * per_group
        if rest < top_k:  # the token's experts cannot all lie outside this domain
            continue
        log_p_j = _log_comb(held, j) + _log_comb(groups - held, group_topk - j) - chosen
        miss += math.exp(log_p_j + _log_comb(rest, top_k) - total)
    return domains * (1.0 - miss)


def _log_comb(n: int, k: int) -> float:
    """log C(n, k) for 0 <= k <= n."""
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)


def dispatch_time_s(
    token_bytes: float,
    top_k: int,
    remote_domains: float,
    where: Placement,
    fabric: Fabric,
) -> float:
    """Seconds of one MoE dispatch (or combine) over the EP group ``where`` that sends each
    token once per destination domain over the scale-out fabric and forwards it to that
    domain's experts over NVLink (DeepEP's internode kernels, HybridEP; DeepSeek-V3 report
    section 3.2.2): the NIC carries ``token_bytes`` (a rank's tokens x hidden x bytes) times
    ``remote_domains``, the expected other domains a token reaches (:func:`domains_hit`),
    where Megatron-Core's all-to-all sends one copy per routed expert, ``top_k`` (n - g) / n;
    NVLink carries the copies for the domain's own ranks as before. Inside one domain it is the
    all-to-all."""
    copies = token_bytes * top_k
    if where.domains <= 1:
        return collective_time_s("all_to_all", copies, where, fabric)
    intra = copies * (where.per_domain - 1) / where.size
    return _exchange_s(intra, token_bytes * remote_domains, where, fabric)


def _exchange_s(intra_bytes: float, inter_bytes: float, where: Placement, fabric: Fabric) -> float:
    """Seconds of a one-step exchange in which each rank sends ``intra_bytes`` over NVLink and
    ``inter_bytes`` over its NIC at once (all-to-all, MoE dispatch): the slower of the two,
    plus one latency (the NIC's where the group spans domains)."""
    spans = where.domains > 1
    lat = fabric.base_latency_s + (fabric.out_latency_s if spans else fabric.up_latency_s)
    intra = intra_bytes / fabric.up_bytes_per_s
    inter = inter_bytes / fabric.out_bytes_per_s if spans else 0.0
    return max(intra, inter) + lat


@dataclass(frozen=True, slots=True)
class Groups:
    """Placements of every parallel group of a layout."""

    tp: Placement
    cp: Placement
    dp: Placement
    dp_cp: Placement  # gradient / ZeRO sharding group (DP x CP)
    ep: Placement
    pp: Placement
    # hybrid sharding (Layout.dp_shard): the ranks one shard group spans (consecutive DP x CP
    # ranks), and the groups holding the same shard across them; the whole DP x CP group and
    # no replicas without it
    dp_shard: Placement = Placement(1, 1, 1)
    dp_replicate: Placement = Placement(1, 1, 1)


def place_groups(
    tp: int,
    cp: int,
    dp: int,
    pp: int,
    ep: int,
    domain_gpus: int,
    expert_tp: int | None = None,
    shard: int | None = None,
) -> Groups:
    """Place all groups for rank order TP (innermost), CP, DP, PP; EP is carved out of the
    ranks next to the expert tensor-parallel group (stride ``expert_tp``, default tp); ZeRO's
    shard groups are ``shard`` consecutive DP x CP ranks (None: all of them)."""
    shard = dp * cp if shard is None else shard
    return Groups(
        dp_shard=place(shard, tp, domain_gpus),
        dp_replicate=place(dp * cp // shard, tp * shard, domain_gpus),
        tp=place(tp, 1, domain_gpus),
        cp=place(cp, tp, domain_gpus),
        dp=place(dp, tp * cp, domain_gpus),
        dp_cp=place(dp * cp, tp, domain_gpus),
        ep=place(ep, tp if expert_tp is None else expert_tp, domain_gpus),
        pp=place(pp, tp * cp * dp, domain_gpus),
    )
