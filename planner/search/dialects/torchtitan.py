"""A torchtitan job-config TOML fragment for a layout.

Key names follow the dataclasses of ``torchtitan/config/job_config.py`` in pytorch/torchtitan
(read at commit 000204a4a8bf): ``[training]`` local_batch_size, global_batch_size, seq_len,
mixed_precision_param, compile; ``[parallelism]`` data_parallel_replicate_degree,
data_parallel_shard_degree, fsdp_reshard_after_forward ("default" | "always" | "never"),
tensor_parallel_degree, enable_async_tensor_parallel (effective only when compiled),
pipeline_parallel_degree, pipeline_parallel_schedule (torch.distributed.pipelining
``get_schedule_class`` names, from the layout's schedule object: "1F1B", "Interleaved1F1B",
"InterleavedZeroBubble", "ZBVZeroBubble", "DualPipeV"), pipeline_parallel_microbatch_size,
pipeline_parallel_layers_per_stage, context_parallel_degree, expert_parallel_degree;
``[activation_checkpoint]`` mode ("none" | "selective" | "full"), selective_ac_option;
``[model]`` converters (["float8"], registered as "float8" in
``torchtitan/components/quantization/float8.py``). Later releases moved some of these (the last
TOML-era ``job_config.py``, 238fa9953e4a: ``[compile] enable``, float8 as the
``quantize.linear.float8`` converter; the current tree has no TOML at all): the exported names
are the long-standing ones, and the compile line says so.
"""

from __future__ import annotations

from typing import Any

from planner.schedules import schedule_of
from planner.search.dialects._common import (
    NOT_EXPRESSED,
    fp32_states_reason,
    host_offload_reasons,
    not_expressed,
    pipeline_split,
    vocab_padding_note,
)
from planner.specs.layout import Layout, Training
from planner.specs.model import ModelSpec


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


def _toml_table(name: str, rows: list[tuple[str, Any]]) -> list[str]:
    return [f"[{name}]"] + [f"{k} = {_toml_value(v)}" for k, v in rows] + [""]


def torchtitan_toml(model: ModelSpec, gpus: int, layout: Layout, training: Training) -> str:
    """A torchtitan job-config fragment (``[training]``, ``[parallelism]``,
    ``[activation_checkpoint]``; ``[model]`` for fp8).

    torchtitan shards with FSDP2 or replicates with DDP: ZeRO-3 maps to
    ``data_parallel_shard_degree = dp``, ZeRO-2 to the same with ``fsdp_reshard_after_forward =
    "never"`` (parameters stay gathered from forward to backward), ZeRO-0/1 to
    ``data_parallel_replicate_degree = dp`` (ZeRO-1 has no torchtitan equivalent: a comment says
    so). Without pipelining ``local_batch_size`` is the micro-batch and gradient accumulation
    reaches ``global_batch_size``; with pipelining ``local_batch_size`` is the whole per-replica
    batch, split into micro-batches of ``pipeline_parallel_microbatch_size``. Compiled execution
    (``Training.execution``, the torchtitan-compiled stacks) sets ``[training] compile``; TP
    overlap sets ``enable_async_tensor_parallel``, which torchtitan applies only when compiled.
    """
    shard = layout.zero >= 2
    per_replica = training.global_batch // layout.dp
    local = per_replica if layout.pp > 1 else training.micro_batch
    lines = [f"# torchtitan job config fragment for {model.name} on {gpus} GPUs", ""]
    offloads = not_expressed(
        layout,
        training,
        host_offload_reasons("torchtitan")
        | fp32_states_reason("torchtitan")
        | {
            "moe_dispatcher": "the planner knows no torchtitan key for a dispatcher that sends "
            "a token once per node",
            "fp8_dispatch": "the planner knows no torchtitan key for FP8 dispatch",
        },
    ) + vocab_padding_note(model, layout, training, "torchtitan")
    lines += [f"# {n}" for n in offloads]
    if layout.zero == 1:
        lines += [
            "# ZeRO-1 has no torchtitan equivalent: DDP replication is shown; "
            "data_parallel_shard_degree = dp (FSDP) saves memory at the cost of parameter "
            "all-gathers",
            "",
        ]
    if training.precision == "fp8":
        lines += _toml_table("model", [("converters", ["float8"])])
    rows: list[tuple[str, Any]] = [
        ("local_batch_size", local),
        ("global_batch_size", training.global_batch),
        ("seq_len", training.seq_len),
        ("mixed_precision_param", "float32" if training.precision == "fp32" else "bfloat16"),
    ]
    if training.execution == "compiled":
        rows.append(("compile", True))
        lines += ["# later torchtitan releases spell [training] compile as [compile] enable", ""]
    lines += _toml_table("training", rows)
    # HSDP (Layout.dp_shard): the replicate degree is the groups holding one shard, when they
    # split DP itself (torchtitan's shard dimension spans the CP ranks too)
    replicas = layout.dp_replicas if shard and layout.dp % layout.dp_replicas == 0 else 1
    if shard and replicas != layout.dp_replicas:
        lines += [f"# dp_shard {layout.dp_shard} across the CP ranks: {NOT_EXPRESSED}", ""]
    parallel: list[tuple[str, Any]] = [
        ("data_parallel_replicate_degree", replicas if shard else layout.dp),
        ("data_parallel_shard_degree", layout.dp // replicas if shard else 1),
    ]
    if layout.zero == 2:
        parallel.append(("fsdp_reshard_after_forward", "never"))
    parallel.append(("tensor_parallel_degree", layout.tp))
    if layout.overlap_tp_comm and layout.tp > 1:
        parallel.append(("enable_async_tensor_parallel", True))
        if training.execution != "compiled":
            lines += ["# enable_async_tensor_parallel takes effect only with compile", ""]
    lines += _pipeline_toml(model, layout, training, parallel)
    lines += _activation_checkpoint_toml(training)
    return "\n".join(lines)


def _activation_checkpoint_toml(training: Training) -> list[str]:
    """The ``[activation_checkpoint]`` table: op-level selective AC for selective recompute,
    one layer in k (layer-wise selective AC) for a recompute fraction, with a comment where
    that is not the fraction costed."""
    lines: list[str] = []
    ac: list[tuple[str, Any]] = [("mode", training.recompute)]
    if training.recompute == "selective":
        ac.append(("selective_ac_option", "op"))
    elif training.recompute_fraction is not None:  # layer-wise selective AC: every k-th layer
        k = max(1, round(1.0 / training.recompute_fraction))
        ac = [("mode", "selective"), ("selective_ac_option", str(k))]
        lines += [
            f"# training.recompute_fraction = {training.recompute_fraction:g}: one layer in {k} "
            f"re-run ({1.0 / k:.3g} of the layers; the planner costed "
            f"{training.recompute_fraction:g}); torchtitan from 114151ad4 (2026-03) has "
            f"per-op selective AC only: {NOT_EXPRESSED} there",
            "",
        ]
    return lines + _toml_table("activation_checkpoint", ac)


def _pipeline_toml(
    model: ModelSpec, layout: Layout, training: Training, parallel: list[tuple[str, Any]]
) -> list[str]:
    """The pipeline, context and expert rows of ``[parallelism]`` (appended to ``parallel``)
    with the comments they need, then the ``[parallelism]`` table."""
    lines: list[str] = []
    sched = schedule_of(layout)
    parallel.append(("pipeline_parallel_degree", layout.pp))
    if sched.torchtitan is not None:
        parallel.append(("pipeline_parallel_schedule", sched.torchtitan))
        if sched.torchtitan_note and layout.pp > 1:
            lines += [f"# pipeline schedule {sched.torchtitan}: {sched.torchtitan_note}", ""]
    else:
        lines += [
            f"# pipeline schedule {sched.name} ({sched.title}) has no torchtitan name: "
            f"{sched.torchtitan_note}; pipeline_parallel_schedule left unset",
            "",
        ]
    parallel.append(("pipeline_parallel_microbatch_size", training.micro_batch))
    split = pipeline_split(model, layout)
    if layout.virtual_stages > 1 and split.even:
        parallel.append(("pipeline_parallel_layers_per_stage", split.per_stage))
    elif layout.pp > 1 and not split.even:
        lines += [
            f"# {model.layers} layers do not split evenly over {layout.pp * layout.virtual_stages}"
            " pipeline stages: torchtitan infers an uneven split; set "
            "pipeline_parallel_split_points to control it",
            "",
        ]
    parallel += [
        ("context_parallel_degree", layout.cp),
        ("expert_parallel_degree", layout.ep),
    ]
    if layout.ep > 1 and layout.zero < 2:
        lines += ["# torchtitan carves expert parallelism out of data_parallel_shard_degree", ""]
    return lines + _toml_table("parallelism", parallel)


__all__ = ["torchtitan_toml"]
