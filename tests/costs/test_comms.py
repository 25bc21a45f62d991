"""Collective placement and alpha-beta costs, checked by hand on a Fabric built here."""

from __future__ import annotations

import pytest

import planner
from planner.costs import comms
from planner.costs.comms import Fabric, Placement

UP = 100e9  # B/s per GPU inside a scale-up domain
OUT = 25e9  # B/s per GPU across domains
UP_LAT = 2e-6
OUT_LAT = 10e-6
BASE = 5e-6


def _fabric(latency: bool = True, overlap: float = 0.5, domain: int = 8) -> Fabric:
    return Fabric(
        up_bytes_per_s=UP,
        out_bytes_per_s=OUT,
        up_latency_s=UP_LAT if latency else 0.0,
        out_latency_s=OUT_LAT if latency else 0.0,
        base_latency_s=BASE if latency else 0.0,
        hierarchical_overlap=overlap,
        domain_gpus=domain,
    )


# ---- placement -------------------------------------------------------------------------------
def test_tp8_inside_one_domain():
    assert comms.place(8, 1, 8) == Placement(8, 8, 1)
    assert not comms.place(8, 1, 8).spans_domains


def test_dp_stride_8_one_per_domain():
    """tp=8 fills the node; each DP peer sits in another node."""
    p = comms.place(4, 8, 8)
    assert (p.size, p.per_domain, p.domains) == (4, 1, 4)
    assert p.spans_domains


def test_dp_stride_2_four_per_domain():
    """tp=2: ranks 0, 2, 4, 6 share the first node."""
    p = comms.place(4, 2, 8)
    assert (p.per_domain, p.domains) == (4, 1)
    p = comms.place(16, 2, 8)
    assert (p.per_domain, p.domains) == (4, 4)


def test_stride_4_two_per_domain():
    p = comms.place(4, 4, 8)
    assert (p.per_domain, p.domains) == (2, 2)


def test_group_of_one():
    assert comms.place(1, 1, 8).size == 1
    assert comms.place(1, 64, 8).domains == 1


def test_nvl72_domain():
    """A 72-GPU NVLink domain keeps tp=8 x dp=9 in one domain."""
    p = comms.place(9, 8, 72)
    assert (p.per_domain, p.domains) == (9, 1)


def test_place_groups_megatron_order():
    """Rank order TP (innermost), CP, DP, PP on 8-GPU nodes: tp=2, cp=2, dp=4, pp=2 (32 GPUs)."""
    g = comms.place_groups(tp=2, cp=2, dp=4, pp=2, ep=1, domain_gpus=8)
    assert (g.tp.per_domain, g.tp.domains) == (2, 1)
    assert (g.cp.per_domain, g.cp.domains) == (2, 1)  # stride 2
    assert (g.dp.size, g.dp.per_domain, g.dp.domains) == (4, 2, 2)  # stride 4
    assert (g.dp_cp.size, g.dp_cp.per_domain, g.dp_cp.domains) == (8, 4, 2)  # stride 2
    assert (g.pp.size, g.pp.per_domain, g.pp.domains) == (2, 1, 2)  # stride 16
    assert g.ep.size == 1


# ---- alpha-beta costs inside one domain -------------------------------------------------------
@pytest.mark.parametrize("n", [2, 4, 8])
@pytest.mark.parametrize("nbytes", [1e3, 1e6, 1e9])
def test_all_reduce_in_domain_by_hand(n, nbytes):
    """Ring all-reduce: 2(n-1)/n S / B (nccl-tests PERFORMANCE.md bus bandwidth) + 2(n-1) hops."""
    where = comms.place(n, 1, 8)
    got = comms.collective_time_s("all_reduce", nbytes, where, _fabric())
    want = BASE + 2 * (n - 1) * UP_LAT + 2 * (n - 1) / n * nbytes / UP
    assert got == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("kind", ["all_gather", "reduce_scatter"])
@pytest.mark.parametrize("n", [2, 4, 8])
def test_all_gather_reduce_scatter_in_domain_by_hand(kind, n):
    """Ring all-gather / reduce-scatter: (n-1)/n S / B + (n-1) hops."""
    nbytes = 64e6
    got = comms.collective_time_s(kind, nbytes, comms.place(n, 1, 8), _fabric())
    want = BASE + (n - 1) * UP_LAT + (n - 1) / n * nbytes / UP
    assert got == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("n", [2, 4, 8])
def test_reduce_scatter_plus_all_gather_is_all_reduce_bandwidth(n):
    """All-reduce = reduce-scatter + all-gather (Rabenseifner): same bus volume."""
    f = _fabric(latency=False)
    where = comms.place(n, 1, 8)
    nbytes = 3.7e8
    rs = comms.collective_time_s("reduce_scatter", nbytes, where, f)
    ag = comms.collective_time_s("all_gather", nbytes, where, f)
    ar = comms.collective_time_s("all_reduce", nbytes, where, f)
    assert rs + ag == pytest.approx(ar, rel=1e-12)
    # with latency the hop counts add up too; only the per-collective base is paid twice
    fl = _fabric()
    rs = comms.collective_time_s("reduce_scatter", nbytes, where, fl)
    ag = comms.collective_time_s("all_gather", nbytes, where, fl)
    ar = comms.collective_time_s("all_reduce", nbytes, where, fl)
    assert rs + ag == pytest.approx(ar + BASE, rel=1e-12)


def test_send_recv_in_domain():
    nbytes = 5e7
    got = comms.collective_time_s("send_recv", nbytes, comms.place(2, 1, 8), _fabric())
    assert got == pytest.approx(nbytes / UP + UP_LAT, rel=1e-12)


def test_all_to_all_in_domain_bandwidth_bound():
    """Each rank sends (n-1)/n of its buffer to its peers."""
    n, nbytes = 8, 1e9
    got = comms.collective_time_s("all_to_all", nbytes, comms.place(n, 1, 8), _fabric(False))
    assert got == pytest.approx((n - 1) / n * nbytes / UP, rel=1e-12)


@pytest.mark.parametrize(
    "kind", ["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv"]
)
def test_zero_for_group_of_one_or_empty_buffer(kind):
    f = _fabric()
    assert comms.collective_time_s(kind, 1e9, comms.place(1, 1, 8), f) == 0.0
    assert comms.collective_time_s(kind, 1e9, Placement(1, 1, 1), f) == 0.0
    assert comms.collective_time_s(kind, 0.0, comms.place(8, 1, 8), f) == 0.0


PLACEMENTS = [(2, 1), (8, 1), (4, 2), (4, 8), (16, 1), (16, 2), (64, 8), (32, 1)]


@pytest.mark.parametrize(
    "kind", ["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv"]
)
@pytest.mark.parametrize(("size", "stride"), PLACEMENTS)
def test_monotone_in_bytes(kind, size, stride):
    f = _fabric()
    where = comms.place(size, stride, 8)
    sizes = [1.0, 1e3, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10]
    times = [comms.collective_time_s(kind, s, where, f) for s in sizes]
    assert all(t > 0 for t in times)
    assert all(b > a for a, b in zip(times, times[1:], strict=False)), times
    # large messages are bandwidth bound: time grows ~ linearly
    assert times[-1] / times[-2] == pytest.approx(10, rel=0.05)


# ---- groups spanning domains: physical bounds, not the exact hierarchical formula ------------
@pytest.mark.parametrize(("size", "stride"), [(16, 1), (64, 1), (4, 8), (16, 2)])
def test_cross_domain_all_reduce_bounds(size, stride):
    f = _fabric()
    where = comms.place(size, stride, 8)
    assert where.spans_domains
    nbytes = 1e9
    t = comms.collective_time_s("all_reduce", nbytes, where, f)
    g, k = where.per_domain, where.domains
    # the NIC of each GPU carries at least 2(k-1)/k of its 1/g share of the buffer
    assert t >= 2 * (k - 1) / k * (nbytes / g) / OUT
    # never faster than the intra-domain part alone
    assert t >= comms.collective_time_s("all_reduce", nbytes, comms.place(g, stride, 8), f)
    # and crossing domains costs more than the same number of GPUs on NVLink would
    in_domain = comms.collective_time_s("all_reduce", nbytes, Placement(size, size, 1), f)
    assert t > in_domain


def test_cross_domain_latency_at_least_base_and_one_network_hop():
    """A 1-byte all-reduce over 4 nodes still pays the launch and at least one network hop."""
    t = comms.collective_time_s("all_reduce", 1.0, comms.place(4, 8, 8), _fabric())
    assert t >= BASE + OUT_LAT
    assert t > comms.collective_time_s("all_reduce", 1.0, comms.place(4, 1, 8), _fabric())


def test_hierarchical_overlap_only_helps():
    where = comms.place(32, 1, 8)
    slow = comms.collective_time_s("all_reduce", 1e9, where, _fabric(overlap=0.0))
    fast = comms.collective_time_s("all_reduce", 1e9, where, _fabric(overlap=1.0))
    assert fast < slow


def test_make_fabric_uses_cluster_links(h100):
    from planner import default_profile

    prof = default_profile(h100)
    f = comms.make_fabric(h100, prof)
    assert f.domain_gpus == 8
    assert f.up_bytes_per_s == pytest.approx(450e9 * prof.comm.scale_up_eta)
    assert f.out_bytes_per_s == pytest.approx(50e9 * prof.comm.scale_out_eta)
    assert f.up_latency_s == pytest.approx(h100.spec.scale_up_latency_us * 1e-6)
    assert f.out_latency_s == pytest.approx(h100.spec.scale_out_latency_us * 1e-6)


def test_pipeline_scatter_gather_splits_the_message_over_tp():
    """Narayanan et al. 2021, section 4.1: without sequence parallelism each TP rank sends 1/tp
    of the activation across the pipeline and the receiver all-gathers it over NVLink."""
    model = planner.load_model("gpt3-175b")
    a100 = planner.load_cluster("dgx-a100-80gb")
    tr = planner.Training(seq_len=2048, global_batch=64, micro_batch=1)
    plain = planner.Layout(tp=8, pp=8, dp=1)
    sg = plain.model_copy(update={"pp_scatter_gather": True})
    full = planner.simulate(model, a100, plain, tr).time_breakdown_s["pp_comm"]
    split = planner.simulate(model, a100, sg, tr).time_breakdown_s["pp_comm"]
    assert 0 < split < full / 2
    # with sequence parallelism the message is already split: the switch changes nothing
    sp = plain.model_copy(update={"sequence_parallel": True})
    sp_sg = sp.model_copy(update={"pp_scatter_gather": True})
    assert planner.simulate(model, a100, sp, tr).time_breakdown_s["pp_comm"] == pytest.approx(
        planner.simulate(model, a100, sp_sg, tr).time_breakdown_s["pp_comm"]
    )


# ---- ring latency of all-gather / reduce-scatter (NCCL tuning.cc: no tree for them) -----------
@pytest.mark.parametrize("kind", ["all_gather", "reduce_scatter"])
def test_ring_collectives_pay_one_step_latency_per_rank(kind):
    """A tiny buffer: the time is latency, base + (n - k) intra steps + (k - 1) inter steps."""
    fab = _fabric()
    where = comms.place(64, 1, 8)  # 8 domains of 8
    t = comms.collective_time_s(kind, 1.0, where, fab)
    expected = BASE + (64 - 8) * UP_LAT + (8 - 1) * OUT_LAT
    assert t == pytest.approx(expected, rel=1e-3)


def test_all_gather_latency_grows_linearly_all_reduce_logarithmically():
    fab = _fabric()
    small, big = comms.place(64, 1, 8), comms.place(1024, 1, 8)
    ag = [comms.collective_time_s("all_gather", 1.0, w, fab) for w in (small, big)]
    ar = [comms.collective_time_s("all_reduce", 1.0, w, fab) for w in (small, big)]
    assert ag[1] / ag[0] > 10  # 16x the ranks: about 16x the latency
    assert ar[1] / ar[0] < 2  # log2(128) / log2(8) steps across domains


def test_zero3_pays_one_gather_latency_per_layer():
    """More layers of the same total size: more collectives, more latency (FSDP units)."""
    cluster = planner.load_cluster("dgx-a100-80gb")
    layout = planner.Layout(dp=256, zero=3, overlap_zero3_param_gather=False)
    training = planner.Training(seq_len=2048, global_batch=256, precision="bf16")
    base = planner.load_model("gpt3-1.3b")
    deep = base.model_copy(update={"layers": base.layers * 4, "hidden": base.hidden // 2})
    dp = {}
    for name, model in (("base", base), ("deep", deep)):
        r = planner.simulate(model, cluster, layout, training, stack=None)
        dp[name] = r.time_breakdown_s["dp_comm"]
    assert dp["deep"] > dp["base"]
