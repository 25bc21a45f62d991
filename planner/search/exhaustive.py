"""Exact enumeration: simulate every legal candidate once; the ground truth of the search."""

from __future__ import annotations

import contextlib
import gc
import itertools
from collections.abc import Callable, Iterable, Iterator

from planner.search.budget import NO_DEADLINE, Deadline
from planner.search.evaluate import Evaluated, Evaluator, rank
from planner.search.space import SearchSpace, legal_layouts
from planner.specs.layout import Layout, Training

Candidate = tuple[int, Layout, Training]  # (GPUs, layout, training), as legal_layouts yields
# candidates priced together (Evaluator.evaluate_many): large enough that the numpy groups are
# long, small enough that progress is reported every few tenths of a second
CHUNK = 16_384


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic garbage collector paused (and restored as it was): enumeration and pricing
    allocate hundreds of thousands of acyclic objects (layouts, figures) while holding as many,
    and each collection the allocations trigger walks all of them (a fifth of the time)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def count_candidates(
    evaluator: Evaluator,
    training: Training,
    space: SearchSpace,
    limit: int | None = None,
    deadline: Deadline = NO_DEADLINE,
    keep: list[Candidate] | None = None,
    keep_max: int = 0,
) -> int:
    """How many legal candidates the space holds (enumerates, does not simulate). With
    ``limit``, counting stops at ``limit + 1`` ("more than limit"). ``keep``: a list the first
    ``keep_max`` candidates are appended to, for :func:`exhaustive` to run without enumerating
    again when that is all of them."""
    n = 0
    for candidate in legal_layouts(evaluator.model, evaluator.cluster, training, space, deadline):
        n += 1
        if keep is not None and n <= keep_max:
            keep.append(candidate)
        if limit is not None and n > limit:
            break
    return n


def exhaustive(
    evaluator: Evaluator,
    training: Training,
    space: SearchSpace,
    progress: Callable[[int], None] | None = None,
    deadline: Deadline = NO_DEADLINE,
    candidates: Iterable[Candidate] | None = None,
) -> list[Evaluated]:
    """Every legal candidate that fits in memory, evaluated; sorted best first. Candidates
    the simulator refuses, and those whose memory (priced first) exceeds the limit, are
    counted in ``evaluator.infeasible`` and left out without their time being costed.
    ``candidates``: the space's legal candidates when already enumerated
    (:func:`count_candidates`' ``keep``)."""
    if candidates is None:
        candidates = legal_layouts(evaluator.model, evaluator.cluster, training, space, deadline)
    results: list[Evaluated] = []
    it, done = iter(candidates), 0
    while chunk := list(itertools.islice(it, CHUNK)):
        for _ in chunk:
            deadline.tick()
        results += evaluator.evaluate_many(chunk)
        if progress is not None:
            for i in range(-(-done // 1000) * 1000, done + len(chunk), 1000):
                progress(i)
        done += len(chunk)
    return rank(results)
