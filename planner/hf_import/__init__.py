"""Import a Hugging Face ``config.json`` as a planner :class:`ModelSpec`.

``spec_from_hf_config`` maps the architecture fields of the supported ``model_type`` values onto
the planner's schema and returns notes for everything it could not express exactly: fields that
matter for cost but have no planner equivalent (biases, attention sinks, Mamba-1 internals...),
approximations it made (Nemotron-H MLP-only layers merged into the previous layer) and every field
it did not read (split into "no effect on cost" and "unknown"). Nothing is guessed: a missing
required field is a :class:`PlannerError` naming it, and so is every value of the wrong type or
out of range (a list for ``model_type``, ``true`` or ``10**400`` for ``hidden_size``): hostile
input gives one line, never a traceback.

Field names follow ``transformers`` ``src/transformers/models/<type>/configuration_<type>.py``
(see ``shared/reference/libraries.md`` section 3.5). Multimodal repos nest the text model under
``text_config``; it is read from there.

The package: ``fields`` (the config reader and the field readers and notes every builder shares),
one builder module per family (``llama``, ``deepseek``, ``gpt_oss``, ``hybrid``) and ``assemble``
(dispatch on model_type, the ModelSpec and its notes, reading config.json, writing model YAML).
"""

from planner.hf_import.assemble import (
    MAX_CONFIG_BYTES,
    NO_COST_FIELDS,
    SUPPORTED_MODEL_TYPES,
    load_hf_config,
    parse_hf_config_text,
    spec_from_hf_config,
    to_yaml,
)
from planner.hf_import.llama import LLAMA_LIKE

__all__ = [
    "LLAMA_LIKE",
    "MAX_CONFIG_BYTES",
    "NO_COST_FIELDS",
    "SUPPORTED_MODEL_TYPES",
    "load_hf_config",
    "parse_hf_config_text",
    "spec_from_hf_config",
    "to_yaml",
]
