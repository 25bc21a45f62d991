"""End-to-end simulator invariants: bookkeeping identities, directions of effects, errors.

No number here is an output of the simulator: the checks are identities (breakdowns sum to the
totals), closed forms (ZeRO, weights = 2 B x published parameter count) and directions.
"""

from __future__ import annotations

import pytest

import planner
from planner.costs import pipeline
from planner.report import MEMORY_CATEGORIES, TIME_CATEGORIES
from planner.specs.layout import Layout, Training

GIB = 1024**3


def _sim(model, cluster, **kw):
    training_keys = {"seq_len", "global_batch", "micro_batch", "recompute", "precision"}
    t_kw = {k: kw.pop(k) for k in list(kw) if k in training_keys}
    t_kw.setdefault("seq_len", 4096)
    layout = Layout(**kw)
    t_kw.setdefault("global_batch", 8 * layout.dp)
    return planner.simulate(model, cluster, layout, Training(**t_kw))


LAYOUTS = [
    dict(tp=1, pp=1, dp=8),
    dict(tp=2, pp=1, dp=4, sequence_parallel=True),
    dict(tp=8, pp=1, dp=1),
    dict(tp=4, pp=2, dp=2, global_batch=32),
    dict(tp=2, pp=4, dp=2, vpp=2, global_batch=64),
    dict(tp=2, pp=1, dp=4, cp=2, seq_len=8192),
    dict(tp=1, pp=1, dp=16, zero=1),
    dict(tp=1, pp=1, dp=16, zero=3),
    dict(tp=4, pp=2, dp=8, recompute="full"),
    dict(tp=4, pp=1, dp=2, recompute="selective", micro_batch=2),
]


@pytest.fixture(scope="module", params=range(len(LAYOUTS)), ids=lambda i: str(LAYOUTS[i]))
def report(request, llama8b, h100):
    return _sim(llama8b, h100, **LAYOUTS[request.param])


def test_time_breakdown_sums_to_step(report):
    total = sum(report.time_breakdown_s.values())
    assert total == pytest.approx(report.step_time_s, rel=1e-9)
    assert set(report.time_breakdown_s) == set(TIME_CATEGORIES)


def test_memory_breakdown_sums_to_peak(report):
    total = sum(report.memory_breakdown_gib.values())
    assert total == pytest.approx(report.peak_memory_gib, rel=1e-9)
    assert set(report.memory_breakdown_gib) == set(MEMORY_CATEGORIES)


def test_throughput_identities(report):
    assert report.tokens_per_s * report.step_time_s == pytest.approx(
        report.tokens_per_step, rel=1e-9
    )
    assert report.tokens_per_s_per_gpu * report.gpus == pytest.approx(report.tokens_per_s, rel=1e-9)
    assert report.memory_headroom_gib == pytest.approx(
        report.usable_memory_gib - report.peak_memory_gib
    )
    assert report.fits == (report.peak_memory_gib <= report.usable_memory_gib)


def test_mfu_definition(report, h100):
    """MFU = model FLOPs/token x tokens/s / (GPUs x dense bf16 peak), as MFU_CONVENTION states."""
    peak = h100.accelerator.peak_tflops.bf16 * 1e12
    want = 100 * report.model_flops_per_token * report.tokens_per_s / (report.gpus * peak)
    assert report.mfu_pct == pytest.approx(want, rel=1e-9)
    assert 0 < report.mfu_pct < 100
    assert 0 < report.hfu_pct < 100


def test_all_numbers_finite_and_non_negative(report):
    for d in (report.time_breakdown_s, report.memory_breakdown_gib):
        for k, v in d.items():
            assert v >= 0 and v == v and v != float("inf"), (k, v)


def test_tokens_per_step_and_microbatches(llama8b, h100):
    r = _sim(llama8b, h100, tp=2, dp=4, seq_len=8192, global_batch=64, micro_batch=2)
    assert r.tokens_per_step == 64 * 8192
    assert r.microbatches == 64 // (2 * 4)
    assert r.gpus == 8


def test_weights_are_two_bytes_per_published_param(llama8b, h100):
    """tp=pp=1, ZeRO-0: bf16 weights = 2 B x 8.03B params (final norm aside), 4 B grads, 12 B Adam."""
    r = _sim(llama8b, h100, dp=8)
    n = 8_030_261_248  # Hugging Face meta-llama/Llama-3.1-8B
    mem = r.memory_breakdown_gib
    assert mem["weights"] == pytest.approx(2 * n / GIB, rel=1e-5)
    assert mem["gradients"] == pytest.approx(2 * mem["weights"], rel=1e-9)
    assert mem["optimizer_states"] == pytest.approx(6 * mem["weights"], rel=1e-9)


# ---- recompute -------------------------------------------------------------------------------
def test_recompute_trades_time_for_memory(llama8b, h100):
    kw = dict(tp=2, dp=4, seq_len=8192)
    none = _sim(llama8b, h100, recompute="none", **kw)
    sel = _sim(llama8b, h100, recompute="selective", **kw)
    full = _sim(llama8b, h100, recompute="full", **kw)
    assert none.step_time_s < sel.step_time_s < full.step_time_s
    act = {
        k: r.memory_breakdown_gib["activations"]
        for k, r in (("none", none), ("sel", sel), ("full", full))
    }
    assert act["full"] < act["none"]
    assert act["full"] <= act["sel"] <= act["none"]
    assert full.peak_memory_gib < none.peak_memory_gib
    # recomputing work the model-FLOP convention does not count: MFU falls, HFU does not
    assert full.mfu_pct < none.mfu_pct
    assert full.time_breakdown_s["recompute"] > 0
    assert none.time_breakdown_s["recompute"] == 0


def test_full_recompute_repeats_roughly_one_forward(llama8b, h100):
    """Full recompute re-runs each layer's forward: ~1/3 of fwd+bwd layer time (Narayanan 2021)."""
    kw = dict(tp=1, dp=8, seq_len=4096)
    none = _sim(llama8b, h100, **kw)
    full = _sim(llama8b, h100, recompute="full", **kw)
    ratio = full.step_time_s / none.step_time_s
    assert 1.15 < ratio < 1.45


# ---- memory feasibility ------------------------------------------------------------------------
def test_405b_on_one_node_without_sharding_does_not_fit(h100):
    m = planner.load_model("llama3.1-405b")
    r = _sim(m, h100, tp=1, pp=1, dp=8, seq_len=8192)
    assert r.fits is False
    assert r.feasibility and "GiB" in r.feasibility[0]
    # 405.9B x 18 B / GiB of model state alone
    assert r.peak_memory_gib > 405.8e9 * 18 / GIB
    assert r.memory_headroom_gib < 0


def test_small_model_fits(h100):
    r = _sim(planner.load_model("gpt-tiny"), h100, dp=8, seq_len=1024)
    assert r.fits is True
    assert r.feasibility == []


def test_doubling_tp_halves_weights(llama70b, h100):
    for tp in (1, 2, 4):
        lo = _sim(llama70b, h100, tp=tp, dp=8 // tp)
        hi = _sim(llama70b, h100, tp=2 * tp, dp=8 // (2 * tp))
        ratio = hi.memory_breakdown_gib["weights"] / lo.memory_breakdown_gib["weights"]
        assert 0.45 <= ratio <= 0.6, (tp, ratio)


def test_pipeline_splits_weights(llama70b, h100):
    one = _sim(llama70b, h100, tp=8, pp=1, dp=1)
    four = _sim(llama70b, h100, tp=8, pp=4, dp=1, global_batch=32)
    ratio = four.memory_breakdown_gib["weights"] / one.memory_breakdown_gib["weights"]
    # 80 layers / 4 plus one (untied) embedding table on the bottleneck stage
    assert 0.24 <= ratio <= 0.35


@pytest.mark.parametrize("dp", [2, 8, 64])
def test_zero1_shards_optimizer(llama8b, h100, dp):
    z0 = _sim(llama8b, h100, dp=dp, zero=0)
    z1 = _sim(llama8b, h100, dp=dp, zero=1)
    o0 = z0.memory_breakdown_gib["optimizer_states"]
    o1 = z1.memory_breakdown_gib["optimizer_states"]
    assert o1 < o0
    assert o1 == pytest.approx(o0 / dp, rel=1e-9)  # ZeRO P_os: 12 B / N_d
    assert z1.memory_breakdown_gib["weights"] == pytest.approx(z0.memory_breakdown_gib["weights"])


def test_zero_stages_monotone(llama8b, h100):
    peaks = [_sim(llama8b, h100, dp=16, zero=z).peak_memory_gib for z in (0, 1, 2, 3)]
    assert peaks[0] > peaks[1] > peaks[2] > peaks[3]


# ---- scaling -----------------------------------------------------------------------------------
def test_data_parallel_weak_scaling(llama8b, h100):
    """Fixed per-GPU batch: DP comm overlaps the backward, so tokens/s/GPU barely moves."""
    base = _sim(llama8b, h100, dp=8, seq_len=8192, global_batch=64)
    for dp in (16, 64, 256):
        r = _sim(llama8b, h100, dp=dp, seq_len=8192, global_batch=8 * dp)
        rel = r.tokens_per_s_per_gpu / base.tokens_per_s_per_gpu
        assert 0.95 <= rel <= 1.001, (dp, rel)


def test_more_gpus_more_tokens(llama8b, h100):
    a = _sim(llama8b, h100, dp=8, global_batch=64)
    b = _sim(llama8b, h100, dp=32, global_batch=256)
    assert b.tokens_per_s > 3.5 * a.tokens_per_s


def test_no_bubble_without_pipeline(llama8b, h100):
    assert _sim(llama8b, h100, dp=8).time_breakdown_s["pipeline_bubble"] == 0


def test_bubble_shrinks_with_microbatches_and_interleaving(llama70b, h100):
    few = _sim(llama70b, h100, tp=8, pp=4, dp=1, global_batch=8)
    many = _sim(llama70b, h100, tp=8, pp=4, dp=1, global_batch=64)
    inter = _sim(llama70b, h100, tp=8, pp=4, dp=1, vpp=2, global_batch=64)
    b_few = few.time_breakdown_s["pipeline_bubble"] / few.step_time_s
    b_many = many.time_breakdown_s["pipeline_bubble"] / many.step_time_s
    b_inter = inter.time_breakdown_s["pipeline_bubble"] / inter.step_time_s
    assert b_few > b_many > b_inter > 0
    # Narayanan et al. 2021 sec. 2.2.1: bubble fraction (p-1)/m of the ideal time (unequal
    # stages aside); with m = 8, p = 4 that is 3/8 of steady time ~ 0.27 of the step.
    assert b_few == pytest.approx(3 / 11, rel=0.25)


def test_pipeline_closed_form():
    """Equal stages: T = (m + (p-1)/v) t  (Narayanan et al. 2021, sec. 2.2.2)."""
    t, p = 0.1, 4
    for m, v in ((8, 1), (16, 2), (1, 1), (32, 4)):
        steady, bubble = pipeline.pipeline_time_s(m, t, p * t, v)
        assert steady + bubble == pytest.approx((m + (p - 1) / v) * t, rel=1e-12)
        assert bubble / steady == pytest.approx((p - 1) / (v * m), rel=1e-12)
    assert pipeline.microbatches_per_step(512, 2, 16) == 16
    assert pipeline.layers_on_bottleneck_stage(126, 8) == 16


def test_layers_per_rank_sum_to_the_model():
    from planner.costs.pipeline import layers_on_edge_stage, layers_per_rank

    for layers in (24, 30, 31, 32, 61, 126):
        for pp in (1, 2, 3, 4, 8):
            ranks = layers_per_rank(layers, pp)
            assert sum(ranks) == layers and len(ranks) == pp
            if pp > 2:
                assert ranks[0] == ranks[-1] == layers_on_edge_stage(layers, pp)


def test_schedule_time_is_the_1f1b_closed_form_for_1f1b():
    from planner.schedules import SCHEDULES, StageTimes

    for m, v in ((8, 1), (16, 2)):
        stages = StageTimes(0.1, 0.37)
        want = pipeline.pipeline_time_s(m, 0.1, 0.37, v)
        name = "interleaved" if v > 1 else "1f1b"
        assert pipeline.schedule_time_s(SCHEDULES[name], m, stages, v) == want


# ---- the step plan ------------------------------------------------------------------------------
def test_plan_stages_show_their_own_costs(llama8b, h100):
    """The first rank carries the embedding, the last the logits and loss; the report's
    breakdown is the bottleneck rank's, and every rank's breakdown sums to the step."""
    report = _sim(llama8b, h100, tp=2, pp=4, dp=2, global_batch=64)
    plan = report.plan
    assert [st.role for st in plan.stages] == ["first", "middle", "last"]
    first, middle, last = (plan.stage_of(r).per_microbatch for r in (0, 1, 3))
    assert last["compute_logits_loss"] > 0.0 == first["compute_logits_loss"]
    assert first["compute_memory_bound"] > middle["compute_memory_bound"]  # the embedding
    m = report.microbatches
    bott = plan.stage_of(plan.bottleneck_rank).per_microbatch
    for cat, s in bott.items():
        assert report.time_breakdown_s[cat] == pytest.approx(
            s * m + (plan.dp_step_s if cat == "dp_comm" else 0.0)
        )
    for rank in range(plan.pp):
        assert sum(plan.rank_breakdown_s(rank).values()) == pytest.approx(report.step_time_s)
    # forward, input-gradient and weight-gradient passes split each rank's time
    for st in plan.stages:
        passes = [c.times() for c in st.chunks]
        assert sum(p.total_s for p in passes) == pytest.approx(st.microbatch_s, rel=1e-12)
        assert all(p.forward_s > 0 and p.input_grad_s > 0 and p.weight_grad_s > 0 for p in passes)
    # comms say what hides them
    tp = next(c for c in plan.stage_of(1).comms if c.category == "tp_comm")
    assert tp.exposed_s == pytest.approx(middle["tp_comm"]) and tp.overlaps == "nothing"


def test_plan_weight_gradient_is_the_weight_gemms(llama8b, h100):
    """Without experts or recompute a layer's W is about its forward GEMM time: dW multiplies
    the same FLOPs, but writes a (k x n) output instead of (m x n), so its tile / wave
    quantization differs (costs/waves.py) by a few percent on these large shapes."""
    plan = _sim(llama8b, h100, dp=8).plan
    chunk = plan.stages[0].chunks[0]
    per_layer_gemm = plan.stages[0].per_microbatch["compute_gemm"]
    w = chunk.weight_grad["compute_gemm"]
    f = chunk.forward["compute_gemm"]
    assert w == pytest.approx(f, rel=0.03)  # one GEMM each way per layer GEMM
    assert per_layer_gemm == pytest.approx(3 * f, rel=0.02)  # + the logits GEMM


def test_report_json_has_no_plan(llama8b, h100):
    report = _sim(llama8b, h100, tp=2, pp=2, dp=4)
    assert report.plan is not None and "plan" not in report.to_dict()


# ---- errors ------------------------------------------------------------------------------------
def test_tp_not_dividing_heads(llama8b, h100):
    with pytest.raises(planner.PlannerError) as info:
        _sim(llama8b, h100, tp=3, dp=1, global_batch=8)
    assert info.value.field == "layout.tp"
    assert "32" in str(info.value)
    assert "8" in info.value.valid.split(", ")


def test_tp_not_dividing_kv_heads(llama8b, h100):
    with pytest.raises(planner.PlannerError) as info:
        _sim(llama8b, h100, tp=16, dp=1, global_batch=8)  # 16 | 32 heads, not 8 kv heads
    assert info.value.field == "layout.tp"


def test_global_batch_not_divisible(llama8b, h100):
    with pytest.raises(planner.PlannerError) as info:
        _sim(llama8b, h100, dp=8, global_batch=12)
    assert info.value.field == "training.global_batch"
    assert "8" in str(info.value)


def test_fp8_on_a100_rejected(llama8b, a100):
    with pytest.raises(planner.PlannerError) as info:
        _sim(llama8b, a100, dp=8, precision="fp8")
    assert info.value.field == "training.precision"
    assert "fp8" in str(info.value)


def test_fp8_on_h100_accepted(llama8b, h100):
    r = _sim(llama8b, h100, dp=8, precision="fp8")
    bf = _sim(llama8b, h100, dp=8)
    assert r.step_time_s < bf.step_time_s  # 2x GEMM peak


def test_other_layout_errors(llama8b, h100):
    with pytest.raises(planner.PlannerError) as info:
        _sim(llama8b, h100, pp=64, global_batch=8)
    assert info.value.field == "layout.pp"
    with pytest.raises(planner.PlannerError) as info:
        _sim(llama8b, h100, ep=2, dp=2)
    assert info.value.field == "layout.ep"
    with pytest.raises(planner.PlannerError) as info:
        _sim(llama8b, h100, cp=3, seq_len=4096)
    assert info.value.field == "layout.cp"
    with pytest.raises(planner.PlannerError) as info:
        _sim(llama8b, h100, vpp=2, pp=1)
    assert info.value.field == "layout.vpp"


def test_check_layout_world_size(llama8b, h100):
    with pytest.raises(planner.PlannerError) as info:
        planner.check_layout(
            llama8b, h100, Layout(tp=2, dp=2), Training(seq_len=8, global_batch=2), gpus=8
        )
    assert info.value.field == "layout"


def test_moe_and_mla_models_simulate(h100):
    ds = planner.load_model("deepseek-v3")
    r = _sim(ds, h100, tp=1, pp=8, dp=16, ep=16, global_batch=256, seq_len=4096, zero=1)
    assert sum(r.time_breakdown_s.values()) == pytest.approx(r.step_time_s, rel=1e-9)
    assert r.time_breakdown_s["ep_comm"] > 0
    mix = planner.load_model("mixtral-8x7b")
    r = _sim(mix, h100, tp=2, dp=4, ep=4, global_batch=32)
    assert r.time_breakdown_s["ep_comm"] > 0
    assert r.tokens_per_s > 0


def test_report_to_dict_round_trip(llama8b, h100):
    r = _sim(llama8b, h100, dp=8)
    d = r.to_dict()
    assert d["step_time_s"] == r.step_time_s
    assert d["memory_headroom_gib"] == pytest.approx(r.memory_headroom_gib)
    assert d["mfu_convention"] == planner.MFU_CONVENTION
