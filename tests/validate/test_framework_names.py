"""The framework table's entries read from each framework's source (planner/validate/
framework_names.py): the names they are published under find them, each stands for a shipped
stack, FP8 runs of the compiled ones are costed with Float8, and Colossal-AI with TP or PP is
its hybrid-parallel plugin's code."""

from __future__ import annotations

import pytest

import planner
from planner.specs.loading import load_stack
from planner.validate.framework_names import COMPILED_FP8, FRAMEWORK_STACKS, JAX_FP8
from planner.validate.frameworks import normalise, stack_for_framework

H100 = planner.load_cluster("dgx-h100")
A100 = planner.load_cluster("dgx-a100-80gb")


def test_every_entry_stands_for_a_shipped_stack():
    for key, stack in FRAMEWORK_STACKS.items():
        assert load_stack(stack).name == stack, key


@pytest.mark.parametrize(
    ("published", "stack"),
    [
        ("Nanotron", "megatron-core"),
        ("HF nanotron", "megatron-core"),
        ("picotron", "megatron-core"),
        ("ColossalAI", "deepspeed-zero"),
        ("Colossal AI", "deepspeed-zero"),
        ("OLMo 2", "llm-foundry"),
        ("AI2 OLMo", "llm-foundry"),
        ("olmo_core", "torchtitan-compiled"),
        ("IBM fms-fsdp", "torchtitan-eager"),
        ("Meta Lingua", "torchtitan-compiled"),
        ("metaseq", "megatron-deepspeed-2022"),
        ("Pai-Megatron-Patch", "megatron-core"),
        ("AMD Primus", "megatron-core"),
        ("Megatron-LLaMA", "megatron-core"),
        ("ByteDance MegaScale", "megatron-core"),
        ("InternEvo", "hai-llm"),
        ("Google MaxText", "torchtitan-compiled"),
        ("JAX (MaxText)", "torchtitan-compiled"),
        ("Levanter", "torchtitan-compiled"),
        ("PaxML", "torchtitan-compiled"),
        ("HuggingFace Accelerate", "deepspeed-zero"),
        ("HF Trainer + FSDP", "deepspeed-zero"),
        ("LLaMA-Factory", "deepspeed-zero"),
    ],
)
def test_a_framework_read_from_its_source_is_costed_as_its_stack(published, stack):
    assert normalise(published) in FRAMEWORK_STACKS, published
    assert stack_for_framework(published, H100, "bf16") == (stack, None)


def test_fp8_runs_of_the_compiled_frameworks_are_costed_with_float8():
    assert COMPILED_FP8 and set(COMPILED_FP8.values()) == {JAX_FP8}
    for key in COMPILED_FP8:
        assert stack_for_framework(key, H100, "fp8")[0] == JAX_FP8, key
    assert stack_for_framework("OLMo", H100, "fp8")[0] == "llm-foundry"  # not compiled


def test_colossal_ai_with_model_parallelism_is_its_hybrid_plugin_not_zero():
    assert stack_for_framework("ColossalAI", A100, "bf16", zero=3)[0] == "deepspeed-zero"
    for tp, pp in ((2, 1), (1, 4)):
        stack, note = stack_for_framework("ColossalAI", A100, "bf16", tp=tp, pp=pp)
        assert (stack, note) == ("megatron-deepspeed", None)


def test_an_fsdp1_name_that_says_compile_is_costed_compiled():
    """FSDP1 is llm-foundry's (eager); "PyTorch FSDP + torch.compile" ran compiled kernels: the
    shipped stack that compiles them (torchtitan-compiled; Float8 at fp8)."""
    assert stack_for_framework("PyTorch FSDP", H100, "bf16")[0] == "llm-foundry"
    named = "PyTorch FSDP + torch.compile"
    assert stack_for_framework(named, H100, "bf16")[0] == "torchtitan-compiled"
    assert stack_for_framework(named, H100, "fp8")[0] == "torchtitan-compiled-float8"
