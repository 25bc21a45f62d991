"""The search's evaluation path (planner/simulate/batch.py) gives the figures of the one-layout
path: on random legal layouts of every shipped model, under several stacks and clusters, each
figure and each breakdown entry within 1e-9 relative of ``simulate_step``'s."""

from __future__ import annotations

import random

import pytest

import planner
from planner.errors import PlannerError
from planner.schedules import SCHEDULES
from planner.search import default_space
from planner.search.space import legal_layouts, stack_space
from planner.simulate import simulate_step
from planner.simulate.batch import BatchSimulator, Figures
from planner.specs.layout import Training
from planner.specs.loading import REPO_ROOT, load_stack, shipped_ids
from planner.stacks import model_violations

MODELS = shipped_ids(REPO_ROOT / "models")
STACKS = [None, *shipped_ids(REPO_ROOT / "stacks")]
# (cluster, GPU counts): a scale-up domain of 8 and of 72, two generations
CLUSTERS = [("dgx-h100", (32,)), ("dgx-a100-80gb", (16, 64)), ("gb200-nvl72", (144,))]
PER_MODEL = 450  # candidates compared per model (about 11,000 over the shipped models)
FIGURES = ("step_time_s", "tokens_per_s", "tokens_per_s_per_gpu", "mfu_pct", "hfu_pct")
FIGURES += ("model_flops_per_token", "peak_memory_gib", "usable_memory_gib", "microbatches")


def close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-9 * max(abs(a), abs(b)) or a == b


def _candidates(model_id: str) -> list[tuple]:
    """(cluster, stack, gpus, layout, training) sampled from every cluster and stack's space,
    all pipeline schedules open, two sequence lengths and batches."""
    rng = random.Random(model_id)
    model = planner.load_model(model_id)
    # the stacks whose code can express the model (a search under another is refused whole)
    runnable = [s for s in STACKS if s is None or not model_violations(load_stack(s), model)]
    out = []
    for (cid, counts), seq, gb in zip(CLUSTERS, (4096, 2048, 8192), (64, 256, 128), strict=True):
        cluster = planner.load_cluster(cid)
        # the stacks drawn per cluster, apart from the layouts drawn (a stack whose space grows
        # must not change which stacks the other clusters get)
        for stack_id in random.Random(f"{model_id}/{cid}").sample(runnable, 3):
            stack = planner.load_stack(stack_id) if stack_id else None
            space = default_space(model, cluster, counts, seq)
            space.schedules = tuple(SCHEDULES)
            if stack is not None:
                space = stack_space(space, stack)
            tr = Training(seq_len=seq, global_batch=gb)
            found = list(legal_layouts(model, cluster, tr, space))
            pick = rng.sample(found, min(len(found), PER_MODEL // 9))
            out += [(cluster, stack, *c) for c in pick]
    return out


@pytest.mark.parametrize("model_id", MODELS)
def test_batch_figures_equal_the_one_layout_path(model_id: str) -> None:
    model = planner.load_model(model_id)
    sims: dict = {}
    compared = pruned = 0
    for cluster, stack, _gpus, layout, training in _candidates(model_id):
        key = (cluster.id, stack.name if stack else None)
        if key not in sims:
            sims[key] = BatchSimulator(model, cluster, planner.default_profile(cluster), stack)
        sim = sims[key]
        try:
            want = simulate_step(
                model, cluster, layout, training, planner.default_profile(cluster), False, stack
            )
        except PlannerError as exc:
            with pytest.raises(PlannerError) as got:
                sim.figures(layout, training)
            assert got.value.field == exc.field
            continue
        got = sim.figures(layout, training)
        assert got.timed and got.stack == want.stack
        for name in FIGURES:
            assert close(getattr(got, name), getattr(want, name)), (name, layout, training)
        assert got.time_breakdown_s.keys() == want.time_breakdown_s.keys()
        assert got.memory_breakdown_gib.keys() == want.memory_breakdown_gib.keys()
        for k, v in want.time_breakdown_s.items():
            assert close(got.time_breakdown_s[k], v), (k, layout, training)
        for k, v in want.memory_breakdown_gib.items():
            assert close(got.memory_breakdown_gib[k], v), (k, layout, training)
        assert got.peak_memory_stage == want.peak_memory_stage
        assert got.peak_reserved_gib == want.peak_reserved_gib
        assert got.fits == want.fits
        compared += 1
        # memory first: below its peak, the candidate is priced and not timed
        limit = want.peak_memory_gib * 0.999
        short = sim.figures(layout, training, limit)
        assert not short.timed and short.peak_memory_gib == got.peak_memory_gib
        assert short.memory_breakdown_gib == got.memory_breakdown_gib
        pruned += 1
    assert compared >= 100 and pruned == compared


def _same(got: object, want: object) -> bool:
    """The same Figures (every field, every breakdown entry, bit for bit), or the same error."""
    if isinstance(want, Exception):
        return type(got) is type(want) and getattr(got, "field", None) == getattr(
            want, "field", None
        )
    same_types = all(
        type(getattr(got, k)) is type(getattr(want, k)) for k in getattr(want, "__slots__", ())
    )
    return got == want and same_types  # builtin ints and floats, not numpy scalars


@pytest.mark.parametrize("model_id", MODELS)
def test_vector_figures_equal_the_batch_path(model_id: str) -> None:
    """figures_many (planner/simulate/vector.py, numpy over the candidates) gives exactly the
    figures of figures() (checked against simulate_step above), with and without a memory
    limit that prunes about half the candidates; a large share takes the vector path."""
    from planner.simulate.vector import VectorPass, figures_many

    model = planner.load_model(model_id)
    groups: dict = {}
    for cluster, stack, gpus, layout, training in _candidates(model_id):
        groups.setdefault((cluster.id, stack.name if stack else None), []).append(
            (cluster, stack, (gpus, layout, training))
        )
    compared = vectored = 0
    for entries in groups.values():
        cluster, stack = entries[0][0], entries[0][1]
        cands = [c for _, _, c in entries]
        profile = planner.default_profile(cluster)

        def scalar(sim: BatchSimulator, limit: float | None, cands: list = cands) -> list:
            out: list = []
            for _gpus, layout, training in cands:
                try:
                    out.append(sim.figures(layout, training, limit))
                except (PlannerError, ArithmeticError) as exc:
                    out.append(exc)
            return out

        first = scalar(BatchSimulator(model, cluster, profile, stack), None)
        peaks = sorted(f.peak_memory_gib for f in first if not isinstance(f, Exception))
        for limit in (None, peaks[len(peaks) // 2] if peaks else None):
            want = scalar(BatchSimulator(model, cluster, profile, stack), limit)
            vp = VectorPass(BatchSimulator(model, cluster, profile, stack), cands, limit)
            got = vp.run()
            for c, g, w in zip(cands, got, want, strict=True):
                assert _same(g, w), (c, g, w)
            # candidates the stack refuses are errors, never vectorised: count the others
            refused = {j for j, w in enumerate(want) if isinstance(w, Exception)}
            compared += len(cands) - len(refused)
            vectored += len(cands) - len(set(vp.fallback) | refused)
            bounded: set[int] = set()
            pruned = figures_many(
                BatchSimulator(model, cluster, profile, stack), cands, limit, False, bounded
            )
            for g, w in zip(pruned, want, strict=True):
                assert g is None if type(w) is Figures and not w.timed else _same(g, w)
            for j in bounded:  # what the evaluator then need not check
                fig = pruned[j]
                values = [*fig.time_breakdown_s.values(), *fig.memory_breakdown_gib.values()]
                values += [fig.step_time_s, fig.tokens_per_s, fig.mfu_pct, fig.peak_memory_gib]
                assert fig.timed and all(abs(v) < 1e300 for v in values)
    # the vector path must carry a large share, never none: by design llm-foundry (a
    # per-tensor optimizer) and schedules outside 1F1B / interleaved take the one-candidate
    # path, so the share follows the stacks drawn (2026-12-06: 48-100 % per model, 72 % over
    # the 25 shipped models)
    assert compared >= 300 and vectored >= compared // 3


def test_the_layer_cost_key_leaves_out_only_fields_the_layers_do_not_read() -> None:
    """The fields the layer-cost key leaves out are the pipeline, DP and ZeRO ones: changing
    any other field of a layout changes the key (so no candidate borrows another's costs)."""
    from planner.simulate.batch import LAYER_LAYOUT_FIELDS, NOT_READ_BY_LAYERS

    assert set(LAYER_LAYOUT_FIELDS) | NOT_READ_BY_LAYERS == set(planner.Layout.model_fields)
    assert {"tp", "cp", "ep", "sequence_parallel", "overlap_tp_comm"} <= set(LAYER_LAYOUT_FIELDS)
