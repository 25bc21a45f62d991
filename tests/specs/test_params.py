"""Parameter counts of the shipped models against published totals.

Every expected figure below is a published number (paper, model card or the parameter count of the
released checkpoint); none is an output of the planner.
"""

from __future__ import annotations

import pytest

import planner

# (model id, published total params, published active params or None, relative tolerance total,
#  relative tolerance active, source)
PUBLISHED = [
    # Brown et al. 2020, "Language Models are Few-Shot Learners" (arXiv 2005.14165), Table 2.1:
    # "GPT-3 175B ... n_params 175.0B".
    ("gpt3-175b", 175.0e9, None, 0.01, None),
    # Llama Team 2024, "The Llama 3 Herd of Models" (arXiv 2407.21783); Hugging Face model cards
    # meta-llama/Llama-3.1-8B / -70B / -405B: 8.03B, 70.6B, 405.9B... (safetensors metadata
    # "8.03B", "70.6B", "406B"; 405B listed as 405.9B in the Meta collection).
    ("llama3.1-8b", 8.03e9, None, 0.01, None),
    ("llama3.1-70b", 70.6e9, None, 0.01, None),
    ("llama3.1-405b", 405.9e9, None, 0.01, None),
    # Jiang et al. 2024, "Mixtral of Experts" (arXiv 2401.04088), section 2: 47B total, 13B active;
    # Hugging Face mistralai/Mixtral-8x7B-v0.1 model card: 46.7B total, 12.9B active per token.
    ("mixtral-8x7b", 46.7e9, 12.9e9, 0.01, 0.01),
    # DeepSeek-AI 2024, "DeepSeek-V3 Technical Report" (arXiv 2412.19437), abstract and section 4.2:
    # 671B total parameters, 37B activated per token (the MTP module not counted).
    ("deepseek-v3", 671e9, 37e9, 0.01, 0.02),
    # Qwen Team 2025, Qwen3 Technical Report (arXiv 2505.09388), Table 2; Hugging Face
    # Qwen/Qwen3-30B-A3B model card: "Number of Parameters: 30.5B in total and 3.3B activated".
    ("qwen3-30b-a3b", 30.5e9, 3.3e9, 0.02, 0.02),
    # Touvron et al. 2023, "Llama 2" (arXiv 2307.09288), Table 1 names 7B/13B/70B; the released
    # checkpoints hold 6.74B / 13.0B / 69.0B parameters (Hugging Face meta-llama/Llama-2-*-hf).
    ("llama2-7b", 6.74e9, None, 0.01, None),
    ("llama2-13b", 13.0e9, None, 0.01, None),
    ("llama2-70b", 69.0e9, None, 0.01, None),
]


@pytest.mark.parametrize(("model_id", "total", "active", "rtol", "rtol_active"), PUBLISHED)
def test_published_param_counts(model_id, total, active, rtol, rtol_active):
    spec = planner.load_model(model_id)
    got_total, got_active = spec.param_counts()
    assert got_total == pytest.approx(total, rel=rtol), f"{model_id} total {got_total / 1e9:.3f}B"
    if active is None:
        assert got_active == got_total, "a dense model activates every parameter"
    else:
        assert got_active == pytest.approx(active, rel=rtol_active), (
            f"{model_id} active {got_active / 1e9:.3f}B"
        )
        assert got_active < got_total
    assert spec.total_params == got_total
    assert spec.active_params == got_active


# Exact element counts of the released Hugging Face checkpoints (sum of tensor sizes in the
# safetensors files, as printed by `sum(p.numel() for p in model.parameters())`). These
# architectures have no biases, so the planner's count should match to the last parameter.
EXACT_CHECKPOINT_COUNTS = [
    ("llama2-7b", 6_738_415_616),  # meta-llama/Llama-2-7b-hf
    ("llama2-13b", 13_015_864_320),  # meta-llama/Llama-2-13b-hf
    ("llama2-70b", 68_976_648_192),  # meta-llama/Llama-2-70b-hf
    ("llama3.1-8b", 8_030_261_248),  # meta-llama/Llama-3.1-8B
    ("llama3.1-70b", 70_553_706_496),  # meta-llama/Llama-3.1-70B
    ("llama3.1-405b", 405_853_388_800),  # meta-llama/Llama-3.1-405B
    ("mixtral-8x7b", 46_702_792_704),  # mistralai/Mixtral-8x7B-v0.1
]


@pytest.mark.parametrize(("model_id", "count"), EXACT_CHECKPOINT_COUNTS)
def test_exact_checkpoint_counts(model_id, count):
    assert planner.load_model(model_id).total_params == pytest.approx(count, rel=1e-6)


def test_gpt_closed_form(make_gpt):
    """GPT with LayerNorm (weight + bias), no biases elsewhere: 12 L h^2 + 4 L h + V h (+ V h).

    Kaplan et al. 2020 (arXiv 2001.08361) section 2.1: N ~= 12 n_layer d_model^2 for d_ff = 4 d.
    """
    L, h, V = 6, 768, 50000
    untied = make_gpt(layers=L, hidden=h, heads=12, vocab=V)
    layer = 12 * h * h + 2 * 2 * h  # QKV + out (4h^2), MLP (8h^2), two LayerNorms
    assert untied.total_params == L * layer + 2 * V * h + h  # + final norm (weight)
    tied = make_gpt(layers=L, hidden=h, heads=12, vocab=V, tied_embeddings=True)
    assert untied.total_params - tied.total_params == V * h
    pos = make_gpt(
        layers=L, hidden=h, heads=12, vocab=V, learned_position_embeddings=True, max_positions=1024
    )
    assert pos.total_params - untied.total_params == 1024 * h


def test_gqa_and_swiglu_shapes():
    """Llama-style block: Q and O are h x h, K and V are h x (kv_heads * d_head); SwiGLU has 3."""
    h, heads, kv, ffn = 4096, 32, 8, 14336
    spec = planner.load_model("llama3.1-8b")
    assert (spec.hidden, spec.heads, spec.n_kv_heads, spec.ffn_hidden) == (h, heads, kv, ffn)
    d = h // heads
    assert spec.attention_params() == 2 * h * h + 2 * h * kv * d
    assert spec.mlp_params(ffn) == 3 * h * ffn


def test_moe_counts_by_hand():
    """Mixtral: every layer has 8 experts of 3 h f plus a router of h x 8; 2 are active."""
    spec = planner.load_model("mixtral-8x7b")
    h, f, L = 4096, 14336, 32
    expert = 3 * h * f
    total, active = spec.moe_layer_params()
    assert total == 8 * expert + h * 8
    assert active == 2 * expert + h * 8
    assert spec.n_moe_layers == L
    assert spec.n_dense_layers == 0
    assert spec.total_params - spec.active_params == L * 6 * expert


def test_deepseek_layer_split():
    """DeepSeek-V3: 3 dense layers (first_k_dense_replace = 3), 58 MoE layers."""
    spec = planner.load_model("deepseek-v3")
    assert spec.n_dense_layers == 3
    assert spec.n_moe_layers == 58
