"""The named values of layout and training fields (pipeline schedules, precisions, kernels,
recompute modules) and the small rules over them that other modules share."""

from __future__ import annotations

from typing import Literal, get_args

Recompute = Literal["none", "selective", "full"]
TrainPrecision = Literal["bf16", "fp16", "fp8", "fp32"]
# pipeline schedules: planner/schedules/ (one object each; docs/model.md, Pipeline)
Schedule = Literal["1f1b", "interleaved", "zb-h1", "zb-h2", "interleaved-zb", "zbv", "dualpipev"]
AttentionKernel = Literal["fused", "cudnn", "flash2", "flash_triton", "unfused"]
GradDtype = Literal["fp32", "bf16"]
# How the loss keeps the logits for backward (see planner/costs/memory.py logits_bytes)
CrossEntropy = Literal["fp32_copy", "in_place", "fp32_log_softmax", "compiled"]
Execution = Literal["eager", "compiled", "cuda_graphs"]
OptimizerKernel = Literal["fused", "foreach", "per_tensor"]
OptimizerStates = Literal["fp32", "fp32_remainders", "bf16"]
Fp8Recipe = Literal["delayed", "tensorwise", "rowwise", "rowwise_gw_hp", "mxfp8", "blockwise"]
# how MoE tokens reach their experts' ranks (Training.moe_dispatcher)
MoeDispatcher = Literal["alltoall", "deepep"]
# how a micro-batch's gradient joins the accumulated one (Training.grad_accumulation_add)
GradAccumulationAdd = Literal["none", "main_grad", "autograd"]
# recipes whose weights can be all-gathered already cast (one scale per tensor, or blocks that
# serve both GEMM layouts): torchao enable_fsdp_float8_all_gather is tensorwise-only
FP8_GATHER_RECIPES = ("delayed", "tensorwise", "mxfp8")


def fp8_gatherable(precision: str, fp8_recipe: str) -> bool:
    """Whether weights trained at ``precision`` with ``fp8_recipe`` can be all-gathered already
    cast to fp8 (``Training.fp8_param_gather``): fp8 with one of :data:`FP8_GATHER_RECIPES`."""
    return precision == "fp8" and fp8_recipe in FP8_GATHER_RECIPES


UnfusedChain = Literal["norm", "glu", "rope", "bias_dropout_add", "expert_bias"]
Zero3Collectives = Literal["per_layer", "per_layer_copy_out", "per_tensor_list"]
CROSS_ENTROPY_KINDS: tuple[str, ...] = get_args(CrossEntropy)
# Megatron-Core ``--recompute-modules`` (selective recompute): which submodules re-run in backward
RecomputeModule = Literal[
    "core_attn",
    "mla_up_proj",
    "moe_act",
    "mlp",
    "layernorm",
    "moe",
    "shared_experts",
    "alternate_mm",  # torchtitan selective op AC: every other matmul, norms and activations
]
DEFAULT_RECOMPUTE_MODULES: tuple[str, ...] = ("core_attn",)
