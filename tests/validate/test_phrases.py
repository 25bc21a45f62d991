"""Schema 1 values written as phrases (planner/validate/words.py), a model written as its
name (planner/validate/model_fill.py) and a job size left out: each read as what it names and
said so in the row, or left as the field's error where it names nothing or two things; schema
2 and --strict read none of them."""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest

import planner
from planner.resources import CLUSTERS_DIR
from planner.specs.loading import load_model, shipped_ids
from planner.validate import read_case_file, run_case, words
from planner.validate.leniency import forgive

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from schema1_rewritings import as_schema_1  # noqa: E402

_, PUBLIC = read_case_file("public")
CASES = {c["id"]: c for c in PUBLIC}
DENSE = "bridge2511_h100_llama31_405b"  # llama-3.1-405b on dgx-h100, every knob stated


def _case() -> dict:
    return as_schema_1(CASES[DENSE])


def _run(raw: dict, schema: int = 1, strict: bool = False) -> dict:
    return run_case(raw, planner.default_profile, schema, strict)


@pytest.fixture(scope="module")
def stated() -> dict:
    row = _run(_case())
    assert row["status"] == "ok" and "schema 1 writes" not in row["reason"]
    return row


# ------------------------------------------------------------------ the phrase readers


@pytest.mark.parametrize(
    ("text", "read"),
    [
        ("BF16 mixed", ("bf16", None)),
        ("amp_bf16", ("bf16", None)),
        ("bf16/fp32", ("bf16", None)),
        ("fp16 (fp32 master weights)", ("fp16", None)),
        ("16-mixed", ("fp16", None)),
        ("32-true", ("fp32", None)),
        ("fp8 (hybrid)", ("fp8", "delayed")),
        ("FP8 current scaling", ("fp8", "tensorwise")),
        ("MXFP8", ("fp8", "mxfp8")),
        ("FP8 with BF16 master weights", ("fp8", None)),
        ("mixed", None),
        ("bf16 and fp16", None),
        ("tf32", None),
    ],
)
def test_a_precision_phrase_reads_as_the_lowest_precision_it_names(text, read):
    assert words.precision(text) == read


@pytest.mark.parametrize(
    ("text", "read"),
    [
        ("selective (core attention)", "selective"),
        ("full (uniform)", "full"),
        ("activation checkpointing", "full"),
        ("no activation checkpointing", "none"),
        ("none (0 layers)", "none"),
        ("full and selective", None),
        ("partial", None),
    ],
)
def test_a_recompute_phrase_reads_as_the_one_level_it_names(text, read):
    assert words.recompute(text) == read


@pytest.mark.parametrize(
    ("text", "read"),
    [
        ("SiLU", "swiglu"),
        ("silu_glu", "swiglu"),
        ("GELU (tanh approximation)", "gelu"),
        ("GELU GLU", "geglu"),
        ("squared ReLU", "relu2"),
        ("ReLU", "gelu"),  # ungated, one pointwise pass: costed as gelu
        ("squared", None),
        ("gelu or silu", None),
    ],
)
def test_an_activation_phrase_reads_as_the_one_activation_it_names(text, read):
    assert words.activation(text) == read


@pytest.mark.parametrize(
    ("text", "preset"),
    [
        ("H100", "dgx-h100"),
        ("8xH100 80GB", "dgx-h100"),
        ("H100 96 GB", "grand-teton-h100-96gb"),
        ("H100 on RoCE", "meta-h100-roce"),
        ("A100", "dgx-a100-80gb"),
        ("DGX A100 40 GB", "dgx-a100-40gb"),
        ("HGX A100 80GB, 100G per GPU", "hgx-a100-80gb-100g"),
        ("GB200 NVL72", "gb200-nvl72"),
        ("8x B200", "dgx-b200"),
        ("8xMI300X", "mi300x-8x"),
        ("H100 and A100", None),
        ("B300", None),
        ("TPU v5p", None),
    ],
)
def test_a_cluster_written_as_its_gpus_reads_as_the_preset_it_names(text, preset):
    assert words.cluster(text) == preset


def test_every_family_default_is_a_shipped_preset_and_every_preset_is_reachable():
    presets = set(shipped_ids(CLUSTERS_DIR))
    assert set(words.FAMILY_PRESET.values()) <= presets
    for preset in presets:  # its id in words names it
        assert words.cluster(preset.upper().replace("-", " ")) == preset, preset


# ------------------------------------------------------------ the readings on a whole case


@pytest.mark.parametrize(
    ("section", "field", "written"),
    [
        ("training", "precision", "{} mixed precision"),
        ("training", "recompute", "no activation checkpointing"),
        ("model", "activation", "silu_glu"),
        (None, "cluster", "8x H100 SXM5 80GB"),
    ],
)
def test_a_phrase_is_read_as_the_word_and_named(section, field, written, stated):
    raw = _case()
    written = written.format(raw["training"]["precision"].upper())  # the case's own
    (raw if section is None else raw[section])[field] = written
    row = _run(raw)
    assert row["status"] == "ok", row["reason"]
    assert row["predicted_tokens_per_s_per_gpu"] == stated["predicted_tokens_per_s_per_gpu"]
    assert f"{written!r} read as" in row["reason"]


def test_an_fp8_phrase_names_its_recipe_unless_the_case_states_one():
    raw = _case()
    raw["training"]["precision"] = "fp8 (hybrid)"
    read, _ = forgive(raw)
    assert read["training"]["precision"] == "fp8"
    assert read["training"]["fp8_recipe"] == "delayed"
    raw["training"]["fp8_recipe"] = "tensorwise"
    read, _ = forgive(raw)
    assert read["training"]["fp8_recipe"] == "tensorwise"


@pytest.mark.parametrize(
    ("section", "field", "written"),
    [
        ("training", "precision", "mixed"),
        ("training", "recompute", "full and selective"),
        (None, "cluster", "H100 and A100"),
    ],
)
def test_a_phrase_that_names_nothing_or_two_things_stays_the_fields_error(section, field, written):
    raw = _case()
    (raw if section is None else raw[section])[field] = written
    row = _run(raw)
    assert row["status"] == "error"
    assert row["reason"].startswith(f"{field if section is None else f'{section}.{field}'}")


def test_a_cluster_path_is_not_read_as_a_phrase():
    raw = _case()
    raw["cluster"] = "/nonexistent/h100.yaml"
    row = _run(raw)
    assert row["status"] == "error" and "file not found" in row["reason"]


@pytest.mark.parametrize(
    "model",
    ["llama3.1-405b", "meta-llama/Llama-3.1-405B", {"name": "Llama 3.1 405B"}],
    ids=["id", "hugging-face", "name-only"],
)
def test_a_model_written_as_a_shipped_name_is_that_model(model, stated):
    raw = _case()
    raw["model"] = model
    row = _run(raw)
    assert row["status"] == "ok", row["reason"]
    assert row["predicted_tokens_per_s_per_gpu"] == stated["predicted_tokens_per_s_per_gpu"]
    assert "as in the shipped 'llama3.1-405b'" in row["reason"]


def test_a_model_keeps_what_it_states_and_takes_only_what_it_leaves_out():
    raw = _case()
    raw["model"] = {"name": "llama-3.1-405b", "layers": 63}
    read, _ = forgive(raw)
    shipped = load_model("llama3.1-405b")
    assert read["model"]["layers"] == 63
    assert read["model"]["hidden"] == shipped.hidden
    assert read["model"]["name"] == "llama3.1-405b"


def test_a_model_not_shipped_that_leaves_out_fields_stays_their_error():
    raw = _case()
    raw["model"] = "my-own-70b"
    row = _run(raw)
    assert row["status"] == "error" and row["reason"].startswith("model.layers")


def test_a_job_size_left_out_is_the_layouts_product(stated):
    raw = _case()
    size = raw.pop("num_gpus")
    row = _run(raw)
    assert row["status"] == "ok", row["reason"]
    assert row["predicted_tokens_per_s_per_gpu"] == stated["predicted_tokens_per_s_per_gpu"]
    assert f"tp x pp x dp x cp = {size}" in row["reason"]
    raw["layout"].pop("dp")
    assert _run(raw)["reason"].startswith("num_gpus")


@pytest.mark.parametrize("size", ["tp", "pp"])
def test_a_tp_or_pp_size_left_out_is_the_one_the_job_leaves(size, stated):
    raw = _case()
    value = raw["layout"].pop(size)
    row = _run(raw)
    assert row["status"] == "ok", row["reason"]
    assert row["predicted_tokens_per_s_per_gpu"] == stated["predicted_tokens_per_s_per_gpu"]
    assert f"layout.{size} not stated: num_gpus / the other sizes = {value}" in row["reason"]
    raw["layout"].pop("pp" if size == "tp" else "tp")  # both left out: their split is unknown
    assert _run(raw)["status"] == "error"


def test_reading_phrases_leaves_the_callers_case_as_it_was():
    raw = _case()
    raw["training"]["precision"] = "fp8 (hybrid)"
    raw["model"] = {"name": "llama-3.1-405b"}
    raw["cluster"] = "8x H100"
    raw["measured"] = {"step_time_s": 5.0}
    kept = copy.deepcopy(raw)
    forgive(raw)
    assert raw == kept


def test_schema_2_and_strict_reading_refuse_phrases():
    raw = _case()
    raw["training"]["precision"] = "BF16 mixed"
    assert _run(raw, strict=True)["status"] == "error"
    raw2 = copy.deepcopy(CASES[DENSE])
    raw2["training"]["precision"] = "BF16 mixed"
    assert _run(raw2, schema=2)["status"] == "error"


@pytest.mark.parametrize(
    ("measured", "per_gpu"),
    [
        ({"tokens_per_s": "{tokens}"}, "it / num_gpus"),
        ({"samples_per_second": "{sequences}"}, "it x seq_len / num_gpus"),
        ({"step_time_s": "{step}"}, "global_batch x seq_len / it / num_gpus"),
        ({"iteration_time_ms": "{step_ms}"}, "global_batch x seq_len / it / num_gpus"),
    ],
)
def test_a_job_level_throughput_in_place_of_tokens_per_gpu_is_read_per_gpu(measured, per_gpu):
    raw = _case()
    tokens = raw["measured"].pop("tokens_per_s_per_gpu")
    gpus, seq = raw["num_gpus"], raw["training"]["seq_len"]
    step = raw["training"]["global_batch"] * seq / (tokens * gpus)
    figures = {"tokens": tokens * gpus, "sequences": tokens * gpus / seq, "step": step}
    figures["step_ms"] = step * 1e3
    raw["measured"].update({k: float(v.format(**figures)) for k, v in measured.items()})
    row = _run(raw)
    assert row["status"] == "ok" and row["scored"], row["reason"]
    assert row["measured_tokens_per_s_per_gpu"] == pytest.approx(tokens, rel=1e-6)
    assert f"read as tokens_per_s_per_gpu = {per_gpu}" in row["reason"]


def test_a_per_gpu_figure_wins_over_a_job_level_one():
    raw = _case()
    tokens = raw["measured"]["tokens_per_s_per_gpu"]
    raw["measured"]["tokens_per_s"] = 1.0
    row = _run(raw)
    assert row["measured_tokens_per_s_per_gpu"] == tokens
    del raw["measured"]["tokens_per_s_per_gpu"]
    raw["measured"]["tokens_per_sec_per_gpu"] = tokens  # another spelling of it
    row = _run(raw)
    assert row["measured_tokens_per_s_per_gpu"] == tokens, row["reason"]


def test_an_moe_or_mla_block_missing_a_field_takes_the_namesakes_else_the_dense_width():
    moe_case = "bridge2511_gb200_deepseekv3_bf16"  # DeepSeek-V3: experts 2,048 wide, FFN 18,432
    raw = as_schema_1(CASES[moe_case])
    expected = _run(raw)["predicted_tokens_per_s_per_gpu"]
    del raw["model"]["moe"]["expert_ffn_hidden"]
    row = _run(raw)
    assert row["predicted_tokens_per_s_per_gpu"] == expected, row["reason"]
    assert "model.moe fields expert_ffn_hidden/" in row["reason"]
    assert "not stated: as in the shipped 'deepseek-v3'" in row["reason"]
    mla = as_schema_1(CASES[moe_case])
    mla["model"]["mla"] = {"kv_lora_rank": mla["model"]["mla"]["kv_lora_rank"]}
    row = _run(mla)
    assert row["predicted_tokens_per_s_per_gpu"] == expected, row["reason"]
    assert "model.mla fields" in row["reason"]
    raw["model"]["name"] = "my-moe"  # no namesake: each expert a copy of the dense FFN
    read, _ = forgive(raw)
    assert read["model"]["moe"]["expert_ffn_hidden"] == raw["model"]["ffn_hidden"]


def test_an_interleaving_depth_no_pipeline_of_the_model_can_have_is_tuned():
    raw = _case()
    layers, pp = raw["model"]["layers"], raw["layout"]["pp"]
    raw["layout"]["vpp"] = layers  # pp x vpp far above the layers: a layers-per-chunk, or a slip
    row = _run(raw)
    assert row["status"] == "ok", row["reason"]
    assert f"layout.vpp {layers} read as not stated: pp x vpp = {pp * layers}" in row["reason"]
    assert "not stated, tuned" in row["reason"]
    assert _run(raw, strict=True)["status"] == "error"
