"""Every command block of the README runs from a fresh clone (issue 15, "Done when").

Marked ``readme`` and left out of the default ``pytest -q`` (it installs the project into a
new virtual environment, minutes on two cores); ``.ci/run`` runs it with ``pytest -q -m readme``.
The repository's committed HEAD is cloned into an empty temporary directory, set up with the
README's own first command, and then every ```bash``` and ```python``` block runs there, each
command failing the test on a non-zero exit or a traceback. What is not run, and why:

* the README's test command (``ruff ... && pytest -q``): it is this suite, which CI runs;
* ``bash benchmarks/device/gpu_session.sh`` without an NVIDIA GPU (it is the prepared GPU run);
* ``planner app`` is started, must answer HTTP on its port within ``APP_WAIT_S``, then stopped.

Optional arguments written in brackets (``[--device cuda]``) are dropped before running.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.readme

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"^```(bash|python)\n(.*?)^```", re.S | re.M)
APP_WAIT_S = 120
STEP_TIMEOUT_S = 900


def readme_blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of every ```bash / ```python fenced block, in order."""
    return [(m.group(1), m.group(2)) for m in BLOCK.finditer(text)]


def bash_commands(body: str) -> list[str]:
    """The commands of a bash block: comment lines dropped, trailing '# ...' comments and
    bracketed optional arguments removed."""
    out = []
    for line in body.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        line = re.sub(r"\s+#\s.*$", "", line)
        line = re.sub(r"\s+\[-[^\]]*\]", "", line)
        out.append(line)
    return out


def _is_test_command(cmd: str) -> bool:
    return bool(re.search(r"(^|&&\s*)pytest\b", cmd))


def _has_gpu() -> bool:
    return shutil.which("nvidia-smi") is not None


def _run(cmd: str, cwd: Path) -> str:
    proc = subprocess.run(
        ["bash", "-c", cmd],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=STEP_TIMEOUT_S,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"`{cmd}` exited {proc.returncode}:\n{out[-4000:]}"
    assert "Traceback (most recent call last)" not in out, f"`{cmd}` printed a traceback:\n{out}"
    return out


def _serve(cmd: str, cwd: Path, port: int = 8501) -> None:
    """Start a server command, wait until it answers HTTP, stop it."""
    proc = subprocess.Popen(
        ["bash", "-c", f"{cmd} -- --server.headless=true"],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + APP_WAIT_S
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                out = proc.communicate()[0] or ""
                pytest.fail(f"`{cmd}` exited {proc.returncode} before serving:\n{out[-4000:]}")
            try:
                with urllib.request.urlopen(f"http://localhost:{port}/", timeout=5) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(1.0)
        pytest.fail(f"`{cmd}` did not answer on port {port} within {APP_WAIT_S} s")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 15)
            out = proc.communicate(timeout=30)[0] or ""
            assert "Traceback (most recent call last)" not in out, out


def test_block_parsing_finds_the_setup_first():
    blocks = readme_blocks((ROOT / "README.md").read_text())
    assert blocks and blocks[0][0] == "bash"
    first = bash_commands(blocks[0][1])
    assert first[0].startswith("python3 -m venv .venv")
    assert any(_is_test_command(c) for c in first)
    text = 'planner x   # note\n# only a comment\npython b.py [--device cuda]\npip install ".[app]"'
    assert bash_commands(text) == ["planner x", "python b.py", 'pip install ".[app]"']


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git to clone the repository")
def test_every_readme_block_runs_from_a_fresh_clone(tmp_path: Path) -> None:
    clone = tmp_path / "scaling-planner"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    blocks = readme_blocks((clone / "README.md").read_text())
    ran = 0
    for i, (lang, body) in enumerate(blocks):
        if lang == "python":
            script = tmp_path / f"readme_block_{i}.py"
            script.write_text(body)
            _run(f". .venv/bin/activate && python {script}", clone)
            ran += 1
            continue
        for cmd in bash_commands(body):
            if _is_test_command(cmd):
                continue  # the suite itself: CI runs it
            if "gpu_session.sh" in cmd and not _has_gpu():
                continue
            activated = (
                cmd if cmd.startswith("python3 -m venv") else f". .venv/bin/activate && {cmd}"
            )
            if re.search(r"\bplanner app\b", cmd):
                _serve(activated, clone)
            else:
                _run(activated, clone)
            ran += 1
    assert ran >= 5
