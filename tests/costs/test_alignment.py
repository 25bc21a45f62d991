"""Operand alignment of GEMMs: rows that are not whole 16-byte vectors (planner/costs/alignment.py)."""

from __future__ import annotations

import pytest

import planner
from planner.costs import alignment, compute
from planner.costs.flops import Gemm
from planner.specs.layout import Layout, Training

H100 = planner.load_cluster("dgx-h100")


def _device(precision: str = "bf16", attention: str = "fused") -> compute.Device:
    return compute.make_device(
        H100.accelerator, planner.default_profile(H100), precision, attention
    )


@pytest.mark.parametrize(
    ("elements", "element_bytes", "aligned"),
    [
        (4096, 2, True),
        (10944, 2, True),
        (10922, 2, False),  # 8/3 x 4096: a multiple of 2 elements only
        (150, 2, False),  # BLOOM's head_dim 150 (14400 / 96)
        (4104, 2, True),  # 8 bf16 elements = 16 bytes
        (4104, 1, False),  # the same width in FP8 is 8-byte rows
        (4112, 1, True),
        (1000.5, 2, True),  # a mean width (not a real row) is left alone
    ],
)
def test_a_row_is_aligned_when_it_is_whole_16_byte_vectors(elements, element_bytes, aligned):
    assert alignment.row_aligned(elements, element_bytes) is aligned


def test_a_layer_is_slowed_when_either_of_its_widths_is_misaligned():
    ok = alignment.linear_alignment(10944, 4096, 2)
    assert ok == 1.0
    for n, k in ((10922, 4096), (4096, 10922), (10922, 10922)):
        assert alignment.linear_alignment(n, k, 2) == alignment.MISALIGNED_EFFICIENCY
    assert 0.0 < alignment.MISALIGNED_EFFICIENCY < 1.0


def test_misaligned_mlp_gemms_cost_more_than_their_flops():
    """ml-engineering's H100 pair: d_ff 10922 runs ~1.46x slower than 10944 for 0.2 % fewer FLOPs."""
    dev = _device()
    odd = compute.gemms_time_s((Gemm("mlp_fc1", 8192, 10922, 4096),), dev)
    even = compute.gemms_time_s((Gemm("mlp_fc1", 8192, 10944, 4096),), dev)
    for t_odd, t_even in zip(odd, even, strict=True):
        assert t_odd / t_even > 1.3


def test_fp8_needs_sixteen_element_rows():
    g = Gemm("mlp_fc1", 8192, 4104, 4096)
    assert compute.gemm_alignment(g, _device("fp8"), low=True) < 1.0
    assert compute.gemm_alignment(g, _device("fp8"), low=False) == 1.0  # bf16 wgrad recipe
    assert compute.gemm_alignment(g, _device("bf16"), low=True) == 1.0


def test_megatron_pads_the_vocabulary_and_an_unpadded_odd_one_runs_misaligned():
    """GPT-2's 50,257 rows: Megatron pads them to 50,432 at TP 2 (128 x 2 = 256), aligned;
    kept as they are (vocab_multiple 1: 25,129 rows per TP rank) the logits GEMM is charged
    the alignment factor."""
    from planner.costs import flops

    model = planner.ModelSpec.model_validate(
        {**planner.load_model("gpt3-1.3b").model_dump(), "vocab": 50257, "name": "gpt2-vocab"}
    )
    layout = Layout(tp=2)
    padded = Training(seq_len=2048, global_batch=8, micro_batch=1)
    unpadded = padded.model_copy(update={"vocab_multiple": 1})
    assert flops.padded_vocab(model, layout, padded) == 50432
    # unpadded, a vocabulary-parallel split still needs a multiple of TP: 50,258 = 2 x 25,129
    assert flops.padded_vocab(model, layout, unpadded) == 50258
    dev = _device()
    g_pad = flops.logits_gemm(model, layout, padded)
    g_odd = flops.logits_gemm(model, layout, unpadded)
    assert compute.gemm_alignment(g_pad, dev, low=False) == 1.0
    assert compute.gemm_alignment(g_odd, dev, low=False) < 1.0
    # fewer FLOPs, yet the unpadded logits are slower
    assert sum(compute.gemms_time_s((g_odd,), dev)) > sum(compute.gemms_time_s((g_pad,), dev))


def test_padding_adds_the_padded_rows_to_memory_and_work():
    from planner.costs import memory

    model = planner.load_model("llama3.1-8b")  # 128,256 rows: 128 x 1002, padded at TP 4
    layout = Layout(tp=4)
    tr = Training(seq_len=4096, global_batch=8, micro_batch=1)
    bare = tr.model_copy(update={"vocab_multiple": 1})
    assert memory.logits_bytes(model, layout, tr) == pytest.approx(
        memory.logits_bytes(model, layout, bare) * 128512 / 128256
    )


def test_unfused_attention_with_a_misaligned_head_dim_is_slower():
    dev = _device(attention="unfused")
    aligned = compute.unfused_attention_time_s(2048, 2048, 12, 152, 152, True, dev)
    odd = compute.unfused_attention_time_s(2048, 2048, 12, 150, 150, True, dev)
    # fewer FLOPs, yet slower in both directions
    assert odd[0] > aligned[0]
    assert odd[1] > aligned[1]


def test_a_misaligned_ffn_lowers_a_whole_step_s_throughput_per_flop():
    base = planner.load_model("llama2-7b").model_dump()
    training = Training(seq_len=4096, global_batch=8, micro_batch=1)
    reps = {}
    for ffn in (10922, 10944):
        spec = {**base, "name": f"l7-{ffn}", "layers": 4, "ffn_hidden": ffn}
        model = planner.ModelSpec.model_validate(spec)
        reps[ffn] = planner.simulate(model, H100, Layout(), training)
    assert reps[10922].mfu_pct < reps[10944].mfu_pct
    assert reps[10922].step_time_s > reps[10944].step_time_s
