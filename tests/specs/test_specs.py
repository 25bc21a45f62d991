"""Spec loading and validation: shipped data, presets, strictness and error messages."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

import planner
from planner.specs.hardware import AcceleratorSpec, ClusterSpec
from planner.specs.layout import Layout, Training
from planner.specs.loading import (
    ACCELERATORS_DIR,
    CLUSTERS_DIR,
    MODELS_DIR,
    shipped_ids,
)
from planner.specs.model import ModelSpec

MODEL_IDS = shipped_ids(MODELS_DIR)
CLUSTER_IDS = shipped_ids(CLUSTERS_DIR)
ACCELERATOR_IDS = shipped_ids(ACCELERATORS_DIR)

# shared/validation/README.md, "Cluster presets" table: id, GPUs per node, scale-up GB/s each way,
# scale-out Gb/s per GPU (converted to GB/s: /8).
README_PRESETS = {
    "dgx-a100-40gb": (8, 300, 200 / 8),
    "dgx-a100-80gb": (8, 300, 200 / 8),
    "hgx-a100-80gb-100g": (8, 300, 100 / 8),
    "dgx-h100": (8, 450, 400 / 8),
    "meta-h100-roce": (8, 450, 400 / 8),
    "grand-teton-h100-96gb": (8, 450, 400 / 8),
    "dgx-h200": (8, 450, 400 / 8),
    "hgx-h800": (8, 200, 400 / 8),
    "dgx-b200": (8, 900, 400 / 8),
    "gb200-nvl72": (72, 900, 400 / 8),
    "gb300-nvl72": (72, 900, 800 / 8),
}

# presets for the fabrics published training tables state (session 31): id -> (GPUs per node,
# scale-out Gb/s per node as the source prints it)
STATED_FABRICS = {
    "hgx-a100-80gb-50g": (8, 400),  # InternEvo "4 * 100Gb RoCE"; fms-fsdp "A100 ... 400Gbps"
    "hgx-h100-100g": (8, 800),  # fms-fsdp "H100 96 GPUs with 800 Gbps"
}


@pytest.mark.parametrize("cluster_id", sorted(STATED_FABRICS))
def test_a_stated_fabric_preset_carries_the_per_node_bandwidth_its_sources_print(cluster_id):
    gpus, node_gbit = STATED_FABRICS[cluster_id]
    spec = planner.load_cluster(cluster_id).spec
    assert spec.gpus_per_node == gpus
    assert spec.scale_out_bandwidth_gb_per_s * 8 * gpus == pytest.approx(node_gbit)


VALID_MODEL_YAML = """\
name: tiny
layers: 2
hidden: 64
ffn_hidden: 256
heads: 4
vocab: 1000
"""


def test_shipped_lists_are_not_empty():
    assert len(MODEL_IDS) >= 10
    assert len(CLUSTER_IDS) >= len(README_PRESETS)
    assert len(ACCELERATOR_IDS) >= 5


@pytest.mark.parametrize("model_id", MODEL_IDS)
def test_every_shipped_model_loads(model_id):
    spec = planner.load_model(model_id)
    assert isinstance(spec, ModelSpec)
    assert spec.total_params > 0
    assert spec.active_params <= spec.total_params
    # the same file loads by path too
    assert planner.load_model(MODELS_DIR / f"{model_id}.yaml") == spec


@pytest.mark.parametrize("accel_id", ACCELERATOR_IDS)
def test_every_shipped_accelerator_loads_with_sources(accel_id):
    acc = planner.load_accelerator(accel_id)
    assert isinstance(acc, AcceleratorSpec)
    assert acc.sources, "every accelerator cites its sources"
    assert all(isinstance(s, str) and s.strip() for s in acc.sources)
    assert acc.hbm_usable_gib <= acc.hbm_capacity_gib
    # bf16 (or its fp16 fallback) is always available for training
    assert acc.peak_flops_per_s("bf16") > 0
    assert acc.peak_flops_per_s("fp16") > 0


@pytest.mark.parametrize("cluster_id", CLUSTER_IDS)
def test_every_shipped_cluster_loads_with_sources(cluster_id):
    cluster = planner.load_cluster(cluster_id)
    assert cluster.id == cluster_id
    assert cluster.spec.sources
    assert all(isinstance(s, str) and s.strip() for s in cluster.spec.sources)
    assert cluster.accelerator == planner.load_accelerator(cluster.spec.accelerator)
    assert cluster.spec.scale_up_domain_gpus % cluster.spec.gpus_per_node == 0


@pytest.mark.parametrize("preset", sorted(README_PRESETS))
def test_readme_presets_exist_and_match_table(preset):
    assert preset in CLUSTER_IDS
    spec = planner.load_cluster(preset).spec
    gpus_per_node, up_gb_s, out_gb_s = README_PRESETS[preset]
    assert spec.gpus_per_node == gpus_per_node
    assert spec.scale_up_bandwidth_gb_per_s == pytest.approx(up_gb_s)
    assert spec.scale_out_bandwidth_gb_per_s == pytest.approx(out_gb_s)


def test_nvl72_is_one_domain():
    for preset in ("gb200-nvl72", "gb300-nvl72"):
        assert planner.load_cluster(preset).spec.scale_up_domain_gpus == 72


# ---- strictness ------------------------------------------------------------------------------
def test_extra_fields_forbidden_in_constructors():
    with pytest.raises(ValidationError):
        ModelSpec(name="x", layers=1, hidden=64, ffn_hidden=64, heads=1, vocab=10, bogus=1)
    with pytest.raises(ValidationError):
        Layout(tp=1, bogus=2)
    with pytest.raises(ValidationError):
        Training(seq_len=8, global_batch=1, bogus=True)
    acc = planner.load_accelerator("h100-sxm5-80gb").model_dump()
    acc["bogus"] = 1
    with pytest.raises(ValidationError):
        AcceleratorSpec(**acc)
    cl = planner.load_cluster("dgx-h100").spec.model_dump()
    cl["bogus"] = 1
    with pytest.raises(ValidationError):
        ClusterSpec(**cl)


def test_extra_field_in_yaml_is_planner_error(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text(VALID_MODEL_YAML + "flux_capacitor: 3\n")
    with pytest.raises(planner.PlannerError) as info:
        planner.load_model(path)
    assert info.value.field == "model.flux_capacitor"
    assert "unknown field" in str(info.value)


def test_specs_are_frozen(h100):
    spec = planner.load_model("llama3.1-8b")
    with pytest.raises(ValidationError):
        spec.layers = 3
    layout = Layout(tp=2)
    with pytest.raises(ValidationError):
        layout.tp = 4
    training = Training(seq_len=8, global_batch=1)
    with pytest.raises(ValidationError):
        training.seq_len = 16
    with pytest.raises(ValidationError):
        h100.spec.gpus_per_node = 4
    with pytest.raises(ValidationError):
        h100.accelerator.tdp_w = 1.0


def test_valid_yaml_path_loads(tmp_path):
    path = tmp_path / "tiny.yaml"
    path.write_text(VALID_MODEL_YAML)
    spec = planner.load_model(path)
    assert spec.n_kv_heads == 4 and spec.d_head == 16


# ---- error messages --------------------------------------------------------------------------
def test_bad_yaml_names_the_line(tmp_path):
    path = tmp_path / "bad.yaml"
    # line 4 is indented under a scalar: "mapping values are not allowed here"
    path.write_text("name: x\nlayers: 2\nhidden: 64\n  heads: 1\nvocab: 3\n")
    with pytest.raises(planner.PlannerError) as info:
        planner.load_model(path)
    msg = str(info.value)
    assert "line 4" in msg
    assert "\n" not in msg, "errors are single lines"


def test_bad_yaml_for_cluster_and_accelerator(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("name: [x\n")
    for loader in (planner.load_cluster, planner.load_accelerator):
        with pytest.raises(planner.PlannerError) as info:
            loader(path)
        assert "line" in str(info.value)


def test_non_mapping_yaml_rejected(tmp_path):
    path = tmp_path / "list.yaml"
    path.write_text("- 1\n- 2\n")
    with pytest.raises(planner.PlannerError) as info:
        planner.load_model(path)
    assert "mapping" in str(info.value)


@pytest.mark.parametrize("missing", ["hidden", "layers", "vocab", "heads"])
def test_missing_field_is_named(tmp_path, missing):
    text = "".join(
        line + "\n" for line in VALID_MODEL_YAML.splitlines() if not line.startswith(missing + ":")
    )
    path = tmp_path / "m.yaml"
    path.write_text(text)
    with pytest.raises(planner.PlannerError) as info:
        planner.load_model(path)
    assert info.value.field == f"model.{missing}"
    assert missing in str(info.value)


def test_kv_heads_must_divide_heads(tmp_path):
    with pytest.raises(ValidationError, match="kv_heads"):
        ModelSpec(name="x", layers=1, hidden=64, ffn_hidden=64, heads=4, kv_heads=3, vocab=10)
    path = tmp_path / "m.yaml"
    path.write_text(VALID_MODEL_YAML + "kv_heads: 3\n")
    with pytest.raises(planner.PlannerError, match="kv_heads"):
        planner.load_model(path)
    # a divisor is fine
    ok = ModelSpec(name="x", layers=1, hidden=64, ffn_hidden=64, heads=4, kv_heads=2, vocab=10)
    assert ok.n_kv_heads == 2


@pytest.mark.parametrize("field", ["layers", "hidden", "heads", "vocab", "ffn_hidden"])
def test_non_positive_sizes_rejected(tmp_path, field):
    text = VALID_MODEL_YAML.replace(
        next(line for line in VALID_MODEL_YAML.splitlines() if line.startswith(field + ":")),
        f"{field}: 0",
    )
    path = tmp_path / "m.yaml"
    path.write_text(text)
    with pytest.raises(planner.PlannerError) as info:
        planner.load_model(path)
    assert info.value.field == f"model.{field}"


def test_unknown_cluster_lists_valid_ids():
    with pytest.raises(planner.PlannerError) as info:
        planner.load_cluster("no-such-cluster")
    err = info.value
    assert err.field == "cluster"
    assert "no-such-cluster" in str(err)
    for cid in CLUSTER_IDS:
        assert cid in err.valid


def test_unknown_model_and_accelerator_list_valid_ids():
    with pytest.raises(planner.PlannerError) as info:
        planner.load_model("gpt-9000")
    assert "llama3.1-8b" in info.value.valid
    with pytest.raises(planner.PlannerError) as info:
        planner.load_accelerator("tpu-v9")
    assert "h100-sxm5-80gb" in info.value.valid


def test_missing_path_is_planner_error(tmp_path):
    with pytest.raises(planner.PlannerError, match="not found"):
        planner.load_model(tmp_path / "absent.yaml")


def test_layout_rejects_non_positive_and_bad_schedule():
    with pytest.raises(ValidationError):
        Layout(tp=0)
    with pytest.raises(ValidationError):
        Layout(zero=4)
    with pytest.raises(ValidationError):
        Layout(pp=2, schedule="interleaved")  # needs vpp >= 2
    assert Layout(pp=2, vpp=2).pipeline_schedule == "interleaved"
    assert Layout(tp=2, cp=2, dp=3, pp=4).world_size == 48


def test_training_tokens_per_step():
    assert Training(seq_len=4096, global_batch=256).tokens_per_step == 4096 * 256
    with pytest.raises(ValidationError):
        Training(seq_len=4096, global_batch=1, precision="fp4")
