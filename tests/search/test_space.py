"""The legal-layout generator, the evaluator cache, exhaustive enumeration and Pareto fronts."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest

import planner
from planner.errors import PlannerError
from planner.schedules import SCHEDULES
from planner.search import SearchSpace, default_space, legal_layouts, pareto_front
from planner.search.evaluate import Evaluator
from planner.search.exhaustive import count_candidates, exhaustive
from planner.search.space import (
    MEGATRON_SCHEDULES,
    assert_legal,
    parse_schedules,
    schedule_choices,
    structures,
)
from planner.specs.layout import Layout, Training


@pytest.fixture(scope="module")
def problem():
    model, cluster = planner.load_model("llama3.1-8b"), planner.load_cluster("dgx-h100")
    return model, cluster, Training(seq_len=4096, global_batch=64)


def test_every_generated_layout_is_legal_and_distinct(problem):
    model, cluster, tr = problem
    space = default_space(model, cluster, (16, 32), tr.seq_len)
    seen = set()
    for gpus, layout, training in legal_layouts(model, cluster, tr, space):
        assert_legal(model, cluster, gpus, layout, training)
        key = (gpus, layout, training)
        assert key not in seen
        seen.add(key)
    assert len(seen) > 100
    assert sum(space.rejected.values()) > 0  # rejections are counted with reasons
    assert all(isinstance(reason, str) and reason for reason in space.rejected)


def test_generator_respects_divisibility():
    model = planner.load_model("llama3.1-405b")  # 126 layers, 128 heads, 8 kv heads
    cluster = planner.load_cluster("dgx-h100")
    tr = Training(seq_len=8192, global_batch=512)
    space = SearchSpace(gpus=(1024,))
    for s in structures(model, cluster, tr, space):
        assert model.n_kv_heads % s.tp == 0 and s.tp <= 8
        assert s.tp * s.cp * s.pp * s.dp == 1024
        assert tr.global_batch % (s.micro_batch * s.dp) == 0
        if s.vpp > 1:
            assert model.layers % (s.pp * s.vpp) == 0 or (model.layers + 2) % (s.pp * s.vpp) == 0


def test_moe_space_has_expert_parallelism():
    model, cluster = planner.load_model("mixtral-8x7b"), planner.load_cluster("dgx-h100")
    space = default_space(model, cluster, (64,), 4096)
    eps = {
        s.ep for s in structures(model, cluster, Training(seq_len=4096, global_batch=256), space)
    }
    assert eps >= {1, 2, 4, 8}


def test_evaluator_never_simulates_twice(problem):
    model, cluster, tr = problem
    ev = Evaluator(model, cluster, planner.default_profile(cluster))
    layout = planner.Layout(dp=16)
    a = ev(16, layout, tr)
    b = ev(16, layout, tr)
    assert a is b and ev.simulated == 1


def test_exhaustive_is_sorted_and_matches_simulate(problem):
    model, cluster, tr = problem
    space = default_space(model, cluster, (16,), tr.seq_len)
    ev = Evaluator(model, cluster, planner.default_profile(cluster))
    ranked = exhaustive(ev, tr, space)
    # memory is priced first: what cannot fit is counted, never timed nor ranked
    assert ranked and all(e.feasible for e in ranked)
    scores = [e.score for e in ranked]
    assert scores == sorted(scores, reverse=True)
    best = ranked[0]
    again = planner.simulate(model, cluster, best.layout, best.training)
    assert again.tokens_per_s == best.figures.tokens_per_s == best.report.tokens_per_s
    oom = ev.infeasible["out of memory (with headroom)"]
    assert oom > 0 and ev.simulated == len(ranked) + oom
    assert count_candidates(ev, tr, space) == ev.simulated


def test_memory_headroom_shrinks_the_feasible_set(problem):
    model, cluster, tr = problem
    space = default_space(model, cluster, (16,), tr.seq_len)
    prof = planner.default_profile(cluster)
    loose = exhaustive(Evaluator(model, cluster, prof), tr, space)
    tight = exhaustive(Evaluator(model, cluster, prof, memory_headroom=0.3), tr, space)
    assert sum(e.feasible for e in tight) < sum(e.feasible for e in loose)
    for e in tight:
        if e.feasible:
            assert e.report.peak_memory_gib <= 0.7 * e.report.usable_memory_gib


def test_objectives_and_bad_inputs(problem):
    model, cluster, tr = problem
    prof = planner.default_profile(cluster)
    with pytest.raises(planner.PlannerError, match="tokens"):
        Evaluator(model, cluster, prof, objective="time_to_train")
    unpriced = planner.load_cluster("gb200-nvl72")
    with pytest.raises(planner.PlannerError, match="objective"):
        Evaluator(model, unpriced, planner.default_profile(unpriced), objective="cost")
    with pytest.raises(planner.PlannerError, match="method"):
        planner.search(model, cluster, gpus=16, global_batch=64, method="annealing")
    r = planner.search(
        model,
        cluster,
        gpus=(8, 16, 32),
        global_batch=64,
        seq_len=4096,
        objective="cost",
        method="exhaustive",
    )
    best = r.best
    dollars = cluster.spec.price_per_gpu_hour_usd * best.gpus / 3600 / best.report.tokens_per_s
    assert -best.score == pytest.approx(dollars * 1e6)


def test_pareto_front_is_non_dominated(problem):
    model, cluster, tr = problem
    r = planner.search(
        model,
        cluster,
        gpus=(8, 16),
        global_batch=64,
        seq_len=4096,
        pareto=True,
        method="exhaustive",
    )
    for name, axes in (
        ("tokens_per_s_vs_memory_headroom", ("tokens_per_s", "memory_headroom_gib")),
        ("tokens_per_s_vs_gpus", ("tokens_per_s", "fewer_gpus")),
    ):
        front = r.pareto[name]
        assert front
        again = pareto_front(front, axes)
        assert len(again) == len(front)
    fastest = max((e for e in r.ranked if e.feasible), key=lambda e: e.report.tokens_per_s)
    assert r.pareto["tokens_per_s_vs_gpus"][0].report.tokens_per_s == fastest.report.tokens_per_s


def test_no_feasible_layout_says_why():
    model, cluster = planner.load_model("llama3.1-405b"), planner.load_cluster("dgx-h100")
    r = planner.search(model, cluster, gpus=8, global_batch=8, seq_len=4096, method="exhaustive")
    with pytest.raises(planner.PlannerError, match="no feasible layout"):
        _ = r.best


# ---- the pipeline schedule knob ---------------------------------------------------------------


@pytest.fixture(scope="module")
def piped():
    """A pipelined problem (llama3.1-70b on 64 H100), its space narrowed to keep it quick."""
    model, cluster = planner.load_model("llama3.1-70b"), planner.load_cluster("dgx-h100")
    space = SearchSpace(
        gpus=(64,),
        tp=(4, 8),
        micro_batch=(1,),
        recompute=("none",),
        zero=(1,),
        sequence_parallel=(True,),
        overlap_tp_comm=(True,),
    )
    return model, cluster, Training(seq_len=4096, global_batch=256), space


def test_schedule_names_parse() -> None:
    assert MEGATRON_SCHEDULES == ("1f1b", "interleaved")
    assert all(SCHEDULES[n].megatron is not None for n in MEGATRON_SCHEDULES)
    assert parse_schedules("all") == tuple(SCHEDULES)
    assert parse_schedules("megatron") == MEGATRON_SCHEDULES
    assert parse_schedules("zbv,1f1b") == ("1f1b", "zbv")
    for bad in ("zb", "", " , "):
        with pytest.raises(PlannerError, match="schedules"):
            parse_schedules(bad)


def test_schedule_choices_pair_vpp_with_the_schedules_that_run_it() -> None:
    every = tuple(SCHEDULES)
    assert schedule_choices(every, 1, 1) == (None,)  # pp 1: no schedule knob
    assert schedule_choices(every, 4, 1) == (None, "zb-h1", "zb-h2")  # None: 1f1b
    assert schedule_choices(every, 4, 2) == (None, "interleaved-zb", "zbv", "dualpipev")
    assert schedule_choices(every, 4, 4) == (None, "interleaved-zb")  # None: interleaved
    assert schedule_choices(MEGATRON_SCHEDULES, 4, 1) == (None,)
    assert schedule_choices(("zbv",), 4, 1) == ()


def test_default_schedules_propose_the_default_schedule_only(piped) -> None:
    model, cluster, tr, space = piped
    assert space.schedules == MEGATRON_SCHEDULES
    assert {s.schedule for s in structures(model, cluster, tr, space)} == {None}
    assert "schedule" not in space.rejected


def test_all_schedules_are_legal_counted_and_no_slower(piped) -> None:
    model, cluster, tr, space = piped
    wide = replace(space, schedules=tuple(SCHEDULES), rejected=Counter())
    seen = {}
    for gpus, layout, training in legal_layouts(model, cluster, tr, wide):
        assert_legal(model, cluster, gpus, layout, training)
        seen[layout.pipeline_schedule] = layout
        if layout.pp == 1:
            assert layout.schedule is None
    assert set(seen) == set(SCHEDULES)
    assert wide.rejected["schedule"] > 0  # e.g. zbv / dualpipev on an 80-layer split they miss
    ev = Evaluator(model, cluster, planner.default_profile(cluster))
    default_best = exhaustive(ev, tr, space)[0]
    best = exhaustive(ev, tr, wide)[0]
    assert best.score >= default_best.score
    assert best.layout.pipeline_schedule not in MEGATRON_SCHEDULES  # a zero-bubble one wins here


def test_optuna_suggests_the_schedule(piped) -> None:
    from planner.search.optuna_search import SCHEDULE_PARAM, Encoding, optuna_search

    model, cluster, tr, space = piped
    wide = replace(space, schedules=tuple(SCHEDULES), rejected=Counter())
    structs = list(structures(model, cluster, tr, wide))
    enc = Encoding(structs, wide)
    assert set(enc.schedules) == {None, "zb-h1", "zb-h2", "interleaved-zb", "zbv", "dualpipev"}
    for s in structs:  # every structure's parameters repair to itself
        params = enc.params(s, wide.knobs()[0])
        x = enc.fixed.copy()
        for j, d in enc.dims:
            x[j] = params[d.param]
        x[-1] = enc.schedules.index(params[SCHEDULE_PARAM])
        assert enc.repair(x) == s
    ev = Evaluator(model, cluster, planner.default_profile(cluster))
    ranked = optuna_search(ev, tr, wide, trials=30, seed=1)
    for e in ranked:
        assert_legal(model, cluster, e.gpus, e.layout, e.training)
    # the default space has one schedule value: no schedule parameter, as before the knob
    assert Encoding(list(structures(model, cluster, tr, space)), space).schedules == (None,)


def test_search_knobs_are_spec_fields_with_the_specs_choices():
    """Every knob is the Layout or Training field of its name, and every axis a knob may take
    lies inside that field's own choices (the default axes are the spec's choices)."""
    from dataclasses import fields as dc_fields

    from planner.search.space import Knobs, SearchSpace, field_choices
    from planner.specs.layout import Layout, Training

    space = SearchSpace(gpus=(8,))
    for f in dc_fields(Knobs):
        spec = Layout if f.name in Layout.model_fields else Training
        assert f.name in spec.model_fields, f.name
        if f.name == "recompute_fraction":  # a number: each value is one the field takes
            for v in (*space.recompute_fraction, 0.25):
                Training(seq_len=8, global_batch=1, recompute="full", recompute_fraction=v)
            continue
        assert set(getattr(space, f.name)) <= set(field_choices(spec, f.name)), f.name
    assert space.recompute == field_choices(Training, "recompute")
    assert space.zero == field_choices(Layout, "zero")


def test_quick_copy_is_model_copy() -> None:
    """The generator's copy of a structure's Layout with each knob setting is pydantic's."""
    from planner.simulate.copying import quick_copy

    base = Layout(tp=2, pp=2, dp=2, vpp=2)
    update = {"zero": 1, "sequence_parallel": True, "overlap_tp_comm": True}
    got, want = quick_copy(base, update), base.model_copy(update=update)
    assert got == want and hash(got) == hash(want)
    assert got.model_fields_set == want.model_fields_set
    assert got.__pydantic_extra__ == want.__pydantic_extra__
    assert got.__pydantic_private__ == want.__pydantic_private__
    assert base.zero == 0 and "zero" not in base.model_fields_set
