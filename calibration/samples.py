"""Raw microbenchmark samples: what ``planner calibrate`` measures (torch-free schema).

Times are medians over repeats, in seconds; sizes in bytes or elements as named.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

SAMPLES_SCHEMA_VERSION = 1

CollectiveOp = Literal["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv"]
MemoryOp = Literal["copy", "rmsnorm", "layernorm", "softmax_xent", "adamw"]
Dtype = Literal["fp32", "bf16", "fp16", "fp8"]
SdpaBackend = Literal["default", "flash", "cudnn"]
"""Which kernel scaled_dot_product_attention ran: "default" is SDPA's own choice (a CPU, and
sample files from before backends were measured apart); "flash" its FlashAttention-2 backend,
"cudnn" its cuDNN fused-attention backend, each forced with ``torch.nn.attention.sdpa_kernel``."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class GemmSample(_Frozen):
    """(m x k) @ (k x n) in ``dtype``; FLOPs = 2mnk."""

    m: int = Field(gt=0)
    n: int = Field(gt=0)
    k: int = Field(gt=0)
    dtype: Dtype
    seconds: float = Field(gt=0)


class AttentionSample(_Frozen):
    """scaled_dot_product_attention on (batch, heads, seq, head_dim) tensors."""

    batch: int = Field(gt=0)
    heads: int = Field(gt=0)
    seq: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    causal: bool = True
    dtype: Dtype
    fwd_seconds: float = Field(gt=0)
    bwd_seconds: float = Field(gt=0, description="backward only (not forward + backward)")
    backend: SdpaBackend = "default"


class MemorySample(_Frozen):
    """A memory-bound op; ``bytes_moved`` counts every byte read and written once."""

    op: MemoryOp
    elements: int = Field(gt=0)
    bytes_moved: float = Field(gt=0)
    seconds: float = Field(gt=0)


class CollectiveSample(_Frozen):
    """One collective over ``ranks`` processes; ``bytes`` is the full buffer as nccl-tests
    counts it (all-reduce: the array; all-gather/reduce-scatter: the gathered array;
    all-to-all: what one rank sends in total; send_recv: the message)."""

    op: CollectiveOp
    ranks: int = Field(gt=1)
    bytes: int = Field(gt=0)
    seconds: float = Field(gt=0)
    backend: str


class SuiteMetadata(_Frozen):
    device: Literal["cpu", "cuda"]
    device_name: str
    torch_version: str
    cuda_version: str | None = None
    clocks_mhz: dict[str, float] = Field(default_factory=dict)
    cpu_threads: int | None = None
    memory_gib: float | None = None
    date: str
    command: str
    hostname: str
    quick: bool


class SuiteResult(_Frozen):
    """Everything one run of the suite measured."""

    schema_version: int = SAMPLES_SCHEMA_VERSION
    metadata: SuiteMetadata
    gemm: list[GemmSample]
    attention: list[AttentionSample]
    memory: list[MemorySample]
    collectives: list[CollectiveSample]
