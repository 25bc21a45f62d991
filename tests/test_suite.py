"""The torch microbenchmark suite (calibration.suite) on CPU with tiny shapes and sizes."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from calibration.samples import (  # noqa: E402
    AttentionSample,
    CollectiveSample,
    GemmSample,
    MemorySample,
    SuiteResult,
)
from calibration.suite import attention, collectives, gemm, memory, run, timing  # noqa: E402

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


def test_bigger_gemm_takes_longer() -> None:
    small, large = (32, 32, 32), (1024, 1024, 1024)  # 32768x the FLOPs
    samples = gemm.bench_gemm([small, large], ["fp32"], "cpu", TINY)
    by_shape = {(s.m, s.n, s.k): s.seconds for s in samples}
    assert by_shape[large] > by_shape[small]


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


def test_time_op_setup_not_timed() -> None:
    seconds = timing.time_op(
        lambda: None, "cpu", warmup=0, repeats=3, flush_bytes=0, setup=lambda: time.sleep(0.02)
    )
    assert 0 < seconds < 0.01


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
