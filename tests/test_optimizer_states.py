"""Training.optimizer_states: reduced AdamW state (remainders, bf16 moments) in memory, in the
update's traffic, in the checkpoint, in the stacks' capabilities and in the CLI."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

import planner
from planner.costs import elementwise, memory
from planner.errors import PlannerError
from planner.goodput import checkpoint_bytes_per_param
from planner.specs.layout import Layout, Training
from planner.stacks import check_stack

LAYOUT = Layout(tp=8, pp=4, dp=1, zero=1, sequence_parallel=True)


def _run(states: str, stack: str = "nemo", **over) -> planner.StepReport:
    training = Training(
        seq_len=8192, micro_batch=2, global_batch=32, optimizer_states=states, **over
    )
    model, cluster = planner.load_model("llama3.1-70b"), planner.load_cluster("dgx-h100")
    return planner.simulate(model, cluster, LAYOUT, training, stack=stack)


def test_state_bytes_per_parameter() -> None:
    got = {
        s: memory.optimizer_state_bytes(Training(seq_len=8, global_batch=1, optimizer_states=s))
        for s in ("fp32", "fp32_remainders", "bf16")
    }
    assert got == {"fp32": 12.0, "fp32_remainders": 10.0, "bf16": 4.0}
    # fp32 training keeps only the moments: the fp32 weights are the master copy
    assert memory.optimizer_state_bytes(Training(seq_len=8, global_batch=1, precision="fp32")) == 8


def test_reduced_states_shrink_the_optimizer_memory_in_proportion() -> None:
    full, rem, half = (_run(s) for s in ("fp32", "fp32_remainders", "bf16"))
    opt = [r.memory_breakdown_gib["optimizer_states"] for r in (full, rem, half)]
    assert opt[1] == pytest.approx(opt[0] * 10 / 12, rel=1e-9)
    assert opt[2] == pytest.approx(opt[0] * 4 / 12, rel=1e-9)
    # the rest of the memory does not move
    for key in ("weights", "gradients", "activations"):
        assert full.memory_breakdown_gib[key] == rem.memory_breakdown_gib[key]
    # this layout needs the remainders to fit in 80 GB
    assert not full.fits and rem.fits and half.fits
    # the update reads and writes less, so the step is not slower
    assert full.tokens_per_s_per_gpu <= rem.tokens_per_s_per_gpu <= half.tokens_per_s_per_gpu


def test_adam_traffic_falls_with_the_state() -> None:
    b = [elementwise.adam_bytes_per_param("fused", s) for s in ("fp32", "fp32_remainders", "bf16")]
    assert b[0] > b[1] > b[2] > 0


def test_checkpoint_holds_the_reduced_state() -> None:
    def per_param(states: str) -> float:
        return checkpoint_bytes_per_param(
            Training(seq_len=8, global_batch=1, optimizer_states=states)
        )

    assert per_param("fp32") == 14.0
    assert per_param("bf16") == 6.0


def test_reduced_states_need_bf16_weights() -> None:
    with pytest.raises(ValidationError, match="optimizer_states 'bf16' needs bf16 weights"):
        Training(seq_len=8, global_batch=1, precision="fp16", optimizer_states="bf16")


@pytest.mark.parametrize("stack", ["torchtitan-eager", "deepspeed-zero", "llm-foundry"])
def test_a_stack_without_reduced_states_refuses_them(stack: str) -> None:
    spec = planner.load_stack(stack)
    assert not spec.capabilities.reduced_optimizer_states
    with pytest.raises(PlannerError) as err:
        check_stack(
            spec,
            Layout(tp=1, pp=1, dp=8, zero=3),
            Training(seq_len=8, global_batch=8, optimizer_states="fp32_remainders"),
        )
    assert err.value.field == "training.optimizer_states"
    assert stack in str(err.value)


@pytest.mark.parametrize("stack", ["megatron-core", "nemo", "megatron-bridge"])
def test_megatron_family_stacks_run_reduced_states(stack: str) -> None:
    assert planner.load_stack(stack).capabilities.reduced_optimizer_states
    assert _run("bf16", stack=stack).memory_breakdown_gib["optimizer_states"] > 0
