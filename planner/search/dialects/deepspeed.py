"""A DeepSpeed config (``ds_config.json``) for a layout.

Keys read from deepspeedai/DeepSpeed at commit edaa72212672: ``deepspeed/runtime/constants.py``
(train_batch_size, train_micro_batch_size_per_gpu, gradient_accumulation_steps, ``bf16`` /
``fp16`` with ``enabled``, communication_data_type "fp32" | "fp16" | "bf16"),
``deepspeed/runtime/zero/config.py`` (``zero_optimization``: stage, overlap_comm, whose
backward hooks reduce during backward for stages 1-3 (``zero/stage_1_and_2.py``),
stage3_prefetch_bucket_size, 0 = no prefetch as ``partitioned_param_coordinator.py`` reads it),
``deepspeed/runtime/activation_checkpointing/config.py`` (``activation_checkpointing``:
partition_activations, contiguous_memory_optimization, cpu_checkpointing; the section
configures ``deepspeed.checkpointing``, which Megatron-DeepSpeed's
--deepspeed-activation-checkpointing uses). DeepSpeed checks train_batch_size = micro x
accumulation x data-parallel size (``config.py`` ``_batch_assertion``) and reads only the keys it
knows, so what the file cannot say goes in ``planner_notes``, a key DeepSpeed ignores.

A DeepSpeed config holds no model parallelism: run alone (a transformers model) it cannot say
TP / PP / CP / EP, so those are stated as not expressed; with Megatron-DeepSpeed they are its
launcher arguments (planner/search/dialects/megatron.py ``megatron_deepspeed_args``).
Gradient checkpointing of a transformers model is ``TrainingArguments(gradient_checkpointing=
True)`` / ``model.gradient_checkpointing_enable()`` (huggingface/transformers
``src/transformers/training_args.py`` at 00349ae87edd), not a DeepSpeed key.
"""

from __future__ import annotations

import json
from typing import Any

from planner.search.dialects._common import (
    NOT_EXPRESSED,
    fp32_states_reason,
    grad_accumulation_steps,
    host_offload_reasons,
    not_expressed,
    vocab_padding_note,
)
from planner.specs.layout import Layout, Training
from planner.specs.model import ModelSpec

# what a DeepSpeed config alone (no Megatron-DeepSpeed launcher) cannot say
STANDALONE_REASONS = {
    "tp": "DeepSpeed ZeRO on a transformers model has no tensor parallelism",
    "sequence_parallel": "no tensor parallelism, so no sequence parallelism",
    "pp": "pipeline stages need a DeepSpeed PipelineModule, not a config key",
    "vpp": "no pipeline parallelism",
    "schedule": "no pipeline parallelism",
    "cp": "no context parallelism in DeepSpeed ZeRO",
    "ep": "expert parallelism is DeepSpeed-MoE model code, not a config key",
    "overlap_tp_comm": "no tensor parallelism",
    "overlap_ep_comm": "no expert parallelism",
    "moe_dispatcher": "no expert parallelism",
    "fp8_dispatch": "no expert parallelism",
    "pp_scatter_gather": "no pipeline parallelism",
    "dp_shard": "the planner knows no DeepSpeed key for hybrid sharding of every stage (MiCS "
    "mics_shard_size covers ZeRO-3 only)",
    "offload_layers": "activation offload is not a DeepSpeed key (offload_optimizer / "
    "offload_param move optimizer states / parameters)",
    "cross_entropy": "the loss kernel is the model code's",
    # transformers' gradient checkpointing is torch.utils.checkpoint: cpu_checkpointing belongs to
    # DeepSpeed's own activation-checkpointing API, which only Megatron-DeepSpeed calls
    "checkpoint_offload": host_offload_reasons("DeepSpeed (transformers)")["checkpoint_offload"],
    **fp32_states_reason("DeepSpeed"),
}


def _zero_section(layout: Layout, training: Training) -> tuple[dict[str, Any], list[str]]:
    """``zero_optimization`` (with the optimizer offload) and what it cannot say about the
    layout's overlaps."""
    zero: dict[str, Any] = {"stage": layout.zero}
    if training.optimizer_offload:  # deepspeed/runtime/zero/offload_config.py
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    notes: list[str] = []
    if layout.zero >= 1:
        zero["overlap_comm"] = layout.overlap_dp_grad_reduce
    if layout.overlap_dp_grad_reduce and layout.zero == 0 and layout.dp > 1:
        notes.append(
            f"layout.overlap_dp_grad_reduce = True with ZeRO-0: {NOT_EXPRESSED} (without a "
            "ZeRO optimizer DeepSpeed all-reduces the gradients after backward, "
            "deepspeed/runtime/engine.py allreduce_gradients; overlap_comm is a ZeRO key)"
        )
    if layout.zero == 3 and not layout.overlap_zero3_param_gather:
        zero["stage3_prefetch_bucket_size"] = 0  # no parameter prefetch
    return zero, notes


def _recompute_notes(training: Training, with_megatron: bool) -> list[str]:
    if with_megatron or training.recompute == "none":
        return []
    if training.recompute == "full":
        out = [
            "training.recompute = full: set outside this file, transformers "
            "TrainingArguments(gradient_checkpointing=True) or model.gradient_checkpointing_enable()"
        ]
        if training.recompute_fraction is not None:
            out.append(
                f"training.recompute_fraction = {training.recompute_fraction:g}: {NOT_EXPRESSED} "
                "(transformers checkpoints every decoder layer)"
            )
        return out
    return [
        f"training.recompute = selective: {NOT_EXPRESSED} (transformers checkpoints whole "
        "decoder layers only)"
    ]


def deepspeed_json(
    model: ModelSpec,
    gpus: int,
    layout: Layout,
    training: Training,
    *,
    with_megatron: bool = False,
) -> str:
    """The DeepSpeed config as JSON text. ``with_megatron``: launched by Megatron-DeepSpeed,
    whose arguments carry the model parallelism and recompute (and which reads the
    ``activation_checkpointing`` section)."""
    accumulation = grad_accumulation_steps(layout, training)
    zero, notes = _zero_section(layout, training)
    notes = [
        f"DeepSpeed config for {model.name} on {gpus} GPUs (data parallel size {layout.dp})",
        *notes,
    ]
    if with_megatron:
        notes.append(
            "tensor / pipeline / expert parallel sizes, sequence parallelism, recompute and "
            "fp8: megatron_deepspeed_args.txt"
        )
    else:
        notes += not_expressed(layout, training, STANDALONE_REASONS)
        notes += vocab_padding_note(model, layout, training, "a Hugging Face model under DeepSpeed")
        if training.precision == "fp8":
            notes.append(
                f"training.precision = fp8: {NOT_EXPRESSED} (no FP8 GEMM key in a DeepSpeed "
                "config; bf16 shown)"
            )
    notes += _recompute_notes(training, with_megatron)
    cfg: dict[str, Any] = {
        "planner_notes": notes,
        "train_batch_size": training.global_batch,
        "train_micro_batch_size_per_gpu": training.micro_batch,
        "gradient_accumulation_steps": accumulation,
        "bf16": {"enabled": training.precision in ("bf16", "fp8")},
        "fp16": {"enabled": training.precision == "fp16"},
        "communication_data_type": training.grad_reduce_dtype,
        "zero_optimization": zero,
    }
    if with_megatron and training.recompute == "full":
        cfg["activation_checkpointing"] = {
            "partition_activations": False,
            "contiguous_memory_optimization": False,
            "cpu_checkpointing": training.checkpoint_offload,
        }
    return json.dumps(cfg, indent=2) + "\n"


__all__ = ["STANDALONE_REASONS", "deepspeed_json"]
