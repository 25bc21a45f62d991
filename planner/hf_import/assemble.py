"""From a config mapping to a ModelSpec and back out as YAML: the builder of each supported
``model_type``, the text model of multimodal configs, layer groups for the per-layer stack, the
description, the notes on unread fields, reading ``config.json`` files and writing model YAML.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from planner.errors import PlannerError, pydantic_error_to_planner
from planner.hf_import.deepseek import _deepseek_v3
from planner.hf_import.fields import _Draft, _Fields, check_keys, shown
from planner.hf_import.gpt_oss import _gpt_oss
from planner.hf_import.hybrid import _jamba, _nemotron_h
from planner.hf_import.llama import LLAMA_LIKE, _llama_like
from planner.safe_io import load_json, read_text
from planner.specs.blocks import AttentionMixer, DenseMLP, LayerGroup, LayerSpec, MoEMLP
from planner.specs.model import ModelSpec, MoESpec

MAX_CONFIG_BYTES = 1_000_000

_BUILDERS: dict[str, Callable[[_Fields, list[str]], _Draft]] = {
    **dict.fromkeys(LLAMA_LIKE, _llama_like),
    "deepseek_v3": _deepseek_v3,
    "gpt_oss": _gpt_oss,
    "jamba": _jamba,
    "nemotron_h": _nemotron_h,
}
SUPPORTED_MODEL_TYPES = tuple(_BUILDERS)
_MAX_BLOCK = 128  # longest repeated block _compress looks for (real stacks repeat <= 8 layers)

# The config field a model-schema field comes from, to name it when the schema refuses a value
# (MLA fields have the same names in both; MoE and Mamba fields differ by family).
_HF_NAMES = {
    "layers": "num_hidden_layers",
    "hidden": "hidden_size",
    "ffn_hidden": "intermediate_size",
    "heads": "num_attention_heads",
    "kv_heads": "num_key_value_heads",
    "vocab": "vocab_size",
    "max_positions": "max_position_embeddings",
    "window": "sliding_window",
}

# Fields read by no builder because they do not change step time or memory in the planner's
# model: token ids, initialisation, norm epsilons, RoPE frequencies/scaling, dropout, routing
# details (the planner models routing cost by top-k and load imbalance), kernel switches.
_NO_COST = """
    _name_or_path architectures auto_map aux_loss_alpha bos_token_id chunk_size_feed_forward
    dtype eos_token_id ep_size hidden_dropout attention_dropout initial_context_length
    initializer_range layer_norm_epsilon mamba_dt_init_floor mamba_dt_limit mamba_dt_max
    mamba_dt_min mamba_hidden_act model_type n_group norm_topk_prob num_logits_to_keep
    output_router_logits pad_token_id pretraining_tp rescale_prenorm_residual
    residual_in_fp32 rms_norm_eps rope_parameters rope_scaling rope_theta
    routed_scaling_factor router_aux_loss_coef router_jitter_noise scoring_func seq_aux
    time_step_floor time_step_limit time_step_max time_step_min topk_group topk_method
    torch_dtype transformers_version use_cache use_mamba_kernels use_mrope
    """
NO_COST_FIELDS = frozenset(_NO_COST.split())


# ---- assembling the spec ------------------------------------------------------------------------
def _compress(layers: list[LayerSpec]) -> list[LayerGroup]:
    """Layer groups for a per-layer list: one repeated period when the stack has one, else
    greedy runs of repeated blocks (longest coverage first; blocks of at most
    ``_MAX_BLOCK`` layers) and single layers in between.

    The stack is compared as a string, one character per distinct layer, so that a 10,000
    layer stack with no repeats takes well under a second."""
    codes: dict[LayerSpec, str] = {}
    s = "".join(codes.setdefault(x, chr(len(codes))) for x in layers)
    n = len(s)
    for p in range(1, n // 2 + 1):
        if n % p == 0 and s[:p] * (n // p) == s:
            return [LayerGroup(repeat=n // p, layers=layers[:p])]
    groups: list[LayerGroup] = []
    loose: list[LayerSpec] = []
    i = 0
    while i < n:
        best_p, best_r = 1, 1
        for p in range(1, min(_MAX_BLOCK, (n - i) // 2) + 1):
            block = s[i : i + p]
            r = 1
            while i + (r + 1) * p <= n and s.startswith(block, i + r * p):
                r += 1
            if r > 1 and r * p > best_r * best_p:
                best_p, best_r = p, r
        if best_r == 1:
            loose.append(layers[i])
            i += 1
            continue
        if loose:
            groups.append(LayerGroup(repeat=1, layers=loose))
            loose = []
        groups.append(LayerGroup(repeat=best_r, layers=layers[i : i + best_p]))
        i += best_p * best_r
    if loose:
        groups.append(LayerGroup(repeat=1, layers=loose))
    return groups


def _flat_dense_prefix(layers: list[LayerSpec]) -> int | None:
    """Leading dense layers when the stack is the flat schema (full attention everywhere, k
    dense layers then only MoE layers); None when it needs layer_groups."""
    plain = AttentionMixer()
    if any(x.mixer != plain or x.mlp not in (DenseMLP(), MoEMLP()) for x in layers):
        return None
    kinds = [x.mlp.kind for x in layers]
    k = kinds.index("moe") if "moe" in kinds else len(kinds)
    return k if all(c == "moe" for c in kinds[k:]) else None


def _describe(spec: ModelSpec, model_type: str) -> str:
    parts = [f"{spec.layers} layers", f"hidden {spec.hidden}"]
    kinds = spec.layer_kinds()
    n_mamba = sum(c for x, c in kinds if x.mixer.kind == "mamba2")
    n_attn = sum(c for x, c in kinds if x.mixer.kind == "attention")
    if n_mamba:
        parts.append(f"{n_mamba} Mamba-2 + {n_attn} attention layers")
    windows = sorted({x.mixer.window for x, _ in kinds if x.mixer.kind == "attention"} - {None})
    n_window = sum(c for x, c in kinds if x.mixer.kind == "attention" and x.mixer.window)
    if windows:
        parts.append(f"{n_window} sliding-window ({', '.join(map(str, windows))}) layers")
    if spec.mla:
        parts.append(f"MLA ({spec.heads} heads)")
    else:
        parts.append(f"{spec.heads} heads / {spec.n_kv_heads} KV heads, head_dim {spec.d_head}")
    if spec.moe:
        m = spec.moe
        shared = f" + {m.shared_experts} shared" if m.shared_experts else ""
        parts.append(
            f"{spec.n_moe_layers} MoE layers of {m.experts}{shared} experts of "
            f"{m.expert_ffn_hidden} (top-{m.top_k})"
        )
    parts.append(f"vocab {spec.vocab}")
    return f"{spec.name} (Hugging Face model_type {model_type}): " + ", ".join(parts)


def _text_config(config: Mapping[str, Any], notes: list[str]) -> tuple[Mapping[str, Any], str]:
    """The text model's mapping and the prefix of its field names."""
    text = config.get("text_config")
    if text is None:
        return config, ""
    if not isinstance(text, Mapping):
        raise PlannerError("text_config", f"expected an object, got {shown(text)}", "an object")
    check_keys(text, "text_config")
    merged = dict(text)
    for key in ("tie_word_embeddings", "vocab_size"):
        if key not in merged and key in config:
            merged[key] = config[key]
    others = sorted(k for k in config if k != "text_config" and k not in merged)
    notes.append(
        "read the text model from text_config"
        + (f"; wrapper fields not read: {', '.join(others)}" if others else "")
        + "."
    )
    return merged, "text_config."


def _model_type(config: Mapping[str, Any], data: Mapping[str, Any], prefix: str) -> str:
    """The supported ``model_type`` of the text model (or of the wrapper when the text model
    has none)."""
    field, value = prefix + "model_type", data.get("model_type")
    if value is None and prefix:
        field, value = "model_type", config.get("model_type")
    supported = ", ".join(SUPPORTED_MODEL_TYPES)
    if not isinstance(value, str):
        raise PlannerError(field, f"expected a string, got {shown(value)}", supported)
    if value not in _BUILDERS:
        raise PlannerError(field, f"unsupported model_type {shown(value)}", supported)
    return value


def _schema_error(exc: ValidationError, f: _Fields) -> PlannerError:
    """The model schema's refusal, naming the config field the value came from where it is
    known (``hidden_size: 1073741824 is out of range``), else the schema's field."""
    err = pydantic_error_to_planner(exc, "model")
    leaf = err.field.rsplit(".", 1)[-1]
    source = _HF_NAMES.get(leaf, leaf)
    if source not in f.data:
        return err
    return PlannerError(f.path(source), err.message, err.valid)


def spec_from_hf_config(
    config: Mapping[str, Any], name: str | None = None
) -> tuple[ModelSpec, list[str]]:
    """A planner ModelSpec from a Hugging Face ``config.json`` mapping, and notes on what was
    approximated, not counted or not read. Raises PlannerError on an unsupported model_type, a
    missing required field or values the schema cannot hold."""
    if not isinstance(config, Mapping):
        raise PlannerError("config", "expected a JSON object", "a Hugging Face config.json")
    check_keys(config, "config")
    notes: list[str] = []
    data, prefix = _text_config(config, notes)
    model_type = _model_type(config, data, prefix)
    f = _Fields(data, model_type, prefix)
    try:
        draft = _BUILDERS[model_type](f, notes)
    except ValidationError as exc:  # a block (mixer, MLA) the schema refuses
        raise _schema_error(exc, f) from None

    source = config.get("_name_or_path") or data.get("_name_or_path")
    if source is not None and not isinstance(source, str):
        raise PlannerError("_name_or_path", f"expected a string, got {shown(source)}")
    if name is None:
        name = (source.rstrip("/").split("/")[-1].lower() if source else "") or model_type
    fields = dict(draft.fields)
    moe_fields = draft.moe
    if moe_fields is not None and not any(x.mlp.kind == "moe" for x in draft.layers):
        notes.append("MoE fields are set but no layer is an MoE layer: modelled as dense.")
        moe_fields = None
    dense_prefix = _flat_dense_prefix(draft.layers)
    try:
        if moe_fields is not None:
            dense = dense_prefix if dense_prefix is not None else 0
            fields["moe"] = MoESpec(**moe_fields, dense_layers=dense, layer_freq=1)
        if dense_prefix is None:
            fields["layer_groups"] = _compress(draft.layers)
        spec = ModelSpec(
            name=name,
            sources=[f"Hugging Face {source} config.json"] if source else [],
            **fields,
        )
    except ValidationError as exc:
        raise _schema_error(exc, f) from None
    spec = spec.model_copy(update={"description": _describe(spec, model_type)})

    unread = f.unread()
    ignored = [k for k in unread if k in NO_COST_FIELDS]
    unknown = [k for k in unread if k not in NO_COST_FIELDS]
    if ignored:
        notes.append("ignored (no effect on the cost model): " + ", ".join(ignored) + ".")
    if unknown:
        notes.append(
            "unknown fields, not interpreted (check they do not change the architecture): "
            + ", ".join(prefix + k for k in unknown)
            + "."
        )
    return spec, notes


# ---- files --------------------------------------------------------------------------------------
def parse_hf_config_text(text: str, what: str = "config") -> dict[str, Any]:
    """A ``config.json``'s text as a dict: strict JSON (:func:`planner.safe_io.load_json`:
    bounded size and depth, no NaN/Infinity) holding an object; errors name ``what``."""
    data = load_json(text, what, MAX_CONFIG_BYTES)
    if not isinstance(data, dict):
        raise PlannerError(
            what,
            f"expected a JSON object, got {shown(data)}",
            "a JSON object (Hugging Face config.json)",
        )
    return data


def load_hf_config(path: str | Path) -> dict[str, Any]:
    """Read a ``config.json`` (at most 1 MB of UTF-8) into a dict; every failure is a
    PlannerError naming the file."""
    what = Path(path).name or "config"
    return parse_hf_config_text(read_text(path, what, MAX_CONFIG_BYTES), what)


def _layer_yaml(layer: LayerSpec) -> str:
    d = layer.model_dump(mode="json")
    d = {part: {k: v for k, v in d[part].items() if v is not None} for part in ("mixer", "mlp")}
    return yaml.safe_dump(d, default_flow_style=True, sort_keys=False, width=1000).strip()


def to_yaml(spec: ModelSpec, notes: Sequence[str], source: str | None = None) -> str:
    """A model YAML for ``models/``: the notes as leading comments, ``source`` (the config's
    path or repo id) added to ``sources``. ``planner.load_model`` reads it back to ``spec``."""
    if source and not any(source in s for s in spec.sources):
        spec = spec.model_copy(
            update={"sources": [*spec.sources, f"Hugging Face config.json: {source}"]}
        )
    total, active = spec.param_counts()
    head = [
        "# Generated by `planner import-hf` from a Hugging Face config.json.",
        f"# Planner parameter count: {total / 1e9:.2f}B total, {active / 1e9:.2f}B active "
        "(embeddings included, MTP excluded).",
    ]
    if notes:
        head.append("# Import notes:")
    for note in notes:
        head.append(textwrap.fill(note, 98, initial_indent="# - ", subsequent_indent="#   "))
    data = spec.model_dump(mode="json")
    groups = data.pop("layer_groups")
    sources = data.pop("sources")
    order = ["name", "description"]
    ordered = {k: data[k] for k in order} | {k: v for k, v in data.items() if k not in order}
    body = yaml.safe_dump(ordered, sort_keys=False, width=10_000)
    lines = [*head, body.rstrip("\n")]
    if groups is not None:
        lines.append("layer_groups:")
        flow: dict[LayerSpec, str] = {}  # each distinct layer dumped once (10,000-layer stacks)
        for g in spec.layer_groups or []:
            lines.append(f"  - repeat: {g.repeat}")
            lines.append("    layers:")
            for x in g.layers:
                if x not in flow:
                    flow[x] = _layer_yaml(x)
                lines.append(f"      - {flow[x]}")
    tail = yaml.safe_dump({"sources": sources}, sort_keys=False, width=10_000)
    lines.append(tail.rstrip("\n"))
    return "\n".join(lines) + "\n"
