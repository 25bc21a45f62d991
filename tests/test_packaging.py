"""The wheel carries the shipped data and the web app; resources resolve without ../shared.
(.ci/wheel_check installs the wheel in a fresh venv and runs the commands from an empty dir.)"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from planner.cli import main
from planner.cli.app import app_command, config_options
from planner.resources import (
    ACCELERATORS_DIR,
    APP_DIR,
    CLUSTERS_DIR,
    MODELS_DIR,
    PROFILES_DIR,
    STACKS_DIR,
    shipped_cases,
)

ROOT = Path(__file__).resolve().parents[1]


def test_resources_resolve_in_the_checkout() -> None:
    for directory, ext in (
        (MODELS_DIR, "yaml"),
        (ACCELERATORS_DIR, "yaml"),
        (CLUSTERS_DIR, "yaml"),
        (PROFILES_DIR, "json"),
    ):
        assert any(directory.glob(f"*.{ext}")), directory
    assert set(shipped_cases()) >= {"public", "heldout_moe"}
    assert (APP_DIR / "app.py").is_file()


def test_validate_takes_a_shipped_case_id(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "heldout_moe", "--json"]) == 0
    assert '"summary"' in capsys.readouterr().out


def test_app_command_passes_the_shipped_settings() -> None:
    argv = app_command(port=8600)
    assert argv[1:4] == ["-m", "streamlit", "run"] and argv[4].endswith("app.py")
    assert "--server.fileWatcherType=none" in config_options()
    assert "--server.port=8600" in argv


def test_app_port_out_of_range_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["app", "--port", "70000", "--print-command"]) == 2
    assert "--port" in capsys.readouterr().err


@pytest.mark.slow
def test_wheel_carries_data_and_app(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path), str(ROOT)],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("scaling_planner-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for model in MODELS_DIR.glob("*.yaml"):
        assert f"planner/_data/models/{model.name}" in names
    for cluster in CLUSTERS_DIR.glob("*.yaml"):
        assert f"planner/_data/hardware_specs/clusters/{cluster.name}" in names
    for stack in STACKS_DIR.glob("*.yaml"):
        assert f"planner/_data/stacks/{stack.name}" in names
    for profile in PROFILES_DIR.glob("*.json"):
        assert f"calibration/profiles/{profile.name}" in names
    assert {
        "calibration/validation/public.yaml",
        "calibration/validation/heldout_moe.yaml",
    } <= names
    assert {"planner/_data/app/app.py", "planner/_data/app/app_pages/estimate.py"} <= names
