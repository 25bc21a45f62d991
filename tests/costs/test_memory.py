"""Memory model: Korthikanti et al. 2022 activations, ZeRO state sharding, pipeline in-flight."""

from __future__ import annotations

import pytest

import planner
from planner.costs import memory
from planner.specs.layout import Layout, Training

# GPT-3 175B as in Korthikanti et al. 2022 (arXiv 2205.05198), Table 3: s=2048, h=12288, a=96,
# t=8; per-layer figures with micro-batch b=1.
S, B, H, A, T = 2048, 1, 12288, 96, 8
SBH = S * B * H
# 5 a s / h = 5 * 96 * 2048 / 12288 = 80 exactly
ATTN = 5 * A * S / H


def test_attn_term_by_hand():
    assert ATTN == 80.0


def test_korthikanti_table2_no_parallelism():
    """Eq. (1) / Table 2 row 'no parallelism': s b h (34 + 5 a s / h) = 114 s b h."""
    got = memory.korthikanti_activation_bytes(S, B, H, A)
    assert got == pytest.approx(SBH * (34 + ATTN)) == SBH * 114


def test_korthikanti_table2_tensor_parallel():
    """Table 2 'tensor parallel (baseline)': s b h (10 + 24/t + 5 a s / (h t)) = 23 s b h at t=8."""
    got = memory.korthikanti_activation_bytes(S, B, H, A, t=T)
    assert got == pytest.approx(SBH * (10 + 24 / T + ATTN / T))
    assert got == pytest.approx(SBH * 23)


def test_korthikanti_table2_tensor_plus_sequence_parallel():
    """Table 2 'tensor + sequence parallel': s b h (34/t + 5 a s / (h t)) = 14.25 s b h."""
    got = memory.korthikanti_activation_bytes(S, B, H, A, t=T, sp=True)
    assert got == pytest.approx(SBH * (34 / T + ATTN / T)) == pytest.approx(SBH * 14.25)


def test_korthikanti_table2_selective():
    """Table 2 'tensor + sequence parallel + selective recompute': s b h 34/t = 4.25 s b h."""
    got = memory.korthikanti_activation_bytes(S, B, H, A, t=T, sp=True, recompute="selective")
    assert got == pytest.approx(SBH * 34 / T) == pytest.approx(SBH * 4.25)
    # without SP the replicated 10 s b h stays
    got_nosp = memory.korthikanti_activation_bytes(S, B, H, A, t=T, recompute="selective")
    assert got_nosp == pytest.approx(SBH * (10 + 24 / T))


def test_korthikanti_table2_full_recompute():
    """Table 2 'full activation recompute': 2 s b h per layer (only the layer input is kept)."""
    assert memory.korthikanti_activation_bytes(S, B, H, A, recompute="full") == 2 * SBH
    assert memory.korthikanti_activation_bytes(S, B, H, A, t=T, recompute="full") == 2 * SBH


def test_korthikanti_gpt3_gib_scale():
    """All 96 layers of one micro-batch with t=8, no SP: 23 * 2048 * 12288 * 96 B = 51.75 GiB."""
    total = memory.korthikanti_activation_bytes(S, B, H, A, t=T) * 96 / memory.GIB
    assert total == pytest.approx(51.75)


def _gpt3():
    spec = planner.load_model("gpt3-175b")
    assert (spec.hidden, spec.heads, spec.ffn_hidden, spec.activation) == (H, A, 4 * H, "gelu")
    return spec


CASES = [
    # (tp, sequence_parallel, recompute, korthikanti kwargs)
    (1, False, "none", dict(t=1)),
    (T, False, "none", dict(t=T)),
    (T, True, "none", dict(t=T, sp=True)),
    (T, True, "selective", dict(t=T, sp=True, recompute="selective")),
    (T, False, "selective", dict(t=T, recompute="selective")),
    (1, False, "full", dict(recompute="full")),
    (T, False, "full", dict(t=T, recompute="full")),
    (T, True, "full", dict(t=T, sp=True, recompute="full")),
]


@pytest.mark.parametrize(("tp", "sp", "recompute", "kw"), CASES)
def test_layer_activation_bytes_reproduces_table2(tp, sp, recompute, kw):
    """Unfused attention with dropout on an MHA GeLU 4h model is exactly the paper's model."""
    spec = _gpt3()
    layout = Layout(tp=tp, sequence_parallel=sp)
    training = Training(seq_len=S, global_batch=B, micro_batch=B, recompute=recompute)
    got = memory.layer_activation_bytes(
        spec, layout, training, layer=False, flash_attention=False, dropout=True
    )
    want = memory.korthikanti_activation_bytes(S, B, H, A, **kw)
    assert got == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("b", [1, 2, 4])
def test_layer_activation_bytes_scale_with_micro_batch(b):
    spec = _gpt3()
    layout = Layout(tp=T, sequence_parallel=True)
    one = memory.layer_activation_bytes(spec, layout, Training(seq_len=S, global_batch=1), False)
    many = memory.layer_activation_bytes(
        spec, layout, Training(seq_len=S, global_batch=b, micro_batch=b), False
    )
    assert many == pytest.approx(b * one, rel=1e-12)


def test_flash_attention_drops_the_quadratic_term(make_gpt):
    """With a fused kernel no a s^2 b score matrix is stored: memory is linear in s."""
    spec = make_gpt(layers=2, hidden=1024, heads=16, vocab=1000)
    per_token = []
    for s in (1024, 4096, 16384):
        tr = Training(seq_len=s, global_batch=1)
        per_token.append(memory.layer_activation_bytes(spec, Layout(), tr, False) / s)
    assert per_token[0] == pytest.approx(per_token[1], rel=1e-12)
    assert per_token[1] == pytest.approx(per_token[2], rel=1e-12)


def test_context_parallel_splits_activations(make_gpt):
    spec = make_gpt(layers=2, hidden=1024, heads=16, vocab=1000)
    tr = Training(seq_len=8192, global_batch=1)
    one = memory.layer_activation_bytes(spec, Layout(), tr, False)
    cp4 = memory.layer_activation_bytes(spec, Layout(cp=4), tr, False)
    assert cp4 == pytest.approx(one / 4, rel=1e-12)


# ---- ZeRO --------------------------------------------------------------------------------------
P = 1_000_000.0


def _state(dense, expert, layout, gathered=0.0, **training_kw):
    training = Training(seq_len=1024, global_batch=layout.dp, **training_kw)
    return memory.state_bytes(dense, expert, layout, training, gathered)


def _per_param(zero, dp, cp=1, **training_kw):
    st = _state(P, 0.0, Layout(dp=dp, cp=cp, zero=zero), **training_kw)
    return st.weights / P, st.grads / P, st.optimizer / P


@pytest.mark.parametrize(("dp", "cp"), [(1, 1), (8, 1), (4, 2), (64, 1)])
def test_zero_stages_bytes_per_param(dp, cp):
    """Rajbhandari et al. 2020 (ZeRO), sec. 3.1 / Fig. 1 with K = 12 (fp32 master, m, v), a 4 B
    fp32 main gradient (Megatron) and 2 B bf16 weights: 18 B/param unsharded."""
    n = dp * cp
    assert _per_param(0, dp, cp) == pytest.approx((2, 4, 12))
    assert sum(_per_param(0, dp, cp)) == pytest.approx(18)
    assert _per_param(1, dp, cp) == pytest.approx((2, 4, 12 / n))
    assert sum(_per_param(1, dp, cp)) == pytest.approx(2 + 4 + 12 / n)
    assert _per_param(2, dp, cp) == pytest.approx((2, 4 / n, 12 / n))
    assert sum(_per_param(2, dp, cp)) == pytest.approx(2 + 16 / n)
    assert _per_param(3, dp, cp) == pytest.approx((2 / n, 4 / n, 12 / n))
    assert sum(_per_param(3, dp, cp)) == pytest.approx(18 / n)


def test_zero_paper_7_5b_example():
    """ZeRO paper Fig. 1: 7.5B params, 64-way DP; with 18 B/param the baseline is 135 GB,
    P_os keeps 2 + 4 + 12/64 B/param and P_os+g+p 18/64 B/param (2.1 GB)."""
    psi, nd = 7.5e9, 64
    base = _state(psi, 0.0, Layout(dp=nd))
    assert base.weights + base.grads + base.optimizer == pytest.approx(18 * psi)
    z1 = _state(psi, 0.0, Layout(dp=nd, zero=1))
    assert z1.weights + z1.grads + z1.optimizer == pytest.approx((6 + 12 / nd) * psi)
    z3 = _state(psi, 0.0, Layout(dp=nd, zero=3))
    assert z3.weights + z3.grads + z3.optimizer == pytest.approx(18 / nd * psi)


@pytest.mark.parametrize("zero", [0, 1, 2, 3])
def test_fp8_keeps_grads_and_optimizer(zero):
    """FP8 changes GEMM inputs, not the fp32 main gradient or the Adam state."""
    w16, g16, o16 = _per_param(zero, 8)
    w8, g8, o8 = _per_param(zero, 8, precision="fp8")
    assert w8 >= w16  # the fp8 copies, where kept (test_fp8_weight_cache_adds_...)
    assert (g8, o8) == pytest.approx((g16, o16))


@pytest.mark.parametrize("zero", [0, 3])
def test_fp8_weights_stay_in_compute_dtype(zero):
    """Without a weight cache (torchao, llm-foundry's TE layers without is_first_microbatch)
    fp8 keeps 16-bit weights and casts them per GEMM; the saving goes to saved GEMM inputs."""
    w16, _, _ = _per_param(zero, 8, fp8_weight_cache=False)
    w8, _, _ = _per_param(zero, 8, precision="fp8", fp8_weight_cache=False)
    assert w8 == pytest.approx(w16)


def _cached(zero: int, **training_kw) -> float:
    """Weight bytes per parameter, all of them layer parameters, with the fp8 weight cache."""
    layout = Layout(dp=8, zero=zero)
    training = Training(seq_len=1024, global_batch=8, fp8_weight_cache=True, **training_kw)
    return memory.state_bytes(P, 0.0, layout, training, layer_params=P).weights / P


@pytest.mark.parametrize("zero", [0, 1, 2])
def test_fp8_weight_cache_adds_the_copy_and_its_transpose(zero):
    """Transformer Engine keeps each weight's fp8 copy and transpose across micro-batches
    (is_first_microbatch): 2 B per layer parameter beside the 2 B bf16 weight."""
    assert _cached(zero, precision="fp8") == pytest.approx(4.0)
    assert _cached(zero, precision="bf16") == pytest.approx(2.0)  # nothing cached in bf16
    # fp8 weights (fp8_param_gather) are the copy: no second one
    assert _cached(zero, precision="fp8", fp8_param_gather=True) == pytest.approx(2.0)


def test_fp8_weight_cache_is_not_kept_for_re_gathered_weights():
    """ZeRO-3 / FSDP re-gathers each weight per use; TE keeps no copy of it."""
    assert _cached(3, precision="fp8") == pytest.approx(2.0 / 8)
    # only layer parameters are cached: an embedding table is not a TE linear
    layout, tr = (
        Layout(dp=8, zero=1),
        Training(seq_len=1024, global_batch=8, precision="fp8", fp8_weight_cache=True),
    )
    assert memory.state_bytes(P, 0.0, layout, tr, layer_params=P / 4).weights == pytest.approx(
        2.0 * P + 2.0 * P / 4
    )


def test_gradient_dtype():
    """fp32 main gradients by default; bf16 reduction or fp16 training halve them."""
    assert _per_param(0, 8)[1] == pytest.approx(4)
    assert _per_param(0, 8, grad_reduce_dtype="bf16")[1] == pytest.approx(2)
    assert _per_param(0, 8, precision="fp16")[1] == pytest.approx(2)


def test_expert_params_shard_over_expert_data_parallel_group():
    """EP carves experts out of DP x CP: expert state shards over dp*cp/ep."""
    layout = Layout(dp=16, ep=4, zero=1)
    st = _state(0.0, P, layout)
    assert st.optimizer == pytest.approx(12 * P / (16 / 4))
    assert st.weights == pytest.approx(2 * P)
    dense = _state(P, 0.0, layout)
    assert dense.optimizer == pytest.approx(12 * P / 16)


def test_zero3_gathered_working_set():
    st = _state(P, 0.0, Layout(dp=8, zero=3), gathered=1000.0)
    assert st.weights == pytest.approx(2 * P / 8 + 2 * 1000.0)
    st1 = _state(P, 0.0, Layout(dp=8, zero=1), gathered=1000.0)
    assert st1.weights == pytest.approx(2 * P), "only ZeRO-3 gathers parameters"


# ---- pipeline in-flight activations ----------------------------------------------------------
def test_layers_in_flight_no_pipeline():
    assert memory.layers_in_flight(32, 1, 1, 64) == 32


@pytest.mark.parametrize(("pp", "m"), [(2, 1), (4, 2), (4, 4), (4, 64), (8, 3), (8, 128)])
def test_layers_in_flight_1f1b(pp, m):
    """Narayanan et al. 2021 sec. 2.2.1: the first 1F1B stage stashes min(m, p) micro-batches."""
    per_stage = 96 / pp
    assert memory.layers_in_flight(per_stage, pp, 1, m) == pytest.approx(per_stage * min(m, pp))


@pytest.mark.parametrize(("pp", "v"), [(2, 2), (4, 2), (4, 3), (8, 4), (16, 2)])
def test_layers_in_flight_interleaved_matches_korthikanti(pp, v):
    """Korthikanti et al. 2022 sec. 4.2.3: with interleaving the first stage holds
    L (1 + (p-1)/(p v)) layers of activations (m >= p), vs L for plain 1F1B."""
    L = 96
    per_stage = L / pp
    got = memory.layers_in_flight(per_stage, pp, v, microbatches=256)
    assert got == pytest.approx(L * (1 + (pp - 1) / (pp * v)), rel=1e-12)
    assert got > memory.layers_in_flight(per_stage, pp, 1, 256)


def test_layers_in_flight_interleaved_few_microbatches():
    """With fewer chunks than the warm-up, all m*v chunks are in flight at once."""
    pp, v, per_stage = 4, 2, 8
    # m = 2: 4 chunks of 4 layers
    assert memory.layers_in_flight(per_stage, pp, v, 2) == pytest.approx(16)


@pytest.mark.parametrize(
    ("schedule", "v", "chunks"),
    [("zb-h1", 1, 4), ("zb-h2", 1, 7), ("zbv", 2, 8), ("dualpipev", 2, 9)],
)
def test_layers_in_flight_by_schedule(schedule, v, chunks):
    """pp = 4, m = 16: ZB-H1 p micro-batches, ZB-H2 2p - 1 (Qi et al. 2023, Table 1); ZB-V 2p
    chunks of half a stage; DualPipe-V 2p + 1 (DualPipe README: PP + 1 with PP = 2p)."""
    from planner.schedules import SCHEDULES

    per_stage = 8
    got = memory.layers_in_flight(per_stage, 4, v, 16, SCHEDULES[schedule])
    assert got == pytest.approx(per_stage / v * chunks)
    # ZB-H1 holds them on the last rank too (weight gradients pending); 1F1B one
    last = memory.layers_in_flight(per_stage, 4, 1, 16, SCHEDULES["zb-h1"], rank=3)
    assert last == pytest.approx(4 * per_stage)
    assert memory.layers_in_flight(per_stage, 4, 1, 16, SCHEDULES["1f1b"], rank=3) == per_stage


def test_logits_bytes_by_hand():
    """bf16 logits (2 B) and fp32 softmax (4 B) per token per vocab entry, TP-split; the
    vocabulary padded as Megatron pads it (128 x TP = 512: 128,256 -> 128,512 rows)."""
    spec = planner.load_model("llama3.1-8b")
    tr = Training(seq_len=8192, global_batch=2, micro_batch=2)
    got = memory.logits_bytes(spec, Layout(tp=4, cp=2), tr)
    assert got == pytest.approx(2 * 8192 / 2 * 128512 / 4 * 6)


def test_in_place_cross_entropy_keeps_only_the_logits():
    """Transformer Engine's online-softmax loss: 2 B per logit, no fp32 softmax copy; its HBM
    traffic (read forward, read + write backward) is 6 B per logit against the 52 B of
    Megatron's vocab-parallel loss on an fp32 copy (upcast, max, subtract, exp, sum, divide;
    scale and downcast the gradient)."""
    from planner.costs import elementwise

    spec = planner.load_model("llama3.1-8b")
    lay = Layout(tp=4, cp=2)
    copy = Training(seq_len=8192, global_batch=2, micro_batch=2)
    inplace = copy.model_copy(update={"cross_entropy": "in_place"})
    assert memory.logits_bytes(spec, lay, inplace) == pytest.approx(
        memory.logits_bytes(spec, lay, copy) / 3
    )
    tokens = 8192.0
    assert elementwise.logits_loss_bytes(spec, lay, tokens, 2, "in_place") == pytest.approx(
        tokens * spec.vocab / 4 * 6
    )
    assert elementwise.logits_loss_bytes(spec, lay, tokens, 2) == pytest.approx(
        tokens * spec.vocab / 4 * (2 + 4 + 4 + 8 + 8 + 4 + 8 + 8 + 4 + 2)
    )


def test_in_place_cross_entropy_in_the_report_and_the_export():
    from planner.search.export import megatron_args

    spec = planner.load_model("llama3.1-8b")
    cl = planner.load_cluster("dgx-h100")
    lay = Layout(dp=8)
    copy = Training(seq_len=8192, global_batch=64, micro_batch=2)
    inplace = copy.model_copy(update={"cross_entropy": "in_place"})
    a = planner.simulate(spec, cl, lay, copy)
    b = planner.simulate(spec, cl, lay, inplace)
    assert b.memory_breakdown_gib["logits"] < a.memory_breakdown_gib["logits"]
    assert b.time_breakdown_s["compute_logits_loss"] < a.time_breakdown_s["compute_logits_loss"]
    assert any("online-softmax" in n for n in b.assumptions)
    assert "--cross-entropy-fusion-impl te" in megatron_args(spec, 8, lay, inplace)
    assert "--cross-entropy-fusion-impl" not in megatron_args(spec, 8, lay, copy)


def test_pytorch_cross_entropy_on_an_fp32_copy_peaks_in_backward():
    """F.cross_entropy(logits.float()) (torchtitan): backward holds the saved fp32 log-softmax,
    the dense fp32 NLL gradient and the fp32 input gradient, 12 B per logit, twice Megatron's
    fused loss (6 B) at bf16; in fp32 training the forward's act + 8 B is no larger. Its HBM
    traffic, 2 act + 36 B per logit, sits between the online softmax (3 act) and Megatron's
    chain of in-place ops on its fp32 copy (2 act + 48 B)."""
    from planner.costs import elementwise

    spec = planner.load_model("llama3.1-8b")
    lay = Layout(cp=2)
    copy = Training(seq_len=8192, global_batch=2, micro_batch=2)
    torch_loss = copy.model_copy(update={"cross_entropy": "fp32_log_softmax"})
    per_logit = 2 * 8192 / 2 * spec.vocab
    assert memory.logits_bytes(spec, lay, torch_loss) == pytest.approx(per_logit * 12)
    assert memory.logits_bytes(spec, lay, torch_loss) == pytest.approx(
        2 * memory.logits_bytes(spec, lay, copy)
    )
    fp32 = torch_loss.model_copy(update={"precision": "fp32"})
    assert memory.logits_bytes(spec, lay, fp32) == pytest.approx(per_logit * 12)
    kinds = ("in_place", "fp32_log_softmax", "fp32_copy")
    traffic = [elementwise.logits_loss_bytes(spec, lay, 8192.0, 2, k) for k in kinds]
    assert traffic == sorted(traffic) and traffic[1] == pytest.approx(8192 * spec.vocab * 40)


def test_pytorch_loss_under_tp_is_loss_parallel():
    """torchtitan's loss under TP runs DTensor loss parallel (torch/distributed/tensor/parallel/
    loss.py): the log-softmax and its backward as separate fp32 ops, 16 B per logit of the
    TP shard at the peak instead of 12, and twice the HBM passes; the compiled loss and
    Megatron's kernels do not change with TP."""
    from planner.costs import elementwise

    spec = planner.load_model("llama3.1-8b")
    tr = Training(
        seq_len=8192,
        global_batch=2,
        micro_batch=2,
        cross_entropy="fp32_log_softmax",
        vocab_multiple=1,  # torchtitan builds the tokenizer's 128,256 rows as they are
    )
    one, four = Layout(), Layout(tp=4, sequence_parallel=True)
    logits = 2 * 8192 * spec.vocab
    assert elementwise.loss_kernel("fp32_log_softmax", 4) == "loss_parallel"
    assert memory.logits_bytes(spec, one, tr) == pytest.approx(logits * 12)
    assert memory.logits_bytes(spec, four, tr) == pytest.approx(logits / 4 * 16)
    assert elementwise.logits_loss_bytes(spec, four, 8192.0, 2, "fp32_log_softmax") == (
        pytest.approx(8192 * spec.vocab / 4 * 76)
    )
    for kind in ("compiled", "fp32_copy", "in_place"):
        other = tr.model_copy(update={"cross_entropy": kind})
        assert memory.logits_bytes(spec, four, other) == pytest.approx(
            memory.logits_bytes(spec, one, other) / 4
        )
    cl = planner.load_cluster("dgx-h100")
    rep = planner.simulate(
        spec,
        cl,
        Layout(tp=4, sequence_parallel=True, dp=2),
        tr.model_copy(update={"global_batch": 4}),
    )
    assert any("loss parallel" in n for n in rep.assumptions)


def test_fsdp2_accumulates_unsynced_gradients_in_the_reduce_dtype():
    """Without gradient sync between micro-batches (FSDP2 under PP: the stage stays gathered),
    the unsharded gradients are upcast to the reduce dtype before accumulating
    (FSDPParam.to_accumulated_grad_if_needed): 4 B per stage parameter with fp32 reduction,
    2 B with bf16 reduction."""
    lay = Layout(pp=2, dp=4, zero=3, zero3_reshard_after_forward=False)
    fp32 = Training(seq_len=4096, global_batch=16, micro_batch=1)
    bf16 = fp32.model_copy(update={"grad_reduce_dtype": "bf16"})
    local = 1e9
    a = memory.state_bytes(local / 4, 0.0, lay, fp32, local, local)
    b = memory.state_bytes(local / 4, 0.0, lay, bf16, local, local)
    assert a.grads - local * 4 == pytest.approx(local / 4 * 4 / 4)
    assert b.grads - local * 2 == pytest.approx(local / 4 * 2 / 4)


def test_torchtitan_stacks_cost_the_pytorch_loss():
    """torchtitan eager runs F.cross_entropy on an fp32 copy (more logits memory than
    Megatron-Core's fused vocab-parallel loss); the compiled stacks compile that loss with the
    model (less than either)."""
    spec = planner.load_model("llama3.1-8b")
    cl = planner.load_cluster("dgx-h100")
    lay, tr = Layout(dp=8, zero=3), Training(seq_len=8192, global_batch=8)
    mem = {}
    expected = {
        "torchtitan-eager": "fp32_log_softmax",
        "torchtitan-compiled": "compiled",
        "torchtitan-compiled-float8": "compiled",
        "torchtitan-async-tp": "compiled",
        "megatron-core": "fp32_copy",
    }
    for stack_id, loss in expected.items():
        stack = planner.load_stack(stack_id)
        assert stack.kernels.cross_entropy == loss
        rep = planner.simulate(spec, cl, lay, tr, stack=stack)
        mem[stack_id] = rep.memory_breakdown_gib["logits"]
    assert mem["torchtitan-eager"] > mem["megatron-core"] > mem["torchtitan-compiled"]
