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
