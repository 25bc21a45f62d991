"""Search speed: the one-layout path and the search's evaluation path side by side, one core.

    python benchmarks/search_speed.py [--skip-old]

Prints two tables; never fails. For each problem, the legal candidates of its exhaustive space
are generated once, then costed (CPU seconds of this process, one core):

* ``old``: ``simulate_step`` per candidate (the full report, plan and notes), as every search
  did before issue 16;
* ``new``: :class:`planner.simulate.batch.BatchSimulator`, each stage shared between the
  candidates whose inputs it reads; ``new+mem``: the same, memory priced first and the time of
  a candidate that cannot fit never costed;
* ``vec+mem``: ``planner.simulate.vector.figures_many``, the per-candidate
  arithmetic in numpy over all the candidates at once, memory first (what exhaustive search
  runs since issue 16); ``warm``: the same again on that simulator, every shared stage
  already costed.

The second table times whole ``planner.search`` calls (exhaustive, default stack) in a fresh
process each (its CPU seconds include importing numpy, about 0.1-0.2 s, which the vector path
needs), with that process's peak resident memory. Targets (issue 16, on the issue's
machine, whose one-layout path ran about 10,000 evaluations/s for a 126-layer model): >= 50,000
evaluations/s for a 126-layer dense model and >= 20,000 for DeepSeek-V3; exhaustive search in
<= 1 s for the first three search problems, the 70B sweep in <= 5 s, peak memory < 1 GiB.
"""

from __future__ import annotations

import argparse
import multiprocessing
import resource
import time

import planner
from planner.search import default_space
from planner.search.space import legal_layouts, stack_space
from planner.simulate import simulate_step
from planner.simulate import vector as vector_module
from planner.simulate.batch import BatchSimulator
from planner.simulate.vector import figures_many
from planner.specs.layout import Training

STACK = "megatron-core"  # the default stack of the CLI
RATE_PROBLEMS = [  # model, cluster, GPUs, global batch, seq len
    ("llama3.1-405b", "dgx-h100", 16384, 2048, 8192),
    ("deepseek-v3", "dgx-h100", 2048, 4096, 4096),
    ("gpt3-175b", "dgx-a100-80gb", 1024, 1536, 2048),
    ("llama3.1-8b", "dgx-h100", 128, 256, 8192),
]
SEARCH_PROBLEMS = [  # label, model, cluster, GPU counts, global batches, seq len, pareto
    ("405B on 16,384 H100", "llama3.1-405b", "dgx-h100", [16384], [2048], 8192, False),
    ("DeepSeek-V3 on 2,048 H100", "deepseek-v3", "dgx-h100", [2048], [4096], 4096, False),
    ("GPT-3 175B on 1,024 A100", "gpt3-175b", "dgx-a100-80gb", [1024], [1536], 2048, False),
    (
        "70B, 256-16,384 H100 x 3 batches",
        "llama3.1-70b",
        "dgx-h100",
        [256, 512, 1024, 2048, 4096, 8192, 16384],
        [1024, 2048, 4096],
        8192,
        False,
    ),
    ("Mixtral on 64 H100, --pareto", "mixtral-8x7b", "dgx-h100", [64], [512], 4096, True),
]


def _candidates(model_id: str, cluster_id: str, gpus: int, gb: int, seq: int) -> tuple:
    model, cluster = planner.load_model(model_id), planner.load_cluster(cluster_id)
    stack = planner.load_stack(STACK)
    space = stack_space(default_space(model, cluster, (gpus,), seq), stack)
    found = list(legal_layouts(model, cluster, Training(seq_len=seq, global_batch=gb), space))
    return model, cluster, stack, found


def _rate(fn, items: list) -> float:  # noqa: ANN001
    """Items per CPU second of ``fn`` over ``items``."""
    start = time.process_time()
    for item in items:
        fn(item)
    return len(items) / max(time.process_time() - start, 1e-9)


def rates(skip_old: bool) -> None:
    print(
        f"{'model':14} {'GPUs':>6} {'layers':>6} {'cands':>7} {'fit':>7} "
        f"{'old/s':>8} {'new/s':>8} {'new+mem/s':>10} {'vec+mem/s':>10} {'x old':>6} "
        f"{'warm/s':>8}"
    )
    for problem in RATE_PROBLEMS:
        print(_rate_row(*problem, skip_old=skip_old))


def _rate_row(model_id: str, cluster_id: str, gpus: int, gb: int, seq: int, skip_old: bool) -> str:
    model, cluster, stack, found = _candidates(model_id, cluster_id, gpus, gb, seq)
    prof = planner.default_profile(cluster)
    limit = cluster.accelerator.hbm_usable_gib
    old = float("nan")
    if not skip_old:
        old = _rate(lambda c: simulate_step(model, cluster, c[1], c[2], prof, False, stack), found)
    sim = BatchSimulator(model, cluster, prof, stack)
    new = _rate(lambda c: sim.figures(c[1], c[2]), found)
    counter = BatchSimulator(model, cluster, prof, stack)
    fits = sum(counter.figures(c[1], c[2], limit).timed for c in found)
    pruning = BatchSimulator(model, cluster, prof, stack)
    mem = _rate(lambda c: pruning.figures(c[1], c[2], limit), found)
    vector = BatchSimulator(model, cluster, prof, stack)
    vec = _rate(lambda cands: figures_many(vector, cands, limit, False), [found])
    vec *= len(found)
    # the same candidates again on that simulator: every shared stage already costed (a
    # sweep's next global batch, a search after a changed knob)
    warm = _rate(lambda cands: figures_many(vector, cands, limit, False), [found]) * len(found)
    return (
        f"{model_id:14} {gpus:6d} {model.layers:6d} {len(found):7d} {fits:7d} "
        f"{old:8.0f} {new:8.0f} {mem:10.0f} {vec:10.0f} {vec / old:6.1f} {warm:8.0f}"
    )


def _one_by_one(sim, candidates, memory_limit_gib=None, memory_only=True, bounded=None):  # noqa: ANN001, ANN202
    """planner.simulate.vector.figures_many as the candidates' figures() one at a time (the
    search's evaluation before the vector path)."""
    out = []
    for _gpus, layout, training in candidates:
        try:
            fig = sim.figures(layout, training, memory_limit_gib)
        except (planner.PlannerError, ArithmeticError) as exc:
            fig = exc
        out.append(None if not memory_only and getattr(fig, "timed", True) is False else fig)
    return out


def _one_search(args: tuple) -> tuple[float, float, int, float]:
    """(CPU s, wall s, candidates, peak RSS MiB) of one search in this (fresh) process; the
    last argument True: figures() one candidate at a time instead of the vector path."""
    model_id, cluster_id, counts, batches, seq, pareto, one_by_one = args
    if one_by_one:
        vector_module.figures_many = _one_by_one
    model, cluster = planner.load_model(model_id), planner.load_cluster(cluster_id)
    stack = planner.load_stack(STACK)
    cpu, wall, n = time.process_time(), time.perf_counter(), 0
    for gb in batches:
        r = planner.search(
            model,
            cluster,
            gpus=counts,
            global_batch=gb,
            seq_len=seq,
            method="exhaustive",
            stack=stack,
            pareto=pareto,
        )
        n += r.evaluated
        r.best.report  # noqa: B018 - the shown layout's full report, as the CLI builds it
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    return time.process_time() - cpu, time.perf_counter() - wall, n, rss


def searches(skip_old: bool) -> None:
    """Each search problem timed with figures() one by one ("1 by 1", the evaluation before
    the vector path) and with the vector path, each in a fresh process."""
    print(
        f"\n{'exhaustive search':34} {'cands':>7} {'1by1 CPU s':>10} {'CPU s':>7} "
        f"{'wall s':>7} {'peak MiB':>9}"
    )
    ctx = multiprocessing.get_context("spawn")
    for label, *args in SEARCH_PROBLEMS:
        before = float("nan")
        if not skip_old:
            with ctx.Pool(1) as pool:
                before = pool.apply(_one_search, ((*args, True),))[0]
        with ctx.Pool(1) as pool:
            cpu, wall, n, rss = pool.apply(_one_search, ((*args, False),))
        print(f"{label:34} {n:7d} {before:10.2f} {cpu:7.2f} {wall:7.2f} {rss:9.0f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--skip-old", action="store_true", help="do not time the one-layout and 1-by-1 paths"
    )
    args = p.parse_args()
    rates(args.skip_old)
    searches(args.skip_old)


if __name__ == "__main__":
    main()
