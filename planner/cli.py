"""The ``planner`` console script: ``simulate``, ``search``, ``validate``, ``list``, and (torch
extra) ``calibrate`` and ``closed-loop``.

Every bad input (a planner.PlannerError, or a pydantic error converted to one) prints one line
``error: <field>: <message> (valid: ...)`` on stderr and exits with status 2. Rendering lives in
planner/render.py; ``--json`` prints machine-readable output with the units in the key names
(seconds, GiB, tokens per second, percent).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ValidationError
from rich.console import Console

import planner
from planner import (
    app_cmd,
    calibrate_cmds,
    goodput_cmds,
    hf_cmd,
    search_cmd,
    timeline_cmds,
    trace_cmd,
)
from planner.errors import PlannerError, pydantic_error_to_planner
from planner.flags import add_profile_device_flag
from planner.profile import CalibrationProfile, check_profile_device
from planner.render import render_list, render_simulation, render_validation
from planner.safe_io import dumps_strict
from planner.specs.hardware import Cluster
from planner.specs.layout import CROSS_ENTROPY_KINDS
from planner.specs.loading import ACCELERATORS_DIR, CLUSTERS_DIR, MODELS_DIR, shipped_ids

EXIT_USAGE = 2


def _add_simulate(sub: Any) -> None:
    p = sub.add_parser(
        "simulate",
        help="predict step time, throughput, MFU and memory",
        description="Predict one training step of a model on a cluster.",
    )
    add_layout_flags(p)
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument(
        "--trace",
        metavar="FILE",
        default=None,
        help="also write the simulated step as a Chrome trace (Perfetto) JSON",
    )


def add_layout_flags(p: argparse.ArgumentParser) -> None:
    """The model, cluster, layout, training and profile flags shared by ``simulate``,
    ``goodput`` and ``advise`` (read back by ``_simulate_inputs``)."""
    p.add_argument("--model", required=True, help="shipped model id or path to a model YAML")
    p.add_argument("--cluster", required=True, help="shipped cluster id or path to a YAML")
    p.add_argument(
        "--gpus",
        type=int,
        default=None,
        help="total GPUs of the job (required unless --layout FILE gives it)",
    )
    p.add_argument("--tp", type=int, default=1, help="tensor parallel size (default 1)")
    p.add_argument("--pp", type=int, default=1, help="pipeline parallel size (default 1)")
    p.add_argument(
        "--dp", type=int, default=None, help="data parallel size (default: gpus / (tp*pp*cp))"
    )
    p.add_argument("--cp", type=int, default=1, help="context parallel size (default 1)")
    p.add_argument("--ep", type=int, default=1, help="expert parallel size (default 1)")
    p.add_argument("--vpp", type=int, default=None, help="virtual stages per pipeline rank")
    p.add_argument("--micro-batch", type=int, default=1, help="sequences per micro-batch")
    p.add_argument(
        "--global-batch",
        type=int,
        default=None,
        help="sequences per step (required unless --layout FILE has a training section)",
    )
    p.add_argument("--seq-len", type=int, default=4096, help="tokens per sequence")
    p.add_argument("--recompute", choices=("none", "selective", "full"), default="none")
    p.add_argument(
        "--recompute-modules",
        default=None,
        help="with --recompute selective: comma-separated submodules to recompute (core_attn, "
        "mla_up_proj, moe_act, mlp, layernorm, moe, shared_experts); default core_attn",
    )
    p.add_argument("--zero", type=int, choices=(0, 1, 2, 3), default=0, help="ZeRO stage")
    p.add_argument("--sequence-parallel", action="store_true", help="Megatron sequence parallel")
    p.add_argument("--precision", choices=("bf16", "fp16", "fp8", "fp32"), default="bf16")
    p.add_argument(
        "--attention-kernel",
        choices=("fused", "flash2", "unfused"),
        default="fused",
        help="fused: best vendor kernel (cuDNN / FlashAttention-3); flash2; unfused scores",
    )
    p.add_argument("--dropout", action="store_true", help="GPT-3 style hidden/attention dropout")
    p.add_argument(
        "--grad-reduce-dtype",
        choices=("fp32", "bf16"),
        default="fp32",
        help="dtype of the gradient buffer and its DP reduction",
    )
    p.add_argument(
        "--offload-layers",
        type=int,
        default=0,
        help="layers whose activations go to host memory in forward (Megatron-Core "
        "--cpu-offloading-num-layers; pp 1 and no recompute)",
    )
    p.add_argument(
        "--cross-entropy",
        choices=CROSS_ENTROPY_KINDS,
        default="fp32_copy",
        help="fp32_copy: the loss keeps an fp32 softmax of the logits (PyTorch, Megatron native);"
        " in_place: online-softmax loss writing the gradient into the logits (Transformer "
        "Engine, Megatron --cross-entropy-fusion-impl te)",
    )
    p.add_argument(
        "--schedule",
        choices=("1f1b", "interleaved"),
        default=None,
        help="pipeline schedule (default: interleaved iff vpp > 1)",
    )
    p.add_argument(
        "--no-overlap-dp",
        action="store_true",
        help="do not overlap the DP gradient reduction with backward",
    )
    p.add_argument("--overlap-tp", action="store_true", help="overlap TP communication")
    p.add_argument(
        "--overlap-ep",
        action="store_true",
        help="overlap the MoE all-to-all with another micro-batch's compute (needs vpp >= 2 "
        "when pp > 1)",
    )
    p.add_argument(
        "--pp-scatter-gather",
        action="store_true",
        help="send 1/tp of each pipeline message per TP rank and all-gather it on arrival "
        "(Megatron-LM 2021 --scatter-gather-tensors-in-pipeline)",
    )
    p.add_argument(
        "--no-overlap-zero3",
        action="store_true",
        help="do not overlap the ZeRO-3 parameter all-gather",
    )
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


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of the ``planner`` command."""
    parser = argparse.ArgumentParser(
        prog="planner",
        description="Analytic planner for LLM training: step time, tokens/s, "
        "MFU and memory per GPU of a parallel layout.",
    )
    parser.add_argument("--version", action="version", version=f"planner {planner.__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_simulate(sub)
    v = sub.add_parser(
        "validate",
        help="compare predictions with published measurements",
        description="Simulate every case of a validation YAML (schema 1).",
    )
    v.add_argument("file", metavar="FILE", help="validation cases YAML")
    v.add_argument(
        "--profile",
        default=None,
        help="calibration profile id or JSON path (default: each cluster's own profile)",
    )
    add_profile_device_flag(v)
    v.add_argument("--json", action="store_true", help="print the result as JSON")
    search_cmd.add_parser(sub)
    calibrate_cmds.add_parsers(sub)
    hf_cmd.add_parsers(sub)
    trace_cmd.add_parsers(sub)
    goodput_cmds.add_parsers(sub)
    timeline_cmds.add_parsers(sub)
    app_cmd.add_parsers(sub)
    lp = sub.add_parser("list", help="list shipped models, clusters or accelerators")
    lp.add_argument("kind", choices=("models", "clusters", "accelerators"))
    lp.add_argument("--json", action="store_true", help="print a JSON list of {id, description}")
    return parser


def _build(cls: type[BaseModel], prefix: str, **kwargs: Any) -> Any:
    """Construct a pydantic spec, turning a validation error into a PlannerError."""
    try:
        return cls(**kwargs)
    except ValidationError as exc:
        raise pydantic_error_to_planner(exc, prefix) from None


def _derive_dp(args: argparse.Namespace) -> int:
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


def _load_profile(id_or_path: str | None) -> CalibrationProfile | None:
    return planner.load_profile(id_or_path) if id_or_path else None


def run_profile(args: argparse.Namespace, cluster: Cluster) -> CalibrationProfile:
    """The profile of a simulate-like command: --profile (else the cluster's default), with
    --host-op-us applied."""
    profile = _load_profile(args.profile) or planner.default_profile(cluster)
    check_profile_device(profile, cluster, getattr(args, "profile_for_any_device", False))
    host_us = getattr(args, "host_op_us", None)
    if host_us is None:
        return profile
    if not 0 <= host_us <= 1000:
        raise PlannerError("--host-op-us", f"{host_us} is out of range", "0 to 1000 (us)")
    return profile.with_host_op_us(host_us)


def _json_out(data: Any) -> None:
    sys.stdout.write(dumps_strict(data) + "\n")


def _console() -> Console:
    """A console on stdout; 160 columns when not a terminal (pipes, tests)."""
    return Console(width=None if sys.stdout.isatty() else 160)


def _layout_from_flags(args: argparse.Namespace) -> planner.Layout:
    """The Layout described by the layout flags of ``planner simulate``."""
    return _build(
        planner.Layout,
        "layout",
        tp=args.tp,
        pp=args.pp,
        dp=_derive_dp(args),
        cp=args.cp,
        ep=args.ep,
        vpp=args.vpp,
        sequence_parallel=args.sequence_parallel,
        zero=args.zero,
        schedule=args.schedule,
        overlap_dp_grad_reduce=not args.no_overlap_dp,
        overlap_tp_comm=args.overlap_tp,
        overlap_ep_comm=args.overlap_ep,
        pp_scatter_gather=args.pp_scatter_gather,
        overlap_zero3_param_gather=not args.no_overlap_zero3,
    )


def _modules(text: str | None) -> tuple[str, ...] | None:
    """--recompute-modules a,b -> ("a", "b"); None when the flag is absent."""
    if text is None:
        return None
    return tuple(m.strip() for m in text.split(",") if m.strip())


def _training_from_flags(args: argparse.Namespace) -> planner.Training:
    """The Training described by the training flags; --global-batch is required."""
    if args.global_batch is None:
        raise PlannerError(
            "--global-batch",
            "required (or a --layout FILE with a training section)",
            "an integer >= 1",
        )
    return _build(
        planner.Training,
        "training",
        seq_len=args.seq_len,
        global_batch=args.global_batch,
        micro_batch=args.micro_batch,
        recompute=args.recompute,
        recompute_modules=_modules(args.recompute_modules),
        precision=args.precision,
        attention_kernel=args.attention_kernel,
        dropout=args.dropout,
        grad_reduce_dtype=args.grad_reduce_dtype,
        cross_entropy=args.cross_entropy,
        offload_layers=args.offload_layers,
    )


def _simulate_inputs(args: argparse.Namespace) -> tuple[int, planner.Layout, planner.Training]:
    """(gpus, layout, training) from --layout FILE or from the flags."""
    if args.layout is None:
        if args.gpus is None:
            raise PlannerError("--gpus", "required (or --layout FILE)", "an integer >= 1")
        return args.gpus, _layout_from_flags(args), _training_from_flags(args)
    from planner.search.export import load_layout_file

    layout, training, file_gpus = load_layout_file(args.layout)
    gpus = args.gpus if args.gpus is not None else (file_gpus or layout.world_size)
    if gpus <= 0:
        raise PlannerError("gpus", f"gpus={gpus} must be positive", "an integer >= 1")
    return gpus, layout, training if training is not None else _training_from_flags(args)


def cmd_simulate(args: argparse.Namespace) -> int:
    """``planner simulate``: one step prediction as rich tables or JSON."""
    model = planner.load_model(args.model)
    cluster = planner.load_cluster(args.cluster)
    gpus, layout, training = _simulate_inputs(args)
    planner.check_layout(model, cluster, layout, training, gpus=gpus)
    report = planner.simulate(
        model, cluster, layout, training, run_profile(args, cluster), args.profile_for_any_device
    )
    if args.trace:
        timeline_cmds.write_trace(report, model, layout, training, args.trace)
    if args.json:
        out = report.to_dict()
        out.update(
            model=model.model_dump(mode="json"),
            cluster=cluster.model_dump(mode="json"),
            layout=layout.model_dump(mode="json"),
            training=training.model_dump(mode="json"),
        )
        _json_out(out)
    else:
        render_simulation(_console(), report, model, cluster, layout, training)
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    """``planner validate FILE``: per-case predictions against measurements, then the summary."""
    from planner.validate import validate_file

    fixed = _load_profile(args.profile)

    def profile_for(cluster: Cluster) -> CalibrationProfile:
        if fixed is None:
            return planner.default_profile(cluster)
        check_profile_device(fixed, cluster, args.profile_for_any_device)
        return fixed

    result = validate_file(args.file, profile_for)
    if args.json:
        _json_out(result)
    else:
        render_validation(_console(), result)
    return 0


def _describe(kind: str, spec_id: str) -> str:
    """Short description of a shipped spec; a spec that fails to load says why."""
    try:
        if kind == "models":
            m = planner.load_model(spec_id)
            total, active = m.param_counts()
            text = f"{total / 1e9:,.2f} B params"
            return text + (f" ({active / 1e9:,.2f} B active)" if active != total else "")
        if kind == "clusters":
            c = planner.load_cluster(spec_id)
            return f"{c.spec.gpus_per_node} x {c.accelerator.name} per node"
        a = planner.load_accelerator(spec_id)
        bf16 = a.peak_tflops.bf16 or a.peak_tflops.fp16
        return f"{a.name}: {a.hbm_capacity_gib:g} GiB HBM, {bf16:g} TFLOP/s bf16 dense"
    except PlannerError as exc:
        return f"(invalid spec: {exc})"


def cmd_list(args: argparse.Namespace) -> int:
    """``planner list KIND``: ids of shipped specs with a short description."""
    directory = {"models": MODELS_DIR, "clusters": CLUSTERS_DIR, "accelerators": ACCELERATORS_DIR}[
        args.kind
    ]
    rows = [(spec_id, _describe(args.kind, spec_id)) for spec_id in shipped_ids(directory)]
    if args.json:
        _json_out([{"id": i, "description": d} for i, d in rows])
    else:
        render_list(_console(), args.kind, rows)
    return 0


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "simulate": cmd_simulate,
    "validate": cmd_validate,
    "list": cmd_list,
    "search": search_cmd.cmd_search,
    **calibrate_cmds.COMMANDS,
    **hf_cmd.COMMANDS,
    **trace_cmd.COMMANDS,
    **goodput_cmds.COMMANDS,
    **timeline_cmds.COMMANDS,
    **app_cmd.COMMANDS,
}


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status (0 ok, 2 bad input or usage)."""
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except PlannerError as exc:
        err: Exception = exc
    except ValidationError as exc:
        err = pydantic_error_to_planner(exc, "input")
    except OSError as exc:
        err = PlannerError(getattr(exc, "filename", None) or "file", exc.strerror or str(exc))
    except (ArithmeticError, RecursionError, UnicodeError, MemoryError) as exc:
        # a safety net: inputs are bounded where they are read, so this is a planner bug; say
        # which input class failed in one line rather than a traceback
        err = PlannerError(
            "input",
            f"cannot be processed ({type(exc).__name__}: {' '.join(str(exc).split())[:160]})",
            "values within the documented ranges (docs/limits.md); please report this input",
        )
    message = " ".join(str(err).split())
    sys.stderr.write(f"error: {message}\n")
    return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
