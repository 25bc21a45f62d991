"""Launch-file writers: a layout as the files a training framework reads.

One module per framework family, each citing the repository, commit and files its key names were
read from: :mod:`~planner.search.dialects.megatron_lm` (Megatron-LM arguments),
:mod:`~planner.search.dialects.megatron` (NeMo 2 recipe overrides, Megatron-Bridge
ConfigContainer overrides, Megatron-DeepSpeed arguments), :mod:`~planner.search.dialects.deepspeed`
(``ds_config.json``), :mod:`~planner.search.dialects.torchtitan` (job-config TOML),
:mod:`~planner.search.dialects.llm_foundry` (train YAML with ``fsdp_config``). A layout field a dialect has no key for is stated (a ``#`` comment, or
``planner_notes`` in JSON) with the marker :data:`NOT_EXPRESSED`, never dropped; a batch that is
not a whole number of accumulation steps is a one-line :class:`~planner.errors.PlannerError`.
``planner/search/export.py`` ``DIALECTS`` maps each dialect name to its writer and file name.
"""

from planner.search.dialects._common import NOT_EXPRESSED, grad_accumulation_steps, pipeline_split
from planner.search.dialects.deepspeed import deepspeed_json
from planner.search.dialects.llm_foundry import llm_foundry_yaml
from planner.search.dialects.megatron import (
    megatron_bridge_overrides,
    megatron_deepspeed_args,
    nemo_overrides,
)
from planner.search.dialects.megatron_lm import megatron_args
from planner.search.dialects.torchtitan import torchtitan_toml

__all__ = [
    "NOT_EXPRESSED",
    "deepspeed_json",
    "grad_accumulation_steps",
    "llm_foundry_yaml",
    "megatron_args",
    "megatron_bridge_overrides",
    "megatron_deepspeed_args",
    "nemo_overrides",
    "pipeline_split",
    "torchtitan_toml",
]
