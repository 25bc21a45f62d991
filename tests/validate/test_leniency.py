"""What reading a schema 1 case forgives (planner/validate/leniency.py): fields outside the
schema, other spellings, measured figures as tables print them, nulls with a default, and a
case with no measured tokens/s. Each is named in the case's row; schema 2 refuses them."""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest
from rich.console import Console

import planner
from planner.render.validation import range_coverage, render_validation
from planner.validate import read_case_file, run_case, summarize
from planner.validate.leniency import MATCHED, NAMED, forgive

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from schema1_rewritings import REWRITINGS, as_schema_1  # noqa: E402

_, PUBLIC = read_case_file("public")
CASES = {c["id"]: c for c in PUBLIC}
DENSE = "bridge2511_h100_llama31_405b"  # tp 8, pp 8, cp 2, every knob stated
MOE = "bridge2511_gb200_deepseekv3_bf16"  # DeepSeek-V3: shared expert, three dense layers


def _case(case_id: str = DENSE) -> dict:
    """A public case written back as schema 1 (the shipped copy is schema 2)."""
    return as_schema_1(CASES[case_id])


def _run(raw: dict, schema: int = 1) -> dict:
    return run_case(raw, planner.default_profile, schema)


@pytest.fixture(scope="module")
def stated() -> dict[str, dict]:
    """The rows of the cases as public.yaml writes them (nothing to forgive)."""
    rows = {k: _run(_case(k)) for k in (DENSE, MOE)}
    assert not any("schema 1 writes" in r["reason"] for r in rows.values())
    return rows


# ------------------------------------------------------------ a case without a tokens/s figure


@pytest.mark.parametrize(
    "change",
    [
        lambda c: c["measured"].update(tokens_per_s_per_gpu=None),
        lambda c: c["measured"].pop("tokens_per_s_per_gpu"),
        lambda c: c.update(measured=None),
        lambda c: c.pop("measured"),
    ],
    ids=["null", "missing", "measured-null", "measured-missing"],
)
def test_a_case_without_measured_tokens_is_simulated_and_shown_not_scored(change, stated):
    raw = _case()
    change(raw)
    row = _run(raw)
    assert row["status"] == "ok", row["reason"]
    assert row["predicted_tokens_per_s_per_gpu"] == stated[DENSE]["predicted_tokens_per_s_per_gpu"]
    assert row["error_pct"] is None and row["scored"] is False
    assert "in_range" not in row and "in_band" not in row
    assert "measured.tokens_per_s_per_gpu not stated" in row["reason"]


def test_a_peak_only_case_counts_as_ok_and_in_the_memory_error_not_the_speed_error(stated):
    raw = _case()
    raw["measured"] = {"peak_memory_gib": 60.0}
    row = _run(raw)
    s = summarize([row, stated[MOE]])
    assert s["n_ok"] == 2 and s["n_scored"] == 1
    assert s["mape_pct"] == pytest.approx(abs(stated[MOE]["error_pct"]), abs=0.01)
    assert s["n_memory"] == 1
    predicted = row["predicted_peak_memory_gib"]
    assert s["memory_mape_pct"] == pytest.approx(abs(predicted - 60.0) / 60.0 * 100, abs=0.01)


def test_the_table_and_range_coverage_take_a_row_without_a_measurement(stated):
    raw = _case()
    raw["measured"] = None
    raw["training"]["micro_batch"] = None  # a range, with nothing measured to fall in it
    row = _run(raw)
    assert row["predicted_range_tokens_per_s_per_gpu"]
    assert range_coverage([row]) == (0, 0)
    console = Console(record=True, width=200)
    render_validation(console, {"cases": [row], "summary": summarize([row])})
    assert DENSE in console.export_text()


# ------------------------------------------------------------ fields outside the schema


@pytest.mark.parametrize(
    ("section", "key"),
    [(None, "date"), ("measured", "step_time_s"), ("model", "norm"), ("training", "optimizer")],
)
def test_a_field_outside_the_schema_is_left_out_and_named(section, key, stated):
    raw = _case()
    (raw if section is None else raw[section])[key] = "x"
    row = _run(raw)
    assert row["status"] == "ok"
    assert row["error_pct"] == stated[DENSE]["error_pct"]
    where = key if section is None else f"{section}.{key}"
    assert f"{where} left out" in row["reason"]


@pytest.mark.parametrize(
    ("section", "written", "field"),
    [
        ("training", "Micro_Batch", "micro_batch"),  # case and "_"
        ("training", "micro-batch", "micro_batch"),  # "-" for "_"
        ("training", "micro_batch_size", "micro_batch"),  # Megatron-LM's argument
        ("training", "global_batch_size", "global_batch"),
        ("training", "MBS", "micro_batch"),  # a NeMo / Megatron-Bridge table's column
        ("layout", "VP", "vpp"),
        ("layout", "tensor_model_parallel_size", "tp"),
        ("model", "num_key_value_heads", "kv_heads"),  # a Hugging Face config's name
        ("model", "kv_head", "kv_heads"),  # a slip of a letter
        (None, "stack", "framework"),  # schema 2's name
        (None, "world_size", "num_gpus"),
    ],
)
def test_another_spelling_of_a_field_is_read_as_it(section, written, field, stated):
    raw = _case()
    holder = raw if section is None else raw[section]
    holder[written] = holder.pop(field)
    row = _run(raw)
    assert row["error_pct"] == stated[DENSE]["error_pct"], row["reason"]
    where = "" if section is None else f"{section}."
    assert f"{where}{written} read as {where}{field}" in row["reason"]


def test_a_spelling_of_a_field_the_case_also_gives_is_left_out_never_over_it(stated):
    raw = _case()
    raw["layout"]["TP"] = 1  # tp 8 is stated: the other spelling must not replace it
    row = _run(raw)
    assert row["error_pct"] == stated[DENSE]["error_pct"]
    assert "layout.TP left out" in row["reason"]


def test_a_word_far_from_every_field_is_not_guessed():
    raw = _case()
    raw["training"]["ubatch"] = raw["training"].pop("micro_batch")  # not read as micro_batch
    row = _run(raw)
    assert "training.ubatch left out" in row["reason"]
    assert "not stated, tuned: micro_batch" in row["reason"]


def test_the_note_names_a_few_fields_and_counts_the_rest():
    raw = _case()
    raw.update({f"extra_{i}": i for i in range(NAMED + 3)})
    assert forgive(raw)[1] == [
        "not as schema 1 writes it: "
        + ", ".join(f"extra_{i} left out" for i in range(NAMED))
        + " and 3 more"
    ]


def test_only_the_first_unknown_keys_of_a_section_are_matched():
    raw = _case()
    raw["training"].update({f"junk_{i}": i for i in range(MATCHED)})
    raw["training"]["Micro_Batch"] = raw["training"].pop("micro_batch")  # past the bound
    out, notes = forgive(raw)
    assert "micro_batch" not in out["training"]
    assert f"and {MATCHED + 1 - NAMED} more" in notes[0]


def test_reading_leaves_the_callers_case_as_it_was():
    raw = _case(MOE)
    raw["model"]["moe"]["n_shared_experts"] = raw["model"]["moe"].pop("shared_experts")
    raw["model"]["moe"]["dense_layers"] = None
    raw["measured"]["mfu_pct"] = "41 %"
    before = copy.deepcopy(raw)
    forgive(raw)
    assert raw == before


def test_schema_2_and_strict_reading_refuse_what_schema_1_forgives():
    raw = _case()
    raw["training"]["micro_batch_size"] = raw["training"].pop("micro_batch")
    strict = run_case(raw, planner.default_profile, 1, strict=True)
    raw["stack"] = raw.pop("framework")
    for row in (strict, _run(raw, schema=2)):
        assert row["status"] == "error"
        assert "training.micro_batch_size: unknown field" in row["reason"]


# ------------------------------------------------------------ measured figures as printed


@pytest.mark.parametrize(
    ("written", "number"),
    [("12,345.5", 12345.5), ("1_000", 1000.0), (" 987.25 ", 987.25), ("2e3", 2000.0)],
)
def test_measured_tokens_as_a_table_prints_them_is_read_as_the_number(written, number):
    raw = _case()
    raw["measured"]["tokens_per_s_per_gpu"] = written
    row = _run(raw)
    assert row["measured_tokens_per_s_per_gpu"] == number
    assert row["status"] == "ok" and row["error_pct"] is not None


@pytest.mark.parametrize(
    ("written", "stage"),
    [("ZeRO-1", 1), ("distributed optimizer", 1), ("FSDP", 3), ("full_shard", 3), ("DDP", 0)],
)
def test_a_zero_stage_written_as_what_it_shards_is_read_as_its_number(written, stage):
    raw = _case("mpt_h100_7b_s2048_8gpu")
    raw["layout"]["zero"] = written
    row = _run(raw)
    assert f"layout.zero {written!r} read as {stage}" in row["reason"]
    raw["layout"]["zero"] = stage
    assert row["predicted_tokens_per_s_per_gpu"] == _run(raw)["predicted_tokens_per_s_per_gpu"]


@pytest.mark.parametrize(("flag", "level"), [(True, "full"), (False, "none")])
def test_activation_checkpointing_written_as_a_flag_is_read_as_its_level(flag, level):
    raw = _case("mpt_h100_7b_s2048_8gpu")
    raw["training"].pop("recompute")
    raw["training"]["activation_checkpointing"] = flag
    row = _run(raw)
    assert f"training.recompute {flag} read as {level}" in row["reason"]
    raw["training"] = {**raw["training"], "recompute": level}
    raw["training"].pop("activation_checkpointing")
    assert row["predicted_tokens_per_s_per_gpu"] == _run(raw)["predicted_tokens_per_s_per_gpu"]


def test_a_model_without_a_name_is_named_after_the_case(stated):
    raw = _case()
    raw["model"].pop("name")
    row = _run(raw)
    assert f"model.name not stated: named {DENSE!r}" in row["reason"]
    assert row["predicted_tokens_per_s_per_gpu"] == stated[DENSE]["predicted_tokens_per_s_per_gpu"]


def test_an_all_moe_model_needs_no_dense_ffn_width_a_model_with_dense_layers_does():
    raw = _case("bridge2511_h100_qwen3_30b_a3b")  # 48 layers, every one MoE
    expected = _run(raw)["predicted_tokens_per_s_per_gpu"]
    raw["model"]["ffn_hidden"] = None
    row = _run(raw)
    assert "model.ffn_hidden not stated: unused" in row["reason"]
    assert row["predicted_tokens_per_s_per_gpu"] == expected
    raw = _case(MOE)  # DeepSeek-V3: three dense layers price their FFN
    raw["model"].pop("ffn_hidden")
    raw["model"]["name"] = "my-moe"  # no shipped namesake to take it from (test_phrases.py)
    assert _run(raw)["reason"].startswith("model.ffn_hidden:")


def test_a_framework_written_as_a_list_is_read_as_the_compound_name():
    raw = _case("mpt_h100_7b_s2048_8gpu")
    raw["framework"] = ["Megatron-LM", "DeepSpeed"]
    row = _run(raw)
    assert "framework list read as 'Megatron-LM + DeepSpeed'" in row["reason"]
    assert row["stack"].startswith("megatron-deepspeed")
    raw["framework"] = [["nested"]]  # not names: the schema's error
    assert _run(raw)["reason"].startswith("framework:")


def test_sizes_written_with_thousands_separators_are_read_as_numbers(stated):
    raw = _case()
    raw["num_gpus"] = "1,024"
    raw["model"]["vocab"] = "128,256"
    raw["training"]["seq_len"] = " 8,192 "
    row = _run(raw)
    assert row["predicted_tokens_per_s_per_gpu"] == stated[DENSE]["predicted_tokens_per_s_per_gpu"]
    assert "num_gpus '1,024' read as 1024" in row["reason"]
    raw["num_gpus"] = "1,02,4"  # no thousands grouping: still the field's error
    assert _run(raw)["reason"].startswith("num_gpus:")


@pytest.mark.parametrize("written", ["303.5 tokens/s", "1,2345", "inf", "1e400", "~300"])
def test_measured_tokens_that_are_no_number_stay_the_fields_error(written):
    raw = _case()
    raw["measured"]["tokens_per_s_per_gpu"] = written
    row = _run(raw)
    assert row["status"] == "error"
    assert row["reason"].startswith("measured.tokens_per_s_per_gpu:")


@pytest.mark.parametrize(("written", "kept"), [("41 %", 41.0), ("~41 (PaLM)", None)])
def test_an_unscored_measured_figure_that_is_no_number_is_left_out(written, kept, stated):
    raw = _case()
    raw["measured"]["mfu_pct"] = written
    row = _run(raw)
    assert row["status"] == "ok" and row["error_pct"] == stated[DENSE]["error_pct"]
    assert ("left out (no number)" in row["reason"]) == (kept is None)


# ------------------------------------------------------------ nulls with a default


def test_null_moe_fields_take_the_shipped_namesakes_values(stated):
    raw = _case(MOE)
    for key in ("shared_experts", "dense_layers", "layer_freq"):
        raw["model"]["moe"][key] = None
    row = _run(raw)
    assert row["predicted_tokens_per_s_per_gpu"] == stated[MOE]["predicted_tokens_per_s_per_gpu"]
    assert "model.moe.dense_layers null as in the shipped 'deepseek-v3' (3)" in row["reason"]


def test_null_moe_fields_of_a_model_not_shipped_take_the_defaults():
    raw = _case(MOE)
    raw["model"]["name"] = "my-moe"
    raw["model"]["moe"]["shared_experts"] = None
    row = _run(raw)
    assert row["status"] == "ok"
    assert "model.moe.shared_experts null as the default (0)" in row["reason"]
    stated = _case(MOE)
    stated["model"]["name"] = "my-moe"
    stated["model"]["moe"]["shared_experts"] = 0
    assert row["predicted_tokens_per_s_per_gpu"] == _run(stated)["predicted_tokens_per_s_per_gpu"]


# ------------------------------------------------------------ sizes written as 0


def test_an_interleaving_depth_written_as_0_is_read_as_none():
    raw = _case()
    raw["layout"]["vpp"] = 0
    row = _run(raw)
    assert "layout.vpp 0 read as 1" in row["reason"]
    one = _case()
    one["layout"]["vpp"] = 1
    assert row["predicted_tokens_per_s_per_gpu"] == _run(one)["predicted_tokens_per_s_per_gpu"]


def test_a_context_parallel_size_written_as_0_is_the_one_the_job_gives(stated):
    raw = _case()  # tp 8 x pp 8 x dp 8 on 1,024 GPUs: cp 2
    raw["layout"]["cp"] = 0
    row = _run(raw)
    assert "layout.cp 0 read as not stated" in row["reason"]
    assert row["predicted_tokens_per_s_per_gpu"] == stated[DENSE]["predicted_tokens_per_s_per_gpu"]


def test_an_expert_parallel_size_written_as_0_is_1_without_experts_and_tuned_with_them(stated):
    raw = _case()
    raw["layout"]["ep"] = 0
    assert (
        _run(raw)["predicted_tokens_per_s_per_gpu"]
        == (stated[DENSE]["predicted_tokens_per_s_per_gpu"])
    )
    raw = _case(MOE)
    raw["layout"]["ep"] = 0
    row = _run(raw)
    assert row["status"] == "ok"
    assert "layout.ep 0 read as not stated" in row["reason"]
    assert "not stated, tuned: ep" in row["reason"]


# ------------------------------------------------------------ what a table prints for nothing


def test_a_figure_printed_as_not_given_is_read_as_not_stated(stated):
    raw = _case()
    raw["layout"]["vpp"] = "n/a"  # Megatron-Bridge's tables print VP n/a
    raw["training"]["micro_batch"] = " - "
    raw["measured"]["mfu_pct"] = "N/A"
    row = _run(raw)
    assert row["status"] == "ok"
    assert "layout.vpp 'n/a' read as null" in row["reason"]
    assert "not stated, tuned: micro_batch" in row["reason"]
    nulls = _case()
    nulls["layout"]["vpp"] = nulls["training"]["micro_batch"] = None
    assert row["predicted_tokens_per_s_per_gpu"] == _run(nulls)["predicted_tokens_per_s_per_gpu"]


def test_model_figures_printed_as_not_given_take_the_namesake_or_the_default(stated):
    raw = _case(MOE)
    raw["model"]["moe"]["dense_layers"] = "n/a"
    raw["model"]["tied_embeddings"] = "-"
    row = _run(raw)
    assert "model.moe.dense_layers 'n/a' read as null" in row["reason"]
    assert "model.moe.dense_layers null as in the shipped 'deepseek-v3' (3)" in row["reason"]
    assert row["predicted_tokens_per_s_per_gpu"] == stated[MOE]["predicted_tokens_per_s_per_gpu"]


@pytest.mark.parametrize("written", [False, "none", "N/A"])
def test_an_moe_block_written_as_none_is_a_dense_model(written, stated):
    raw = _case()
    raw["model"]["moe"] = written
    row = _run(raw)
    assert row["error_pct"] == stated[DENSE]["error_pct"]
    assert "model.moe" in row["reason"] and "read as none" in row["reason"]


def test_measured_tokens_printed_as_not_given_is_not_scored():
    raw = _case()
    raw["measured"]["tokens_per_s_per_gpu"] = "n/a"
    row = _run(raw)
    assert row["status"] == "ok" and row["scored"] is False and row["error_pct"] is None


# ------------------------------------------------------------ rewritings of public cases


def test_every_shipped_public_case_written_back_as_schema_1_runs():
    """The benchmark's cases where no ../shared folder is beside the checkout (CI, a wheel)."""
    rows = [_run(as_schema_1(c)) for c in PUBLIC]
    assert [r["id"] for r in rows if r["status"] != "ok"] == []


# (case, rewriting) where the rewriting applies (a framework list needs Megatron-DeepSpeed)
APPLIED = [
    (case_id, name)
    for case_id in (DENSE, MOE, "mpt_h100_7b_s2048_8gpu", "mlm2021_t1_145.6B", "bloom_176b_384gpu")
    for name in sorted(REWRITINGS)
    if REWRITINGS[name](_case(case_id))
]


@pytest.mark.parametrize(("case_id", "rewriting"), APPLIED)
def test_rewritings_of_a_public_case_are_read_as_it(case_id, rewriting):
    """The ways benchmarks/schema1_rewritings.py writes a case the way a hand-written file may
    (it counts them over every public and independent case)."""
    raw = _case(case_id)
    written = copy.deepcopy(raw)
    REWRITINGS[rewriting](written)
    expected, row = _run(raw), _run(written)
    assert (row["status"], row["predicted_tokens_per_s_per_gpu"]) == (
        expected["status"],
        expected["predicted_tokens_per_s_per_gpu"],
    ), row["reason"]
