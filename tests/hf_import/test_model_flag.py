"""``--model config.json``: a HuggingFace config is recognised and imported on the fly."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout
from pathlib import Path

import pytest

import planner
from planner.cli import main
from planner.hf_import import load_hf_config, spec_from_hf_config

HF = Path(__file__).resolve().parents[2] / "models" / "hf"
JOB = ["--cluster", "dgx-h100", "--gpus", "8", "--global-batch", "64", "--zero", "3", "--json"]


def test_load_model_imports_an_hf_config_as_import_hf_does():
    path = HF / "Llama-3.1-8B.json"
    spec = planner.load_model(path)
    expected, _ = spec_from_hf_config(load_hf_config(path), name="llama-3.1-8b")
    assert spec == expected


def test_simulate_takes_a_config_json():
    buf = io.StringIO()
    with redirect_stdout(buf):
        assert main(["simulate", "--model", str(HF / "Llama-3.1-8B.json"), *JOB]) == 0
    data = json.loads(buf.getvalue())
    assert data["model"]["name"] == "llama-3.1-8b"
    assert data["tokens_per_s_per_gpu"] > 0


def test_a_json_that_is_not_an_hf_config_is_one_line(tmp_path, capsys):
    bad = tmp_path / "other.json"
    bad.write_text(json.dumps({"layers": 2}))
    assert main(["simulate", "--model", str(bad), *JOB]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "model" in err[0] and "HuggingFace config" in err[0]


def test_an_unsupported_model_type_names_the_file(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text(json.dumps({"model_type": "no-such-arch", "hidden_size": 8}))
    with pytest.raises(planner.PlannerError) as info:
        planner.load_model(bad)
    assert info.value.field.startswith("config.json")
