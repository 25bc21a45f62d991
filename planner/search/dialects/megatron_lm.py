"""Megatron-LM / Megatron-Core command-line arguments (``pretrain_gpt.py``).

Schedules Megatron-LM cannot run (zero bubble, V-shaped; planner/schedules/) are said so in a
comment naming the fork or framework that runs them. ZeRO-3 has no Megatron-LM optimizer flag:
a comment suggests Megatron-FSDP (``--use-megatron-fsdp --data-parallel-sharding-strategy
optim_grads_params``) or torch FSDP. Pipeline scatter/gather over the TP ranks (Megatron-LM
2021's default) has no flag left: ``--no-scatter-gather-tensors-in-pipeline`` was removed from
NVIDIA/Megatron-LM in commit 10e7b74597 (``megatron/training/arguments.py``), so it is stated.

>>> import planner
>>> model = planner.load_model("llama3.1-8b")
>>> layout = planner.Layout(tp=2, pp=1, dp=4, sequence_parallel=True, zero=1)
>>> training = planner.Training(seq_len=4096, global_batch=64, micro_batch=2)
>>> "--tensor-model-parallel-size 2" in megatron_args(model, 8, layout, training)
True
"""

from __future__ import annotations

from planner.schedules import schedule_of
from planner.search.dialects._common import (
    FP8_DISPATCH_REASON,
    MEGATRON_BF16_STATES,
    MEGATRON_VOCAB_MULTIPLE,
    NOT_EXPRESSED,
    by_hand_note,
    host_offload_reasons,
    megatron_full_recompute_args,
    not_expressed,
    pipeline_split,
)
from planner.specs.layout import Layout, Training
from planner.specs.model import ModelSpec


def _pipeline_split_args(model: ModelSpec, layout: Layout) -> list[str]:
    """Megatron-LM arguments for how the layers are split over (virtual) pipeline stages.

    Even splits use ``--num-layers-per-virtual-pipeline-stage``. Uneven ones, which the search
    allows (planner/search/space.py), count the embedding and the loss as one layer each
    (``--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split``) when
    that makes them even, else give the edge stages the smaller share with
    ``--decoder-first/last-pipeline-num-layers``, as planner/costs/pipeline.py models it
    (:func:`planner.search.dialects.pipeline_split`).
    """
    pp, vpp = layout.pp, layout.virtual_stages
    if pp == 1:
        return []
    split = pipeline_split(model, layout)
    if split.even:
        return [f"--num-layers-per-virtual-pipeline-stage {split.per_stage}"] if vpp > 1 else []
    out = [f"--virtual-pipeline-model-parallel-size {vpp}"] if vpp > 1 else []
    if split.account_for_embedding_and_loss:
        return out + [
            "--account-for-embedding-in-pipeline-split",
            "--account-for-loss-in-pipeline-split",
        ]
    if split.first_stage_layers is not None:
        return out + [
            f"--decoder-first-pipeline-num-layers {split.first_stage_layers}",
            f"--decoder-last-pipeline-num-layers {split.last_stage_layers}",
        ]
    if split.layout_string is not None:
        return [f"--pipeline-model-parallel-layout '{split.layout_string}'"]
    return out + [f"# {by_hand_note(model, layout)}"]


def _zero_and_precision_args(layout: Layout, training: Training) -> list[str]:
    """The optimizer sharding and the precision flags."""
    lines = ["--use-distributed-optimizer"] if layout.zero >= 1 else []
    if layout.dp_replicas > 1 and layout.zero < 3:  # hybrid sharding (Layout.dp_shard)
        lines.append(f"--num-distributed-optimizer-instances {layout.dp_replicas}")
    elif layout.dp_replicas > 1:
        lines.append(f"# dp_shard {layout.dp_shard} at ZeRO-3: {NOT_EXPRESSED}")
    if layout.zero == 2:
        lines.append(
            "# ZeRO-2: the distributed optimizer already reduce-scatters gradients "
            "into optimizer-state shards"
        )
    if layout.zero == 3:
        lines.append(
            "# ZeRO-3 (parameters sharded too) is not a Megatron-LM optimizer flag: use "
            "Megatron-FSDP (--use-megatron-fsdp --data-parallel-sharding-strategy "
            "optim_grads_params) or torch FSDP (torchtitan)"
        )
    if training.precision == "bf16":
        lines.append("--bf16")
    elif training.precision == "fp16":
        lines.append("--fp16")
    elif training.precision == "fp8":
        lines += ["--bf16", "--fp8-format hybrid"]
        # Megatron-Core Fp8Recipe (megatron/core/enums.py): delayed, tensorwise, mxfp8, blockwise
        if training.fp8_recipe in ("tensorwise", "mxfp8", "blockwise"):
            lines.append(f"--fp8-recipe {training.fp8_recipe}")
        elif training.fp8_recipe != "delayed":
            lines.append(
                f"# training.fp8_recipe = {training.fp8_recipe}: {NOT_EXPRESSED} (a torchao "
                "recipe; Megatron-Core's are delayed, tensorwise, mxfp8, blockwise)"
            )
        if training.fp8_param_gather:
            lines.append("--fp8-param-gather")
    if training.precision in ("bf16", "fp8") and training.grad_reduce_dtype == "fp32":
        lines.append("--accumulate-allreduce-grads-in-fp32")
    if training.optimizer_states != "fp32":
        # Transformer Engine FusedAdam keeps the master as remainders (TE >= 2.1), the nearest
        # Megatron has to bf16 states, which are stated not expressed
        lines.append("--use-precision-aware-optimizer")
    if training.optimizer_states == "bf16":
        lines += [f"# {n}" for n in not_expressed(layout, training, MEGATRON_BF16_STATES)]
    return lines


def megatron_args(model: ModelSpec, gpus: int, layout: Layout, training: Training) -> str:
    """Megatron-LM arguments, one per line; lines starting with '#' are comments.

    Use as ``pretrain_gpt.py $(grep -v '^#' megatron_args.txt) <model and data args>``.
    Recompute "full" maps to ``--recompute-granularity full --recompute-method uniform
    --recompute-num-layers 1`` (every layer checkpointed, as the planner models it), with a
    ``recompute_fraction`` to the block method's layers per model chunk.
    """
    lines = [
        f"# Megatron-LM arguments for {model.name} on {gpus} GPUs "
        f"(data parallel size {layout.dp} is implied by the world size)",
        "# architecture, tokenizer, data and optimizer arguments are not included",
        f"--tensor-model-parallel-size {layout.tp}",
        f"--pipeline-model-parallel-size {layout.pp}",
    ]
    sched = schedule_of(layout)
    if layout.pp > 1 and sched.megatron is None:
        # Megatron-LM would run these chunks interleaved: say what runs the schedule instead
        lines.append(f"# pipeline schedule {sched.name} ({sched.title}): {sched.megatron_note}")
        lines += [a for a in _pipeline_split_args(model, layout) if "virtual" not in a]
    else:
        lines += _pipeline_split_args(model, layout)
    lines.append(f"--context-parallel-size {layout.cp}")
    if model.moe is not None:
        lines.append(f"--expert-model-parallel-size {layout.ep}")
    if layout.sequence_parallel and layout.tp > 1:
        lines.append("--sequence-parallel")
    if training.recompute == "selective":
        lines.append("--recompute-granularity selective")
        if training.recompute_modules is not None:
            lines.append("--recompute-modules " + " ".join(training.recompute_modules))
    elif training.recompute == "full":
        lines += megatron_full_recompute_args(model, layout, training)
    lines += [
        f"--micro-batch-size {training.micro_batch}",
        f"--global-batch-size {training.global_batch}",
        f"--seq-length {training.seq_len}",
    ]
    lines += _zero_and_precision_args(layout, training)
    if training.vocab_multiple != MEGATRON_VOCAB_MULTIPLE:
        lines.append(f"--make-vocab-size-divisible-by {training.vocab_multiple}")
    if training.offload_layers:
        lines += ["--cpu-offloading", f"--cpu-offloading-num-layers {training.offload_layers}"]
    if training.cross_entropy == "in_place":
        lines += ["--cross-entropy-loss-fusion", "--cross-entropy-fusion-impl te"]
    if not training.dropout:
        lines += ["--attention-dropout 0.0", "--hidden-dropout 0.0"]
    if layout.overlap_tp_comm and layout.tp > 1:
        if not layout.sequence_parallel:
            lines.append("# --tp-comm-overlap requires --sequence-parallel in Megatron-LM")
        lines.append("--tp-comm-overlap")
    if layout.overlap_ep_comm and layout.ep > 1:
        lines += ["--overlap-moe-expert-parallel-comm", "--delay-wgrad-compute"]
    if training.moe_dispatcher == "deepep" and layout.ep > 1:
        lines += ["--moe-token-dispatcher-type flex", "--moe-flex-dispatcher-backend deepep"]
    if layout.pp_scatter_gather and layout.pp > 1:
        lines.append(
            f"# pipeline scatter/gather over the TP ranks: {NOT_EXPRESSED} (Megatron-LM 2021's "
            "default, off with --no-scatter-gather-tensors-in-pipeline; the argument was removed "
            "from Megatron-LM in 10e7b74597)"
        )
    offloads = not_expressed(
        layout,
        training,
        host_offload_reasons("Megatron-LM") | {"fp8_dispatch": FP8_DISPATCH_REASON},
    )
    lines += [f"# {n}" for n in offloads]
    if layout.overlap_dp_grad_reduce:
        lines.append("--overlap-grad-reduce")
        if layout.zero >= 1 and (layout.zero < 3 or layout.overlap_zero3_param_gather):
            lines.append("--overlap-param-gather")
    return "\n".join(lines) + "\n"


__all__ = ["megatron_args"]
