"""Parallel layout and training settings.

Rank order on the hardware (innermost first): TP, CP, DP, PP, as Megatron-Core orders its
process groups (``tp-cp-ep-dp-pp``); expert parallelism (EP) is carved out of DP x CP.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from planner.schedules import vpp_error
from planner.specs.base import (
    MAX_GLOBAL_BATCH,
    MAX_GPUS,
    MAX_LAYERS,
    MAX_MICRO_BATCH,
    MAX_SEQ_LEN,
    Spec,
)
from planner.specs.knobs import (
    DEFAULT_RECOMPUTE_MODULES,
    FP8_GATHER_RECIPES,
    AttentionKernel,
    CrossEntropy,
    Execution,
    Fp8Recipe,
    GradAccumulationAdd,
    GradDtype,
    MoeDispatcher,
    OptimizerKernel,
    OptimizerStates,
    Recompute,
    RecomputeModule,
    Schedule,
    TrainPrecision,
    UnfusedChain,
    Zero3Collectives,
    fp8_gatherable,
)

_Frozen = Spec


class Layout(_Frozen):
    """How one training job is split over GPUs. World size = tp * cp * dp * pp."""

    tp: int = Field(default=1, ge=1, le=MAX_GPUS, description="tensor parallel size")
    pp: int = Field(default=1, ge=1, le=MAX_GPUS, description="pipeline parallel size")
    dp: int = Field(default=1, ge=1, le=MAX_GPUS, description="data parallel size")
    cp: int = Field(default=1, ge=1, le=MAX_GPUS, description="context parallel size")
    ep: int = Field(
        default=1, ge=1, le=MAX_GPUS, description="expert parallel size (inside tp*dp*cp)"
    )
    vpp: int | None = Field(
        default=None, ge=1, le=MAX_LAYERS, description="virtual stages per pipeline rank"
    )
    sequence_parallel: bool = Field(
        default=False,
        description="Megatron sequence parallelism: norms and dropout sharded over the TP group, "
        "TP all-reduce as reduce-scatter + all-gather (Korthikanti et al. 2022; needs tp > 1)",
    )
    zero: Literal[0, 1, 2, 3] = Field(
        default=0, description="0 none, 1 optimizer, 2 +grads, 3 +params"
    )
    dp_shard: int | None = Field(
        default=None, ge=1, le=MAX_GPUS,
        description="hybrid sharding (HSDP, Megatron-Core --num-distributed-optimizer-instances "
        "= dp*cp / dp_shard): ZeRO / FSDP state sharded within groups of this many consecutive "
        "DP x CP ranks, replicated across them (gradient shards all-reduced across); divides "
        "dp*cp, needs zero >= 1; None: the whole DP x CP group",
    )  # fmt: skip
    first_stage_layers: int | None = Field(
        default=None,
        ge=0,
        le=MAX_LAYERS,
        description="transformer layers on the first pipeline rank, over its virtual stages "
        "(Megatron-Core num_layers_in_first_pipeline_stage, --decoder-first-pipeline-num-layers, "
        "or what a pipeline_model_parallel_layout places there; 0: the embedding alone); None: "
        "the even split (planner/costs/pipeline.py). The ranks whose count is not stated share "
        "the other layers evenly; needs pp > 1 and a schedule that is not V-shaped",
    )
    last_stage_layers: int | None = Field(
        default=None,
        ge=0,
        le=MAX_LAYERS,
        description="transformer layers on the last pipeline rank, over its virtual stages "
        "(Megatron-Core num_layers_in_last_pipeline_stage, --decoder-last-pipeline-num-layers; "
        "0: only the head, loss and MTP modules, a layout such as DeepSeek-V3's 'mL'); None: the "
        "even split. As first_stage_layers",
    )
    schedule: Schedule | None = Field(
        default=None,
        description="pipeline schedule: 1f1b, interleaved (vpp >= 2), zb-h1, zb-h2 (zero bubble, "
        "Qi et al. 2023), interleaved-zb (vpp >= 2), zbv, dualpipev (V-shaped, vpp 2); None: "
        "interleaved iff vpp > 1",
    )
    overlap_dp_grad_reduce: bool = Field(
        default=True,
        description="overlap the DP gradient reduction with the backward pass (Megatron "
        "--overlap-grad-reduce, PyTorch DDP buckets)",
    )
    overlap_tp_comm: bool = Field(
        default=False,
        description="overlap TP communication with the GEMMs (Transformer Engine "
        "--tp-comm-overlap, PyTorch async TP)",
    )
    overlap_zero3_param_gather: bool = Field(
        default=True,
        description="prefetch the ZeRO-3 / FSDP parameter all-gather behind the previous "
        "layer's compute",
    )
    zero3_reshard_after_forward: bool = Field(
        default=True,
        description="ZeRO-3 / FSDP frees each layer's gathered parameters after its forward "
        "and re-gathers them for backward, and reduce-scatters the gradients every "
        "micro-batch; false (torchtitan with pp > 1: reshard_after_forward=False, and "
        "torch.distributed.pipelining defers the gradient sync to the last micro-batch): the "
        "stage's parameters stay gathered and its bf16 gradients unreduced through the step, "
        "with one all-gather and one reduce-scatter per layer per step (ZeRO 2 too: one "
        "reduce-scatter per step, not one per micro-batch)",
    )
    zero3_collectives: Zero3Collectives = Field(
        default="per_layer",
        description="ZeRO-3 / FSDP collectives: per_layer (one all-gather and one "
        "reduce-scatter per layer and pass into the parameters' own flat buffer: FSDP1, "
        "Megatron FSDP, DeepSpeed's coalesced gathers); per_layer_copy_out (FSDP2: the same, "
        "then each gather is copied out of the NCCL buffer into per-parameter tensors on the "
        "compute stream, and the gradients into the reduce-scatter buffer); "
        "per_tensor_list (DeepSpeed 0.3.x, 2021: one all-gather per parameter tensor, each "
        "after a device synchronize, so nothing overlaps, re-gathered for the recompute "
        "forward, one reduce-scatter per gradient tensor, all list-form: one copy kernel per "
        "rank each)",
    )
    overlap_ep_comm: bool = Field(
        default=False,
        description="hide the MoE dispatch/combine all-to-all behind another micro-batch's "
        "compute (Megatron-Core --overlap-moe-expert-parallel-comm; needs vpp >= 2 when pp > 1)",
    )
    overlap_pp_comm: bool = Field(
        default=False,
        description="overlap the pipeline's point-to-point sends and receives with the "
        "neighbouring chunk's compute under the interleaved schedule (vpp >= 2; Megatron-Core "
        "overlap_p2p_comm, which Megatron-LM and Megatron-Bridge enable whenever vpp > 1): "
        "steady-state hops hide behind compute, the pipeline fill and drain keep them; no "
        "effect without interleaving",
    )
    pp_scatter_gather: bool = Field(
        default=False,
        description="each TP rank sends 1/tp of the pipeline activation and the receiving "
        "stage all-gathers it over the scale-up fabric (Megatron-LM 2021 "
        "--scatter-gather-tensors-in-pipeline, Narayanan et al. 2021 section 4.1); sequence "
        "parallelism splits the message anyway",
    )

    @model_validator(mode="after")
    def _check(self) -> Layout:
        if self.world_size > MAX_GPUS:
            raise ValueError(
                f"tp*cp*dp*pp = {self.world_size:,} GPUs exceeds the planner's cap of "
                f"{MAX_GPUS:,} GPUs per job"
            )
        wrong_vpp = vpp_error(self.schedule, self.vpp)
        if wrong_vpp:
            raise ValueError(wrong_vpp)
        return self  # sequence_parallel with tp 1 is accepted: a no-op, as in Megatron

    @property
    def world_size(self) -> int:
        return self.tp * self.cp * self.dp * self.pp

    @property
    def zero_shard(self) -> int:
        """The ranks a dense ZeRO / FSDP shard spans: ``dp_shard``, else all of DP x CP."""
        return min(self.dp_shard or self.dp * self.cp, self.dp * self.cp)

    @property
    def dp_replicas(self) -> int:
        """The shard groups holding one replica each (1: no hybrid sharding)."""
        return max(1, self.dp * self.cp // self.zero_shard)

    @property
    def expert_tp(self) -> int:
        """Expert tensor-parallel size: tp when EP fits in DP x CP (Megatron-Core default),
        else 1 (EP then spans the TP ranks too, as with ``--expert-tensor-parallel-size 1``)."""
        return self.tp if (self.dp * self.cp) % self.ep == 0 else 1

    @property
    def expert_dp(self) -> int:
        """Expert data-parallel size: the ranks holding a replica of the same experts, over
        which their gradients are reduced and (ZeRO >= 1) their optimizer state is sharded
        (tp x dp x cp / (ep x expert_tp), Megatron-Core's expert-data-parallel group)."""
        return max(1, self.tp * self.dp * self.cp // (self.ep * self.expert_tp))

    @property
    def virtual_stages(self) -> int:
        return self.vpp or 1

    @property
    def pairs_microbatches(self) -> bool:
        """Whether the schedule runs one micro-batch's forward beside another's backward on a
        rank, which hiding the MoE all-to-all needs (Layout.overlap_ep_comm): pp 1, or two or
        more chunks per rank."""
        return self.pp == 1 or self.virtual_stages >= 2

    @property
    def pipeline_schedule(self) -> Schedule:
        if self.schedule:
            return self.schedule
        return "interleaved" if self.virtual_stages > 1 else "1f1b"


class Training(_Frozen):
    """What one optimizer step processes."""

    seq_len: int = Field(ge=1, le=MAX_SEQ_LEN, description="tokens per sequence")
    global_batch: int = Field(ge=1, le=MAX_GLOBAL_BATCH, description="sequences per optimizer step")
    micro_batch: int = Field(
        default=1, ge=1, le=MAX_MICRO_BATCH, description="sequences per micro-batch per DP rank"
    )
    recompute: Recompute = Field(
        default="none",
        description="activation recomputation: none, selective (the recompute_modules re-run in "
        "backward) or full (each layer's forward re-run in backward)",
    )
    recompute_modules: tuple[RecomputeModule, ...] | None = Field(
        default=None,
        max_length=16,
        description="with recompute: selective, the submodules re-run in backward (Megatron-Core "
        "--recompute-modules): core_attn, mla_up_proj, moe_act, mlp, layernorm, moe, "
        "shared_experts; None: core_attn (Korthikanti et al. 2022)",
    )
    recompute_fraction: float | None = Field(
        default=None,
        gt=0.0,
        le=1.0,
        description="with recompute: full, the share of each pipeline chunk's layers whose "
        "forward re-runs in backward; the others keep all their activations (Megatron "
        "--recompute-method block --recompute-num-layers N: N / layers per chunk; torchtitan "
        "selective_ac_option 'k': 1/k; InternEvo checkpoint; FMS-FSDP selective_checkpointing); "
        "None: every layer",
    )
    precision: TrainPrecision = Field(
        default="bf16",
        description="precision of the training GEMMs (fp8: Transformer Engine, bf16 master "
        "weights; fp32: no tensor-core reduced precision)",
    )
    attention_kernel: AttentionKernel = Field(
        default="cudnn",
        description="fused: the accelerator's best fused kernel (FlashAttention-3 on Hopper); "
        "cudnn: cuDNN fused attention (Transformer Engine; as fused where the profile has no "
        "cuDNN figures); flash2: FlashAttention-2; flash_triton: flash-attn's Triton "
        "FlashAttention (slower than FlashAttention-2, the profile's own curve); unfused: "
        "materialised scores + softmax kernels",
    )
    dropout: bool = Field(default=False, description="hidden and attention dropout (GPT-3 era)")
    grad_reduce_dtype: GradDtype = Field(
        default="fp32", description="dtype of the gradient buffer and its DP reduction"
    )
    offload_layers: int = Field(
        default=0,
        ge=0,
        le=MAX_LAYERS,
        description="layers whose activations are copied to host memory in forward and back "
        "in backward (Megatron-Core --cpu-offloading-num-layers; Transformer Engine CPU offload)",
    )
    unfused_elementwise: tuple[UnfusedChain, ...] = Field(
        default=("expert_bias",),
        max_length=5,
        description="elementwise chains that run as separate eager kernels instead of one "
        "fused kernel (each costs extra HBM passes, planner/costs/elementwise.py): norm, glu, "
        "rope, bias_dropout_add, expert_bias (biased experts' output bias added per local "
        "expert; costs nothing without MoESpec.expert_bias); empty: all fused. Default: "
        "Megatron-Core's (expert_bias)",
    )
    execution: Execution = Field(
        default="eager",
        description="how the host issues the step: eager (every op from Python, the profile's "
        "host.op_us each), compiled (torch.compile: fused kernels, 0.3 x the host time per op), "
        "cuda_graphs (the step is replayed: no host time)",
    )
    backward_host_ops: float = Field(
        default=2.0,
        ge=1.0,
        le=4.0,
        description="host ops the backward issues per forward op of a layer (the stack's "
        "execution.backward_ops; planner/costs/host.py): binds only where issuing the ops "
        "takes longer than running them",
    )
    cross_entropy: CrossEntropy = Field(
        default="fp32_copy",
        description="fp32_copy: the loss upcasts the logits and keeps an fp32 softmax for "
        "backward, the gradient written over it (Megatron's native vocab-parallel loss; 6 B "
        "per logit at bf16); in_place: an online-softmax kernel that keeps only the logits and "
        "writes their gradient into them (Transformer Engine parallel_cross_entropy, Megatron "
        "--cross-entropy-fusion-impl te; 2 B); fp32_log_softmax: PyTorch F.cross_entropy on an "
        "fp32 copy (torchtitan): the fp32 log-softmax is saved, and backward holds it with the "
        "dense fp32 NLL gradient and the fp32 input gradient (12 B); compiled: the same loss "
        "under torch.compile (torchtitan compile.components 'loss'): one fused kernel each way "
        "keeps the logits and a per-row log-sum-exp and writes a logits-precision gradient (4 B)",
    )

    fp8_recipe: Fp8Recipe = Field(
        default="delayed",
        description="with precision fp8, how the GEMM operands are scaled and cast "
        "(planner/costs/fp8.py): delayed (Transformer Engine amax history, one fused cast per "
        "operand), tensorwise (current per-tensor scaling: an amax pass, then the cast; torchao "
        "and TE Float8CurrentScaling), rowwise (per-row scales: each operand cast once per GEMM "
        "layout, via a bf16 transpose; torchao), rowwise_gw_hp (rowwise, the weight-gradient "
        "GEMM in bf16; torchao), mxfp8 (1 x 32 blocks with e8m0 scales; Blackwell), blockwise "
        "(1 x 128 activation tiles and 128 x 128 weight blocks, DeepSeek-V3's recipe; TE "
        "Float8BlockScaling)",
    )
    moe_dispatcher: MoeDispatcher = Field(
        default="alltoall",
        description="how an MoE layer sends tokens to their experts' ranks (planner/costs/"
        "comms.py dispatch_time_s): alltoall (one copy per routed expert, Megatron-Core's "
        "alltoall dispatcher), deepep (one copy per destination node over the scale-out "
        "fabric, forwarded to the node's experts over NVLink: DeepEP / HybridEP, DeepSeek-V3's "
        "dispatch kernels)",
    )
    fp8_dispatch: bool = Field(
        default=False,
        description="with precision fp8, the dispatch all-to-all sends FP8 activations with "
        "their scales and the combine sends bf16 (DeepSeek-V3 report section 3.3.2); off: both "
        "in the activation dtype",
    )
    optimizer_kernel: OptimizerKernel = Field(
        default="fused",
        description="how the AdamW update runs (planner/costs/elementwise.py "
        "adam_bytes_per_param): fused (one multi-tensor kernel: apex / Transformer Engine / "
        "DeepSpeed FusedAdam, torch fused=True), foreach (PyTorch's multi-tensor foreach ops, "
        "one pass each: about 2.5x the HBM traffic), per_tensor (a Python loop of single-tensor "
        "ops per parameter tensor: the foreach traffic plus one host-issued op per step and "
        "tensor, Composer DecoupledAdamW)",
    )
    optimizer_states: OptimizerStates = Field(
        default="fp32",
        description="what the AdamW state holds per parameter beside the 16-bit weights "
        "(planner/costs/memory.py optimizer_state_bytes): fp32 (fp32 master weight and two "
        "fp32 moments, 12 B; Megatron's distributed optimizer, DeepSpeed, FSDP); "
        "fp32_remainders (the master weight kept as the 16 low bits the bf16 weight lacks, "
        "10 B; Apex DistributedFusedAdam store_param_remainders, NeMo 1's default for bf16 O2, "
        "Transformer Engine FusedAdam under Megatron-Core --use-precision-aware-optimizer); "
        "bf16 (two bf16 moments and no master copy: the update writes the bf16 weights, 4 B; "
        "NeMo 1 distributed_fused_adam dtype bf16). The reduced forms need precision bf16 or "
        "fp8 and a stack with capabilities.reduced_optimizer_states",
    )
    overlap_tp_backward: bool = Field(
        default=True,
        description="with TP > 1 (and no overlap_tp_comm), the backward collective of each "
        "column-parallel linear's input gradient (all-reduce; reduce-scatter with sequence "
        "parallelism) runs asynchronously under that linear's weight-gradient GEMM, and with "
        "sequence parallelism the re-gather of its input under the data-gradient GEMM "
        "(Megatron-LM --async-tensor-model-parallel-allreduce, on by default since 2021-09; "
        "Megatron-Core LinearWithGradAccumulationAndAsyncCommunication; Transformer Engine "
        "Linear backward); false: every backward TP collective is on the critical path "
        "(planner/simulate/layers.py _tp_s)",
    )
    fp32_grad_accumulation_pass: bool = Field(
        default=False,
        description="with precision bf16, after every micro-batch's backward each parameter "
        "tensor's bf16 gradient is cast to fp32 and added into its fp32 gradient, one tensor "
        "at a time (DeepSpeed BF16_Optimizer.update_hp_grads, called by the pipeline engine's "
        "_exec_backward_pass since DeepSpeed 0.6.2, PR #1801, and by its backward otherwise): "
        "18 B per parameter and two kernels per parameter tensor each micro-batch, on the "
        "critical path (planner/costs/elementwise.py HP_GRAD_BYTES_PER_PARAM). Megatron-Core "
        "accumulates into fp32 main_grad inside the weight-gradient GEMM instead",
    )
    grad_accumulation_add: GradAccumulationAdd = Field(
        default="none",
        description="how each micro-batch's gradient joins the accumulated one when the "
        "weight-gradient GEMM does not accumulate in place (Megatron-Core's "
        "gradient_accumulation_fusion, from Megatron-LM 83b1e42f30, 2022-02, does): none; "
        "main_grad: Megatron-LM's local DDP hook ``param.main_grad.add_(param.grad.data)`` "
        "after every micro-batch (megatron/model/distributed.py at 3860e99526, 2021-08), "
        "reading the gradient (2 B) and the accumulator and writing it (2 x 2 B in fp16, 2 x 4 "
        "B in fp32, which bf16 requires); autograd: PyTorch's AccumulateGrad adds the new "
        "gradient into .grad in place from the second micro-batch on (the first is stored), "
        "2 + 2 x 2 B in fp16 / bf16 (DeepSpeed's engine under its FP16 optimizer); one kernel "
        "per parameter tensor, on the critical path (planner/costs/elementwise.py "
        "grad_pass_cost)",
    )
    vocab_multiple: int = Field(
        default=128,
        ge=1,
        le=4096,
        description="the vocabulary is padded up to a multiple of this times TP before the "
        "embedding table and the logits are built (Megatron-LM --make-vocab-size-divisible-by, "
        "default 128, megatron/training/tokenizer/tokenizer.py _vocab_size_with_padding); "
        "1: the tokenizer's size as it is (torchtitan, Hugging Face models). The padded rows "
        "cost logits FLOPs, loss bytes and embedding memory; an unpadded odd vocabulary runs "
        "the logits GEMM misaligned (planner/costs/alignment.py)",
    )
    linear_bias: bool = Field(
        default=False,
        description="the model code's linear layers carry bias vectors and its LayerNorms a "
        "bias (Megatron-LM's GPT of 2019-2022, BLOOM's Megatron-DeepSpeed): twice the "
        "parameter tensors each per-tensor collective (DeepSpeed 0.3 ZeRO-3) and per-tensor "
        "optimizer handles; the biases' FLOPs and bytes are too small to count",
    )
    optimizer_offload: bool = Field(
        default=False,
        description="ZeRO-Offload: the fp32 master weights and Adam moments live in host memory "
        "and the update runs on the CPU; each step copies the gradient shard to the host and the "
        "updated 16-bit weights back (DeepSpeed zero_optimization.offload_optimizer.device cpu, "
        "Megatron-DeepSpeed --cpu-optimizer; Ren et al. 2021); needs ZeRO stage 1-3, a host link "
        "and the cluster's host_memory_bandwidth_gb_per_s",
    )
    checkpoint_offload: bool = Field(
        default=False,
        description="with recompute full, the layer-input checkpoints go to host memory in "
        "forward and come back for the recompute in backward, each copy behind one layer's "
        "compute (DeepSpeed activation_checkpointing.cpu_checkpointing, Megatron-DeepSpeed "
        "--checkpoint-in-cpu); needs recompute full, pp 1 and a host link",
    )
    fp8_param_gather: bool = Field(
        default=False,
        description="ZeRO / FSDP all-gather the weights already cast to fp8 (1 B per "
        "parameter; torchao enable_fsdp_float8_all_gather, Megatron --fp8-param-gather); "
        "needs precision fp8 and fp8_recipe delayed, tensorwise or mxfp8",
    )

    fp8_weight_cache: bool = Field(
        default=True,
        description="with precision fp8 and 16-bit weights (no fp8_param_gather, ZeRO below "
        "3), the fp8 copy of every layer weight stays on the GPU from the step's first "
        "micro-batch on, with its transpose: 2 B per layer parameter (Transformer Engine "
        "Linear / GroupedLinear with is_first_microbatch, which Megatron-Core passes; set by "
        "the stack: on for megatron-core, the default stack, off where fp8 casts per use)",
    )

    @property
    def fp8_gather_conflict(self) -> str | None:
        """Why ``fp8_param_gather`` cannot apply (None: it can, or it is off). Checked once the
        stack has set the precision and recipe (:func:`planner.stacks.stack_training`)."""
        if not self.fp8_param_gather or fp8_gatherable(self.precision, self.fp8_recipe):
            return None
        return (
            f"fp8_param_gather needs precision fp8 with fp8_recipe one of "
            f"{', '.join(FP8_GATHER_RECIPES)}; got precision {self.precision!r}, fp8_recipe "
            f"{self.fp8_recipe!r} (rowwise scales differ per GEMM layout, so torchao gathers "
            "rowwise weights in bf16)"
        )

    @model_validator(mode="after")
    def _reduced_states_need_bf16(self) -> Training:
        if self.optimizer_states != "fp32" and self.precision not in ("bf16", "fp8"):
            raise ValueError(
                f"optimizer_states {self.optimizer_states!r} needs bf16 weights (precision bf16 "
                f"or fp8); got precision {self.precision!r} (valid: optimizer_states fp32)"
            )
        return self

    @model_validator(mode="after")
    def _recompute_options_need_their_level(self) -> Training:
        if self.recompute_modules is not None and self.recompute != "selective":
            raise ValueError(
                f"recompute_modules is set but recompute is {self.recompute!r}; "
                "recompute_modules applies to recompute: selective"
            )
        if self.recompute_fraction is not None and self.recompute != "full":
            raise ValueError(
                f"recompute_fraction is set but recompute is {self.recompute!r}; "
                "recompute_fraction applies to recompute: full"
            )
        return self

    @property
    def recompute_share(self) -> float:
        """The share of the layers whose forward re-runs in backward under full recompute
        (``recompute_fraction``, else all of them); 0 without full recompute."""
        if self.recompute != "full":
            return 0.0
        return 1.0 if self.recompute_fraction is None else self.recompute_fraction

    @property
    def selective_modules(self) -> tuple[str, ...]:
        """Submodules recomputed in backward: empty unless recompute is selective."""
        if self.recompute != "selective":
            return ()
        if self.recompute_modules is None:
            return DEFAULT_RECOMPUTE_MODULES
        return tuple(self.recompute_modules)

    @property
    def act_bytes(self) -> int:
        """Bytes of one activation element (fp32 training keeps everything in fp32)."""
        return 4 if self.precision == "fp32" else 2

    @property
    def work_precision(self) -> str:
        """Precision of non-GEMM tensor work (attention, logits): fp32 or bf16."""
        return "fp32" if self.precision == "fp32" else "bf16"

    @property
    def tokens_per_step(self) -> int:
        return self.seq_len * self.global_batch
