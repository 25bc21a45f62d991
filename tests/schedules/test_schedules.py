"""Pipeline schedules as objects (planner/schedules/): names, legality, op orders, bubbles and
activations in flight, checked against hand-worked numbers, Qi et al. 2023 Table 1, the
zero-bubble repository's table and the DualPipe README."""

from __future__ import annotations

from typing import get_args

import pytest

import planner
from planner.schedules import (
    SCHEDULES,
    Op,
    PassTimes,
    StageTimes,
    peak_in_flight,
    run_orders,
    schedule_of,
    schedule_violation,
    vpp_error,
)
from planner.schedules.base import windows_s
from planner.schedules.one_f_one_b import rank_order
from planner.search.export import megatron_args, torchtitan_toml
from planner.specs.knobs import Schedule

# torch.distributed.pipelining get_schedule_class names (the torchtitan config values)
TORCH_NAMES = {"1F1B", "Interleaved1F1B", "InterleavedZeroBubble", "ZBVZeroBubble", "DualPipeV"}
CHUNKS = {"1f1b": 1, "zb-h1": 1, "zb-h2": 1, "interleaved": 2, "interleaved-zb": 2, "zbv": 2}
CHUNKS["dualpipev"] = 2


def _equal(pp: int, chunks: int, f: float, b: float, w: float) -> StageTimes:
    """Equal ranks whose chunks take f, b (input gradient), w seconds."""
    ranks = tuple(tuple(PassTimes(f, b, w) for _ in range(chunks)) for _ in range(pp))
    t = chunks * (f + b + w)
    return StageTimes(t, pp * t, ranks)


def _duration(f: float, b: float, w: float):
    return lambda rank, op: PassTimes(f, b, w).duration_s(op.kind)


def _window_bubble(name: str, pp: int, m: int, f: float, b: float, w: float) -> float:
    """The longest rank window less its work, from running the order."""
    sched = SCHEDULES[name]
    v = CHUNKS[name]
    orders, starts = sched.timed(pp, v, m, _duration(f, b, w))
    return max(windows_s(orders, starts, _duration(f, b, w))) - v * m * (f + b + w)


# ---- names and legality ---------------------------------------------------------------------
def test_every_layout_schedule_is_an_object() -> None:
    assert set(SCHEDULES) == set(get_args(Schedule))
    for name, sched in SCHEDULES.items():
        assert sched.name == name and sched.title and sched.reference
        assert sched.torchtitan in TORCH_NAMES or (
            sched.torchtitan is None and sched.torchtitan_note
        )
        if sched.megatron is None:
            assert sched.megatron_note.startswith("not in Megatron-LM")


def test_default_schedule_follows_vpp() -> None:
    assert schedule_of(planner.Layout(pp=4)).name == "1f1b"
    assert schedule_of(planner.Layout(pp=4, vpp=2)).name == "interleaved"
    assert schedule_of(planner.Layout(pp=4, vpp=2, schedule="zbv")).name == "zbv"


@pytest.mark.parametrize(
    ("schedule", "vpp"),
    [
        ("1f1b", 2),  # no silent synonym of interleaved
        ("interleaved", None),
        ("zb-h1", 2),
        ("zb-h2", 4),
        ("interleaved-zb", 1),
        ("zbv", None),
        ("zbv", 4),
        ("dualpipev", 3),
    ],
)
def test_chunk_count_must_match_the_schedule(schedule: str, vpp: int | None) -> None:
    assert vpp_error(schedule, vpp)
    with pytest.raises(ValueError, match=schedule):
        planner.Layout(pp=4, vpp=vpp, schedule=schedule)


def test_matching_chunk_counts_are_accepted() -> None:
    for name, v in CHUNKS.items():
        assert vpp_error(name, v if v > 1 else None) is None
        planner.Layout(pp=4, vpp=v if v > 1 else None, schedule=name)


@pytest.mark.parametrize(
    ("kw", "global_batch", "field"),
    [
        (dict(pp=1, dp=8, schedule="zb-h1"), 64, "layout.schedule"),
        (dict(pp=1, dp=8, vpp=2, schedule="interleaved"), 64, "layout.vpp"),
        (dict(pp=4, dp=2, schedule="zb-h1"), 6, "training.global_batch"),  # 3 < pp
        (dict(pp=4, dp=2, schedule="zb-h2"), 12, "training.global_batch"),  # 6 < 2pp - 1
        (dict(pp=4, dp=2, vpp=2, schedule="dualpipev"), 14, "training.global_batch"),  # 7 < 2pp
        (dict(pp=3, dp=2, vpp=2, schedule="zbv"), 64, "layout.pp"),  # 32 layers, 2 x 3 chunks
        (dict(pp=3, dp=1, vpp=2, schedule="interleaved-zb"), 7, "training.global_batch"),
    ],
)
def test_schedule_violations(kw: dict, global_batch: int, field: str) -> None:
    model = planner.load_model("llama3.1-8b")
    training = planner.Training(seq_len=4096, global_batch=global_batch)
    found = schedule_violation(model, planner.Layout(**kw), training)
    assert found is not None and found[0] == field and found[2]


def test_legal_schedules_have_no_violation() -> None:
    model = planner.load_model("llama3.1-8b")
    training = planner.Training(seq_len=4096, global_batch=64)
    for name, v in CHUNKS.items():
        layout = planner.Layout(pp=4, dp=2, vpp=v if v > 1 else None, schedule=name)
        assert schedule_violation(model, layout, training) is None, name


# ---- op orders ------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(SCHEDULES))
@pytest.mark.parametrize(("pp", "m"), [(2, 4), (4, 8), (4, 12), (8, 16), (3, 7)])
def test_orders_run_every_pass_once_without_deadlock(name: str, pp: int, m: int) -> None:
    sched = SCHEDULES[name]
    v = CHUNKS[name]
    if m < (2 * pp if name == "dualpipev" else pp):
        pytest.skip("fewer micro-batches than the schedule needs")
    if name == "interleaved-zb" and m % max(1, m // pp):
        pytest.skip("torch.distributed.pipelining needs equal rounds (a legality rule)")
    orders, starts = sched.timed(pp, v, m, _duration(1.0, 1.3, 0.6))
    for order in orders:
        grads = [(op.mb, op.chunk) for op in order if op.kind in ("B", "I")]
        weights = [(op.mb, op.chunk) for op in order if op.kind in ("B", "W")]
        fwds = [(op.mb, op.chunk) for op in order if op.kind == "F"]
        every = sorted((mb, c) for mb in range(m) for c in range(v))
        assert sorted(fwds) == sorted(grads) == sorted(weights) == every
        seen: set[tuple[str, int, int]] = set()
        for op in order:  # on a rank: F before I/B, I before W
            if op.kind in ("B", "I"):
                assert ("F", op.mb, op.chunk) in seen
            if op.kind == "W":
                assert ("I", op.mb, op.chunk) in seen
            seen.add((op.kind, op.mb, op.chunk))
    assert all(st == sorted(st) for st in starts)


@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_ops_start_after_what_they_depend_on(name: str) -> None:
    sched, pp, m = SCHEDULES[name], 4, 8
    v = CHUNKS[name]
    dur = _duration(1.0, 1.5, 0.7)
    orders, starts = sched.timed(pp, v, m, dur)
    end = {}
    for r, (order, st) in enumerate(zip(orders, starts, strict=True)):
        for op, t in zip(order, st, strict=True):
            vs = sched.virtual_stage(r, op.chunk, pp)
            kind = "G" if op.kind in ("B", "I") else op.kind
            end[(kind, op.mb, vs)] = (t, t + dur(r, op))
    last = pp * v - 1
    for (kind, mb, vs), (t, _) in end.items():
        if kind == "F" and vs > 0:
            assert t >= end[("F", mb, vs - 1)][1] - 1e-12
        if kind == "G":
            dep = ("G", mb, vs + 1) if vs < last else ("F", mb, vs)
            assert t >= end[dep][1] - 1e-12


def test_1f1b_order() -> None:
    """Rank s warms up with pp - s - 1 forwards, then alternates (PipeDream-Flush)."""
    kinds = ["".join(op.kind for op in rank_order(s, 4, 1, 6)) for s in range(4)]
    assert kinds == ["FFFFBFBFBBBB", "FFFBFBFBFBBB", "FFBFBFBFBFBB", "FBFBFBFBFBFB"]


def test_v_placement_turns_at_the_last_rank() -> None:
    sched = SCHEDULES["zbv"]
    assert [sched.virtual_stage(r, 0, 4) for r in range(4)] == [0, 1, 2, 3]
    assert [sched.virtual_stage(r, 1, 4) for r in range(4)] == [7, 6, 5, 4]


@pytest.mark.parametrize(("pp", "vpp", "m"), [(4, 1, 8), (4, 2, 8), (8, 4, 16)])
def test_1f1b_family_ideal_makespan(pp: int, vpp: int, m: int) -> None:
    """With m a multiple of pp, equal ranks take (m v + p - 1)(f + b) (Narayanan et al.)."""
    f, b = 1.0, 2.0
    sched = SCHEDULES["interleaved" if vpp > 1 else "1f1b"]
    orders, starts = sched.timed(pp, vpp, m, _duration(f, b, 0.0))
    ends = [
        st[-1] + (f if od[-1].kind == "F" else b) for od, st in zip(orders, starts, strict=True)
    ]
    assert max(ends) == pytest.approx((m * vpp + pp - 1) * (f + b))
    bubble = sched.bubble_s(_equal(pp, vpp, f / vpp, b / vpp, 0.0), m, vpp)
    assert bubble == pytest.approx((pp - 1) * (f + b) / vpp)


def test_interleaved_with_uneven_microbatches_falls_back_to_a_work_conserving_order() -> None:
    orders, _ = SCHEDULES["interleaved"].timed(4, 3, 5, _duration(1.0, 2.0, 0.0))
    assert run_orders(orders, SCHEDULES["interleaved"], 4, 3, _duration(1.0, 2.0, 0.0))


# ---- Qi et al. 2023, Table 1: bubble and peak memory of the handcrafted schedules -------------
@pytest.mark.parametrize("pp", [2, 4, 8])
@pytest.mark.parametrize(("f", "b", "w"), [(1.0, 1.0, 1.0), (1.0, 1.5, 0.7), (1.2, 1.0, 0.5)])
def test_table1_bubbles(pp: int, f: float, b: float, w: float) -> None:
    m = 3 * pp
    stages = _equal(pp, 1, f, b, w)
    expected = {
        "1f1b": (pp - 1) * (f + b + w),
        "zb-h1": (pp - 1) * (f + b - w),
        "zb-h2": (pp - 1) * max(f + b - 2 * w, 0.0),
    }
    for name, bubble in expected.items():
        assert SCHEDULES[name].bubble_s(stages, m, 1) == pytest.approx(bubble), name
        assert _window_bubble(name, pp, m, f, b, w) == pytest.approx(bubble, abs=1e-9), name


@pytest.mark.parametrize("pp", [2, 4, 8])
def test_table1_peak_memory(pp: int) -> None:
    """Peak activations in micro-batches M_B: 1F1B p, ZB-H1 p, ZB-H2 2p - 1."""
    m = 3 * pp
    for name, peak in (("1f1b", pp), ("zb-h1", pp), ("zb-h2", 2 * pp - 1)):
        orders = SCHEDULES[name].orders(pp, 1, m)
        assert max(peak_in_flight(o) for o in orders) == peak
        assert peak_in_flight(orders[0]) == SCHEDULES[name].peak_chunks(0, pp, 1, m) == peak


def test_zb_h1_hand_worked() -> None:
    """p = 4, T_F = 1, T_B = 1.5, T_W = 0.7: 3 x (1 + 1.5 - 0.7) = 5.4 (1F1B: 3 x 3.2 = 9.6)."""
    stages = _equal(4, 1, 1.0, 1.5, 0.7)
    assert SCHEDULES["zb-h1"].bubble_s(stages, 8, 1) == pytest.approx(5.4)
    assert SCHEDULES["1f1b"].bubble_s(stages, 8, 1) == pytest.approx(9.6)


def test_zero_bubble_beyond_the_table_range() -> None:
    """T_W > T_B: the W passes cannot fill the drain; T_F + T_B < 2 T_W: ZB-H2 has none."""
    stages = _equal(4, 1, 1.0, 1.0, 1.5)
    assert SCHEDULES["zb-h1"].bubble_s(stages, 12, 1) == pytest.approx(3 * (1.0 + 1.0 - 1.0))
    assert _window_bubble("zb-h1", 4, 12, 1.0, 1.0, 1.5) == pytest.approx(3.0)
    assert SCHEDULES["zb-h2"].bubble_s(stages, 12, 1) == 0.0
    assert _window_bubble("zb-h2", 4, 12, 1.0, 1.0, 1.5) == pytest.approx(0.0, abs=1e-9)


# ---- the zero-bubble repository's table (T_F = T_B = T_W) and the DualPipe README -------------
@pytest.mark.parametrize("pp", [2, 4, 8])
def test_bubble_rates_at_equal_pass_times(pp: int) -> None:
    """sail-sg/zero-bubble-pipeline-parallelism README: bubble rate 1F1B (p-1)/m, ZB1P
    (p-1)/3m, ZB2P 0, ZBV 0; activation memory 1x, 1x, 2x, 1x of 1F1B."""
    m = 4 * pp
    t = 1.0  # each pass, per stage
    rates = {"1f1b": (pp - 1) / m, "zb-h1": (pp - 1) / (3 * m), "zb-h2": 0.0, "zbv": 0.0}
    for name, rate in rates.items():
        v = CHUNKS[name]
        stages = _equal(pp, v, t / v, t / v, t / v)
        bubble = SCHEDULES[name].bubble_s(stages, m, v)
        assert bubble / (m * 3 * t) == pytest.approx(rate, abs=1e-12), name
    # activations relative to 1F1B's p micro-batches of a whole stage
    mem = {"zb-h1": 1.0, "zb-h2": (2 * pp - 1) / pp, "zbv": 1.0}
    for name, ratio in mem.items():
        v = CHUNKS[name]
        chunks = SCHEDULES[name].peak_chunks(0, pp, v, m)
        assert chunks / v / pp == pytest.approx(ratio), name


@pytest.mark.parametrize("pp", [2, 4, 8])
def test_v_schedules_peak_memory(pp: int) -> None:
    """ZB-V: 2p half-stage chunks (1F1B's memory); DualPipe-V: PP + 1 chunks with PP = 2p
    (DualPipe README)."""
    m = 3 * pp
    for name, peak in (("zbv", 2 * pp), ("dualpipev", 2 * pp + 1)):
        orders = SCHEDULES[name].orders(pp, 2, m)
        assert max(peak_in_flight(o) for o in orders) == peak
        assert SCHEDULES[name].peak_chunks(0, pp, 2, m) == peak


@pytest.mark.parametrize("name", ["zbv", "dualpipev"])
@pytest.mark.parametrize(("f", "b", "w"), [(1.0, 1.0, 1.0), (1.0, 1.5, 0.7), (1.2, 1.0, 0.9)])
def test_v_bubble_stops_growing_after_2p_microbatches(
    name: str, f: float, b: float, w: float
) -> None:
    pp = 4
    ms = (2 * pp, 3 * pp, 5 * pp)
    bubbles = [_window_bubble(name, pp, m, f, b, w) for m in ms]
    assert bubbles == pytest.approx([bubbles[0]] * 3, abs=1e-9)
    stages = _equal(pp, 2, f, b, w)
    assert SCHEDULES[name].bubble_s(stages, 5 * pp, 2) == pytest.approx(bubbles[0], abs=1e-9)


def test_deep_v_pipelines_are_timed_on_a_sample_of_ranks() -> None:
    """Beyond 32 ranks the V bubble is extrapolated from 32: within a few percent of the full
    run at 64 ranks, and a 1,000-rank pipeline is timed at once."""
    import time

    from planner.schedules.v_shape import _window_bubble_s

    sched = SCHEDULES["zbv"]
    ranks = (
        (PassTimes(1.3, 1.8, 0.7), PassTimes(1.1, 2.1, 0.7)),
        *(((PassTimes(1.0, 1.5, 0.7),) * 2,) * 63),
    )
    full = _window_bubble_s(sched, ranks, 128)
    assert sched.bubble_s(StageTimes(1.0, 1.0, ranks), 128, 2) == pytest.approx(full, rel=0.05)
    deep = ((PassTimes(1.0, 1.5, 0.7),) * 2,) * 1000
    start = time.perf_counter()
    assert sched.bubble_s(StageTimes(1.0, 1.0, deep), 4000, 2) > 0.0
    assert time.perf_counter() - start < 5.0


def test_zbv_has_no_bubble_at_equal_pass_times() -> None:
    assert _window_bubble("zbv", 4, 8, 1.0, 1.0, 1.0) == pytest.approx(0.0, abs=1e-12)


def test_interleaved_zero_bubble_divides_zb_h1_by_the_chunks() -> None:
    for pp, v in ((4, 2), (4, 3), (8, 2)):
        stages = _equal(pp, v, 1.0 / v, 1.5 / v, 0.7 / v)
        expected = (pp - 1) * (1.0 + 1.5 - 0.7) / v
        assert SCHEDULES["interleaved-zb"].bubble_s(stages, 2 * pp, v) == pytest.approx(expected)
        sched = SCHEDULES["interleaved-zb"]
        dur = _duration(1.0 / v, 1.5 / v, 0.7 / v)
        orders, starts = sched.timed(pp, v, 2 * pp, dur)
        window = max(windows_s(orders, starts, dur)) - 2 * pp * (1.0 + 1.5 + 0.7)
        assert window == pytest.approx(expected)


# ---- through simulate -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def reports(h100: planner.Cluster) -> dict[str, planner.StepReport]:
    model = planner.load_model("llama3.1-8b")
    training = planner.Training(seq_len=8192, global_batch=64)
    out = {}
    for name, v in CHUNKS.items():
        layout = planner.Layout(tp=2, pp=4, dp=2, vpp=v if v > 1 else None, schedule=name)
        out[name] = planner.simulate(model, h100, layout, training)
    return out


def test_zero_bubble_shrinks_the_bubble(reports: dict[str, planner.StepReport]) -> None:
    bubble = {k: r.time_breakdown_s["pipeline_bubble"] for k, r in reports.items()}
    assert bubble["zb-h2"] < bubble["zb-h1"] < bubble["1f1b"]
    assert bubble["interleaved-zb"] < bubble["interleaved"]
    assert bubble["zbv"] < bubble["zb-h1"]
    # same stages: only the bubble differs from 1F1B
    steady = reports["1f1b"].step_time_s - reports["1f1b"].time_breakdown_s["pipeline_bubble"]
    zb = reports["zb-h1"].step_time_s - reports["zb-h1"].time_breakdown_s["pipeline_bubble"]
    assert zb == pytest.approx(steady, rel=1e-12)


def test_zero_bubble_memory(reports: dict[str, planner.StepReport]) -> None:
    """ZB-H1 keeps 1F1B's p micro-batches in flight, on every rank (the peak moves to the last
    rank, which also holds the logits); ZB-H2 2p - 1."""
    act = {k: r.memory_breakdown_gib["activations"] for k, r in reports.items()}
    assert act["zb-h1"] == pytest.approx(act["1f1b"])
    assert reports["zb-h1"].peak_memory_stage == "last"
    assert reports["zb-h1"].peak_memory_gib > reports["1f1b"].peak_memory_gib
    assert act["zb-h2"] == pytest.approx(act["1f1b"] * 7 / 4)


def test_v_rank_zero_holds_both_ends(reports: dict[str, planner.StepReport]) -> None:
    for name in ("zbv", "dualpipev"):
        plan = reports[name].plan
        assert plan.stage_of(0).role == "first+last"
        first = plan.stage_of(0).per_microbatch
        assert (
            first["compute_logits_loss"] > 0.0
            and plan.stage_of(1).per_microbatch["compute_logits_loss"] == 0.0
        )
        assert reports[name].memory_breakdown_gib["logits"] > 0.0
        assert any("V placement" in a for a in reports[name].assumptions)


# ---- exports --------------------------------------------------------------------------------
def test_exports_name_the_schedule() -> None:
    model = planner.load_model("llama3.1-8b")
    training = planner.Training(seq_len=4096, global_batch=64)
    for name, v in CHUNKS.items():
        layout = planner.Layout(pp=4, dp=2, vpp=v if v > 1 else None, schedule=name)
        toml = torchtitan_toml(model, 8, layout, training)
        mega = megatron_args(model, 8, layout, training)
        sched = SCHEDULES[name]
        if sched.torchtitan:
            assert f'pipeline_parallel_schedule = "{sched.torchtitan}"' in toml
        else:
            assert "pipeline_parallel_schedule" not in toml.split("[parallelism]")[1]
            assert "has no torchtitan name" in toml
        if sched.megatron is None:
            assert "not in Megatron-LM" in mega
            assert "virtual-pipeline" not in mega
        else:
            assert "not in Megatron-LM" not in mega


def test_op_letters() -> None:
    assert PassTimes(1.0, 2.0, 0.5).duration_s("B") == 2.5
    assert Op("W", 3, 1).kind == "W"


@pytest.mark.parametrize("name", ["1f1b", "interleaved", "zb-h1", "zb-h2", "interleaved-zb"])
@pytest.mark.parametrize("pp", [2, 3, 4, 8])
def test_every_rank_peak_matches_its_op_order(name: str, pp: int) -> None:
    """The memory model reads ``peak_chunks`` of the first, second and last ranks: each equals
    the chunks in flight at the peak of that rank's own op order (1F1B: pp - r micro-batches;
    interleaved: Megatron-LM's 2 (pp - r - 1) + (v - 1) pp warm-up chunks, plus one)."""
    chunks = (1,) if name in ("1f1b", "zb-h1", "zb-h2") else (2, 3)
    for v in chunks:
        for m in (pp, 2 * pp, 3 * pp):
            orders = SCHEDULES[name].orders(pp, v, m)
            for r in range(pp):
                assert peak_in_flight(orders[r]) == SCHEDULES[name].peak_chunks(r, pp, v, m)
