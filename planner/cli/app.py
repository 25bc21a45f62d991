"""``planner app``: start the web app of the installed package (``streamlit run``).

The app (``app.py`` and ``app_pages/``) ships inside the wheel (``planner/_data/app``); in a
checkout it is the repository's own. Streamlit reads ``.streamlit/config.toml`` only from the
working directory, so the shipped settings are passed as command-line options.
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tomllib
from typing import Any

from planner.errors import PlannerError
from planner.resources import APP_DIR


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Register ``planner app`` on the ``planner`` argparse subparsers."""
    p = sub.add_parser(
        "app",
        help="start the web app (needs the app extra: pip install 'scaling-planner[app]')",
        description="Start the Streamlit web app shipped with the package; arguments after "
        "-- go to streamlit run (e.g. -- --server.port 8502).",
    )
    p.add_argument("--port", type=int, default=None, help="server port (default 8501)")
    p.add_argument(
        "--print-command",
        action="store_true",
        help="print the streamlit command instead of running it",
    )
    p.add_argument("streamlit_args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    return p


def config_options() -> list[str]:
    """The shipped ``.streamlit/config.toml`` as ``--section.key=value`` options."""
    path = APP_DIR / ".streamlit" / "config.toml"
    if not path.is_file():
        return []
    with path.open("rb") as fh:
        config = tomllib.load(fh)
    return [
        f"--{section}.{key}={str(value).lower() if isinstance(value, bool) else value}"
        for section, values in config.items()
        for key, value in values.items()
    ]


def app_command(port: int | None = None, extra: list[str] | None = None) -> list[str]:
    """The ``streamlit run`` argv that serves the shipped app."""
    if importlib.util.find_spec("streamlit") is None:
        raise PlannerError(
            "app",
            "the web app needs streamlit and plotly",
            "pip install 'scaling-planner[app]'",
        )
    script = APP_DIR / "app.py"
    if not script.is_file():
        raise PlannerError("app", f"app not found at {script}", "a complete install")
    argv = [sys.executable, "-m", "streamlit", "run", str(script), *config_options()]
    if port is not None:
        if not 1 <= port <= 65_535:
            raise PlannerError("--port", f"{port} is out of range", "1 to 65535")
        argv.append(f"--server.port={port}")
    return argv + [a for a in (extra or []) if a != "--"]


def run(args: argparse.Namespace) -> int:
    """Run streamlit on the shipped app until it is stopped."""
    argv = app_command(args.port, args.streamlit_args)
    if args.print_command:
        sys.stdout.write(" ".join(argv) + "\n")
        return 0
    return subprocess.call(argv, cwd=str(APP_DIR))
