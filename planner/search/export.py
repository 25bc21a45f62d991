"""Turn a (model, gpus, layout, training) into files a training framework reads.

* :func:`layout_yaml`: the planner's own YAML, read back by :func:`load_layout_file` and by
  ``planner simulate --layout FILE``.
* :func:`megatron_args`: Megatron-LM / Megatron-Core command-line arguments (``pretrain_gpt.py``).
  Schedules Megatron-LM cannot run (zero bubble, V-shaped; planner/schedules/) are said so in a
  comment naming the fork or framework that runs them.
  ZeRO-3 has no Megatron-LM optimizer flag: a comment suggests Megatron-FSDP
  (``--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads_params``) or torch FSDP.
* :func:`torchtitan_toml`: a torchtitan job-config fragment. Key names follow the dataclasses of
  ``torchtitan/config/job_config.py`` in pytorch/torchtitan (read at commit 000204a4a8bf):
  ``[training]`` local_batch_size, global_batch_size, seq_len, mixed_precision_param;
  ``[parallelism]`` data_parallel_replicate_degree, data_parallel_shard_degree,
  tensor_parallel_degree, enable_async_tensor_parallel, pipeline_parallel_degree,
  pipeline_parallel_schedule (torch.distributed.pipelining ``get_schedule_class`` names, from
  the layout's schedule object: "1F1B", "Interleaved1F1B", "InterleavedZeroBubble",
  "ZBVZeroBubble", "DualPipeV"), pipeline_parallel_microbatch_size,
  context_parallel_degree, expert_parallel_degree; ``[activation_checkpoint]`` mode
  ("none" | "selective" | "full"), selective_ac_option; ``[model]`` converters (["float8"]).
  Newer torchtitan releases moved some of these (e.g. float8 under ``quantize.linear.float8``);
  the exported names are the long-standing ones.

>>> import planner
>>> model = planner.load_model("llama3.1-8b")
>>> layout = planner.Layout(tp=2, pp=1, dp=4, sequence_parallel=True, zero=1)
>>> training = planner.Training(seq_len=4096, global_batch=64, micro_batch=2)
>>> "--tensor-model-parallel-size 2" in megatron_args(model, 8, layout, training)
True
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from planner.errors import PlannerError
from planner.schedules import schedule_of
from planner.specs.layout import Layout, Training
from planner.specs.loading import parse_spec, read_yaml_file
from planner.specs.model import ModelSpec

LAYOUT_FIELDS = (
    "tp",
    "pp",
    "dp",
    "cp",
    "ep",
    "vpp",
    "sequence_parallel",
    "zero",
    "schedule",
    "overlap_dp_grad_reduce",
    "overlap_tp_comm",
    "overlap_ep_comm",
    "overlap_zero3_param_gather",
    "pp_scatter_gather",
)
TRAINING_FIELDS = (
    "seq_len",
    "global_batch",
    "micro_batch",
    "recompute",
    "recompute_modules",
    "precision",
    "attention_kernel",
    "dropout",
    "grad_reduce_dtype",
    "cross_entropy",
    "offload_layers",
)
FILE_KEYS = ("model", "gpus", "layout", "training")


def layout_dict(layout: Layout) -> dict[str, Any]:
    """The layout with every field explicit (vpp 1 for none, the resolved schedule)."""
    d = layout.model_dump(mode="json")
    d["vpp"] = layout.virtual_stages
    d["schedule"] = layout.pipeline_schedule
    return {k: d[k] for k in LAYOUT_FIELDS}


def training_dict(training: Training) -> dict[str, Any]:
    """The training settings, every field explicit."""
    d = training.model_dump(mode="json")
    return {k: d[k] for k in TRAINING_FIELDS}


def layout_yaml(model: ModelSpec, gpus: int, layout: Layout, training: Training) -> str:
    """A YAML document ``{model, gpus, layout, training}`` that :func:`load_layout_file` reads."""
    doc = {
        "model": model.name,
        "gpus": gpus,
        "layout": layout_dict(layout),
        "training": training_dict(training),
    }
    header = (
        f"# planner layout: {model.name} on {gpus} GPUs\n"
        "# planner simulate --model M --cluster C --layout THIS_FILE\n"
    )
    return header + yaml.safe_dump(doc, sort_keys=False)


def _even_stages(model: ModelSpec, layout: Layout) -> bool:
    return model.layers % (layout.pp * layout.virtual_stages) == 0


def _pipeline_split_args(model: ModelSpec, layout: Layout) -> list[str]:
    """Megatron-LM arguments for how the layers are split over (virtual) pipeline stages.

    Even splits use ``--num-layers-per-virtual-pipeline-stage``. Uneven ones, which the search
    allows (planner/search/space.py), count the embedding and the loss as one layer each
    (``--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split``) when
    that makes them even, else give the edge stages the smaller share with
    ``--decoder-first/last-pipeline-num-layers``, as planner/costs/pipeline.py models it.
    """
    pp, vpp, layers = layout.pp, layout.virtual_stages, model.layers
    if pp == 1:
        return []
    if _even_stages(model, layout):
        return (
            [f"--num-layers-per-virtual-pipeline-stage {layers // (pp * vpp)}"] if vpp > 1 else []
        )
    out = [f"--virtual-pipeline-model-parallel-size {vpp}"] if vpp > 1 else []
    if (layers + 2) % (pp * vpp) == 0:
        return out + [
            "--account-for-embedding-in-pipeline-split",
            "--account-for-loss-in-pipeline-split",
        ]
    middle = -(-layers // pp)
    rest = layers - (pp - 2) * middle
    if vpp == 1 and pp > 2 and rest >= 2:
        return [
            f"--decoder-first-pipeline-num-layers {rest // 2}",
            f"--decoder-last-pipeline-num-layers {rest - rest // 2}",
        ]
    return out + [
        f"# {layers} layers do not split evenly over pp*vpp = {pp * vpp} stages: set "
        "--decoder-first/last-pipeline-num-layers by hand"
    ]


def megatron_args(model: ModelSpec, gpus: int, layout: Layout, training: Training) -> str:
    """Megatron-LM arguments, one per line; lines starting with '#' are comments.

    Use as ``pretrain_gpt.py $(grep -v '^#' megatron_args.txt) <model and data args>``.
    Recompute "full" maps to ``--recompute-granularity full --recompute-method uniform
    --recompute-num-layers 1`` (every layer checkpointed, as the planner models it).
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
        lines += [
            "--recompute-granularity full",
            "--recompute-method uniform",
            "--recompute-num-layers 1",
        ]
    lines += [
        f"--micro-batch-size {training.micro_batch}",
        f"--global-batch-size {training.global_batch}",
        f"--seq-length {training.seq_len}",
    ]
    if layout.zero >= 1:
        lines.append("--use-distributed-optimizer")
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
    if training.precision in ("bf16", "fp8") and training.grad_reduce_dtype == "fp32":
        lines.append("--accumulate-allreduce-grads-in-fp32")
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
    if layout.overlap_dp_grad_reduce:
        lines.append("--overlap-grad-reduce")
        if layout.zero >= 1 and (layout.zero < 3 or layout.overlap_zero3_param_gather):
            lines.append("--overlap-param-gather")
    return "\n".join(lines) + "\n"


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
    ``data_parallel_shard_degree = dp``, any other stage to ``data_parallel_replicate_degree =
    dp`` (ZeRO-1/2 have no torchtitan equivalent). Without pipelining ``local_batch_size`` is
    the micro-batch and gradient accumulation reaches ``global_batch_size``; with pipelining
    ``local_batch_size`` is the whole per-replica batch, split into micro-batches of
    ``pipeline_parallel_microbatch_size``.
    """
    shard = layout.zero == 3
    per_replica = training.global_batch // layout.dp
    local = per_replica if layout.pp > 1 else training.micro_batch
    lines = [f"# torchtitan job config fragment for {model.name} on {gpus} GPUs", ""]
    if layout.zero in (1, 2):
        lines += [
            f"# ZeRO-{layout.zero} has no torchtitan equivalent: DDP replication is shown; "
            "data_parallel_shard_degree = dp (FSDP) saves memory at the cost of parameter "
            "all-gathers",
            "",
        ]
    if training.precision == "fp8":
        lines += _toml_table("model", [("converters", ["float8"])])
    lines += _toml_table(
        "training",
        [
            ("local_batch_size", local),
            ("global_batch_size", training.global_batch),
            ("seq_len", training.seq_len),
            ("mixed_precision_param", "float32" if training.precision == "fp32" else "bfloat16"),
        ],
    )
    parallel: list[tuple[str, Any]] = [
        ("data_parallel_replicate_degree", 1 if shard else layout.dp),
        ("data_parallel_shard_degree", layout.dp if shard else 1),
        ("tensor_parallel_degree", layout.tp),
    ]
    if layout.overlap_tp_comm and layout.tp > 1:
        parallel.append(("enable_async_tensor_parallel", True))  # needs [compile] enable
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
    if layout.virtual_stages > 1 and _even_stages(model, layout):
        per_stage = model.layers // (layout.pp * layout.virtual_stages)
        parallel.append(("pipeline_parallel_layers_per_stage", per_stage))
    elif layout.pp > 1 and not _even_stages(model, layout):
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
    if layout.ep > 1 and not shard:
        lines += ["# torchtitan carves expert parallelism out of data_parallel_shard_degree", ""]
    lines += _toml_table("parallelism", parallel)
    ac: list[tuple[str, Any]] = [("mode", training.recompute)]
    if training.recompute == "selective":
        ac.append(("selective_ac_option", "op"))
    lines += _toml_table("activation_checkpoint", ac)
    return "\n".join(lines)


def _int_field(value: Any, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise PlannerError(field, f"{value!r} is not a positive integer", "an integer >= 1")
    return value


def parse_layout_document(data: Any) -> tuple[Layout, Training | None, int | None]:
    """(Layout, Training or None, gpus or None) from a parsed layout YAML document."""
    if not isinstance(data, dict):
        raise PlannerError(
            "--layout",
            f"expected a mapping, got {type(data).__name__}",
            "a mapping with " + ", ".join(FILE_KEYS),
        )
    for key in data:
        if key not in FILE_KEYS:
            raise PlannerError(str(key), "unknown field in the layout file", ", ".join(FILE_KEYS))
    if "layout" not in data:
        raise PlannerError("layout", "required field is missing", ", ".join(LAYOUT_FIELDS))
    raw = data["layout"]
    if isinstance(raw, dict) and raw.get("vpp") == 1:
        raw = {**raw, "vpp": None}  # vpp 1 means not interleaved
    layout = parse_spec(raw, Layout, "layout")
    default = "interleaved" if layout.virtual_stages > 1 else "1f1b"
    if layout.schedule == default:  # the default schedule is stored as None
        layout = layout.model_copy(update={"schedule": None})
    training = None
    if data.get("training") is not None:
        training = parse_spec(data["training"], Training, "training")
    gpus = None if data.get("gpus") is None else _int_field(data["gpus"], "gpus")
    return layout, training, gpus


def load_layout_file(path: str | Path) -> tuple[Layout, Training | None, int | None]:
    """Read a file written by :func:`layout_yaml` (safe YAML); errors name the bad field."""
    p = Path(path)
    if not p.is_file():
        raise PlannerError("--layout", f"file not found: {p}", "a layout YAML file")
    return parse_layout_document(read_yaml_file(p, "--layout"))


def exports(model: ModelSpec, gpus: int, layout: Layout, training: Training) -> dict[str, str]:
    """All three exports keyed by their JSON names."""
    return {
        "layout_yaml": layout_yaml(model, gpus, layout, training),
        "megatron_args": megatron_args(model, gpus, layout, training),
        "torchtitan_toml": torchtitan_toml(model, gpus, layout, training),
    }


EXPORT_FILES = {
    "layout_yaml": "layout.yaml",
    "megatron_args": "megatron_args.txt",
    "torchtitan_toml": "torchtitan.toml",
}


def write_exports(directory: str | Path, texts: dict[str, str]) -> list[Path]:
    """Write the exports as layout.yaml, megatron_args.txt and torchtitan.toml; return paths."""
    d = Path(directory)
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PlannerError("--export-dir", f"cannot create {d}: {exc.strerror}") from None
    paths = []
    for key, name in EXPORT_FILES.items():
        p = d / name
        p.write_text(texts[key])
        paths.append(p)
    return paths


__all__ = [
    "exports",
    "layout_yaml",
    "load_layout_file",
    "megatron_args",
    "parse_layout_document",
    "torchtitan_toml",
    "write_exports",
]
