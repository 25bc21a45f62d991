"""The simulated step as a Chrome trace (planner/timeline.py): a view of the step plan. Span,
category sums (bottleneck rank: the report; every rank: its own plan costs), schedule,
well-formed events, for every schedule."""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

import pytest

import planner
from planner.errors import PlannerError
from planner.report import TIME_CATEGORIES
from planner.timeline import OP_CATEGORY, THREADS, build_timeline, write_trace

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
        "zb-h1",
        "gpt-1.7b",
        planner.Layout(tp=2, pp=4, dp=1, schedule="zb-h1"),
        planner.Training(seq_len=2048, global_batch=16, micro_batch=1),
    ),
    (
        "zb-h2-zero2",
        "gpt3-1.3b",
        planner.Layout(tp=1, pp=4, dp=2, zero=2, schedule="zb-h2"),
        planner.Training(seq_len=2048, global_batch=16, micro_batch=1),
    ),
    (
        "interleaved-zb",
        "gpt-1.7b",
        planner.Layout(tp=2, pp=4, dp=1, vpp=2, schedule="interleaved-zb"),
        planner.Training(seq_len=2048, global_batch=16, micro_batch=1),
    ),
    (
        "zbv-zero3",
        "gpt-1.7b",
        planner.Layout(tp=1, pp=4, dp=2, vpp=2, zero=3, schedule="zbv"),
        planner.Training(seq_len=2048, global_batch=16, micro_batch=1),
    ),
    (
        "dualpipev-moe",
        "mixtral-8x7b",
        planner.Layout(tp=2, pp=4, dp=8, ep=8, vpp=2, schedule="dualpipev", overlap_ep_comm=True),
        planner.Training(seq_len=4096, global_batch=64, micro_batch=1),
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
    """Every rank spans the step: from 0, or under a schedule that tiles steps (each rank
    starts its next step when done) from the rank's own start."""
    _, layout, _, report, trace = case
    assert trace["otherData"]["bottleneck_pid"] in range(layout.pp)
    tiles = report.plan.schedule_object.tiles_steps
    for pid in range(layout.pp):
        events = _slices(trace, pid)
        assert min(e["ts"] for e in events) == 0.0 or (tiles and pid > 0)
        assert _span_s(events) == pytest.approx(report.step_time_s, rel=REL)


def _category_sums(trace: dict[str, Any], pid: int) -> dict[str, float]:
    sums: dict[str, float] = defaultdict(float)
    for e in _slices(trace, pid):
        sums[e["cat"]] += e["dur"] / 1e6
    return sums


def test_category_sums_equal_breakdown_on_the_bottleneck(case: tuple[Any, ...]) -> None:
    _, _, _, report, trace = case
    pid = trace["otherData"]["bottleneck_pid"]
    assert pid == report.plan.bottleneck_rank
    sums = _category_sums(trace, pid)
    for cat in TIME_CATEGORIES:
        expected = report.time_breakdown_s[cat]
        assert sums[cat] == pytest.approx(expected, rel=REL, abs=1e-12 * report.step_time_s), cat
    # every slice is a planner category, an op parent, or hidden DP comm
    assert set(sums) <= {*TIME_CATEGORIES, *OP_CATEGORY.values(), "dp_comm_overlapped"}


def test_every_rank_shows_its_own_costs(case: tuple[Any, ...]) -> None:
    """Each rank's slices sum to its own plan costs: the first with the embedding, the last
    with the logits and loss (rank_breakdown_s), idle filling the rest of the step."""
    _, layout, _, report, trace = case
    for pid in range(layout.pp):
        sums = _category_sums(trace, pid)
        own = report.plan.rank_breakdown_s(pid)
        for cat in TIME_CATEGORIES:
            assert sums[cat] == pytest.approx(
                own.get(cat, 0.0), rel=1e-5, abs=1e-9 * report.step_time_s
            ), (pid, cat)
    if layout.pp > 1 and report.plan.schedule_object.placement == "loop":
        first, last = _category_sums(trace, 0), _category_sums(trace, layout.pp - 1)
        assert last["compute_logits_loss"] > 0.0 == first["compute_logits_loss"]


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
    plan = report.plan
    v = plan.chunks
    ops = [e for e in _slices(trace, 0) if e["cat"] in OP_CATEGORY.values()]
    fwd = [e for e in ops if e["cat"] == "forward"]
    assert len(fwd) == report.microbatches * v
    assert {e["args"]["microbatch"] for e in fwd} == set(range(report.microbatches))
    if plan.schedule_object.splits_backward and layout.pp > 1:
        # zero bubble: every micro-batch chunk has an input-gradient and a weight-gradient pass
        # (DualPipe-V runs some backwards whole)
        grads = [e for e in ops if e["cat"] in ("backward_input", "backward")]
        weights = [e for e in ops if e["cat"] in ("backward_weight", "backward")]
        assert len(grads) == len(weights) == report.microbatches * v
    else:
        assert len([e for e in ops if e["cat"] == "backward"]) == report.microbatches * v
    if v > 1:
        assert all(" chunk" in e["name"] for e in ops)
    # the GEMMs of a full backward are the plan's input- and weight-gradient GEMMs
    gemm = defaultdict(float)
    for e in _slices(trace, 0):
        if e["cat"] == "compute_gemm":
            gemm[e["name"]] += e["dur"] / 1e6
    stage = plan.stage_of(0)
    want_f = sum(c.forward.get("compute_gemm", 0.0) for c in stage.chunks) * report.microbatches
    assert gemm["gemm"] == pytest.approx(want_f, rel=REL)
    want_b = sum(
        c.input_grad.get("compute_gemm", 0.0) + c.weight_grad.get("compute_gemm", 0.0)
        for c in stage.chunks
    )
    drawn_b = sum(v for k, v in gemm.items() if k != "gemm")
    assert drawn_b == pytest.approx(want_b * report.microbatches, rel=REL)


def test_pipeline_stages_wait_for_the_first_microbatch(case: tuple[Any, ...]) -> None:
    _, layout, _, report, trace = case
    first_f = {}
    for pid in range(layout.pp):
        events = sorted(_slices(trace, pid), key=lambda e: e["ts"])
        compute = [e for e in events if e["tid"] == 0]
        first_f[pid] = next(e["ts"] for e in compute if e["cat"] == "forward")
        if layout.pp > 1:
            sends = [e for e in events if e["tid"] == THREADS.index("pp_comm")]
            assert len(sends) == 2 * report.microbatches * report.plan.chunks
        else:
            assert report.time_breakdown_s["pipeline_bubble"] == 0.0
            assert not any(e["cat"] == "pipeline_bubble" for e in events)
    # later stages wait for the first micro-batch to arrive
    assert first_f[0] == 0.0
    assert all(first_f[s] < first_f[s + 1] for s in range(layout.pp - 1))
    assert trace["otherData"]["schedule"] == (report.plan.schedule if layout.pp > 1 else "none")


def test_dp_reduction_and_optimizer_close_the_step(case: tuple[Any, ...]) -> None:
    _, layout, _, report, trace = case
    events = _slices(trace, 0)
    step_us = report.step_time_s * 1e6
    opt = [e for e in events if e["cat"] == "optimizer"]
    assert len(opt) == 1 and opt[0]["ts"] + opt[0]["dur"] == pytest.approx(step_us, rel=REL)
    last_b_end = max(
        e["ts"] + e["dur"]
        for e in events
        if e["cat"] in ("backward", "backward_input", "backward_weight")
    )
    dp = [e for e in events if e["cat"] == "dp_comm"]
    hidden = [e for e in events if e["cat"] == "dp_comm_overlapped"]
    step_dp = [e for e in dp if e["name"].endswith("(exposed)") and e["ts"] >= last_b_end]
    if layout.zero >= 2:
        # per micro-batch inside the op slices; ZeRO-2's parameter all-gather once at the end
        assert not hidden
        assert sum(e["dur"] for e in step_dp) == pytest.approx(
            report.plan.dp_step_s * 1e6, rel=REL, abs=1e-6
        )
        assert all(e["ts"] + e["dur"] <= last_b_end * (1 + REL) for e in dp if e not in step_dp)
    else:
        assert len(dp) <= 1
        for e in dp:  # the exposed tail comes after the pipeline drains, before the optimizer
            assert e["ts"] >= last_b_end * (1 - REL)
            assert e["ts"] + e["dur"] == pytest.approx(opt[0]["ts"], rel=REL)
        assert bool(hidden) == (layout.overlap_dp_grad_reduce and layout.dp * layout.cp > 1)


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


@pytest.mark.parametrize(
    ("schedule", "vpp"),
    [("1f1b", None), ("interleaved", 2), ("zb-h1", None), ("zb-h2", None), ("zbv", 2)]
    + [("interleaved-zb", 2), ("dualpipev", 2)],
)
def test_app_chart_draws_every_schedule(schedule: str, vpp: int | None, h100) -> None:
    """The app's pipeline chart is a view of the same plan: its schedule, each stage's own
    costs, weight-gradient blocks for the zero-bubble schedules."""
    pytest.importorskip("plotly")
    from app_pages import charts

    model = planner.load_model("gpt-1.7b")
    layout = planner.Layout(tp=2, pp=4, dp=1, vpp=vpp, schedule=schedule)
    report = planner.simulate(model, h100, layout, planner.Training(seq_len=2048, global_batch=16))
    tl = charts.pipeline_timeline(report, layout.pp, layout.virtual_stages)
    assert tl.schedule == schedule and tl.vpp == report.plan.chunks
    kinds = {b.kind for b in tl.blocks}
    assert {"forward", "backward", "optimizer"} <= kinds
    assert ("weight" in kinds) == report.plan.schedule_object.splits_backward
    assert {b.stage for b in tl.blocks} == set(range(4))
    busy = {
        s: sum(b.dur_s for b in tl.blocks if b.stage == s and b.kind != "bubble") for s in range(4)
    }
    heavy = 0 if report.plan.schedule_object.placement == "v" else 3  # holds the logits, loss
    assert busy[heavy] > busy[1]
    charts.pipeline_figure(tl)
