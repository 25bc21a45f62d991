"""Each pipeline rank's memory: its own layers' parameters and states (the embedding on the
first, the head and MTP modules on the last), its own activations, the peak the largest of
them; the MTP modules' activations and logits on the last rank; the vector path the same."""

from __future__ import annotations

import random

import pytest

import planner
from planner.costs import flops, memory
from planner.schedules import SCHEDULES
from planner.search import default_space
from planner.search.space import legal_layouts
from planner.simulate import simulate_step
from planner.simulate.batch import BatchSimulator
from planner.simulate.stages import layer_stack, make_context, params_per_gpu
from planner.simulate.vector import VectorPass
from planner.specs.layout import Layout, Training

H100 = "dgx-h100"
TRAINING = Training(seq_len=4096, global_batch=64, micro_batch=1)


def _run(model, layout: Layout, training: Training = TRAINING) -> planner.StepReport:
    cluster = planner.load_cluster(H100)
    return simulate_step(model, cluster, layout, training, planner.default_profile(cluster))


def _mtp(model_id: str, n: int) -> planner.ModelSpec:
    return planner.load_model(model_id).model_copy(update={"mtp_layers": n})


def test_each_rank_holds_the_parameters_of_its_own_layers() -> None:
    """Llama 3.1 8B (32 layers, untied) at PP 4 with 5 layers stated on the first rank: the
    first holds 5 layers and the embedding, the middle ranks 9 layers, the last 9 and the
    head; the time model keeps the bottleneck's 9 layers for every rank."""
    model = planner.load_model("llama3.1-8b")
    cluster = planner.load_cluster(H100)
    layout = Layout(tp=2, pp=4, dp=1, zero=1, first_stage_layers=5)
    ctx = make_context(model, cluster, layout, TRAINING, planner.default_profile(cluster))
    params = params_per_gpu(ctx, layer_stack(ctx))
    dlp = params.dense_layer_params
    table = flops.padded_vocab(model, layout, TRAINING) * model.hidden / layout.tp
    assert params.rank("first") == (5.0, pytest.approx(5 * dlp + table), 0.0)
    assert params.rank("middle") == (9.0, pytest.approx(9 * dlp), 0.0)
    assert params.rank("last") == (9.0, pytest.approx(9 * dlp + table), 0.0)
    assert params.stage_layers == 9.0


def test_the_peak_is_the_largest_rank_and_each_rank_is_reported() -> None:
    model = planner.load_model("llama3.1-8b")
    for pp, keys in ((1, {"only"}), (2, {"first", "last"}), (4, {"first", "middle", "last"})):
        rep = _run(model, Layout(tp=2, pp=pp, dp=4 // pp, zero=1))
        assert set(rep.memory_by_stage_gib) == keys
        assert rep.peak_memory_gib == max(rep.memory_by_stage_gib.values())
        assert rep.memory_by_stage_gib[rep.peak_memory_stage] == rep.peak_memory_gib


def test_a_rank_with_fewer_layers_holds_less() -> None:
    """Moving layers onto the first rank (2 -> 4 of 32 at PP 4, 8 on the last) raises its peak
    and lowers the middle ranks' (11 -> 10 layers each); the last rank's does not change."""
    model = planner.load_model("llama3.1-8b")
    base = Layout(tp=2, pp=4, dp=4, zero=1, last_stage_layers=8)
    fewer = _run(model, base.model_copy(update={"first_stage_layers": 2})).memory_by_stage_gib
    more = _run(model, base.model_copy(update={"first_stage_layers": 4})).memory_by_stage_gib
    assert more["first"] > fewer["first"]
    assert more["middle"] < fewer["middle"]
    assert more["last"] == pytest.approx(fewer["last"])


def test_mtp_modules_add_their_activations_and_logits_to_the_last_rank() -> None:
    """DeepSeek-V3 with one MTP module: the last rank grows by at least the module's kept
    activations and its head's logits (memory.mtp_activation_bytes, memory.logits_bytes); the
    first rank does not change; without a pipeline the one rank carries them."""
    layout = Layout(tp=2, pp=4, dp=1, ep=2, zero=1, sequence_parallel=True)
    cluster = planner.load_cluster(H100)
    without, with_mtp = _mtp("deepseek-v3", 0), _mtp("deepseek-v3", 1)
    a, b = _run(without, layout), _run(with_mtp, layout)
    assert b.memory_by_stage_gib["first"] == a.memory_by_stage_gib["first"]
    ctx = make_context(with_mtp, cluster, layout, TRAINING, planner.default_profile(cluster))
    layer = layer_stack(ctx).kinds[-1][0]
    kept = memory.mtp_activation_bytes(with_mtp, layout, TRAINING, layer)
    logits = memory.logits_bytes(with_mtp, layout, TRAINING)
    assert kept > 0.0 and logits > 0.0
    grown = b.memory_by_stage_gib["last"] - a.memory_by_stage_gib["last"]
    assert grown >= (kept + logits) / memory.GIB
    solo = Layout(tp=8, pp=1, dp=1, ep=8, zero=1, sequence_parallel=True)
    small = Training(seq_len=1024, global_batch=8, micro_batch=1)
    one, two = _run(without, solo, small), _run(with_mtp, solo, small)
    assert two.memory_breakdown_gib["activations"] > one.memory_breakdown_gib["activations"]
    assert two.memory_breakdown_gib["logits"] == pytest.approx(
        2 * one.memory_breakdown_gib["logits"]
    )


def test_full_recompute_keeps_only_the_mtp_layer_input() -> None:
    model = _mtp("deepseek-v3", 1)
    layout = Layout(tp=2, pp=4, dp=1, ep=2, zero=1, sequence_parallel=True)
    full = TRAINING.model_copy(update={"recompute": "full"})
    layer = model.layer_kinds()[-1][0]
    kept = memory.mtp_activation_bytes(model, layout, full, layer)
    tokens = full.micro_batch * full.seq_len
    assert kept == pytest.approx(2.0 * tokens * model.hidden / layout.tp)
    assert memory.mtp_activation_bytes(_mtp("deepseek-v3", 0), layout, full, layer) == 0.0


def test_the_vector_path_prices_each_rank_as_the_one_layout_path() -> None:
    """figures_many's memory columns (planner/simulate/vector_math.py) on an MTP model over
    pipelines of 1 to 8 ranks: the same peak, breakdown and rank as simulate_step."""
    model = _mtp("deepseek-v3", 1)
    cluster = planner.load_cluster(H100)
    profile = planner.default_profile(cluster)
    space = default_space(model, cluster, (64,), 4096)
    space.schedules = tuple(SCHEDULES)
    tr = Training(seq_len=4096, global_batch=128)
    found = list(legal_layouts(model, cluster, tr, space))
    cands = random.Random(7).sample(found, min(len(found), 120))
    got = VectorPass(BatchSimulator(model, cluster, profile, None), cands, None).run()
    compared = 0
    for (_gpus, layout, training), fig in zip(cands, got, strict=True):
        if isinstance(fig, Exception):
            continue
        want = simulate_step(model, cluster, layout, training, profile, False)
        assert fig.peak_memory_gib == pytest.approx(want.peak_memory_gib, rel=1e-12)
        assert fig.peak_memory_stage == want.peak_memory_stage
        for k, v in want.memory_breakdown_gib.items():
            assert fig.memory_breakdown_gib[k] == pytest.approx(v, rel=1e-12, abs=1e-15)
        compared += 1
    assert compared >= 50
