"""The ``planner`` console script: one module per command, registered in :data:`COMMANDS`.

Each command module exposes ``add_parser(sub)``, which registers its argparse subparser, and
``run(args) -> int``, which returns the exit status. What several commands share lives in
``common.py`` (output, the profile flag) and ``inputs.py`` (the model, cluster, layout and
training flags, generated from the specs' fields by ``fields.py``); no command module imports
another, except ``closed_loop`` which runs ``calibrate``'s suite.

Every bad input (a planner.PlannerError, or a pydantic error converted to one) prints one line
``error: <field>: <message> (valid: ...)`` on stderr and exits with status 2. Rendering lives in
planner/render/; ``--json`` prints machine-readable output with the units in the key names
(seconds, GiB, tokens per second, percent).

>>> main(["list", "accelerators", "--json"]) == 0  # doctest: +ELLIPSIS
[...]
True
"""

from __future__ import annotations

import argparse
import sys
from types import ModuleType
from typing import NoReturn

from pydantic import ValidationError

import planner
from planner.cli import (
    advise,
    app,
    calibrate,
    closed_loop,
    compare_trace,
    goodput,
    import_hf,
    list_specs,
    search,
    simulate,
    trace,
    validate,
)
from planner.errors import PlannerError, pydantic_error_to_planner

EXIT_USAGE = 2

# command name -> its module (``add_parser(sub)``, ``run(args) -> int``), in --help order
COMMANDS: dict[str, ModuleType] = {
    "simulate": simulate,
    "validate": validate,
    "search": search,
    "calibrate": calibrate,
    "closed-loop": closed_loop,
    "import-hf": import_hf,
    "trace": trace,
    "goodput": goodput,
    "advise": advise,
    "compare-trace": compare_trace,
    "app": app,
    "list": list_specs,
}


class OneLineParser(argparse.ArgumentParser):
    """An argparse parser whose usage errors are one line naming the command and its --help
    (argparse's default prints the whole usage block first); exit status 2 as argparse's."""

    def error(self, message: str) -> NoReturn:
        text = " ".join(message.split())
        self.exit(EXIT_USAGE, f"error: {self.prog}: {text} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of the ``planner`` command (subcommands inherit its class)."""
    parser = OneLineParser(
        prog="planner",
        description="Analytic planner for LLM training: step time, tokens/s, "
        "MFU and memory per GPU of a parallel layout.",
    )
    parser.add_argument("--version", action="version", version=f"planner {planner.__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMANDS.values():
        module.add_parser(sub)
    return parser


def _one_line(exc: Exception) -> PlannerError:
    """Any input error of a command as the PlannerError whose one line is printed."""
    if isinstance(exc, PlannerError):
        return exc
    if isinstance(exc, ValidationError):
        return pydantic_error_to_planner(exc, "input")
    if isinstance(exc, OSError):
        return PlannerError(getattr(exc, "filename", None) or "file", exc.strerror or str(exc))
    # a safety net: inputs are bounded where they are read, so this is a planner bug; say
    # which input class failed in one line rather than a traceback
    return PlannerError(
        "input",
        f"cannot be processed ({type(exc).__name__}: {' '.join(str(exc).split())[:160]})",
        "values within the documented ranges (docs/limits.md); please report this input",
    )


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status (0 ok, 2 bad input or usage)."""
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.command].run(args)
    except (
        PlannerError,
        ValidationError,
        OSError,
        ArithmeticError,
        RecursionError,
        UnicodeError,
        MemoryError,
    ) as exc:
        err = _one_line(exc)
    message = " ".join(str(err).split())
    sys.stderr.write(f"error: {message}\n")
    return EXIT_USAGE


__all__ = ["COMMANDS", "EXIT_USAGE", "build_parser", "main"]
