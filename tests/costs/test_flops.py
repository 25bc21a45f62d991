"""FLOP counts against closed forms (Narayanan et al. 2021; Kaplan et al. 2020; PaLM appendix B)."""

from __future__ import annotations

import pytest

import planner
from planner.costs import flops
from planner.specs.layout import Layout, Training

# Small but non-trivial GPT shapes: (layers, hidden, heads, vocab, seq_len, batch)
GPT_CASES = [
    (4, 1024, 16, 32000, 2048, 1),
    (24, 2048, 16, 51200, 1024, 4),
    (96, 12288, 96, 51200, 2048, 1),  # GPT-3 175B shapes as Megatron trains them
    (2, 256, 4, 1000, 512, 3),
]


def _layer(spec, tp=1, cp=1, seq=2048, b=1, moe=False):
    layout = Layout(tp=tp, cp=cp)
    training = Training(seq_len=seq, global_batch=b, micro_batch=b)
    return flops.layer_flops(spec, layout, training, moe)


def test_gemm_flops_is_2mnk():
    assert flops.Gemm("x", 3, 5, 7).flops == 2 * 3 * 5 * 7
    assert flops.Gemm("x", 128, 256, 512, count=4).flops == 4 * 2 * 128 * 256 * 512
    assert flops.Gemm("x", 1, 1, 1, count=0).flops == 0


@pytest.mark.parametrize(("L", "h", "a", "V", "s", "b"), GPT_CASES)
def test_gpt_layer_gemms_24bsh2(make_gpt, L, h, a, V, s, b):
    """Narayanan et al. 2021 sec. 5.1: per layer forward GEMMs 24 b s h^2 (QKV 6, out 2, MLP 16)."""
    spec = make_gpt(layers=L, hidden=h, heads=a, vocab=V)
    lf = _layer(spec, seq=s, b=b)
    assert lf.gemm_fwd_flops == pytest.approx(24 * b * s * h * h, rel=1e-12)
    by_name = {g.name: g.flops for g in lf.gemms}
    assert by_name["qkv"] == pytest.approx(6 * b * s * h * h, rel=1e-12)
    assert by_name["attn_out"] == pytest.approx(2 * b * s * h * h, rel=1e-12)
    assert by_name["mlp_fc1"] + by_name["mlp_fc2"] == pytest.approx(16 * b * s * h * h, rel=1e-12)


@pytest.mark.parametrize(("L", "h", "a", "V", "s", "b"), GPT_CASES)
def test_gpt_attention_core_4bs2h(make_gpt, L, h, a, V, s, b):
    """Scores QK^T (2 b s^2 h) plus attention over values (2 b s^2 h), no causal discount."""
    spec = make_gpt(layers=L, hidden=h, heads=a, vocab=V)
    lf = _layer(spec, seq=s, b=b)
    assert lf.attention_model_fwd_flops == pytest.approx(4 * b * s * s * h, rel=1e-12)
    # a fused causal kernel skips the masked half
    assert lf.attention_fwd_flops == pytest.approx(0.5 * lf.attention_model_fwd_flops, rel=1e-12)


@pytest.mark.parametrize(("L", "h", "a", "V", "s", "b"), GPT_CASES)
def test_narayanan_eq3_without_and_with_logits(make_gpt, L, h, a, V, s, b):
    """Eq. 3 of Narayanan et al. 2021 (SC21): 96 B s l h^2 (1 + s/6h + V/16lh).

    Forward + backward = 3x forward: 72 b s l h^2 (1 + s/6h) for the layers; full recompute adds
    one more forward of the layers (4x); the logits GEMM 2 b s h V is not recomputed (3x).
    """
    spec = make_gpt(layers=L, hidden=h, heads=a, vocab=V)
    lf = _layer(spec, seq=s, b=b)
    per_layer = lf.gemm_fwd_flops + lf.attention_model_fwd_flops
    assert 3 * L * per_layer == pytest.approx(72 * b * s * L * h * h * (1 + s / (6 * h)), rel=1e-12)

    training = Training(seq_len=s, global_batch=b, micro_batch=b, vocab_multiple=1)  # V as is
    logits = flops.logits_gemm(spec, Layout(), training)
    assert logits.flops == pytest.approx(2 * b * s * h * V, rel=1e-12)

    total = 4 * L * per_layer + 3 * logits.flops
    closed = 96 * b * s * L * h * h * (1 + s / (6 * h) + V / (16 * L * h))
    assert total == pytest.approx(closed, rel=1e-12)
    assert flops.megatron_flops_per_iteration(L, h, V, s, b) == pytest.approx(closed, rel=1e-12)


def test_megatron_eq3_published_gpt3_figure():
    """Narayanan et al. 2021 sec. 5.1 example: GPT-3 175B, B=1536, s=2048 -> ~ 4.5e18 per iter.

    96 * 1536 * 2048 * 96 * 12288^2 * (1 + 2048/(6*12288) + 51200/(16*96*12288)) = 4.49e18.
    """
    f = flops.megatron_flops_per_iteration(96, 12288, 51200, 2048, 1536)
    hand = 96 * 1536 * 2048 * 96 * 12288**2 * (1 + 2048 / 73728 + 51200 / 18874368)
    assert f == pytest.approx(hand, rel=1e-12)
    assert 4.4e18 < f < 4.6e18


def _matmul_params(spec):
    """Matmul weights per token: attention and MLP projections of every layer plus the logits."""
    return spec.layers * (spec.attention_params() + spec.mlp_params(spec.ffn_hidden)) + (
        spec.vocab * spec.hidden
    )


@pytest.mark.parametrize(
    ("L", "h", "a", "V", "s"),
    [(24, 2048, 16, 51200, 2048), (96, 12288, 96, 51200, 2048), (32, 4096, 32, 32000, 8192)],
)
def test_model_flops_per_token_dense(make_gpt, L, h, a, V, s):
    """6 N + 12 L h s for MHA with d_qk = d_v = h / heads (Kaplan et al. 2020 Table 1; PaLM app. B).

    N counts matmul parameters (logits included, embedding lookup excluded). The planner follows
    torchtitan and PaLM ("parameters excluding embeddings"), which also counts the norm weights:
    4 L h + h of them here, < 2e-4 of N for these shapes, hence the tolerance; the exact
    non-embedding form is checked below.
    """
    spec = make_gpt(layers=L, hidden=h, heads=a, vocab=V)
    expected = 6 * _matmul_params(spec) + 12 * L * h * s
    got = flops.model_flops_per_token(spec, s)
    assert got == pytest.approx(expected, rel=2e-4)
    assert got >= expected
    # PaLM appendix B / torchtitan get_dense_model_nparams_and_flops: 6 (N_total - N_embedding)
    non_embedding = spec.total_params - V * h
    assert got == pytest.approx(6 * non_embedding + 12 * L * h * s, rel=1e-12)


def test_model_flops_attention_term_is_exact(make_gpt):
    """The seq-length dependent part is exactly 12 L h per token per unit of context."""
    spec = make_gpt(layers=12, hidden=768, heads=12, vocab=50257)
    f1 = flops.model_flops_per_token(spec, 1024)
    f2 = flops.model_flops_per_token(spec, 4096)
    assert f2 - f1 == pytest.approx(12 * 12 * 768 * (4096 - 1024), rel=1e-12)


def test_model_flops_embeddings_conventions(make_gpt):
    """The input lookup and position table are not matmuls; a tied table is still the logits."""
    L, h, V, s = 4, 512, 8192, 1024
    untied = make_gpt(layers=L, hidden=h, heads=8, vocab=V)
    tied = make_gpt(layers=L, hidden=h, heads=8, vocab=V, tied_embeddings=True)
    pos = make_gpt(
        layers=L, hidden=h, heads=8, vocab=V, learned_position_embeddings=True, max_positions=4096
    )
    base = flops.model_flops_per_token(untied, s)
    assert flops.model_flops_per_token(tied, s) == pytest.approx(base, rel=1e-12)
    assert flops.model_flops_per_token(pos, s) == pytest.approx(base, rel=1e-12)


def test_model_flops_llama8b_published_scale():
    """Llama 3.1 8B at 8192: 6 * (8.03B - 0.525B embedding) + 12 * 32 * 4096 * 8192 ~ 5.79e10."""
    spec = planner.load_model("llama3.1-8b")
    n = 8_030_261_248 - 128256 * 4096
    expected = 6 * n + 12 * 32 * 4096 * 8192
    assert flops.model_flops_per_token(spec, 8192) == pytest.approx(expected, rel=1e-4)


def test_model_flops_gqa_uses_query_heads(make_gpt):
    """GQA shrinks K/V projections (in N) but not the attention core: 12 L (heads * d_head) s."""
    mha = make_gpt(layers=8, hidden=1024, heads=16, vocab=1000)
    gqa = make_gpt(layers=8, hidden=1024, heads=16, kv_heads=4, vocab=1000)
    s = 2048
    d_mha = flops.model_flops_per_token(mha, s) - 6 * (mha.active_params - 1000 * 1024)
    d_gqa = flops.model_flops_per_token(gqa, s) - 6 * (gqa.active_params - 1000 * 1024)
    assert d_mha == pytest.approx(12 * 8 * 1024 * s, rel=1e-12)
    assert d_gqa == pytest.approx(d_mha, rel=1e-12)


def test_moe_model_flops_count_active_only():
    """Mixtral: N is the active parameter count (12.9B incl. the 2 of 8 experts), not 46.7B."""
    spec = planner.load_model("mixtral-8x7b")
    s = 4096
    f = flops.model_flops_per_token(spec, s)
    attn = 12 * 32 * 4096 * s
    n_active = (f - attn) / 6
    assert n_active == pytest.approx(12.9e9 - 32000 * 4096, rel=0.01)


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_tp_splits_gemm_and_attention_flops(make_gpt, tp):
    spec = make_gpt(layers=2, hidden=2048, heads=16, vocab=32000)
    one = _layer(spec, tp=1)
    split = _layer(spec, tp=tp)
    assert split.gemm_fwd_flops * tp == pytest.approx(one.gemm_fwd_flops, rel=1e-12)
    assert split.attention_model_fwd_flops * tp == pytest.approx(
        one.attention_model_fwd_flops, rel=1e-12
    )
    training = Training(seq_len=2048, global_batch=1, vocab_multiple=1)  # 32,000 unpadded
    assert flops.logits_gemm(spec, Layout(tp=tp), training).flops * tp == pytest.approx(
        flops.logits_gemm(spec, Layout(), training).flops, rel=1e-12
    )


@pytest.mark.parametrize("tp", [2, 8])
def test_tp_splits_gqa_gemms(tp):
    spec = planner.load_model("llama3.1-8b")
    one = _layer(spec, tp=1, seq=4096)
    split = _layer(spec, tp=tp, seq=4096)
    assert split.gemm_fwd_flops * tp == pytest.approx(one.gemm_fwd_flops, rel=1e-12)
    h, f = 4096, 14336
    # Llama block: Q, O h x h; K, V h x 1024; SwiGLU 3 h x f
    per_token = 2 * (2 * h * h + 2 * h * 1024 + 3 * h * f)
    assert one.gemm_fwd_flops == pytest.approx(4096 * per_token, rel=1e-12)


@pytest.mark.parametrize("cp", [2, 4])
def test_cp_splits_tokens(make_gpt, cp):
    """Each CP rank holds s/cp queries that attend to the whole sequence."""
    spec = make_gpt(layers=2, hidden=1024, heads=16, vocab=32000)
    s = 4096
    one = _layer(spec, seq=s)
    split = _layer(spec, cp=cp, seq=s)
    assert split.gemm_fwd_flops * cp == pytest.approx(one.gemm_fwd_flops, rel=1e-12)
    assert split.attention_model_fwd_flops * cp == pytest.approx(
        one.attention_model_fwd_flops, rel=1e-12
    )
    layout = Layout(cp=cp)
    training = Training(seq_len=s, global_batch=2, micro_batch=2)
    assert flops.tokens_per_gpu(layout, training) == 2 * s / cp


def test_causal_half_for_mla():
    spec = planner.load_model("deepseek-v3")
    training = Training(seq_len=4096, global_batch=1)
    hw, conv = flops.attention_core_flops(spec, Layout(tp=8), training)
    assert hw == pytest.approx(conv / 2, rel=1e-12)
    # d_qk = 128 + 64, d_v = 128 per head; 128 heads split over tp=8
    assert conv == pytest.approx(2 * 4096 * 4096 * (128 / 8) * (192 + 128), rel=1e-12)


def test_moe_gemms_balanced_routing():
    """Mixtral, ep=1, tp=1: routed expert GEMMs = top_k x one dense SwiGLU MLP per token."""
    spec = planner.load_model("mixtral-8x7b")
    s = 4096
    lf = _layer(spec, seq=s, moe=True)
    by = {}
    for g in lf.gemms:
        by[g.name] = by.get(g.name, 0.0) + g.flops
    h, f = 4096, 14336
    assert by["expert_fc1"] + by["expert_fc2"] == pytest.approx(2 * s * 2 * 3 * h * f, rel=1e-12)
    assert by["router"] == pytest.approx(2 * s * h * 8, rel=1e-12)
    # expert parallelism moves experts, not work: with ep=8 each GPU still does top_k x tokens
    ep_layout = Layout(dp=8, ep=8)
    ep_flops = flops.layer_flops(spec, ep_layout, Training(seq_len=s, global_batch=8), True)
    assert ep_flops.gemm_fwd_flops == pytest.approx(lf.gemm_fwd_flops, rel=1e-12)


EP_LAYOUTS = [
    dict(tp=1, dp=8, ep=8),
    dict(tp=2, dp=4, ep=4, sequence_parallel=True),
    dict(tp=8, dp=8, ep=8, sequence_parallel=True),
    dict(tp=2, dp=2, cp=2, ep=4, sequence_parallel=True),
    # EP wider than DP x CP: experts spread over the TP ranks too (expert tensor parallel 1)
    dict(tp=8, dp=1, ep=8, sequence_parallel=True),
    dict(tp=4, dp=2, ep=8, sequence_parallel=True),
]


@pytest.mark.parametrize("kw", EP_LAYOUTS, ids=str)
def test_expert_work_is_conserved(kw):
    """Parallelism moves routed-expert work, it does not create it.

    The tp*dp*cp GPUs of one pipeline stage together see dp * micro_batch * seq_len distinct
    tokens (TP ranks share theirs; Megatron-Core needs sequence parallelism for MoE with TP, so
    each TP rank dispatches s/tp of them). With balanced routing their routed-expert GEMMs total
    tokens * top_k * 2 * 3 h f (SwiGLU), so each GPU does that / (tp * dp * cp).
    """
    spec = planner.load_model("mixtral-8x7b")
    layout = Layout(**kw)
    s, mb = 4096, 1
    training = Training(seq_len=s, global_batch=layout.dp * mb, micro_batch=mb)
    lf = flops.layer_flops(spec, layout, training, layer=True)
    per_gpu = sum(g.flops for g in lf.gemms if g.name.startswith("expert"))
    h, f, top_k = 4096, 14336, 2
    grid = layout.tp * layout.dp * layout.cp
    total = layout.dp * mb * s * top_k * 2 * 3 * h * f
    assert per_gpu == pytest.approx(total / grid, rel=1e-12)
