"""Turn a (model, gpus, layout, training) into files a training framework reads.

* :func:`layout_yaml`: the planner's own YAML, read back by :func:`load_layout_file` and by
  ``planner simulate --layout FILE``.
* the launch files, one writer per dialect in ``planner/search/dialects/`` (each citing the
  framework source its keys were read from): Megatron-LM arguments (:func:`megatron_args`),
  torchtitan TOML (:func:`torchtitan_toml`), Megatron-DeepSpeed arguments with a DeepSpeed
  JSON, NeMo 2 recipe overrides, Megatron-Bridge ConfigContainer overrides, llm-foundry YAML.
  :data:`DIALECTS` is the one map from dialect name (``StackSpec.export_dialects``) to writer
  and file name; :func:`exports` writes the stack's dialects (no stack: Megatron-LM arguments
  and torchtitan TOML) beside the layout YAML.

>>> import planner
>>> model = planner.load_model("llama3.1-8b")
>>> layout = planner.Layout(tp=1, dp=8, zero=3)
>>> training = planner.Training(seq_len=4096, global_batch=64, micro_batch=2)
>>> sorted(exports(model, 8, layout, training, planner.load_stack("deepspeed-zero")))
['deepspeed_json', 'layout_yaml']
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from planner.errors import PlannerError
from planner.search.dialects import (
    deepspeed_json,
    llm_foundry_yaml,
    megatron_args,
    megatron_bridge_overrides,
    megatron_deepspeed_args,
    nemo_overrides,
    torchtitan_toml,
)
from planner.specs.hardware import Cluster
from planner.specs.layout import Layout, Training
from planner.specs.loading import parse_spec, read_yaml_file
from planner.specs.model import ModelSpec
from planner.specs.stack import StackSpec
from planner.stacks import apply_stack

LAYOUT_FIELDS = (
    "tp",
    "pp",
    "dp",
    "cp",
    "ep",
    "vpp",
    "sequence_parallel",
    "zero",
    "dp_shard",
    "first_stage_layers",
    "last_stage_layers",
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
    "recompute_fraction",
    "precision",
    "attention_kernel",
    "dropout",
    "grad_reduce_dtype",
    "cross_entropy",
    "offload_layers",
    "optimizer_offload",
    "checkpoint_offload",
    "optimizer_states",
)
FILE_KEYS = ("model", "cluster", "gpus", "layout", "training")


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


def layout_yaml(
    model: ModelSpec,
    gpus: int,
    layout: Layout,
    training: Training,
    stack: StackSpec | None = None,
    cluster: Cluster | None = None,
) -> str:
    """A YAML document ``{model, cluster, gpus, layout, training}`` that
    :func:`load_layout_file` reads (``cluster`` None: not written, the reader passes
    --cluster; ``stack``: named in the header's ``planner simulate`` line). A file that names
    its model and cluster is enough for ``planner simulate --layout FILE``."""
    doc: dict[str, Any] = {"model": model.name}
    if cluster is not None:
        doc["cluster"] = cluster.id
    doc |= {"gpus": gpus, "layout": layout_dict(layout), "training": training_dict(training)}
    flags = "" if cluster is not None else "--model M --cluster C "
    header = (
        f"# planner layout: {model.name} on {gpus} GPUs\n"
        f"# planner simulate {flags}--layout THIS_FILE"
        + (f" --stack {stack.name}" if stack is not None else "")
        + "\n"
    )
    return header + yaml.safe_dump(doc, sort_keys=False)


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


def layout_file_names(path: str | Path) -> dict[str, str]:
    """The ``model`` and ``cluster`` a layout file names (either may be absent)."""
    data = read_yaml_file(_layout_path(path), "--layout")
    if not isinstance(data, dict):
        return {}
    out = {}
    for key in ("model", "cluster"):
        value = data.get(key)
        if value is None:
            continue
        if not isinstance(value, str) or not value.strip():
            raise PlannerError(f"--layout: {key}", f"{value!r} is not a name", "a shipped id")
        out[key] = value
    return out


def _layout_path(path: str | Path) -> Path:
    p = Path(path)
    if not p.is_file():
        raise PlannerError("--layout", f"file not found: {p}", "a layout YAML file")
    return p


def load_layout_file(path: str | Path) -> tuple[Layout, Training | None, int | None]:
    """Read a file written by :func:`layout_yaml` (safe YAML); errors name the bad field."""
    return parse_layout_document(read_yaml_file(_layout_path(path), "--layout"))


Writer = Callable[[ModelSpec, int, Layout, Training, "StackSpec | None"], str]


@dataclass(frozen=True)
class Dialect:
    """One launch-file format: its file name, a title (the file and what reads it), the app's
    button label, the MIME type and code-block language it is offered with, and its writer."""

    file_name: str
    title: str
    label: str
    mime: str
    language: str
    write: Writer


def _stackless(writer: Callable[[ModelSpec, int, Layout, Training], str]) -> Writer:
    """A writer that needs no stack, in the :data:`Writer` shape."""
    return lambda model, gpus, layout, training, stack: writer(model, gpus, layout, training)


def _deepspeed_writer(
    model: ModelSpec, gpus: int, layout: Layout, training: Training, stack: StackSpec | None
) -> str:
    """ds_config.json; with a stack that also writes Megatron-DeepSpeed arguments, those carry
    the model parallelism and recompute."""
    with_megatron = stack is not None and "megatron_deepspeed_args" in stack.export_dialects
    return deepspeed_json(model, gpus, layout, training, with_megatron=with_megatron)


# the one map from dialect name (StackSpec.export_dialects, the "exports" JSON keys) to writer
# and file name
DIALECTS: dict[str, Dialect] = {
    "layout_yaml": Dialect(
        "layout.yaml",
        "layout.yaml (planner simulate --layout FILE)",
        "Layout YAML",
        "application/x-yaml",
        "yaml",
        layout_yaml,
    ),
    "megatron_args": Dialect(
        "megatron_args.txt",
        "megatron_args.txt (Megatron-LM)",
        "Megatron-LM arguments",
        "text/plain",
        "bash",
        _stackless(megatron_args),
    ),
    "megatron_deepspeed_args": Dialect(
        "megatron_deepspeed_args.txt",
        "megatron_deepspeed_args.txt (Megatron-DeepSpeed)",
        "Megatron-DeepSpeed arguments",
        "text/plain",
        "bash",
        _stackless(megatron_deepspeed_args),
    ),
    "deepspeed_json": Dialect(
        "ds_config.json",
        "ds_config.json (DeepSpeed config)",
        "DeepSpeed JSON",
        "application/json",
        "json",
        _deepspeed_writer,
    ),
    "nemo_overrides": Dialect(
        "nemo_overrides.txt",
        "nemo_overrides.txt (NeMo 2 recipe overrides)",
        "NeMo 2 overrides",
        "text/plain",
        "bash",
        _stackless(nemo_overrides),
    ),
    "megatron_bridge_overrides": Dialect(
        "megatron_bridge_overrides.txt",
        "megatron_bridge_overrides.txt (Megatron-Bridge ConfigContainer overrides)",
        "Megatron-Bridge overrides",
        "text/plain",
        "bash",
        _stackless(megatron_bridge_overrides),
    ),
    "torchtitan_toml": Dialect(
        "torchtitan.toml",
        "torchtitan.toml (torchtitan job config)",
        "torchtitan TOML",
        "application/toml",
        "toml",
        _stackless(torchtitan_toml),
    ),
    "llm_foundry_yaml": Dialect(
        "llm_foundry.yaml",
        "llm_foundry.yaml (llm-foundry train YAML)",
        "llm-foundry YAML",
        "application/x-yaml",
        "yaml",
        _stackless(llm_foundry_yaml),
    ),
}
NO_STACK_DIALECTS = ("megatron_args", "torchtitan_toml")  # exports without a stack
EXPORT_FILES = {name: d.file_name for name, d in DIALECTS.items()}


def exports(
    model: ModelSpec,
    gpus: int,
    layout: Layout,
    training: Training,
    stack: StackSpec | None = None,
    cluster: Cluster | None = None,
) -> dict[str, str]:
    """``layout_yaml`` and the stack's export dialects (no stack: Megatron-LM arguments and
    torchtitan TOML), keyed by dialect name. With a stack, the layout and training are first
    completed by it (:func:`planner.stacks.apply_stack`), so the files say what was costed."""
    if stack is not None:
        layout, training = apply_stack(stack, model, layout, training)
    names = NO_STACK_DIALECTS if stack is None else stack.export_dialects
    texts = {"layout_yaml": layout_yaml(model, gpus, layout, training, stack, cluster)}
    return texts | {
        name: DIALECTS[name].write(model, gpus, layout, training, stack) for name in names
    }


def write_exports(directory: str | Path, texts: dict[str, str]) -> list[Path]:
    """Write each export in ``texts`` (keyed by dialect name, as :func:`exports` returns them)
    under its file name (:data:`EXPORT_FILES`); return the paths."""
    d = Path(directory)
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PlannerError("--export-dir", f"cannot create {d}: {exc.strerror}") from None
    paths = []
    for key, text in texts.items():
        if key not in EXPORT_FILES:
            raise PlannerError("exports", f"unknown export {key!r}", ", ".join(EXPORT_FILES))
        p = d / EXPORT_FILES[key]
        p.write_text(text)
        paths.append(p)
    return paths


__all__ = [
    "DIALECTS",
    "EXPORT_FILES",
    "NO_STACK_DIALECTS",
    "Dialect",
    "exports",
    "layout_yaml",
    "load_layout_file",
    "megatron_args",
    "parse_layout_document",
    "torchtitan_toml",
    "write_exports",
]
