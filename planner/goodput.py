"""Goodput: how much of the wall-clock time of a long job trains the model (pure: no I/O).

A synchronous training job stops on every failure of any of its GPUs (or their hosts, NICs,
switches), restarts from its last checkpoint and redoes the work done since. This module sizes
the checkpoint from the specs, times its write to storage, picks the checkpoint interval that
maximises goodput (Young 1974; Daly 2006), and turns the expected checkpoint overhead, re-done
work and restart time per failure into an effective training time ratio and an effective MFU.

Formulas (docs/goodput.md derives them):

* checkpoint bytes = params x (2 B compute-dtype weights + 12 B fp32 master weights and two Adam
  moments) = 14 B/param (fp32 training: 4 + 8 = 12 B/param); MTP modules included.
* write time = max(bytes of the busiest node / per-node write bandwidth,
  all bytes / aggregate storage bandwidth).
* job MTBF M = MTBF per GPU / GPUs (independent failures, every GPU a single point of failure).
* Young (1974): tau = sqrt(2 delta M). Daly (2006): tau = sqrt(2 delta M) [1 + (1/3)
  sqrt(delta / 2M) + (1/9) (delta / 2M)] - delta for delta < 2M, else tau = M; delta is the
  time training is blocked per checkpoint.
* per failure: re-done work (tau + delta) / 2 (+ the write time with asynchronous checkpoints,
  whose newest snapshot is durable only once written) and a restart (fixed time + checkpoint
  load).
* goodput ratio = tau / (tau + delta) x (1 - (re-done work + restart) / M).

Defaults: ``DEFAULT_MTBF_HOURS_PER_GPU`` from the Llama 3 paper's interruption count, the
aggregate storage cap from the same paper; restart time, per-node write bandwidth and the
device-to-host snapshot bandwidth are labelled assumptions. Every default is a field of
:class:`GoodputSettings`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from planner.costs.memory import WEIGHT_BYTES, optimizer_state_bytes
from planner.errors import PlannerError
from planner.report import StepReport
from planner.specs.hardware import Cluster
from planner.specs.layout import Layout, Training
from planner.specs.model import ModelSpec

GIB = 1024**3
GB = 1e9

# Llama 3 (Dubey et al. 2024, "The Llama 3 Herd of Models", arXiv 2407.21783, section 3.3.4):
# "During a 54-day snapshot period of pre-training, we experienced a total of 466 job
# interruptions": 47 planned, 419 unexpected, on up to 16,384 H100 GPUs. Only the unexpected ones
# count as failures here (planned maintenance can checkpoint first).
LLAMA3_SNAPSHOT_DAYS = 54
LLAMA3_GPUS = 16_384
LLAMA3_INTERRUPTIONS = 466
LLAMA3_UNEXPECTED_INTERRUPTIONS = 419
DEFAULT_MTBF_HOURS_PER_GPU = (
    LLAMA3_SNAPSHOT_DAYS * 24 * LLAMA3_GPUS / LLAMA3_UNEXPECTED_INTERRUPTIONS
)  # = 50,677.0 GPU-hours per unexpected interruption; job MTBF at 16,384 GPUs = 3.09 h
# Llama 3 section 3.3.1: Tectonic storage "supports a sustainable throughput of 2 TB/s and a peak
# throughput of 7 TB/s": the default cap on the aggregate checkpoint write bandwidth, GB/s.
DEFAULT_STORAGE_GB_PER_S = 2000.0
# ASSUMPTION: write bandwidth one node sustains to the shared file system, GB/s (40 Gb/s: a
# parallel-file-system client on one 100-400 Gb/s storage NIC, after protocol and file-system
# overhead). Checkpoint writes scale with the node count up to DEFAULT_STORAGE_GB_PER_S.
DEFAULT_WRITE_GB_PER_S_PER_NODE = 5.0
# ASSUMPTION: fixed time from a failure to training again: detection, rescheduling onto healthy
# nodes, process launch, NCCL initialisation; the checkpoint load is added on top.
DEFAULT_RESTART_MINUTES = 10.0
# ASSUMPTION: effective device-to-host copy bandwidth of the asynchronous checkpoint's snapshot,
# GB/s per GPU (pinned memory over PCIe Gen4 x16, 32 GB/s theoretical; Gen5 doubles it).
DEFAULT_SNAPSHOT_GB_PER_S = 25.0

INTERVAL_SOURCES = ("daly", "user", "write-bound")


@dataclass(frozen=True, slots=True)
class GoodputSettings:
    """Failure and storage assumptions; every field has a documented default.

    ``checkpoint_write_gb_per_s`` is PER NODE (GB/s = 1e9 B/s): every node writes its ranks'
    shards in parallel, so the job's write bandwidth grows with its node count, capped by
    ``storage_gb_per_s`` (the file system's aggregate; None: no cap).
    ``checkpoint_interval_minutes`` None: the Daly optimum.
    """

    mtbf_hours_per_gpu: float = DEFAULT_MTBF_HOURS_PER_GPU
    checkpoint_write_gb_per_s: float = DEFAULT_WRITE_GB_PER_S_PER_NODE
    storage_gb_per_s: float | None = DEFAULT_STORAGE_GB_PER_S
    restart_minutes: float = DEFAULT_RESTART_MINUTES
    async_checkpoint: bool = False
    snapshot_gb_per_s: float = DEFAULT_SNAPSHOT_GB_PER_S
    checkpoint_interval_minutes: float | None = None

    def __post_init__(self) -> None:
        checks = {  # name: (value, low, low inclusive, high), the documented ranges
            "mtbf_hours_per_gpu": (self.mtbf_hours_per_gpu, 0.0, False, 1e9),
            "checkpoint_write_gb_per_s": (self.checkpoint_write_gb_per_s, 0.0, False, 1e6),
            "snapshot_gb_per_s": (self.snapshot_gb_per_s, 0.0, False, 1e6),
            "storage_gb_per_s": (self.storage_gb_per_s, 0.0, False, 1e7),
            "checkpoint_interval_minutes": (self.checkpoint_interval_minutes, 0.0, False, 1e6),
            "restart_minutes": (self.restart_minutes, 0.0, True, 1e5),
        }
        for name, (value, low, inclusive, high) in checks.items():
            if value is None:
                continue
            above = value >= low if inclusive else value > low
            if isinstance(value, bool) or not (math.isfinite(value) and above and value <= high):
                raise PlannerError(
                    f"goodput.{name}",
                    f"{name}={value} is out of range",
                    f"{'>=' if inclusive else '>'} {low:g} and <= {high:g}",
                )


# ---- checkpoint size ---------------------------------------------------------------------------
def checkpoint_params(model: ModelSpec) -> int:
    """Parameters a checkpoint holds: ``total_params`` plus the MTP modules, count."""
    return model.total_params + model.mtp_params()


def checkpoint_bytes_per_param(training: Training) -> float:
    """Bytes per parameter of a full (resumable) checkpoint: 2 B compute-dtype weights + 12 B
    fp32 master weights and Adam moments = 14; fp32 training keeps no separate master copy:
    4 + 8 = 12; reduced optimizer states as they are held (planner/costs/memory.py
    optimizer_state_bytes)."""
    weights = 4.0 if training.precision == "fp32" else float(WEIGHT_BYTES)
    return weights + optimizer_state_bytes(training)


def checkpoint_bytes(model: ModelSpec, layout: Layout, training: Training) -> float:
    """Bytes of one full checkpoint of the job (weights + optimizer states), all ranks together.

    ``layout`` does not change the total (it only changes who writes what, see
    :func:`checkpoint_shards`); it is taken so every checkpoint function has one signature.
    """
    del layout
    return checkpoint_params(model) * checkpoint_bytes_per_param(training)


@dataclass(frozen=True, slots=True)
class CheckpointShards:
    """Who writes a checkpoint: bytes per writing GPU and per node (bytes, counts)."""

    total_bytes: float
    writer_gpus: int
    bytes_per_writer_gpu: float
    writer_nodes: int
    max_writers_per_node: int

    @property
    def bytes_per_writer_node(self) -> float:
        """Bytes the busiest node writes."""
        return self.bytes_per_writer_gpu * self.max_writers_per_node


def checkpoint_shards(
    model: ModelSpec, layout: Layout, training: Training, gpus_per_node: int
) -> CheckpointShards:
    """How the checkpoint is split over ranks and nodes.

    ZeRO >= 1 (distributed optimizer; Megatron-Core distributed checkpointing with fully
    parallel save): every rank writes 1/world of the checkpoint. ZeRO 0: the DP x CP replicas
    are identical, so only the ranks of DP (and CP) rank 0 write, each 1/(tp*pp) of it (with
    expert parallelism the experts are in fact spread over more ranks: an over-estimate of the
    busiest rank's share). Ranks are placed on nodes in Megatron order (TP, CP, DP, PP,
    innermost first), ``gpus_per_node`` per node.
    """
    total = checkpoint_bytes(model, layout, training)
    world = layout.world_size
    if layout.zero >= 1:
        writers = list(range(world))
    else:
        stride_pp = layout.tp * layout.cp * layout.dp
        writers = [t + pp * stride_pp for pp in range(layout.pp) for t in range(layout.tp)]
    per_node: dict[int, int] = {}
    for rank in writers:
        node = rank // gpus_per_node
        per_node[node] = per_node.get(node, 0) + 1
    return CheckpointShards(
        total_bytes=total,
        writer_gpus=len(writers),
        bytes_per_writer_gpu=total / len(writers),
        writer_nodes=len(per_node),
        max_writers_per_node=max(per_node.values()),
    )


def checkpoint_write_s(shards: CheckpointShards, settings: GoodputSettings) -> float:
    """Seconds to write one checkpoint: the busiest node at its per-node bandwidth, or the whole
    checkpoint at the aggregate storage bandwidth, whichever is slower."""
    node_s = shards.bytes_per_writer_node / (settings.checkpoint_write_gb_per_s * GB)
    if settings.storage_gb_per_s is None:
        return node_s
    return max(node_s, shards.total_bytes / (settings.storage_gb_per_s * GB))


# ---- optimal interval --------------------------------------------------------------------------
def job_mtbf_s(mtbf_hours_per_gpu: float, gpus: int) -> float:
    """Mean time between failures of a job of ``gpus`` GPUs, seconds: MTBF per GPU / GPUs."""
    return mtbf_hours_per_gpu * 3600.0 / gpus


def young_interval_s(delta_s: float, mtbf_s: float) -> float:
    """Young (1974), "A first order approximation to the optimum checkpoint interval", CACM
    17(9): compute time between checkpoints tau = sqrt(2 delta M), seconds."""
    return math.sqrt(2.0 * delta_s * mtbf_s)


def daly_interval_s(delta_s: float, mtbf_s: float) -> float:
    """Daly (2006), "A higher order estimate of the optimum checkpoint interval for restart
    dumps", FGCS 22(3), eq. 37: tau = sqrt(2 delta M) [1 + (1/3) sqrt(delta/(2M)) +
    (1/9) delta/(2M)] - delta for delta < 2M, else tau = M; seconds."""
    if delta_s >= 2.0 * mtbf_s:
        return mtbf_s
    x = delta_s / (2.0 * mtbf_s)
    return math.sqrt(2.0 * delta_s * mtbf_s) * (1.0 + math.sqrt(x) / 3.0 + x / 9.0) - delta_s


@dataclass(frozen=True, slots=True)
class TimeShares:
    """Where the wall-clock time goes, as fractions of it (sum 1 when the ratio is positive)."""

    useful: float
    checkpoint: float
    rework: float
    restart: float


def time_shares(
    interval_s: float, blocking_s: float, rework_s: float, restart_s: float, mtbf_s: float
) -> TimeShares:
    """First-order split of wall time for checkpoints every ``interval_s`` of compute, each
    blocking ``blocking_s``, with failures every ``mtbf_s`` on average costing ``rework_s`` of
    re-done work and ``restart_s`` of restart (seconds).

    A failure costs its re-done work and restart in wall time, so a fraction
    1 - (rework + restart) / M of the wall time is spent in checkpoint cycles, of which
    tau / (tau + delta) computes new steps.
    """
    cycle = interval_s + blocking_s
    failing = min(1.0, (rework_s + restart_s) / mtbf_s)
    running = 1.0 - failing
    rework = failing * rework_s / (rework_s + restart_s) if rework_s + restart_s > 0 else 0.0
    return TimeShares(
        useful=running * interval_s / cycle,
        checkpoint=running * blocking_s / cycle,
        rework=rework,
        restart=failing - rework,
    )


# ---- the report --------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class GoodputReport:
    """Checkpointing and failure cost of a job. Seconds, hours, GiB (2^30 B), GB/s (1e9 B/s)."""

    gpus: int
    nodes: int
    checkpoint_params: int
    checkpoint_bytes_per_param: float
    checkpoint_gib: float
    checkpoint_writer_gpus: int
    checkpoint_gib_per_writer_gpu: float
    checkpoint_gib_per_writer_node: float
    checkpoint_write_gb_per_s: float  # effective aggregate: checkpoint / write time
    checkpoint_write_s: float
    checkpoint_load_s: float
    checkpoint_blocking_s: float  # training paused per checkpoint (snapshot only if async)
    async_checkpoint: bool
    mtbf_hours_per_gpu: float
    job_mtbf_hours: float
    failures_per_day: float
    restart_s: float  # fixed restart time + checkpoint load
    young_interval_s: float
    daly_interval_s: float
    checkpoint_interval_s: float  # compute time between checkpoints, whole steps
    checkpoint_interval_steps: int
    interval_source: str  # daly | user | write-bound
    rework_per_failure_s: float
    lost_per_failure_s: float  # re-done work + restart
    checkpoint_overhead_pct: float  # of wall time
    rework_pct: float
    restart_pct: float
    effective_training_time_ratio: float  # useful / wall time, 0..1 (goodput)
    step_time_s: float
    mfu_pct: float
    effective_mfu_pct: float
    tokens_per_s: float
    effective_tokens_per_s: float
    fits: bool
    assumptions: list[str] = field(default_factory=list)

    @property
    def goodput_pct(self) -> float:
        """The effective training time ratio in percent."""
        return 100.0 * self.effective_training_time_ratio

    def to_dict(self) -> dict:
        """JSON-ready dictionary of every field."""
        d = asdict(self)
        d["goodput_pct"] = self.goodput_pct
        return d


def _blocking_s(shards: CheckpointShards, s: GoodputSettings, write_s: float) -> float:
    """Seconds training is paused per checkpoint: the device-to-host snapshot of one GPU's
    shard when asynchronous, else the whole write (``write_s``, seconds)."""
    if s.async_checkpoint:
        return shards.bytes_per_writer_gpu / (s.snapshot_gb_per_s * GB)
    return write_s


def _checkpoint_interval(
    s: GoodputSettings, daly_s: float, write_s: float, step_s: float
) -> tuple[float, int, str]:
    """Compute time between checkpoints in whole steps: (interval seconds, steps, source).

    The user's interval, else the Daly optimum ``daly_s``; asynchronous checkpoints keep at
    least the write time ``write_s`` between them (one in flight). ``step_s``: seconds per step.
    """
    if s.checkpoint_interval_minutes is not None:
        wanted, source = s.checkpoint_interval_minutes * 60.0, "user"
    else:
        wanted, source = daly_s, "daly"
    if s.async_checkpoint and wanted < write_s:
        wanted, source = write_s, "write-bound"
    steps = max(1, round(wanted / step_s))
    if s.async_checkpoint and steps * step_s < write_s:
        steps = math.ceil(write_s / step_s)
    return steps * step_s, steps, source


def _assumptions(
    model: ModelSpec,
    shards: CheckpointShards,
    s: GoodputSettings,
    gpus: int,
    mtbf_s: float,
    cycle_and_restart_s: float,
    fits: bool,
) -> list[str]:
    """The labelled assumptions behind a goodput report, one sentence each.

    ``mtbf_s``: the job MTBF, seconds; ``cycle_and_restart_s``: checkpoint interval + blocking
    time + restart time, seconds (warned about past half the MTBF).
    """
    assumptions = [
        f"failures: exponential, MTBF {s.mtbf_hours_per_gpu:,.0f} GPU-hours "
        f"/ {gpus} GPUs = {mtbf_s / 3600:,.2f} h per job; any failure stops the whole job"
        + (
            " (default: Llama 3, 419 unexpected interruptions in 54 days on 16,384 H100s)"
            if s.mtbf_hours_per_gpu == DEFAULT_MTBF_HOURS_PER_GPU
            else ""
        ),
        f"checkpoint: {shards.total_bytes / checkpoint_params(model):g} B/param "
        "(compute-dtype weights + fp32 master weights and Adam moments), written by "
        f"{shards.writer_gpus} GPUs on {shards.writer_nodes} nodes at "
        f"{s.checkpoint_write_gb_per_s:g} GB/s per node"
        + (f", capped at {s.storage_gb_per_s:g} GB/s aggregate" if s.storage_gb_per_s else ""),
        f"restart: {s.restart_minutes:g} min fixed + checkpoint load at the write bandwidth",
    ]
    if s.async_checkpoint:
        assumptions.append(
            f"asynchronous checkpoint: training pauses for a {s.snapshot_gb_per_s:g} GB/s "
            "device-to-host snapshot per GPU; the background write does not slow training"
        )
    if cycle_and_restart_s > 0.5 * mtbf_s:
        assumptions.append(
            "checkpoint cycle plus restart exceed half the job MTBF: the first-order model "
            "is optimistic here (a failure during a restart is not counted)"
        )
    if not fits:
        assumptions.append("the layout does not fit in memory (see planner simulate)")
    return assumptions


def goodput(
    model: ModelSpec,
    cluster: Cluster,
    layout: Layout,
    training: Training,
    report: StepReport,
    settings: GoodputSettings | None = None,
) -> GoodputReport:
    """Goodput of a job running ``layout`` whose step ``report`` (planner.simulate) predicts.

    Synchronous checkpoints block training for their whole write; asynchronous ones (Megatron
    ``--async-save``, torch.distributed.checkpoint ``async_save``) only for a device-to-host
    snapshot of each GPU's shard, then persist in the background, at most one in flight: the
    interval is then at least the write time, and a failure also loses the work done while the
    newest checkpoint was being written.
    """
    s = settings or GoodputSettings()
    gpus = layout.world_size
    gpn = cluster.spec.gpus_per_node
    nodes = -(-gpus // gpn)
    shards = checkpoint_shards(model, layout, training, gpn)
    write_s = checkpoint_write_s(shards, s)
    load_s = write_s
    blocking_s = _blocking_s(shards, s, write_s)
    mtbf = job_mtbf_s(s.mtbf_hours_per_gpu, gpus)
    young = young_interval_s(blocking_s, mtbf)
    daly = daly_interval_s(blocking_s, mtbf)
    step = report.step_time_s
    interval, steps, source = _checkpoint_interval(s, daly, write_s, step)
    rework = (interval + blocking_s) / 2.0 + (write_s if s.async_checkpoint else 0.0)
    restart = s.restart_minutes * 60.0 + load_s
    shares = time_shares(interval, blocking_s, rework, restart, mtbf)
    ratio = shares.useful
    assumptions = _assumptions(
        model, shards, s, gpus, mtbf, interval + blocking_s + restart, report.fits
    )

    return GoodputReport(
        gpus=gpus,
        nodes=nodes,
        checkpoint_params=checkpoint_params(model),
        checkpoint_bytes_per_param=checkpoint_bytes_per_param(training),
        checkpoint_gib=shards.total_bytes / GIB,
        checkpoint_writer_gpus=shards.writer_gpus,
        checkpoint_gib_per_writer_gpu=shards.bytes_per_writer_gpu / GIB,
        checkpoint_gib_per_writer_node=shards.bytes_per_writer_node / GIB,
        checkpoint_write_gb_per_s=shards.total_bytes / write_s / GB,
        checkpoint_write_s=write_s,
        checkpoint_load_s=load_s,
        checkpoint_blocking_s=blocking_s,
        async_checkpoint=s.async_checkpoint,
        mtbf_hours_per_gpu=s.mtbf_hours_per_gpu,
        job_mtbf_hours=mtbf / 3600.0,
        failures_per_day=86400.0 / mtbf,
        restart_s=restart,
        young_interval_s=young,
        daly_interval_s=daly,
        checkpoint_interval_s=interval,
        checkpoint_interval_steps=steps,
        interval_source=source,
        rework_per_failure_s=rework,
        lost_per_failure_s=rework + restart,
        checkpoint_overhead_pct=100.0 * shares.checkpoint,
        rework_pct=100.0 * shares.rework,
        restart_pct=100.0 * shares.restart,
        effective_training_time_ratio=ratio,
        step_time_s=step,
        mfu_pct=report.mfu_pct,
        effective_mfu_pct=report.mfu_pct * ratio,
        tokens_per_s=report.tokens_per_s,
        effective_tokens_per_s=report.tokens_per_s * ratio,
        fits=report.fits,
        assumptions=assumptions,
    )
