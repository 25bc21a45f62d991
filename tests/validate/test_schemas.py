"""Schema 1 and 2 validation cases: the framework table, structured fields, unstated knobs."""

from __future__ import annotations

import copy

import pytest
from pydantic import ValidationError

import planner
from planner.errors import PlannerError
from planner.specs.base import MAX_GLOBAL_BATCH
from planner.stacks import DEFAULT_STACK, apply_stack, stack_violations
from planner.unknowns import tuned_prediction
from planner.validate import (
    CaseV2,
    case_file,
    case_inputs,
    parse_case,
    read_case_file,
    run_case,
    stack_for_framework,
)
from planner.validate.frameworks import BY_CAPABILITY, code_bases, normalise
from planner.validate.inputs import V1_MODEL_KEYS

# the model keys a schema 1 case states (planner.validate.inputs.V1_MODEL_KEYS), its name and moe
MODEL_KEYS = {"name", "moe", *V1_MODEL_KEYS}


def _v1(model: str = "llama3.1-8b", **over) -> dict:
    raw = {
        "id": "x",
        "source": "test",
        "quality": "partial",
        "model": planner.load_model(model).model_dump(include=MODEL_KEYS, mode="json"),
        "cluster": "dgx-h100",
        "num_gpus": 8,
        "framework": "megatron-core",
        "layout": {"tp": 1, "pp": 1, "dp": 8, "zero": 1},
        "training": {"seq_len": 8192, "global_batch": 128, "micro_batch": 1, "recompute": "full"},
        "measured": {"tokens_per_s_per_gpu": 9000.0},
    }
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(raw.get(key), dict):
            raw[key] = {**raw[key], **value}
        else:
            raw[key] = value
    return raw


def _v2(model: str = "llama3.1-8b", **over) -> dict:
    raw = _v1(model, **over)
    raw["stack"] = raw.pop("framework")
    return raw


# ------------------------------------------------------------------ the framework table


def test_framework_table_maps_names_to_shipped_stacks():
    a100, h100 = planner.load_cluster("dgx-a100-80gb"), planner.load_cluster("dgx-h100")
    assert stack_for_framework("megatron-lm", a100, "fp16") == ("megatron-lm-2021", None)
    assert stack_for_framework("Megatron LM", h100, "bf16") == ("megatron-core", None)
    # Megatron-LM had no ZeRO-3: a ZeRO-3 row of its 2021 papers ran DeepSpeed's
    z3 = stack_for_framework("megatron-lm", a100, "fp16", zero=3)
    assert z3 == ("deepspeed-zero3-2021", None)
    # ...data-parallel only: ZeRO 3 beside TP or PP is Megatron-Core's FSDP
    assert stack_for_framework("megatron-lm", a100, "fp16", zero=3, tp=8)[0] == "megatron-core"
    assert stack_for_framework("megatron-lm", a100, "fp16", zero=3, pp=2)[0] == "megatron-core"
    # ...where that code could express the model: a SwiGLU one ran Megatron-Core's FSDP
    llama = planner.load_model("llama3.1-8b")
    assert stack_for_framework("megatron-lm", a100, "bf16", zero=3, model=llama)[0] == (
        "megatron-core"
    )
    # the oldest Megatron-LM code base that runs what the case states: v2.5 had no distributed
    # optimizer, sequence parallelism or selective recompute, the 2022 code base has them
    assert stack_for_framework("megatron-lm", a100, "fp16", zero=1)[0] == "megatron-lm-2022"
    sp = stack_for_framework("megatron-lm", a100, "bf16", zero=0, sequence_parallel=True)
    assert sp[0] == "megatron-lm-2022"
    sel = stack_for_framework("megatron-lm", a100, "bf16", recompute="selective")
    assert sel[0] == "megatron-lm-2022"
    full = stack_for_framework("megatron-lm", a100, "bf16", zero=0, recompute="full")
    assert full[0] == "megatron-lm-2021"
    assert stack_for_framework("megatron-lm", h100, "bf16", zero=3)[0] == "megatron-core"
    assert stack_for_framework("megatron-deepspeed", a100, "bf16")[0] == "megatron-deepspeed-2022"
    # the 2022 fork had full recompute only and no sequence parallelism: the rebased fork
    sel = stack_for_framework("megatron-deepspeed", a100, "bf16", recompute="selective")
    assert sel[0] == "megatron-deepspeed"
    assert stack_for_framework("megatron-deepspeed", h100, "bf16")[0] == "megatron-deepspeed"
    assert stack_for_framework("GPT-NeoX", a100, "fp16")[0] == "megatron-deepspeed-2022"
    assert stack_for_framework("gpt_neox", h100, "bf16")[0] == "megatron-deepspeed"
    # a model GPT-NeoX's 2022 code could not express (SwiGLU) is the later code's
    swiglu = planner.load_model("llama3.1-8b")
    neox = stack_for_framework("GPT-NeoX", a100, "bf16", model=swiglu)
    assert neox[0] == "megatron-deepspeed"
    assert stack_for_framework("NeMo Megatron", a100, "bf16") == ("nemo", None)
    assert stack_for_framework("torchtitan", h100, "fp8")[0] == "torchtitan-compiled-float8"
    # its train configs leave compile off: a bf16 row is costed eager (its range spans compiled)
    assert stack_for_framework("torchtitan", h100, "bf16")[0] == "torchtitan-eager"
    # DeepSpeed is data parallel: with TP or PP it ran Megatron's model (Megatron-DeepSpeed)
    assert stack_for_framework("deepspeed", a100, "fp16")[0] == "deepspeed-zero"
    assert stack_for_framework("DeepSpeed", a100, "fp16", tp=4)[0] == "megatron-deepspeed-2022"
    assert stack_for_framework("deepspeed", h100, "bf16", pp=2)[0] == "megatron-deepspeed"
    assert code_bases("deepspeed", a100, tp=4) == ("megatron-deepspeed-2022", "megatron-deepspeed")
    # the published MPT tables' llm-foundry (Triton FlashAttention), not today's
    assert stack_for_framework("llm-foundry", h100, None)[0] == "llm-foundry-2023"
    assert normalise(" NeMo_Framework ") == "nemo-framework"
    stack, note = stack_for_framework("my-own-trainer", h100, None)
    assert stack == DEFAULT_STACK and "my-own-trainer" in note and "torchtitan" in note
    with pytest.raises(PlannerError, match="framework.*my-own-trainer.*megatron-lm"):
        stack_for_framework("my-own-trainer", h100, None, strict=True)
    # schema 1's ZeRO 3 is FSDP full shard: an unknown framework stating it runs PyTorch's
    stack, note = stack_for_framework("Meta internal", h100, "bf16", zero=3)
    assert stack == "torchtitan-eager" and "FSDP" in note and "Meta internal" in note
    assert stack_for_framework("Meta internal", h100, "bf16", zero=2)[0] == "torchtitan-eager"
    assert stack_for_framework("Meta internal", h100, "bf16", zero=1)[0] == DEFAULT_STACK
    assert stack_for_framework("PyTorch", h100, "bf16", zero=0) == ("torchtitan-eager", None)


@pytest.mark.parametrize(
    ("change", "field"),
    [({"activation": "swiglu"}, "activation"), ({"kv_heads": 8}, "kv_heads"), ({}, None)],
)
def test_the_stated_model_dates_the_code_base(change: dict, field: str | None) -> None:
    # a GLU activation, grouped-query attention or an untied output layer came with the 2023
    # Megatron-LM code: an A100 row that states one is Megatron-Core's, as is a Megatron-
    # DeepSpeed row after its rebase; GPT-3's GeLU, multi-head, tied model stays with 2021
    a100 = planner.load_cluster("dgx-a100-80gb")
    model = planner.load_model("gpt3-175b").model_copy(update=change)
    lm = stack_for_framework("megatron-lm", a100, "bf16", zero=0, recompute="full", model=model)
    ds = stack_for_framework("megatron-deepspeed", a100, "bf16", model=model)
    modern = field is not None
    assert lm[0] == ("megatron-core" if modern else "megatron-lm-2021")
    assert ds[0] == ("megatron-deepspeed" if modern else "megatron-deepspeed-2022")
    raw = _v1("gpt3-175b", cluster="dgx-a100-80gb", framework="megatron-lm", num_gpus=64)
    raw["model"].update(change)
    raw["layout"] = {"tp": 8, "pp": 8, "dp": 1, "zero": 0}
    raw["training"].update(seq_len=2048, global_batch=64)
    row = run_case(raw, planner.default_profile, 1)
    assert row["status"] == "ok" and row["stack"] == lm[0], row["reason"]
    # schema 2 names its stack: a model the stack cannot express is the case's error
    raw2 = _v2("gpt3-175b", cluster="dgx-a100-80gb", framework="megatron-lm-2021", num_gpus=64)
    raw2.update(model=raw["model"], layout=raw["layout"], training=raw["training"])
    row2 = run_case(raw2, planner.default_profile, 2)
    assert (row2["status"] == "error") == modern
    if modern:
        assert f"model.{field}" in row2["reason"] and "megatron-lm-2021" in row2["reason"]


def test_code_bases_are_those_a_name_could_stand_for():
    a100, h100 = planner.load_cluster("dgx-a100-80gb"), planner.load_cluster("dgx-h100")
    eras = ("megatron-lm-2021", "megatron-lm-2022", "megatron-core")
    assert code_bases("megatron-lm", a100, zero=0, recompute="full") == eras
    # what the case states rules the older code out; the first is the one costed
    sp = code_bases("Megatron-LM", a100, zero=0, sequence_parallel=True, recompute="selective")
    assert sp == eras[1:]
    assert (
        sp[0]
        == stack_for_framework(
            "megatron-lm", a100, "bf16", zero=0, sequence_parallel=True, recompute="selective"
        )[0]
    )
    assert code_bases("megatron-deepspeed", a100) == (
        "megatron-deepspeed-2022",
        "megatron-deepspeed",
    )
    # one code base: Hopper, a ZeRO-3 row (DeepSpeed's), a framework of one code base, unknown
    assert code_bases("megatron-lm", h100, zero=0, recompute="full") == ()
    assert code_bases("megatron-lm", a100, zero=3, recompute="full") == ()
    assert code_bases("nemo", a100) == code_bases("my-own-trainer", a100) == ()
    swiglu = planner.load_model("gpt3-175b").model_copy(update={"activation": "swiglu"})
    assert code_bases("megatron-lm", a100, 0, False, "full", swiglu) == ()
    # torchtitan compiles only when asked: a bf16 row may have run eager; fp8 runs compiled
    modes = ("torchtitan-eager", "torchtitan-compiled")
    assert code_bases("torchtitan", h100, precision="bf16") == modes
    assert code_bases("torchtitan", h100, precision="fp8") == ()
    assert code_bases("torchtitan-eager", h100, precision="bf16") == ()


def test_a_schema_1_torchtitan_row_is_costed_with_the_uncompiled_loss():
    """Schema 1 cannot say whether torchtitan's version compiled its loss: an fp8 row (costed
    under torchtitan-compiled-float8, whose own loss compiles) takes the uncompiled fp32 loss,
    whose peak is the larger, and says so; schema 2 names the stack and keeps its loss."""
    over = {
        "framework": "torchtitan",
        "layout": {"tp": 1, "pp": 1, "dp": 8, "zero": 3},
        "training": {"seq_len": 8192, "global_batch": 16, "micro_batch": 2, "precision": "fp8"},
    }
    v1 = run_case(_v1(**over), planner.default_profile, 1)
    assert v1["status"] == "ok" and v1["stack"] == "torchtitan-compiled-float8", v1["reason"]
    assert "fp32_log_softmax" in v1["reason"]
    raw = _v2(**{**over, "framework": "torchtitan-compiled-float8"})
    v2 = run_case(raw, planner.default_profile, 2)
    assert v2["status"] == "ok" and "fp32_log_softmax" not in v2["reason"]
    assert v1["predicted_peak_memory_gib"] > v2["predicted_peak_memory_gib"]
    raw["training"]["cross_entropy"] = "fp32_log_softmax"
    stated = run_case(raw, planner.default_profile, 2)
    assert stated["predicted_peak_memory_gib"] == v1["predicted_peak_memory_gib"]
    # a bf16 row is costed eager (its train configs' default), whose loss is the uncompiled one
    bf16 = run_case(_v1(**{**over, "training": {"precision": "bf16"}}), planner.default_profile, 1)
    assert bf16["stack"] == "torchtitan-eager"
    assert bf16["range_code_bases"] == ["torchtitan-eager", "torchtitan-compiled"]
    # XLA compiles a JAX step's loss in every version: a MaxText row under the same stack
    # keeps the stack's loss, and so its peak
    jax = run_case(_v1(**{**over, "framework": "MaxText"}), planner.default_profile, 1)
    assert jax["stack"] == "torchtitan-compiled-float8" and "fp32_log_softmax" not in jax["reason"]
    assert jax["predicted_peak_memory_gib"] == v2["predicted_peak_memory_gib"]


def _a100_megatron_case(**training) -> dict:
    raw = _v1("gpt3-175b", cluster="dgx-a100-80gb", framework="megatron-lm", num_gpus=64)
    raw["layout"] = {"tp": 8, "pp": 8, "dp": 1, "zero": 0}
    raw["training"].update(seq_len=2048, global_batch=64, **training)
    raw["measured"] = {"tokens_per_s_per_gpu": 110.0}
    return raw


@pytest.mark.parametrize("micro_batch", [1, None])
def test_a_versionless_framework_ranges_over_its_code_bases(micro_batch):
    """Schema 1 'megatron-lm' on an A100 could be any of three code bases: the row costs the
    oldest and its range spans all three, each at the stated inputs (its unstated knobs
    tuned); schema 2 names one and ranges over the knobs alone."""
    raw = _a100_megatron_case(micro_batch=micro_batch)
    row = run_case(raw, planner.default_profile, 1)
    assert row["status"] == "ok", row["reason"]
    assert row["stack"] == "megatron-lm-2021"
    assert row["range_code_bases"] == ["megatron-lm-2021", "megatron-lm-2022", "megatron-core"]
    assert "does not say which of its code bases ran" in row["reason"]
    lo, hi = row["predicted_range_tokens_per_s_per_gpu"]
    assert row["in_range"] == (lo <= 110.0 <= hi)
    named = {}
    for stack in row["range_code_bases"]:
        raw2 = _a100_megatron_case(micro_batch=micro_batch)
        raw2["stack"] = stack
        del raw2["framework"]
        if micro_batch is None:
            raw2["unstated"] = ["micro_batch"]
        named[stack] = run_case(raw2, planner.default_profile, 2)
        assert "range_code_bases" not in named[stack]
        r2 = named[stack].get("predicted_range_tokens_per_s_per_gpu") or (
            [named[stack]["predicted_tokens_per_s_per_gpu"]] * 2
        )
        assert lo <= r2[0] + 0.01 and r2[1] <= hi + 0.01, stack
    old = named["megatron-lm-2021"]["predicted_tokens_per_s_per_gpu"]
    assert row["predicted_tokens_per_s_per_gpu"] == old
    # the newer code (FlashAttention, fused kernels) is faster: the range is not a point
    assert named["megatron-core"]["predicted_tokens_per_s_per_gpu"] > old
    assert hi >= named["megatron-core"]["predicted_tokens_per_s_per_gpu"] - 0.01


def test_an_unknown_framework_with_fsdp_and_a_pipeline_is_not_regathered_per_micro_batch():
    """An unknown framework stating ZeRO 3 with a pipeline is costed as PyTorch FSDP2 (params
    gathered once per step under the pipeline), not as the default stack's Megatron-FSDP,
    which gathers every layer again for each micro-batch: the FSDP2 row is faster and has
    less data-parallel traffic exposed."""
    raw = _a100_megatron_case(micro_batch=1)
    raw.update(framework="our-trainer", cluster="dgx-h100", num_gpus=256)
    raw["layout"] = {"tp": 8, "pp": 8, "dp": 4, "zero": 3, "vpp": 1}
    raw["training"]["global_batch"] = 64
    row = run_case(raw, planner.default_profile, 1)
    assert row["status"] == "ok" and row["stack"] == "torchtitan-eager", row["reason"]
    assert "FSDP" in row["reason"]
    raw["framework"] = "megatron-core"
    mcore = run_case(raw, planner.default_profile, 1)
    assert mcore["stack"] == "megatron-core"
    assert row["predicted_tokens_per_s_per_gpu"] > mcore["predicted_tokens_per_s_per_gpu"]


def test_todays_megatron_deepspeed_runs_flash_attention_not_materialised_scores():
    """Megatron-DeepSpeed or GPT-NeoX on an H100 is the rebased fork, whose published
    recipes run flash-attn's Triton kernel: an 8k-token Llama row is costed near Megatron-Core,
    not at the quarter of its speed materialised scores would give."""
    raw = _v1("llama3.1-8b", framework="megatron-deepspeed")
    raw["training"].update(seq_len=8192, global_batch=64, recompute=None)
    row = run_case(raw, planner.default_profile, 1)
    assert row["status"] == "ok" and row["stack"] == "megatron-deepspeed", row["reason"]
    raw["framework"] = "megatron-core"
    mcore = run_case(raw, planner.default_profile, 1)
    ratio = row["predicted_tokens_per_s_per_gpu"] / mcore["predicted_tokens_per_s_per_gpu"]
    assert 0.6 < ratio < 1.0, ratio


@pytest.mark.parametrize("cluster", ["dgx-b200", "hgx-h800"])
def test_a_host_offload_the_cluster_cannot_cost_is_no_error(cluster):
    """A schema 1 row that fits at no recompute level, on a cluster without host memory
    figures: the ZeRO-Offload fallback cannot be costed there, so the row is infeasible with
    its reason, never an error."""
    raw = _v1("llama3.1-70b", framework="deepspeed", cluster=cluster, num_gpus=64)
    raw["layout"] = {"tp": 1, "pp": 1, "dp": 64, "zero": 1}
    raw["training"].update(seq_len=4096, global_batch=256)
    row = run_case(raw, planner.default_profile, 1)
    assert row["status"] == "infeasible", row["reason"]
    assert "out of memory" in row["reason"] or "GiB" in row["reason"]


def test_an_unstated_data_parallel_size_is_implied_by_the_job():
    raw = _v1()
    raw["layout"] = {"tp": 2, "pp": 1, "dp": None, "zero": 1}
    row = run_case(raw, planner.default_profile, 1)
    assert row["status"] == "ok", row["reason"]
    raw["layout"]["dp"] = 4
    assert run_case(raw, planner.default_profile, 1) == row
    raw["layout"] = {"tp": 3, "pp": 1, "zero": 1}  # 8 GPUs are no whole number of copies
    row = run_case(raw, planner.default_profile, 1)
    assert row["status"] == "error" and "layout.dp" in row["reason"], row["reason"]
    raw = _v1(framework=None)  # a null framework reads as an unpublished one
    row = run_case(raw, planner.default_profile, 1)
    assert row["status"] == "ok" and row["stack"] == DEFAULT_STACK, row["reason"]


def test_a_versioned_stack_or_hopper_gets_no_code_base_range():
    raw = _a100_megatron_case(micro_batch=1)
    raw["cluster"] = "dgx-h100"
    row = run_case(raw, planner.default_profile, 1)
    assert row["status"] == "ok", row["reason"]
    assert "range_code_bases" not in row and "code bases ran" not in row["reason"]


def test_the_listed_table_names_every_framework_and_the_rule_for_others():
    from planner.cli.list_specs import framework_rows
    from planner.validate.frameworks import FRAMEWORK_STACKS

    rows = dict(framework_rows())
    assert set(FRAMEWORK_STACKS) < set(rows)
    other = rows["(any other name)"]
    assert DEFAULT_STACK in other and "torchtitan-eager with ZeRO 2 or 3" in other
    assert "'compile'" in rows["fsdp2"] and "torchtitan-async-tp" in rows["torchtitan"]


def test_every_table_entry_is_a_shipped_stack():
    from planner.validate.frameworks import (
        BY_GENERATION,
        BY_PRECISION,
        BY_ZERO3,
        FRAMEWORK_STACKS,
    )

    tables = (FRAMEWORK_STACKS, BY_GENERATION, BY_PRECISION, BY_ZERO3)
    for stack in [s for table in tables for s in table.values()]:
        planner.load_stack(stack)


def test_published_aliases_cost_as_their_software():
    """Other published names of the same software map as the name they stand for, Hopper
    switch included; every generation- or ZeRO-dependent row has a base row."""
    from planner.validate.frameworks import BY_GENERATION, BY_ZERO3, FRAMEWORK_STACKS

    a100, h100 = planner.load_cluster("dgx-a100-80gb"), planner.load_cluster("dgx-h100")
    pairs = {
        "NeMo Framework": "nemo",
        "Megatron-DS": "megatron-deepspeed",
        "DeepSpeed_Megatron": "megatron-deepspeed",
        "PyTorch FSDP": "llm-foundry",
        "FSDP2": "torchtitan-eager",
        "DeepSpeed-MoE": "megatron-deepspeed",
        "FlagScale": "megatron-core",
        "T5X": "maxtext",
        "EasyLM": "maxtext",
    }
    for alias, same in pairs.items():
        for cluster in (a100, h100):
            canonical = stack_for_framework(same, cluster, "bf16")[0]
            if same in ("llm-foundry", "torchtitan-eager"):
                canonical = same
            assert stack_for_framework(alias, cluster, "bf16") == (canonical, None), alias
    for key, _ in (*BY_GENERATION, *BY_ZERO3):
        assert key in FRAMEWORK_STACKS


@pytest.mark.parametrize(
    ("framework", "precision", "stack"),
    [
        ("torchtitan (compiled)", "bf16", "torchtitan-compiled"),
        ("FSDP2 + torch.compile", "bf16", "torchtitan-compiled"),
        ("PyTorch FSDP2 (torch.compile)", "fp8", "torchtitan-compiled-float8"),
        ("torchtitan, AsyncTP", "bf16", "torchtitan-async-tp"),
        ("torchtitan with inductor", "bf16", "torchtitan-compiled"),
        ("torchtitan", "bf16", "torchtitan-eager"),  # says nothing: eager, ranged over both
        ("llm-foundry torch.compile", "bf16", "llm-foundry-2023"),  # not the eager stack
    ],
)
def test_a_framework_name_that_says_how_the_run_was_issued_is_costed_so(
    framework, precision, stack
):
    h100 = planner.load_cluster("dgx-h100")
    assert stack_for_framework(framework, h100, precision, zero=3) == (stack, None)
    ranged = code_bases(framework, h100, zero=3, precision=precision)
    assert bool(ranged) == (framework == "torchtitan")


def test_v1_case_takes_its_stacks_kernels():
    raw = _v1(
        "gpt3-175b",
        cluster="dgx-a100-80gb",
        num_gpus=64,
        framework="megatron-lm",
        layout={"tp": 8, "pp": 8, "dp": 1, "zero": 0, "vpp": 1},
        training={"seq_len": 2048, "global_batch": 64, "recompute": "full", "precision": "fp16"},
    )
    i = case_inputs(parse_case(raw))
    assert i.stack.name == "megatron-lm-2021" and not i.enforce_stack
    layout, training = apply_stack(i.stack, i.model, i.layout, i.training)
    assert training.attention_kernel == "unfused" and training.dropout
    assert layout.pp_scatter_gather
    h100 = case_inputs(parse_case({**raw, "cluster": "dgx-h100"}))
    assert h100.stack.name == "megatron-core"


def test_a_published_version_after_the_name_is_not_part_of_it():
    a100 = planner.load_cluster("dgx-a100-80gb")
    for name, key in [
        ("NeMo 2.0", "nemo"),
        ("Megatron-LM (v2.5)", "megatron-lm"),
        ("DeepSpeed v0.9.2", "deepspeed"),
        ("llm-foundry v0.3.0", "llm-foundry"),
        ("NeMo Framework 24.07", "nemo-framework"),
        ("nemo 2", "nemo-2"),  # a table key keeps its number
        ("HAI-LLM", "hai-llm"),  # not a version: left as it is (and not in the table)
    ]:
        assert normalise(name) == key, name
    assert stack_for_framework("NeMo 2.0", a100, "bf16") == ("nemo", None)


def test_vendor_words_unhyphenated_spellings_and_compound_names_find_their_key():
    for name, key in [
        ("NVIDIA Megatron-LM", "megatron-lm"),
        ("Microsoft DeepSpeed v0.9.2", "deepspeed"),
        ("MegatronLM", "megatron-lm"),
        ("MegatronBridge", "megatron-bridge"),
        ("MosaicML Composer", "composer"),
        ("llm-foundry/Composer", "llm-foundry"),
        ("HF Transformers + DeepSpeed", "deepspeed"),
        ("MegatronLM+DeepSpeed", "megatron-deepspeed"),  # two names, one code base
        ("DeepSpeed and Megatron-LM", "megatron-deepspeed"),
        ("Megatron-LM with DeepSpeed ZeRO", "megatron-deepspeed"),
        ("NeMo on DGX Cloud", "nemo"),
        ("NVIDIA", "nvidia"),  # a vendor alone names no framework
        ("Colossal AI v0.4", "colossal-ai"),
        ("PyTorch torchtitan", "torchtitan"),  # "pytorch" as a vendor word
        ("TorchTitan w/ FSDP2", "torchtitan"),  # "w/" is "with"
        ("Acme LM (PyTorch FSDP)", "pytorch-fsdp"),  # unknown outside, known in parentheses
        ("torch.distributed FSDP2", "fsdp2"),  # the one word that is a key
        ("Megatron-LM core_r0.9.0", "megatron-lm"),
        ("my trainer (internal)", "my-trainer-(internal)"),
    ]:
        assert normalise(name) == key, name
    a100 = planner.load_cluster("dgx-a100-80gb")
    assert stack_for_framework("NVIDIA Megatron-LM", a100, "fp16") == ("megatron-lm-2021", None)
    # pathological names stay cheap: one pass per word
    assert normalise(" + ".join(["nvidia"] * 300)) == "-".join(["nvidia", "+"] * 299 + ["nvidia"])


def test_unknown_framework_is_costed_and_said_or_strictly_an_error():
    raw = _v1(framework="homegrown")
    row = run_case(raw, planner.default_profile)
    assert row["status"] == "ok" and "homegrown" in row["reason"]
    strict = run_case(raw, planner.default_profile, strict=True)
    assert strict["status"] == "error" and "framework" in strict["reason"]


DS_ON_B200 = {
    "cluster": "dgx-b200",
    "num_gpus": 256,
    "framework": "megatron-bridge",
    "layout": {"tp": 1, "pp": 16, "dp": 16, "ep": 8, "zero": 1, "vpp": 1},
}
# Megatron-Bridge's Llama 3 70B FP8 preset on 64 GB200: Megatron-FSDP, data parallel only
FSDP_70B_ON_GB200 = {
    "cluster": "gb200-nvl72",
    "num_gpus": 64,
    "framework": "megatron-bridge",
    "layout": {"tp": 1, "pp": 1, "dp": 64, "zero": 3},
}


def test_notes_are_never_read():
    """What v1 only says in notes changes nothing: v2 has fields for it."""
    plain = run_case(_v1("deepseek-v3", **DS_ON_B200), planner.default_profile)
    notes = "trained with MTP; offloads activations of 40 layers; recompute: not stated"
    noted = run_case(_v1("deepseek-v3", **DS_ON_B200, notes=notes), planner.default_profile)
    for key in ("status", "predicted_tokens_per_s_per_gpu", "predicted_peak_memory_gib"):
        assert plain[key] == noted[key]


def test_v1_layout_outside_the_stack_is_costed_with_a_note_v2_is_refused():
    over = {"layout": {"tp": 1, "pp": 1, "dp": 8, "zero": 2}, "cluster": "dgx-a100-80gb"}
    v1 = run_case(_v1(framework="nemo", **over), planner.default_profile)
    # NeMo's distributed optimizer is ZeRO 1: a ZeRO 2 row is costed as stated, and says so
    assert v1["status"] == "ok" and "stack nemo" in v1["reason"]
    assert "cannot run ZeRO stage 2" in v1["reason"]
    v2 = run_case(_v2(framework="nemo", **over), planner.default_profile, 2)
    assert v2["status"] == "error" and "nemo" in v2["reason"]
    # Megatron-LM: the oldest code base that runs it (a ZeRO 2 Llama: Megatron-Core's FSDP)
    lm = run_case(_v1(framework="megatron-lm", **over), planner.default_profile)
    assert "stack megatron-core" in lm["reason"] and "cannot run" not in lm["reason"]


# ------------------------------------------------------------------ schema 2 fields


def test_v2_names_a_shipped_stack_never_a_path():
    row = run_case(_v2(framework="../stacks/nemo.yaml"), planner.default_profile, 2)
    assert row["status"] == "error" and "not a shipped stack" in row["reason"]


def test_v2_unstated_knob_must_not_also_be_given():
    with pytest.raises(ValidationError, match="unstated"):
        CaseV2.model_validate({**_v2(), "unstated": ["micro_batch"]})
    with pytest.raises(ValidationError):
        CaseV2.model_validate({**_v2(), "unstated": ["tp"]})


def test_v2_memory_figure_states_its_kind():
    raw = _v2(measured={"tokens_per_s_per_gpu": 9000.0, "peak_memory_gib": 60.0})
    with pytest.raises(ValidationError, match="peak_memory_kind"):
        CaseV2.model_validate(raw)
    rows = {}
    for kind in ("allocated", "reserved"):
        raw["measured"]["peak_memory_kind"] = kind
        rows[kind] = run_case(copy.deepcopy(raw), planner.default_profile, 2)
        assert rows[kind]["predicted_peak_memory_kind"] == kind
    assert (
        rows["reserved"]["predicted_peak_memory_gib"]
        > rows["allocated"]["predicted_peak_memory_gib"]
    )


def test_v2_structured_mtp_and_offload_reach_the_simulation():
    base = _v2("deepseek-v3", **DS_ON_B200)
    mtp = copy.deepcopy(base)
    mtp["model"]["mtp_layers"] = 1
    r0, r1 = (run_case(r, planner.default_profile, 2) for r in (base, mtp))
    assert r1["predicted_tokens_per_s_per_gpu"] < r0["predicted_tokens_per_s_per_gpu"]
    off = _v2(
        "llama3.1-70b",
        **FSDP_70B_ON_GB200,
        training={
            "seq_len": 8192,
            "global_batch": 256,
            "micro_batch": 2,
            "precision": "fp8",
            "offload_layers": 40,
        },
    )
    assert case_inputs(parse_case(off, 2)).training.offload_layers == 40


def test_v2_unstated_recompute_is_tuned_stated_none_is_not():
    over = {
        "layout": {"tp": 2, "pp": 1, "dp": 4, "zero": 1, "sequence_parallel": True},
        "training": {"seq_len": 8192, "global_batch": 64, "micro_batch": 4, "recompute": "none"},
    }
    stated = run_case(_v2(**over), planner.default_profile, 2)
    assert stated["status"] == "infeasible"
    raw = _v2(**over)
    del raw["training"]["recompute"]
    raw["unstated"] = ["recompute"]
    tuned = run_case(raw, planner.default_profile, 2)
    assert tuned["status"] == "ok", tuned["reason"]
    assert "not stated, tuned: recompute" in tuned["reason"]
    lo, hi = tuned["predicted_range_tokens_per_s_per_gpu"]
    assert lo <= tuned["predicted_tokens_per_s_per_gpu"] <= hi


def test_a_knob_the_stack_fixes_is_determined_not_ranged():
    """vpp left open on a stack whose pipeline runs 1F1B only: one legal setting, no range
    (it would count as a case with an unstated knob whose range is a point)."""
    raw = _v2(
        "gpt3-1.3b",  # GeLU, multi-head, tied: a model the 2022 code could express
        layout={"tp": 1, "pp": 4, "dp": 2, "zero": 1},
        training={"seq_len": 2048, "global_batch": 64, "micro_batch": 1, "recompute": "full"},
    )
    raw["stack"] = "megatron-deepspeed-2022"
    raw["cluster"] = "dgx-a100-80gb"
    raw["unstated"] = ["vpp"]
    row = run_case(raw, planner.default_profile, 2)
    assert row["status"] == "ok", row["reason"]
    assert "not stated, determined: vpp none" in row["reason"]
    assert "predicted_range_tokens_per_s_per_gpu" not in row and "in_range" not in row
    raw["stack"] = "megatron-core"  # interleaving is legal there: a range again
    row = run_case(raw, planner.default_profile, 2)
    assert "not stated, tuned: vpp" in row["reason"]
    assert "predicted_range_tokens_per_s_per_gpu" in row


def test_file_schema_is_told_by_its_shape():
    assert case_file([_v1()])[0] == 1
    assert case_file({"schema": 2, "cases": [_v2()]})[0] == 2
    assert case_file({"schema": 1, "cases": [_v1()]})[0] == 1
    for bad in (
        {"schema": 3, "cases": []},
        {"schema": 2, "cases": [], "extra": 1},
        {"cases": []},
        {"schema": True, "cases": []},
    ):
        with pytest.raises(PlannerError, match="schema"):
            case_file(bad)


# ------------------------------------------------------------------ v1 and v2 agree

FRAMEWORK_OF = {
    "megatron-lm-2021": "megatron-lm",
    "megatron-lm-2022": "megatron-lm",
    "deepspeed-zero3-2021": "megatron-lm",  # a ZeRO-3 row on A100 (frameworks.BY_ZERO3)
    "megatron-core": "megatron-core",
    "megatron-deepspeed": "megatron-deepspeed",
    "megatron-deepspeed-2022": "megatron-deepspeed",  # on an A100 (frameworks.BY_GENERATION)
    "nemo": "nemo",
    "megatron-bridge": "megatron-bridge",
    "llm-foundry-2023": "llm-foundry",
}


def _as_v1(raw: dict) -> dict:
    """A shipped schema 2 case written in schema 1: unstated knobs as nulls."""
    v1 = copy.deepcopy(raw)
    v1["framework"] = FRAMEWORK_OF[v1.pop("stack")]
    for knob in v1.pop("unstated", []):
        section = "layout" if knob in ("vpp", "zero") else "training"
        v1[section][knob] = None
    v1["measured"].pop("peak_memory_kind", None)
    return v1


@pytest.mark.parametrize("name", ["public", "heldout_moe"])
def test_v1_and_v2_give_the_same_predictions(name):
    schema, cases = read_case_file(name)
    assert schema == 2
    compared = 0
    for raw in cases[::5]:
        v1 = _as_v1(raw)
        r2 = run_case(raw, planner.default_profile, 2)
        r1 = run_case(v1, planner.default_profile, 1)
        if r1["stack"] != raw["stack"]:
            # schema 1 cannot tell which of a framework's code bases ran a case that the
            # oldest one can run (a Korthikanti et al. 2022 full-recompute baseline): it takes
            # the oldest; schema 2 names the stack
            eras = BY_CAPABILITY.get((normalise(v1["framework"]), False), ())
            assert eras.index(r1["stack"]) < eras.index(raw["stack"]), raw["id"]
            continue
        compared += 1
        assert r2["status"] == "ok", (raw["id"], r2["reason"])
        for key in ("status", "predicted_tokens_per_s_per_gpu"):
            assert r1.get(key) == r2.get(key), (raw["id"], key)
        if "range_code_bases" in r1:
            # schema 1 does not say which code base ran: its range spans them all, and so
            # holds the range schema 2 gives under the one it names
            lo2, hi2 = r2.get("predicted_range_tokens_per_s_per_gpu") or (
                [r2["predicted_tokens_per_s_per_gpu"]] * 2
            )
            lo1, hi1 = r1["predicted_range_tokens_per_s_per_gpu"]
            assert lo1 <= lo2 and hi2 <= hi1, raw["id"]
            assert raw["stack"] in r1["range_code_bases"], raw["id"]
        else:
            key = "predicted_range_tokens_per_s_per_gpu"
            assert r1.get(key) == r2.get(key), (raw["id"], key)
    assert compared >= len(cases[::5]) - 2


def test_a_huge_schema_value_is_cut_in_its_error_line():
    for value in (10**400, list(range(3000)), {f"k{i}": i for i in range(3000)}):
        with pytest.raises(PlannerError) as exc:
            case_file({"schema": value, "cases": []})
        assert len(str(exc.value)) < 400


def test_the_schema_knobs_are_the_tunable_ones():
    from typing import get_args

    from planner.unknowns import UNKNOWABLE
    from planner.validate.cases import Knob

    assert get_args(Knob) == UNKNOWABLE


# ------------------------------------------------------------------ activation offload (schema 1)


def _no_fit_without_offload(schema: int) -> dict:
    """Llama 3.1 70B, FSDP over 64 GB200 at micro-batch 2 x 8192 with no recompute: the GB200
    FP8 recipe shape, whose activations fit only with layers offloaded to host memory."""
    make = _v1 if schema == 1 else _v2
    return make(
        "llama3.1-70b",
        **FSDP_70B_ON_GB200,
        training={"global_batch": 256, "micro_batch": 2, "recompute": "none", "precision": "fp8"},
    )


def test_schema_1_offloads_the_fewest_layers_that_fit() -> None:
    v1 = run_case(_no_fit_without_offload(1), planner.default_profile, 1)
    assert v1["status"] == "ok", v1["reason"]
    assert "schema 1 cannot state activation offload" in v1["reason"]
    n = int(v1["reason"].rsplit("(", 1)[1].rstrip(")"))
    assert 0 < n < 80
    assert v1["predicted_peak_memory_gib"] <= 184.0
    # one layer fewer does not fit: the fewest
    inputs = case_inputs(parse_case(_no_fit_without_offload(1), 1))
    lay, tr = apply_stack(inputs.stack, inputs.model, inputs.layout, inputs.training)
    fewer = planner.simulate(
        inputs.model, inputs.cluster, lay, tr.with_changes(offload_layers=n - 1), stack=inputs.stack
    )
    assert not fewer.fits


def test_schema_2_states_offload_so_it_is_never_guessed() -> None:
    v2 = run_case(_no_fit_without_offload(2), planner.default_profile, 2)
    assert v2["status"] == "infeasible"
    assert "offload" not in v2["reason"]


def test_schema_1_offload_needs_a_legal_layout() -> None:
    # full recompute cannot be combined with offload (Megatron-Core): stays infeasible
    raw = _no_fit_without_offload(1)
    raw["layout"] = {"tp": 1, "pp": 1, "dp": 64, "zero": 0}
    raw["training"] = {**raw["training"], "global_batch": 1024, "micro_batch": 16}
    raw["training"]["recompute"] = "full"
    row = run_case(raw, planner.default_profile, 1)
    assert row["status"] == "infeasible"
    assert "schema 1 cannot state activation offload" not in row["reason"]


# ------------------------------------------------------------- reduced optimizer state (schema 1)


def _no_fit_with_fp32_states(framework: str) -> dict:
    """Llama 3.1 70B, tp 8 x pp 4 without data parallelism at micro-batch 2 x 8192: 80.9 GiB
    with fp32 master and moments (12 B), 76.7 GiB with the master as remainders (10 B)."""
    return _v1(
        "llama3.1-70b",
        num_gpus=32,
        framework=framework,
        layout={"tp": 8, "pp": 4, "dp": 1, "zero": 1, "sequence_parallel": True},
        training={"global_batch": 32, "micro_batch": 2, "seq_len": 8192, "recompute": "none"},
    )


def test_schema_1_costs_the_largest_reduced_state_that_fits() -> None:
    row = run_case(_no_fit_with_fp32_states("nemo"), planner.default_profile, 1)
    assert row["status"] == "ok", row["reason"]
    assert "costed with optimizer_states fp32_remainders" in row["reason"]
    assert "offload" not in row["reason"]


def test_schema_1_tunes_unstated_knobs_under_the_reduced_state_that_fits() -> None:
    # at 16k tokens no micro-batch fits with fp32 optimizer states: the unstated micro-batch
    # is tuned under the reduced state that makes the stated default fit, not left untuned
    raw = _no_fit_with_fp32_states("nemo")
    raw["layout"]["vpp"] = 1
    raw["training"].update(micro_batch=None, seq_len=16384)
    row = run_case(raw, planner.default_profile, 1)
    reason = row["reason"]
    assert row["status"] == "ok", reason
    assert "no legal setting of micro_batch fits" in reason
    assert reason.index("costed with optimizer_states fp32_remainders") < reason.index(
        "not stated, tuned: micro_batch 1"
    )
    lo, hi = row["predicted_range_tokens_per_s_per_gpu"]
    assert lo <= row["predicted_tokens_per_s_per_gpu"] <= hi


def test_schema_1_reduced_state_only_where_the_stack_runs_it() -> None:
    # torchtitan keeps fp32 master and moments: no reduced state is guessed, and pp 4 rules out
    # activation offload, so only the last fallback, a heavier recompute, makes it fit (its
    # stated ZeRO 1, which torchtitan does not run, is costed as given and bars nothing)
    row = run_case(_no_fit_with_fp32_states("torchtitan"), planner.default_profile, 1)
    assert "optimizer_states" not in row["reason"] and "offload" not in row["reason"]
    assert "costed with recompute selective (stated none)" in row["reason"]
    assert row["status"] == "ok"


# ------------------------------------------------- recompute, the last schema 1 fallback


def _no_fit_without_recompute(schema: int, micro_batch: int) -> dict:
    """GPT-3 175B, tp 8 x pp 8 on A100s under Megatron-LM 2022 (materialised attention; the
    distributed optimizer, ZeRO 1 with dp 1, is what makes schema 1 pick the 2022 code base,
    which runs selective recompute), no recompute stated: micro-batch 1 needs ~100 GiB (fits
    with selective, the attention scores recomputed), micro-batch 2 ~157 GiB (fits only with
    full recompute); pp 8 rules out offload and fp16 the reduced optimizer states."""
    make = _v1 if schema == 1 else _v2
    return make(
        "gpt3-175b",
        cluster="dgx-a100-80gb",
        num_gpus=64,
        framework="megatron-lm" if schema == 1 else "megatron-lm-2022",
        layout={"tp": 8, "pp": 8, "dp": 1, "sequence_parallel": False, "zero": 1},
        training={
            "global_batch": 64,
            "micro_batch": micro_batch,
            "seq_len": 2048,
            "recompute": "none",
            "precision": "fp16",
        },
    )


def _costed_with(raw: dict, recompute: str, **change: object) -> planner.StepReport:
    """The case's stated inputs with ``recompute`` (the stack's selective modules) and any
    other training ``change``."""
    inputs = case_inputs(parse_case(raw, 1))
    training = inputs.training.with_changes(recompute=recompute, **change)
    lay, tr = apply_stack(inputs.stack, inputs.model, inputs.layout, training)
    return planner.simulate(inputs.model, inputs.cluster, lay, tr, stack=inputs.stack)


@pytest.mark.parametrize(("micro_batch", "level"), [(1, "selective"), (2, "full")])
def test_schema_1_raises_recompute_to_the_lightest_that_fits(micro_batch: int, level: str) -> None:
    raw = _no_fit_without_recompute(1, micro_batch)
    row = run_case(raw, planner.default_profile, 1)
    assert row["status"] == "ok", row["reason"]
    assert f"costed with recompute {level} (stated none)" in row["reason"]
    assert "stated recompute or layout is doubtful" in row["reason"]
    assert not _costed_with(raw, "none").fits
    lighter = {"selective": "none", "full": "selective"}[level]
    assert not _costed_with(raw, lighter).fits  # the lightest: one level less does not fit
    # the unstated interleaving depth is tuned at the raised level too: the fastest setting,
    # never slower than the stated non-interleaved schedule, and the row gives its range
    reason = row["reason"]
    assert reason.index("costed with recompute") < reason.index("not stated, tuned: vpp")
    lo, hi = row["predicted_range_tokens_per_s_per_gpu"]
    assert row["predicted_tokens_per_s_per_gpu"] == pytest.approx(hi, rel=1e-4)
    assert lo * (1 - 1e-4) <= _costed_with(raw, level).tokens_per_s_per_gpu <= hi * (1 + 1e-4)


def test_schema_1_raises_recompute_only_to_a_level_the_stack_runs() -> None:
    """The same case with ZeRO 0 is Megatron-LM 2021's (v2.5: full recompute only): the
    micro-batch that fits with selective is raised to full."""
    raw = _no_fit_without_recompute(1, 1)
    raw["layout"]["zero"] = 0
    row = run_case(raw, planner.default_profile, 1)
    assert row["status"] == "ok" and row["stack"] == "megatron-lm-2021", row["reason"]
    assert "costed with recompute full (stated none)" in row["reason"]


def test_schema_1_tunes_the_doubtful_recompute_with_the_unstated_knobs() -> None:
    """Llama 3.1 405B as its report's Table 4 lays it out on 16,384 H100s (TP 8 x PP 16 x DP
    128, 16 sequences per data-parallel rank), micro-batch and interleaving depth not stated,
    recompute stated none: no setting of the two knobs fits without recompute, and at the
    lightest recompute that fits only the non-interleaved schedule does, half bubble at 16
    micro-batches over 16 stages. A heavier recompute that lets the interleaved schedule fit
    is faster; the run was tuned, so the row takes the fastest, the top of its range."""
    raw = _v1(
        "llama3.1-405b",
        cluster="meta-h100-roce",
        num_gpus=16384,
        layout={"tp": 8, "pp": 16, "dp": 128, "sequence_parallel": True, "zero": 1},
        training={"global_batch": 2048, "micro_batch": None, "recompute": "none"},
    )
    row = run_case(raw, planner.default_profile, 1)
    assert row["status"] == "ok", row["reason"]
    assert "no legal setting of micro_batch, vpp fits" in row["reason"]
    assert "is the fastest" in row["reason"]
    lo, hi = row["predicted_range_tokens_per_s_per_gpu"]
    assert row["predicted_tokens_per_s_per_gpu"] == pytest.approx(hi, rel=1e-4)
    # never slower than full recompute with the two knobs tuned
    inputs = case_inputs(parse_case(raw, 1))
    full = tuned_prediction(
        inputs.model,
        inputs.cluster,
        inputs.layout,
        inputs.training.with_changes(recompute="full"),
        planner.default_profile(inputs.cluster),
        inputs.unstated,
        inputs.stack,
    )
    assert row["predicted_tokens_per_s_per_gpu"] >= full.report.tokens_per_s_per_gpu * (1 - 1e-4)


def _mla_selective(stack: str = "megatron-core") -> dict:
    """DeepSeek-V3 on 2,048 H800s as its report describes it (PP 16, EP 64, no TP), stated
    selective recompute: Megatron-Core's default set (the core attention) leaves about 106 GiB
    per GPU; the report recomputed the norms and the MLA up-projections."""
    raw = _v1(
        "deepseek-v3",
        cluster="hgx-h800",
        num_gpus=2048,
        framework=stack,
        layout={"tp": 1, "pp": 16, "dp": 128, "ep": 64, "vpp": 1, "zero": 1},
        training={"seq_len": 4096, "global_batch": 15360, "recompute": "selective"},
    )
    raw["training"]["precision"] = "fp8"
    raw["measured"]["tokens_per_s_per_gpu"] = 1543.0
    return raw


def test_schema_1_widens_selective_recompute_before_raising_it_to_full() -> None:
    """Schema 1 cannot state which submodules selective recompute re-runs: where the stack's
    default set does not fit, the row takes the lightest wider set of Megatron-Core's
    --recompute-modules that does (here the norms and the MLA up-projection), not full
    recompute, and its range spans every setting that fits (full's included)."""
    raw = _mla_selective()
    row = run_case(raw, planner.default_profile, 1)
    assert row["status"] == "ok", row["reason"]
    assert "costed with recompute selective (core_attn, layernorm, mla_up_proj)" in row["reason"]
    assert not _costed_with(raw, "selective").fits
    # Megatron-Core fp8: costed with fp8 weights first (FP8_NOTE), the recompute under them
    assert FP8_NOTE in row["reason"]
    full = _costed_with(raw, "full", fp8_param_gather=True).tokens_per_s_per_gpu
    assert row["predicted_tokens_per_s_per_gpu"] > full
    lo, hi = row["predicted_range_tokens_per_s_per_gpu"]
    assert lo <= full * (1 + 1e-4) and hi == pytest.approx(row["predicted_tokens_per_s_per_gpu"])
    assert "recompute settings that fit" in row["reason"]
    # a stack with no module list (Megatron-LM 2022's selective is the core attention alone)
    # goes to full, as before
    lm = _no_fit_without_recompute(1, 2)
    assert (
        "costed with recompute full (stated none)"
        in run_case(lm, planner.default_profile, 1)["reason"]
    )


def test_a_stack_refuses_recompute_modules_it_cannot_rerun() -> None:
    stack = planner.load_stack("megatron-lm-2022")
    training = planner.Training(
        seq_len=2048, global_batch=8, recompute="selective", recompute_modules=("layernorm",)
    )
    errors = stack_violations(stack, planner.Layout(dp=8), training)
    assert [e.field for e in errors] == ["training.recompute_modules"]
    assert "megatron-lm-2022" in str(errors[0]) and "layernorm" in str(errors[0])
    core = planner.load_stack("megatron-core")
    assert not stack_violations(core, planner.Layout(dp=8), training)


def _zero3_1t(schema: int) -> dict:
    """A 1T GPT under ZeRO-3 alone on 1,024 A100s at full recompute (DeepSpeed's Azure blog
    runs): does not fit unless the optimizer and the checkpoints go to host memory."""
    make = _v1 if schema == 1 else _v2
    return make(
        "gpt-1008b",
        cluster="dgx-a100-80gb",
        num_gpus=1024,
        framework="megatron-deepspeed" if schema == 1 else "megatron-deepspeed-2022",
        layout={"tp": 1, "pp": 1, "dp": 1024, "zero": 3},
        training={
            "seq_len": 1024,
            "micro_batch": 8,
            "global_batch": 8192,
            "recompute": "full",
            "precision": "fp16",
        },
    )


def test_schema_1_offloads_to_the_host_where_no_recompute_level_fits() -> None:
    row = run_case(_zero3_1t(1), planner.default_profile, 1)
    assert row["status"] == "ok", row["reason"]
    assert "schema 1 cannot state host offload" in row["reason"]
    assert "costed with optimizer_offload" in row["reason"]
    # schema 2 states its offloads: without them the case does not fit, and says so
    assert run_case(_zero3_1t(2), planner.default_profile, 2)["status"] == "infeasible"
    # a stack without ZeRO-Offload is never given it
    raw = _zero3_1t(1)
    raw["framework"] = "megatron-core"
    assert "host offload" not in run_case(raw, planner.default_profile, 1)["reason"]


def test_schema_2_states_recompute_so_it_is_never_raised() -> None:
    row = run_case(_no_fit_without_recompute(2, 1), planner.default_profile, 2)
    assert row["status"] == "infeasible"
    assert "costed with recompute" not in row["reason"]


# ------------------------------------------------------------------ power limit (schema 2)


def test_a_schema_2_case_states_its_power_limit() -> None:
    raw = _v2(
        cluster="dgx-b200",
        framework="torchtitan-compiled",
        layout={"tp": 1, "pp": 1, "dp": 8, "zero": 3},
        training={"global_batch": 8, "recompute": "none"},
    )
    free = run_case(raw, planner.default_profile, 2)
    capped = run_case({**raw, "power_limit_w": 750}, planner.default_profile, 2)
    assert free["status"] == capped["status"] == "ok"
    assert capped["predicted_tokens_per_s_per_gpu"] < free["predicted_tokens_per_s_per_gpu"]
    assert "power-limited to 750 W" in capped["reason"]
    bad = run_case({**raw, "power_limit_w": 5000}, planner.default_profile, 2)
    assert bad["status"] != "ok" and "power_limit_w" in bad["reason"]


# ---------------------------------------- what schema 1 cannot state, from the shipped model


def _oss_v1(**model_over) -> dict:
    raw = _v1(
        "gpt-oss-120b",
        num_gpus=64,
        cluster="dgx-b200",
        framework="megatron-bridge",
        layout={"tp": 1, "pp": 1, "dp": 64, "ep": 8, "zero": 1},
        training={"seq_len": 4096, "global_batch": 512, "micro_batch": 1, "recompute": "none"},
    )
    raw["model"]["moe"].pop("expert_bias")  # a schema 1 file has no such key
    raw["model"].update(model_over)
    return raw


def test_schema_1_model_takes_per_layer_mixers_and_expert_bias_from_its_shipped_namesake():
    inputs = case_inputs(parse_case(_oss_v1(), 1))
    shipped = planner.load_model("gpt-oss-120b")
    assert inputs.model.moe.expert_bias and inputs.model.layer_groups == shipped.layer_groups
    assert any("from the shipped model" in n for n in inputs.notes)
    # and costs as the schema 2 case stating them does
    v2 = _oss_v1()
    v2["stack"] = v2.pop("framework")
    v2["model"] = shipped.model_dump(mode="json", exclude={"sources", "description"})
    r1 = run_case(_oss_v1(), planner.default_profile, 1)
    r2 = run_case(v2, planner.default_profile, 2)
    assert r1["status"] == r2["status"] == "ok"
    assert r1["predicted_tokens_per_s_per_gpu"] == r2["predicted_tokens_per_s_per_gpu"]


@pytest.mark.parametrize(
    "over", [{"layers": 24}, {"name": "my-oss"}, {"vocab": 200000}, {"moe": None}]
)
def test_schema_1_model_that_differs_from_the_shipped_one_is_costed_as_stated(over):
    raw = _oss_v1(**over)
    if over.get("layers"):
        raw["model"]["moe"]["dense_layers"] = 0
    inputs = case_inputs(parse_case(raw, 1))
    assert inputs.model.layer_groups is None
    assert inputs.model.moe is None or not inputs.model.moe.expert_bias
    assert not any("from the shipped model" in n for n in inputs.notes)


def test_schema_2_model_is_never_completed():
    raw = _oss_v1()
    raw["stack"] = raw.pop("framework")
    inputs = case_inputs(parse_case(raw, 2))
    assert inputs.model.layer_groups is None and not inputs.model.moe.expert_bias


def test_schema_1_fallback_is_not_barred_by_what_the_stated_inputs_already_ask() -> None:
    """A schema 1 row the stack cannot run as stated (Megatron-LM 2021 had no context
    parallelism) is costed as given; the recompute fallback may still raise the recompute, as
    long as the raised level asks the stack for nothing more (full, which v2.5 runs)."""
    raw = _no_fit_without_recompute(1, 2)
    raw["layout"].update(zero=0, cp=2)
    raw["num_gpus"] = 128
    row = run_case(raw, planner.default_profile, 1)
    assert row["status"] == "ok" and row["stack"] == "megatron-lm-2021", row["reason"]
    assert "cannot run cp=2" in row["reason"] and "costed as the case states it" in row["reason"]
    assert "costed with recompute full (stated none)" in row["reason"]


def test_stack_violations_lists_every_field_in_check_order() -> None:
    from planner.specs.layout import Layout, Training
    from planner.stacks import stack_violation, stack_violations

    stack = planner.load_stack("megatron-lm-2021")
    layout, training = Layout(tp=2, cp=2, dp=2, zero=3), Training(seq_len=2048, global_batch=8)
    found = stack_violations(stack, layout, training.with_changes(recompute="selective"))
    assert [e.field for e in found] == ["layout.cp", "layout.zero", "training.recompute"]
    assert str(stack_violation(stack, layout, training)) == str(found[0])
    assert (
        stack_violations(stack, Layout(tp=2, dp=4), training.with_changes(recompute="full")) == []
    )


def test_schema_1_replicates_kv_heads_that_tp_cannot_split() -> None:
    """A multi-query model trained at TP 8 (StarCoder-style forks replicate the KV head on
    every TP rank): schema 1 costs it replicated and says so; schema 2 names a stack, and
    Megatron-Core's, which splits KV heads over TP, cannot run it."""
    model = {"name": "mqa-6b", "layers": 40, "hidden": 6144, "ffn_hidden": 24576}
    model |= {"heads": 48, "kv_heads": 1, "head_dim": 128, "vocab": 49152}
    over = {"layout": {"tp": 8, "pp": 1, "dp": 8, "zero": 1}, "num_gpus": 64}
    raw = _v1("gpt3-1.3b", **over)
    raw["model"].update(model, activation="gelu")
    row = run_case(raw, planner.default_profile, 1)
    assert row["status"] == "ok", row["reason"]
    assert "1 KV head(s) under TP 8: costed replicated" in row["reason"]
    raw2 = {k: v for k, v in raw.items() if k != "framework"} | {"stack": "megatron-core"}
    bad = run_case(raw2, planner.default_profile, 2)
    assert bad["status"] == "error" and "kv_heads" in bad["reason"]
    # TP 1 needs nothing replicated: the model is costed as stated
    raw["layout"] = {"tp": 1, "pp": 1, "dp": 64, "zero": 1}
    assert "KV head" not in run_case(raw, planner.default_profile, 1)["reason"]


def test_schema_1_costs_a_global_batch_no_run_can_step_at_the_nearest_that_it_can() -> None:
    """A global batch written from a token count (here 130 sequences over 8 data-parallel
    ranks) is not a whole number of micro-batches per rank: schema 1 costs the nearest that
    is (128) and says so; the same case at 128 gives the same prediction."""
    raw = _v1(layout={"tp": 1, "pp": 1, "dp": 8, "zero": 1})
    raw["training"]["global_batch"] = 130
    row = run_case(raw, planner.default_profile, 1)
    assert row["status"] == "ok", row["reason"]
    assert (
        "global_batch 130 is not a multiple of micro_batch x dp = 8: costed at 128"
        in (row["reason"])
    )
    raw["training"]["global_batch"] = 128
    whole = run_case(raw, planner.default_profile, 1)
    assert whole["predicted_tokens_per_s_per_gpu"] == row["predicted_tokens_per_s_per_gpu"]
    assert "not a multiple" not in whole["reason"]
    # rounding up never leaves the field's range: at its top the nearest below is taken
    raw["training"]["global_batch"] = MAX_GLOBAL_BATCH - 3
    raw["layout"]["dp"], raw["num_gpus"] = 12, 12
    top = run_case(raw, planner.default_profile, 1)
    assert top["status"] != "error", top["reason"]
    assert f"costed at {MAX_GLOBAL_BATCH // 12 * 12:}" in top["reason"]
    # schema 2 states its batch as run: the same mistake is that case's error
    raw2 = _v2(layout={"tp": 1, "pp": 1, "dp": 8, "zero": 1})
    raw2["training"]["global_batch"] = 130
    bad = run_case(raw2, planner.default_profile, 2)
    assert bad["status"] == "error" and "global_batch" in bad["reason"]


def test_schema_1_reads_an_interleaving_depth_without_a_pipeline_as_none() -> None:
    raw = _v1(layout={"tp": 1, "pp": 1, "dp": 8, "zero": 1, "vpp": 4})
    row = run_case(raw, planner.default_profile, 1)
    assert row["status"] == "ok" and "layout.vpp 4 without a pipeline" in row["reason"]
    raw["layout"]["vpp"] = None
    assert (
        run_case(raw, planner.default_profile, 1)["predicted_tokens_per_s_per_gpu"]
        == (row["predicted_tokens_per_s_per_gpu"])
    )
    raw2 = _v2(layout={"tp": 1, "pp": 1, "dp": 8, "zero": 1, "vpp": 4})
    assert run_case(raw2, planner.default_profile, 2)["status"] == "error"


def test_schema_1_reads_an_expert_parallel_size_without_experts_as_1() -> None:
    raw = _v1(layout={"tp": 1, "pp": 1, "dp": 8, "zero": 1, "ep": 4})
    row = run_case(raw, planner.default_profile, 1)
    assert row["status"] == "ok" and "layout.ep 4 for a model without experts" in row["reason"]
    raw["layout"]["ep"] = 1
    assert (
        run_case(raw, planner.default_profile, 1)["predicted_tokens_per_s_per_gpu"]
        == (row["predicted_tokens_per_s_per_gpu"])
    )
    raw2 = _v2(layout={"tp": 1, "pp": 1, "dp": 8, "zero": 1, "ep": 4})
    assert run_case(raw2, planner.default_profile, 2)["status"] == "error"


def test_a_null_that_has_a_default_is_not_stated() -> None:
    """tied_embeddings, scored or notes left null take their defaults (untied, scored, no
    notes); a null activation stays an error naming the field (GeLU would misprice a GLU)."""
    raw = _v1()
    raw.update(scored=None, notes=None)
    raw["model"]["tied_embeddings"] = None
    row = run_case(raw, planner.default_profile, 1)
    assert row["status"] == "ok" and row["scored"] is True, row["reason"]
    raw["model"]["activation"] = None
    bad = run_case(raw, planner.default_profile, 1)
    assert bad["status"] == "error" and "model.activation" in bad["reason"]


def test_schema_1_reads_an_unstated_sequence_parallelism_as_the_stack_runs_it() -> None:
    """A null sequence_parallel is not stated: on where the stack runs it and TP splits the
    layer (as the Megatron-Bridge and NeMo recipes set it), so the row costs as if it said
    true; on a code base without it (Megatron-LM 2021, an A100 row stating ZeRO 0 and full
    recompute) it stays off."""
    on = _v1("llama3.1-70b", num_gpus=64, layout={"tp": 4, "pp": 2, "dp": 8, "zero": 1})
    on["layout"]["sequence_parallel"] = True
    unstated = copy.deepcopy(on)
    unstated["layout"]["sequence_parallel"] = None
    row, ref = (run_case(c, planner.default_profile, 1) for c in (unstated, on))
    assert row["status"] == ref["status"] == "ok", row["reason"]
    assert "layout.sequence_parallel not stated: on" in row["reason"]
    assert row["predicted_tokens_per_s_per_gpu"] == ref["predicted_tokens_per_s_per_gpu"]
    old = _no_fit_without_recompute(1, 1)
    old["layout"].update(zero=0, sequence_parallel=None)
    old["training"]["recompute"] = "full"
    inputs = case_inputs(parse_case(old, 1))
    assert inputs.stack.name == "megatron-lm-2021" and not inputs.layout.sequence_parallel
    assert not any("sequence_parallel not stated" in n for n in inputs.notes)


def test_a_false_sequence_parallelism_that_cannot_fit_is_read_as_the_stacks_default() -> None:
    """torchtitan's TP plan shards the norms' inputs (sequence parallelism) by default: a schema
    1 row that writes false, and does not fit without it, costs as if it said true and says so.
    Where it fits without (a smaller model), or under a stack whose TP runs without it by
    default (Megatron-LM's --sequence-parallel is opt-in), the false stands."""
    big = _v1("llama3.1-70b", num_gpus=64, framework="torchtitan")
    big["layout"] = {"tp": 8, "pp": 1, "dp": 8, "zero": 3, "sequence_parallel": True}
    big["training"].update(recompute="none", global_batch=64)
    off = copy.deepcopy(big)
    off["layout"]["sequence_parallel"] = False
    row, ref = (run_case(c, planner.default_profile, 1) for c in (off, big))
    assert ref["status"] == "ok", ref["reason"]
    assert row["status"] == "ok" and "costed on" in row["reason"], row["reason"]
    assert row["predicted_tokens_per_s_per_gpu"] == ref["predicted_tokens_per_s_per_gpu"]
    megatron = copy.deepcopy(off)
    megatron["framework"] = "megatron-lm"
    assert "costed on" not in run_case(megatron, planner.default_profile, 1)["reason"]
    small = _v1("llama3.1-8b", num_gpus=8, framework="torchtitan")
    small["layout"] = {"tp": 2, "pp": 1, "dp": 4, "zero": 3, "sequence_parallel": False}
    small_row = run_case(small, planner.default_profile, 1)
    assert small_row["status"] == "ok" and "costed on" not in small_row["reason"]


def test_a_framework_that_says_hybrid_sharding_shards_within_whole_scale_up_domains() -> None:
    """'HSDP' / 'HYBRID_SHARD' in a schema 1 framework name: the ZeRO state is sharded within
    the smallest group of whole nodes the case fits in (a node for Llama 3.1 8B, 32 GPUs for
    70B on 64 H100) and the row says so; a stack that cannot run it says that instead, and a
    name without the words is unchanged."""
    rows = {}
    for model, framework in (
        ("llama3.1-8b", "torchtitan HSDP"),
        ("llama3.1-70b", "PyTorch FSDP (HYBRID_SHARD)"),
        ("llama3.1-70b", "DeepSpeed (hybrid shard)"),
        ("llama3.1-70b", "PyTorch FSDP"),
    ):
        raw = _v1(model, framework=framework, num_gpus=64)
        raw["layout"] = {"tp": 1, "pp": 1, "dp": 64, "zero": 3}
        raw["training"].update(seq_len=4096, global_batch=128, micro_batch=1, recompute="full")
        rows[framework] = run_case(raw, planner.default_profile, 1)
    assert all(row["status"] == "ok" for row in rows.values())
    assert "groups of 8 DP x CP ranks" in rows["torchtitan HSDP"]["reason"]
    assert "groups of 32 DP x CP ranks" in rows["PyTorch FSDP (HYBRID_SHARD)"]["reason"]
    assert "not costed under deepspeed-zero" in rows["DeepSpeed (hybrid shard)"]["reason"]
    plain = rows["PyTorch FSDP"]
    assert "hybrid" not in plain["reason"]
    assert (
        rows["PyTorch FSDP (HYBRID_SHARD)"]["predicted_peak_memory_gib"]
        > (plain["predicted_peak_memory_gib"])
    )


def test_an_unstated_context_parallel_size_is_implied_by_a_stated_dp() -> None:
    """A null cp beside a stated dp is the GPUs tp*pp*dp leave (as a null dp is the GPUs a
    model copy leaves): the row costs as if it said so, and says it; where tp*pp*dp already
    fills the job, cp stays 1, and a remainder no cp fills leaves dp to num_gpus."""
    given = _v1("llama3.1-8b", num_gpus=16, layout={"tp": 2, "pp": 1, "dp": 4, "cp": 2})
    given["training"]["seq_len"] = 32768
    unstated = copy.deepcopy(given)
    unstated["layout"]["cp"] = None
    row, ref = (run_case(c, planner.default_profile, 1) for c in (unstated, given))
    assert row["status"] == ref["status"] == "ok", row["reason"]
    assert "layout.cp not stated: 2" in row["reason"]
    assert row["predicted_tokens_per_s_per_gpu"] == ref["predicted_tokens_per_s_per_gpu"]
    whole = copy.deepcopy(unstated)
    whole["layout"]["dp"] = 8
    row = run_case(whole, planner.default_profile, 1)
    assert row["status"] == "ok" and "layout.cp not stated" not in row["reason"], row["reason"]
    odd = copy.deepcopy(unstated)
    odd["layout"]["dp"] = 3  # no cp fills the rest: the dp num_gpus gives (cp 1)
    row = run_case(odd, planner.default_profile, 1)
    assert row["status"] == "ok" and "layout.dp 3 disagrees with num_gpus 16" in row["reason"]


@pytest.mark.parametrize(
    ("section", "field", "written"),
    [
        (None, "cluster", "DGX_H100"),
        (None, "cluster", "DGX H100"),
        (None, "quality", "Partial"),
        ("model", "activation", "SwiGLU"),
        ("training", "precision", " BF16"),
        ("training", "recompute", "Full"),
    ],
)
def test_word_values_in_another_case_name_the_same_value(section, field, written) -> None:
    raw = _v1()
    expected = run_case(raw, planner.default_profile, 1)
    holder = raw if section is None else raw[section]
    holder[field] = written
    row = run_case(raw, planner.default_profile, 1)
    assert row == expected, row["reason"]
    holder[field] = "bf17"  # still no value of the field: its error names the field
    row = run_case(raw, planner.default_profile, 1)
    assert row["status"] == "error" and field in row["reason"], row["reason"]


def test_a_stated_dp_that_counted_the_context_parallel_ranks_is_read_as_dp_x_cp() -> None:
    """tp*pp*dp = num_gpus with cp > 1 stated: the dp written is the DP x CP group (torchtitan's
    FSDP mesh spans it); the row costs as dp / cp, and says so. A dp cp does not divide stays
    the world-size error."""
    given = _v1("llama3.1-8b", num_gpus=16, layout={"tp": 2, "pp": 1, "dp": 4, "cp": 2})
    given["training"]["seq_len"] = 32768
    _assert_dp_read_as_stated(given, 8, "layout.dp 8 counts the context-parallel ranks")
    _assert_world_size_error(given, dp=8, cp=3)


def _assert_dp_read_as_stated(given: dict, written: int, note: str) -> None:
    """``given`` with its dp written as ``written`` predicts as ``given``, and says ``note``."""
    rewritten = copy.deepcopy(given)
    rewritten["layout"]["dp"] = written
    row, ref = (run_case(c, planner.default_profile, 1) for c in (rewritten, given))
    assert row["status"] == ref["status"] == "ok", row["reason"]
    assert note in row["reason"]
    assert row["predicted_tokens_per_s_per_gpu"] == ref["predicted_tokens_per_s_per_gpu"]


def _assert_world_size_error(given: dict, **layout: int) -> None:
    """``given`` with ``layout`` changed is the world-size error (no reading fits it)."""
    odd = copy.deepcopy(given)
    odd["layout"].update(layout)
    row = run_case(odd, planner.default_profile, 1)
    assert row["status"] == "error" and row["reason"].startswith("layout:"), row["reason"]


def test_a_stated_dp_that_left_out_the_expert_parallel_ranks_is_read_as_dp_x_ep() -> None:
    """An MoE case with tp*pp*cp*dp*ep = num_gpus where tp*pp*cp*dp falls short: the dp
    written is the expert-data-parallel size; the row costs as dp x ep (EP carved out of DP),
    says so, and predicts as the case that states dp x ep. A dense model, or a product that
    fits neither way, stays the world-size error."""
    given = _v1(
        "mixtral-8x7b",
        num_gpus=64,
        layout={"tp": 1, "pp": 1, "dp": 64, "ep": 8},
        training={"seq_len": 4096, "global_batch": 512, "recompute": "selective"},
    )
    _assert_dp_read_as_stated(given, 8, "layout.dp 8 leaves out the expert-parallel ranks")
    _assert_world_size_error(given, dp=4, cp=3)
    dense = _v1("llama3.1-8b", num_gpus=64, layout={"tp": 1, "pp": 1, "dp": 64, "cp": 1, "ep": 1})
    _assert_world_size_error(dense, dp=8, ep=8, cp=3)


def test_a_stated_dp_the_job_size_contradicts_is_read_from_num_gpus_in_schema_1() -> None:
    """Schema 1: a dp with tp*pp*cp*dp != num_gpus that no other reading explains (not the
    EP or CP ranks left out or counted) is the dp num_gpus gives, tokens/s/GPU being per
    num_gpus, and the row says so; where num_gpus is no multiple of tp*pp*cp it stays the
    world-size error, and schema 2 keeps it an error."""
    given = _v1("llama3.1-8b", num_gpus=64, layout={"tp": 2, "pp": 1, "dp": 32, "cp": 1})
    _assert_dp_read_as_stated(given, 16, "layout.dp 16 disagrees with num_gpus 64")
    _assert_dp_read_as_stated(given, 48, "layout.dp 48 disagrees with num_gpus 64")
    _assert_world_size_error(given, dp=16, cp=3)


def test_an_unstated_zero_stage_that_only_zero_3_fits_is_costed_at_the_names_zero_3_code_base():
    """Megatron-LM on A100s, data parallel only, ZeRO stage null: the framework table picks the
    2021 code base (nothing is stated that dates it later), which cannot shard a 175B model;
    the name's ZeRO-3 code base (DeepSpeed 0.3, Narayanan et al. 2021 Table 2) then costs it,
    as the row that states zero 3 is costed, and the row says so."""
    raw = _v1(
        "gpt3-175b",
        cluster="dgx-a100-80gb",
        num_gpus=384,
        framework="megatron-lm",
        layout={"tp": 1, "pp": 1, "dp": 384, "zero": 3},
        training={
            "seq_len": 2048,
            "global_batch": 1536,
            "micro_batch": 4,
            "recompute": "full",
            "precision": "fp16",
        },
    )
    stated = run_case(raw, planner.default_profile, 1)
    assert stated["status"] == "ok" and stated["stack"] == "deepspeed-zero3-2021"
    raw["layout"]["zero"] = None
    row = run_case(raw, planner.default_profile, 1)
    assert row["status"] == "ok", row["reason"]
    assert row["stack"] == "deepspeed-zero3-2021"
    assert "costed under deepspeed-zero3-2021" in row["reason"]
    assert row["predicted_tokens_per_s_per_gpu"] == stated["predicted_tokens_per_s_per_gpu"]
    raw["layout"]["tp"], raw["layout"]["dp"] = 8, 48  # it fits without ZeRO-3: no switch
    row = run_case(raw, planner.default_profile, 1)
    assert row["status"] == "ok" and "costed under deepspeed" not in row["reason"]


def test_an_unstated_zero_stage_that_fits_only_with_a_saver_is_tuned_under_that_saver():
    """Megatron-Bridge on 64 GB200 running Llama 3 70B data parallel only (its FP8 preset runs
    Megatron-FSDP with activation offload): with ZeRO stage null nothing fits at stage 0 or 1
    and the saver schema 1 cannot state (offload) is only found at the unstated knob's lightest
    setting, stage 3. The row is costed as the one that states zero 3, and says so."""
    raw = _no_fit_without_offload(1)
    stated = run_case(raw, planner.default_profile, 1)
    assert stated["status"] == "ok" and "offloaded layers" in stated["reason"], stated["reason"]
    raw["layout"]["zero"] = None
    row = run_case(raw, planner.default_profile, 1)
    assert row["status"] == "ok", row["reason"]
    assert "lightest setting in memory: zero 3" in row["reason"]
    assert "tuned: zero 3" in row["reason"]
    assert row["predicted_tokens_per_s_per_gpu"] == stated["predicted_tokens_per_s_per_gpu"]


@pytest.mark.parametrize(
    ("section", "field", "written", "read", "extra"),
    [
        ("training", "precision", "bfloat16", "bf16", {}),
        ("training", "precision", "MXFP8", "fp8", {"fp8_recipe": "mxfp8"}),
        ("training", "precision", "fp8_hybrid", "fp8", {"fp8_recipe": "delayed"}),
        ("training", "precision", "FP8-CS", "fp8", {"fp8_recipe": "tensorwise"}),
        ("model", "activation", "silu", "swiglu", {}),
        ("model", "activation", "squared_relu", "relu2", {}),
        ("training", "recompute", "Off", "none", {}),
    ],
)
def test_a_value_published_under_another_name_reads_as_that_value(
    section: str, field: str, written: str, read: str, extra: dict
) -> None:
    """The names a value is published under (PyTorch dtypes, NeMo's fp8-hybrid, the FP8
    scaling written into the precision, Hugging Face's hidden_act) read as the value, with the
    recipe they name where the case states none; an unknown word is still the field's error."""
    from planner.validate.cases import Case

    raw = _v1()
    raw[section][field] = written
    case = Case.model_validate(raw)
    assert getattr(getattr(case, section), field) == read
    for name, value in extra.items():
        assert getattr(case.training, name) == value
    if extra:  # a recipe the case states wins over the one the alias names
        raw["training"]["fp8_recipe"] = "rowwise"
        assert Case.model_validate(raw).training.fp8_recipe == "rowwise"
    raw[section][field] = "zzz"  # a word naming no value (planner/validate/words.py)
    row = run_case(raw, planner.default_profile, 1)
    assert row["status"] == "error" and row["reason"].startswith(f"{section}.{field}")


# ------------------------------------------- fp8 weights, the first schema 1 fallback
# A Megatron-Core fp8 case whose bf16 weights and their cached fp8 copies do not fit is costed
# with fp8 weights (Megatron --fp8-param-gather), which schema 1 cannot state, before any slower
# saver; NeMo and Megatron-Bridge already run them (their fp8 presets); schema 2 states them.

FP8_NOTE = "schema 1 cannot state fp8 weights"


def _fp8(recompute: str, framework: str = "megatron-core") -> dict:
    """Llama 3.1 8B on 8 H100, tp 1 x dp 8, ZeRO 1, 8192 tokens, fp8: with full recompute
    79.1 GiB with bf16 weights and their fp8 copies, 65 GiB with fp8 weights (78.6 usable)."""
    return _v1(framework=framework, training={"recompute": recompute, "precision": "fp8"})


def test_fp8_weights_alone_make_the_stated_inputs_fit() -> None:
    row = run_case(_fp8("full"), planner.default_profile, 1)
    assert row["status"] == "ok", row["reason"]
    assert FP8_NOTE in row["reason"] and "costed with them" in row["reason"]
    assert "recompute" not in row["reason"].split(FP8_NOTE)[1]  # nothing slower was needed
    assert row["predicted_peak_memory_gib"] < 78.6


def test_the_other_savers_run_with_fp8_weights() -> None:
    # selective does not fit even with fp8 weights; the recompute fallback then widens the
    # selective set under them (bf16 weights plus copies would need full recompute)
    row = run_case(_fp8("selective"), planner.default_profile, 1)
    reason = row["reason"]
    assert row["status"] == "ok", reason
    assert reason.index(FP8_NOTE) < reason.index("costed with recompute selective (")
    lo, hi = row["predicted_range_tokens_per_s_per_gpu"]
    assert lo <= row["predicted_tokens_per_s_per_gpu"] <= hi


def test_no_fp8_weights_reading_where_the_stack_has_them_or_no_copies() -> None:
    # NeMo's fp8 preset gathers fp8 weights already; bf16 keeps no fp8 copies
    nemo = run_case(_fp8("full", "nemo"), planner.default_profile, 1)
    assert nemo["status"] == "ok" and FP8_NOTE not in nemo["reason"]
    bf16 = _v1(training={"recompute": "full", "precision": "bf16"})
    assert FP8_NOTE not in run_case(bf16, planner.default_profile, 1)["reason"]


def test_schema_2_states_fp8_weights_and_gets_no_reading() -> None:
    raw = _v2(training={"recompute": "full", "precision": "fp8"})
    row = run_case(raw, planner.default_profile, 2)
    assert row["status"] == "infeasible" and "out of memory" in row["reason"]
    raw["training"]["fp8_param_gather"] = True
    assert run_case(raw, planner.default_profile, 2)["status"] == "ok"


def test_no_fp8_weights_reading_at_zero3() -> None:
    # ZeRO-3 re-gathers each weight and TE caches no copy of it (memory.state_bytes): the
    # fallback that drops the copies has nothing to drop, and the next saver is costed alone
    raw = _v1(layout={"zero": 3}, training={"recompute": "none", "precision": "fp8"})
    raw["training"]["micro_batch"] = 2
    row = run_case(raw, planner.default_profile, 1)
    assert row["status"] == "ok" and "offloaded layers" in row["reason"]
    assert FP8_NOTE not in row["reason"]
