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

Modules: :mod:`~planner.kineto.categories` (categories and name rules),
:mod:`~planner.kineto.events` (reading the JSON into slices), :mod:`~planner.kineto.exposure`
(interval sweeps), :mod:`~planner.kineto.result` (:class:`KinetoTrace`),
:mod:`~planner.kineto.load` (:func:`load_kineto`) and :mod:`~planner.kineto.comparison`
(:data:`ROWS`, :func:`compare`); every name is re-exported here.
"""

from __future__ import annotations

from planner.kineto.categories import COLLECTIVE_CATEGORIES as COLLECTIVE_CATEGORIES
from planner.kineto.categories import EXPOSURE_ORDER as EXPOSURE_ORDER
from planner.kineto.categories import TRACE_CATEGORIES as TRACE_CATEGORIES
from planner.kineto.categories import classify as classify
from planner.kineto.categories import normalize_name as normalize_name
from planner.kineto.comparison import ROWS as ROWS
from planner.kineto.comparison import RowSpec as RowSpec
from planner.kineto.comparison import compare as compare
from planner.kineto.events import DEVICE_CATS as DEVICE_CATS
from planner.kineto.events import MAX_TRACE_BYTES as MAX_TRACE_BYTES
from planner.kineto.events import TRACE_HINT as TRACE_HINT
from planner.kineto.load import load_kineto as load_kineto
from planner.kineto.result import TOP_NAMES as TOP_NAMES
from planner.kineto.result import US_PER_S as US_PER_S
from planner.kineto.result import KinetoTrace as KinetoTrace

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
