"""The Triton FlashAttention (attention kernel ``flash_triton``, the llm-foundry-2023 stack):
the profile's FlashAttention-2 curve slowed by the fitted global, only in the attention core."""

from __future__ import annotations

import pytest

import planner
from planner.costs.compute import attention_efficiency
from planner.specs.layout import Layout, Training

MODEL = planner.load_model("llama3.1-8b")
LAYOUT = Layout(dp=8, zero=3)


def _report(stack: str, cluster: str = "dgx-h100", seq_len: int = 16384) -> planner.StepReport:
    tr = Training(seq_len=seq_len, global_batch=8, micro_batch=1, recompute="full")
    return planner.simulate(
        MODEL, planner.load_cluster(cluster), LAYOUT, tr, stack=planner.load_stack(stack)
    )


def test_shipped_profiles_carry_a_slower_triton_curve() -> None:
    for accel in ("h100-sxm5-80gb", "a100-sxm4-80gb"):
        p = planner.load_profile(accel)
        fa2, triton = attention_efficiency(p, "flash2"), attention_efficiency(p, "flash_triton")
        assert p.attention_flash_triton is not None
        assert triton.eta_max_fwd < fa2.eta_max_fwd and triton.eta_max_bwd < fa2.eta_max_bwd
        # one ratio for both passes, and the same sequence saturation
        assert triton.eta_max_fwd / fa2.eta_max_fwd == pytest.approx(
            triton.eta_max_bwd / fa2.eta_max_bwd, rel=2e-3
        )
        assert triton.seq_half == fa2.seq_half


def test_slowdown_is_applied_to_the_flash2_curve() -> None:
    p = planner.load_profile("h100-sxm5-80gb").with_triton_attention_slowdown(2.0)
    assert p.attention_flash_triton.eta_max_fwd == pytest.approx(
        p.attention_flash2.eta_max_fwd / 2.0, abs=1e-4
    )
    # a profile without its own FlashAttention-2 curve slows its fused one
    a = planner.load_profile("a100-sxm4-80gb").with_triton_attention_slowdown(1.5)
    assert a.attention_flash_triton.eta_max_bwd == pytest.approx(
        a.attention.eta_max_bwd / 1.5, abs=1e-4
    )


@pytest.mark.parametrize("bad", [0.5, float("nan"), float("inf"), 11.0])
def test_a_slowdown_outside_1_to_10_is_refused(bad: float) -> None:
    with pytest.raises(ValueError, match="Triton attention slowdown"):
        planner.load_profile("h100-sxm5-80gb").with_triton_attention_slowdown(bad)


def test_a_profile_without_the_curve_costs_it_as_flash2() -> None:
    p = planner.load_profile("h100-sxm5-80gb").model_copy(update={"attention_flash_triton": None})
    assert attention_efficiency(p, "flash_triton") == attention_efficiency(p, "flash2")


@pytest.mark.parametrize("cluster", ["dgx-h100", "dgx-a100-80gb"])
def test_the_2023_stack_differs_only_in_the_attention_core(cluster: str) -> None:
    new, old = _report("llm-foundry", cluster), _report("llm-foundry-2023", cluster)
    assert old.time_breakdown_s["compute_attention"] > new.time_breakdown_s["compute_attention"]
    assert old.time_breakdown_s["recompute"] > new.time_breakdown_s["recompute"]
    for key in ("compute_gemm", "compute_memory_bound", "compute_logits_loss", "optimizer"):
        assert old.time_breakdown_s[key] == pytest.approx(new.time_breakdown_s[key], rel=1e-9)
    assert old.tokens_per_s_per_gpu < new.tokens_per_s_per_gpu
    assert old.peak_memory_gib == pytest.approx(new.peak_memory_gib, rel=1e-9)


def test_the_gap_grows_with_the_sequence() -> None:
    def gap(seq: int) -> float:
        return (
            _report("llm-foundry", seq_len=seq).tokens_per_s_per_gpu
            / _report("llm-foundry-2023", seq_len=seq).tokens_per_s_per_gpu
        )

    assert 1.0 < gap(2048) < gap(16384)


def test_v1_llm_foundry_rows_take_the_2023_stack() -> None:
    from planner.validate.frameworks import stack_for_framework

    a100 = planner.load_cluster("dgx-a100-80gb")
    assert stack_for_framework("MosaicML llm-foundry", a100, "bf16")[0] == "llm-foundry-2023"
    # plain PyTorch FSDP is today's eager FSDP1 stack, FlashAttention-2
    assert stack_for_framework("PyTorch FSDP", a100, "bf16")[0] == "llm-foundry"
