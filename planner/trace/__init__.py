"""Trace a user's torch module on the meta device: FLOPs per op and saved activation bytes.

``trace_module(factory, seq_len, batch)`` builds ``factory()`` under ``torch.device("meta")``
(no memory is allocated, so full-size blocks trace in well under a second), runs one forward and
one backward and measures:

* FLOPs with ``torch.utils.flop_counter.FlopCounterMode(display=False)``, forward and backward
  counted by two separate counters. GEMMs (``mm``, ``addmm``, ``bmm``, ``baddbmm``) count
  ``2 m n k``; ``aten._grouped_mm`` (MoE grouped GEMM, not in torch's registry) is counted here
  with the same formula. Elementwise ops, norms and softmax count 0.
  ``F.scaled_dot_product_attention`` on meta runs the math path (two ``bmm``) and is therefore
  counted as **full, non-causal** attention, ``4 B H S^2 d`` forward, the model (MFU) convention
  of ``planner.costs.flops`` (``attention_model_fwd_flops``); a causal fused kernel does about
  half (``attention_fwd_flops``).
* Saved activations with ``torch.autograd.graph.saved_tensors_hooks``: every tensor autograd
  saves for backward during the forward, de-duplicated by storage (a tensor saved by two ops,
  or two views of one buffer, count once, with the storage's full size: a saved view keeps its
  whole storage alive). Meta tensors have no data pointers, so the key is the storage object's
  address (``untyped_storage()._cdata``, private); recorded tensors are kept alive until the
  trace ends so no address is reused. Parameters and buffers are excluded; the block's input is included (it
  is the first norm's saved input, as in Korthikanti et al. 2022).

Nothing here imports torch at module import: the simulator and the CLI stay torch-free until a
trace is requested. Units: FLOPs are floating-point operations (multiply and add count 2),
bytes are bytes, token counts are ``batch * seq_len``.

Modules: :mod:`~planner.trace.block` (:class:`TracedBlock`, per-token figures),
:mod:`~planner.trace.factory` (loading ``PATH.py:FUNCTION``), :mod:`~planner.trace.tracer`
(:func:`trace_module`) on :mod:`~planner.trace.inputs`, :mod:`~planner.trace.counting`,
:mod:`~planner.trace.notes` and :mod:`~planner.trace.torch_import`, and
:mod:`~planner.trace.analytic` (the analytic figures it is compared with); every name is
re-exported here.
"""

from __future__ import annotations

from planner.trace.analytic import analytic_figures as analytic_figures
from planner.trace.analytic import analytic_hidden as analytic_hidden
from planner.trace.analytic import compare as compare
from planner.trace.block import TracedBlock as TracedBlock
from planner.trace.block import traced_layer_cost as traced_layer_cost
from planner.trace.factory import load_factory as load_factory
from planner.trace.notes import NOTE_FLOPS as NOTE_FLOPS
from planner.trace.notes import NOTE_FP32 as NOTE_FP32
from planner.trace.notes import NOTE_GROUPED as NOTE_GROUPED
from planner.trace.notes import NOTE_SAVED as NOTE_SAVED
from planner.trace.notes import NOTE_SDPA as NOTE_SDPA
from planner.trace.torch_import import TORCH_HINT as TORCH_HINT
from planner.trace.torch_import import require_torch as require_torch
from planner.trace.tracer import DTYPES as DTYPES
from planner.trace.tracer import InputKind as InputKind
from planner.trace.tracer import trace_module as trace_module
