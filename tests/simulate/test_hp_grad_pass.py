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


def _step(
    layout: Layout, global_batch_override: int = 64, **training: object
) -> planner.StepReport:
    tr = Training(
        seq_len=2048,
        global_batch=global_batch_override,
        micro_batch=1,
        recompute="full",
        **training,
    )
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


# ----------------------- the add of each micro-batch's gradient (Training.grad_accumulation_add)


def test_megatron_lm_2021_adds_each_gradient_into_main_grad_each_micro_batch():
    """v2.5's local DDP hook (``param.main_grad.add_(param.grad.data)``) before gradient
    accumulation fusion: 6 B per parameter in fp16 (fp16 accumulator), 10 B in bf16 (fp32
    accumulator), one kernel per tensor, every micro-batch; the 2022 code base accumulates in
    the GEMM."""
    assert planner.load_stack("megatron-lm-2021").data_parallel.grad_accumulation_add == (
        "main_grad"
    )
    assert planner.load_stack("megatron-lm-2022").data_parallel.grad_accumulation_add == "none"
    fp16 = Training(
        seq_len=2048, global_batch=64, precision="fp16", grad_accumulation_add="main_grad"
    )
    assert elementwise.grad_pass_cost(fp16) == (6.0, 1.0)
    assert elementwise.grad_pass_cost(fp16.with_changes(precision="bf16")) == (10.0, 1.0)
    none = fp16.with_changes(grad_accumulation_add="none")
    assert elementwise.grad_pass_cost(none) == (0.0, 0.0)
    assert elementwise.grad_pass_share(fp16, 1) == 1.0  # the hook runs on every micro-batch
    layout = Layout(tp=2, pp=2, dp=2)
    tr = Training(seq_len=2048, global_batch=64, micro_batch=1, recompute="full", precision="fp16")
    old = planner.simulate(MODEL, CLUSTER, layout, tr, stack="megatron-lm-2021")
    fused = planner.simulate(
        MODEL,
        CLUSTER,
        layout,
        tr.with_changes(grad_accumulation_add="none"),
        stack="megatron-lm-2021",
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


def test_autograd_accumulation_skips_the_first_micro_batch():
    """DeepSpeed's FP16 optimizer lets autograd add each gradient into .grad: nothing with one
    micro-batch per step, (m - 1) / m of the main_grad hook's passes with m; bf16 runs take the
    BF16_Optimizer's pass instead."""
    stack = planner.load_stack(STACK)
    assert stack.data_parallel.grad_accumulation_add == "autograd"
    layout = Layout(tp=2, pp=1, dp=4, zero=1)
    fp16 = {"precision": "fp16"}

    def extra(global_batch: int) -> float:
        on = _step(layout, **fp16, global_batch_override=global_batch)
        off = _step(
            layout, **fp16, global_batch_override=global_batch, grad_accumulation_add="none"
        )
        return on.step_time_s - off.step_time_s

    assert extra(4) == 0.0  # one micro-batch per rank
    two, eight = extra(8), extra(32)
    # m passes of share (m - 1) / m: 1 pass's worth at m = 2, 7 at m = 8
    assert two > 0.0 and eight == pytest.approx(7 * two, rel=0.05)
    tr = Training(seq_len=2048, global_batch=32, precision="fp16", grad_accumulation_add="autograd")
    assert elementwise.grad_pass_share(tr, 8) == 7 / 8
    bf16 = tr.with_changes(precision="bf16", fp32_grad_accumulation_pass=True)
    assert (
        elementwise.grad_pass_cost(bf16) == (18.0, 2.0)
        and elementwise.grad_pass_share(bf16, 8) == 1.0
    )


def test_fsdp2_under_a_pipeline_accumulates_its_unsharded_gradients_each_micro_batch():
    """torchtitan's FSDP2 with pp > 1 defers the gradient sync: the first micro-batch's bf16
    gradient is cast to the fp32 reduce dtype (6 B per parameter), each later one added (10 B);
    a bf16 reduce dtype leaves autograd's add (6 B, from the second micro-batch)."""
    first, later = elementwise.deferred_accumulation_cost(Training(seq_len=8, global_batch=1))
    assert (first, later) == ((6.0, 1.0), (10.0, 1.0))
    narrow = Training(seq_len=8, global_batch=1, grad_reduce_dtype="bf16")
    assert elementwise.deferred_accumulation_cost(narrow) == ((0.0, 0.0), (6.0, 1.0))
    model, cluster = planner.load_model("llama3.1-70b"), planner.load_cluster("dgx-h100")
    layout = Layout(tp=8, pp=4, dp=2, zero=3, zero3_reshard_after_forward=False)
    assert elementwise.deferred_accumulation_applies(layout)
    assert not elementwise.deferred_accumulation_applies(layout.with_changes(zero=1))

    def memory_bound(global_batch: int, **tr: object) -> float:
        training = Training(seq_len=4096, global_batch=global_batch, **tr)
        rep = planner.simulate(model, cluster, layout, training, stack="torchtitan-compiled")
        return rep.time_breakdown_s["compute_memory_bound"] / rep.microbatches

    # per micro-batch the average pass grows from (6) to (6 + 10 (m - 1)) / m bytes
    assert memory_bound(64) > memory_bound(8)
    assert memory_bound(64) > memory_bound(64, grad_reduce_dtype="bf16")
