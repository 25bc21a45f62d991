"""Launch files of the Megatron family beyond Megatron-LM's own arguments.

* :func:`nemo_overrides`: NeMo 2 recipe overrides, one ``path=value`` per line, for
  ``nemo llm pretrain --factory RECIPE $(grep -v '^#' nemo_overrides.txt)`` (in Python each line
  is ``recipe.<path> = <value>``). Paths read from NVIDIA/NeMo at commit 8cfedd720346:
  ``nemo/lightning/pytorch/strategies/megatron_strategy.py`` (``MegatronStrategy``:
  tensor_model_parallel_size, pipeline_model_parallel_size,
  virtual_pipeline_model_parallel_size, context_parallel_size, sequence_parallel,
  expert_model_parallel_size, num_layers_in_first/last_pipeline_stage,
  account_for_embedding/loss_in_pipeline_split, ddp, fsdp),
  ``nemo/collections/llm/recipes/llama3_8b.py`` (trainer.strategy.ddp overlap_grad_reduce /
  overlap_param_gather, data.micro_batch_size / global_batch_size / seq_length,
  trainer.plugins = bf16_mixed()), ``scripts/performance/helpers.py`` (model.config.recompute_*,
  cpu_offloading*, cross_entropy_fusion_impl, trainer.strategy.fsdp = "megatron" with
  ddp.data_parallel_sharding_strategy, trainer.plugins.grad_reduce_in_fp32,
  optim.config.use_distributed_optimizer), ``nemo/collections/llm/recipes/precision/
  mixed_precision.py`` (the ``bf16_mixed`` / ``fp16_mixed`` NeMo-Run factories, ``fp8 =
  'hybrid'``), ``nemo/lightning/pytorch/callbacks/megatron_comm_overlap.py`` (TP overlap is a
  callback, so it is a comment). Values are parsed as Python literals (NeMo-Run
  ``nemo_run/cli/cli_parser.py`` at 0c4912719; a bare word is a string).
* :func:`megatron_bridge_overrides`: Megatron-Bridge ``ConfigContainer`` Hydra-style overrides
  (``scripts/training/train.sh ... KEY=VALUE``; ``parse_hydra_overrides``). Paths read from
  NVIDIA-NeMo/Megatron-Bridge at commit 067f987df03b: ``src/megatron/bridge/training/config.py``
  (ConfigContainer: train, model, ddp, optimizer, dataset, comm_overlap, mixed_precision),
  ``scripts/translate_mlm_to_bridge.py`` (each Megatron-LM argument's path: model.*_size,
  model.sequence_parallel, train.micro/global_batch_size, dataset.seq_length + model.seq_length,
  model.recompute_*, model.*_dropout, ddp.use_distributed_optimizer, ddp.overlap_*,
  ddp.grad_reduce_in_fp32, model.account_for_*), ``scripts/performance/utils/overrides.py``
  (ddp.use_megatron_fsdp with data_parallel_sharding_strategy optim_grads_params,
  model.cpu_offloading*, comm_overlap.overlap_moe_expert_parallel_comm / delay_wgrad_compute),
  ``src/megatron/bridge/training/comm_overlap.py`` (CommOverlapConfig.tp_comm_overlap) and
  ``mixed_precision.py`` (registered recipes bf16_mixed, fp16_mixed,
  bf16_with_fp8_delayed_scaling_mixed).
* :func:`megatron_deepspeed_args`: Megatron-DeepSpeed ``pretrain_gpt.py`` arguments, read from
  deepspeedai/Megatron-DeepSpeed ``megatron/arguments.py`` at commit 4efb479d5317
  (--tensor/pipeline-model-parallel-size, --no-pipeline-parallel, --moe-expert-parallel-size,
  --sequence-parallel, --recompute-*, --deepspeed-activation-checkpointing, --zero-stage,
  --fp8-hybrid with --transformer-impl transformer_engine; --deepspeed and --deepspeed_config
  come from DeepSpeed's ``add_config_arguments``). It launches with ``ds_config.json``
  (planner/search/dialects/deepspeed.py).

Megatron-Core field names (shared by NeMo ``model.config.*`` and Bridge ``model.*``) were checked
against NVIDIA/Megatron-LM at d98e8a64ddf3 (``megatron/core/model_parallel_config.py``,
``transformer/transformer_config.py``, ``distributed/distributed_data_parallel_config.py``).
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from typing import Any

from planner.schedules import schedule_of
from planner.search.dialects._common import (
    FP8_DISPATCH_REASON,
    MEGATRON_BF16_STATES,
    MEGATRON_VOCAB_MULTIPLE,
    NOT_EXPRESSED,
    by_hand_note,
    fp32_states_reason,
    host_offload_reasons,
    megatron_full_recompute_args,
    not_expressed,
    partial_recompute,
    pipeline_split,
)
from planner.specs.knobs import DEFAULT_RECOMPUTE_MODULES
from planner.specs.layout import Layout, Training
from planner.specs.model import ModelSpec

# Megatron-Core TransformerConfig.recompute_modules choices the planner also models
MCORE_RECOMPUTE_MODULES = (
    "core_attn",
    "moe_act",
    "layernorm",
    "mla_up_proj",
    "mlp",
    "moe",
    "shared_experts",
)
Row = tuple[str, str, Any]  # (section, Megatron-Core field, value)


def _split_rows(model: ModelSpec, layout: Layout) -> tuple[list[Row], list[str]]:
    """Uneven pipeline splits as Megatron-Core fields (even ones need none)."""
    if layout.pp == 1:
        return [], []
    split = pipeline_split(model, layout)
    if split.even:
        return [], []
    if split.account_for_embedding_and_loss:
        return [
            ("parallel", "account_for_embedding_in_pipeline_split", True),
            ("parallel", "account_for_loss_in_pipeline_split", True),
        ], []
    if split.first_stage_layers is not None:
        return [
            ("parallel", "num_layers_in_first_pipeline_stage", split.first_stage_layers),
            ("parallel", "num_layers_in_last_pipeline_stage", split.last_stage_layers),
        ], []
    if split.layout_string is not None:
        return [("parallel", "pipeline_model_parallel_layout", split.layout_string)], []
    return [], [by_hand_note(model, layout)]


def _recompute_rows(
    model: ModelSpec, layout: Layout, training: Training
) -> tuple[list[Row], list[str]]:
    if training.recompute == "full" and training.recompute_fraction is not None:
        part = partial_recompute(model, layout, training)  # the block method's count per chunk
        return [
            ("model", "recompute_granularity", "full"),
            ("model", "recompute_method", "block"),
            ("model", "recompute_num_layers", part.layers),
        ], part.note
    if training.recompute == "full":  # every layer checkpointed, as the planner models it
        return [
            ("model", "recompute_granularity", "full"),
            ("model", "recompute_method", "uniform"),
            ("model", "recompute_num_layers", 1),
        ], []
    if training.recompute == "none":
        return [("model", "recompute_granularity", None)], []
    modules = training.recompute_modules or DEFAULT_RECOMPUTE_MODULES
    kept = [m for m in modules if m in MCORE_RECOMPUTE_MODULES]
    dropped = [m for m in modules if m not in MCORE_RECOMPUTE_MODULES]
    rows: list[Row] = [
        ("model", "recompute_granularity", "selective"),
        ("model", "recompute_modules", kept or ["core_attn"]),
    ]
    if not dropped:
        return rows, []
    return rows, [
        f"training.recompute_modules {dropped}: {NOT_EXPRESSED} (not Megatron-Core "
        "recompute_modules; torchtitan's op-level selective checkpointing)"
    ]


def _core_rows(model: ModelSpec, layout: Layout, training: Training) -> tuple[list[Row], list[str]]:
    """The layout and training as Megatron-Core config fields, with what they cannot say."""
    sched = schedule_of(layout)
    runs_schedule = layout.pp == 1 or sched.megatron is not None
    rows: list[Row] = [
        ("parallel", "tensor_model_parallel_size", layout.tp),
        ("parallel", "pipeline_model_parallel_size", layout.pp),
        # chunks of a schedule Megatron cannot run would run interleaved: left unset, stated
        ("parallel", "virtual_pipeline_model_parallel_size", layout.vpp if runs_schedule else None),
        ("parallel", "context_parallel_size", layout.cp),
        ("parallel", "sequence_parallel", layout.sequence_parallel and layout.tp > 1),
    ]
    if model.moe is not None or layout.ep > 1:
        rows.append(("parallel", "expert_model_parallel_size", layout.ep))
    split, notes = _split_rows(model, layout)
    recompute, recompute_notes = _recompute_rows(model, layout, training)
    zero = layout.zero
    gather = layout.overlap_dp_grad_reduce and zero >= 1
    gather = gather and (zero < 3 or layout.overlap_zero3_param_gather)
    rows += split + [
        ("batch", "micro_batch_size", training.micro_batch),
        ("batch", "global_batch_size", training.global_batch),
        ("data", "seq_length", training.seq_len),
        ("model", "seq_length", training.seq_len),
        *recompute,
        ("optim", "use_distributed_optimizer", zero >= 1),
        ("ddp", "overlap_grad_reduce", layout.overlap_dp_grad_reduce),
        ("ddp", "overlap_param_gather", gather),
    ]
    if zero == 3:  # Megatron-FSDP shards parameters, gradients and optimizer states
        rows.append(("ddp", "data_parallel_sharding_strategy", "optim_grads_params"))
    if layout.dp_replicas > 1 and zero < 3:  # hybrid sharding (Layout.dp_shard)
        rows.append(("ddp", "num_distributed_optimizer_instances", layout.dp_replicas))
    elif layout.dp_replicas > 1:
        notes.append(f"dp_shard {layout.dp_shard} at ZeRO-3: {NOT_EXPRESSED}")
    if training.optimizer_states != "fp32":  # TE FusedAdam: master kept as remainders
        rows.append(("optim", "use_precision_aware_optimizer", True))
    if training.optimizer_states == "bf16":
        notes += not_expressed(layout, training, MEGATRON_BF16_STATES)
    if not training.dropout:
        rows += [("model", "hidden_dropout", 0.0), ("model", "attention_dropout", 0.0)]
    if training.vocab_multiple != MEGATRON_VOCAB_MULTIPLE:
        rows.append(("model", "make_vocab_size_divisible_by", training.vocab_multiple))
    if training.offload_layers:
        rows += [
            ("model", "cpu_offloading", True),
            ("model", "cpu_offloading_num_layers", training.offload_layers),
        ]
    if training.cross_entropy == "in_place":
        rows += [
            ("model", "cross_entropy_loss_fusion", True),
            ("model", "cross_entropy_fusion_impl", "te"),
        ]
    if layout.overlap_ep_comm and layout.ep > 1:
        rows += [
            ("overlap", "overlap_moe_expert_parallel_comm", True),
            ("overlap", "delay_wgrad_compute", True),
        ]
    if training.moe_dispatcher == "deepep" and layout.ep > 1:  # TransformerConfig fields
        rows += [
            ("model", "moe_token_dispatcher_type", "flex"),
            ("model", "moe_flex_dispatcher_backend", "deepep"),
        ]
    if not runs_schedule:
        notes.append(f"pipeline schedule {sched.name}: {NOT_EXPRESSED} ({sched.megatron_note})")
    if zero == 2:
        notes.append(
            "ZeRO-2: the distributed optimizer already reduce-scatters gradients into "
            "optimizer-state shards"
        )
    notes += not_expressed(
        layout,
        training,
        {
            "pp_scatter_gather": "Megatron-Core sends whole activations between stages",
            "fp8_dispatch": FP8_DISPATCH_REASON,
        }
        | host_offload_reasons("Megatron-Core recipe"),
    )
    return rows, notes + recompute_notes


def _python_literal(value: Any) -> str:
    """A value as NeMo-Run's parser reads it (Python literals; a bare word is a string)."""
    if isinstance(value, (bool, list)) or value is None:
        return repr(value)
    return str(value)


def _hydra_literal(value: Any) -> str:
    """A value in Hydra's override grammar (true/false, null, [a,b], bare strings)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, list):
        return "[" + ",".join(str(v) for v in value) + "]"
    return str(value)


def _override(path: str, value: Any, literal: Any) -> str:
    return shlex.quote(f"{path}={literal(value)}")


def _comments(notes: list[str]) -> list[str]:
    return [f"# {n}" for n in notes]


def _override_lines(
    title: str,
    launch: str,
    rows: list[tuple[str, str, Any]],
    prefixes: dict[str, str],
    literal: Callable[[Any], str],
) -> list[str]:
    """The header comments (what, how to launch, what stays the recipe's) and one
    ``path=value`` line per (section, field, value) row under ``prefixes[section]``."""
    lines = [f"# {title}", f"# {launch}"]
    lines.append("# architecture, tokenizer, data and optimizer settings are the recipe's")
    return lines + [_override(prefixes[s] + f, v, literal) for s, f, v in rows]


NEMO_PREFIX = {
    "parallel": "trainer.strategy.",
    "batch": "data.",
    "data": "data.",
    "model": "model.config.",
    "optim": "optim.config.",
    "ddp": "trainer.strategy.ddp.",
    "overlap": "model.config.",  # TransformerConfig fields in NeMo 2
}


def nemo_overrides(model: ModelSpec, gpus: int, layout: Layout, training: Training) -> str:
    """NeMo 2 recipe overrides, one ``path=value`` per line; ``#`` lines are comments."""
    rows, notes = _core_rows(model, layout, training)
    if layout.zero == 3:
        rows.append(("strategy", "fsdp", "megatron"))
    lines = _override_lines(
        f"NeMo 2 recipe overrides for {model.name} on {gpus} GPUs "
        f"(trainer.num_nodes x trainer.devices = {gpus}; data parallel size {layout.dp})",
        "nemo llm pretrain --factory RECIPE $(grep -v '^#' nemo_overrides.txt); "
        "in Python: recipe.<path> = <value>",
        rows,
        NEMO_PREFIX | {"strategy": "trainer.strategy."},
        _python_literal,
    )
    plugins = {"bf16": "bf16_mixed", "fp8": "bf16_mixed", "fp16": "fp16_mixed"}
    if training.precision in plugins:  # NeMo-Run factories (Python: bf16_mixed())
        lines.append(f"trainer.plugins={plugins[training.precision]}")
        if training.precision == "fp8":
            lines.append("trainer.plugins.fp8=hybrid")
        fp32_reduce = training.grad_reduce_dtype == "fp32"
        lines.append(f"trainer.plugins.grad_reduce_in_fp32={fp32_reduce}")
    else:  # fp32: no mixed-precision plugin
        lines.append("trainer.plugins=None")
    if layout.tp > 1:
        lines.append(
            f"# TP communication overlap {'on' if layout.overlap_tp_comm else 'off'}: add "
            f"MegatronCommOverlapCallback(tp_comm_overlap={layout.overlap_tp_comm}) to "
            "trainer.callbacks (a callback, not a recipe path)"
        )
    return "\n".join(lines + _comments(notes)) + "\n"


BRIDGE_PREFIX = {
    "parallel": "model.",
    "batch": "train.",
    "data": "dataset.",
    "model": "model.",
    "optim": "optimizer.",
    "ddp": "ddp.",
    "overlap": "comm_overlap.",
}
BRIDGE_PRECISION = {  # registered mixed-precision recipes, and their grad_reduce_in_fp32
    "bf16": ("bf16_mixed", True),
    "fp16": ("fp16_mixed", False),
    "fp8": ("bf16_with_fp8_delayed_scaling_mixed", True),
}


def megatron_bridge_overrides(
    model: ModelSpec, gpus: int, layout: Layout, training: Training
) -> str:
    """Megatron-Bridge ConfigContainer overrides, one Hydra ``path=value`` per line."""
    rows, notes = _core_rows(model, layout, training)
    rows.append(("ddp", "use_distributed_optimizer", layout.zero >= 1))  # kept in sync
    if layout.zero == 3:
        rows.append(("ddp", "use_megatron_fsdp", True))
    if layout.tp > 1:
        rows.append(("overlap", "tp_comm_overlap", layout.overlap_tp_comm))
    recipe, recipe_fp32 = BRIDGE_PRECISION.get(training.precision, (None, None))
    fp32_reduce = training.grad_reduce_dtype == "fp32"
    rows += [("top", "mixed_precision", recipe), ("ddp", "grad_reduce_in_fp32", fp32_reduce)]
    if recipe is not None and fp32_reduce != recipe_fp32:
        notes.append(
            f"the {recipe} recipe's grad_reduce_in_fp32 ({recipe_fp32}) overwrites "
            "ddp.grad_reduce_in_fp32 at setup: also set mixed_precision.grad_reduce_in_fp32="
            f"{_hydra_literal(fp32_reduce)} on a MixedPrecisionConfig (perf_recipes/_common.py)"
        )
    if any(s == "overlap" for s, _, _ in rows):
        notes.append("comm_overlap.* need a CommOverlapConfig in the recipe (not None)")
    lines = _override_lines(
        f"Megatron-Bridge overrides for {model.name} on {gpus} GPUs (torchrun world size "
        f"{gpus}; data parallel size {layout.dp})",
        "scripts/training/train.sh ... $(grep -v '^#' megatron_bridge_overrides.txt); "
        "in Python: cfg.<path> = <value>",
        rows,
        BRIDGE_PREFIX | {"top": ""},
        _hydra_literal,
    )
    return "\n".join(lines + _comments(notes)) + "\n"


# the fork's FlashAttention flags (megatron/arguments.py at 4efb479d); unfused needs none
MDS_ATTENTION_FLAGS = {
    "flash_triton": "--use-flash-attn-triton",
    "flash2": "--use-flash-attn-v2",
}


def _mds_notes(layout: Layout, training: Training) -> list[str]:
    """What Megatron-DeepSpeed's arguments cannot say."""
    notes = not_expressed(
        layout,
        training,
        {
            "cp": "no --context-parallel-size; DeepSpeed-Ulysses --ds-sequence-parallel-size "
            "is another scheme",
            "vpp": "DeepSpeed's PipelineEngine runs 1F1B, no interleaving",
            "schedule": "DeepSpeed's PipelineEngine runs 1F1B only",
            "overlap_tp_comm": "no TP communication overlap flag",
            "overlap_ep_comm": "no expert-parallel communication overlap flag",
            "dp_shard": "no hybrid-sharding argument (DeepSpeed's MiCS and ZeRO++ hpZ are "
            "other schemes)",
            "moe_dispatcher": "DeepSpeed-MoE sends one copy of a token per expert",
            "fp8_dispatch": "DeepSpeed-MoE dispatches in the activation dtype",
            "pp_scatter_gather": "the PipelineEngine sends whole activations",
            "offload_layers": "no --cpu-offloading; --checkpoint-in-cpu moves activation "
            "checkpoints, not layers",
            "cross_entropy": "no Transformer Engine fused loss flag",
            "recompute_modules": "--recompute-granularity selective re-runs core attention only",
        }
        | fp32_states_reason("Megatron-DeepSpeed"),
    )
    if layout.pp > 1 and layout.zero >= 2:
        notes.append(
            f"layout.zero = {layout.zero} with pp = {layout.pp}: {NOT_EXPRESSED} (DeepSpeed's "
            "PipelineEngine refuses ZeRO-2/3 with pipeline parallelism)"
        )
    return notes


def megatron_deepspeed_args(model: ModelSpec, gpus: int, layout: Layout, training: Training) -> str:
    """Megatron-DeepSpeed arguments, one per line (``#`` lines are comments), to launch with
    ``--deepspeed_config ds_config.json``."""
    lines = [
        f"# Megatron-DeepSpeed arguments for {model.name} on {gpus} GPUs (data parallel size "
        f"{layout.dp} is implied by the world size)",
        "# architecture, tokenizer, data and optimizer arguments are not included",
        f"--tensor-model-parallel-size {layout.tp}",
        f"--pipeline-model-parallel-size {layout.pp}",
    ]
    if layout.pp == 1:  # the plain DeepSpeed engine (ZeRO 1-3), not the PipelineEngine
        lines.append("--no-pipeline-parallel")
    if model.moe is not None or layout.ep > 1:
        lines.append(f"--moe-expert-parallel-size {layout.ep}")
    if layout.sequence_parallel and layout.tp > 1:
        lines.append("--sequence-parallel")
    if training.recompute == "selective":
        lines.append("--recompute-granularity selective")
    elif training.recompute == "full":
        lines += megatron_full_recompute_args(model, layout, training)
        lines.append("--deepspeed-activation-checkpointing")
        if training.checkpoint_offload:  # deepspeed.checkpointing checkpoint_in_cpu
            lines.append("--checkpoint-in-cpu")
    lines += [
        f"--micro-batch-size {training.micro_batch}",
        f"--global-batch-size {training.global_batch}",
        f"--seq-length {training.seq_len}",
    ]
    if training.precision in ("bf16", "fp8"):
        lines.append("--bf16")
    elif training.precision == "fp16":
        lines.append("--fp16")
    if training.precision == "fp8":
        lines += ["--transformer-impl transformer_engine", "--fp8-hybrid"]
    if not training.dropout:
        lines += ["--attention-dropout 0.0", "--hidden-dropout 0.0"]
    if training.attention_kernel in MDS_ATTENTION_FLAGS:
        lines.append(MDS_ATTENTION_FLAGS[training.attention_kernel])
    if training.vocab_multiple != MEGATRON_VOCAB_MULTIPLE:
        lines.append(f"--make-vocab-size-divisible-by {training.vocab_multiple}")
    lines += [
        "--deepspeed",
        "--deepspeed_config ds_config.json",
        f"--zero-stage {layout.zero}",
    ]
    if training.optimizer_offload:  # with offload_optimizer in ds_config.json
        lines.append("--cpu-optimizer")
    return "\n".join(lines + _comments(_mds_notes(layout, training))) + "\n"


__all__ = ["megatron_bridge_overrides", "megatron_deepspeed_args", "nemo_overrides"]
