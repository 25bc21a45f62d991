"""The simulated step as a Chrome trace (planner/timeline.py): span, category sums, schedule,
well-formed events."""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

import pytest

import planner
from planner.errors import PlannerError
from planner.report import TIME_CATEGORIES
from planner.timeline import THREADS, build_timeline, schedule, stage_order, write_trace

REL = 1e-6

# (id, model, layout, training): small shipped models on dgx-h100
CASES = [
    (
        "pp1",
        "gpt-1.7b",
        planner.Layout(tp=1, pp=1, dp=8),
        planner.Training(seq_len=2048, global_batch=64, micro_batch=2),
    ),
    (
        "pp4-1f1b",
        "gpt-1.7b",
        planner.Layout(tp=2, pp=4, dp=1),
        planner.Training(seq_len=2048, global_batch=16, micro_batch=1),
    ),
    (
        "pp4-vpp2",
        "gpt-1.7b",
        planner.Layout(tp=2, pp=4, dp=1, vpp=2),
        planner.Training(seq_len=2048, global_batch=16, micro_batch=1),
    ),
    (
        "pp4-vpp3-uneven-m",
        "gpt3-1.3b",
        planner.Layout(tp=1, pp=4, dp=2, vpp=3),
        planner.Training(seq_len=2048, global_batch=10, micro_batch=1),
    ),
    (
        "zero3",
        "gpt-1.7b",
        planner.Layout(tp=1, pp=1, dp=8, zero=3),
        planner.Training(seq_len=2048, global_batch=32, micro_batch=1),
    ),
    (
        "zero2-pp2",
        "gpt3-1.3b",
        planner.Layout(tp=1, pp=2, dp=4, zero=2),
        planner.Training(seq_len=2048, global_batch=32, micro_batch=1),
    ),
    (
        "tp2-overlap-sp-full-recompute",
        "gpt-1.7b",
        planner.Layout(tp=2, pp=1, dp=4, overlap_tp_comm=True, sequence_parallel=True),
        planner.Training(seq_len=2048, global_batch=32, micro_batch=1, recompute="full"),
    ),
    (
        "moe-ep-cp-pp-vpp",
        "mixtral-8x7b",
        planner.Layout(tp=2, pp=4, dp=8, cp=2, ep=8, vpp=2, sequence_parallel=True),
        planner.Training(seq_len=8192, global_batch=64, micro_batch=1, recompute="selective"),
    ),
    (
        "moe-host-bound-pp2-vpp2",
        "qwen3-30b-a3b",
        planner.Layout(pp=2, vpp=2, dp=4, ep=4),
        planner.Training(seq_len=4096, global_batch=32, micro_batch=1, precision="fp8"),
    ),
    (
        "offload-activations",
        "llama3.1-8b",
        planner.Layout(tp=1, pp=1, dp=8, zero=1),
        planner.Training(seq_len=4096, global_batch=32, micro_batch=2, offload_layers=16),
    ),
    (
        "no-dp-overlap",
        "gpt3-1.3b",
        planner.Layout(tp=1, pp=1, dp=8, zero=1, overlap_dp_grad_reduce=False),
        planner.Training(seq_len=2048, global_batch=16, micro_batch=1),
    ),
]


@pytest.fixture(scope="module", params=CASES, ids=[c[0] for c in CASES])
def case(request: pytest.FixtureRequest, h100: planner.Cluster) -> tuple[Any, ...]:
    _, model_id, layout, training = request.param
    model = planner.load_model(model_id)
    report = planner.simulate(model, h100, layout, training)
    if request.param[0].startswith("moe-host-bound"):
        assert report.time_breakdown_s["host_overhead"] > 0  # the case exercises the category
    if request.param[0].startswith("offload"):
        assert report.time_breakdown_s["activation_offload"] > 0
    return model, layout, training, report, build_timeline(report, layout, training)


def _slices(trace: dict[str, Any], pid: int | None = None) -> list[dict[str, Any]]:
    return [e for e in trace["traceEvents"] if e["ph"] == "X" and (pid is None or e["pid"] == pid)]


def _span_s(events: list[dict[str, Any]]) -> float:
    return (max(e["ts"] + e["dur"] for e in events) - min(e["ts"] for e in events)) / 1e6


def test_span_equals_step_time_on_every_stage(case: tuple[Any, ...]) -> None:
    _, layout, _, report, trace = case
    assert trace["otherData"]["bottleneck_pid"] in range(layout.pp)
    for pid in range(layout.pp):
        events = _slices(trace, pid)
        assert min(e["ts"] for e in events) == 0.0
        assert _span_s(events) == pytest.approx(report.step_time_s, rel=REL)


def test_category_sums_equal_breakdown(case: tuple[Any, ...]) -> None:
    _, layout, _, report, trace = case
    pids = {trace["otherData"]["bottleneck_pid"], 0, layout.pp - 1}
    for pid in pids:
        sums: dict[str, float] = defaultdict(float)
        for e in _slices(trace, pid):
            sums[e["cat"]] += e["dur"] / 1e6
        for cat in TIME_CATEGORIES:
            expected = report.time_breakdown_s[cat]
            assert sums[cat] == pytest.approx(expected, rel=REL, abs=1e-12 * report.step_time_s), (
                pid,
                cat,
            )
        # every slice is a planner category, a forward/backward parent, or hidden DP comm
        assert set(sums) <= {*TIME_CATEGORIES, "forward", "backward", "dp_comm_overlapped"}


def test_events_well_formed(case: tuple[Any, ...]) -> None:
    _, layout, _, _, trace = case
    assert trace["displayTimeUnit"] == "ms"
    lanes: dict[tuple[int, int], list[dict[str, Any]]] = defaultdict(list)
    for e in _slices(trace):
        assert isinstance(e["name"], str) and e["name"]
        assert e["ts"] >= 0.0 and e["dur"] > 0.0
        assert e["pid"] in range(layout.pp) and e["tid"] in range(len(THREADS))
        lanes[(e["pid"], e["tid"])].append(e)
    for lane, events in lanes.items():
        events.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack: list[float] = []  # ends of the open slices
        for e in events:
            end = e["ts"] + e["dur"]
            tol = 1e-9 * max(end, 1.0)
            while stack and stack[-1] <= e["ts"] + tol:
                stack.pop()
            assert not stack or end <= stack[-1] + tol, f"partial overlap on {lane}: {e}"
            stack.append(end)


def test_metadata_names_every_stage_and_thread(case: tuple[Any, ...]) -> None:
    _, layout, _, _, trace = case
    meta = [e for e in trace["traceEvents"] if e["ph"] == "M"]
    procs = {e["pid"]: e["args"]["name"] for e in meta if e["name"] == "process_name"}
    assert procs == {s: f"stage {s}" for s in range(layout.pp)}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    for e in _slices(trace):
        assert threads[(e["pid"], e["tid"])] == THREADS[e["tid"]]


def test_valid_json_roundtrip(case: tuple[Any, ...], tmp_path: Any) -> None:
    model, layout, training, report, trace = case
    path = write_trace(report, model, layout, training, tmp_path / "step.json")
    loaded = json.loads(path.read_text())
    assert loaded["traceEvents"] == json.loads(json.dumps(trace["traceEvents"]))
    assert loaded["otherData"]["model"] == model.name


def test_microbatch_slices(case: tuple[Any, ...]) -> None:
    _, layout, _, report, trace = case
    v = layout.virtual_stages
    compute = [e for e in _slices(trace, 0) if e["cat"] in ("forward", "backward")]
    fwd = [e for e in compute if e["cat"] == "forward"]
    bwd = [e for e in compute if e["cat"] == "backward"]
    assert len(fwd) == len(bwd) == report.microbatches * v
    assert {e["args"]["microbatch"] for e in fwd} == set(range(report.microbatches))
    if v > 1:
        assert all(" chunk" in e["name"] for e in compute)
    # compute is split 1:2 between forward and backward (plus recompute in backward)
    gemm_f = sum(
        e["dur"] for e in _slices(trace, 0) if e["cat"] == "compute_gemm" and e["name"] == "gemm"
    )
    gemm_b = sum(
        e["dur"]
        for e in _slices(trace, 0)
        if e["cat"] == "compute_gemm" and e["name"] == "gemm backward"
    )
    assert gemm_b == pytest.approx(2.0 * gemm_f, rel=REL)


def test_pipeline_stages_idle_per_1f1b(case: tuple[Any, ...]) -> None:
    _, layout, _, report, trace = case
    first_f = {}
    for pid in range(layout.pp):
        events = sorted(_slices(trace, pid), key=lambda e: e["ts"])
        compute = [e for e in events if e["tid"] == 0]
        first_f[pid] = next(e["ts"] for e in compute if e["cat"] == "forward")
        if layout.pp > 1:
            sends = [e for e in events if e["tid"] == THREADS.index("pp_comm")]
            assert len(sends) == 2 * report.microbatches * layout.virtual_stages
        else:
            assert report.time_breakdown_s["pipeline_bubble"] == 0.0
            assert not any(e["cat"] == "pipeline_bubble" for e in events)
    # later stages wait for the first micro-batch to arrive
    assert first_f[0] == 0.0
    assert all(first_f[s] < first_f[s + 1] for s in range(layout.pp - 1))


def test_dp_reduction_and_optimizer_close_the_step(case: tuple[Any, ...]) -> None:
    _, layout, _, report, trace = case
    events = _slices(trace, 0)
    step_us = report.step_time_s * 1e6
    opt = [e for e in events if e["cat"] == "optimizer"]
    assert len(opt) == 1 and opt[0]["ts"] + opt[0]["dur"] == pytest.approx(step_us, rel=REL)
    last_b_end = max(e["ts"] + e["dur"] for e in events if e["cat"] == "backward")
    dp = [e for e in events if e["cat"] == "dp_comm"]
    hidden = [e for e in events if e["cat"] == "dp_comm_overlapped"]
    if layout.zero >= 2:
        # per micro-batch: inside the forward/backward slices, nothing after the last backward
        assert all(e["ts"] + e["dur"] <= last_b_end * (1 + REL) for e in dp)
        assert not hidden
    else:
        assert len(dp) <= 1
        for e in dp:  # the exposed tail comes after the pipeline drains, before the optimizer
            assert e["ts"] >= last_b_end * (1 - REL)
            assert e["ts"] + e["dur"] == pytest.approx(opt[0]["ts"], rel=REL)
        assert bool(hidden) == (layout.overlap_dp_grad_reduce and layout.dp * layout.cp > 1)


@pytest.mark.parametrize(("pp", "vpp", "m"), [(1, 1, 4), (4, 1, 8), (4, 2, 8), (8, 4, 16)])
def test_schedule_ideal_makespan(pp: int, vpp: int, m: int) -> None:
    """With m a multiple of pp, equal stages take (m v + p - 1)(f + b) (Narayanan et al.)."""
    f, b = 1.0, 2.0
    orders, starts = schedule(pp, vpp, m, f, b)
    end = max(
        st[-1] + (f if od[-1].kind == "F" else b) for od, st in zip(orders, starts, strict=True)
    )
    assert end == pytest.approx((m * vpp + pp - 1) * (f + b))


@pytest.mark.parametrize(("pp", "vpp", "m"), [(4, 1, 3), (4, 3, 5), (8, 4, 9), (3, 2, 1)])
def test_schedule_never_deadlocks(pp: int, vpp: int, m: int) -> None:
    orders, starts = schedule(pp, vpp, m, 1.0, 2.0)
    for order, st in zip(orders, starts, strict=True):
        assert len(order) == len(st) == 2 * m * vpp
        assert st == sorted(st)
        seen_f = set()
        for op in order:  # each (mb, chunk) runs forward before backward on its stage
            if op.kind == "F":
                seen_f.add((op.mb, op.chunk))
            else:
                assert (op.mb, op.chunk) in seen_f


@pytest.mark.parametrize(("pp", "vpp", "m"), [(4, 1, 6), (4, 2, 8), (4, 3, 5), (8, 4, 9)])
def test_schedule_respects_dependencies(pp: int, vpp: int, m: int) -> None:
    """A forward starts after the previous virtual stage's forward of the same micro-batch
    ends; a backward after the next virtual stage's backward (or its own forward)."""
    f, b = 1.0, 2.0
    orders, starts = schedule(pp, vpp, m, f, b)
    end = {}
    for s, (order, st) in enumerate(zip(orders, starts, strict=True)):
        for op, t in zip(order, st, strict=True):
            end[(op.kind, op.mb, op.chunk * pp + s)] = (t, t + (f if op.kind == "F" else b))
    last = pp * vpp - 1
    for (kind, mb, vs), (t, _) in end.items():
        if kind == "F" and vs > 0:
            assert t >= end[("F", mb, vs - 1)][1] - 1e-12
        if kind == "B":
            dep = ("B", mb, vs + 1) if vs < last else ("F", mb, vs)
            assert t >= end[dep][1] - 1e-12


def test_1f1b_order() -> None:
    """Stage s warms up with pp - s - 1 forwards, then alternates."""
    kinds = ["".join(op.kind for op in stage_order(s, 4, 1, 6)) for s in range(4)]
    assert kinds == ["FFFFBFBFBBBB", "FFFBFBFBFBBB", "FFBFBFBFBFBB", "FBFBFBFBFBFB"]


def test_write_trace_unwritable_path(tmp_path: Any, h100: planner.Cluster) -> None:
    model = planner.load_model("gpt-tiny")
    layout = planner.Layout()
    training = planner.Training(seq_len=64, global_batch=2, micro_batch=2)
    report = planner.simulate(model, h100, layout, training)
    with pytest.raises(PlannerError, match="--trace"):
        write_trace(report, model, layout, training, tmp_path / "missing" / "x.json")


def test_simulate_trace_flag_writes_a_trace_spanning_the_step(tmp_path, capsys):
    """``planner simulate --trace FILE``: the written trace spans the reported step time."""
    import json as _json

    from planner.cli import main

    path = tmp_path / "step.json"
    argv = [
        "simulate",
        "--model",
        "llama3.1-8b",
        "--cluster",
        "dgx-h100",
        "--gpus",
        "16",
        "--pp",
        "2",
        "--global-batch",
        "32",
        "--zero",
        "1",
        "--trace",
        str(path),
        "--json",
    ]
    assert main(argv) == 0
    step_s = _json.loads(capsys.readouterr().out)["step_time_s"]
    events = [e for e in _json.loads(path.read_text())["traceEvents"] if e.get("ph") == "X"]
    span_us = max(e["ts"] + e["dur"] for e in events) - min(e["ts"] for e in events)
    assert span_us == pytest.approx(step_s * 1e6, rel=1e-6)
