"""The torch microbenchmark suite (calibration.suite) on CPU with tiny shapes and sizes, and how
``planner calibrate`` names the accelerator a profile was measured on.

Nothing here asserts how fast anything ran: the measurements are checked for shape, sign and
finiteness only (accuracy is benchmarks/closed_loop.py's table)."""

from __future__ import annotations

import json
import math
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from conftest import synthetic_attention  # noqa: E402

from calibration.samples import (  # noqa: E402
    AttentionSample,
    CollectiveSample,
    GemmSample,
    MemorySample,
    SuiteResult,
)
from calibration.suite import attention, collectives, gemm, memory, run, timing  # noqa: E402
from calibration.suite.identify import identify_accelerator  # noqa: E402
from planner.cli import calibrate as calibrate_cmds  # noqa: E402
from planner.errors import PlannerError  # noqa: E402
from planner.profile import profile_matches  # noqa: E402

TINY = timing.TimingSettings(warmup=1, repeats=3, flush_bytes=1 << 20)
KIB = 1024
COLLECTIVE_SIZES = (KIB, 64 * KIB, 1024 * KIB)
GLOO_OPS = {"all_reduce", "all_gather", "all_to_all", "send_recv"}
"""Collectives every gloo in torch >= 2.4 implements (reduce_scatter only in newer ones)."""


@pytest.fixture(scope="module")
def tiny_suite() -> Iterator[tuple[SuiteResult, list[tuple[str, int, int]]]]:
    """run_suite on CPU with every part shrunk to a few tiny cases (one gloo spawn)."""
    calls: list[tuple[str, int, int]] = []
    with pytest.MonkeyPatch.context() as mp:
        for module in (gemm, attention, memory, collectives):
            mp.setattr(module, "timing_settings", lambda device, quick: TINY)
        mp.setattr(gemm, "default_shapes", lambda device, quick: [(64, 64, 64), (128, 64, 32)])
        mp.setattr(attention, "default_configs", lambda device, quick: [(1, 2, 64, 32)])
        mp.setattr(memory, "default_sizes", lambda device, quick: [256 * KIB, 1024 * KIB])
        mp.setattr(collectives, "default_sizes", lambda device, quick: list(COLLECTIVE_SIZES))
        result = run.run_suite(
            "cpu", quick=True, ranks=2, progress=lambda s, d, t: calls.append((s, d, t))
        )
    yield result, calls


def _round_trip(result: SuiteResult) -> SuiteResult:
    return SuiteResult.model_validate_json(result.model_dump_json())


def test_suite_result_validates_and_round_trips(tiny_suite) -> None:
    result, _ = tiny_suite
    again = _round_trip(result)
    assert again == result
    meta = result.metadata
    assert meta.device == "cpu" and meta.quick is True
    assert meta.torch_version == torch.__version__
    assert meta.device_name and meta.hostname and meta.date
    assert meta.cpu_threads is not None and meta.cpu_threads >= 1


def test_every_part_measured(tiny_suite) -> None:
    result, _ = tiny_suite
    assert [(s.m, s.n, s.k) for s in result.gemm] == [(64, 64, 64), (128, 64, 32)]
    assert all(isinstance(s, GemmSample) and s.dtype == "fp32" for s in result.gemm)
    assert len(result.attention) == 1
    assert len(result.memory) == 2 * len(memory.MEMORY_OPS)
    assert {s.op for s in result.memory} == set(memory.MEMORY_OPS)
    for s in result.gemm + result.memory + result.collectives:
        assert s.seconds > 0
    for a in result.attention:
        assert isinstance(a, AttentionSample)
        assert a.fwd_seconds > 0 and a.bwd_seconds > 0 and a.causal


def test_progress_reports_every_stage(tiny_suite) -> None:
    _, calls = tiny_suite
    stages = [s for s, _, _ in calls]
    assert set(stages) == set(run.STAGES)
    first_seen = sorted(set(stages), key=stages.index)
    assert first_seen == list(run.STAGES)
    for stage in run.STAGES:
        last = [(d, t) for s, d, t in calls if s == stage][-1]
        assert last[0] == last[1] > 0


def test_gloo_collectives_present_with_nccl_tests_bytes(tiny_suite) -> None:
    result, _ = tiny_suite
    samples = result.collectives
    assert all(isinstance(s, CollectiveSample) for s in samples)
    assert all(s.backend == "gloo" and s.ranks == 2 for s in samples)
    ops = {s.op for s in samples}
    assert ops >= GLOO_OPS
    for op in ops:
        got = sorted(s.bytes for s in samples if s.op == op)
        assert got == list(COLLECTIVE_SIZES), op  # sizes divisible by 2 ranks x 4 bytes


def test_layer_gemm_shapes_forward_and_backward() -> None:
    shapes = gemm.layer_gemm_shapes([(256, 1024)], [512], tps=(1, 2, 3))
    assert len(shapes) == len(set(shapes))
    h, ffn, m = 256, 1024, 512
    for tp in (1, 2):
        for n, k in ((3 * h // tp, h), (h, h // tp), (ffn // tp, h), (h, ffn // tp)):
            assert {(m, n, k), (m, k, n), (k, n, m)} <= set(shapes)
    assert not any(d in (h // 3, ffn // 3) for s in shapes for d in s)  # 3 divides neither
    assert len(shapes) < 4 * 3 * 2  # proj's forward and data-gradient shapes coincide at tp=1


def test_spread_by_flops_keeps_extremes() -> None:
    shapes = gemm.layer_gemm_shapes([(256, 1024), (1024, 4096)], [512, 2048])
    picked = gemm.spread_by_flops(shapes, 12)
    assert len(picked) == 12
    flops = [gemm.gemm_flops(s) for s in picked]
    assert flops == sorted(flops)
    assert flops[0] == min(map(gemm.gemm_flops, shapes))
    assert flops[-1] == max(map(gemm.gemm_flops, shapes))
    assert gemm.spread_by_flops(shapes[:3], 12) == sorted(
        shapes[:3], key=lambda s: (gemm.gemm_flops(s), s)
    )


def test_quick_cpu_defaults_are_small() -> None:
    shapes = gemm.default_shapes("cpu", quick=True)
    assert 8 <= len(shapes) <= 16
    assert max(map(gemm.gemm_flops, shapes)) <= 2 * 2048 * 4096 * 4096
    assert gemm.gemm_dtypes("cpu", quick=True) == ["fp32"]
    assert gemm.gemm_dtypes("cpu", quick=False) == ["fp32", "bf16"]
    assert max(memory.default_sizes("cpu", quick=True)) <= 64 * (1 << 20)
    sizes = collectives.default_sizes("cpu", quick=True)
    assert sizes[0] == KIB and sizes[-1] == 64 * (1 << 20)
    assert all(b == 4 * a for a, b in zip(sizes, sizes[1:], strict=False))


def test_bench_gemm_measures_every_shape() -> None:
    """One finite, positive time per shape (how the times compare is a measurement, not a
    test: benchmarks/closed_loop.py prints the fitted curve's accuracy)."""
    shapes = [(32, 32, 32), (64, 128, 32)]
    samples = gemm.bench_gemm(shapes, ["fp32"], "cpu", TINY)
    assert sorted((s.m, s.n, s.k) for s in samples) == sorted(shapes)
    assert all(math.isfinite(s.seconds) and s.seconds > 0 for s in samples)


def test_fp8_gemm_path() -> None:
    """The _scaled_mm call the suite makes on CUDA (runs on CPU where torch supports it)."""
    assert not gemm.fp8_supported("cpu")
    try:
        gemm.make_gemm((32, 32, 32), "fp8", "cpu")()
    except RuntimeError as exc:
        pytest.skip(f"torch._scaled_mm unavailable on this CPU build: {exc}")
    samples = gemm.bench_gemm([(32, 32, 32)], ["fp8"], "cpu", TINY)
    assert [s.dtype for s in samples] == ["fp8"]
    assert samples[0].seconds > 0


def test_memory_bytes_moved_convention() -> None:
    samples = memory.bench_memory([1 << 20], device="cpu", settings=TINY)
    by_op = {s.op: s for s in samples}
    assert by_op["copy"].bytes_moved == 2 * 4 * by_op["copy"].elements
    assert by_op["adamw"].bytes_moved == 28 * by_op["adamw"].elements
    assert by_op["rmsnorm"].bytes_moved == 4 * (2 * by_op["rmsnorm"].elements + 4096)
    xent = by_op["softmax_xent"]
    assert xent.elements % memory.vocab_for("cpu") == 0
    for s in samples:
        assert MemorySample.model_validate(s.model_dump()) == s


def test_attention_backward_only() -> None:
    sample = attention.time_attention((1, 2, 128, 32), "fp32", "cpu", TINY)
    assert sample.fwd_seconds > 0 and sample.bwd_seconds > 0
    assert (sample.batch, sample.heads, sample.seq, sample.head_dim) == (1, 2, 128, 32)


def test_time_op_setup_not_timed(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a fake clock (setup advances it 1 s, the op 0.25 s) only the op is timed; no real
    time is measured, so a loaded machine cannot fail this."""
    now = [0.0]

    def advance(seconds: float):
        return lambda: now.__setitem__(0, now[0] + seconds)

    monkeypatch.setattr(timing, "time", types.SimpleNamespace(perf_counter=lambda: now[0]))
    seconds = timing.time_op(
        advance(0.25), "cpu", warmup=1, repeats=3, flush_bytes=0, setup=advance(1.0)
    )
    assert seconds == pytest.approx(0.25)
    assert now[0] == pytest.approx(4 * 1.25)  # one warm-up and three timed calls, each set up


def test_collectives_need_two_ranks() -> None:
    assert collectives.bench_collectives([KIB], ranks=1) == []


def test_main_writes_json(tiny_suite, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result, _ = tiny_suite
    seen: dict[str, object] = {}

    def fake_run_suite(device, quick, ranks, progress=None, *, command=None):
        seen.update(device=device, quick=quick, ranks=ranks, command=command)
        if progress is not None:
            progress("gemm", 1, 1)
        return result

    monkeypatch.setattr(run, "run_suite", fake_run_suite)
    out = tmp_path / "samples.json"
    assert run.main(["--device", "cpu", "--quick", "--ranks", "3", "--out", str(out)]) == 0
    assert seen["quick"] is True and seen["ranks"] == 3 and seen["device"] == "cpu"
    assert "calibration.suite.run" in str(seen["command"])
    data = json.loads(out.read_text())
    assert SuiteResult.model_validate(data) == result
    assert run.main(["--full", "--no-progress", "--out", str(out)]) == 0
    assert seen["quick"] is False


def test_unavailable_device_is_a_clean_error(tmp_path: Path) -> None:
    out = tmp_path / "x.json"
    assert run.main(["--device", "tpu", "--no-progress", "--out", str(out)]) == 2
    if not torch.cuda.is_available():
        assert run.main(["--device", "cuda", "--no-progress", "--out", str(out)]) == 2
        with pytest.raises(run.SuiteDeviceError):
            run.run_suite("cuda")
    assert not out.exists()


# ---- which accelerator a profile names ---------------------------------------------------------
# (torch.cuda.get_device_name, total_memory in GiB as torch reports it, shipped id or None)
TORCH_DEVICES = [
    ("NVIDIA H200", 139.8, "h200-sxm-141gb"),
    ("NVIDIA H100 80GB HBM3", 79.1, "h100-sxm5-80gb"),
    ("NVIDIA H100", 93.1, "h100-sxm5-96gb"),
    ("NVIDIA H800", 79.1, "h800-sxm-80gb"),
    ("NVIDIA A100-SXM4-80GB", 79.3, "a100-sxm4-80gb"),
    ("NVIDIA A100-SXM4-40GB", 39.4, "a100-sxm4-40gb"),
    ("NVIDIA B200", 178.4, "b200"),
    ("NVIDIA B300 SXM6 AC", 267.7, "b300"),
    ("NVIDIA GB200", 184.3, "gb200"),
    ("NVIDIA GB300", 276.9, "gb300"),
    ("AMD Instinct MI300X", 191.7, "mi300x"),
    ("NVIDIA B200", None, "b200"),  # no memory figure: the only B200 spec
    # none of the shipped specs: other form factors, MIG slices, other parts, odd memory
    ("NVIDIA H100 PCIe", 79.2, None),
    ("NVIDIA H100 NVL", 93.1, None),
    ("NVIDIA H200 NVL", 139.8, None),
    ("NVIDIA A100 80GB PCIe", 79.2, None),
    ("NVIDIA A100-PCIE-40GB", 39.4, None),
    ("NVIDIA H100 80GB HBM3 MIG 1g.10gb", 9.8, None),
    ("NVIDIA GH200 480GB", 94.5, None),
    ("NVIDIA GeForce RTX 4090", 23.6, None),
    ("Tesla V100-SXM2-32GB", 31.7, None),
    ("NVIDIA A10G", 22.0, None),
    ("NVIDIA L40S", 44.4, None),
    ("NVIDIA H100 80GB HBM3", 40.0, None),  # no H100 spec has 40 GiB
    ("NVIDIA H100 80GB HBM3", None, None),  # two H100 specs: memory needed to choose
    ("", None, None),
]


@pytest.mark.parametrize(("name", "gib", "expected"), TORCH_DEVICES)
def test_identify_accelerator(name: str, gib: float | None, expected: str | None) -> None:
    assert identify_accelerator(name, gib) == expected


def _fake_torch(name: str | None, gib: float = 0.0) -> types.SimpleNamespace:
    """A stand-in for the torch module with one CUDA device (None: no CUDA)."""
    props = types.SimpleNamespace(name=name, total_memory=int(gib * 2**30))
    cuda = types.SimpleNamespace(
        is_available=lambda: name is not None,
        current_device=lambda: 0,
        get_device_properties=lambda index: props,
    )
    return types.SimpleNamespace(cuda=cuda)


def test_accelerator_for_cuda_devices() -> None:
    h200 = _fake_torch("NVIDIA H200", 139.8)
    accel, how = calibrate_cmds.accelerator_for(h200, "cuda", None)
    assert accel == "h200-sxm-141gb" and "NVIDIA H200" in how
    assert calibrate_cmds.accelerator_for(h200, "cuda", "h200-sxm-141gb")[0] == "h200-sxm-141gb"
    with pytest.raises(PlannerError, match="is h200-sxm-141gb, not h100-sxm5-80gb"):
        calibrate_cmds.accelerator_for(h200, "cuda", "h100-sxm5-80gb")
    with pytest.raises(PlannerError) as exc:
        calibrate_cmds.accelerator_for(h200, "cuda", "no-such-gpu")
    assert "no-such-gpu" in str(exc.value)
    # a part no spec describes keeps its name, unless the user says which datasheet to use
    pcie = _fake_torch("NVIDIA H100 PCIe", 79.2)
    assert calibrate_cmds.accelerator_for(pcie, "cuda", None)[0] is None
    assert calibrate_cmds.accelerator_for(pcie, "cuda", "h100-sxm5-80gb")[0] == "h100-sxm5-80gb"
    with pytest.raises(PlannerError, match="torch.cuda.is_available"):
        calibrate_cmds.accelerator_for(_fake_torch(None), "cuda", None)


def test_accelerator_for_cpu() -> None:
    assert calibrate_cmds.accelerator_for(torch, "cpu", None)[0] is None
    with pytest.raises(PlannerError) as exc:
        calibrate_cmds.accelerator_for(torch, "cpu", "h200-sxm-141gb")
    assert exc.value.field == "--accelerator"


def _synthetic_suite(**meta: object) -> SuiteResult:
    """Noise-free samples of a 1 TFLOP/s, 20 GB/s device that the fits accept (the tiny suite
    above is too small to fit), with ``meta`` over the metadata of the CPU this runs on."""
    peak, half, bw = 1e12, 48.0, 20e9

    def jitter(i: int) -> float:  # a deterministic 1% spread, so that the fits are not exact
        return 1.0 + 0.01 * (i % 3 - 1)

    def gemm_s(m: int, n: int, k: int) -> float:
        shape = math.prod(d / (d + half) for d in (m, n, k))
        return 2 * m * n * k / (0.8 * peak * shape) + 20e-6

    shapes = [(m, n, k) for m in (64, 256, 1024) for n in (128, 512, 2048) for k in (256, 1024)]
    gemms = [
        GemmSample(m=m, n=n, k=k, dtype="fp32", seconds=gemm_s(m, n, k) * jitter(i))
        for i, (m, n, k) in enumerate(shapes)
    ]
    attn = synthetic_attention((128, 256, 512, 1024, 2048), peak, 0.5, 200, 0.8)
    mem = [
        MemorySample(op="copy", elements=e, bytes_moved=8 * e, seconds=(8 * e / bw + 5e-6) * j)
        for e, j in zip((2**14, 2**18, 2**22, 2**24), (1.01, 0.99, 1.0, 1.01), strict=True)
    ]
    coll = [
        CollectiveSample(op=op, ranks=2, bytes=b, backend="gloo", seconds=50e-6 + b / 3e9)
        for op in ("all_reduce", "all_gather")
        for b in (2**10, 2**16, 2**22)
    ]
    metadata = timing.collect_metadata("cpu", True, "test").model_copy(update=meta)
    return SuiteResult(metadata=metadata, gemm=gemms, attention=attn, memory=mem, collectives=coll)


def test_calibrate_profiles_name_their_device(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """``planner calibrate`` end to end on synthetic samples: a CPU profile keeps the CPU's
    name; an H200 (a stand-in torch) gets the shipped id, which the H200 cluster accepts and
    the H100 one refuses; both record the device and the versions in ``metadata``."""
    import planner
    from planner.cli import main

    cpu_suite = _synthetic_suite()
    monkeypatch.setattr(run, "run_suite", lambda **kw: cpu_suite)
    out = tmp_path / "cpu.json"
    assert main(["calibrate", "--device", "cpu", "--out", str(out)]) == 0
    cpu = planner.load_profile(out)
    assert cpu.accelerator == cpu_suite.metadata.device_name == cpu.device.name
    meta = cpu.metadata
    assert (meta["device_name"], meta["device_kind"]) == (cpu_suite.metadata.device_name, "cpu")
    assert meta["torch_version"] == torch.__version__ and "cuda_version" in meta
    assert not profile_matches(cpu, planner.load_cluster("dgx-h200"))
    assert main(["calibrate", "--device", "cpu", "--accelerator", "b200", "--out", str(out)]) == 2

    gpu_suite = _synthetic_suite(device="cuda", device_name="NVIDIA H200", memory_gib=139.8)
    monkeypatch.setattr(run, "run_suite", lambda **kw: gpu_suite)
    monkeypatch.setattr(calibrate_cmds, "require_torch", lambda: _fake_torch("NVIDIA H200", 139.8))
    out = tmp_path / "h200.json"
    assert main(["calibrate", "--device", "cuda", "--out", str(out)]) == 0
    h200 = planner.load_profile(out)
    assert h200.accelerator == "h200-sxm-141gb"
    assert (h200.metadata["device_name"], h200.metadata["device_kind"]) == ("NVIDIA H200", "cuda")
    assert "identified" in h200.metadata["accelerator_chosen_by"]
    assert profile_matches(h200, planner.load_cluster("dgx-h200"))
    assert not profile_matches(h200, planner.load_cluster("dgx-h100"))


def test_a_forced_backend_that_refuses_is_skipped(monkeypatch) -> None:
    """A forced SDPA backend that cannot run a call (RuntimeError) leaves no sample and does
    not stop the suite; the other backends' samples are kept, each naming its backend."""
    real = attention.time_attention

    def refusing(config, dtype, device, settings, causal, backend):
        if backend == "cudnn":
            raise RuntimeError("No available kernel")
        return real(config, dtype, device, settings, causal, "default")

    monkeypatch.setattr(attention, "time_attention", refusing)
    samples = attention.bench_attention(
        [(1, 2, 64, 32)], ["fp32"], "cpu", TINY, backends=("default", "cudnn")
    )
    assert [s.backend for s in samples] == ["default"]
