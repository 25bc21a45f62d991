"""Full recompute of a share of the layers (Training.recompute_fraction: Megatron's block method,
torchtitan's every-k-th-layer AC, InternEvo's checkpoint fraction).

The recomputed share of each chunk's layers keeps only its input and re-runs its forward in
backward; the rest keep all their activations and re-run nothing (planner/simulate/layers.py,
planner/costs/memory.py)."""

from __future__ import annotations

import random
import tomllib

import pytest
import yaml
from pydantic import ValidationError

import planner
from planner.advise import advise
from planner.errors import PlannerError
from planner.fixes import memory_fixes
from planner.legality import check_layout
from planner.search import default_space
from planner.search.dialects.deepspeed import deepspeed_json
from planner.search.export import exports
from planner.search.space import legal_layouts, stack_space
from planner.simulate import simulate_step
from planner.simulate.batch import BatchSimulator
from planner.simulate.vector import VectorPass
from planner.specs.layout import Layout, Training
from planner.unknowns import tuned_prediction

MODEL, CLUSTER = "llama3.1-70b", "dgx-h100"
LAYOUT = Layout(tp=4, pp=4, dp=4, sequence_parallel=True, zero=1)


def _run(
    share: float | None,
    recompute: str = "full",
    stack: str | None = "megatron-core",
    layout: Layout = LAYOUT,
):
    m, c = planner.load_model(MODEL), planner.load_cluster(CLUSTER)
    tr = Training(
        seq_len=8192,
        global_batch=128,
        recompute=recompute,
        recompute_fraction=share if recompute == "full" else None,
    )
    return simulate_step(
        m, c, layout, tr, planner.default_profile(c), stack=stack and planner.load_stack(stack)
    )


def test_a_share_lies_between_no_recompute_and_every_layer() -> None:
    """Activations and the re-run forward are linear in the share; all of it is full recompute
    exactly, and each larger share is slower and lighter."""
    none, full = _run(None, "none"), _run(None)
    assert _run(1.0).tokens_per_s_per_gpu == full.tokens_per_s_per_gpu
    assert _run(1.0).peak_memory_gib == full.peak_memory_gib
    act = "activations"
    previous = none
    for share in (0.25, 0.5, 0.75):
        rep = _run(share)
        want = none.memory_breakdown_gib[act] + share * (
            full.memory_breakdown_gib[act] - none.memory_breakdown_gib[act]
        )
        # the one layer full recompute rebuilds at a time sits on top of either
        assert rep.memory_breakdown_gib[act] == pytest.approx(want, rel=0.02)
        assert rep.time_breakdown_s["recompute"] == pytest.approx(
            share * full.time_breakdown_s["recompute"], rel=1e-9
        )
        assert rep.tokens_per_s_per_gpu < previous.tokens_per_s_per_gpu
        assert rep.peak_memory_gib < previous.peak_memory_gib
        assert rep.hfu_pct == pytest.approx(full.hfu_pct, rel=0.03)  # the executed FLOPs' rate
        previous = rep
    assert full.tokens_per_s_per_gpu < previous.tokens_per_s_per_gpu


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"recompute": "selective", "recompute_fraction": 0.5}, "recompute_fraction"),
        ({"recompute": "none", "recompute_fraction": 0.5}, "recompute_fraction"),
        ({"recompute": "full", "recompute_fraction": 0.0}, "recompute_fraction"),
        ({"recompute": "full", "recompute_fraction": 1.5}, "recompute_fraction"),
    ],
)
def test_a_fraction_outside_full_recompute_or_0_to_1_is_refused(changes: dict, field: str) -> None:
    with pytest.raises(ValidationError) as err:
        Training(seq_len=4096, global_batch=8, **changes)
    assert field in str(err.value)


def test_a_stack_without_partial_recompute_refuses_it_by_name() -> None:
    with pytest.raises(PlannerError) as err:
        _run(0.5, stack="deepspeed-zero", layout=Layout(dp=64, zero=3))
    assert err.value.field == "training.recompute_fraction"
    assert "deepspeed-zero" in str(err.value)
    assert _run(None, stack="deepspeed-zero", layout=Layout(dp=64, zero=3)).fits
    for stack in ("megatron-core", "nemo", "megatron-bridge", "torchtitan-eager", "hai-llm"):
        assert planner.load_stack(stack).capabilities.partial_recompute


def test_checkpoint_offload_needs_every_layer_checkpointed() -> None:
    m, c = planner.load_model("llama3.1-8b"), planner.load_cluster(CLUSTER)
    tr = Training(
        seq_len=4096,
        global_batch=64,
        recompute="full",
        recompute_fraction=0.5,
        checkpoint_offload=True,
    )
    with pytest.raises(PlannerError) as err:
        check_layout(m, c, Layout(dp=8), tr)
    assert err.value.field == "training.checkpoint_offload"
    assert "recompute_fraction" in str(err.value)


def test_the_mtp_layers_are_not_recomputed_under_the_block_method() -> None:
    """Megatron-Core skips the MTP layers under recompute_method block (multi_token_prediction.py):
    their activations are what they keep without recompute, whatever the share."""
    from planner.costs import memory

    m = planner.load_model("deepseek-v3")
    lay = Layout(tp=2, ep=8, dp=8, pp=4, sequence_parallel=True)
    base = {"seq_len": 4096, "global_batch": 64}
    layer = m.layer_kinds()[-1][0]
    none = memory.mtp_activation_bytes(m, lay, Training(**base), layer)
    for share in (0.25, 0.75):
        tr = Training(**base, recompute="full", recompute_fraction=share)
        assert memory.mtp_activation_bytes(m, lay, tr, layer) == none


def test_batch_and_vector_paths_equal_the_one_layout_path() -> None:
    rng = random.Random(7)
    for model_id in ("llama3.1-70b", "mixtral-8x7b"):
        model, cluster = planner.load_model(model_id), planner.load_cluster(CLUSTER)
        stack, profile = planner.load_stack("megatron-core"), planner.default_profile(cluster)
        space = stack_space(default_space(model, cluster, (64,), 4096), stack)
        found = list(legal_layouts(model, cluster, Training(seq_len=4096, global_batch=256), space))
        cands = [
            (
                g,
                lay,
                tr.with_changes(recompute="full", recompute_modules=None, recompute_fraction=f),
            )
            for (g, lay, tr), f in zip(
                rng.sample(found, 40), rng.choices((0.25, 0.3, 0.5, 0.75), k=40), strict=True
            )
        ]
        sim = BatchSimulator(model, cluster, profile, stack)
        got = VectorPass(BatchSimulator(model, cluster, profile, stack), cands, None).run()
        for (_, lay, tr), vec in zip(cands, got, strict=True):
            want = simulate_step(model, cluster, lay, tr, profile, False, stack)
            one = sim.figures(lay, tr)
            for fig in (one, vec):
                assert fig.step_time_s == pytest.approx(want.step_time_s, rel=1e-9)
                assert fig.peak_memory_gib == pytest.approx(want.peak_memory_gib, rel=1e-9)


def test_an_unknown_recompute_is_tuned_over_the_shares_the_stack_runs() -> None:
    """70B on 64 H100 at TP4 PP4: no recompute does not fit, a quarter of the layers does and
    is the fastest; a stack without partial recompute tunes over whole levels only."""
    m, c = planner.load_model(MODEL), planner.load_cluster(CLUSTER)
    tr = Training(seq_len=8192, global_batch=128, micro_batch=1)
    prof = planner.default_profile(c)
    core = tuned_prediction(
        m, c, LAYOUT, tr, prof, ("recompute",), planner.load_stack("megatron-core")
    )
    assert core.picked == {"recompute": "full", "recompute_fraction": 0.25}
    assert core.report.tokens_per_s_per_gpu == pytest.approx(_run(0.25).tokens_per_s_per_gpu)
    hf = planner.load_stack("deepspeed-zero")
    whole = tuned_prediction(m, c, Layout(dp=64, zero=3), tr, prof, ("recompute",), hf)
    assert whole.picked == {"recompute": "full"}


def test_memory_fixes_and_advise_offer_a_share() -> None:
    m, c = planner.load_model(MODEL), planner.load_cluster(CLUSTER)
    tr = Training(seq_len=8192, global_batch=128, micro_batch=1)
    stack = planner.load_stack("megatron-core")
    fixes = memory_fixes(m, c, LAYOUT, tr, stack=stack, limit=50)
    shares = [f for f in fixes if f.flags == ("--recompute full --recompute-fraction 0.25",)]
    assert shares and shares[0].training.recompute_fraction == 0.25
    whole = [f for f in fixes if f.flags == ("--recompute full",)]
    assert whole and shares[0].tokens_per_s_per_gpu > whole[0].tokens_per_s_per_gpu
    full = tr.with_changes(recompute="full")
    levers = {lv.name: lv for lv in advise(m, c, LAYOUT, full, stack=stack)}
    quarter = levers["recompute full on 25 %"]
    assert quarter.fits and quarter.gain_pct > 0 and quarter.memory_change_gib > 0
    assert "--recompute-num-layers 5" in quarter.description  # 20 layers per stage


def test_the_exports_write_the_share_in_each_dialect() -> None:
    m = planner.load_model(MODEL)
    tr = Training(seq_len=8192, global_batch=128, recompute="full", recompute_fraction=0.3)
    lay = Layout(tp=4, pp=4, dp=4, vpp=2, sequence_parallel=True, zero=1)
    args = exports(m, 64, lay, tr)["megatron_args"].splitlines()
    # 80 layers over 4 stages x 2 chunks: 10 a chunk, 3 of them recomputed
    assert [a for a in args if a.startswith("--recompute-") and "granularity" not in a] == [
        "--recompute-method block",
        "--recompute-num-layers 3",
    ]
    bridge = exports(m, 64, lay, tr, planner.load_stack("megatron-bridge"))
    text = bridge["megatron_bridge_overrides"]
    assert "recompute_method=block" in text and "recompute_num_layers=3" in text
    inexact = tr.with_changes(recompute_fraction=0.25)  # 2.5 of 10: written as 2 or 3, said
    args = exports(m, 64, lay, inexact)["megatron_args"]
    assert any(line.startswith("# training.recompute_fraction = 0.25") for line in args.split("\n"))
    flat = Layout(dp=64, zero=3)
    toml = tomllib.loads(exports(m, 64, flat, tr)["torchtitan_toml"])
    assert toml["activation_checkpoint"] == {"mode": "selective", "selective_ac_option": "3"}
    foundry = exports(m, 64, flat, tr, planner.load_stack("llm-foundry"))["llm_foundry_yaml"]
    target = yaml.safe_load(foundry)["model"]["activation_checkpointing_target"]
    assert target == {"mptblock": "first-24"}  # 0.3 of 80 blocks
    assert "NOT EXPRESSED" in deepspeed_json(m, 64, flat, tr, with_megatron=False)
