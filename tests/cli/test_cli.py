"""The ``planner`` console script: output, JSON, and one-line errors with exit status 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from cli_run import one_line_error

from planner.cli import main
from planner.resources import shipped_cases

README_EXAMPLE = [
    "simulate",
    "--model",
    "llama3.1-70b",
    "--cluster",
    "dgx-h100",
    "--gpus",
    "1024",
    "--tp",
    "8",
    "--pp",
    "4",
    "--global-batch",
    "1024",
    "--seq-len",
    "8192",
]
SMALL = ["simulate", "--model", "llama3.1-8b", "--cluster", "dgx-h100"]
PUBLIC_CASES = shipped_cases()["public"]  # calibration/validation/public.yaml, shipped


def _simulate_8(model: str) -> list[str]:
    """``planner simulate`` of ``model`` on 8 H100s, global batch 8."""
    return [
        "simulate",
        "--model",
        model,
        "--cluster",
        "dgx-h100",
        "--gpus",
        "8",
        "--global-batch",
        "8",
    ]


def test_simulate_readme_example_prints_tables(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(README_EXAMPLE) == 0
    out = capsys.readouterr().out
    for text in (
        "tokens/s",
        "MFU",
        "HFU",
        "step time",
        "llama3.1-70b",
        "usable HBM",
        "allocated peak by pipeline rank: first",
        "compute_gemm",
        "Group placement",
        "MFU = model FLOPs per token",
    ):
        assert text in out, text


def test_simulate_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*README_EXAMPLE, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["step_time_s"] > 0
    assert data["tokens_per_s_per_gpu"] > 0
    assert set(data["time_breakdown_s"]) >= {"compute_gemm", "tp_comm", "pipeline_bubble"}
    assert "weights" in data["memory_breakdown_gib"]
    ranks = data["memory_by_stage_gib"]  # pp 4: each rank's allocated peak
    assert set(ranks) == {"first", "middle", "last"}
    assert max(ranks.values()) == pytest.approx(data["peak_memory_gib"])
    assert data["layout"]["dp"] == 32  # derived: 1024 / (8 * 4 * 1)
    assert data["training"]["seq_len"] == 8192
    assert data["model"]["name"] == "llama3.1-70b"
    assert data["cluster"]["id"] == "dgx-h100"
    lo, hi = data["tokens_per_s_per_gpu_band"]  # the planner's error band around it
    assert lo < data["tokens_per_s_per_gpu"] < hi


def test_cross_entropy_flag_reaches_the_report(capsys: pytest.CaptureFixture[str]) -> None:
    logits = {}
    for kind in ("fp32_copy", "in_place"):
        assert main([*_simulate_8("llama3.1-8b"), "--cross-entropy", kind, "--json"]) == 0
        data = json.loads(capsys.readouterr().out)
        assert data["training"]["cross_entropy"] == kind
        logits[kind] = data["memory_breakdown_gib"]["logits"]
    assert logits["in_place"] == pytest.approx(logits["fp32_copy"] / 3)
    with pytest.raises(SystemExit) as exc:
        main([*_simulate_8("llama3.1-8b"), "--cross-entropy", "fused"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--cross-entropy" in err and "in_place" in err and "Traceback" not in err


def test_dp_derived_and_explicit_agree(capsys: pytest.CaptureFixture[str]) -> None:
    base = [*SMALL, "--gpus", "16", "--tp", "2", "--global-batch", "64", "--json"]
    assert main(base) == 0
    derived = json.loads(capsys.readouterr().out)
    assert derived["layout"]["dp"] == 8
    assert main([*base, "--dp", "8"]) == 0
    explicit = json.loads(capsys.readouterr().out)
    assert explicit["step_time_s"] == pytest.approx(derived["step_time_s"])


def test_dp_not_derivable(capsys: pytest.CaptureFixture[str]) -> None:
    line = one_line_error(capsys, [*SMALL, "--gpus", "12", "--tp", "8", "--global-batch", "64"])
    assert "layout.dp" in line


def test_tp_not_dividing_heads(capsys: pytest.CaptureFixture[str]) -> None:
    line = one_line_error(capsys, [*SMALL, "--gpus", "24", "--tp", "3", "--global-batch", "64"])
    assert "layout.tp" in line


def test_gpus_not_product_of_layout(capsys: pytest.CaptureFixture[str]) -> None:
    line = one_line_error(
        capsys, [*SMALL, "--gpus", "64", "--tp", "8", "--dp", "4", "--global-batch", "64"]
    )
    assert "layout" in line and "gpus = 64" in line


@pytest.mark.parametrize("batch", [["--global-batch", "-8"], ["--global-batch=-8"]])
def test_negative_global_batch(capsys: pytest.CaptureFixture[str], batch: list[str]) -> None:
    line = one_line_error(capsys, [*SMALL, "--gpus", "8", *batch])
    assert "global_batch" in line


def test_unknown_model_lists_valid_ids(capsys: pytest.CaptureFixture[str]) -> None:
    line = one_line_error(
        capsys,
        _simulate_8("no-such-model"),
    )
    assert "model" in line and "llama3.1-70b" in line


def test_malformed_yaml_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("name: broken\nlayers: [1, 2\nhidden: 4096\n")
    line = one_line_error(
        capsys,
        _simulate_8(str(path)),
    )
    assert "model" in line and "YAML" in line


def test_model_yaml_missing_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = yaml.safe_load(
        (Path(__file__).resolve().parents[2] / "models" / "llama3.1-8b.yaml").read_text()
    )
    del spec["hidden"]
    path = tmp_path / "nohidden.yaml"
    path.write_text(yaml.safe_dump(spec))
    line = one_line_error(
        capsys,
        _simulate_8(str(path)),
    )
    assert "hidden" in line


def test_unknown_profile(capsys: pytest.CaptureFixture[str]) -> None:
    line = one_line_error(
        capsys, [*SMALL, "--gpus", "8", "--global-batch", "8", "--profile", "nope"]
    )
    assert "profile" in line


def test_argparse_rejects_bad_choice(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main([*SMALL, "--gpus", "8", "--global-batch", "8", "--recompute", "foo"])
    assert exc.value.code == 2


@pytest.fixture
def validation_file(tmp_path: Path) -> Path:
    cases = yaml.safe_load(PUBLIC_CASES.read_text())["cases"][:2]  # schema 2
    broken = dict(cases[0], id="broken-case")
    del broken["model"]
    path = tmp_path / "cases.yaml"
    path.write_text(yaml.safe_dump({"schema": 2, "cases": [*cases, broken]}, sort_keys=False))
    return path


def test_validate_json(validation_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(validation_file), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert len(data["cases"]) == 3
    broken = next(c for c in data["cases"] if c["id"] == "broken-case")
    assert broken["status"] == "error"
    assert "model" in broken["reason"]
    others = [c for c in data["cases"] if c["id"] != "broken-case"]
    assert all(c["predicted_tokens_per_s_per_gpu"] for c in others if c["status"] != "error")
    assert set(data["summary"]) >= {
        "n",
        "n_ok",
        "n_scored",
        "mape_pct",
        "median_ape_pct",
        "p90_ape_pct",
        "max_ape_pct",
        "memory_mape_pct",
    }
    assert data["summary"]["n"] == 3


def test_validate_table(validation_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(validation_file)]) == 0
    out = capsys.readouterr().out
    assert "broken-case" in out and "error" in out and "MAPE" in out


def test_validate_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = one_line_error(capsys, ["validate", str(tmp_path / "absent.yaml")])
    assert "FILE" in line


def test_list_models(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list", "models"]) == 0
    out = capsys.readouterr().out
    assert "llama3.1-70b" in out and "B params" in out


@pytest.mark.parametrize(
    "kind, expected", [("clusters", "dgx-h100"), ("accelerators", "h100-sxm5-80gb")]
)
def test_list_json(kind: str, expected: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list", kind, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert expected in {r["id"] for r in rows}
