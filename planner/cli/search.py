"""``planner search``: find the best legal layout, explain the winner, export it.

Thin by design: parse flags, call :func:`planner.search.search`, render (planner/render/) or
print JSON, and write the winner's exports (planner/search/export.py). Every bad input is a
PlannerError, printed by ``planner.cli.main`` as one ``error:`` line with exit status 2. The
choices of ``--precision`` and ``--cross-entropy`` are those of the ``Training`` fields.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console

import planner
from planner.cli.common import CLUSTER_HELP, MODEL_HELP, add_profile_device_flag, console
from planner.cli.inputs import NO_STACK, add_power_limit_flag, power_limited, stack_flag
from planner.errors import PlannerError, _shown
from planner.profile import check_profile_device
from planner.report import TIME_CATEGORIES
from planner.safe_io import dumps_strict
from planner.search import MAX_SWEEP_VALUES, METHODS, SearchResult, parse_schedules, search
from planner.search.evaluate import Evaluated
from planner.search.export import exports, write_exports
from planner.search.jobs import parse_recompute_fractions
from planner.specs.base import MAX_GLOBAL_BATCH, MAX_SEQ_LEN
from planner.specs.fields import input_fields
from planner.specs.hardware import Cluster
from planner.specs.layout import Training
from planner.specs.model import ModelSpec

OBJECTIVES = ("tokens_per_s", "cost", "time_to_train")
SAMPLERS = ("tpe", "nsga2", "gp", "random")
SWEEP_SYNTAX = (
    "an integer, a comma list (512,1024,2048), a doubling range A:B (256:2048) or a stepped "
    "range A:B:STEP (2048:8192:2048)"
)


def _choices(field: str) -> tuple[str, ...]:
    """The values a ``Training`` field allows."""
    return next(f.choices for f in input_fields(Training) if f.name == field)


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Register ``planner search`` on the ``planner`` argparse subparsers."""
    p = sub.add_parser(
        "search",
        help="search legal layouts for the best one",
        description="Enumerate or sample legal parallel layouts of a model on a cluster, rank "
        "them by an objective, explain the winner and export it for Megatron-LM and torchtitan, "
        "or with --stack in the stack's own launch files.",
    )
    _add_problem_args(p)
    _add_method_args(p)
    _add_output_args(p)
    return p


def _add_problem_args(p: argparse.ArgumentParser) -> None:
    """The problem: model, cluster, GPU counts, batch, sequence, precision, objective."""
    p.add_argument("--model", required=True, help=MODEL_HELP)
    p.add_argument("--cluster", required=True, help=CLUSTER_HELP)
    add_power_limit_flag(p)
    p.add_argument("--gpus", type=int, required=True, help="GPU count (smallest with --gpus-max)")
    p.add_argument(
        "--gpus-max",
        type=int,
        default=None,
        help="also search larger GPU counts up to this one: powers of two and doubling "
        "multiples of the scale-up domain (for --objective cost or time_to_train)",
    )
    p.add_argument(
        "--global-batch",
        required=True,
        help="sequences per step: one, a comma list (512,1024,2048), a doubling range A:B "
        "(256:2048; both ends included) or a stepped range A:B:STEP; several are searched in "
        "one call, every combination with every --seq-len, ranked together",
    )
    p.add_argument(
        "--seq-len",
        default="4096",
        help="tokens per sequence (default 4096): one or several, written as --global-batch",
    )
    p.add_argument(
        "--precision",
        choices=_choices("precision"),
        default=None,
        help="training precision (default: the --stack's, else bf16)",
    )
    p.add_argument(
        "--cross-entropy",
        choices=_choices("cross_entropy"),
        default=None,
        help="loss kernel of every candidate (see planner simulate --help; default: the "
        "--stack's, else fp32_copy)",
    )
    p.add_argument(
        "--optimizer-offload",
        action="store_true",
        help="every candidate keeps its optimizer states in host memory and runs Adam on the "
        "CPU (ZeRO-Offload; a DeepSpeed --stack, ZeRO 1-3; see planner simulate --help)",
    )
    p.add_argument(
        "--checkpoint-offload",
        action="store_true",
        help="every candidate runs full recompute with its checkpoints in host memory (a "
        "DeepSpeed --stack; see planner simulate --help)",
    )
    p.add_argument(
        "--recompute-fractions",
        default=None,
        metavar="F,F,...",
        help="also try full recompute of these shares of each model chunk's layers (e.g. "
        "0.25,0.5,0.75; Megatron --recompute-method block), under a stack that runs it "
        "(default: none, every layer or no recompute)",
    )
    p.add_argument(
        "--stack",
        default=None,
        help="software stack (planner list stacks): search only what it runs, each candidate "
        "with its kernels, overlaps and execution (default: none, every layout the planner "
        "models with the planner's defaults, which are megatron-core's)",
    )
    p.add_argument(
        "--objective",
        choices=OBJECTIVES,
        default="tokens_per_s",
        help="maximise tokens/s, minimise $ per million tokens, or minimise hours to train "
        "--tokens",
    )
    p.add_argument("--tokens", type=float, default=None, help="token budget for time_to_train")


def _add_method_args(p: argparse.ArgumentParser) -> None:
    """How to search: the method, the Optuna sampler, trials, storage, workers and seed, and
    the pipeline schedules paired with each vpp."""
    p.add_argument(
        "--method",
        choices=METHODS,
        default="auto",
        help="exhaustive enumeration, Optuna, or auto (exhaustive when the space is small)",
    )
    p.add_argument("--sampler", choices=SAMPLERS, default="tpe", help="Optuna sampler")
    p.add_argument("--trials", type=int, default=300, help="Optuna trials")
    p.add_argument("--storage", default=None, help="Optuna storage URL (shared by workers)")
    p.add_argument("--study", default=None, help="Optuna study name (resumes when it exists)")
    p.add_argument(
        "--workers",
        type=int,
        default=1,
        help="parallel Optuna worker processes on one study; a worker that dies is reported "
        "and the others finish the study",
    )
    p.add_argument(
        "--seed",
        type=int,
        default=0,
        help="Optuna sampler seed (worker r uses seed + r). The same seed reproduces a search "
        "with --workers 1 only: with --workers > 1 the trials interleave across processes as "
        "they are scheduled, so runs may differ",
    )
    p.add_argument(
        "--schedules",
        default="megatron",
        help="pipeline schedules the search pairs with each vpp when pp > 1: megatron (the "
        "default: those Megatron-LM runs, 1f1b and interleaved), all (also zb-h1, zb-h2, "
        "interleaved-zb, zbv, dualpipev), or comma-separated names",
    )


def _add_output_args(p: argparse.ArgumentParser) -> None:
    """The ranking table, Pareto fronts, memory headroom, calibration profile and outputs."""
    p.add_argument("--top", type=int, default=10, help="rows in the ranking table")
    p.add_argument("--pareto", action="store_true", help="also print the Pareto fronts")
    p.add_argument(
        "--memory-headroom",
        type=float,
        default=0.05,
        help="fraction of usable HBM kept free (default 0.05)",
    )
    p.add_argument("--profile", default=None, help="calibration profile id or JSON path")
    add_profile_device_flag(p)
    p.add_argument(
        "--export-dir",
        default=None,
        help="write the winner's layout.yaml and launch files here: megatron_args.txt and "
        "torchtitan.toml, or with --stack the stack's (e.g. ds_config.json, nemo_overrides.txt)",
    )
    p.add_argument("--json", action="store_true", help="print the result as JSON")


def gpu_counts(first: int, last: int | None, domain: int) -> tuple[int, ...]:
    """GPU counts to search: ``first`` alone, or ``first``..``last``: both ends, the powers of
    two and the doubling multiples of the scale-up domain between them."""
    if first < 1:
        raise PlannerError("--gpus", f"gpus={first} must be positive", "an integer >= 1")
    if last is None:
        return (first,)
    if last < first:
        raise PlannerError(
            "--gpus-max", f"{last} is below --gpus {first}", f"an integer >= {first}"
        )
    counts = {first, last}
    for base in (1, max(domain, 1)):
        c = base
        while c <= last:
            if c >= first:
                counts.add(c)
            c *= 2
    return tuple(sorted(counts))


def sweep_values(flag: str, text: str, maximum: int) -> tuple[int, ...]:
    """The values of ``--global-batch`` or ``--seq-len``: comma-separated items, each an integer,
    a doubling range A:B (A, 2A, 4A, ... below B, then B) or a stepped range A:B:STEP (A,
    A+STEP, ... below B, then B); distinct, increasing. Anything else is a PlannerError on
    ``flag`` that says what is valid (values 1 to ``maximum``, at most MAX_SWEEP_VALUES).

    >>> sweep_values("--global-batch", "256:2048", 2**24)
    (256, 512, 1024, 2048)
    >>> sweep_values("--seq-len", "8192, 2048:4096", 2**24)
    (2048, 4096, 8192)
    """
    valid = f"{SWEEP_SYNTAX}; each 1 to {maximum:,}, at most {MAX_SWEEP_VALUES} values"
    values: set[int] = set()
    for item in str(text).split(","):
        values.update(_sweep_item(flag, item.strip(), maximum, valid))
        if len(values) > MAX_SWEEP_VALUES:
            raise PlannerError(
                flag, f"{_shown(text)} has more than {MAX_SWEEP_VALUES} values", valid
            )
    return tuple(sorted(values))


def _sweep_item(flag: str, item: str, maximum: int, valid: str) -> list[int]:
    """The values of one comma-separated item of a sweep flag (see :func:`sweep_values`)."""
    parts = item.split(":")
    try:
        numbers = [int(part) for part in parts]
    except ValueError:  # not a number, or one of more than 4,300 digits
        numbers = []
    if len(parts) > 3 or len(numbers) != len(parts):
        shown = _shown(item) if item else "an empty item"
        raise PlannerError(flag, f"{shown} is not an integer or a range", valid)
    for n in numbers:
        if not 1 <= n <= maximum:
            raise PlannerError(flag, f"{_shown(n)} is out of range", valid)
    if len(numbers) == 1:
        return numbers
    first, last = numbers[0], numbers[1]
    if last < first:
        raise PlannerError(flag, f"{_shown(item)} ends below its start", valid)
    if len(numbers) == 2:
        doubled = [first]
        while doubled[-1] * 2 < last:
            doubled.append(doubled[-1] * 2)
        return [*doubled, last]
    if (last - first) // numbers[2] >= MAX_SWEEP_VALUES:
        raise PlannerError(flag, f"{_shown(item)} has more than {MAX_SWEEP_VALUES} values", valid)
    return [*range(first, last, numbers[2]), last]


def sweep(args: argparse.Namespace) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The global batches and sequence lengths the flags ask for (see :func:`sweep_values`)."""
    return (
        sweep_values("--global-batch", args.global_batch, MAX_GLOBAL_BATCH),
        sweep_values("--seq-len", args.seq_len, MAX_SEQ_LEN),
    )


def _check_args(args: argparse.Namespace) -> None:
    for name, minimum in (("trials", 1), ("workers", 1), ("top", 1)):
        value = getattr(args, name)
        if value < minimum:
            flag = "--" + name.replace("_", "-")
            raise PlannerError(flag, f"{value} is below {minimum}", f"an integer >= {minimum}")
    if not 0.0 <= args.memory_headroom < 1.0:
        raise PlannerError("--memory-headroom", f"{args.memory_headroom}", "0 <= x < 1")
    if args.tokens is not None and args.tokens <= 0:
        raise PlannerError("--tokens", f"{args.tokens} must be positive", "a token count > 0")


@contextmanager
def _progress(enabled: bool) -> Iterator[Callable[[int, int | None], None] | None]:
    """A transient rich progress bar on stderr (only on a terminal; stdout stays clean)."""
    if not enabled:
        yield None
        return
    from rich.progress import Progress

    bar = Progress(console=Console(stderr=True), transient=True)
    task = bar.add_task("searching layouts", total=None)

    def update(done: int, total: int | None) -> None:
        bar.update(task, completed=done, total=total or None)

    with bar:
        yield update


def entry(e: Evaluated) -> dict[str, Any]:
    """JSON form of one evaluated candidate."""
    return {
        "gpus": e.gpus,
        "layout": e.layout.model_dump(mode="json"),
        "training": e.training.model_dump(mode="json"),
        "report": e.report.to_dict(),
        "score": e.score,
    }


def breakdown_differences(best: Evaluated, other: Evaluated, k: int = 3) -> list[dict[str, Any]]:
    """The ``k`` time categories (seconds per step) where ``best`` and ``other`` differ most;
    ``difference_s`` = best - other (negative: the winner spends less time there)."""
    a, b = best.report.time_breakdown_s, other.report.time_breakdown_s
    cats = [c for c in TIME_CATEGORIES if c in a or c in b]
    cats += [c for c in {*a, *b} if c not in TIME_CATEGORIES]
    rows = [
        {
            "category": c,
            "best_s": a.get(c, 0.0),
            "runner_up_s": b.get(c, 0.0),
            "difference_s": a.get(c, 0.0) - b.get(c, 0.0),
        }
        for c in cats
    ]
    rows.sort(key=lambda r: -abs(r["difference_s"]))
    return [r for r in rows[:k] if r["difference_s"] != 0.0]


def setting_differences(best: Evaluated, other: Evaluated) -> list[str]:
    """Layout and training fields that differ, as 'field best vs other'."""
    out = [f"gpus {best.gpus} vs {other.gpus}"] if best.gpus != other.gpus else []
    for x, y in ((best.layout, other.layout), (best.training, other.training)):
        dx, dy = x.model_dump(), y.model_dump()
        out += [f"{k} {dx[k]} vs {dy[k]}" for k in dx if dx[k] != dy[k]]
    return out


def _no_feasible(result: SearchResult, model: ModelSpec, args: argparse.Namespace) -> PlannerError:
    batches, seqs = sweep(args)
    reasons = sorted(result.infeasible.items(), key=lambda kv: -kv[1])
    text = ", ".join(f"{k} ({v:,})" for k, v in reasons) or "no candidates"
    oom = any("memory" in k for k, _ in reasons)
    stack = stack_flag(args, default=NO_STACK)
    can_offload = stack is None or stack.capabilities.optimizer_offload
    offload = ", --optimizer-offload" if can_offload and not args.optimizer_offload else ""
    hint = (
        f"more GPUs, a smaller --global-batch{offload} or --memory-headroom 0"
        if oom
        else "a GPU count that tp*cp*pp*dp can factor (e.g. a multiple of 8) and a global "
        "batch divisible by micro_batch*dp"
    )
    counts = "/".join(str(g) for g in sorted({args.gpus, args.gpus_max or args.gpus}))
    return PlannerError(
        "search",
        f"no feasible layout of {model.name} on {counts} GPUs with global batch "
        f"{'/'.join(map(str, batches))} and seq_len {'/'.join(map(str, seqs))}: {text}",
        hint,
    )


def run_search(args: argparse.Namespace) -> tuple[ModelSpec, Cluster, SearchResult]:
    """Load the specs and run the search the flags describe."""
    _check_args(args)
    batches, seqs = sweep(args)
    try:
        schedules = parse_schedules(args.schedules)
    except PlannerError as exc:
        raise PlannerError("--schedules", exc.message, exc.valid) from None
    model = planner.load_model(args.model)
    cluster = power_limited(args, planner.load_cluster(args.cluster))
    counts = gpu_counts(args.gpus, args.gpus_max, cluster.spec.scale_up_domain_gpus)
    profile = planner.load_profile(args.profile) if args.profile else None
    if profile is not None:
        check_profile_device(profile, cluster, args.profile_for_any_device)
    with _progress(sys.stderr.isatty()) as progress:
        try:
            result = search(
                model,
                cluster,
                counts if len(counts) > 1 else counts[0],
                batches if len(batches) > 1 else batches[0],
                seq_len=seqs if len(seqs) > 1 else seqs[0],
                precision=args.precision,
                cross_entropy=args.cross_entropy,
                optimizer_offload=args.optimizer_offload,
                checkpoint_offload=args.checkpoint_offload,
                recompute_fractions=parse_recompute_fractions(args.recompute_fractions),
                stack=stack_flag(args, default=NO_STACK),
                objective=args.objective,
                tokens=args.tokens,
                method=args.method,
                sampler=args.sampler,
                trials=args.trials,
                storage=args.storage,
                study=args.study,
                workers=args.workers,
                memory_headroom=args.memory_headroom,
                profile=profile,
                pareto=args.pareto,
                seed=args.seed,
                progress=progress,
                schedules=schedules,
            )
        except ModuleNotFoundError as exc:
            if (exc.name or "").startswith("planner.search.optuna"):
                raise PlannerError(
                    "--method", "the Optuna search is not available in this build", "exhaustive"
                ) from None
            raise
    if len(counts) > 1:
        result.notes.append(f"GPU counts searched: {', '.join(map(str, counts))}")
        if args.objective == "tokens_per_s":
            result.notes.append(
                "tokens/s grows with the GPU count: --objective cost or time_to_train (or "
                "--pareto) trades GPUs against speed"
            )
    if len(batches) > 1 and args.objective == "tokens_per_s":
        result.notes.append(
            "a larger global batch often gives more tokens/s: --pareto adds the front of "
            "tokens/s against the batch in tokens (global batch x seq_len)"
        )
    if not result.top(1):
        raise _no_feasible(result, model, args)
    return model, cluster, result


def run(args: argparse.Namespace) -> int:
    """``planner search``: ranking, why the winner wins, Pareto fronts and exports."""
    from planner.render import render_search

    model, cluster, result = run_search(args)
    best = result.best
    top = result.top(args.top)
    runner = top[1] if len(top) > 1 else None
    stack = stack_flag(args, default=NO_STACK)  # the files are in the stack's dialects
    texts = exports(model, best.gpus, best.layout, best.training, stack, cluster)
    paths = write_exports(args.export_dir, texts) if args.export_dir else []
    why = breakdown_differences(best, runner) if runner else []
    if args.json:
        out: dict[str, Any] = {
            "method": result.method,
            "objective": args.objective,
            "best": entry(best),
            "top": [entry(e) for e in top],
            "evaluated": result.evaluated,
            "infeasible": result.infeasible,
            "rejected_by_rule": result.rejected_by_rule,
            "seconds": result.seconds,
            "space_size": result.space_size,
            "notes": result.notes,
            "why": why,
            "exports": texts,
        }
        if args.pareto:
            out["pareto"] = {k: [entry(e) for e in v] for k, v in result.pareto.items()}
        batches, seqs = sweep(args)
        if len(batches) * len(seqs) > 1:  # each entry's training holds its own
            out["sweep"] = {"global_batch": list(batches), "seq_len": list(seqs)}
        if paths:
            out["export_files"] = [str(p) for p in paths]
        sys.stdout.write(dumps_strict(out) + "\n")  # a non-finite figure is an error, not NaN
        return 0
    render_search(
        console(),
        result,
        model,
        cluster,
        args.objective,
        top,
        why,
        setting_differences(best, runner) if runner else [],
        texts,
        paths,
    )
    return 0


__all__ = [
    "add_parser",
    "breakdown_differences",
    "entry",
    "gpu_counts",
    "run",
    "run_search",
    "setting_differences",
    "sweep",
    "sweep_values",
]
