"""DeepSpeed BF16_Optimizer's per-micro-batch bf16 -> fp32 gradient accumulation
(Training.fp32_grad_accumulation_pass; planner/costs/elementwise.py hp_grad_pass_s)."""

from __future__ import annotations

import pytest

import planner
from planner.costs import elementwise
from planner.specs.layout import Layout, Training

CLUSTER = planner.load_cluster("dgx-a100-80gb")
MODEL = planner.load_model("gpt3-1.3b")
STACK = "megatron-deepspeed-2022"


def _step(layout: Layout, **training: object) -> planner.StepReport:
    tr = Training(seq_len=2048, global_batch=64, micro_batch=1, recompute="full", **training)
    return planner.simulate(MODEL, CLUSTER, layout, tr, stack=STACK)


def test_the_pass_moves_18_bytes_per_parameter_and_launches_two_kernels_per_tensor():
    assert elementwise.HP_GRAD_BYTES_PER_PARAM == 18
    assert elementwise.hp_grad_pass_s(1e9, 0.0, 1e12, 0.0) == pytest.approx(18e9 / 1e12)
    assert elementwise.hp_grad_pass_s(0.0, 10.0, 1e12, 5e-6) == pytest.approx(2 * 10 * 5e-6)


def test_bloom_s_stack_runs_it_in_bf16_and_it_costs_each_micro_batch():
    assert planner.load_stack(STACK).data_parallel.fp32_grad_accumulation_pass
    layout = Layout(tp=2, pp=2, dp=2, zero=1)
    on = _step(layout)
    off = _step(layout, fp32_grad_accumulation_pass=False)
    extra = on.step_time_s - off.step_time_s
    assert extra > 0
    assert (
        on.time_breakdown_s["compute_memory_bound"] > off.time_breakdown_s["compute_memory_bound"]
    )
    # per micro-batch: twice the micro-batches, about twice the extra time
    on2 = planner.simulate(
        MODEL,
        CLUSTER,
        layout,
        Training(seq_len=2048, global_batch=128, micro_batch=1, recompute="full"),
        stack=STACK,
    )
    off2 = planner.simulate(
        MODEL,
        CLUSTER,
        layout,
        Training(
            seq_len=2048,
            global_batch=128,
            micro_batch=1,
            recompute="full",
            fp32_grad_accumulation_pass=False,
        ),
        stack=STACK,
    )
    assert (on2.step_time_s - off2.step_time_s) / extra == pytest.approx(2.0, rel=0.15)


@pytest.mark.parametrize(
    ("layout", "training"),
    [
        (Layout(tp=2, pp=2, dp=2, zero=1), {"precision": "fp16"}),  # FP16 optimizer: no pass
        (Layout(tp=2, dp=4, zero=3), {}),  # ZeRO-3 runs its own optimizer
        (Layout(tp=2, dp=4, zero=2), {}),
    ],
)
def test_no_pass_in_fp16_or_under_zero_2_and_3(layout, training):
    on = _step(layout, **training)
    off = _step(layout, fp32_grad_accumulation_pass=False, **training)
    assert on.step_time_s == off.step_time_s


def test_other_stacks_accumulate_in_place():
    for stack_id in ("megatron-core", "torchtitan-eager", "deepspeed-zero", "nemo"):
        assert not planner.load_stack(stack_id).data_parallel.fp32_grad_accumulation_pass


# ------------------------------------- Megatron-LM's main_grad add (Training.grad_add_pass)


def test_megatron_lm_2021_adds_each_gradient_into_main_grad_each_micro_batch():
    """v2.5's local DDP hook (``param.main_grad.add_(param.grad.data)``) before gradient
    accumulation fusion: 6 B per parameter in fp16 (fp16 accumulator), 10 B in bf16 (fp32
    accumulator), one kernel per tensor; the 2022 code base accumulates in the GEMM."""
    assert planner.load_stack("megatron-lm-2021").data_parallel.grad_add_pass
    assert not planner.load_stack("megatron-lm-2022").data_parallel.grad_add_pass
    fp16 = Training(seq_len=2048, global_batch=64, precision="fp16", grad_add_pass=True)
    assert elementwise.grad_pass_cost(fp16) == (6.0, 1.0)
    assert elementwise.grad_pass_cost(fp16.with_changes(precision="bf16")) == (10.0, 1.0)
    assert elementwise.grad_pass_cost(fp16.with_changes(grad_add_pass=False)) == (0.0, 0.0)
    layout = Layout(tp=2, pp=2, dp=2)
    tr = Training(seq_len=2048, global_batch=64, micro_batch=1, recompute="full", precision="fp16")
    old = planner.simulate(MODEL, CLUSTER, layout, tr, stack="megatron-lm-2021")
    fused = planner.simulate(
        MODEL, CLUSTER, layout, tr.with_changes(grad_add_pass=False), stack="megatron-lm-2021"
    )
    extra = (
        old.time_breakdown_s["compute_memory_bound"]
        - fused.time_breakdown_s["compute_memory_bound"]
    )
    assert extra > 0 and old.step_time_s > fused.step_time_s
    # at least 6 B per parameter of the rank per micro-batch at the achieved HBM bandwidth; at
    # most twice that (one kernel's fixed cost per tensor, the vocabulary table of an edge stage)
    prof = planner.default_profile(CLUSTER)
    bw = CLUSTER.accelerator.hbm_bandwidth_tb_per_s * 1e12 * prof.memory.eta("copy")
    params_per_rank = MODEL.total_params / (layout.tp * layout.pp)
    m = tr.global_batch // (tr.micro_batch * layout.dp)
    bytes_only = m * 6.0 * params_per_rank / bw
    assert 0.8 * bytes_only < extra < 2.0 * bytes_only
