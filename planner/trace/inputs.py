"""The traced module's input: its hidden width, whether it takes (batch, seq, hidden) states or
(batch, seq) token ids, the meta tensor fed to it, and the tensor taken from its output.

torch is imported on demand (:func:`~planner.trace.torch_import.require_torch`).
"""

from __future__ import annotations

from typing import Any

from planner.errors import PlannerError
from planner.trace.torch_import import require_torch


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
