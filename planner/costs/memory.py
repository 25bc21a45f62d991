"""Memory per GPU: weights, gradients, optimizer states, activations, logits, overhead (bytes).

Mixed-precision Adam (Rajbhandari et al. 2020, ZeRO, section 3.1; Megatron-LM distributed
optimizer): per parameter 2 B compute-dtype weights, 4 B fp32 main gradient, 12 B fp32 master
weight and two moments (10 B with the master kept as remainders, 4 B with bf16 moments and no
master: ``Training.optimizer_states``); ZeRO-1 shards the 12 B, ZeRO-2 also the gradient, ZeRO-3 everything,
over the DP x CP group. The gradient buffer is fp32 (4 B) or bf16 (2 B) as configured
(Megatron ``--grad-reduce-in-bf16``, NeMo ``grad_reduce_in_fp32``); fp16 training keeps fp16
gradients. With FP8 (Transformer Engine) GEMM inputs are saved for backward in fp8 (1 B).

Activations follow Korthikanti et al. 2022 (Reducing Activation Recomputation in Large
Transformer Models), Table 2: per layer sbh(34 + 5as/h) bytes without parallelism,
sbh(10 + 24/t + 5as/(ht)) with TP, sbh(34/t + 5as/(ht)) with TP+SP, sbh(34/t) with selective
recompute and 2sbh/t per layer with full recompute (with ``Training.recompute_fraction``, the
mean over a chunk of whose layers that share keeps 2sbh/t, the rest all they would without
recompute: Megatron's block method). ``layer_activation_bytes`` generalises the
terms to GQA, gated MLPs, MoE, MLA, no dropout and fused (flash) attention; with MHA, gelu, 4h
MLP, dropout and unfused attention it reproduces the table exactly (tested).
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.costs import elementwise
from planner.costs.blocks import mixer_costs
from planner.costs.blocks.channel import channel_costs
from planner.costs.flops import as_layer, padded_vocab
from planner.schedules import SCHEDULES, Schedule, default_schedule_name
from planner.specs.blocks import (
    LayerSpec,
)
from planner.specs.layout import Layout, Training
from planner.specs.model import ModelSpec

GIB = 1024**3
WEIGHT_BYTES = 2
OPTIMIZER_BYTES = 12
# Allocator fragmentation and framework workspaces (NCCL buffers, cuBLAS workspace): an
# assumption of 1 GiB plus 10% of activations, documented in docs/model.md.
OVERHEAD_FIXED_BYTES = 1.0 * GIB
OVERHEAD_ACTIVATION_FRACTION = 0.10


def korthikanti_activation_bytes(
    s: int, b: int, h: int, a: int, t: int = 1, sp: bool = False, recompute: str = "none"
) -> float:
    """Korthikanti et al. 2022, Table 2: activation bytes of one GPT layer (fp16, dropout)."""
    sbh = s * b * h
    if recompute == "full":
        return 2.0 * sbh / (t if sp else 1)
    attn_core = 0.0 if recompute == "selective" else 5.0 * a * s / (h * t)
    if sp:
        return sbh * (34.0 / t + attn_core)
    return sbh * (10.0 + 24.0 / t + attn_core)


# AdamW state per parameter beside the 16-bit weights, bytes (Training.optimizer_states):
# fp32 master 4 + moments 8; the master as its 16 low bits (Apex DistributedFusedAdam
# store_param_remainders: the bf16 weight holds the high half) 2 + 8; bf16 moments, no master 4
OPTIMIZER_STATE_BYTES = {"fp32": OPTIMIZER_BYTES, "fp32_remainders": 10, "bf16": 4}


def optimizer_state_bytes(training: Training) -> float:
    """Bytes per parameter of the AdamW state: fp32 training keeps only the two fp32 moments
    (the weights are the master copy), else :data:`OPTIMIZER_STATE_BYTES`."""
    if training.precision == "fp32":
        return 8.0
    return float(OPTIMIZER_STATE_BYTES[training.optimizer_states])


def grad_bytes(training: Training) -> float:
    """Bytes per parameter of the gradient buffer (and of its DP reduction)."""
    if training.precision == "fp32":
        return 4.0
    if training.precision == "fp16" or training.grad_reduce_dtype == "bf16":
        return 2.0
    return 4.0


def without_recompute(training: Training) -> Training:
    """``training`` with no recompute (no level, share or modules): what a layer keeps for
    backward without it."""
    update = {"recompute": "none", "recompute_fraction": None, "recompute_modules": None}
    return training.model_copy(update=update)


def layer_activation_bytes(
    model: ModelSpec,
    layout: Layout,
    training: Training,
    layer: LayerSpec | bool,
    flash_attention: bool | None = None,
    dropout: bool | None = None,
) -> float:
    """Bytes one layer keeps for backward, for one micro-batch on one GPU.

    Replicated terms (norm inputs, GEMM inputs of the TP region, dropout masks) are split by
    TP only with sequence parallelism; terms inside the TP region always are. ``layer``: a
    LayerSpec, or True / False for the flat model's MoE / dense attention layer.
    """
    spec = as_layer(layer)
    mixer, mlp_spec = spec.mixer, spec.mlp
    if flash_attention is None:
        flash_attention = training.attention_kernel != "unfused"
    if dropout is None:
        dropout = training.dropout
    gin = 1.0 if training.precision == "fp8" else 2.0  # bytes of a saved GEMM input
    t = layout.tp
    s = training.seq_len / layout.cp
    b = training.micro_batch
    h = model.hidden
    tok = s * b
    seq_split = t if layout.sequence_parallel else 1
    scale = training.act_bytes / 2.0  # the terms below are in 2-byte units
    if training.recompute == "full":
        checkpoint = 2.0 * tok * h / seq_split * scale
        share = training.recompute_share
        if share >= 1.0:
            return checkpoint
        # recompute_fraction: the other layers keep all they would without recompute
        kept = without_recompute(training)
        rest = layer_activation_bytes(model, layout, kept, layer, flash_attention, dropout)
        return share * checkpoint + (1.0 - share) * rest
    has_mlp = mlp_spec.kind != "none"
    n_blocks = 2 if has_mlp else 1
    modules = set(training.selective_modules)
    if "alternate_mm" in modules and mixer.kind == "attention" and mlp_spec.kind == "dense":
        return alternate_mm_activation_bytes(model, spec, tok, t, seq_split) * scale
    if "alternate_mm" in modules:  # other layer kinds: the policy keeps what core_attn keeps
        modules = (modules - {"alternate_mm"}) | {"core_attn"}
    # replicated (outside the TP region): norm inputs, mixer and MLP inputs, dropout masks;
    # layernorm recompute discards the norm outputs (the block inputs) and re-runs the norms
    block_in = 0.0 if "layernorm" in modules else gin * tok * h
    replicated = n_blocks * (2 * tok * h + block_in + (tok * h if dropout else 0))
    # the mixer's own (planner.costs.blocks): inside the TP region, and MLA's latents outside
    kept = mixer_costs(mixer).activations(
        model, mixer, s, b, gin, modules, dropout, flash_attention
    )
    replicated += kept.replicated
    mlp, router = channel_costs(mlp_spec).activations(model, mlp_spec, tok, gin, modules)
    replicated += router
    sharded = kept.tp_region + kept.out_proj_input + mlp + kept.core
    return (replicated / seq_split + sharded / t) * scale


def alternate_mm_activation_bytes(
    model: ModelSpec, spec: LayerSpec, tok: float, tp: int, seq_split: int
) -> float:
    """Saved bytes (at 2 bytes an element) of one attention + dense-MLP layer under torchtitan's
    op-level selective checkpointing (:mod:`planner.costs.recompute`, ``alternate_mm``): the
    block input and the w2 output (replicated, split with sequence parallelism), and inside
    the TP region the q, v and w1 matmul outputs, the SDPA output and its log-sum-exp."""
    ffn = getattr(spec.mlp, "ffn_hidden", None) or model.ffn_hidden
    replicated = 2.0 * 2.0 * tok * model.hidden  # 2 tensors of 2 bytes an element
    sharded = 2.0 * tok * (model.q_dim + model.kv_dim + ffn + model.v_dim + 2.0 * model.heads)
    return replicated / seq_split + sharded / tp


def layers_in_flight(
    layers_per_stage: float,
    pp: int,
    vpp: int,
    microbatches: int,
    schedule: Schedule | None = None,
    rank: int = 0,
) -> float:
    """Layers' worth of micro-batch activations pipeline ``rank`` holds at its peak.

    ``schedule`` (default: interleaved iff vpp > 1) counts the micro-batch chunks in flight
    (planner/schedules/): 1F1B holds min(m, pp) micro-batches on the first rank (Narayanan et
    al. 2021, section 2.2.1); interleaved with v chunks, Megatron warms up (pp-1)*2 + (v-1)*pp
    chunks on rank 0, i.e. pp*(v+1)-1 chunks of L/(pp v) layers in flight; ZB-H1 p and ZB-H2
    2p - 1 micro-batches on every rank (Qi et al. 2023, Table 1); ZB-V 2p chunks of L/(2p)
    layers; DualPipe-V 2p + 1.
    """
    if pp == 1:
        return layers_per_stage
    sched = schedule or SCHEDULES[default_schedule_name(vpp)]
    chunks = sched.peak_chunks(rank, pp, vpp, microbatches)
    if vpp <= 1:
        return layers_per_stage * chunks
    return layers_per_stage / vpp * chunks


@dataclass(frozen=True, slots=True)
class StateBytes:
    """Weights, gradients and optimizer state of one GPU, bytes."""

    weights: float
    grads: float
    optimizer: float


def fp8_weight_cache_bytes(training: Training) -> float:
    """Bytes per layer parameter of the fp8 weight copies kept across micro-batches: 2 (the fp8
    weight and its fp8 transpose) with ``Training.fp8_weight_cache`` at precision fp8 when the
    weights are 16-bit, else 0 (ZeRO-3 aside, :func:`state_bytes`).

    Transformer Engine's Linear and GroupedLinear cast a weight on the micro-batch flagged
    ``is_first_microbatch`` and keep the result in ``_fp8_workspaces`` for the others
    (transformer_engine/pytorch/module/linear.py, ``quantize_weight`` in module/base.py, TE
    v2.9); Megatron-Core passes the flag unless ``--disable-parameter-transpose-cache``
    (megatron/core/extensions/transformer_engine.py). The copy holds the row-wise data and the
    column-wise one (a transpose on Hopper, whose fp8 GEMMs take only the TN layout; the
    second block-scaled layout with MXFP8), 1 B each; with tensor scaling on Blackwell, which
    runs every fp8 GEMM layout (``nvte_is_non_tn_fp8_gemm_supported``), TE keeps no transpose
    and 2 B over-counts by 1. With ``fp8_param_gather`` the weights themselves are fp8
    (``Float8Tensor`` parameters, 1 B plus the transpose: the 2 B :data:`WEIGHT_BYTES`
    counts) and nothing is cached beside them."""
    if training.precision != "fp8" or training.fp8_param_gather or not training.fp8_weight_cache:
        return 0.0
    return 2.0


def state_bytes(
    dense_params: float,
    expert_params: float,
    layout: Layout,
    training: Training,
    gathered_params: float = 0.0,
    unreduced_grad_params: float = 0.0,
    layer_params: float = 0.0,
) -> StateBytes:
    """Model state of one GPU holding ``dense_params`` (sharded over DP x CP by ZeRO) and
    ``expert_params`` (sharded over the expert data-parallel group dp*cp/ep).

    ``gathered_params``: ZeRO-3 working set of unsharded parameters (prefetched layers);
    ``unreduced_grad_params``: parameters whose unsharded gradients wait for a deferred
    reduce-scatter (FSDP without gradient sync between micro-batches), accumulated in the
    reduction dtype (:func:`grad_bytes`): FSDP2 upcasts the unsharded gradient to its
    ``reduce_dtype`` before accumulating (``FSDPParam.to_accumulated_grad_if_needed``,
    torch/distributed/fsdp/_fully_shard/_fsdp_param.py), fp32 under torchtitan's default
    ``mixed_precision_reduce``. ``layer_params``: the transformer layers' parameters on this
    GPU (no embedding or head), whose fp8 copies :func:`fp8_weight_cache_bytes` counts below
    ZeRO-3 (TE keeps no copy of a weight FSDP re-gathers).
    """
    shard = layout.zero_shard  # DP x CP, or a hybrid-sharding group (Layout.dp_shard)
    expert_shard = layout.expert_dp
    fp32 = training.precision == "fp32"
    w_b = 4 if fp32 else WEIGHT_BYTES  # fp32 training: the weights are the master copy
    o_b = optimizer_state_bytes(training)
    g_b = grad_bytes(training)

    # optimizer offload (ZeRO-Offload): master weights and moments live on the host, and from
    # ZeRO-2 on so does the gradient shard (DeepSpeed stage3.py pins grad_partitions_flat_buffer
    # in host memory; stage_1_and_2.py accumulates into the fp32 partition's .grad on the CPU);
    # ZeRO-1 still holds every gradient on the GPU until the reduction
    offload = training.optimizer_offload

    def split(params: float, n: int) -> tuple[float, float, float]:
        z = layout.zero
        w = params * w_b / (n if z >= 3 else 1)
        g = 0.0 if offload and z >= 2 else params * g_b / (n if z >= 2 else 1)
        o = 0.0 if offload else params * o_b / (n if z >= 1 else 1)
        return w, g, o

    wd, gd, od = split(dense_params, shard)
    we, ge, oe = split(expert_params, expert_shard)
    gathered = gathered_params * param_gather_bytes(training) if layout.zero >= 3 else 0.0
    unreduced = unreduced_grad_params * g_b if layout.zero >= 2 else 0.0
    cache = layer_params * fp8_weight_cache_bytes(training) if layout.zero < 3 else 0.0
    return StateBytes(wd + we + gathered + cache, gd + ge + unreduced, od + oe)


def param_gather_bytes(training: Training) -> float:
    """Bytes per parameter of a ZeRO / FSDP weight all-gather and of the gathered copy: 1 with
    ``fp8_param_gather`` (cast on the shard, gathered in fp8), else the weights' 2 B."""
    return 1.0 if training.fp8_param_gather else float(WEIGHT_BYTES)


def logits_bytes(model: ModelSpec, layout: Layout, training: Training) -> float:
    """Logits of one micro-batch on the last stage at the loss (over the stack's padded
    vocabulary, :func:`planner.costs.flops.padded_vocab`), bytes.

    ``fp32_copy``: the logits (bf16, or fp32) and the fp32 softmax the loss keeps for
    backward, into which it writes the gradient (Megatron-Core's native vocab-parallel
    cross-entropy: ``.float()``, then max, exp and divide in place). ``in_place``: an
    online-softmax loss (Milakov and Gimelshein 2018) keeps the logits plus a max and a sum per
    row and writes the gradient into the logits in backward (Transformer Engine
    ``parallel_cross_entropy``). ``fp32_log_softmax``: PyTorch ``F.cross_entropy`` on an fp32
    copy (torchtitan's loss): forward holds the logits, the copy and the fp32 log-softmax it
    saves (act + 8 B); backward holds that log-softmax, the dense fp32 gradient NLL returns and
    the fp32 input gradient (12 B; torchtitan deletes the logits before backward), the larger
    of the two being the peak. ``compiled``: that loss under ``torch.compile`` (torchtitan
    ``build_cross_entropy_loss`` when ``compile.components`` holds ``"loss"``, the default since
    torchtitan #1608, 2025-08-20; compiled with the model since #1033, 2025-04-02): Inductor
    fuses the upcast, log-softmax and NLL into one reduction kernel, saves the logits and one
    log-sum-exp per row (the min-cut partitioner recomputes the pointwise softmax), and
    backward writes the gradient at the logits' precision: logits + gradient, 2 x act B.
    ``loss_parallel`` (``fp32_log_softmax`` under TP, :func:`elementwise.loss_kernel`):
    forward holds the logits, the fp32 copy, ``x - max`` and the log-softmax (act + 12 B);
    backward the saved log-softmax, the -1-at-target tensor, ``exp`` of the log-softmax and
    their sum (16 B).
    """
    tokens = training.micro_batch * training.seq_len / layout.cp
    kernel = elementwise.loss_kernel(training.cross_entropy, layout.tp)
    per_element = LOSS_BYTES_PER_LOGIT[kernel](training.act_bytes)
    return tokens * padded_vocab(model, layout, training) / layout.tp * per_element


def mtp_activation_bytes(
    model: ModelSpec, layout: Layout, training: Training, layer: LayerSpec
) -> float:
    """Bytes the multi-token-prediction modules keep for backward for one micro-batch on the
    last rank, beside the main head's logits: each module's transformer layer (``layer``, the
    model's last kind, under the step's recompute: Megatron-Core checkpoints an MTP layer as
    its blocks, ``MultiTokenPredictionLayer._checkpointed_forward``), the concatenated input of
    its 2h -> h projection and the two norm inputs that make it (DeepSeek-V3, arXiv
    2412.19437, section 2.2). Each module's head also holds its logits until backward
    (Megatron-Core computes its loss in the same forward as the main one: ``process_mtp_loss``,
    megatron/core/transformer/multi_token_prediction.py): :func:`logits_bytes` per module, which
    the caller adds to the main head's."""
    if not model.mtp_layers:
        return 0.0
    if training.recompute_fraction is not None:  # Megatron's block method skips the MTP layers
        training = without_recompute(training)
    per = layer_activation_bytes(model, layout, training, layer)
    if training.recompute != "full":
        tok = training.micro_batch * training.seq_len / layout.cp
        seq_split = layout.tp if layout.sequence_parallel else 1
        gin = 1.0 if training.precision == "fp8" else 2.0
        per += tok * model.hidden * (2.0 * gin + 4.0) / seq_split * training.act_bytes / 2.0
    return model.mtp_layers * per


# bytes per logit the loss holds at its peak, by cross-entropy kernel, given the activation bytes
LOSS_BYTES_PER_LOGIT = {
    "fp32_copy": lambda act: act + 4.0,
    "in_place": lambda act: act,
    "fp32_log_softmax": lambda act: max(act + 8.0, 12.0),
    "loss_parallel": lambda act: max(act + 12.0, 16.0),
    "compiled": lambda act: 2.0 * act,
}
