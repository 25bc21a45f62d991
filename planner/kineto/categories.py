"""The trace categories of a profiler trace and the name rules that sort ops and kernels into
them (first match wins; see the :mod:`planner.kineto` docstring)."""

from __future__ import annotations

import re

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

_COLLECTIVE_RULES = (
    ("all_to_all", re.compile(r"all_?to_?all")),
    ("reduce_scatter", re.compile(r"reduce_?scatter")),
    ("all_gather", re.compile(r"all_?gather")),
    ("all_reduce", re.compile(r"all_?reduce")),
    ("send_recv", re.compile(r"sendrecv|send_recv|(?<![a-z])i?(send|recv)(?![a-z])")),
    ("other_collective", re.compile(r"nccl|gloo|c10d::|broadcast|barrier|record_param_comms")),
)
# "lamb" as a word only: CUDA kernel names carry C++ lambdas ("{lambda()#3}"), and an
# elementwise kernel is not LAMB
_OPTIMIZER = re.compile(
    r"optimizer\.step|adam|multi_tensor_apply|_foreach_|fused_sgd|(?<![a-z])lamb(?![a-z])"
)
_MEMCPY = re.compile(r"memcpy|memset")
_LOSS = re.compile(r"cross_?entropy|nll_?loss|log_?softmax")
# cuDNN's SDPA backward runs two helper kernels beside its flash kernels (seen in an H200 trace,
# torch 2.11): cudnn::fusion::compute_dot_do_o_specialized and convert_dq_to_16bits
_ATTENTION = re.compile(
    r"scaled_dot_product|flash|fmha|efficient_attention|attention|sdpa|softmax"
    r"|compute_dot_do_o|convert_dq_to_16bits"
)
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
    # LayerNorm's weight and bias gradient kernel; the embedding backward's kernels
    r"|gamma_?beta_?backward|sum_and_scatter|compute_grad_weight|partials_per_segment"
    r"|dropout|rotary|rope|accumulate_grad|aten::(add|sub|rsub|mul|div|copy_|cat|stack|pow"
    r"|rsqrt|sqrt|exp|log|neg|mean|sum|where|masked_fill|fill_|zero_|zeros|ones|full|clone"
    r"|contiguous|index|index_select|index_add|gather|scatter|scatter_add|square|to|_to_copy"
    r"|lerp|addcmul|addcdiv|clamp|cumsum|max|min|amax|argmax|topk|sort|repeat"
    r"|repeat_interleave|slice_backward|select_backward|arange|randint|random_|bernoulli)_?\b"
)
_BACKWARD = re.compile(r"autograd::engine::evaluate_function:\s*(.+)")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


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
