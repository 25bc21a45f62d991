"""Property tests: random valid dense models and layouts on H100 and A100 clusters."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import planner
from planner.costs import flops
from planner.specs.layout import Layout, Training
from planner.specs.model import ModelSpec

CLUSTERS = {cid: planner.load_cluster(cid) for cid in ("dgx-h100", "dgx-a100-80gb")}
SETTINGS = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)


@st.composite
def dense_models(draw, min_kv_heads=1):
    heads = draw(st.sampled_from([h for h in (1, 2, 4, 8, 16, 32, 64) if h >= min_kv_heads]))
    divisors = [d for d in range(min_kv_heads, heads + 1) if heads % d == 0]
    kv_heads = draw(st.sampled_from(divisors))
    hidden = heads * 64 * draw(st.integers(1, 4))
    return ModelSpec(
        name="prop",
        layers=draw(st.integers(1, 48)),
        hidden=hidden,
        ffn_hidden=64 * draw(st.integers(1, 4 * hidden // 64)),
        activation=draw(st.sampled_from(["gelu", "swiglu", "relu2", "geglu"])),
        heads=heads,
        kv_heads=kv_heads,
        vocab=draw(st.integers(256, 160_000)),
        tied_embeddings=draw(st.booleans()),
    )


@st.composite
def cases(draw, doubling_tp=False):
    """(model, cluster, layout, training); with ``doubling_tp`` 2 x tp is legal too."""
    model = draw(dense_models(min_kv_heads=2 if doubling_tp else 1))
    top = 4 if doubling_tp else 8
    step = 2 if doubling_tp else 1
    tp = draw(
        st.sampled_from(
            [t for t in (1, 2, 4, 8) if t <= top and model.n_kv_heads % (step * t) == 0]
        )
    )
    pp = draw(st.sampled_from([p for p in (1, 2, 4) if model.layers % p == 0]))
    dp = draw(st.integers(1, 8))
    micro = draw(st.integers(1, 4))
    k = draw(st.integers(1, 8))
    zero = draw(st.sampled_from([0, 1, 2, 3]))
    shards = [None, *(d for d in (1, 2, 4) if dp % d == 0)] if zero else [None]
    layout = Layout(
        tp=tp,
        pp=pp,
        dp=dp,
        sequence_parallel=tp > 1 and draw(st.booleans()),
        zero=zero,
        dp_shard=draw(st.sampled_from(shards)),  # hybrid sharding (HSDP) now and then
    )
    training = Training(
        seq_len=draw(st.sampled_from([128, 512, 1024, 2048, 4096, 8192])),
        global_batch=micro * dp * k,
        micro_batch=micro,
        recompute=draw(st.sampled_from(["none", "selective", "full"])),
    )
    cluster = CLUSTERS[draw(st.sampled_from(sorted(CLUSTERS)))]
    return model, cluster, layout, training


def _numbers(obj, path="report"):
    """Every number in a (nested) report dict, with its path."""
    if isinstance(obj, bool):
        return
    if isinstance(obj, int | float):
        yield path, obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from _numbers(v, f"{path}.{k}")
    elif isinstance(obj, list | tuple):
        for i, v in enumerate(obj):
            yield from _numbers(v, f"{path}[{i}]")


def _compute_lower_bound_s(model, cluster, layout, training):
    """FLOPs the GPUs must execute per step at the dense bf16 peak.

    Matmuls 6 N per token exactly as the MFU convention counts them; the attention core with
    the causal half skipped (a fused kernel never computes masked blocks), 3 x forward.
    """
    mf_tok = flops.model_flops_per_token(model, training.seq_len)
    attn_model = 6.0 * model.layers * model.heads * 2 * model.d_head * training.seq_len
    per_token = mf_tok - attn_model / 2
    peak = cluster.accelerator.peak_flops_per_s("bf16")
    return per_token * training.tokens_per_step / (layout.world_size * peak)


@SETTINGS
@given(cases())
def test_report_is_finite_non_negative_and_consistent(case):
    model, cluster, layout, training = case
    r = planner.simulate(model, cluster, layout, training)
    for path, value in _numbers(r.to_dict()):
        assert math.isfinite(value), (path, value)
        if path != "report.memory_headroom_gib":  # usable - peak: negative when it does not fit
            assert value >= 0, (path, value)
    assert r.step_time_s > 0
    assert sum(r.time_breakdown_s.values()) == pytest.approx(r.step_time_s, rel=1e-9)
    assert sum(r.memory_breakdown_gib.values()) == pytest.approx(r.peak_memory_gib, rel=1e-9)
    assert r.tokens_per_s * r.step_time_s == pytest.approx(training.tokens_per_step, rel=1e-9)
    assert r.fits == (r.peak_memory_gib <= r.usable_memory_gib)
    assert r.step_time_s >= _compute_lower_bound_s(model, cluster, layout, training)


@SETTINGS
@given(cases())
def test_step_time_at_least_model_flops_at_peak(case):
    """The stronger bound of the brief: total model FLOPs (attention not causally discounted)
    over GPUs x bf16 peak, i.e. MFU <= 100%."""
    model, cluster, layout, training = case
    r = planner.simulate(model, cluster, layout, training)
    peak = cluster.accelerator.peak_flops_per_s("bf16")
    bound = r.model_flops_per_token * training.tokens_per_step / (layout.world_size * peak)
    assert r.step_time_s >= bound
    assert r.mfu_pct <= 100.0


@SETTINGS
@given(cases(doubling_tp=True))
def test_weights_per_gpu_fall_when_tp_doubles(case):
    model, cluster, layout, training = case
    tp2 = 2 * layout.tp
    assert tp2 <= 8 and model.heads % tp2 == 0 and model.n_kv_heads % tp2 == 0
    lo = planner.simulate(model, cluster, layout, training)
    hi = planner.simulate(model, cluster, layout.model_copy(update={"tp": tp2}), training)
    w_lo = lo.memory_breakdown_gib["weights"]
    w_hi = hi.memory_breakdown_gib["weights"]
    assert w_hi < w_lo
    assert w_hi >= 0.45 * w_lo  # cannot shrink by much more than the TP factor


@SETTINGS
@given(cases())
def test_more_microbatches_amortise(case):
    """Doubling the global batch (same layout) never lowers tokens/s."""
    model, cluster, layout, training = case
    a = planner.simulate(model, cluster, layout, training)
    b = planner.simulate(
        model,
        cluster,
        layout,
        training.model_copy(update={"global_batch": 2 * training.global_batch}),
    )
    assert b.tokens_per_s >= a.tokens_per_s * (1 - 1e-9)
    assert b.peak_memory_gib >= a.peak_memory_gib * (1 - 1e-9)
