"""Reading real PyTorch profiler traces (planner/kineto/) and ``planner compare-trace``.

tests/assets/cpu_gpt_step_trace.json and cpu_gpt_ddp_rank0_trace.json are real traces written
by torch.profiler on CPU (tests/assets/make_cpu_trace.py). GPU kernel names are checked with a
small hand-written trace in the same format (kernel names as CUDA libraries spell them).
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path
from typing import Any

import pytest

import planner
from planner.cli import compare_trace
from planner.errors import PlannerError
from planner.kineto import (
    EXPOSURE_ORDER,
    ROWS,
    TRACE_CATEGORIES,
    classify,
    compare,
    load_kineto,
    normalize_name,
)
from planner.report import TIME_CATEGORIES
from planner.search.export import layout_yaml

ASSETS = Path(__file__).resolve().parents[1] / "assets"
CPU_TRACE = ASSETS / "cpu_gpt_step_trace.json"
DDP_TRACE = ASSETS / "cpu_gpt_ddp_rank0_trace.json"
GPU_TRACE = ASSETS / "h200_gpt3-1.3b_step_trace.json.gz"


@pytest.fixture(scope="module")
def cpu_trace() -> Any:
    return load_kineto(CPU_TRACE)


@pytest.fixture(scope="module")
def tiny_report(h100: planner.Cluster) -> planner.StepReport:
    model = planner.load_model("gpt-tiny")
    training = planner.Training(seq_len=64, global_batch=2, micro_batch=2, precision="fp32")
    return planner.simulate(model, h100, planner.Layout(), training)


def test_assets_are_small_real_traces() -> None:
    for path in (CPU_TRACE, DDP_TRACE):
        assert path.stat().st_size < 1_000_000
        data = json.loads(path.read_text())
        assert data["schemaVersion"] == 1 and "baseTimeNanoseconds" in data
    assert (ASSETS / "make_cpu_trace.py").is_file() and (ASSETS / "README.md").is_file()


def test_cpu_trace_classifies(cpu_trace: Any) -> None:
    t = cpu_trace
    assert t.kind == "cpu" and t.steps == 2 and len(t.devices) == 1
    assert t.busy_s["gemm"] > 0.0
    assert t.busy_s["attention"] > 0.0 or t.busy_s["elementwise_norm"] > 0.0
    assert t.busy_s["optimizer"] > 0.0
    assert t.busy_s["loss"] > 0.0
    assert all(t.busy_s[c] == 0.0 for c in ("all_reduce", "all_gather", "send_recv"))
    assert "aten::linear" in dict(t.top_names["gemm"])
    # one thread, top-level ops only: nothing overlaps, so exposed == busy
    for cat in EXPOSURE_ORDER:
        assert t.exposed_s[cat] == pytest.approx(t.busy_s[cat], rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("path", [CPU_TRACE, DDP_TRACE], ids=["single", "ddp"])
def test_totals_with_idle_sum_to_wall(path: Path) -> None:
    t = load_kineto(path)
    assert set(t.exposed_s) == set(TRACE_CATEGORIES)
    assert t.exposed_s["idle"] >= 0.0
    assert sum(t.exposed_s.values()) == pytest.approx(t.window_s * len(t.devices), rel=1e-9)
    per_step = t.per_step_s()
    assert sum(per_step.values()) == pytest.approx(t.step_time_s(), rel=1e-9)
    for lane_idle in t.idle_by_lane_s.values():
        assert 0.0 <= lane_idle <= t.window_s


def test_ddp_trace_has_overlapped_allreduce() -> None:
    t = load_kineto(DDP_TRACE)
    assert t.steps == 2
    assert t.busy_s["all_reduce"] > 0.0
    # gloo runs on its own threads: part of the all-reduce hides behind backward compute
    assert 0.0 < t.exposed_s["all_reduce"] <= t.busy_s["all_reduce"]
    assert len(t.idle_by_lane_s) >= 2


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("aten::mm", "gemm"),
        ("aten::linear", "gemm"),
        ("autograd::engine::evaluate_function: AddmmBackward0", "gemm"),
        ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1", "gemm"),
        ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NTN", "gemm"),
        ("ampere_sgemm_128x64_tn", "gemm"),
        (
            "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn>",
            "gemm",
        ),
        ("aten::scaled_dot_product_attention", "attention"),
        (
            "void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4> >(Flash_fwd_params)",
            "attention",
        ),
        (
            "fmha_cutlassF_f32_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel)",
            "attention",
        ),
        (
            "autograd::engine::evaluate_function: ScaledDotProductFlashAttentionForCpuBackward0",
            "attention",
        ),
        (
            "void (anonymous namespace)::softmax_warp_forward<float, float, float, 10, false>",
            "attention",
        ),
        ("aten::cross_entropy_loss", "loss"),
        ("autograd::engine::evaluate_function: NllLossBackward0", "loss"),
        (
            "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, "
            "at::native::(anonymous namespace)::LogSoftMaxForwardEpilogue>",
            "loss",
        ),
        ("aten::layer_norm", "elementwise_norm"),
        ("aten::gelu", "elementwise_norm"),
        (
            "autograd::engine::evaluate_function: torch::autograd::AccumulateGrad",
            "elementwise_norm",
        ),
        (
            "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>",
            "elementwise_norm",
        ),
        (
            "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>",
            "elementwise_norm",
        ),
        ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float>>", "elementwise_norm"),
        ("triton_poi_fused_add_mul_0", "elementwise_norm"),
        ("aten::_foreach_add_", "optimizer"),
        ("void multi_tensor_apply_kernel<LAMBStage1Functor>", "optimizer"),
        ("fused_lamb_cuda_kernel", "optimizer"),
        # C++ lambdas in kernel names are not the LAMB optimizer (real H200 names, torch 2.11)
        (
            "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda("
            "at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda(float)#1}>",
            "elementwise_norm",
        ),
        (
            "void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernelTemplate<float, "
            "float, 32u, 16u, 128u, true, false>",
            "elementwise_norm",
        ),
        (
            "void at::native::(anonymous namespace)::sum_and_scatter<float, long>(long const*)",
            "elementwise_norm",
        ),
        ("void cudnn::fusion::compute_dot_do_o_specialized<true, 128>(void const*)", "attention"),
        ("void cudnn::fusion::convert_dq_to_16bits<true>(void const*, void*)", "attention"),
        (
            "cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26_64x64x128",
            "attention",
        ),
        (
            "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<FusedAdamMathFunctor>",
            "optimizer",
        ),
        (
            "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
            "all_reduce",
        ),
        ("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL", "reduce_scatter"),
        ("ncclDevKernel_AllGather_RING_LL", "all_gather"),
        ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", "send_recv"),
        ("nccl:all_to_all", "all_to_all"),
        ("gloo:all_reduce", "all_reduce"),
        ("c10d::allreduce_", "all_reduce"),
        ("c10d::_reduce_scatter_base_", "reduce_scatter"),
        ("c10d::recv_", "send_recv"),
        ("nccl:broadcast", "other_collective"),
        ("Memcpy HtoD (Pageable -> Device)", "memcpy"),
        ("aten::view", "other"),
        ("autograd::engine::evaluate_function: TBackward0", "other"),
        ("some_custom_kernel", "other"),
    ],
)
def test_classify(name: str, expected: str) -> None:
    assert classify(name) == expected


def test_classify_inside_optimizer_window_and_memcpy_cat() -> None:
    assert classify("void at::native::vectorized_elementwise_kernel<4>", "kernel", True) == (
        "optimizer"
    )
    # a collective stays a collective inside the optimizer window
    assert classify("ncclDevKernel_AllReduce_Sum_f32_RING_LL", "kernel", True) == "all_reduce"
    assert classify("Memset (Device)", "gpu_memset") == "memcpy"


def test_normalize_backward_names() -> None:
    assert normalize_name("autograd::engine::evaluate_function: MmBackward0") == (
        "aten::mm (backward)"
    )
    assert normalize_name("autograd::engine::evaluate_function: NativeLayerNormBackward0") == (
        "aten::native_layer_norm (backward)"
    )


def _x(name: str, cat: str, pid: Any, tid: Any, ts: float, dur: float) -> dict[str, Any]:
    return {"ph": "X", "name": name, "cat": cat, "pid": pid, "tid": tid, "ts": ts, "dur": dur}


def test_synthetic_gpu_trace_exposure(tmp_path: Path) -> None:
    """Kernels on a compute stream and an NCCL stream; the all-reduce is half hidden."""
    events = [
        {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "GPU 0"}},
        _x("ProfilerStep#3", "user_annotation", 99, 99, 0.0, 40.0),  # CPU side
        _x("ProfilerStep#3", "gpu_user_annotation", 0, 7, 5.0, 95.0),
        _x("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n", "kernel", 0, 7, 10.0, 30.0),
        _x("flash_fwd_kernel", "kernel", 0, 7, 40.0, 10.0),
        _x("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "kernel", 0, 20, 30.0, 40.0),
        _x("Optimizer.step#AdamW.step", "gpu_user_annotation", 0, 7, 80.0, 20.0),
        _x("void at::native::vectorized_elementwise_kernel<4>", "kernel", 0, 7, 80.0, 20.0),
        _x("aten::mm", "cpu_op", 99, 99, 1.0, 5.0),  # ignored: the trace has kernels
    ]
    path = tmp_path / "gpu.json"
    path.write_text(json.dumps({"traceEvents": events}))
    t = load_kineto(path)
    assert t.kind == "gpu" and t.steps == 1 and t.devices == ("0",)
    assert t.window_s == pytest.approx(100e-6)  # from the CPU step start to the last kernel
    assert t.busy_s["gemm"] == pytest.approx(30e-6)
    assert t.busy_s["all_reduce"] == pytest.approx(40e-6)
    assert t.exposed_s["all_reduce"] == pytest.approx(20e-6)  # 50-70 us, nothing else running
    assert t.exposed_s["attention"] == pytest.approx(10e-6)
    assert t.exposed_s["optimizer"] == pytest.approx(20e-6)
    assert t.exposed_s["idle"] == pytest.approx(20e-6)  # 0-10 and 70-80
    assert sum(t.exposed_s.values()) == pytest.approx(t.window_s)
    assert t.idle_by_lane_s["0/20"] == pytest.approx(60e-6)


def test_cpu_nested_ops_count_once(tmp_path: Path) -> None:
    events = [
        _x("aten::linear", "cpu_op", 1, 1, 0.0, 10.0),
        _x("aten::t", "cpu_op", 1, 1, 0.5, 1.0),
        _x("aten::addmm", "cpu_op", 1, 1, 2.0, 8.0),  # ends with its parent
        _x("aten::gelu", "cpu_op", 1, 1, 10.0, 5.0),  # starts as the linear ends
        _x("aten::add", "cpu_op", 1, 2, 3.0, 4.0),  # another thread: top level there
    ]
    path = tmp_path / "cpu.json"
    path.write_text(json.dumps({"traceEvents": events}))
    t = load_kineto(path)
    assert t.intervals == 3 and t.steps == 0
    assert t.busy_s["gemm"] == pytest.approx(10e-6)
    assert t.busy_s["elementwise_norm"] == pytest.approx(9e-6)
    assert t.exposed_s["elementwise_norm"] == pytest.approx(5e-6)  # the add hides behind gemm
    assert t.exposed_s["idle"] == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "empty"),
        ("   \n", "empty"),
        ("{not json", "not valid JSON"),
        ('{"traceEvents": 5}', "not a list"),
        ('{"schemaVersion": 1}', "no traceEvents"),
        ('"text"', "no traceEvents"),
        ('{"traceEvents": []}', "traceEvents is empty"),
        (
            '{"traceEvents": [{"ph": "M", "name": "process_name", "pid": 1}]}',
            "no GPU kernels",
        ),
    ],
)
def test_malformed_traces(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(PlannerError, match=message) as err:
        load_kineto(path)
    assert err.value.field == "trace"
    assert "\n" not in str(err.value)


def test_truncated_and_gzipped_traces(tmp_path: Path, cpu_trace: Any) -> None:
    raw = CPU_TRACE.read_bytes()
    cut = tmp_path / "cut.json"
    cut.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(PlannerError, match="truncated or corrupted"):
        load_kineto(cut)
    gz = tmp_path / "trace.json.gz"
    gz.write_bytes(gzip.compress(raw))
    assert load_kineto(gz).busy_s == cpu_trace.busy_s
    bad_gz = tmp_path / "cut.json.gz"
    bad_gz.write_bytes(gzip.compress(raw)[:1000])
    with pytest.raises(PlannerError, match="gzip"):
        load_kineto(bad_gz)
    with pytest.raises(PlannerError, match="file not found"):
        load_kineto(tmp_path / "missing.json")


def test_rows_partition_both_sides() -> None:
    trace_cats = [c for row in ROWS for c in row.trace]
    planner_cats = [c for row in ROWS for c in row.planner]
    assert sorted(trace_cats) == sorted(TRACE_CATEGORIES)
    assert sorted(planner_cats) == sorted(TIME_CATEGORIES)


def test_compare_sorted_and_adds_up(cpu_trace: Any, tiny_report: planner.StepReport) -> None:
    rows = compare(cpu_trace, tiny_report)
    gaps = [abs(r["gap_s"]) for r in rows]
    assert gaps == sorted(gaps, reverse=True)
    assert len(rows) == len(ROWS)
    assert sum(r["measured_s"] for r in rows) == pytest.approx(cpu_trace.step_time_s(), rel=1e-9)
    assert sum(r["predicted_s"] for r in rows) == pytest.approx(tiny_report.step_time_s, rel=1e-9)
    for r in rows:
        assert r["gap_s"] == pytest.approx(r["measured_s"] - r["predicted_s"])
    gemm = next(r for r in rows if r["row"] == "gemm")
    assert gemm["predicted_s"] == tiny_report.time_breakdown_s["compute_gemm"]
    # --steps overrides the ProfilerStep count
    one = {r["row"]: r["measured_s"] for r in compare(cpu_trace, tiny_report, steps=1)}
    assert one["gemm"] == pytest.approx(2.0 * gemm["measured_s"])
    with pytest.raises(PlannerError, match="--steps"):
        compare(cpu_trace, tiny_report, steps=0)


def _layout_file(tmp_path: Path, with_training: bool = True) -> Path:
    model = planner.load_model("gpt-tiny")
    training = planner.Training(seq_len=64, global_batch=2, micro_batch=2, precision="fp32")
    text = layout_yaml(model, 1, planner.Layout(), training)
    if not with_training:
        text = text.split("training:")[0]
    path = tmp_path / "layout.yaml"
    path.write_text(text)
    return path


def _run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="planner")
    sub = parser.add_subparsers(dest="command", required=True)
    compare_trace.add_parser(sub)
    args = parser.parse_args(argv)
    return compare_trace.run(args)


def test_compare_a_stage_of_the_plan(cpu_trace: Any, h100: planner.Cluster) -> None:
    """``stage``: the predicted column is that rank's own costs, summing to the step."""
    model = planner.load_model("gpt-tiny")
    layout = planner.Layout(pp=2, dp=1)
    training = planner.Training(seq_len=64, global_batch=4, micro_batch=1)
    report = planner.simulate(model, h100, layout, training)
    for stage in (0, 1):
        rows = compare(cpu_trace, report, stage=stage)
        assert sum(r["predicted_s"] for r in rows) == pytest.approx(report.step_time_s)
    first = {r["row"]: r["predicted_s"] for r in compare(cpu_trace, report, stage=0)}
    last = {r["row"]: r["predicted_s"] for r in compare(cpu_trace, report, stage=1)}
    assert last["logits + loss"] > first["logits + loss"] == 0.0
    with pytest.raises(PlannerError, match="--stage"):
        compare(cpu_trace, report, stage=2)


def test_compare_trace_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    layout = _layout_file(tmp_path)
    base = ["compare-trace", str(DDP_TRACE), "--model", "gpt-tiny", "--cluster", "dgx-h100"]
    assert _run([*base, "--layout", str(layout)]) == 0
    out = capsys.readouterr().out
    assert "measured s/step" in out and "predicted s/step" in out
    assert "where the real run loses time against the plan" in out.lower()
    assert "all-reduce" in out
    assert _run([*base, "--layout", str(layout), "--steps", "1", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["steps"] == 1 and data["kind"] == "cpu"
    assert data["rows"][0]["gap_s"] != 0.0
    assert sum(r["predicted_s"] for r in data["rows"]) == pytest.approx(data["predicted_step_s"])


def test_compare_trace_needs_training(tmp_path: Path) -> None:
    layout = _layout_file(tmp_path, with_training=False)
    argv = ["compare-trace", str(CPU_TRACE), "--model", "gpt-tiny", "--cluster", "dgx-h100"]
    with pytest.raises(PlannerError, match="training"):
        _run([*argv, "--layout", str(layout)])


def test_compare_trace_takes_the_stack(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The predicted side is costed under --stack: a stack's eager host cost per op moves it,
    and a stack that cannot run the layout refuses it naming the stack."""
    layout = _layout_file(tmp_path)
    base = ["compare-trace", str(DDP_TRACE), "--model", "gpt-tiny", "--cluster", "dgx-h100"]
    steps = {}
    for stack in ("none", "torchtitan-eager", "torchtitan-compiled"):
        assert _run([*base, "--layout", str(layout), "--json", "--stack", stack]) == 0
        steps[stack] = json.loads(capsys.readouterr().out)["predicted_step_s"]
    assert steps["torchtitan-eager"] > steps["torchtitan-compiled"] > 0
    assert steps["none"] != steps["torchtitan-eager"]
    with pytest.raises(PlannerError, match="stack"):
        _run([*base, "--layout", str(layout), "--stack", "does-not-exist"])


def test_real_gpu_trace_classifies_its_kernels() -> None:
    """A real H200 trace (tests/assets/README.md): device kernels are what is classified, the
    optimizer is only the foreach AdamW kernels (no elementwise kernel with a C++ lambda in
    its name), cuDNN's SDPA kernels are attention, and almost nothing is left unclassified."""
    t = load_kineto(GPU_TRACE)
    assert t.kind == "gpu" and t.steps == 2 and t.devices == ("0",)
    busy = {c: s for c, s in t.busy_s.items() if s > 0}
    assert max(busy, key=busy.__getitem__) == "gemm"
    assert all("multi_tensor_apply" in name for name, _ in t.top_names["optimizer"])
    assert any("sdpa" in name for name, _ in t.top_names["attention"])
    assert t.busy_s["attention"] > 0 and t.busy_s["loss"] > 0
    assert t.busy_s["other"] < 0.01 * sum(t.busy_s.values())
    assert sum(t.exposed_s.values()) == pytest.approx(t.window_s * len(t.devices), rel=1e-9)
