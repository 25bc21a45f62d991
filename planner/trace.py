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
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from planner.errors import PlannerError

# how to install torch, for every command that needs it (planner trace, calibrate, closed-loop)
TORCH_HINT = "pip install torch==2.13.0 && pip install -e '.[calibrate]'"
DTYPES = ("bf16", "fp16", "fp32")
InputKind = Literal["auto", "hidden", "tokens"]

NOTE_FLOPS = (
    "FLOPs: FlopCounterMode on the meta device; GEMMs count 2mnk, elementwise ops, norms and "
    "softmax count 0; backward includes the block input's gradient."
)
NOTE_SDPA = (
    "F.scaled_dot_product_attention ({calls} calls, is_causal={causal}) runs the math path on "
    "meta (bmm): counted as full non-causal attention (model/MFU convention); a causal fused "
    "kernel does about half the forward work."
)
NOTE_GROUPED = (
    "aten._grouped_mm counted with the planner's formula 2*M*K*N per group (torch's registry "
    "has none)."
)
NOTE_SAVED = (
    "Saved activations: unique storages of tensors saved for backward, parameters and buffers "
    "excluded, the block input included."
)
NOTE_FP32 = (
    "{mib:.1f} MiB of the saved tensors are float32 although dtype is {dtype}: upcasts inside "
    "composite/meta kernels (e.g. RMSNorm, math SDPA) that fused CUDA kernels avoid."
)


class TracedBlock(BaseModel):
    """What one forward + backward of a traced module costs (FLOPs, bytes, elements).

    All figures are for one micro-batch of ``batch`` sequences of ``seq_len`` tokens.
    """

    model_config = ConfigDict(frozen=True)

    fwd_flops: float  # FLOPs of the forward
    bwd_flops: float  # FLOPs of the backward (input and weight gradients)
    per_op: dict[str, dict[str, float]]  # aten op -> {"fwd": FLOPs, "bwd": FLOPs}
    per_module_fwd: dict[str, float]  # module FQN (from FlopCounterMode) -> forward FLOPs
    saved_activation_bytes: int  # bytes of unique non-parameter storages saved for backward
    saved_tensors: int  # number of those unique storages
    saved_bytes_by_dtype: dict[str, int]  # e.g. {"torch.bfloat16": ..., "torch.float32": ...}
    param_count: int  # parameter elements (tied parameters once)
    hidden: int | None  # hidden width of the block input (None: not determined)
    seq_len: int  # tokens per sequence
    batch: int  # sequences per micro-batch
    dtype: str  # "bf16", "fp16" or "fp32"
    input_kind: Literal["hidden", "tokens"]  # block on (B, S, hidden) or model on ids (B, S)
    sdpa_calls: int  # F.scaled_dot_product_attention calls in the forward
    notes: list[str]

    @property
    def tokens(self) -> int:
        """Tokens in the traced micro-batch (``batch * seq_len``)."""
        return self.batch * self.seq_len


def traced_layer_cost(traced: TracedBlock) -> dict[str, float]:
    """Per-token figures of a traced block, the form a simulator consumes.

    Keys: ``fwd_flops_per_token``, ``bwd_flops_per_token``, ``train_flops_per_token`` (FLOPs per
    token), ``params`` (elements), ``saved_activation_bytes_per_token`` (bytes per token),
    ``tokens`` (the traced micro-batch). For a whole model these are whole-model figures.
    """
    t = float(traced.tokens)
    return {
        "fwd_flops_per_token": traced.fwd_flops / t,
        "bwd_flops_per_token": traced.bwd_flops / t,
        "train_flops_per_token": (traced.fwd_flops + traced.bwd_flops) / t,
        "params": float(traced.param_count),
        "saved_activation_bytes_per_token": traced.saved_activation_bytes / t,
        "tokens": t,
    }


# ---- loading a user factory --------------------------------------------------------------------


def load_factory(spec: str) -> Callable[[], Any]:
    """The callable named by ``"path/to/module.py:function"``, imported from the file.

    The file's directory is put on ``sys.path`` while the module executes (as ``python file.py``
    would), so it can import its siblings. Raises PlannerError for a malformed spec, a missing
    file, a module that fails to import, or a missing or non-callable attribute.
    """
    valid = "PATH.py:FUNCTION, e.g. examples/gpt_block.py:llama_block"
    path_text, sep, name = spec.rpartition(":")
    if not sep or not path_text or not name.isidentifier():
        raise PlannerError("factory", f"{spec!r} is not PATH.py:FUNCTION", valid)
    path = Path(path_text).expanduser()
    if not path.is_file():
        raise PlannerError("factory", f"file {str(path)!r} not found", valid)
    if path.suffix != ".py":
        raise PlannerError("factory", f"{str(path)!r} is not a .py file", valid)
    mod_name = f"_planner_trace_{path.stem}_{abs(hash(str(path.resolve())))}"
    loader_spec = importlib.util.spec_from_file_location(mod_name, path)
    if loader_spec is None or loader_spec.loader is None:
        raise PlannerError("factory", f"cannot import {str(path)!r}", valid)
    module = importlib.util.module_from_spec(loader_spec)
    directory = str(path.resolve().parent)
    sys.path.insert(0, directory)
    sys.modules[mod_name] = module
    try:
        loader_spec.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(mod_name, None)
        raise PlannerError(
            "factory", f"importing {str(path)!r} failed: {type(exc).__name__}: {exc}"
        ) from exc
    finally:
        if directory in sys.path:
            sys.path.remove(directory)
    factory = getattr(module, name, None)
    if factory is None:
        public = sorted(
            k
            for k, v in vars(module).items()
            if callable(v) and not k.startswith("_") and getattr(v, "__module__", "") == mod_name
        )
        raise PlannerError(
            "factory", f"{str(path)!r} has no {name!r}", ", ".join(public) or "no callables"
        )
    if not callable(factory):
        raise PlannerError("factory", f"{name!r} in {str(path)!r} is not callable")
    return factory


# ---- tracing -----------------------------------------------------------------------------------


def require_torch() -> Any:
    """The torch module, or a PlannerError naming torch and how to install it."""
    try:
        import torch
    except ImportError:
        raise PlannerError(
            "torch", "planner trace needs torch, which is not installed", TORCH_HINT
        ) from None
    return torch


def _grouped_mm_flops(
    a_shape: Any, b_shape: Any, *args: Any, out_shape: Any = None, **kwargs: Any
) -> int:
    """FLOPs of ``aten._grouped_mm``: 2 x (output elements) x (contracted length).

    2d x 2d (groups split K, output (G, M, N)): 2 M K_total N; otherwise (2d x 3d, 3d x 2d,
    3d x 3d) the contracted length is ``a``'s last dimension: 2 x numel(out) x K.
    """
    if len(a_shape) == 2 and len(b_shape) == 2:
        return 2 * a_shape[0] * a_shape[1] * b_shape[1]
    out = 1
    for d in out_shape:
        out *= d
    return 2 * out * a_shape[-1]


def _storage_key(t: Any) -> int:
    """Identity of a tensor's storage (the StorageImpl address; meta tensors have no data)."""
    return int(t.untyped_storage()._cdata)


class _SavedTensors:
    """Pack hook that records unique saved storages; keeps them alive so keys stay unique."""

    def __init__(self, excluded: set[int]) -> None:
        self.excluded = excluded
        self.storages: dict[int, tuple[int, str]] = {}
        self._alive: list[Any] = []

    def pack(self, t: Any) -> Any:
        key = _storage_key(t)
        if key not in self.excluded and key not in self.storages:
            self.storages[key] = (int(t.untyped_storage().nbytes()), str(t.dtype))
            self._alive.append(t)
        return t

    @staticmethod
    def unpack(t: Any) -> Any:
        return t

    @property
    def total_bytes(self) -> int:
        return sum(n for n, _ in self.storages.values())

    def by_dtype(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for n, dt in self.storages.values():
            out[dt] = out.get(dt, 0) + n
        return out


def _infer_hidden(module: Any) -> int | None:
    """Hidden width from common attributes, else from the first Linear/norm/Embedding."""
    torch = require_torch()
    nn = torch.nn
    for holder in (module, getattr(module, "config", None), getattr(module, "spec", None)):
        for attr in ("hidden", "hidden_size", "d_model", "embed_dim", "n_embd"):
            value = getattr(holder, attr, None) if holder is not None else None
            if isinstance(value, int) and value > 0:
                return value
    for sub in module.modules():
        if isinstance(sub, nn.Linear):
            return int(sub.in_features)
        if isinstance(sub, nn.LayerNorm | nn.RMSNorm) and sub.normalized_shape:
            return int(sub.normalized_shape[-1])
        if isinstance(sub, nn.Embedding):
            return int(sub.embedding_dim)
    return None


def _first_tensor(out: Any) -> Any:
    """The output tensor of a module returning a tensor, a tuple/list, a dict or an object
    with ``logits``/``last_hidden_state`` (Hugging Face style)."""
    torch = require_torch()
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, tuple | list) and out and isinstance(out[0], torch.Tensor):
        return out[0]
    for key in ("logits", "last_hidden_state"):
        value = out.get(key) if isinstance(out, dict) else getattr(out, key, None)
        if isinstance(value, torch.Tensor):
            return value
    raise PlannerError("factory", f"the module returned {type(out).__name__}, not a tensor")


def _make_input(kind: str, batch: int, seq_len: int, hidden: int | None, dtype: Any) -> Any:
    torch = require_torch()
    if kind == "tokens":
        return torch.zeros((batch, seq_len), dtype=torch.long, device="meta")
    if hidden is None:
        raise PlannerError("hidden", "cannot infer the block's hidden width", "pass hidden=")
    return torch.empty((batch, seq_len, hidden), dtype=dtype, device="meta", requires_grad=True)


def _detect_kind(module: Any, batch: int, seq_len: int, hidden: int | None, dtype: Any) -> str:
    """Try the module on (B, S, hidden) states, then on (B, S) token ids (no-grad, meta).

    Token ids are tried only for modules holding an ``nn.Embedding`` (first, when that is the
    first module with parameters): meta kernels do not check dtypes, so a Linear would accept
    integer ids of the right width. ``input_kind="tokens"`` forces ids for other modules.
    """
    torch = require_torch()
    embedding = torch.nn.Embedding
    has_embedding = any(isinstance(m, embedding) for m in module.modules())
    embedding_first = next(
        (isinstance(m, embedding) for m in module.modules() if m._parameters), False
    )
    order = ("tokens", "hidden") if embedding_first else ("hidden", "tokens")
    errors = [] if hidden is not None else ["hidden: width not inferred (pass hidden= / --hidden)"]
    if not has_embedding:
        errors.append("tokens: the module has no nn.Embedding (force with input_kind='tokens')")
    for kind in order:
        if (kind == "hidden" and hidden is None) or (kind == "tokens" and not has_embedding):
            continue
        try:
            with torch.no_grad():
                out = _first_tensor(module(_make_input(kind, batch, seq_len, hidden, dtype)))
        except Exception as exc:  # the wrong input kind fails in arbitrary ways
            errors.append(f"{kind}: {type(exc).__name__}: {exc}")
            continue
        if kind == "hidden" and tuple(out.shape) != (batch, seq_len, hidden):
            errors.append(f"hidden: output shape {tuple(out.shape)} is not the input's")
            continue
        return kind
    raise PlannerError(
        "factory",
        "the module ran neither on (batch, seq, hidden) states nor on (batch, seq) token ids: "
        + "; ".join(" ".join(e.split())[:300] for e in errors),
    )


def _sdpa_mode(calls: list[bool]) -> Any:
    """A TorchFunctionMode recording ``is_causal`` of each scaled_dot_product_attention call."""
    torch = require_torch()
    from torch.overrides import TorchFunctionMode

    sdpa = torch.nn.functional.scaled_dot_product_attention

    class _Sdpa(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            kwargs = kwargs or {}
            if func is sdpa:
                causal = kwargs.get("is_causal", args[5] if len(args) > 5 else False)
                calls.append(bool(causal))
            return func(*args, **kwargs)

    return _Sdpa()


def _op_counts(counter: Any) -> dict[str, float]:
    return {str(op): float(n) for op, n in counter.get_flop_counts().get("Global", {}).items()}


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
    if seq_len <= 0 or batch <= 0:
        raise PlannerError("seq_len/batch", f"seq_len={seq_len}, batch={batch}", "integers >= 1")
    if dtype not in DTYPES:
        raise PlannerError("dtype", f"{dtype!r}", ", ".join(DTYPES))
    if input_kind not in ("auto", "hidden", "tokens"):
        raise PlannerError("input_kind", f"{input_kind!r}", "auto, hidden, tokens")
    torch = require_torch()
    from torch.utils.flop_counter import FlopCounterMode

    tdtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dtype]
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
    module = module.to(dtype=tdtype)
    if hidden is None:
        hidden = _infer_hidden(module)
    kind = (
        _detect_kind(module, batch, seq_len, hidden, tdtype) if input_kind == "auto" else input_kind
    )
    x = _make_input(kind, batch, seq_len, hidden, tdtype)

    excluded = {_storage_key(p) for p in module.parameters()}
    excluded |= {_storage_key(b) for b in module.buffers()}
    saved = _SavedTensors(excluded)
    mapping: dict[Any, Any] = {}
    if hasattr(torch.ops.aten, "_grouped_mm"):
        mapping[torch.ops.aten._grouped_mm] = _grouped_mm_flops
    sdpa_calls: list[bool] = []
    try:
        fwd = FlopCounterMode(display=False, custom_mapping=mapping)
        with (
            torch.autograd.graph.saved_tensors_hooks(saved.pack, saved.unpack),
            _sdpa_mode(sdpa_calls),
            fwd,
        ):
            out = _first_tensor(module(x))
        if not out.requires_grad:
            raise PlannerError("factory", "the output does not require grad (no parameters?)")
        bwd = FlopCounterMode(display=False, custom_mapping=mapping)
        with bwd:
            out.backward(torch.ones_like(out))
    except PlannerError:
        raise
    except Exception as exc:
        raise PlannerError(
            "factory", f"forward/backward on meta failed: {type(exc).__name__}: {exc}"
        ) from exc

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
    notes = [NOTE_FLOPS]
    if sdpa_calls:
        causal = sorted(set(sdpa_calls))
        notes.append(
            NOTE_SDPA.format(calls=len(sdpa_calls), causal="/".join(str(c) for c in causal))
        )
    if "aten._grouped_mm" in per_op:
        notes.append(NOTE_GROUPED)
    notes.append(NOTE_SAVED)
    by_dtype = saved.by_dtype()
    fp32 = by_dtype.get(str(torch.float32), 0)
    if dtype != "fp32" and fp32 > 0.05 * max(saved.total_bytes, 1):
        notes.append(NOTE_FP32.format(mib=fp32 / 2**20, dtype=dtype))
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


# ---- the analytic figures of a shipped model, for comparison -----------------------------------


def analytic_figures(model_id: str, seq_len: int, batch: int, whole_model: bool = False) -> dict:
    """The planner's analytic figures per token for one layer (or the whole model) of a spec.

    One layer: ``planner.costs.flops.layer_flops`` with ``Layout()`` and ``Training(seq_len,
    global_batch=batch, micro_batch=batch)``, MoE layer when the model has MoE layers; attention
    in the model convention (full, non-causal: what meta SDPA counts) and the hardware one
    (causal half). Backward: 2x every GEMM and 2x attention (autograd through the math path),
    and ``bwd_flops_per_token_flash2`` with the FlashAttention-2 convention (attention 2.5x). Activations: ``layer_activation_bytes`` with flash
    (Q, K, V, O, LSE) and unfused (scores and softmax materialised) attention. Whole model:
    ``model_flops_per_token / 3`` forward, total parameters, and the sum over layers.
    """
    from planner.costs.flops import layer_flops, model_flops_per_token
    from planner.costs.memory import layer_activation_bytes
    from planner.specs.blocks import MoEMLP
    from planner.specs.layout import Layout, Training
    from planner.specs.loading import load_model

    model = load_model(model_id)
    layout = Layout()
    training = Training(seq_len=seq_len, global_batch=batch, micro_batch=batch, precision="bf16")
    tokens = float(seq_len * batch)
    kinds = model.layer_kinds()

    def act(flash: bool, layer: Any) -> float:
        return layer_activation_bytes(model, layout, training, layer, flash_attention=flash)

    if whole_model:
        fwd = model_flops_per_token(model, seq_len) / 3.0

        def total_act(flash: bool) -> float:
            return sum(count * act(flash, layer) for layer, count in kinds)

        return {
            "model": model.name,
            "scope": "whole model",
            "fwd_flops_per_token": fwd,
            "bwd_flops_per_token": 2.0 * fwd,
            "params": float(model.total_params),
            "saved_activation_bytes_per_token_flash": total_act(True) / tokens,
            "saved_activation_bytes_per_token_unfused": total_act(False) / tokens,
        }
    # the MoE layer kind when there is one (the block worth tracing), else the first kind
    layer = next((k for k, _ in kinds if isinstance(k.mlp, MoEMLP)), kinds[0][0])
    lf = layer_flops(model, layout, training, layer)
    gemm, attn = lf.gemm_fwd_flops, lf.attention_model_fwd_flops
    return {
        "model": model.name,
        "scope": f"one {layer.mixer.kind}/{layer.mlp.kind} layer",
        "fwd_flops_per_token": (gemm + attn) / tokens,
        "fwd_flops_per_token_causal": (gemm + lf.attention_fwd_flops) / tokens,
        "attention_fwd_flops_per_token": attn / tokens,
        "bwd_flops_per_token": 2.0 * (gemm + attn) / tokens,
        "bwd_flops_per_token_flash2": (2.0 * gemm + 2.5 * attn) / tokens,
        "params": float(model.layer_params(layer)[0]),
        "saved_activation_bytes_per_token_flash": act(True, layer) / tokens,
        "saved_activation_bytes_per_token_unfused": act(False, layer) / tokens,
    }


def compare(traced: TracedBlock, model_id: str) -> dict:
    """Traced vs analytic per-token figures and the % difference ((traced - analytic) /
    analytic x 100) for FLOPs, parameters and saved activations (flash and unfused)."""
    ref = analytic_figures(
        model_id, traced.seq_len, traced.batch, whole_model=traced.input_kind == "tokens"
    )
    cost = traced_layer_cost(traced)
    pairs = {
        "fwd_flops_per_token": ("fwd_flops_per_token", "fwd_flops_per_token"),
        "bwd_flops_per_token": ("bwd_flops_per_token", "bwd_flops_per_token"),
        "bwd_flops_per_token_vs_flash2": ("bwd_flops_per_token", "bwd_flops_per_token_flash2"),
        "params": ("params", "params"),
        "saved_bytes_per_token_vs_flash": (
            "saved_activation_bytes_per_token",
            "saved_activation_bytes_per_token_flash",
        ),
        "saved_bytes_per_token_vs_unfused": (
            "saved_activation_bytes_per_token",
            "saved_activation_bytes_per_token_unfused",
        ),
    }
    rows = {}
    for name, (t_key, a_key) in pairs.items():
        if a_key not in ref:
            continue
        t, a = cost[t_key], ref[a_key]
        rows[name] = {"traced": t, "analytic": a, "diff_pct": (t - a) / a * 100.0 if a else None}
    warnings = []
    model_hidden = analytic_hidden(model_id)
    if traced.hidden is not None and traced.hidden != model_hidden:
        warnings.append(f"traced hidden {traced.hidden} differs from {model_id}'s {model_hidden}")
    return {"analytic": ref, "rows": rows, "warnings": warnings}


def analytic_hidden(model_id: str) -> int:
    """Hidden width of a shipped model id or YAML path."""
    from planner.specs.loading import load_model

    return load_model(model_id).hidden
