"""Closed-loop torch model: parameter counts match the planner's, and step timers run (CPU)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import planner  # noqa: E402
from calibration.closed_loop import build_gpt, measure_ddp_step, measure_training_step  # noqa: E402
from planner.specs.model import MLASpec, ModelSpec, MoESpec  # noqa: E402

GQA_SWIGLU = ModelSpec(
    name="tiny-gqa-swiglu",
    layers=2,
    hidden=256,
    ffn_hidden=512,
    activation="swiglu",
    heads=8,
    kv_heads=2,
    vocab=1000,
)

# Small enough that a timed step takes milliseconds on CPU.
MICRO = ModelSpec(
    name="micro", layers=2, hidden=64, ffn_hidden=128, heads=4, vocab=256, tied_embeddings=True
)


def _rel_gap(spec: ModelSpec, seq_len: int = 64) -> float:
    model = build_gpt(spec, seq_len)
    return abs(model.num_params() - spec.total_params) / spec.total_params


@pytest.mark.parametrize("spec", [planner.load_model("gpt-tiny"), GQA_SWIGLU], ids=lambda s: s.name)
def test_param_count_matches_spec(spec: ModelSpec) -> None:
    assert _rel_gap(spec) < 0.01


@pytest.mark.parametrize(
    "overrides",
    [
        {"activation": "relu2", "learned_position_embeddings": True, "max_positions": 128},
        {"activation": "geglu", "kv_heads": 1, "head_dim": 48, "tied_embeddings": True},
        {"activation": "gelu", "kv_heads": 4, "learned_position_embeddings": True},
    ],
)
def test_param_count_other_layouts(overrides: dict) -> None:
    assert _rel_gap(GQA_SWIGLU.model_copy(update=overrides)) < 0.01


def test_non_gelu_count_is_exact() -> None:
    # Only GeLU models differ (bias-free LayerNorm vs. the planner's LayerNorm with bias).
    assert build_gpt(GQA_SWIGLU, 64).num_params() == GQA_SWIGLU.total_params


def test_tied_embeddings_share_weight() -> None:
    model = build_gpt(MICRO, 16)
    assert model.lm_head.weight is model.wte.weight


@pytest.mark.parametrize("spec", [GQA_SWIGLU, MICRO], ids=lambda s: s.name)
def test_forward_shapes_and_loss(spec: ModelSpec) -> None:
    model = build_gpt(spec, seq_len=32)
    idx = torch.randint(spec.vocab, (3, 32))
    assert model(idx).shape == (3, 32, spec.vocab)
    assert model(idx[:, :17]).shape == (3, 17, spec.vocab)
    loss = model.loss(idx, torch.randint(spec.vocab, (3, 32)))
    assert loss.ndim == 0 and torch.isfinite(loss)
    with pytest.raises(ValueError, match="exceeds"):
        model(torch.randint(spec.vocab, (1, 33)))


@pytest.mark.parametrize("spec", [GQA_SWIGLU, MICRO], ids=lambda s: s.name)
def test_forward_is_causal(spec: ModelSpec) -> None:
    model = build_gpt(spec, seq_len=16).eval()
    idx = torch.randint(spec.vocab, (1, 16))
    changed = idx.clone()
    changed[0, 10:] = (changed[0, 10:] + 1) % spec.vocab
    with torch.no_grad():
        a, b = model(idx), model(changed)
    torch.testing.assert_close(a[:, :10], b[:, :10])
    assert not torch.allclose(a[:, 10:], b[:, 10:])


def test_moe_and_mla_not_implemented() -> None:
    moe = GQA_SWIGLU.model_copy(update={"moe": MoESpec(experts=4, top_k=2, expert_ffn_hidden=64)})
    mla = GQA_SWIGLU.model_copy(
        update={
            "mla": MLASpec(kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16)
        }
    )
    for spec in (moe, mla):
        with pytest.raises(NotImplementedError, match="not supported"):
            build_gpt(spec, 16)


def test_measure_training_step() -> None:
    result = measure_training_step(MICRO, seq_len=32, micro_batch=2, steps=3, warmup=1)
    assert result["median_step_s"] > 0
    assert len(result["step_times_s"]) == 3
    assert result["params"] == build_gpt(MICRO, 32).num_params()
    assert result["tokens_per_step"] == 64
    assert result["device"] == "cpu" and result["dtype"] == "float32"
    assert result["threads"] >= 1


def test_measure_ddp_step() -> None:
    result = measure_ddp_step(MICRO, world_size=2, seq_len=32, micro_batch=2, steps=3, warmup=1)
    assert result["median_step_s"] > 0
    assert len(result["step_times_s"]) == 3
    assert result["world_size"] == 2
    assert result["threads_per_rank"] >= 1
    assert result["tokens_per_step"] == 64


def test_the_prediction_costs_the_attention_kernel_sdpa_ran() -> None:
    """SDPA picks its backend by itself (cuDNN on Hopper in recent torch): the closed loop reads
    it and the stack it predicts under takes that kernel; unknown backends change nothing."""
    from calibration.closed_loop.train import SDPA_AS_STACK_ATTENTION, sdpa_backend
    from planner.cli.closed_loop import with_measured_attention

    stack = planner.load_stack("torchtitan-eager")
    cudnn = with_measured_attention(stack, "CUDNN_ATTENTION")
    assert cudnn is not None and cudnn.kernels.attention == "cudnn_fused"
    assert cudnn.name == stack.name and stack.kernels.attention == "sdpa_flash"
    assert with_measured_attention(stack, "unknown") is stack
    assert with_measured_attention(None, "CUDNN_ATTENTION") is None
    spec = planner.load_model("gpt-tiny")
    picked = sdpa_backend(spec, 64, 1, torch.device("cpu"), torch.float32)
    assert picked in SDPA_AS_STACK_ATTENTION or picked == "unknown"


def test_peak_memory_is_reported_only_where_an_allocator_keeps_one() -> None:
    from calibration.closed_loop.train import peak_memory

    assert peak_memory(torch.device("cpu")) == {}
