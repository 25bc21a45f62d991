"""Tracing one module on the meta device: :func:`trace_module` builds it, runs one forward and
one backward under the counters of :mod:`planner.trace.counting` and gathers a
:class:`~planner.trace.block.TracedBlock` (see the :mod:`planner.trace` docstring).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from planner.errors import PlannerError
from planner.trace.block import TracedBlock
from planner.trace.counting import (
    _grouped_mm_flops,
    _op_counts,
    _SavedTensors,
    _sdpa_mode,
    _storage_key,
)
from planner.trace.inputs import _detect_kind, _first_tensor, _infer_hidden, _make_input
from planner.trace.notes import NOTE_FLOPS, NOTE_FP32, NOTE_GROUPED, NOTE_SAVED, NOTE_SDPA
from planner.trace.torch_import import require_torch

DTYPES = ("bf16", "fp16", "fp32")
InputKind = Literal["auto", "hidden", "tokens"]


def _check_arguments(seq_len: int, batch: int, dtype: str, input_kind: str) -> None:
    """Raise PlannerError for a non-positive size, an unknown dtype or an unknown input kind."""
    if seq_len <= 0 or batch <= 0:
        raise PlannerError("seq_len/batch", f"seq_len={seq_len}, batch={batch}", "integers >= 1")
    if dtype not in DTYPES:
        raise PlannerError("dtype", f"{dtype!r}", ", ".join(DTYPES))
    if input_kind not in ("auto", "hidden", "tokens"):
        raise PlannerError("input_kind", f"{input_kind!r}", "auto, hidden, tokens")


def _build_module(torch: Any, factory: Callable[[], Any], tdtype: Any) -> Any:
    """``factory()`` built under ``torch.device("meta")``, checked and cast to ``tdtype``."""
    try:
        with torch.device("meta"):
            module = factory()
    except PlannerError:
        raise
    except Exception as exc:
        raise PlannerError(
            "factory", f"building the module on meta failed: {type(exc).__name__}: {exc}"
        ) from exc
    if not isinstance(module, torch.nn.Module):
        raise PlannerError("factory", f"returned {type(module).__name__}", "a torch.nn.Module")
    return module.to(dtype=tdtype)


def _measure(
    torch: Any, counter_mode: Any, module: Any, x: Any
) -> tuple[Any, Any, _SavedTensors, list[bool]]:
    """One forward and one backward of ``module`` on ``x``: the forward and backward FLOP
    counters (``counter_mode``: FlopCounterMode), the saved storages and each SDPA call's
    ``is_causal``."""
    excluded = {_storage_key(p) for p in module.parameters()}
    excluded |= {_storage_key(b) for b in module.buffers()}
    saved = _SavedTensors(excluded)
    mapping: dict[Any, Any] = {}
    if hasattr(torch.ops.aten, "_grouped_mm"):
        mapping[torch.ops.aten._grouped_mm] = _grouped_mm_flops
    sdpa_calls: list[bool] = []
    try:
        fwd = counter_mode(display=False, custom_mapping=mapping)
        with (
            torch.autograd.graph.saved_tensors_hooks(saved.pack, saved.unpack),
            _sdpa_mode(sdpa_calls),
            fwd,
        ):
            out = _first_tensor(module(x))
        if not out.requires_grad:
            raise PlannerError("factory", "the output does not require grad (no parameters?)")
        bwd = counter_mode(display=False, custom_mapping=mapping)
        with bwd:
            out.backward(torch.ones_like(out))
    except PlannerError:
        raise
    except Exception as exc:
        raise PlannerError(
            "factory", f"forward/backward on meta failed: {type(exc).__name__}: {exc}"
        ) from exc
    return fwd, bwd, saved, sdpa_calls


def _notes(
    torch: Any,
    dtype: str,
    per_op: dict[str, dict[str, float]],
    sdpa_calls: list[bool],
    saved: _SavedTensors,
    by_dtype: dict[str, int],
) -> list[str]:
    """The notes on how the figures were counted, with the SDPA, grouped-GEMM and float32
    upcast notes where they apply."""
    notes = [NOTE_FLOPS]
    if sdpa_calls:
        causal = sorted(set(sdpa_calls))
        notes.append(
            NOTE_SDPA.format(calls=len(sdpa_calls), causal="/".join(str(c) for c in causal))
        )
    if "aten._grouped_mm" in per_op:
        notes.append(NOTE_GROUPED)
    notes.append(NOTE_SAVED)
    fp32 = by_dtype.get(str(torch.float32), 0)
    if dtype != "fp32" and fp32 > 0.05 * max(saved.total_bytes, 1):
        notes.append(NOTE_FP32.format(mib=fp32 / 2**20, dtype=dtype))
    return notes


def trace_module(
    factory: Callable[[], Any],
    seq_len: int,
    batch: int = 1,
    dtype: str = "bf16",
    input_kind: InputKind = "auto",
    hidden: int | None = None,
) -> TracedBlock:
    """Trace ``factory()`` (an ``nn.Module``) on meta: FLOPs and saved bytes of fwd + bwd.

    The module is either one transformer block mapping (batch, seq_len, hidden) states to the
    same shape, or a whole model taking (batch, seq_len) token ids; ``input_kind="auto"``
    tries both (hidden from ``hidden``, a ``hidden``/``hidden_size`` attribute or the first
    Linear; token ids only for modules holding an ``nn.Embedding``). Parameters are cast to ``dtype`` (bf16, fp16, fp32). Backward is driven by
    ``out.backward(ones_like(out))`` (contiguous, as ``_grouped_mm``'s backward needs).
    """
    _check_arguments(seq_len, batch, dtype, input_kind)
    torch = require_torch()
    from torch.utils.flop_counter import FlopCounterMode

    tdtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dtype]
    module = _build_module(torch, factory, tdtype)
    if hidden is None:
        hidden = _infer_hidden(module)
    kind = (
        _detect_kind(module, batch, seq_len, hidden, tdtype) if input_kind == "auto" else input_kind
    )
    x = _make_input(kind, batch, seq_len, hidden, tdtype)
    fwd, bwd, saved, sdpa_calls = _measure(torch, FlopCounterMode, module, x)

    fwd_ops, bwd_ops = _op_counts(fwd), _op_counts(bwd)
    per_op = {
        op: {"fwd": fwd_ops.get(op, 0.0), "bwd": bwd_ops.get(op, 0.0)}
        for op in sorted(set(fwd_ops) | set(bwd_ops))
    }
    per_module = {
        name: float(sum(ops.values()))
        for name, ops in sorted(fwd.get_flop_counts().items())
        if name != "Global"
    }
    by_dtype = saved.by_dtype()
    notes = _notes(torch, dtype, per_op, sdpa_calls, saved, by_dtype)
    return TracedBlock(
        fwd_flops=sum(fwd_ops.values()),
        bwd_flops=sum(bwd_ops.values()),
        per_op=per_op,
        per_module_fwd=per_module,
        saved_activation_bytes=saved.total_bytes,
        saved_tensors=len(saved.storages),
        saved_bytes_by_dtype=by_dtype,
        param_count=sum(p.numel() for p in module.parameters()),
        hidden=hidden,
        seq_len=seq_len,
        batch=batch,
        dtype=dtype,
        input_kind=kind,  # type: ignore[arg-type]
        sdpa_calls=len(sdpa_calls),
        notes=notes,
    )
