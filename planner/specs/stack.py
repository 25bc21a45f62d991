"""A software stack: the framework that runs a layout, as mechanisms the simulator costs.

The same layout runs at different speeds and memory on Megatron-Core + Transformer Engine, on
FSDP2 in eager PyTorch or on DeepSpeed ZeRO, for reasons that are mechanisms: which attention
kernel runs, which elementwise chains are fused (and so how many HBM passes each costs), whether
the host issues every kernel from Python or replays a graph, how data parallelism gathers and
reduces, what the framework overlaps by default, and what its reported memory peak measures.
A :class:`StackSpec` declares these; shipped stacks live in the top-level ``stacks/`` folder
(one YAML per stack, each figure with its source) and load like models and clusters
(``planner.load_stack``, ``--stack ID|PATH``, ``planner list stacks``).

How each field enters the step (see ``planner/stacks.py``):

* fields that are also a :class:`~planner.specs.layout.Training` or
  :class:`~planner.specs.layout.Layout` input (attention kernel, which elementwise chains are
  unfused, loss kernel, dropout, precision, gradient-reduce dtype, overlaps, pipeline
  scatter/gather, selective-recompute modules) are the stack's defaults: a value the user sets
  explicitly wins;
* ``execution.mode`` is the ``Training.execution`` default (host time per op: eager 1,
  compiled 0.3, CUDA graphs 0, planner/costs/host.py); ``memory`` turns the allocated peak into the
  caching allocator's reserved peak, and says which one the stack's logs report;
* ``capabilities`` are a legality check: a layout the stack cannot run is refused with the
  stack's name and the field;
* ``export_dialects`` name the launch files ``planner search --stack S --export-dir D`` writes
  for the stack (planner/search/export.py ``DIALECTS``: one writer and file name each).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from planner.specs.base import MAX_TEXT, Spec
from planner.specs.knobs import (
    CrossEntropy,
    Fp8Recipe,
    GradAccumulationAdd,
    MoeDispatcher,
    OptimizerKernel,
    Recompute,
    RecomputeModule,
    Schedule,
    Zero3Collectives,
)
from planner.specs.model import Activation

AttentionImpl = Literal[
    "cudnn_fused",  # Transformer Engine's cuDNN fused attention (cuDNN figures where measured)
    "flash3",  # FlashAttention-3 (Shah et al. 2024)
    "flash2",  # FlashAttention-2 (Dao 2023)
    "flash_triton",  # flash-attn's Triton FlashAttention (flash_attn_triton.py, 2022-23)
    "sdpa_flash",  # torch.nn.functional.scaled_dot_product_attention, flash backend (FA2 kernels)
    "sdpa_mem_efficient",  # SDPA memory-efficient backend (xFormers kernels)
    "math",  # SDPA math backend: scores materialised
    "unfused",  # scores materialised by separate GEMM, softmax, dropout kernels (2021-era)
]
ExecutionMode = Literal["eager", "compiled", "cuda_graphs"]
DataParallelImpl = Literal["megatron_ddp", "deepspeed_zero", "fsdp1", "fsdp2"]
TpOverlap = Literal["opt_in", "with_sequence_parallel"]
# the launch-file formats a stack reads (planner/search/export.py DIALECTS maps each to its
# writer and file name; docs/stacks.md, Export dialects, cites where each key list was read)
ExportDialect = Literal[
    "megatron_args",  # Megatron-LM pretrain_gpt.py arguments
    "megatron_deepspeed_args",  # Megatron-DeepSpeed pretrain_gpt.py arguments (--deepspeed ...)
    "deepspeed_json",  # a DeepSpeed config (ds_config.json)
    "nemo_overrides",  # NeMo 2 recipe overrides (nemo llm pretrain --factory F path=value)
    "megatron_bridge_overrides",  # Megatron-Bridge ConfigContainer Hydra-style overrides
    "torchtitan_toml",  # a torchtitan job-config TOML
    "llm_foundry_yaml",  # an llm-foundry train YAML (fsdp_config, batch sizes)
]


class StackKernels(Spec):
    """Which kernels run the layer's work."""

    attention: AttentionImpl = Field(description="attention implementation")
    fused_norm: bool = Field(
        description="LayerNorm/RMSNorm as one kernel (read + write once); unfused: the eager "
        "chain of square, mean, rsqrt, two multiplies"
    )
    fused_glu: bool = Field(
        description="gated activation (SwiGLU/GeGLU) as one kernel; unfused: act, then multiply"
    )
    fused_rope: bool = Field(
        description="rotary embedding as one kernel; unfused: upcast, complex multiply, "
        "downcast as separate kernels (torchtitan apply_rotary_emb in eager)"
    )
    fused_bias_dropout_add: bool = Field(
        description="bias + dropout + residual add as one kernel (Megatron jit-fused)"
    )
    fused_expert_bias: bool = Field(
        default=True,
        description="with biased experts (MoESpec.expert_bias): the second expert GEMM's bias is "
        "added inside a fused kernel or the GEMM epilogue (no extra pass); false: added per local "
        "expert in a Python loop through an fp32 intermediate, then concatenated and cast back "
        "(Megatron-Core TEGroupedMLP._apply_bias), extra HBM passes and launches "
        "(planner/costs/elementwise.py)",
    )
    cross_entropy: CrossEntropy = Field(
        description="loss kernel (Training.cross_entropy): fp32_copy materialises fp32 logits "
        "(6 B/logit), in_place is Transformer Engine's fused online-softmax loss (2 B/logit), "
        "fp32_log_softmax is PyTorch's F.cross_entropy on an fp32 copy (12 B/logit in backward), "
        "compiled is that loss under torch.compile (4 B/logit)"
    )
    optimizer: OptimizerKernel = Field(
        default="fused",
        description="AdamW implementation (Training.optimizer_kernel): fused, foreach or "
        "per_tensor",
    )
    fp8_recipe: Fp8Recipe = Field(
        default="delayed",
        description="FP8 scaling recipe with precision fp8 (Training.fp8_recipe): delayed, "
        "tensorwise, rowwise, rowwise_gw_hp, mxfp8 or blockwise",
    )
    fp8_param_gather: bool = Field(
        default=False,
        description="with precision fp8 (and a recipe whose weights can be gathered cast), the "
        "stack's fp8 precision preset keeps the weights in fp8 and all-gathers them so "
        "(Training.fp8_param_gather)",
    )
    fp8_weight_cache: bool = Field(
        default=False,
        description="the stack's fp8 layers keep each weight's fp8 copy and transpose across "
        "micro-batches (Training.fp8_weight_cache)",
    )
    moe_dispatcher: MoeDispatcher = Field(
        default="alltoall",
        description="MoE token dispatch (Training.moe_dispatcher): alltoall, one copy per "
        "routed expert; deepep, one copy per destination node, forwarded over NVLink",
    )
    fp8_dispatch: bool = Field(
        default=False,
        description="FP8 dispatch, bf16 combine with precision fp8 (Training.fp8_dispatch)",
    )


class StackExecution(Spec):
    """How the host issues the step's kernels."""

    mode: ExecutionMode = Field(
        description="eager: every op from Python (host time per op); compiled: torch.compile "
        "fuses elementwise chains and issues fewer, cheaper launches; cuda_graphs: the step is "
        "replayed, the host never binds"
    )
    backward_ops: float = Field(
        default=2.0,
        ge=1.0,
        le=4.0,
        description="host ops the backward pass issues per forward op (Training."
        "backward_host_ops): 2 where the layer's backward is a data and a weight gradient per "
        "GEMM and one kernel per elementwise gradient (Transformer Engine: bias gradients in "
        "the GEMM epilogue, weight gradients accumulated by the GEMM); more where biases, "
        "LayerNorm parameters and per-parameter gradient accumulation each issue their own",
    )


class StackDataParallel(Spec):
    """Data parallelism as the stack implements it."""

    implementation: DataParallelImpl = Field(
        description="the data-parallel engine (its ZeRO stages are capabilities.zero_stages)"
    )
    grad_reduce_dtype: Literal["fp32", "bf16"] = Field(
        description="dtype of the gradient reduction (Megatron --grad-reduce-in-bf16; FSDP2 "
        "MixedPrecisionPolicy.reduce_dtype)"
    )
    gathered_with_pp: bool = Field(
        default=False,
        description="with pp > 1 the FSDP layers stay gathered through the step and the "
        "gradients are reduced once per step (Layout.zero3_reshard_after_forward false: "
        "torchtitan's apply_fsdp sets reshard_after_forward=False when PP is enabled)",
    )
    zero3_collectives: Zero3Collectives = Field(
        default="per_layer",
        description="how ZeRO-3 / FSDP issues its gathers and reductions "
        "(Layout.zero3_collectives): per_layer, per_layer_copy_out (FSDP2's copy-out of "
        "every gather) or per_tensor_list (DeepSpeed 0.3: one list-form collective per "
        "parameter tensor)",
    )
    fp32_grad_accumulation_pass: bool = Field(
        default=False,
        description="in bf16, after every micro-batch's backward each parameter tensor's bf16 "
        "gradient is cast to fp32 and added into an fp32 gradient buffer "
        "(Training.fp32_grad_accumulation_pass; DeepSpeed's BF16_Optimizer update_hp_grads)",
    )
    grad_accumulation_add: GradAccumulationAdd = Field(
        default="none",
        description="how each micro-batch's gradient joins the accumulated one where the "
        "weight-gradient GEMM does not accumulate in place (Training.grad_accumulation_add): "
        "none, main_grad (Megatron-LM's local DDP hook before gradient-accumulation fusion) "
        "or autograd (PyTorch's AccumulateGrad into .grad)",
    )


class StackOverlap(Spec):
    """What the stack overlaps by default (each is a Layout input the user can override)."""

    tp_comm: TpOverlap = Field(
        description="TP communication overlap: opt_in (off unless asked) or on whenever "
        "sequence parallelism is (NeMo tp_comm_overlap, torchtitan async TP)"
    )
    dp_grad_reduce: bool = Field(description="gradient reduction overlapped with backward")
    tp_backward_async: bool = Field(
        default=False,
        description="each column-parallel linear's backward TP collective runs under its own "
        "weight-gradient GEMM (Training.overlap_tp_backward; Megatron-LM's async "
        "tensor-model-parallel all-reduce, Transformer Engine's Linear backward)",
    )
    dp_grad_reduce_with_pp: bool = Field(
        default=True,
        description="the gradient reduction stays overlapped with backward when a pipeline "
        "runs (false: the pipeline engine reduces once after its flush, as DeepSpeed's "
        "PipelineEngine does)",
    )
    zero3_param_gather: bool = Field(description="ZeRO-3 / FSDP all-gather prefetched")
    pp_scatter_gather: bool = Field(
        description="pipeline messages scattered over the TP ranks (Megatron-LM 2021 default)"
    )
    pp_p2p_interleaved: bool = Field(
        default=False,
        description="pipeline sends and receives overlapped with compute under the "
        "interleaved schedule (Megatron-Core overlap_p2p_comm; Layout.overlap_pp_comm)",
    )
    ep_comm: bool = Field(
        default=False,
        description="the MoE dispatch / combine all-to-all hidden behind another micro-batch's "
        "compute wherever the schedule allows it (pp 1 or two chunks per rank; "
        "Layout.overlap_ep_comm): DeepSeek-V3's DualPipe; Megatron-Core's "
        "--overlap-moe-expert-parallel-comm is opt-in",
    )


class StackMemory(Spec):
    """What the memory figures mean under this stack."""

    reported_peak: Literal["allocated", "reserved"] = Field(
        description="what the stack's published peak measures: the caching allocator's "
        "allocated or reserved bytes"
    )
    reserved_overhead: float = Field(
        ge=0.0,
        le=1.0,
        description="reserved bytes beyond allocated, as a fraction of the allocated peak "
        "(caching-allocator fragmentation and rounding)",
    )


class StackCapabilities(Spec):
    """What the stack can run; a layout outside it is refused naming the stack and the field."""

    tp: bool = Field(description="tensor parallelism")
    sequence_parallel: bool = Field(description="Megatron sequence parallelism")
    pp: bool = Field(description="pipeline parallelism")
    cp: bool = Field(description="context parallelism")
    ep: bool = Field(description="expert parallelism")
    tp_comm_overlap: bool = Field(
        description="TP communication overlapped with compute at all (TE userbuffers, "
        "async TP); False: the layout's overlap_tp_comm is refused"
    )
    zero_stages: tuple[Literal[0, 1, 2, 3], ...] = Field(
        min_length=1, max_length=4, description="ZeRO stages (0 none ... 3 full shard)"
    )
    pp_zero_stages: tuple[Literal[0, 1, 2, 3], ...] | None = Field(
        default=None,
        min_length=1,
        max_length=4,
        description="ZeRO stages that compose with pipeline parallelism (pp > 1); None: "
        "every stage of zero_stages",
    )
    schedules: tuple[Schedule, ...] = Field(
        min_length=1, max_length=16, description="pipeline schedules it runs (when pp > 1)"
    )
    recompute: tuple[Recompute, ...] = Field(
        min_length=1, max_length=3, description="recompute granularities"
    )
    recompute_modules: tuple[RecomputeModule, ...] = Field(
        default=(),
        max_length=8,
        description="the submodules its selective recompute can be told to re-run "
        "(Megatron-Core --recompute-modules, core_v0.12.0 and later; Training."
        "recompute_modules); empty: only its own selective set (selective_recompute_modules)",
    )
    partial_recompute: bool = Field(
        default=False,
        description="full recompute of only a share of the layers (Training.recompute_fraction: "
        "Megatron --recompute-method block, torchtitan's every-k-th-layer selective AC, "
        "InternEvo's checkpoint fraction); False: every layer or none",
    )
    fp8: bool = Field(description="FP8 training")
    optimizer_offload: bool = Field(
        default=False, description="optimizer states and update on the host CPU (ZeRO-Offload)"
    )
    checkpoint_offload: bool = Field(
        default=False, description="full-recompute checkpoints kept in host memory"
    )
    reduced_optimizer_states: bool = Field(
        default=False,
        description="AdamW state smaller than fp32 master + moments (Training.optimizer_states "
        "fp32_remainders or bf16): Apex DistributedFusedAdam, Transformer Engine FusedAdam",
    )
    hybrid_shard: bool = Field(
        default=False,
        description="ZeRO / FSDP state sharded within groups of DP ranks and replicated across "
        "them (Layout.dp_shard: HSDP, Megatron-Core's partial distributed optimizer)",
    )
    # what the code base's model definitions can express (a legacy code base's models predate
    # GLU activations, grouped-query attention, untied output layers and MLA)
    activations: tuple[Activation, ...] = Field(
        default=("gelu", "swiglu", "relu2", "geglu"),
        min_length=1,
        max_length=4,
        description="MLP activations its models offer (model.activation)",
    )
    gqa: bool = Field(
        default=True, description="grouped-query / multi-query attention (kv_heads < heads)"
    )
    untied_embeddings: bool = Field(
        default=True, description="an output layer apart from the input embedding"
    )
    mla: bool = Field(default=True, description="multi-head latent attention (model.mla)")


class StackSpec(Spec):
    """One training software stack (shipped under ``stacks/``)."""

    name: str = Field(min_length=1, max_length=200)
    description: str = Field(default="", max_length=MAX_TEXT)
    kernels: StackKernels
    execution: StackExecution
    data_parallel: StackDataParallel
    overlap: StackOverlap
    precision: Literal["bf16", "fp16", "fp8"] = Field(
        default="bf16",
        description="training precision of the stack's recipes when the run does not say "
        "(fp8: Transformer Engine or torchao Float8 GEMMs)",
    )
    dropout: bool = Field(
        default=False, description="hidden and attention dropout in the stack's GPT recipes"
    )
    linear_bias: bool = Field(
        default=False,
        description="its model code's linears and LayerNorms carry biases (Training.linear_bias)",
    )
    vocab_multiple: int = Field(
        default=128,
        ge=1,
        le=4096,
        description="its vocabulary padding: a multiple of this times TP (Megatron's "
        "--make-vocab-size-divisible-by 128; 1: unpadded) (Training.vocab_multiple)",
    )
    selective_recompute_modules: tuple[RecomputeModule, ...] = Field(
        default=("core_attn",),
        min_length=1,
        max_length=7,
        description="what recompute: selective re-runs when the run does not say",
    )
    selective_recompute_modules_mla: tuple[RecomputeModule, ...] | None = Field(
        default=None,
        max_length=7,
        description="the same for MLA models, where the stack's recipes differ (None: as above)",
    )
    memory: StackMemory
    capabilities: StackCapabilities
    export_dialects: tuple[ExportDialect, ...] = Field(
        default=("megatron_args", "torchtitan_toml"),
        min_length=1,
        max_length=7,
        description="the launch files the stack's framework reads, in launch order (e.g. "
        "Megatron-DeepSpeed: megatron_deepspeed_args and deepspeed_json); search exports write "
        "the planner's layout.yaml and one file per dialect (default, for a stack file "
        "written before this field: Megatron-LM arguments and a torchtitan TOML)",
    )
    sources: tuple[str, ...] = Field(
        min_length=1,
        max_length=64,
        description="where each figure was read (framework source file and flag, docs, paper)",
    )

    @field_validator("export_dialects")
    @classmethod
    def _each_dialect_once(cls, dialects: tuple[str, ...]) -> tuple[str, ...]:
        if len(set(dialects)) != len(dialects):
            raise ValueError(f"a dialect is listed twice: {list(dialects)}")
        return dialects


__all__ = [
    "AttentionImpl",
    "DataParallelImpl",
    "ExecutionMode",
    "ExportDialect",
    "StackCapabilities",
    "StackDataParallel",
    "StackExecution",
    "StackKernels",
    "StackMemory",
    "StackOverlap",
    "StackSpec",
]
