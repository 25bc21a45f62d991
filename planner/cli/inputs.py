"""The model, cluster, layout, training and profile flags of ``simulate``, ``goodput`` and
``advise``, and the specs they describe.

The layout and training flags are generated from the fields of :data:`LAYOUT_SPEC` and
:data:`TRAINING_SPEC` (planner/cli/fields.py): a field added to ``Layout`` or ``Training`` is a
flag, with its choices, bounds, default and description, without an edit here. What is written
by hand is what is not a field (``--gpus``, ``--layout FILE``, ``--profile``, ``--host-op-us``),
``--dp`` (its default is derived from ``--gpus``), and the names some flags had before they were
generated (:data:`LEGACY_FLAGS`).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import planner
from planner.cli.common import (
    CLUSTER_HELP,
    MODEL_HELP,
    add_profile_device_flag,
    build_spec,
)
from planner.cli.fields import add_field_flags, field_values
from planner.errors import PlannerError
from planner.profile import CalibrationProfile, check_profile_device
from planner.report import StepReport
from planner.specs.hardware import Cluster
from planner.specs.layout import Layout, Training
from planner.specs.model import ModelSpec
from planner.specs.stack import StackSpec
from planner.stacks import (
    DEFAULT_STACK,
    STACK_LAYOUT_FIELDS,
    STACK_TRAINING_FIELDS,
    apply_stack,
    check_model_stack,
    check_stack,
)
from planner.unknowns import UNKNOWABLE

# The specs the flags describe; read when a parser is built, so a subclass can stand in
LAYOUT_SPEC: type[Layout] = Layout
TRAINING_SPEC: type[Training] = Training

# field -> the flag it had before flags were generated (a new field gets --field-name)
LEGACY_FLAGS = {
    "overlap_dp_grad_reduce": "--no-overlap-dp",
    "overlap_tp_comm": "--overlap-tp",
    "overlap_zero3_param_gather": "--no-overlap-zero3",
    "overlap_ep_comm": "--overlap-ep",
}
# help of the fields the specs do not describe yet (a spec description takes precedence)
# the command line's defaults where the spec has none (global_batch stays required)
TRAINING_DEFAULTS = {"seq_len": 4096}
# the value a knob flag of UNKNOWABLE takes when the run does not state it (planner simulate
# then tunes it, as --unknown does); the other layout commands refuse it
UNKNOWN = "unknown"


def _add_dp_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--dp", type=int, default=None, help="data parallel size (default: gpus / (tp*pp*cp))"
    )


LAYOUT_NAMES_IT = " (required unless the --layout FILE names it)"


def _named(
    flag: str,
    given: str | None,
    in_file: str | None,
    load: Callable[[str], Any],
    name_of: Callable[[Any], str],
) -> tuple[str, Any]:
    """(the id or path used, the loaded spec) for --model / --cluster: the flag, else the
    layout file's; both and different is an error naming both. Each spec is loaded once."""
    if given is None and in_file is None:
        raise PlannerError(
            flag, "required (or a --layout FILE that names it)", "a shipped id or a path"
        )
    if given is None:
        return str(in_file), load(str(in_file))
    spec = load(given)
    if in_file is not None and name_of(spec) != in_file:
        raise PlannerError(
            flag,
            f"{given} is not the layout file's {flag[2:]} {in_file}",
            f"{in_file}, or leave {flag} out to use the file's",
        )
    return given, spec


def load_model_cluster(args: argparse.Namespace) -> tuple[ModelSpec, Cluster]:
    """The model and cluster of a simulate-like command: the flags, or the names in the
    ``--layout FILE`` (written by ``planner search --export-dir``); a flag that contradicts
    the file is an error, so an exported layout never runs silently on another model."""
    from planner.search.export import layout_file_names

    names = layout_file_names(args.layout) if getattr(args, "layout", None) else {}
    args.model, model = _named(
        "--model", args.model, names.get("model"), planner.load_model, lambda m: m.name
    )
    args.cluster, cluster = _named(
        "--cluster", args.cluster, names.get("cluster"), planner.load_cluster, lambda c: c.id
    )
    return model, power_limited(args, cluster)


POWER_LIMIT_HELP = (
    "GPU power limit, W (nvidia-smi -pl): the tensor cores run at (limit / rated power)^(1/3) "
    "of their rated clock; from a quarter of the accelerator's rated board power up to it "
    "(default: the cluster's own)"
)


def add_power_limit_flag(p: argparse.ArgumentParser) -> None:
    """``--power-limit-w`` (read back by :func:`power_limited`)."""
    p.add_argument("--power-limit-w", type=float, default=None, help=POWER_LIMIT_HELP)


def power_limited(args: argparse.Namespace, cluster: Cluster) -> Cluster:
    """``cluster`` with the GPUs capped at ``--power-limit-w`` where it is given."""
    watts = getattr(args, "power_limit_w", None)
    if watts is None:
        return cluster
    try:
        return cluster.with_power_limit(watts)
    except PlannerError as exc:
        raise PlannerError("--power-limit-w", exc.message, exc.valid) from None


def add_layout_flags(p: argparse.ArgumentParser) -> None:
    """The model, cluster, layout, training and profile flags shared by ``simulate``,
    ``goodput`` and ``advise`` (read back by :func:`simulate_inputs`)."""
    p.add_argument("--model", default=None, help=MODEL_HELP + LAYOUT_NAMES_IT)
    p.add_argument("--cluster", default=None, help=CLUSTER_HELP + LAYOUT_NAMES_IT)
    add_power_limit_flag(p)
    p.add_argument(
        "--gpus",
        type=int,
        default=None,
        help="total GPUs of the job (required unless --layout FILE gives it)",
    )
    add_field_flags(
        p,
        LAYOUT_SPEC,
        flags=LEGACY_FLAGS,
        custom={"dp": _add_dp_flag},
        unset=STACK_LAYOUT_FIELDS,
    )
    add_field_flags(
        p,
        TRAINING_SPEC,
        flags=LEGACY_FLAGS,
        defaults=TRAINING_DEFAULTS,
        unset=STACK_TRAINING_FIELDS,
        required_note="(required, unless --layout FILE gives it)",
    )
    _accept_unknown(p)
    add_stack_flag(p)
    p.add_argument("--profile", default=None, help="calibration profile id or JSON path")
    add_profile_device_flag(p)
    p.add_argument(
        "--host-op-us",
        type=float,
        default=None,
        help="host time per framework op, us (overrides the profile's host.op_us; 0 for CUDA "
        "graphs or a compiled step, where the host never binds)",
    )
    p.add_argument(
        "--layout",
        metavar="FILE",
        default=None,
        help="layout YAML (as written by planner search): its layout and training replace the "
        "layout and training flags; its gpus are used unless --gpus is given",
    )


NO_STACK = "none"  # --stack none: the inputs as given, no capability check


def add_stack_flag(p: argparse.ArgumentParser) -> None:
    """``--stack ID|PATH`` (default: :data:`planner.stacks.DEFAULT_STACK`)."""
    p.add_argument(
        "--stack",
        default=DEFAULT_STACK,
        help=f"software stack: a shipped id ({', '.join(stack_ids())}) or a YAML path; its "
        f"kernels, overlaps and execution fill the flags left unset, and a layout it cannot run "
        f"is refused (default {DEFAULT_STACK}: Megatron-Core + Transformer Engine; "
        f"{NO_STACK}: no stack, every schedule the planner models, e.g. zb-h1)",
    )


def stack_ids() -> list[str]:
    """Ids of the shipped stacks."""
    from planner.resources import STACKS_DIR
    from planner.specs.loading import shipped_ids

    return shipped_ids(STACKS_DIR)


def stack_flag(args: argparse.Namespace, default: str = DEFAULT_STACK) -> StackSpec | None:
    """The --stack (not given: ``default``; ``none``: no stack, the inputs costed as given)."""
    stack_id = getattr(args, "stack", None) or default
    return None if stack_id == NO_STACK else planner.load_stack(stack_id)


def with_stack(
    args: argparse.Namespace, model: ModelSpec, layout: Layout, training: Training
) -> tuple[StackSpec | None, Layout, Training]:
    """The --stack and the layout and training it completes (checked against what it runs)."""
    stack = stack_flag(args)
    if stack is None:
        return None, layout, training
    layout, training = apply_stack(stack, model, layout, training)
    check_model_stack(stack, model)
    check_stack(stack, layout, training)
    return stack, layout, training


def derive_dp(args: argparse.Namespace) -> int:
    """Explicit --dp, else gpus / (tp*pp*cp), which must be a positive integer."""
    if args.gpus <= 0:
        raise PlannerError("gpus", f"gpus={args.gpus} must be positive", "an integer >= 1")
    if args.dp is not None:
        return args.dp
    denom = args.tp * args.pp * args.cp
    if denom <= 0:
        return 0  # Layout validation names the non-positive factor
    if args.gpus % denom:
        raise PlannerError(
            "layout.dp",
            f"gpus={args.gpus} is not divisible by tp*pp*cp = "
            f"{args.tp}*{args.pp}*{args.cp} = {denom}",
            "--gpus a multiple of tp*pp*cp, or an explicit --dp",
        )
    return args.gpus // denom


def layout_from_flags(args: argparse.Namespace) -> Layout:
    """The Layout the layout flags describe."""
    values = field_values(args, LAYOUT_SPEC) | {"dp": derive_dp(args)}
    return build_spec(LAYOUT_SPEC, "layout", **values)


def training_from_flags(args: argparse.Namespace) -> Training:
    """The Training the training flags describe; --global-batch is required."""
    if args.global_batch is None:
        raise PlannerError(
            "--global-batch",
            "required (or a --layout FILE with a training section)",
            "an integer >= 1",
        )
    return build_spec(TRAINING_SPEC, "training", **field_values(args, TRAINING_SPEC))


def _accept_unknown(p: argparse.ArgumentParser) -> None:
    """Let the flags of the knobs in UNKNOWABLE also take ``unknown``."""
    for action in p._actions:  # noqa: SLF001 (argparse keeps its actions there)
        if action.dest not in UNKNOWABLE:
            continue
        convert = action.type or str

        def parse(text: str, convert: Callable[[str], Any] = convert) -> Any:  # noqa: ANN401
            return UNKNOWN if text.strip().lower() == UNKNOWN else convert(text)

        # argparse names the type in its error ("invalid int value"): keep the original's name
        parse.__name__ = getattr(convert, "__name__", "value")
        action.type = parse
        if action.choices is not None:
            action.choices = (*action.choices, UNKNOWN)
        note = f"{UNKNOWN!r}: not stated (planner simulate tunes it, as --unknown)"
        action.help = f"{action.help}; {note}" if action.help else note


def take_unknown_flags(args: argparse.Namespace) -> tuple[str, ...]:
    """The knobs whose flag was given as ``unknown``, each flag reset to unset."""
    names = tuple(n for n in UNKNOWABLE if getattr(args, n, None) == UNKNOWN)
    for name in names:
        setattr(args, name, None)
    return names


def simulate_inputs(args: argparse.Namespace) -> tuple[int, Layout, Training]:
    """(gpus, layout, training) from --layout FILE or from the flags."""
    for name in UNKNOWABLE:
        if getattr(args, name, None) == UNKNOWN:
            flag = LEGACY_FLAGS.get(name, "--" + name.replace("_", "-"))
            raise PlannerError(
                flag,
                f"{UNKNOWN!r} is taken by planner simulate only",
                f"a value of {flag}, or planner simulate {flag} {UNKNOWN}",
            )
    if args.layout is None:
        if args.gpus is None:
            raise PlannerError("--gpus", "required (or --layout FILE)", "an integer >= 1")
        return args.gpus, layout_from_flags(args), training_from_flags(args)
    from planner.search.export import load_layout_file

    layout, training, file_gpus = load_layout_file(args.layout)
    gpus = args.gpus if args.gpus is not None else (file_gpus or layout.world_size)
    if gpus <= 0:
        raise PlannerError("gpus", f"gpus={gpus} must be positive", "an integer >= 1")
    return gpus, layout, training if training is not None else training_from_flags(args)


def load_profile_flag(id_or_path: str | None) -> CalibrationProfile | None:
    """The profile --profile names, or None."""
    return planner.load_profile(id_or_path) if id_or_path else None


def run_profile(args: argparse.Namespace, cluster: Cluster) -> CalibrationProfile:
    """The profile of a simulate-like command: --profile (else the cluster's default), with
    --host-op-us applied."""
    profile = load_profile_flag(args.profile) or planner.default_profile(cluster)
    check_profile_device(profile, cluster, getattr(args, "profile_for_any_device", False))
    host_us = getattr(args, "host_op_us", None)
    if host_us is None:
        return profile
    if not 0 <= host_us <= 1000:
        raise PlannerError("--host-op-us", f"{host_us} is out of range", "0 to 1000 (us)")
    return profile.with_host_op_us(host_us)


def simulate_baseline(
    args: argparse.Namespace,
) -> tuple[ModelSpec, Cluster, Layout, Training, CalibrationProfile, StepReport]:
    """Model, cluster, layout, training, profile and the StepReport the flags describe."""
    model, cluster = load_model_cluster(args)
    gpus, layout, training = simulate_inputs(args)
    stack, layout, training = with_stack(args, model, layout, training)
    planner.check_layout(model, cluster, layout, training, gpus=gpus)
    profile = run_profile(args, cluster)
    report = planner.simulate(
        model, cluster, layout, training, profile, args.profile_for_any_device, stack=stack
    )
    return model, cluster, layout, training, profile, report


def inputs_line(
    model: ModelSpec, cluster: Cluster, layout: Layout, training: Training, stack: str = ""
) -> str:
    """'<model> on <N> x <GPU> (<cluster>): <layout>, seq S, global batch B[, stack X]'."""
    from planner.render import compact_layout

    return (
        f"{model.name} on {layout.world_size} x {cluster.accelerator.name} ({cluster.id}): "
        f"{compact_layout(layout, training)}, seq {training.seq_len}, "
        f"global batch {training.global_batch}" + (f", stack {stack}" if stack else "")
    )
