"""The independent check set parses: every file is schema 2, every case builds its inputs."""

from __future__ import annotations

from pathlib import Path

import pytest

from planner.validate import read_case_file
from planner.validate.inputs import case_inputs
from planner.validate.run import parse_case

DIR = Path(__file__).resolve().parents[2] / "benchmarks" / "independent"
FILES = sorted(DIR.glob("*.yaml"))


def test_the_independent_set_has_its_files():
    bridge = {"bridge_2509_2602.yaml", "bridge_2604_2608.yaml"}
    assert {p.name for p in FILES} >= {
        "torchtitan.yaml",
        "others.yaml",
        "vtrain.yaml",
        "nemo_summary.yaml",
        "dgxc.yaml",
        "internevo.yaml",
        "megatron_ci.yaml",
        "mlperf.yaml",
        "olmo_core.yaml",
        "papers.yaml",
        *bridge,
    }


def test_case_ids_are_unique_across_the_files():
    ids = [c["id"] for path in FILES for c in read_case_file(path)[1]]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_independent_case_is_schema_2_and_builds(path: Path):
    schema, cases = read_case_file(path)
    assert schema == 2
    ids = [c["id"] for c in cases]
    assert len(ids) == len(set(ids)), "case ids are unique within a file"
    for raw in cases:
        inputs = case_inputs(parse_case(raw, schema))
        assert inputs.layout.world_size == raw["num_gpus"]
        assert raw["measured"]["tokens_per_s_per_gpu"] > 0
        # the schema lets a case leave these out (they do not reach the simulation); the
        # independent set names where every figure was read, and how sure that reading is
        assert raw.get("source", "").strip() and raw.get("quality"), raw["id"]


@pytest.mark.parametrize("shipped", ["public", "heldout_moe"])
def test_every_shipped_case_names_its_source_and_quality(shipped: str):
    for raw in read_case_file(shipped)[1]:
        assert raw.get("source", "").strip() and raw.get("quality"), raw["id"]


def test_vtrain_rows_state_what_vtrain_published():
    """Every vTrain row: full recompute, fp16, the A100 preset, the ZeRO stage unstated."""
    _, cases = read_case_file(DIR / "vtrain.yaml")
    assert len(cases) == 1440 + 109
    for raw in cases:
        assert raw["training"]["recompute"] == "full"
        assert raw["training"]["precision"] == "fp16"
        assert raw["cluster"] == "hgx-a100-80gb-100g"
        assert raw["unstated"] == ["zero"]


def test_every_independent_case_can_be_written_as_schema_1():
    """benchmarks/independent_v1.py names a framework for every case's stack (a stack it
    cannot name stopped the validation report)."""
    import importlib.util
    import sys

    path = DIR.parent / "independent_v1.py"
    sys.path.insert(0, str(DIR.parent))
    try:
        spec = importlib.util.spec_from_file_location("independent_v1", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(DIR.parent))
    stacks = {c["stack"] for p in FILES for c in read_case_file(p)[1]}
    assert stacks <= set(module.FRAMEWORK), sorted(stacks - set(module.FRAMEWORK))
    shipped = {p.stem for p in (DIR.parents[1] / "stacks").glob("*.yaml")}
    assert shipped <= set(module.FRAMEWORK), sorted(shipped - set(module.FRAMEWORK))
