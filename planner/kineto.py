"""Read a real PyTorch profiler (Kineto) trace and compare it with the planner's prediction.

:func:`load_kineto` parses the JSON that ``torch.profiler.profile(...).export_chrome_trace``
writes (plain or gzip), keeps the busy intervals of each device timeline and classifies them:

* GPU traces (any event with ``cat`` ``kernel``, ``gpu_memcpy`` or ``gpu_memset``): those
  device events; a timeline ("lane") is one (device ``pid``, stream ``tid``), a device is a
  ``pid``.
* CPU traces (no device events): the ``cpu_op`` events at the top level of each thread (not
  nested inside another ``cpu_op`` of the same thread), plus the ``gloo:*`` / ``nccl:*``
  collective annotations that the process-group threads record; a lane is a (process, thread),
  a device is a process.

Each interval falls in one trace category (:data:`TRACE_CATEGORIES`) by its name, first match
wins: collectives by type (``all_to_all``, ``reduce_scatter``, ``all_gather``, ``all_reduce``,
``send_recv``, then ``other_collective`` for broadcast, barrier and other NCCL / gloo work);
``optimizer`` (inside an ``Optimizer.step`` annotation of the same device, or Adam /
``multi_tensor_apply`` / ``_foreach_`` names); ``memcpy`` (memcpy / memset); ``loss``
(cross-entropy, NLL, log-softmax); ``attention`` (scaled-dot-product, flash, fmha, softmax);
``gemm`` (``aten::mm/addmm/bmm/matmul/linear``, cuBLAS / CUTLASS / xmma / nvjet kernels);
``other`` for view and bookkeeping ops (view, transpose, empty, item, ...);
``elementwise_norm`` (norms, activations, arithmetic, copies, reductions, embedding); else
``other``. Autograd's ``evaluate_function: XBackward0`` wrappers are classified as the forward
op ``x`` (``MmBackward0`` -> gemm).

Times: the analysed window runs from the first busy interval or ``ProfilerStep#N`` span to the
last one. Per device, the *exposed* time of a category is the time during which it is the
highest-priority busy category (compute first, collectives last; :data:`EXPOSURE_ORDER`) and
``idle`` is the window minus the union of busy intervals, so exposed times plus idle add up to
the window on every device, as the planner's exposed-time breakdown adds up to its step time.
:func:`compare` divides by the number of ``ProfilerStep#`` spans (or ``steps``) and devices and
puts the result next to the planner's :class:`~planner.report.StepReport` breakdown.
"""

from __future__ import annotations

import gzip
import io
import json
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from planner.errors import PlannerError
from planner.report import StepReport
from planner.safe_io import read_bytes

US_PER_S = 1e6
COLLECTIVE_CATEGORIES = (
    "all_to_all",
    "reduce_scatter",
    "all_gather",
    "all_reduce",
    "send_recv",
    "other_collective",
)
# priority when several lanes of one device are busy at once: compute first, comm last
EXPOSURE_ORDER = (
    "gemm",
    "attention",
    "elementwise_norm",
    "loss",
    "optimizer",
    "other",
    "memcpy",
    *COLLECTIVE_CATEGORIES,
)
TRACE_CATEGORIES = (*EXPOSURE_ORDER, "idle")
DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
TRACE_HINT = "a PyTorch profiler JSON written by export_chrome_trace (.json or .json.gz)"
TOP_NAMES = 5
_EPS_US = 1e-3  # Kineto writes microseconds with 3 decimals

_COLLECTIVE_RULES = (
    ("all_to_all", re.compile(r"all_?to_?all")),
    ("reduce_scatter", re.compile(r"reduce_?scatter")),
    ("all_gather", re.compile(r"all_?gather")),
    ("all_reduce", re.compile(r"all_?reduce")),
    ("send_recv", re.compile(r"sendrecv|send_recv|(?<![a-z])i?(send|recv)(?![a-z])")),
    ("other_collective", re.compile(r"nccl|gloo|c10d::|broadcast|barrier|record_param_comms")),
)
_OPTIMIZER = re.compile(r"optimizer\.step|adam|multi_tensor_apply|_foreach_|fused_sgd|lamb")
_MEMCPY = re.compile(r"memcpy|memset")
_LOSS = re.compile(r"cross_?entropy|nll_?loss|log_?softmax")
_ATTENTION = re.compile(r"scaled_dot_product|flash|fmha|efficient_attention|attention|sdpa|softmax")
_GEMM = re.compile(
    r"aten::(mm|addmm|bmm|matmul|linear|baddbmm|addbmm|addmv|mv|dot|_scaled_mm|einsum"
    r"|_addmm_activation)\b|gemm|cutlass|xmma|cublas|nvjet|splitkreduce|triton_tem"
)
_VIEW = re.compile(
    r"aten::(view|_?unsafe_view|reshape|t|transpose|permute|expand|as_strided|detach|alias"
    r"|unsqueeze|squeeze|flatten|split|split_with_sizes|chunk|narrow|slice|select|empty"
    r"|empty_like|empty_strided|resolve_conj|resolve_neg|lift_fresh|item|_local_scalar_dense"
    r"|set_|resize_|is_nonzero|size|stride)\b|^detach$"
)
_ELEMENTWISE = re.compile(
    r"norm|gelu|silu|swish|relu|sigmoid|tanh|elementwise|vectorized|reduce|triton|embedding"
    r"|dropout|rotary|rope|accumulate_grad|aten::(add|sub|rsub|mul|div|copy_|cat|stack|pow"
    r"|rsqrt|sqrt|exp|log|neg|mean|sum|where|masked_fill|fill_|zero_|zeros|ones|full|clone"
    r"|contiguous|index|index_select|index_add|gather|scatter|scatter_add|square|to|_to_copy"
    r"|lerp|addcmul|addcdiv|clamp|cumsum|max|min|amax|argmax|topk|sort|repeat"
    r"|repeat_interleave|slice_backward|select_backward|arange|randint|random_|bernoulli)_?\b"
)
_BACKWARD = re.compile(r"autograd::engine::evaluate_function:\s*(.+)")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_STEP = re.compile(r"^ProfilerStep#\d+$")
_GPU_COLLECTIVE_ANNOTATION = re.compile(r"^(gloo|nccl):")


@dataclass(frozen=True, slots=True)
class KinetoTrace:
    """What a profiler trace says about where the time went. Times in seconds.

    ``busy_s``: summed duration of the busy intervals of each category over all lanes and
    devices (overlapping lanes both count). ``exposed_s``: per category, the time it was the
    highest-priority busy category on its device, plus ``idle``; summed over devices, so
    ``sum(exposed_s.values()) == window_s * len(devices)``. ``idle_by_lane_s``: the window
    minus the union of each lane's busy intervals. ``top_names``: the busiest op / kernel names
    of each category, (name, busy seconds).
    """

    path: str
    kind: str  # "gpu" (device kernels) or "cpu" (top-level CPU operators)
    steps: int  # ProfilerStep# spans found; 0 when the trace has none
    window_s: float
    devices: tuple[str, ...]
    busy_s: dict[str, float]
    exposed_s: dict[str, float]
    idle_by_lane_s: dict[str, float]
    top_names: dict[str, list[tuple[str, float]]] = field(default_factory=dict)
    intervals: int = 0  # busy intervals classified

    def resolve_steps(self, steps: int | None = None) -> int:
        """``steps`` if given (>= 1), else the ProfilerStep count, else 1."""
        if steps is not None:
            if steps < 1:
                raise PlannerError("--steps", f"steps={steps}", "an integer >= 1")
            return steps
        return self.steps or 1

    def per_step_s(self, steps: int | None = None) -> dict[str, float]:
        """Exposed seconds per step and per device, by trace category (idle included)."""
        div = self.resolve_steps(steps) * max(len(self.devices), 1)
        return {cat: self.exposed_s.get(cat, 0.0) / div for cat in TRACE_CATEGORIES}

    def step_time_s(self, steps: int | None = None) -> float:
        """Wall seconds per step: the analysed window over the step count."""
        return self.window_s / self.resolve_steps(steps)


# ---- reading ---------------------------------------------------------------------------------


# a profiler trace of a few steps is tens to hundreds of MB; refuse what would not fit in memory
MAX_TRACE_BYTES = 1_000_000_000


def _read_json(path: Path) -> Any:
    raw = read_bytes(path, "trace", MAX_TRACE_BYTES)
    if raw[:2] == b"\x1f\x8b":
        try:
            with gzip.GzipFile(fileobj=io.BytesIO(raw)) as fh:
                raw = fh.read(MAX_TRACE_BYTES + 1)  # a gzip bomb stops here
        except (OSError, EOFError) as exc:
            raise PlannerError(
                "trace", f"{path.name}: corrupted or truncated gzip ({exc})", TRACE_HINT
            ) from None
        if len(raw) > MAX_TRACE_BYTES:
            raise PlannerError(
                "trace", f"{path.name} decompresses to more than 1 GB", "a smaller trace"
            )
    if not raw.strip():
        raise PlannerError("trace", f"{path.name} is empty", TRACE_HINT)
    try:
        return json.loads(raw)
    except UnicodeDecodeError:
        raise PlannerError("trace", f"{path.name} is not UTF-8 text", TRACE_HINT) from None
    except RecursionError:
        raise PlannerError("trace", f"{path.name} is nested too deeply", TRACE_HINT) from None
    except json.JSONDecodeError as exc:
        raise PlannerError(
            "trace",
            f"{path.name} is not valid JSON ({exc.msg} at line {exc.lineno} column "
            f"{exc.colno}); truncated or corrupted?",
            TRACE_HINT,
        ) from None


def _events(data: Any, name: str) -> list[dict[str, Any]]:
    if isinstance(data, list):  # the Chrome format also allows a bare array of events
        events = data
    elif isinstance(data, dict) and "traceEvents" in data:
        events = data["traceEvents"]
        if not isinstance(events, list):
            raise PlannerError("trace", f"{name}: traceEvents is not a list", TRACE_HINT)
    else:
        raise PlannerError("trace", f"{name} has no traceEvents", TRACE_HINT)
    if not events:
        raise PlannerError("trace", f"{name}: traceEvents is empty", TRACE_HINT)
    return [e for e in events if isinstance(e, dict)]


@dataclass(frozen=True, slots=True)
class _Slice:
    name: str
    cat: str
    pid: str
    tid: str
    start: float  # microseconds
    end: float


def _complete(events: list[dict[str, Any]]) -> list[_Slice]:
    """Complete ("X") events with numeric ts and a non-negative dur."""
    out = []
    for e in events:
        if e.get("ph") != "X":
            continue
        ts, dur = e.get("ts"), e.get("dur")
        if not isinstance(ts, int | float) or not isinstance(dur, int | float) or dur < 0:
            continue
        out.append(
            _Slice(
                str(e.get("name", "")),
                str(e.get("cat", "")),
                str(e.get("pid", "")),
                str(e.get("tid", "")),
                float(ts),
                float(ts) + float(dur),
            )
        )
    return out


def _top_level(slices: list[_Slice]) -> list[_Slice]:
    """Slices not nested inside another of the list on the same (pid, tid)."""
    by_lane: dict[tuple[str, str], list[_Slice]] = defaultdict(list)
    for s in slices:
        by_lane[(s.pid, s.tid)].append(s)
    out = []
    for lane in by_lane.values():
        lane.sort(key=lambda s: (s.start, -s.end))
        open_end = float("-inf")
        for s in lane:
            if s.start >= open_end - _EPS_US:
                out.append(s)
                open_end = s.end
            elif s.end > open_end + _EPS_US:  # sticks out of the open slice: keep the rest
                out.append(_Slice(s.name, s.cat, s.pid, s.tid, open_end, s.end))
                open_end = s.end
    return out


# ---- classification --------------------------------------------------------------------------


def normalize_name(name: str) -> str:
    """Lower-case name; ``autograd::engine::evaluate_function: AddmmBackward0`` becomes
    ``aten::addmm (backward)``, so a backward node is classified as its forward op."""
    m = _BACKWARD.match(name.strip())
    if m:
        node = m.group(1).strip().split("::")[-1]
        node = re.sub(r"Backward\d*$", "", node)
        return f"aten::{_CAMEL.sub('_', node).lower()} (backward)"
    return name.strip().lower()


def classify(name: str, cat: str = "", in_optimizer: bool = False) -> str:
    """The trace category of one op or kernel ``name`` (``cat``: the event's Kineto cat;
    ``in_optimizer``: it ran inside an ``Optimizer.step`` annotation)."""
    n = normalize_name(name)
    for category, rule in _COLLECTIVE_RULES:
        if rule.search(n):
            return category
    if in_optimizer or _OPTIMIZER.search(n):
        return "optimizer"
    if cat in ("gpu_memcpy", "gpu_memset") or _MEMCPY.search(n):
        return "memcpy"
    for category, rule in (
        ("loss", _LOSS),
        ("attention", _ATTENTION),
        ("gemm", _GEMM),
        ("other", _VIEW),
        ("elementwise_norm", _ELEMENTWISE),
    ):
        if rule.search(n):
            return category
    return "other"


def _windows(slices: list[_Slice], prefix: str) -> dict[str, list[tuple[float, float]]]:
    """(start, end) of the slices whose name starts with ``prefix``, by pid."""
    out: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for s in slices:
        if s.name.startswith(prefix):
            out[s.pid].append((s.start, s.end))
    return out


def _inside(t: float, windows: list[tuple[float, float]]) -> bool:
    return any(a <= t <= b for a, b in windows)


def _union_s(intervals: list[tuple[float, float]]) -> float:
    total, cur_a, cur_b = 0.0, None, None
    for a, b in sorted(intervals):
        if cur_b is None or a > cur_b:
            if cur_b is not None:
                total += cur_b - cur_a
            cur_a, cur_b = a, b
        else:
            cur_b = max(cur_b, b)
    if cur_b is not None:
        total += cur_b - cur_a
    return total


def _exposure(intervals: list[tuple[float, float, str]], w0: float, w1: float) -> dict[str, float]:
    """Sweep one device's intervals: each instant of [w0, w1] goes to the busy category first
    in EXPOSURE_ORDER, or to idle. Microseconds."""
    rank = {c: i for i, c in enumerate(EXPOSURE_ORDER)}
    points: list[tuple[float, int, int]] = []
    for a, b, c in intervals:
        a, b = max(a, w0), min(b, w1)
        if b > a:
            points += [(a, 1, rank[c]), (b, -1, rank[c])]
    points.sort()
    counts = [0] * len(EXPOSURE_ORDER)
    out = dict.fromkeys(TRACE_CATEGORIES, 0.0)
    prev = w0
    for t, delta, r in points:
        if t > prev:
            busy = next((i for i, n in enumerate(counts) if n > 0), None)
            out["idle" if busy is None else EXPOSURE_ORDER[busy]] += t - prev
            prev = t
        counts[r] += delta
    out["idle"] += max(w1 - prev, 0.0)
    return out


def load_kineto(path: str | Path) -> KinetoTrace:
    """Read and classify a Kineto trace (see the module docstring).

    Raises PlannerError (field ``trace``) for a missing, empty, truncated or malformed file, a
    JSON without ``traceEvents``, or a trace with neither device kernels nor CPU operators.
    """
    p = Path(path)
    slices = _complete(_events(_read_json(p), p.name))
    device = [s for s in slices if s.cat.lower() in DEVICE_CATS]
    if device:
        kind, busy = "gpu", device
    else:
        kind = "cpu"
        busy = _top_level(
            [
                s
                for s in slices
                if s.cat == "cpu_op"
                or (s.cat == "user_annotation" and _GPU_COLLECTIVE_ANNOTATION.match(s.name))
            ]
        )
    if not busy:
        raise PlannerError(
            "trace",
            f"{p.name}: no GPU kernels (cat 'kernel') or CPU operators (cat 'cpu_op') found",
            TRACE_HINT,
        )
    step_spans = [s for s in slices if _STEP.match(s.name)]
    steps = len({s.name for s in step_spans})
    optimizer_windows = _windows(slices, "Optimizer.step")
    w0 = min(s.start for s in (*busy, *step_spans))
    w1 = max(s.end for s in (*busy, *step_spans))

    busy_us: dict[str, float] = dict.fromkeys(EXPOSURE_ORDER, 0.0)
    names: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    per_device: dict[str, list[tuple[float, float, str]]] = defaultdict(list)
    per_lane: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for s in busy:
        mid = 0.5 * (s.start + s.end)
        category = classify(s.name, s.cat.lower(), _inside(mid, optimizer_windows.get(s.pid, [])))
        dur = s.end - s.start
        busy_us[category] += dur
        names[category][s.name] += dur
        per_device[s.pid].append((s.start, s.end, category))
        per_lane[f"{s.pid}/{s.tid}"].append((s.start, s.end))

    exposed: dict[str, float] = dict.fromkeys(TRACE_CATEGORIES, 0.0)
    for ivs in per_device.values():
        for cat, us in _exposure(ivs, w0, w1).items():
            exposed[cat] += us
    top = {
        cat: [
            (n, us / US_PER_S)
            for n, us in sorted(by_name.items(), key=lambda kv: -kv[1])[:TOP_NAMES]
        ]
        for cat, by_name in names.items()
    }
    return KinetoTrace(
        path=str(p),
        kind=kind,
        steps=steps,
        window_s=(w1 - w0) / US_PER_S,
        devices=tuple(sorted(per_device)),
        busy_s={c: us / US_PER_S for c, us in busy_us.items()},
        exposed_s={c: us / US_PER_S for c, us in exposed.items()},
        idle_by_lane_s={
            lane: (w1 - w0 - _union_s(ivs)) / US_PER_S for lane, ivs in sorted(per_lane.items())
        },
        top_names=top,
        intervals=len(busy),
    )


# ---- comparison with the plan ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RowSpec:
    """One comparison row: trace categories measured against planner categories."""

    label: str
    trace: tuple[str, ...]
    planner: tuple[str, ...]
    note: str


# Every trace category and every planner time category appears in exactly one row, so the
# measured column adds up to the measured step and the predicted column to step_time_s.
ROWS = (
    RowSpec(
        "gemm",
        ("gemm",),
        ("compute_gemm",),
        "the trace's GEMMs also include the logits projection (planned under logits + loss) "
        "and recomputed forward GEMMs (planned under recompute)",
    ),
    RowSpec("attention", ("attention",), ("compute_attention",), "core attention"),
    RowSpec(
        "elementwise / norm",
        ("elementwise_norm",),
        ("compute_memory_bound",),
        "norms, activations, residual adds, copies, embedding, gradient accumulation",
    ),
    RowSpec(
        "logits + loss",
        ("loss",),
        ("compute_logits_loss",),
        "the trace's part is the loss only (cross-entropy, log-softmax, NLL); the planned part "
        "includes the logits GEMM",
    ),
    RowSpec(
        "recompute",
        (),
        ("recompute",),
        "not separable in a trace: recomputed kernels are measured under gemm, attention and "
        "elementwise",
    ),
    RowSpec(
        "all-reduce / all-gather / reduce-scatter",
        ("all_reduce", "all_gather", "reduce_scatter"),
        ("tp_comm", "dp_comm"),
        "exposed (not hidden behind compute) TP and DP collectives",
    ),
    RowSpec("all-to-all", ("all_to_all",), ("ep_comm",), "exposed expert-parallel dispatch"),
    RowSpec(
        "send / recv",
        ("send_recv",),
        ("pp_comm", "cp_comm"),
        "exposed pipeline and context-parallel point-to-point",
    ),
    RowSpec("optimizer", ("optimizer",), ("optimizer",), "optimizer step"),
    RowSpec(
        "idle",
        ("idle",),
        ("pipeline_bubble", "host_overhead", "activation_offload"),
        "device idle: pipeline bubble, waiting for the host or for offloaded activations, "
        "but also data loading",
    ),
    RowSpec(
        "other (memcpy, other collectives, unclassified)",
        ("memcpy", "other_collective", "other"),
        (),
        "not modelled by the planner",
    ),
)


def compare(
    trace: KinetoTrace, report: StepReport, steps: int | None = None, stage: int | None = None
) -> list[dict[str, Any]]:
    """Measured against predicted seconds per step, one row per :data:`ROWS` entry.

    Measured: the trace's exposed seconds of the row's categories per step (``steps``, else the
    ProfilerStep count) and per device. Predicted: the sum of the row's planner categories in
    ``report.time_breakdown_s`` (the bottleneck pipeline rank), or with ``stage`` in that
    rank's own costs from the step plan (``report.plan.rank_breakdown_s``): a trace is one
    rank, and the first and last ranks carry the embedding, the logits and the loss. Raises
    PlannerError for a stage outside the pipeline. Each row: ``row``, ``trace_categories``,
    ``planner_categories``, ``measured_s``, ``predicted_s``, ``gap_s`` (measured - predicted;
    positive: the real run spends more time there than planned), ``gap_pct_of_step`` (gap over
    the predicted step time, percent), ``note``, ``top_names`` (busiest names in the trace).
    Sorted by the size of the gap, largest first.
    """
    measured = trace.per_step_s(steps)
    bd = report.time_breakdown_s
    if stage is not None:
        pp = report.plan.pp if report.plan is not None else 1
        if report.plan is None or not 0 <= stage < pp:
            raise PlannerError("--stage", f"stage {stage} is not a pipeline rank", f"0 to {pp - 1}")
        bd = report.plan.rank_breakdown_s(stage)
    rows = []
    for spec in ROWS:
        m = sum(measured.get(c, 0.0) for c in spec.trace)
        pr = sum(bd.get(c, 0.0) for c in spec.planner)
        tops = sorted(
            (item for c in spec.trace for item in trace.top_names.get(c, [])),
            key=lambda kv: -kv[1],
        )[:TOP_NAMES]
        rows.append(
            {
                "row": spec.label,
                "trace_categories": list(spec.trace),
                "planner_categories": list(spec.planner),
                "measured_s": m,
                "predicted_s": pr,
                "gap_s": m - pr,
                "gap_pct_of_step": 100.0 * (m - pr) / report.step_time_s
                if report.step_time_s > 0
                else 0.0,
                "note": spec.note,
                "top_names": [name for name, _ in tops],
            }
        )
    rows.sort(key=lambda r: (-abs(r["gap_s"]), r["row"]))
    return rows


__all__ = [
    "EXPOSURE_ORDER",
    "ROWS",
    "TRACE_CATEGORIES",
    "KinetoTrace",
    "classify",
    "compare",
    "load_kineto",
    "normalize_name",
]
