"""Memory-bound work of one layer: bytes moved through HBM by norms, activations, residual adds,
rotary embeddings, MoE token permutation and FP8 casts, and the kernel count that pays a fixed
launch cost. The backward pass moves about twice the forward bytes (it reads the saved input and
the incoming gradient, and writes the outgoing gradient).
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.costs import fp8
from planner.costs.blocks import mixer_costs
from planner.costs.blocks.channel import channel_costs
from planner.costs.flops import Gemm, as_layer
from planner.specs.blocks import LayerSpec
from planner.specs.layout import Layout, Training
from planner.specs.model import ModelSpec

ACT_BYTES = 2  # bf16/fp16 activations (4 when training in fp32: pass act_bytes)
BACKWARD_BYTES_FACTOR = 2.0


@dataclass(frozen=True, slots=True)
class ElementwiseWork:
    """Forward HBM bytes and kernel launches of the memory-bound ops of one layer."""

    fwd_bytes: float  # everything but the norms
    fwd_kernels: float
    norm_bytes: float = 0.0  # the two norms (LayerNorm or RMSNorm)
    mlp_act_bytes: float = 0.0  # the MLP activation function's share of fwd_bytes
    cast_fwd_bytes: float = 0.0  # the FP8 casts' share of fwd_bytes (planner/costs/fp8.py)
    cast_bwd_bytes: float = 0.0  # FP8 casts that run in backward only
    expert_bias_bytes: float = 0.0  # the biased experts' per-expert output-bias loop's share
    expert_bias_kernels: float = 0.0  # its launches (in fwd_kernels too)


def layer_elementwise(
    model: ModelSpec,
    layout: Layout,
    tokens: float,
    layer: LayerSpec | bool,
    gemms: tuple[Gemm, ...],
    fp8_recipe: str | None,
    dropout: bool = False,
    act_bytes: float = ACT_BYTES,
    unfused: tuple[str, ...] = (),
    fp8_weights_cast: bool = True,
) -> ElementwiseWork:
    """Memory-bound forward work of one layer on one GPU for ``tokens`` tokens.

    Norms and residual adds run on the full hidden state, replicated over TP unless sequence
    parallelism splits them (Korthikanti et al. 2022, section 4.2.2). ``unfused``: the chains
    that run as separate eager kernels (:func:`unfused_chain_work`). ``fp8_recipe`` (None: not
    fp8): the casts of the GEMM operands (:func:`planner.costs.fp8.cast_bytes`; the router
    stays in bf16); ``fp8_weights_cast`` False: the weights arrive already in fp8.
    """
    spec = as_layer(layer)
    h = model.hidden
    tp = layout.tp
    seq_split = tp if layout.sequence_parallel else 1
    blocks = 1 if spec.mlp.kind == "none" else 2
    # a norm (read + write) and a residual add (read 2, write 1) per block
    norm_bytes = tokens * h * act_bytes * 2 * blocks / seq_split
    hidden_bytes = tokens * h * act_bytes * 3 * blocks / seq_split
    kernels = 2.0 * blocks
    if dropout:
        hidden_bytes += blocks * tokens * h * 1 / seq_split  # 1 B masks (bias-dropout-add)
    mixer_work = mixer_costs(spec.mixer).elementwise(model, spec.mixer, tp, tokens, act_bytes)
    hidden_bytes += mixer_work.hidden_bytes
    kernels += mixer_work.kernels
    channel = channel_costs(spec.mlp).elementwise(model, spec.mlp, tokens, act_bytes)
    ffn_tokens, ffn = channel.ffn_tokens, channel.ffn
    if channel.kernels:
        hidden_bytes += channel.hidden_bytes
        kernels += channel.kernels
    if model.gated:
        mlp_bytes = 3 * ffn_tokens * ffn / tp * act_bytes  # read gate and up, write product
    else:
        mlp_bytes = 2 * ffn_tokens * ffn / tp * act_bytes
    kernels += 1
    rope_bytes = mixer_work.rope_bytes
    cast_f = cast_b = 0.0
    if fp8_recipe is not None:
        cast_gemms = [g for g in gemms if g.name != "router"]
        cast_f, cast_b = fp8.cast_bytes(
            fp8_recipe,
            inputs=sum(g.m * g.k * g.count for g in cast_gemms),
            weights=sum(g.k * g.n * g.count for g in cast_gemms),
            grad_outputs=sum(g.m * g.n * g.count for g in cast_gemms),
            weights_cast=fp8_weights_cast,
        )
        kernels += len(gemms)
    if unfused:
        extra, extra_kernels = unfused_chain_work(
            unfused,
            hidden_pass=tokens * h * act_bytes * blocks / seq_split,
            glu_pass=ffn_tokens * ffn / tp * act_bytes if model.gated else 0.0,
            rope_bytes=rope_bytes,
            dropout=dropout,
            blocks=blocks,
        )
        hidden_bytes += extra
        kernels += extra_kernels
    bias_bytes, bias_kernels = _expert_bias(model, spec, layout, unfused, ffn_tokens, act_bytes)
    return ElementwiseWork(
        hidden_bytes + mlp_bytes + rope_bytes + cast_f + bias_bytes,
        kernels + bias_kernels,
        norm_bytes,
        mlp_bytes,
        cast_f,
        cast_b,
        bias_bytes,
        bias_kernels,
    )


# Megatron-Core's TEGroupedMLP adds the second expert GEMM's bias outside the GEMM
# (``_apply_bias``, megatron/core/transformer/moe/experts.py, core_v0.15.0 to core_v0.17.0):
# ``torch.cat([t + b * p for each local expert]).to(dtype)``, with the router probability p in
# fp32. Per routed row and hidden element, forward: b * p writes fp32 (4 B); t + (b * p) reads t
# and the fp32 product and writes fp32 (act + 8 B); the concatenation reads and writes fp32 (8 B);
# the cast reads fp32 and writes act (4 + act B): 24 + 2 x act bytes. Two launches per local
# expert (multiply, add), plus the concatenation and the cast.
EXPERT_BIAS_FP32_BYTES = 24.0
EXPERT_BIAS_KERNELS_PER_EXPERT = 2.0
EXPERT_BIAS_KERNELS_FIXED = 2.0


def _expert_bias(
    model: ModelSpec,
    spec: LayerSpec,
    layout: Layout,
    unfused: tuple[str, ...],
    routed_rows: float,
    act_bytes: float,
) -> tuple[float, float]:
    """The expert-bias loop's (bytes, kernels) where the layer has biased experts and the
    stack adds their output bias outside the GEMM (``expert_bias`` in ``unfused``), else 0."""
    moe = model.moe
    if "expert_bias" not in unfused or spec.mlp.kind != "moe" or not (moe and moe.expert_bias):
        return 0.0, 0.0
    return expert_bias_loop_work(routed_rows, model.hidden, moe.experts / layout.ep, act_bytes)


def expert_bias_loop_work(
    routed_rows: float, hidden: int, local_experts: float, act_bytes: float = ACT_BYTES
) -> tuple[float, float]:
    """(forward HBM bytes, kernels) of adding the biased experts' output bias per local expert
    (Megatron-Core ``TEGroupedMLP._apply_bias``) to ``routed_rows`` routed token rows of width
    ``hidden`` on one GPU holding ``local_experts`` experts."""
    per_element = EXPERT_BIAS_FP32_BYTES + 2.0 * act_bytes
    kernels = EXPERT_BIAS_KERNELS_PER_EXPERT * local_experts + EXPERT_BIAS_KERNELS_FIXED
    return routed_rows * hidden * per_element, kernels


# Extra HBM passes (and kernels) of a chain run as separate eager kernels instead of one fused
# kernel, counted from the ops each runs (a pass: the tensor read or written once):
# norm: RMSNorm/LayerNorm decomposed (square, mean, rsqrt, scale, weight) reads/writes the
#   hidden state 7 times where the fused kernel does 2 (read x, write y): +5 passes, +3 kernels;
# glu: act(gate) then * up: 5 passes of the ffn width where the fused kernel does 3: +2, +1;
# rope: upcast to fp32, complex multiply, downcast (torchtitan apply_rotary_emb) moves q and k
#   10 times in bf16 units where a fused kernel does 2: +8 x the fused bytes / 2, +2 kernels;
# bias_dropout_add (only with dropout): dropout then add, 5 passes for the fused 3: +2, +1.
UNFUSED_PASSES = {"norm": (5.0, 3.0), "glu": (2.0, 1.0), "rope": (4.0, 2.0)}
UNFUSED_DROPOUT_ADD = (2.0, 1.0)


def unfused_chain_work(
    unfused: tuple[str, ...],
    hidden_pass: float,
    glu_pass: float,
    rope_bytes: float,
    dropout: bool,
    blocks: int,
) -> tuple[float, float]:
    """(extra forward HBM bytes, extra kernels) of the ``unfused`` chains of one layer.

    ``hidden_pass``: bytes of one pass over the layer's hidden states (all blocks);
    ``glu_pass``: one pass over the gated MLP's width (0 when not gated); ``rope_bytes``: the
    fused rotary embedding's bytes (0 without rotary); ``blocks``: norm/residual blocks.
    """
    extra = kernels = 0.0
    if "norm" in unfused:
        passes, k = UNFUSED_PASSES["norm"]
        extra += passes * hidden_pass
        kernels += k * blocks
    if "glu" in unfused and glu_pass:
        passes, k = UNFUSED_PASSES["glu"]
        extra += passes * glu_pass
        kernels += k
    if "rope" in unfused and rope_bytes:
        passes, k = UNFUSED_PASSES["rope"]
        extra += passes * rope_bytes
        kernels += k
    if "bias_dropout_add" in unfused and dropout:
        passes, k = UNFUSED_DROPOUT_ADD
        extra += passes * hidden_pass
        kernels += k * blocks
    return extra, kernels


def logits_loss_bytes(
    model: ModelSpec,
    layout: Layout,
    tokens: float,
    act_bytes: float = ACT_BYTES,
    cross_entropy: str = "fp32_copy",
    vocab: int | None = None,
) -> float:
    """HBM bytes of the softmax + cross-entropy over the TP-split vocabulary (``vocab`` rows,
    the stack's padded vocabulary; None: ``model.vocab``), forward and backward together.

    ``fp32_copy`` (Megatron's vocab-parallel cross entropy on an fp32 copy: Megatron-LM v2.5
    ``mpu/cross_entropy.py`` after ``output.float()``, Megatron-Core
    ``tensor_parallel/cross_entropy.py`` ``calculate_logits_max`` ``.float()``): forward upcasts
    (act + 4), reads for the row max (4), subtracts it in place (8), exponentiates in place (8),
    reads for the row sum (4) and divides in place into the saved softmax (8); backward scales
    the softmax in place (8) and casts the gradient back (4 + act): 2 x act + 48 B per logit.
    ``in_place`` (online softmax): forward reads the logits once, backward reads them and
    writes the gradient over them (3 x act B per logit). ``fp32_log_softmax`` (PyTorch F.cross_entropy on an fp32 copy):
    forward reads the logits, writes and reads the copy, writes the log-softmax (act + 12 B);
    backward writes the dense NLL gradient, reads it with the log-softmax, writes the input
    gradient, reads it and writes it at the logits' precision (act + 24 B). ``compiled``
    (that loss under torch.compile): forward reads the logits twice (row max, then the sum of
    exponentials), backward reads them once and writes the gradient (4 x act B per logit).
    ``loss_parallel`` (``fp32_log_softmax`` under TP, :func:`loss_kernel`): DTensor's
    decomposed log-softmax (upcast act + 4, row max 4, subtract 8, exp 8, sum 4, subtract 8 B)
    and its fused NLL + log-softmax backward (zeros 4, exp 8, add 12, multiply 8, downcast
    4 + act B): 2 x act + 72 B.
    """
    per_logit = {
        "in_place": 3.0 * act_bytes,
        "fp32_log_softmax": 2.0 * act_bytes + 36.0,
        "loss_parallel": 2.0 * act_bytes + 72.0,
        "compiled": 4.0 * act_bytes,
    }.get(loss_kernel(cross_entropy, layout.tp), 2.0 * act_bytes + 48.0)
    rows = model.vocab if vocab is None else vocab
    return tokens * rows / layout.tp * per_logit


def loss_kernel(cross_entropy: str, tp: int) -> str:
    """The loss code that runs for ``Training.cross_entropy`` at tensor-parallel size ``tp``.

    ``fp32_log_softmax`` with TP is ``loss_parallel``: torchtitan enables loss parallelism
    whenever TP is on (``parallel_dims.loss_parallel_enabled``: tp > 1 and not
    ``disable_loss_parallel``), and the vocabulary-sharded logits then go through PyTorch's
    ``torch/distributed/tensor/parallel/loss.py``: ``_log_softmax`` in separate ops (x - max,
    exp, sum, x - max - log-sum-exp: fp32 temporaries beside the upcast copy) and
    ``_nll_loss_and_log_softmax_backward``, ``(zeros_like(x) with -1 at the target +
    exp(x)) * grad`` (three fp32 temporaries beside the saved log-softmax). The compiled loss
    is traced through the same decomposition and fused by Inductor, so it stays ``compiled``.
    """
    if cross_entropy == "fp32_log_softmax" and tp > 1:
        return "loss_parallel"
    return cross_entropy


def adam_bytes_per_param(kernel: str = "fused", states: str = "fp32") -> float:
    """HBM bytes of one mixed-precision AdamW update per parameter, by ``kernel``.

    fused: reads fp32 master weight, fp32 gradient and two fp32 moments (16 B), writes master
    and moments (12 B) and the bf16 model copy (2 B), plus the gradient-norm read for clipping
    (4 B). foreach (PyTorch ``_multi_tensor_adam``: weight-decay mul, lerp of the first
    moment, mul + addcmul of the second, sqrt, div, add eps, addcdiv into the weight, each a
    pass over fp32 tensors): 8 + 12 + 8 + 12 + 8 + 8 + 8 + 16 = 80 B, plus the norm read (FSDP2
    keeps no separate bf16 copy). per_tensor (Composer ``DecoupledAdamW.adamw``, a loop over
    the parameters: mul for the decay, mul + add, mul + addcmul, sqrt, div, add, addcdiv):
    88 B plus the norm read. ``states`` (Training.optimizer_states, fused kernels only):
    fp32_remainders reads and writes 2 B of master instead of 4 (-4 B); bf16 reads the bf16
    weight instead of the master and 4 B of moments instead of 8, and writes 4 B of moments and
    no master (-14 B).
    """
    return ADAM_BYTES[kernel] - ADAM_STATE_SAVING[states]


# DeepSpeed BF16_Optimizer.update_hp_grads (deepspeed/runtime/bf16_optimizer.py, v0.6.2 to
# 2026 HEAD ``_update_hp_grad``): ``hp_grad.add_(lp.grad.to(fp32))`` for every parameter tensor
# after each micro-batch's backward: the cast reads the bf16 gradient (2 B) and writes an fp32
# temporary (4 B), the add reads it and the fp32 gradient (4 + 4 B) and writes the sum (4 B)
HP_GRAD_BYTES_PER_PARAM = 2 + 4 + 4 + 4 + 4
HP_GRAD_KERNELS_PER_TENSOR = 2  # the cast and the add


# the highest ZeRO stage the pass runs under (DeepSpeed engine.py
# ``_do_optimizer_sanity_check``: ZeRO-2 and -3 run their own optimizer, which reduces each
# micro-batch's gradients instead)
HP_GRAD_MAX_ZERO = 1


# the add of Training.grad_accumulation_add (main_grad: Megatron-LM's local DDP hook,
# ``main_grad.add_(grad)``; autograd: PyTorch's AccumulateGrad, ``grad += new``): one kernel per
# parameter tensor reading the new gradient (2 B) and the accumulator and writing it back
GRAD_ADD_KERNELS_PER_TENSOR = 1


def _bf16_optimizer_pass(training: Training) -> bool:
    """Whether ``training`` runs DeepSpeed BF16_Optimizer's upcast-and-add (it takes precedence
    over Training.grad_accumulation_add)."""
    return training.fp32_grad_accumulation_pass and training.precision == "bf16"


def grad_pass_cost(training: Training) -> tuple[float, float]:
    """(bytes per parameter, kernels per parameter tensor) of the training's per-micro-batch
    gradient-accumulation pass: DeepSpeed BF16_Optimizer's upcast-and-add (HP_GRAD_*), else
    Megatron-LM's main_grad add (an fp32 accumulator in bf16 and fp32, fp16 otherwise), else
    autograd's add into .grad (the weights' dtype), else none (0, 0)."""
    if _bf16_optimizer_pass(training):
        return float(HP_GRAD_BYTES_PER_PARAM), float(HP_GRAD_KERNELS_PER_TENSOR)
    kind = training.grad_accumulation_add
    if kind == "none":
        return 0.0, 0.0
    wide = training.precision == "fp32" or (kind == "main_grad" and training.precision == "bf16")
    acc = 4.0 if wide else 2.0
    return 2.0 + 2.0 * acc, float(GRAD_ADD_KERNELS_PER_TENSOR)


def grad_pass_share(training: Training, microbatches: float) -> float:
    """The share of a step's micro-batches that run :func:`grad_pass_cost`'s pass: every one,
    except autograd's add, which the first micro-batch skips (its gradient is stored)."""
    autograd = training.grad_accumulation_add == "autograd"
    if not autograd or _bf16_optimizer_pass(training) or microbatches <= 0:
        return 1.0
    return max(microbatches - 1.0, 0.0) / microbatches


def deferred_accumulation_applies(layout: Layout) -> bool:
    """Whether the unsharded gradients of a stage accumulate on the GPU over the step's
    micro-batches: ZeRO 2 / 3 with the gradient sync deferred to the last micro-batch
    (``Layout.zero3_reshard_after_forward`` false: torchtitan's FSDP2 under a pipeline)."""
    return layout.zero >= 2 and not layout.zero3_reshard_after_forward


def deferred_accumulation_cost(
    training: Training,
) -> tuple[tuple[float, float], tuple[float, float]]:
    """((bytes per parameter, kernels per tensor) of the first micro-batch's pass, of each later
    one's) under :func:`deferred_accumulation_applies`. FSDP2 (torch 2.13
    torch/distributed/fsdp/_fully_shard/_fsdp_param.py): with a reduce dtype wider than the
    gradients', ``to_accumulated_grad_if_needed`` casts the first micro-batch's gradient to it
    (read 2 B, write 4 B) and ``accumulate_unsharded_grad_if_needed`` adds each later one
    (read 2 + 4 B, write 4 B), one kernel per parameter each; with the same dtype autograd's
    AccumulateGrad adds into .grad from the second micro-batch on (read twice, write once)."""
    w = 4.0 if training.precision == "fp32" else 2.0
    if training.grad_reduce_dtype == "fp32" and w < 4.0:
        return (w + 4.0, 1.0), (w + 8.0, 1.0)
    return (0.0, 0.0), (3.0 * w, float(GRAD_ADD_KERNELS_PER_TENSOR))


def hp_grad_pass_trains(training: Training) -> bool:
    """Whether ``training`` runs a per-micro-batch gradient-accumulation pass
    (:func:`grad_pass_cost`: the stack's BF16_Optimizer in bf16, or Megatron-LM's main_grad
    add): it runs under every ZeRO stage up to ``HP_GRAD_MAX_ZERO``."""
    return grad_pass_cost(training)[0] > 0.0


def hp_grad_pass_applies(layout: Layout, training: Training) -> bool:
    """Whether the step runs the bf16 -> fp32 gradient-accumulation pass (the training's
    BF16_Optimizer, :func:`hp_grad_pass_trains`, with ZeRO stage 0 or 1)."""
    return hp_grad_pass_trains(training) and layout.zero <= HP_GRAD_MAX_ZERO


def hp_grad_pass_s(
    params: float,
    tensors: float,
    hbm_bytes_per_s: float,
    kernel_s: float,
    cost: tuple[float, float] = (HP_GRAD_BYTES_PER_PARAM, HP_GRAD_KERNELS_PER_TENSOR),
) -> float:
    """Seconds of one micro-batch's gradient-accumulation pass over ``params`` parameters in
    ``tensors`` tensors at ``cost`` (bytes per parameter, kernels per tensor;
    :func:`grad_pass_cost`): memory bound, plus the fixed cost ``kernel_s`` of each kernel."""
    per_param, kernels = cost
    return params * per_param / hbm_bytes_per_s + kernels * tensors * kernel_s


CLIP_NORM_READ_BYTES = 4  # the fp32 gradient read once more for the clipping norm
ADAM_BYTES = {
    "fused": 16 + 12 + 2 + CLIP_NORM_READ_BYTES,
    "foreach": 80 + CLIP_NORM_READ_BYTES,
    "per_tensor": 88 + CLIP_NORM_READ_BYTES,
}
ADAM_STATE_SAVING = {"fp32": 0, "fp32_remainders": 2 + 2, "bf16": 2 + 4 + 8}
# ops the host issues per parameter tensor (per_tensor) or per parameter group (foreach) per step
ADAM_OPS = {"fused": 1, "foreach": 8, "per_tensor": 9}
