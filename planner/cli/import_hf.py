"""``planner import-hf CONFIG.json``: a Hugging Face config.json as a planner model YAML.

Without ``-o`` the YAML goes to stdout and the summary (notes, parameter counts) to stderr, so
the output can be redirected into a file; with ``-o`` the YAML is written there and the summary
goes to stdout.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, TextIO

from planner.errors import PlannerError
from planner.hf_import import load_hf_config, spec_from_hf_config, to_yaml


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Register ``planner import-hf`` on the ``planner`` argparse subparsers."""
    p = sub.add_parser(
        "import-hf",
        help="convert a Hugging Face config.json into a model YAML",
        description="Map a Hugging Face config.json (llama, mistral, mixtral, qwen2/3, "
        "qwen2/3_moe, deepseek_v3, gpt_oss, jamba, nemotron_h) onto the planner's model "
        "schema; print the YAML (or write it with -o), the import notes and the parameter "
        "counts.",
    )
    p.add_argument("config", metavar="CONFIG.json", help="path to a config.json")
    p.add_argument("-o", "--out", default=None, metavar="FILE", help="write the YAML here")
    p.add_argument(
        "--name",
        default=None,
        help="model name (default: the -o file stem, else the config file's)",
    )
    p.add_argument(
        "--source",
        default=None,
        help="what to cite in sources (e.g. the HF repo id; default: the config path)",
    )
    p.add_argument("--force", action="store_true", help="overwrite an existing -o file")
    return p


def _summary(out: TextIO, notes: list[str], total: int, active: int) -> None:
    for note in notes:
        out.write(f"note: {note}\n")
    line = f"params: {total / 1e9:.2f} B total"
    if active != total:
        line += f", {active / 1e9:.2f} B active"
    out.write(line + "\n")


def run(args: argparse.Namespace) -> int:
    """Convert, then print or write the YAML and the summary."""
    config = load_hf_config(args.config)
    stem = Path(args.out if args.out else args.config).stem
    name = args.name or (stem.lower() if stem != "config" else None)
    try:
        spec, notes = spec_from_hf_config(config, name=name)
    except PlannerError as exc:  # name the file too: "config.json: model_type: ..."
        where = Path(args.config).name
        raise PlannerError(f"{where}: {exc.field}", exc.message, exc.valid) from None
    text = to_yaml(spec, notes, source=args.source or str(args.config))
    total, active = spec.param_counts()
    if args.out is None:
        sys.stdout.write(text)
        _summary(sys.stderr, notes, total, active)
        return 0
    out = Path(args.out)
    if out.exists() and not args.force:
        raise PlannerError("--out", f"{out} exists", "a new file, or --force to overwrite")
    out.write_text(text)
    sys.stdout.write(f"wrote {out}\n")
    _summary(sys.stdout, notes, total, active)
    return 0
