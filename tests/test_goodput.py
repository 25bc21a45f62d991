"""Goodput: checkpoint size and sharding, Young/Daly intervals, failure losses, defaults, CLI."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from conftest import LLAMA70B_H100_64

import planner
from planner.cli import main as run_cli
from planner.errors import PlannerError
from planner.goodput import (
    DEFAULT_MTBF_HOURS_PER_GPU,
    DEFAULT_STORAGE_GB_PER_S,
    GoodputSettings,
    checkpoint_bytes,
    checkpoint_params,
    checkpoint_shards,
    daly_interval_s,
    goodput,
    job_mtbf_s,
    time_shares,
    young_interval_s,
)

DOC = Path(__file__).resolve().parents[1] / "docs" / "goodput.md"
GOODPUT_70B = ["goodput", *LLAMA70B_H100_64]


@pytest.fixture(scope="module")
def h100() -> planner.Cluster:
    return planner.load_cluster("dgx-h100")


@pytest.fixture(scope="module")
def m70b() -> planner.ModelSpec:
    return planner.load_model("llama3.1-70b")


def _job(model, cluster, dp: int, zero: int = 1, settings: GoodputSettings | None = None):
    layout = planner.Layout(tp=8, pp=4, dp=dp, zero=zero, sequence_parallel=True)
    training = planner.Training(seq_len=8192, global_batch=8 * dp, recompute="selective")
    report = planner.simulate(model, cluster, layout, training)
    return goodput(model, cluster, layout, training, report, settings)


# ---- formulas against hand-computed numbers -----------------------------------------------------
def test_young_interval_hand_computed() -> None:
    # delta 60 s, M 10 h = 36,000 s: sqrt(2 * 60 * 36000) = sqrt(4,320,000) = 2078.461 s
    assert young_interval_s(60.0, 36_000.0) == pytest.approx(2078.461, rel=1e-6)


def test_daly_interval_hand_computed() -> None:
    # x = delta / 2M = 1/1200; 1 + sqrt(x)/3 + x/9 = 1 + 0.0096225 + 0.0000926 = 1.0097151
    # tau = 2078.461 * 1.0097151 - 60 = 2038.653 s
    assert daly_interval_s(60.0, 36_000.0) == pytest.approx(2038.653, rel=1e-6)
    # delta >= 2M: checkpoint every M
    assert daly_interval_s(100.0, 50.0) == 50.0
    # Daly tends to Young as delta / M -> 0
    assert daly_interval_s(1.0, 1e9) == pytest.approx(young_interval_s(1.0, 1e9), rel=1e-4)


def test_time_shares_hand_computed() -> None:
    # tau 1000 s, delta 100 s, 550 s re-done + 600 s restart per failure, M = 100,000 s:
    # failing = 1150 / 100000 = 0.0115; useful = 0.9885 * 1000 / 1100 = 0.898636
    s = time_shares(1000.0, 100.0, 550.0, 600.0, 100_000.0)
    assert s.useful == pytest.approx(0.9885 * 1000 / 1100)
    assert s.checkpoint == pytest.approx(0.9885 * 100 / 1100)
    assert s.rework == pytest.approx(0.0055)
    assert s.restart == pytest.approx(0.0060)
    assert s.useful + s.checkpoint + s.rework + s.restart == pytest.approx(1.0)
    # failures more often than they can be recovered from: no progress, not a negative one
    assert time_shares(1000.0, 100.0, 550.0, 600.0, 1000.0).useful == 0.0


def test_job_mtbf_divides_by_gpus() -> None:
    assert job_mtbf_s(1000.0, 10) == pytest.approx(360_000.0)


# ---- defaults -----------------------------------------------------------------------------------
def test_default_mtbf_is_the_llama3_number() -> None:
    # Llama 3 paper, section 3.3.4: 419 unexpected interruptions in 54 days on 16,384 H100s
    mtbf = DEFAULT_MTBF_HOURS_PER_GPU
    assert mtbf == pytest.approx(54 * 24 * 16384 / 419)
    assert mtbf == pytest.approx(50_677.0, abs=0.5)
    # the job MTBF of the Llama 3 run: one unexpected interruption every ~3.1 hours
    assert job_mtbf_s(DEFAULT_MTBF_HOURS_PER_GPU, 16_384) / 3600 == pytest.approx(54 * 24 / 419)
    assert DEFAULT_STORAGE_GB_PER_S == 2000.0  # Tectonic, 2 TB/s sustained


def test_defaults_documented() -> None:
    text = DOC.read_text()
    for needle in ("50,677", "419", "16,384", "Young", "Daly", "2 TB/s", "assumption"):
        assert needle in text, needle
    for name in ("--mtbf-hours-per-gpu", "--checkpoint-write-gbps", "--restart-minutes"):
        assert name in text, name


def test_settings_reject_bad_values() -> None:
    with pytest.raises(PlannerError, match="mtbf_hours_per_gpu"):
        GoodputSettings(mtbf_hours_per_gpu=0)
    with pytest.raises(PlannerError, match="restart_minutes"):
        GoodputSettings(restart_minutes=-1)
    with pytest.raises(PlannerError, match="checkpoint_interval_minutes"):
        GoodputSettings(checkpoint_interval_minutes=0)


# ---- checkpoint size ----------------------------------------------------------------------------
def test_checkpoint_bytes_scale_with_params(m70b) -> None:
    m8b = planner.load_model("llama3.1-8b")
    layout = planner.Layout(tp=8, pp=4, dp=2)
    bf16 = planner.Training(seq_len=4096, global_batch=64)
    assert checkpoint_bytes(m70b, layout, bf16) == 14 * m70b.total_params
    ratio = checkpoint_bytes(m70b, layout, bf16) / checkpoint_bytes(m8b, layout, bf16)
    assert ratio == pytest.approx(m70b.total_params / m8b.total_params)
    fp32 = planner.Training(seq_len=4096, global_batch=64, precision="fp32")
    assert checkpoint_bytes(m70b, layout, fp32) == 12 * m70b.total_params


def test_checkpoint_includes_mtp() -> None:
    ds = planner.load_model("deepseek-v3").model_copy(update={"mtp_layers": 1})
    assert ds.mtp_params() > 0
    assert checkpoint_params(ds) == ds.total_params + ds.mtp_params()


def test_checkpoint_shards_with_dp_under_zero1(m70b) -> None:
    training = planner.Training(seq_len=4096, global_batch=64)
    per_gpu = {}
    for dp in (2, 4):
        for zero in (0, 1):
            layout = planner.Layout(tp=8, pp=4, dp=dp, zero=zero)
            per_gpu[dp, zero] = checkpoint_shards(m70b, layout, training, 8)
    total = 14 * m70b.total_params
    # ZeRO-1: every rank writes 1/world; doubling DP halves each rank's share
    assert per_gpu[2, 1].writer_gpus == 64
    assert per_gpu[2, 1].bytes_per_writer_gpu == pytest.approx(total / 64)
    assert per_gpu[4, 1].bytes_per_writer_gpu == pytest.approx(
        per_gpu[2, 1].bytes_per_writer_gpu / 2
    )
    # ZeRO-0: one DP replica (tp*pp ranks) writes, whatever DP is
    assert per_gpu[2, 0].writer_gpus == per_gpu[4, 0].writer_gpus == 32
    assert per_gpu[4, 0].bytes_per_writer_gpu == pytest.approx(total / 32)
    # TP 8 fills a node: the four pipeline stages' writers sit on four nodes
    assert per_gpu[2, 0].writer_nodes == 4 and per_gpu[2, 0].max_writers_per_node == 8


def test_write_time_per_node_and_storage_cap(m70b, h100) -> None:
    g = _job(m70b, h100, dp=2)  # 64 GPUs, 8 nodes, ZeRO-1
    total = 14 * m70b.total_params
    assert g.checkpoint_write_s == pytest.approx(total / 8 / 5e9)  # 5 GB/s per node
    capped = _job(m70b, h100, dp=2, settings=GoodputSettings(storage_gb_per_s=10.0))
    assert capped.checkpoint_write_s == pytest.approx(total / 10e9)
    assert capped.checkpoint_write_gb_per_s == pytest.approx(10.0)


# ---- goodput behaviour --------------------------------------------------------------------------
def test_more_gpus_lower_mtbf_lower_goodput(m70b, h100) -> None:
    reports = [_job(m70b, h100, dp) for dp in (2, 32, 512)]
    mtbf = [g.job_mtbf_hours for g in reports]
    ratio = [g.effective_training_time_ratio for g in reports]
    assert mtbf[0] > mtbf[1] > mtbf[2]
    assert ratio[0] > ratio[1] > ratio[2]
    assert all(0.0 < r < 1.0 for r in ratio)


def test_async_checkpoint_increases_goodput(m70b, h100) -> None:
    sync = _job(m70b, h100, dp=512)
    asyn = _job(m70b, h100, dp=512, settings=GoodputSettings(async_checkpoint=True))
    assert asyn.checkpoint_blocking_s < sync.checkpoint_blocking_s
    assert asyn.checkpoint_blocking_s == pytest.approx(
        14 * m70b.total_params / 16384 / 25e9  # each GPU's shard at 25 GB/s
    )
    assert asyn.effective_training_time_ratio > sync.effective_training_time_ratio
    assert asyn.effective_mfu_pct > sync.effective_mfu_pct
    # at most one write in flight: the interval is never shorter than the write
    assert asyn.checkpoint_interval_s >= asyn.checkpoint_write_s


def test_report_consistency(m70b, h100) -> None:
    g = _job(m70b, h100, dp=32)
    assert g.interval_source == "daly"
    assert g.checkpoint_interval_s == pytest.approx(g.checkpoint_interval_steps * g.step_time_s)
    assert abs(g.checkpoint_interval_s - g.daly_interval_s) <= g.step_time_s / 2 + 1e-9
    assert g.rework_per_failure_s == pytest.approx(
        (g.checkpoint_interval_s + g.checkpoint_blocking_s) / 2
    )
    assert g.restart_s == pytest.approx(600.0 + g.checkpoint_load_s)
    total = (
        100 * g.effective_training_time_ratio
        + g.checkpoint_overhead_pct
        + g.rework_pct
        + g.restart_pct
    )
    assert total == pytest.approx(100.0)
    assert g.effective_mfu_pct == pytest.approx(g.mfu_pct * g.effective_training_time_ratio)
    assert g.effective_tokens_per_s == pytest.approx(
        g.tokens_per_s * g.effective_training_time_ratio
    )
    d = g.to_dict()
    assert d["goodput_pct"] == pytest.approx(100 * g.effective_training_time_ratio)
    json.dumps(d)


def test_user_interval(m70b, h100) -> None:
    g = _job(m70b, h100, dp=32, settings=GoodputSettings(checkpoint_interval_minutes=30))
    assert g.interval_source == "user"
    assert abs(g.checkpoint_interval_s - 1800.0) <= g.step_time_s / 2 + 1e-9
    best = _job(m70b, h100, dp=32)
    # the Daly interval is (near) optimal: an arbitrary one does no better
    assert best.effective_training_time_ratio >= g.effective_training_time_ratio - 1e-6


def test_llama3_405b_scale_matches_reported_effective_training_time() -> None:
    """Llama 3 (section 3.3.4) reports higher than 90% effective training time on 16K H100s."""
    model = planner.load_model("llama3.1-405b")
    cluster = planner.load_cluster("meta-h100-roce")
    layout = planner.Layout(tp=8, pp=16, dp=128, vpp=4, zero=1, sequence_parallel=True)
    training = planner.Training(seq_len=8192, global_batch=2048, recompute="full")
    report = planner.simulate(model, cluster, layout, training)
    g = goodput(model, cluster, layout, training, report)
    assert g.job_mtbf_hours == pytest.approx(54 * 24 / 419)
    assert 0.85 < g.effective_training_time_ratio < 0.97


# ---- CLI ----------------------------------------------------------------------------------------
def test_cli_goodput_tables(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(GOODPUT_70B) == 0
    out = capsys.readouterr().out
    for text in ("Checkpoint (synchronous)", "Young 1974", "Daly 2006", "effective MFU", "GiB"):
        assert text in out, text


def test_cli_goodput_json_and_overrides(capsys: pytest.CaptureFixture[str]) -> None:
    argv = GOODPUT_70B + ["--mtbf-hours-per-gpu", "1000", "--async-checkpoint", "--json"]
    assert run_cli(argv) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["mtbf_hours_per_gpu"] == 1000.0
    assert d["job_mtbf_hours"] == pytest.approx(1000.0 / 64)
    assert d["async_checkpoint"] is True
    assert 0 < d["effective_training_time_ratio"] < 1
    assert d["layout"]["tp"] == 8 and d["model"] == "llama3.1-70b"
    assert math.isfinite(d["effective_mfu_pct"])


def test_cli_goodput_bad_value_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(GOODPUT_70B + ["--restart-minutes", "-5"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "restart_minutes" in err[0]
