"""Regression tests of issue 12: hostile and extreme input gets one line, never a hang, a
blow-up, a NaN or a traceback. Each test names the numbered failure it guards."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
import yaml

import planner
from planner.cli import main
from planner.divisors import divisors, divisors_text
from planner.errors import PlannerError
from planner.profile import check_profile_device, load_profile, parse_profile_text
from planner.safe_io import dumps_strict, load_json, load_yaml, read_text
from planner.simulate import check_finite
from planner.specs.limits import limits_markdown
from planner.specs.model import ModelSpec
from planner.validate import run_case, summarize, validate_file

ROOT = Path(__file__).resolve().parents[1]
CPU_PROFILE = ROOT / "calibration" / "measured" / "cpu-2core-quick.json"


def _model_dict(**changes: object) -> dict:
    data = planner.load_model("llama3.1-8b").model_dump(mode="json", exclude_none=True)
    data.update(changes)
    return data


def _a_case() -> dict:
    """A schema-1 validation case built from shipped specs (no ../shared needed)."""
    return {
        "id": "llama31_8b_dgx_h100",
        "source": "test fixture",
        "quality": "partial",
        "model": _model_dict(),
        "cluster": "dgx-h100",
        "num_gpus": 8,
        "layout": {"tp": 1, "pp": 1, "dp": 8},
        "training": {"seq_len": 4096, "micro_batch": 1, "global_batch": 64},
        "measured": {"tokens_per_s_per_gpu": 10000.0},
    }


def _one_error_line(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    return err


# ---- 1. no hang from a one-line model file -----------------------------------------------------
def test_divisors_match_the_definition_and_stay_bounded() -> None:
    for n in range(1, 2000):
        assert divisors(n) == [d for d in range(1, n + 1) if n % d == 0]
    assert divisors(10**12)[-1] == 10**12  # ~1e6 steps, not 1e12
    assert divisors(10**13) == [] and divisors(0) == []
    assert "divisors)" in divisors_text(720720)  # long lists are shortened


def test_huge_heads_is_refused_at_load(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(_model_dict(heads=10**12, kv_heads=None, head_dim=128)))
    err = _one_error_line(
        capsys,
        ["simulate", "--model", str(path), "--cluster", "dgx-h100", "--gpus", "3"]
        + ["--tp", "3", "--global-batch", "3"],
    )
    assert "model.heads" in err and "65,536" in err


def test_large_legal_counts_answer_with_their_divisors() -> None:
    model = ModelSpec.model_validate(_model_dict(heads=65_521, kv_heads=None, head_dim=64))
    cluster = planner.load_cluster("dgx-h100")
    with pytest.raises(PlannerError, match="layout.tp.*valid: 1, 65521"):
        planner.check_layout(
            model, cluster, planner.Layout(tp=3), planner.Training(seq_len=8, global_batch=3)
        )
    moe = planner.load_model("mixtral-8x7b").model_dump(mode="json", exclude_none=True)
    moe["moe"]["experts"] = 65_521
    model = ModelSpec.model_validate(moe)
    with pytest.raises(PlannerError, match="layout.ep"):
        planner.check_layout(
            model,
            cluster,
            planner.Layout(dp=8, ep=8),
            planner.Training(seq_len=8, global_batch=8),
        )


# ---- 2. no memory blow-up from a 1 KB file ---------------------------------------------------
BOMB = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]\n" for i in range(8)
)


def test_billion_laughs_is_refused_before_objects_are_built() -> None:
    with pytest.raises(PlannerError, match="aliases expand"):
        load_yaml(BOMB, "FILE")
    with pytest.raises(PlannerError, match="refers to itself"):
        load_yaml("x: &r [*r]\n", "FILE")
    assert load_yaml("a: &a {b: 1}\nc: [*a, *a]\n", "f") == {"a": {"b": 1}, "c": [{"b": 1}] * 2}


def test_validate_bomb_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(BOMB.replace("a: &a", "x: &a") + "cases:\n- id: *i\n")
    err = _one_error_line(capsys, ["validate", str(path), "--json"])
    assert "aliases expand" in err


def test_a_near_1mb_spec_is_refused_by_its_node_count(tmp_path: Path, capsys) -> None:
    """A 990 KB flow list took 15 s to parse (PyYAML, pure Python): parse time follows nodes,
    so a spec's nodes are capped on libyaml's event stream before any object is built."""
    path = tmp_path / "model.yaml"
    text = yaml.safe_dump(_model_dict()) + "fuzz_pad: [" + "0," * 495_000 + "0]\n"
    path.write_text(text)
    err = _one_error_line(
        capsys,
        [
            "simulate",
            "--model",
            str(path),
            "--cluster",
            "dgx-h100",
            "--gpus",
            "8",
            "--global-batch",
            "64",
        ],
    )
    assert "more than 20,000 YAML nodes" in err


def test_case_alias_fan_out_is_refused(tmp_path: Path, capsys) -> None:
    """``- &c {case}`` then ``- *c`` 10,000 times (52 KB) simulated 10,001 cases (> 60 s)."""
    case = json.dumps(_a_case())
    path = tmp_path / "fan.yaml"
    path.write_text(f"- &c {case}\n" + "- *c\n" * 50)
    err = _one_error_line(capsys, ["validate", str(path)])
    assert "FILE[1]" in err and "repeats case" in err
    path.write_text(f"- &c {case}\n" + "- *c\n" * 10_000)
    assert "at most 2,000 cases" in _one_error_line(capsys, ["validate", str(path)])


def test_duplicate_case_ids_run_each_case_and_say_so_strictly_an_error(
    tmp_path: Path, capsys
) -> None:
    path = tmp_path / "dup.yaml"
    path.write_text(yaml.safe_dump([_a_case(), _a_case(), {"id": _a_case()["id"]}]))
    assert main(["validate", str(path), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["cases"]
    assert [r["status"] for r in rows] == ["ok", "ok", "error"]
    assert "id repeats" not in rows[0]["reason"]
    assert rows[1]["reason"].startswith("id repeats FILE[0]'s (this is FILE[1]); ")
    assert rows[2]["reason"].startswith("id repeats FILE[0]'s (this is FILE[2]); ")
    assert rows[0]["predicted_tokens_per_s_per_gpu"] == rows[1]["predicted_tokens_per_s_per_gpu"]
    err = _one_error_line(capsys, ["validate", str(path), "--strict"])
    assert "FILE[1].id" in err and "duplicate id" in err


def test_a_case_id_that_is_not_a_string_is_not_copied() -> None:
    row = run_case({"id": [["lol"] * 9] * 9}, lambda c: planner.default_profile(c))
    assert row["id"] == "?" and row["status"] == "error"


def test_deep_nesting_is_refused() -> None:
    with pytest.raises(PlannerError, match="nesting"):
        load_yaml("[" * 100_000, "FILE")
    with pytest.raises(PlannerError, match="nesting"):
        load_json("[" * 100_000 + "]" * 100_000, "profile")


# ---- 3. no silent NaN ---------------------------------------------------------------------------
@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
def test_non_finite_spec_values_are_refused(value: float) -> None:
    moe = planner.load_model("mixtral-8x7b").model_dump(mode="json", exclude_none=True)
    moe["moe"]["load_imbalance"] = value
    with pytest.raises(PlannerError, match="model.moe.load_imbalance"):
        planner.specs.loading.parse_spec(moe, ModelSpec, "model")


def test_infinite_cluster_latency_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture):
    text = (ROOT / "hardware_specs" / "clusters" / "dgx-h100.yaml").read_text()
    data = yaml.safe_load(text)
    data["scale_up_latency_us"] = float("inf")
    data["accelerator"] = str(ROOT / "hardware_specs" / "accelerators" / "h100-sxm5-80gb.yaml")
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(data))
    err = _one_error_line(
        capsys,
        ["search", "--model", "llama3.1-8b", "--cluster", str(path), "--gpus", "8"]
        + ["--global-batch", "8"],
    )
    assert "scale_up_latency_us" in err and "finite" in err


def test_infinite_measurement_is_that_cases_error(tmp_path: Path) -> None:
    case = _a_case()
    bad = {**case, "id": "bad", "measured": {"tokens_per_s_per_gpu": float("inf")}}
    path = tmp_path / "cases.yaml"
    path.write_text(yaml.safe_dump([case, bad]))
    result = validate_file(path, lambda c: planner.default_profile(c))
    rows = {r["id"]: r for r in result["cases"]}
    assert rows["bad"]["status"] == "error" and "measured" in rows["bad"]["reason"]
    assert rows[case["id"]]["status"] in ("ok", "infeasible")
    json.loads(dumps_strict(result))  # strict JSON: no NaN / Infinity
    assert all(v is None or math.isfinite(v) for v in result["summary"].values() if v != 0)


def test_summary_ignores_non_finite_rows() -> None:
    rows = [
        {"status": "ok", "error_pct": 10.0, "predicted_peak_memory_gib": 1.0},
        {"status": "ok", "error_pct": float("nan"), "predicted_peak_memory_gib": 1.0},
    ]
    assert summarize(rows)["mapE_pct".lower()] == 10.0


@pytest.mark.parametrize(
    ("field", "value"),
    [("eta_max", {"bf16": -0.5}), ("eta_max", {}), ("dim_half", 1e308), ("fixed_us", -1)],
)
def test_profile_out_of_range_is_refused(field: str, value: object) -> None:
    data = json.loads((ROOT / "calibration" / "profiles" / "h100-sxm5-80gb.json").read_text())
    data["gemm"][field] = value
    with pytest.raises(PlannerError, match=f"profile.gemm.{field}"):
        parse_profile_text(json.dumps(data))


def test_profile_json_literals_and_nesting_are_one_line() -> None:
    text = (ROOT / "calibration" / "profiles" / "h100-sxm5-80gb.json").read_text()
    for bad in (
        text.replace('"dim_half": ', '"dim_half": Infinity, "x": '),
        text.replace('"eta_max": {', '"eta_max": {}, "y": {'),
        "[" * 100_000,
    ):
        with pytest.raises(PlannerError):
            parse_profile_text(bad)


def test_non_finite_report_is_an_error_naming_the_figure() -> None:
    model, cluster = planner.load_model("llama3.1-8b"), planner.load_cluster("dgx-h100")
    rep = planner.simulate(
        model, cluster, planner.Layout(tp=8), planner.Training(seq_len=4096, global_batch=8)
    )
    assert check_finite(rep) is rep
    import dataclasses

    broken = dataclasses.replace(
        rep, time_breakdown_s={**rep.time_breakdown_s, "tp_comm": math.inf}
    )
    with pytest.raises(PlannerError, match="report.time_breakdown_s.tp_comm.*cluster bandwidths"):
        check_finite(broken)


def test_strict_json_output_names_the_non_finite_path() -> None:
    with pytest.raises(PlannerError, match=r"a\[1\].b"):
        dumps_strict({"a": [1, {"b": math.nan}]})


def test_booleans_are_not_numbers() -> None:
    with pytest.raises(PlannerError, match="model.hidden: a boolean"):
        planner.specs.loading.parse_spec(_model_dict(hidden=True), ModelSpec, "model")
    with pytest.raises(PlannerError, match="zero"):
        planner.specs.loading.parse_spec({"zero": True}, planner.Layout, "layout")


# ---- 4. one line instead of a traceback -------------------------------------------------------
@pytest.mark.parametrize("flag", ["--model", "--cluster", "--layout"])
def test_non_utf8_files_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture, flag: str):
    path = tmp_path / "bad.yaml"
    path.write_bytes(b"name: \xff\xfe\x00bad\n")
    argv = ["simulate", "--model", "llama3.1-8b", "--cluster", "dgx-h100", "--gpus", "8"]
    argv += ["--global-batch", "8", flag, str(path)]
    err = _one_error_line(capsys, argv)
    assert "not UTF-8" in err


def test_non_utf8_validation_file(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    path = tmp_path / "v.yaml"
    path.write_bytes(b"- id: \xc3\x28\n")
    assert "not UTF-8" in _one_error_line(capsys, ["validate", str(path)])


@pytest.mark.parametrize("flag", ["--seq-len", "--global-batch", "--micro-batch", "--gpus"])
def test_huge_integers_are_one_line(capsys: pytest.CaptureFixture, flag: str) -> None:
    argv = ["simulate", "--model", "llama3.1-8b", "--cluster", "dgx-h100", "--gpus", "8"]
    argv += ["--global-batch", "8", flag, "1" + "0" * 400]
    err = _one_error_line(capsys, argv)
    assert "out of range" in err or "must be" in err or "cap" in err


def test_huge_integer_in_a_case_loses_only_that_case(tmp_path: Path) -> None:
    case = _a_case()
    bad = json.loads(json.dumps(case))
    bad["id"] = "huge"
    bad["model"]["hidden"] = 10**400
    path = tmp_path / "cases.yaml"
    path.write_text(yaml.safe_dump([bad, case]))
    rows = {r["id"]: r for r in validate_file(path, planner.default_profile)["cases"]}
    assert rows["huge"]["status"] == "error" and "model.hidden" in rows["huge"]["reason"]
    assert rows[case["id"]]["status"] != "error"


def test_big_model_file_is_refused_before_reading(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    with path.open("wb") as fh:  # a sparse 2 GB file: reading it whole would need 2 GB
        fh.truncate(2 * 1024**3)
    with pytest.raises(PlannerError, match="larger than 1 MB"):
        planner.load_model(path)
    with pytest.raises(PlannerError, match="larger than"):
        read_text(path, "model")


# ---- 5. a profile for another device --------------------------------------------------------
def test_cpu_profile_on_h100_is_refused(capsys: pytest.CaptureFixture) -> None:
    argv = ["simulate", "--model", "llama3.1-8b", "--cluster", "dgx-h100", "--gpus", "8"]
    argv += ["--global-batch", "8", "--profile", str(CPU_PROFILE)]
    err = _one_error_line(capsys, argv)
    assert "measured on" in err and "--profile-for-any-device" in err
    assert main([*argv, "--profile-for-any-device", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["profile"] == load_profile(CPU_PROFILE).id  # the report names the profile


def test_profile_device_check_accepts_the_clusters_own() -> None:
    for cid in ("dgx-h100", "dgx-b200", "mi300x-8x"):
        cluster = planner.load_cluster(cid)
        check_profile_device(planner.default_profile(cluster), cluster)


# ---- the documented ranges are the enforced ones ---------------------------------------------
def test_limits_page_matches_the_code() -> None:
    page = (ROOT / "docs" / "limits.md").read_text()
    assert page == limits_markdown(), "regenerate: python -m planner.specs.limits > docs/limits.md"


def test_every_numeric_field_has_a_finite_range() -> None:
    from planner.specs.limits import _range_text, spec_classes

    for cls in spec_classes():
        for name, field in cls.model_fields.items():
            text = _range_text(field)
            assert text != "-", f"{cls.__name__}.{name} has no documented range"


def test_out_of_range_error_names_the_full_range() -> None:
    with pytest.raises(PlannerError) as info:
        planner.specs.loading.parse_spec(_model_dict(layers=10**6), ModelSpec, "model")
    assert "model.layers" in str(info.value) and "1 to 10,000" in str(info.value)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="POSIX")
def test_trace_of_a_huge_step_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    argv = ["simulate", "--model", "gpt-tiny", "--cluster", "dgx-h100", "--gpus", "2"]
    argv += ["--pp", "2", "--global-batch", "16777216", "--seq-len", "128"]
    err = _one_error_line(capsys, [*argv, "--trace", str(tmp_path / "t.json")])
    assert "--trace" in err and "ops" in err
