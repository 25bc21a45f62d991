"""The notes a :class:`~planner.trace.block.TracedBlock` carries: how its figures were counted
(``str.format`` templates where a figure goes in)."""

from __future__ import annotations

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
