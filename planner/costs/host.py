"""Host (CPU) issue time of one layer, and the GPU time lost when the host falls behind.

Eager frameworks (Megatron-LM, NeMo, torchtitan without CUDA graphs) issue every kernel from
Python: module code, autograd, the PyTorch dispatcher and the CUDA launch. The host normally runs
ahead of the GPU and this costs nothing; when issuing a layer's ops takes longer than the GPU
takes to run them, the GPU idles for the difference (the "host overhead wall" of the
Megatron-Core MoE report, arXiv 2603.07685, section on compute efficiency).

Dropless MoE makes the host matter: the token dispatcher copies the per-expert token counts to
the host once per MoE layer (to size the all-to-all and the grouped GEMM), which drains the
launch queue, and the grouped GEMM issues one GEMM (and, in FP8, one quantisation) per local
expert. Megatron-Bridge's own tables show it: Qwen3-30B-A3B on 8 B200 runs 18,066 tokens/s/GPU
with static (token-drop) shapes in 25.09 and 9,299 dropless in 25.11 at micro-batch 1, while
dropless GB200 at micro-batch 4 reaches 23,766 (docs/performance-summary-archive.md): a fixed
per-layer cost that larger micro-batches amortise. (The 25.09 B200 run also replayed each layer
as a CUDA graph, which token drop's static shapes allow: Megatron-Bridge v0.1.0rc4's perf_matrix
sets cuda_graphs: true there, i.e. Megatron-Core ``enable_cuda_graph``; its held-out case states
``execution: cuda_graphs``, and the planner charges it no host time.) Token-drop runs with static shapes are
host-bound too at small micro-batches (25.09: Qwen3-235B on 64 B200 at 4,104 tokens/s/GPU where
the GPU-only model says 5,559), so the floor applies to every layer, sync or not: when issuing a
layer takes longer than running it, running ahead across layers does not help.

The sync also splits a dropless layer in two: before it, the attention block and the router
(GPU-heavy, few launches); after it, the dispatch, the per-expert GEMMs and the combine
(launch-heavy). The host cannot carry a lead across the sync, so each part waits for its own
slower party: stall = max(0, host_before - GPU_before) + max(0, host_after - GPU_after), which
is at least the whole-layer max(0, host - GPU) that token-drop layers get.

The op counts below are estimates of what one layer issues, not measurements; the per-op host
time (``CalibrationProfile.host.op_us``) is one global number fitted by
``calibration/fit_global.py``.
"""

from __future__ import annotations

from collections.abc import Iterable

from planner.costs.flops import Gemm

# Host time per framework op relative to eager PyTorch, by how the step is issued. Eager: every
# op through Python, the dispatcher and autograd (the fitted host.op_us). Compiled: Inductor's
# generated code launches its fused kernels without per-op dispatch; an assumption until a
# measured eager/compiled pair of host times is calibrated (0.3 x eager per launched op).
# CUDA graphs: the captured step is replayed, the host never binds.
HOST_OP_FACTOR = {"eager": 1.0, "compiled": 0.3, "cuda_graphs": 0.0}


def host_op_factor(execution: str) -> float:
    """Host time per op relative to eager for ``execution`` (eager, compiled, cuda_graphs)."""
    return HOST_OP_FACTOR[execution]


# Router (logits, softmax or sigmoid, top-k, probability scatter), auxiliary load-balancing
# loss (a handful of reductions), dispatcher metadata (per-expert counts, the device-to-host copy,
# split sizes), permute / unpermute and the chunk sort between them: an estimate from the steps
# Megatron-Core's top-k router and all-to-all dispatcher take.
MOE_ROUTING_OPS = 24.0
# Dispatch and combine all-to-all (and their split-size exchange) when EP > 1.
MOE_EP_OPS = 4.0
# Backward issues about twice the forward's ops: data and weight gradient per GEMM, and the
# gradient of every elementwise op (the default of Training.backward_host_ops; a stack whose
# layers issue more sets execution.backward_ops, e.g. stacks/megatron-lm-2021.yaml).
BACKWARD_OP_FACTOR = 2.0


# Kernels of attention with materialised scores (pre-FlashAttention Megatron CoreAttention,
# Megatron-LM v2.5 megatron/model/transformer.py ParallelAttention.forward, and the same code in
# the 2022 Megatron-LM and Megatron-DeepSpeed forks): torch.baddbmm (Q K^T into the score
# buffer), the fused scale-mask-softmax, torch.bmm (P V) and the output's
# permute(...).contiguous() copy; with attention dropout one more (F.dropout). A fused kernel
# (FlashAttention, cuDNN) is one launch.
UNFUSED_ATTENTION_KERNELS = 4.0
# When Megatron's fused softmax kernel cannot run (planner.costs.compute.megatron_fused_softmax),
# PyTorch's path adds the upcast, the scale, the masked_fill and the downcast around the softmax
TORCH_SOFTMAX_EXTRA_KERNELS = 4.0


def core_kernels(
    attention_kernel: str, softmax_attention: bool, dropout: bool, fused_softmax: bool = True
) -> float:
    """Kernel launches of a layer's token-mixer core in the forward pass (``fused_softmax``
    False: materialised scores through PyTorch's fp32 softmax path)."""
    if softmax_attention and attention_kernel == "unfused":
        torch_path = 0.0 if fused_softmax else TORCH_SOFTMAX_EXTRA_KERNELS
        return UNFUSED_ATTENTION_KERNELS + (1.0 if dropout else 0.0) + torch_path
    return 1.0


def forward_ops(
    gemms: Iterable[Gemm],
    elementwise_kernels: float,
    fp8: bool,
    collectives: float,
    moe: bool,
    ep: int,
    core: float = 1.0,
) -> float:
    """Ops one layer's forward issues on the host for one micro-batch.

    Every GEMM launch counts once (a grouped expert GEMM once per local expert, plus one FP8
    quantisation per expert GEMM input), as do the layer's memory-bound kernels, the token-mixer
    core's ``core`` launches (:func:`core_kernels`), and each collective.
    """
    gemm_launches = sum(g.count for g in gemms)
    casts = sum(g.count - 1.0 for g in gemms if fp8 and g.name != "router")
    ops = gemm_launches + casts + elementwise_kernels + core + collectives
    if moe:
        ops += MOE_ROUTING_OPS + (MOE_EP_OPS if ep > 1 else 0.0)
    return ops


# Of the routing ops, those issued after the device-to-host copy of the token counts: permute,
# the chunk sort after the dispatch, unpermute and the combine's bookkeeping.
MOE_POST_SYNC_OPS = 8.0


def expert_ops(gemms: Iterable[Gemm], fp8: bool, ep: int) -> float:
    """Ops a dropless MoE layer's forward issues after its token counts reach the host: the
    routed experts' GEMM launches (and FP8 casts), their activation, the post-sync routing ops
    and the dispatch / combine all-to-all."""
    experts = [g for g in gemms if g.name.startswith("expert_")]
    launches = sum(g.count for g in experts)
    casts = sum(g.count - 1.0 for g in experts if fp8)
    return launches + casts + 1.0 + MOE_POST_SYNC_OPS + (MOE_EP_OPS if ep > 1 else 0.0)


def stall_s(gpu_s: float, ops: float, op_s: float) -> float:
    """Seconds the GPU waits for the host: issue time beyond the GPU's own time."""
    return max(0.0, ops * op_s - gpu_s)
