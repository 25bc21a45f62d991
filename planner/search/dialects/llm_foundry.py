"""An llm-foundry train YAML fragment (``composer scripts/train/train.py THIS_FILE``).

Keys read from mosaicml/llm-foundry at commit 8c8dd48f7216: ``llmfoundry/utils/config_utils.py``
(``TrainConfig``: max_seq_len, global_train_batch_size, device_train_microbatch_size,
precision, fsdp_config) and ``scripts/train/yamls/pretrain/mpt-7b.yaml`` (the ``fsdp_config``
a pretraining run sets); the ``fsdp_config`` keys are Composer's ``FSDPConfig``
(mosaicml/composer at 6405188805a0, ``composer/utils/parallelism.py``: sharding_strategy,
mixed_precision, activation_checkpointing, activation_checkpointing_reentrant,
activation_cpu_offload, limit_all_gathers, backward_prefetch), with the values
``composer/distributed/mosaic_parallelism.py`` accepts: sharding strategies NO_SHARD /
SHARD_GRAD_OP / FULL_SHARD / HYBRID_SHARD, mixed_precision DEFAULT (reduce in fp32) / PURE
(reduce in the training dtype) / FULL, backward_prefetch NONE / BACKWARD_PRE / BACKWARD_POST;
precision names from ``composer/core/precision.py`` (amp_bf16, amp_fp16, amp_fp8, fp32).

llm-foundry runs data parallelism over FSDP only: tensor (its ``tp_config`` shards the FFN
only), pipeline, context and expert parallelism are stated as not expressed, in comments.
"""

from __future__ import annotations

from typing import Any

import yaml

from planner.search.dialects._common import (
    NOT_EXPRESSED,
    fp32_states_reason,
    host_offload_reasons,
    not_expressed,
    vocab_padding_note,
)
from planner.specs.layout import Layout, Training
from planner.specs.model import ModelSpec

SHARDING = {0: "NO_SHARD", 2: "SHARD_GRAD_OP", 3: "FULL_SHARD"}  # ZeRO stage -> FSDP strategy
PRECISION = {"bf16": "amp_bf16", "fp16": "amp_fp16", "fp8": "amp_fp8", "fp32": "fp32"}
REASONS = {
    "tp": "llm-foundry's tp_config shards the FFN only, not Megatron tensor parallelism",
    "sequence_parallel": "no tensor parallelism",
    "pp": "no pipeline parallelism in llm-foundry",
    "vpp": "no pipeline parallelism",
    "schedule": "no pipeline parallelism",
    "cp": "no context parallelism in llm-foundry",
    "ep": "expert parallelism is the MoE FFN's moe_world_size (model config), not fsdp_config",
    "overlap_tp_comm": "no tensor parallelism",
    "overlap_ep_comm": "no expert parallelism",
    "moe_dispatcher": "no expert parallelism",
    "fp8_dispatch": "no expert parallelism",
    "pp_scatter_gather": "no pipeline parallelism",
    "offload_layers": "fsdp_config.activation_cpu_offload offloads every checkpoint, not a "
    "layer count",
    "cross_entropy": "the loss kernel is the model code's",
    "overlap_dp_grad_reduce": "FSDP always overlaps the gradient reduce-scatter with backward",
}


def _fsdp_config(layout: Layout, training: Training) -> tuple[dict[str, Any], list[str]]:
    notes: list[str] = []
    strategy = SHARDING.get(layout.zero)
    if strategy is None:  # ZeRO-1: shards optimizer states only
        notes.append(
            f"layout.zero = 1: {NOT_EXPRESSED} (FSDP has no optimizer-states-only sharding; "
            "NO_SHARD shown, SHARD_GRAD_OP also shards gradients)"
        )
        strategy = "NO_SHARD"
    if training.recompute == "selective":
        notes.append(
            f"training.recompute = selective: {NOT_EXPRESSED} (activation_checkpointing "
            "checkpoints whole blocks)"
        )
    if layout.dp_replicas > 1 and strategy == "FULL_SHARD":
        # HSDP (Layout.dp_shard): FSDP HYBRID_SHARD over a (replicate, shard) device mesh
        strategy = "HYBRID_SHARD"
        notes.append(
            f"layout.dp_shard = {layout.dp_shard}: HYBRID_SHARD shards within a node by "
            "default; set Composer's data_parallel_shard_degree to the group size"
        )
    elif layout.dp_replicas > 1:
        notes.append(
            f"layout.dp_shard = {layout.dp_shard}: {NOT_EXPRESSED} (FSDP's hybrid strategies "
            "are FULL_SHARD's and SHARD_GRAD_OP's _HYBRID_SHARD_ZERO2)"
        )
    prefetch = layout.overlap_zero3_param_gather or layout.zero < 3
    fsdp = {
        "sharding_strategy": strategy,
        "mixed_precision": "DEFAULT" if training.grad_reduce_dtype == "fp32" else "PURE",
        "activation_checkpointing": training.recompute == "full",
        "activation_checkpointing_reentrant": False,
        "activation_cpu_offload": False,
        "limit_all_gathers": True,
        "backward_prefetch": "BACKWARD_POST" if prefetch else "NONE",
    }
    return fsdp, notes


def llm_foundry_yaml(model: ModelSpec, gpus: int, layout: Layout, training: Training) -> str:
    """The batch sizes, sequence length, precision and ``fsdp_config`` as llm-foundry YAML;
    ``#`` lines say what it cannot express."""
    fsdp, notes = _fsdp_config(layout, training)
    notes = (
        not_expressed(
            layout,
            training,
            REASONS | host_offload_reasons("llm-foundry") | fp32_states_reason("Composer"),
        )
        + vocab_padding_note(model, layout, training, "llm-foundry")
        + notes
    )
    doc: dict[str, Any] = {
        "max_seq_len": training.seq_len,
        "global_train_batch_size": training.global_batch,
        "device_train_microbatch_size": training.micro_batch,
        "precision": PRECISION[training.precision],
        "fsdp_config": fsdp,
    }
    if training.recompute_fraction is not None:  # the first n blocks checkpointed
        n = max(1, round(training.recompute_fraction * model.layers))
        doc["model"] = {"activation_checkpointing_target": {"mptblock": f"first-{n}"}}
        if abs(n / model.layers - training.recompute_fraction) > 1e-9:
            notes.append(
                f"training.recompute_fraction = {training.recompute_fraction:g}: the first {n} "
                f"of {model.layers} blocks ({n / model.layers:.3g}; the planner costed "
                f"{training.recompute_fraction:g})"
            )
    header = [
        f"# llm-foundry train YAML fragment for {model.name} on {gpus} GPUs (FSDP over all "
        f"{gpus} ranks; data parallel size {layout.dp})",
        "# merge into a train YAML (model, tokenizer, loaders, optimizer are the YAML's)",
        *(f"# {n}" for n in notes),
    ]
    return "\n".join(header) + "\n" + yaml.safe_dump(doc, sort_keys=False)


__all__ = ["REASONS", "llm_foundry_yaml"]
