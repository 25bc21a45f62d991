"""The instruments of a meta-device trace: the ``aten._grouped_mm`` FLOP formula and the
FlopCounterMode totals, the saved-tensor hook that records unique storages, and the mode that
records each ``scaled_dot_product_attention`` call.

torch is imported on demand (:func:`~planner.trace.torch_import.require_torch`).
"""

from __future__ import annotations

from typing import Any

from planner.trace.torch_import import require_torch


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
