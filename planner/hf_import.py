"""Import a Hugging Face ``config.json`` as a planner :class:`ModelSpec`.

``spec_from_hf_config`` maps the architecture fields of the supported ``model_type`` values onto
the planner's schema and returns notes for everything it could not express exactly: fields that
matter for cost but have no planner equivalent (biases, attention sinks, Mamba-1 internals...),
approximations it made (Nemotron-H MLP-only layers merged into the previous layer) and every field
it did not read (split into "no effect on cost" and "unknown"). Nothing is guessed: a missing
required field is a :class:`PlannerError` naming it.

Field names follow ``transformers`` ``src/transformers/models/<type>/configuration_<type>.py``
(see ``shared/reference/libraries.md`` section 3.5). Multimodal repos nest the text model under
``text_config``; it is read from there.
"""

from __future__ import annotations

import json
import math
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from planner.errors import PlannerError, pydantic_error_to_planner
from planner.specs.blocks import (
    AttentionMixer,
    DenseMLP,
    LayerGroup,
    LayerSpec,
    Mamba2Mixer,
    MoEMLP,
    NoMLP,
)
from planner.specs.model import Activation, MLASpec, ModelSpec, MoESpec

MAX_CONFIG_BYTES = 1_000_000

LLAMA_LIKE = ("llama", "mistral", "mixtral", "qwen2", "qwen3", "qwen2_moe", "qwen3_moe")
SUPPORTED_MODEL_TYPES = (*LLAMA_LIKE, "deepseek_v3", "gpt_oss", "jamba", "nemotron_h")

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

_GATED = {"silu": "swiglu", "swish": "swiglu"}
_GATED_GELU = ("gelu", "gelu_new", "gelu_pytorch_tanh", "gelu_fast")
_MISSING = object()


class _Fields:
    """The config mapping of one text model; records which fields were read."""

    def __init__(self, data: Mapping[str, Any], model_type: str, prefix: str) -> None:
        self.data = data
        self.model_type = model_type
        self.prefix = prefix
        self.used: set[str] = {"model_type"}

    def path(self, key: str) -> str:
        return self.prefix + key

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def consume(self, *keys: str) -> None:
        """Mark fields as handled without reading them."""
        self.used.update(keys)

    def get(self, key: str, default: Any = None) -> Any:
        self.used.add(key)
        value = self.data.get(key)
        return default if value is None else value

    def require(self, key: str) -> Any:
        self.used.add(key)
        value = self.data.get(key)
        if value is None:
            raise PlannerError(
                self.path(key),
                f"required for model_type '{self.model_type}' but missing from the config",
                "the value from the model's config.json",
            )
        return value

    def integer(self, key: str, default: Any = _MISSING, minimum: int = 1) -> int:
        """An integer field >= ``minimum``; required unless ``default`` is given."""
        value = self.require(key) if default is _MISSING else self.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise PlannerError(self.path(key), f"expected an integer >= {minimum}, got {value!r}")
        return value

    def flag(self, key: str, default: bool) -> bool:
        value = self.get(key, default)
        if not isinstance(value, bool):
            raise PlannerError(self.path(key), f"expected true or false, got {value!r}")
        return value

    def unread(self) -> list[str]:
        return sorted(k for k in self.data if k not in self.used)


@dataclass
class _Draft:
    """What a builder extracts: ModelSpec fields, one LayerSpec per planner layer, the MoE block."""

    fields: dict[str, Any]
    layers: list[LayerSpec]
    moe: dict[str, Any] | None = None


# ---- shared pieces ------------------------------------------------------------------------------
def _gated_activation(f: _Fields, notes: list[str]) -> Activation:
    """Gated MLPs (Llama-style gate/up/down): silu -> swiglu, gelu -> geglu."""
    if not f.has("hidden_act"):
        notes.append("hidden_act missing: the transformers default 'silu' (SwiGLU) was used.")
    act = f.get("hidden_act", "silu")
    if act in _GATED:
        return "swiglu"
    if act in _GATED_GELU:
        return "geglu"
    raise PlannerError(
        f.path("hidden_act"),
        f"activation '{act}' of a gated MLP is not supported",
        "silu (SwiGLU) or gelu (GeGLU)",
    )


def _head_dim(f: _Fields, hidden: int, heads: int, required: bool = False) -> int:
    """Explicit ``head_dim`` (Qwen3, gpt-oss: heads x head_dim != hidden) or hidden / heads."""
    if f.has("head_dim") or required:
        return f.integer("head_dim")
    f.consume("head_dim")
    if hidden % heads:
        raise PlannerError(
            f.path("head_dim"),
            f"missing, and num_attention_heads ({heads}) does not divide hidden_size ({hidden})",
            "an explicit head_dim",
        )
    return hidden // heads


def _windows(f: _Fields, n: int) -> list[int | None]:
    """Sliding-window size per layer (None: full causal attention)."""
    f.consume("sliding_window")
    types = f.get("layer_types")
    if types is not None:
        valid = ("full_attention", "sliding_attention")
        if not isinstance(types, list) or len(types) != n:
            raise PlannerError(
                f.path("layer_types"),
                f"expected a list of {n} layer types (one per num_hidden_layers)",
                ", ".join(valid),
            )
        bad = sorted({str(t) for t in types if t not in valid})
        if bad:
            raise PlannerError(
                f.path("layer_types"),
                f"unsupported layer type(s): {', '.join(bad)}",
                ", ".join(valid),
            )
        window = f.integer("sliding_window") if "sliding_attention" in types else None
        f.consume("use_sliding_window", "max_window_layers")
        return [window if t == "sliding_attention" else None for t in types]
    if f.model_type.startswith("qwen"):
        # Qwen2/3: the window applies only when use_sliding_window, to layers >= max_window_layers.
        if not f.flag("use_sliding_window", False):
            f.consume("max_window_layers")
            return [None] * n
        first = f.integer("max_window_layers", minimum=0)
        window = f.integer("sliding_window")
        return [window if i >= first else None for i in range(n)]
    return [f.integer("sliding_window") if f.has("sliding_window") else None] * n


def _attention_bias_note(f: _Fields, notes: list[str]) -> None:
    if f.flag("attention_bias", False):
        notes.append("attention_bias is true: the attention projection biases are not counted.")


def _mlp_bias_note(f: _Fields, notes: list[str]) -> None:
    if f.flag("mlp_bias", False):
        notes.append("mlp_bias is true: the MLP biases are not counted.")


def _quantization_note(f: _Fields, notes: list[str]) -> None:
    q = f.get("quantization_config")
    if q is not None:
        method = q.get("quant_method", "?") if isinstance(q, dict) else "?"
        notes.append(
            f"quantization_config ({method}) describes the released weights; parameters are "
            "counted as elements and the training precision is a run option (--precision)."
        )


def _common_fields(f: _Fields) -> dict[str, Any]:
    """Vocabulary, tying and positions (RoPE models: no learned position table)."""
    return {
        "vocab": f.integer("vocab_size"),
        "tied_embeddings": f.flag("tie_word_embeddings", False),
        "learned_position_embeddings": False,
        "max_positions": f.integer("max_position_embeddings", default=2048),
    }


# ---- builders -----------------------------------------------------------------------------------
def _llama_like(f: _Fields, notes: list[str]) -> _Draft:
    """llama, mistral, mixtral, qwen2, qwen3, qwen2_moe, qwen3_moe."""
    mt = f.model_type
    n = f.integer("num_hidden_layers")
    hidden = f.integer("hidden_size")
    heads = f.integer("num_attention_heads")
    kv = f.integer("num_key_value_heads", default=heads)
    head_dim = _head_dim(f, hidden, heads, required=mt in ("qwen3", "qwen3_moe"))
    activation = _gated_activation(f, notes)
    windows = _windows(f, n)
    _mlp_bias_note(f, notes)
    if mt in ("qwen2", "qwen2_moe"):
        f.consume("attention_bias")
        notes.append(
            f"Qwen2 attention has q/k/v biases ({heads * head_dim + 2 * kv * head_dim} per "
            "layer); they are not counted."
        )
    else:
        _attention_bias_note(f, notes)
    if mt in ("qwen3", "qwen3_moe"):
        notes.append("Qwen3 QK-norm weights (2 x head_dim per layer) are not counted.")

    moe: dict[str, Any] | None = None
    is_moe = [False] * n
    ffn = None
    if mt == "mixtral":
        if f.has("num_local_experts"):
            experts = f.integer("num_local_experts")
            f.consume("num_experts")
        else:
            experts = f.integer("num_experts")
            f.consume("num_local_experts")
        ffn = f.integer("intermediate_size")
        moe = {
            "experts": experts,
            "top_k": f.integer("num_experts_per_tok"),
            "expert_ffn_hidden": ffn,
        }
        is_moe = [True] * n
    elif mt in ("qwen2_moe", "qwen3_moe"):
        experts = f.integer("num_experts", default=0, minimum=0)
        step = f.integer("decoder_sparse_step", default=1)
        only_dense = f.get("mlp_only_layers", [])
        if not isinstance(only_dense, list) or not all(isinstance(i, int) for i in only_dense):
            raise PlannerError(f.path("mlp_only_layers"), "expected a list of layer indices")
        is_moe = [experts > 0 and i not in only_dense and (i + 1) % step == 0 for i in range(n)]
        moe = {
            "experts": experts,
            "top_k": f.integer("num_experts_per_tok") if experts else 1,
            "expert_ffn_hidden": f.integer("moe_intermediate_size") if experts else 1,
        }
        if mt == "qwen2_moe" and experts:
            shared = f.integer("shared_expert_intermediate_size", default=0, minimum=0)
            if shared:
                moe.update(shared_experts=1, shared_expert_ffn_hidden=shared)
                notes.append("Qwen2-MoE shared_expert_gate (hidden x 1 per layer) not counted.")
        if all(is_moe):
            ffn = f.integer("intermediate_size", default=moe["expert_ffn_hidden"])
    if ffn is None:
        ffn = f.integer("intermediate_size")

    layers = [
        LayerSpec(mixer=AttentionMixer(window=w), mlp=MoEMLP() if m else DenseMLP())
        for w, m in zip(windows, is_moe, strict=True)
    ]
    fields = {
        "layers": n,
        "hidden": hidden,
        "ffn_hidden": ffn,
        "activation": activation,
        "heads": heads,
        "kv_heads": kv,
        "head_dim": head_dim,
        **_common_fields(f),
    }
    return _Draft(fields, layers, moe)


def _deepseek_v3(f: _Fields, notes: list[str]) -> _Draft:
    """DeepSeek-V3: MLA, shared + routed experts after first_k_dense_replace dense layers, MTP."""
    n = f.integer("num_hidden_layers")
    hidden = f.integer("hidden_size")
    heads = f.integer("num_attention_heads")
    kv = f.integer("num_key_value_heads", default=heads)
    if kv != heads:
        notes.append(f"num_key_value_heads ({kv}) ignored: MLA decompresses K/V for every head.")
    if f.has("head_dim"):
        notes.append(
            "head_dim ignored: MLA widths come from qk_nope_head_dim, qk_rope_head_dim and "
            "v_head_dim (transformers sets head_dim = qk_rope_head_dim)."
        )
    f.consume("head_dim")
    q_rank = f.integer("q_lora_rank") if f.has("q_lora_rank") else None
    f.consume("q_lora_rank")
    mla = MLASpec(
        q_lora_rank=q_rank,
        kv_lora_rank=f.integer("kv_lora_rank"),
        qk_nope_head_dim=f.integer("qk_nope_head_dim"),
        qk_rope_head_dim=f.integer("qk_rope_head_dim"),
        v_head_dim=f.integer("v_head_dim"),
    )
    activation = _gated_activation(f, notes)
    _attention_bias_note(f, notes)
    _quantization_note(f, notes)
    experts = f.integer("n_routed_experts", default=0, minimum=0)
    first_dense = f.integer("first_k_dense_replace", default=0, minimum=0)
    freq = f.integer("moe_layer_freq", default=1)
    is_moe = [experts > 0 and i >= first_dense and i % freq == 0 for i in range(n)]
    moe = None
    if experts:
        width = f.integer("moe_intermediate_size")
        shared = f.integer("n_shared_experts", default=0, minimum=0)
        moe = {
            "experts": experts,
            "top_k": f.integer("num_experts_per_tok"),
            "expert_ffn_hidden": width,
            "shared_experts": shared,
            "shared_expert_ffn_hidden": width if shared else None,
        }
        notes.append(
            "router e_score_correction_bias (n_routed_experts per MoE layer) is not counted; "
            "group-limited routing (n_group/topk_group) is not modelled."
        )
    mtp = f.integer("num_nextn_predict_layers", default=0, minimum=0)
    if mtp:
        notes.append(
            f"num_nextn_predict_layers = {mtp} -> mtp_layers (excluded from total_params, as "
            "DeepSeek reports 671B without the MTP module)."
        )
    layers = [LayerSpec(mlp=MoEMLP() if m else DenseMLP()) for m in is_moe]
    fields = {
        "layers": n,
        "hidden": hidden,
        "ffn_hidden": f.integer("intermediate_size"),
        "activation": activation,
        "heads": heads,
        "mla": mla,
        "mtp_layers": mtp,
        **_common_fields(f),
    }
    return _Draft(fields, layers, moe)


def _gpt_oss(f: _Fields, notes: list[str]) -> _Draft:
    """gpt-oss: MoE in every layer, alternating sliding-window / full attention, sinks, biases."""
    n = f.integer("num_hidden_layers")
    hidden = f.integer("hidden_size")
    heads = f.integer("num_attention_heads")
    kv = f.integer("num_key_value_heads", default=heads)
    head_dim = _head_dim(f, hidden, heads, required=True)
    experts = f.integer("num_local_experts")
    top_k = [f.integer(k) for k in ("num_experts_per_tok", "experts_per_token") if f.has(k)]
    f.consume("num_experts_per_tok", "experts_per_token")
    if not top_k:
        raise PlannerError(
            f.path("num_experts_per_tok"),
            "required for model_type 'gpt_oss' but missing from the config",
            "num_experts_per_tok or experts_per_token",
        )
    if len(set(top_k)) > 1:
        raise PlannerError(
            f.path("experts_per_token"),
            f"disagrees with num_experts_per_tok ({top_k[0]} vs {top_k[1]})",
        )
    ffn = f.integer("intermediate_size")
    if not f.has("layer_types"):
        f.require("layer_types")
    windows = _windows(f, n)
    activation = _gated_activation(f, notes)
    f.consume("attention_bias", "swiglu_limit")
    q, kvw = heads * head_dim, kv * head_dim
    biases = n * (q + 2 * kvw + hidden + heads + experts * (2 * ffn + hidden) + experts)
    notes.append(
        f"not counted: attention q/k/v/o biases, attention sinks (1 per head), expert and "
        f"router biases = {biases / 1e6:.1f}M parameters in all."
    )
    notes.append(
        "gpt-oss experts use a clamped SwiGLU variant (swiglu_limit, alpha 1.702, up + 1); "
        "counted and costed as a standard SwiGLU (same three matrices)."
    )
    notes.append(
        "active params here include the input embedding; OpenAI's published active counts "
        "(5.13B for 120b, 3.61B for 20b) exclude it."
    )
    _quantization_note(f, notes)
    layers = [LayerSpec(mixer=AttentionMixer(window=w), mlp=MoEMLP()) for w in windows]
    fields = {
        "layers": n,
        "hidden": hidden,
        "ffn_hidden": ffn,
        "activation": activation,
        "heads": heads,
        "kv_heads": kv,
        "head_dim": head_dim,
        **_common_fields(f),
    }
    moe = {"experts": experts, "top_k": top_k[0], "expert_ffn_hidden": ffn}
    return _Draft(fields, layers, moe)


def _mamba1_params(hidden: int, d_in: int, d_state: int, d_conv: int, dt_rank: int) -> int:
    """Parameters of one Jamba Mamba-1 mixer (in/x/dt/out projections, conv with bias, A, D,
    and Jamba's dt/B/C RMSNorms)."""
    return (
        hidden * 2 * d_in
        + d_in * (d_conv + 1)
        + d_in * (dt_rank + 2 * d_state)
        + dt_rank * d_in
        + d_in
        + d_in * d_state
        + d_in
        + dt_rank
        + 2 * d_state
        + d_in * hidden
    )


def _period_offset(f: _Fields, period_key: str, offset_key: str) -> tuple[int, int]:
    period = f.integer(period_key)
    offset = f.integer(offset_key, minimum=0)
    if offset >= period:
        raise PlannerError(f.path(offset_key), f"must be below {period_key} ({period})")
    return period, offset


def _jamba(f: _Fields, notes: list[str]) -> _Draft:
    """Jamba: Mamba-1 layers with one attention layer per attn_layer_period, MoE every
    expert_layer_period-th layer."""
    n = f.integer("num_hidden_layers")
    hidden = f.integer("hidden_size")
    heads = f.integer("num_attention_heads")
    kv = f.integer("num_key_value_heads", default=heads)
    head_dim = _head_dim(f, hidden, heads)
    activation = _gated_activation(f, notes)
    attn_period, attn_offset = _period_offset(f, "attn_layer_period", "attn_layer_offset")
    exp_period, exp_offset = _period_offset(f, "expert_layer_period", "expert_layer_offset")
    experts = f.integer("num_experts", default=1)
    d_state, d_conv, expand = (
        f.integer(k) for k in ("mamba_d_state", "mamba_d_conv", "mamba_expand")
    )
    dt_rank_raw = f.get("mamba_dt_rank", "auto")
    dt_rank = math.ceil(hidden / 16) if dt_rank_raw == "auto" else f.integer("mamba_dt_rank")
    f.consume("mamba_conv_bias", "mamba_proj_bias")
    if f.get("mamba_proj_bias", False):
        notes.append("mamba_proj_bias is true: the Mamba projection biases are not counted.")
    window = f.integer("sliding_window") if f.has("sliding_window") else None
    f.consume("sliding_window")
    head = 64 if (expand * hidden) % 64 == 0 else expand * hidden
    mamba = Mamba2Mixer(d_state=d_state, d_conv=d_conv, expand=expand, head_dim=head, n_groups=1)
    layers = [
        LayerSpec(
            mixer=AttentionMixer(window=window) if i % attn_period == attn_offset else mamba,
            mlp=MoEMLP() if experts > 1 and i % exp_period == exp_offset else DenseMLP(),
        )
        for i in range(n)
    ]
    n_mamba = sum(isinstance(x.mixer, Mamba2Mixer) for x in layers)
    d_in = expand * hidden
    exact = _mamba1_params(hidden, d_in, d_state, d_conv, dt_rank)
    probe = ModelSpec(name="probe", layers=1, hidden=hidden, ffn_hidden=1, heads=1, vocab=1)
    mapped = probe.mixer_params(mamba)
    notes.append(
        f"Jamba's Mamba-1 layers are modelled as Mamba2Mixer (SSD scan, head_dim {head} as a "
        f"stand-in, 1 B/C group, d_state {d_state}); dt_rank {dt_rank}, x_proj/dt_proj and the "
        f"per-channel A differ: {mapped / 1e6:.2f}M vs {exact / 1e6:.2f}M parameters per Mamba "
        f"layer ({(mapped - exact) * n_mamba / 1e6:+.0f}M over {n_mamba} layers); the "
        "Mamba-1 selective scan's cost is modelled by the SSD scan."
    )
    notes.append(
        "Jamba attention layers use no positional encoding; the planner charges RoPE "
        "elementwise work on them (negligible)."
    )
    moe = None
    if experts > 1:
        moe = {
            "experts": experts,
            "top_k": f.integer("num_experts_per_tok"),
            "expert_ffn_hidden": f.integer("intermediate_size"),
        }
    fields = {
        "layers": n,
        "hidden": hidden,
        "ffn_hidden": f.integer("intermediate_size"),
        "activation": activation,
        "heads": heads,
        "kv_heads": kv,
        "head_dim": head_dim,
        **_common_fields(f),
    }
    return _Draft(fields, layers, moe)


def _first_int(f: _Fields, *keys: str) -> int | None:
    """The first present of several spellings of one field (HF vs vLLM NemotronHConfig)."""
    f.consume(*keys)
    for key in keys:
        if f.has(key):
            return f.integer(key)
    return None


def _first_required(f: _Fields, *keys: str) -> int:
    value = _first_int(f, *keys)
    return f.integer(keys[0]) if value is None else value


def _nemotron_h(f: _Fields, notes: list[str]) -> _Draft:
    """Nemotron-H: hybrid_override_pattern of M (Mamba-2), * (attention), - (MLP), E (MoE)."""
    pattern = f.require("hybrid_override_pattern")
    n_hf = f.integer("num_hidden_layers")
    valid = "a string of M (Mamba-2), * (attention), - (MLP), E (MoE)"
    if not isinstance(pattern, str) or len(pattern) != n_hf or set(pattern) - set("M*-E"):
        raise PlannerError(
            f.path("hybrid_override_pattern"),
            f"expected {n_hf} characters (num_hidden_layers) from 'M*-E', got {pattern!r}",
            valid,
        )
    hidden = f.integer("hidden_size")
    heads = f.integer("num_attention_heads")
    kv = f.integer("num_key_value_heads", default=heads)
    head_dim = _first_int(f, "attention_head_dim", "head_dim")
    if head_dim is None:
        head_dim = _head_dim(f, hidden, heads)
    act = f.get("mlp_hidden_act", f.get("hidden_act"))
    if act == "relu2":
        activation: Activation = "relu2"
    elif act in _GATED_GELU:
        activation = "gelu"
    else:
        raise PlannerError(
            f.path("mlp_hidden_act"),
            f"activation {act!r} of the (non-gated) Nemotron-H MLP is not supported",
            "relu2 or gelu",
        )
    m_heads = f.integer("mamba_num_heads")
    m_head_dim = f.integer("mamba_head_dim")
    expand = _first_required(f, "expand", "mamba_expand")
    if m_heads * m_head_dim != expand * hidden:
        raise PlannerError(
            f.path("mamba_num_heads"),
            f"mamba_num_heads x mamba_head_dim = {m_heads * m_head_dim} differs from expand x "
            f"hidden_size = {expand * hidden}; the planner derives the Mamba inner width from "
            "expand",
            f"mamba_num_heads = {expand * hidden // m_head_dim}",
        )
    chunk = _first_int(f, "chunk_size", "mamba_chunk_size")
    if chunk is None:
        notes.append("chunk_size missing: the planner's default SSD chunk (256) was used.")
        chunk = 256
    mamba = Mamba2Mixer(
        d_state=_first_required(f, "ssm_state_size", "mamba_d_state"),
        d_conv=_first_required(f, "conv_kernel", "mamba_d_conv"),
        expand=expand,
        head_dim=m_head_dim,
        n_groups=_first_required(f, "n_groups", "mamba_n_groups"),
        chunk=chunk,
    )
    if not f.flag("use_conv_bias", True) or not f.flag("mamba_conv_bias", True):
        notes.append("the Mamba conv has no bias here; the planner counts one (d_conv+1 taps).")
    for key in ("mamba_proj_bias", "use_bias", "mlp_bias", "attention_bias"):
        if f.flag(key, False):
            notes.append(f"{key} is true: those biases are not counted.")
    window = f.integer("sliding_window") if f.has("sliding_window") else None
    f.consume("sliding_window")

    moe = None
    if "E" in pattern:
        width = f.integer("moe_intermediate_size")
        shared = f.integer("n_shared_experts", default=0, minimum=0)
        moe = {
            "experts": f.integer("n_routed_experts"),
            "top_k": f.integer("num_experts_per_tok"),
            "expert_ffn_hidden": width,
            "shared_experts": shared,
            "shared_expert_ffn_hidden": (
                f.integer("moe_shared_expert_intermediate_size", default=width) if shared else None
            ),
        }
    else:
        f.consume("n_routed_experts", "moe_intermediate_size", "num_experts_per_tok")

    layers: list[LayerSpec] = []
    for i, c in enumerate(pattern):
        if c in "M*":
            mixer = mamba if c == "M" else AttentionMixer(window=window)
            layers.append(LayerSpec(mixer=mixer, mlp=NoMLP()))
            continue
        if not layers or layers[-1].mlp.kind != "none":
            raise PlannerError(
                f.path("hybrid_override_pattern"),
                f"layer {i} ('{c}') has no token mixer and does not follow an M or * layer: "
                "a channel-mixer-only layer is not expressible in the planner's schema",
                "each '-' or 'E' right after an 'M' or '*'",
            )
        mlp = DenseMLP() if c == "-" else MoEMLP()
        layers[-1] = LayerSpec(mixer=layers[-1].mixer, mlp=mlp)
    counts = {c: pattern.count(c) for c in "M*-E"}
    notes.append(
        f"hybrid_override_pattern has {n_hf} layers ({counts['M']} Mamba-2, {counts['*']} "
        f"attention, {counts['-']} MLP-only, {counts['E']} MoE-only); the planner's layers need "
        "a token mixer, so each MLP/MoE-only layer is merged into the layer before it as its "
        f"channel mixer: {len(layers)} planner layers. Parameters are exact (one norm per HF "
        "layer); pipeline stages split at merged-layer boundaries only."
    )
    fields = {
        "layers": len(layers),
        "hidden": hidden,
        "ffn_hidden": f.integer("intermediate_size"),
        "activation": activation,
        "heads": heads,
        "kv_heads": kv,
        "head_dim": head_dim,
        **_common_fields(f),
    }
    return _Draft(fields, layers, moe)


_BUILDERS = {
    **dict.fromkeys(LLAMA_LIKE, _llama_like),
    "deepseek_v3": _deepseek_v3,
    "gpt_oss": _gpt_oss,
    "jamba": _jamba,
    "nemotron_h": _nemotron_h,
}


# ---- assembling the spec ------------------------------------------------------------------------
def _compress(layers: list[LayerSpec]) -> list[LayerGroup]:
    """Layer groups for a per-layer list: one repeated period when the stack has one, else
    greedy runs of repeated blocks (longest coverage first) and single layers in between."""
    n = len(layers)
    for p in range(1, n // 2 + 1):
        if n % p == 0 and all(layers[i] == layers[i % p] for i in range(n)):
            return [LayerGroup(repeat=n // p, layers=layers[:p])]
    groups: list[LayerGroup] = []
    loose: list[LayerSpec] = []
    i = 0
    while i < n:
        best_p, best_r = 1, 1
        for p in range(1, (n - i) // 2 + 1):
            r = 1
            while i + (r + 1) * p <= n and layers[i + r * p : i + (r + 1) * p] == layers[i : i + p]:
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
    if not isinstance(text, dict):
        raise PlannerError("text_config", "expected a mapping of fields")
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


def spec_from_hf_config(
    config: Mapping[str, Any], name: str | None = None
) -> tuple[ModelSpec, list[str]]:
    """A planner ModelSpec from a Hugging Face ``config.json`` mapping, and notes on what was
    approximated, not counted or not read. Raises PlannerError on an unsupported model_type, a
    missing required field or values the schema cannot hold."""
    if not isinstance(config, Mapping):
        raise PlannerError("config", "expected a JSON object", "a Hugging Face config.json")
    notes: list[str] = []
    data, prefix = _text_config(config, notes)
    model_type = data.get("model_type") or config.get("model_type")
    if model_type not in _BUILDERS:
        raise PlannerError(
            prefix + "model_type",
            f"unsupported model_type {model_type!r}",
            ", ".join(SUPPORTED_MODEL_TYPES),
        )
    f = _Fields(data, model_type, prefix)
    draft = _BUILDERS[model_type](f, notes)

    source = config.get("_name_or_path") or data.get("_name_or_path")
    if name is None:
        name = str(source).rstrip("/").split("/")[-1].lower() if source else model_type
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
        raise pydantic_error_to_planner(exc, "model") from None
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
def load_hf_config(path: str | Path) -> dict[str, Any]:
    """Read a ``config.json`` (at most 1 MB) into a dict; every failure is a PlannerError."""
    p = Path(path)
    if not p.is_file():
        raise PlannerError("config", f"file not found: {p}", "a path to a config.json")
    if p.stat().st_size > MAX_CONFIG_BYTES:
        raise PlannerError("config", f"{p} is larger than 1 MB", "a config.json under 1 MB")
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise PlannerError("config", f"{p} is not UTF-8 text", "a JSON object") from None
    except json.JSONDecodeError as exc:
        raise PlannerError(
            "config",
            f"invalid JSON in {p.name} at line {exc.lineno}, column {exc.colno}: {exc.msg}",
            "a JSON object (Hugging Face config.json)",
        ) from None
    if not isinstance(data, dict):
        raise PlannerError(
            "config", f"expected a JSON object, got {type(data).__name__}", "a JSON object"
        )
    return data


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
        for g in spec.layer_groups or []:
            lines.append(f"  - repeat: {g.repeat}")
            lines.append("    layers:")
            lines.extend(f"      - {_layer_yaml(x)}" for x in g.layers)
    tail = yaml.safe_dump({"sources": sources}, sort_keys=False, width=10_000)
    lines.append(tail.rstrip("\n"))
    return "\n".join(lines) + "\n"
