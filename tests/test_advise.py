"""Advice: each lever re-simulated, ranked (fitting first, then by gain), legal, with memory cost."""

from __future__ import annotations

import json

import pytest
from conftest import LLAMA70B_H100_64

import planner
from planner.advise import Lever, advise
from planner.cli import main as run_cli
from planner.errors import PlannerError

GPUS = 64
ADVISE_70B = ["advise", *LLAMA70B_H100_64]


@pytest.fixture(scope="module")
def case():
    model = planner.load_model("llama3.1-70b")
    cluster = planner.load_cluster("dgx-h100")
    layout = planner.Layout(tp=8, pp=4, dp=2)  # SP off, ZeRO 0
    training = planner.Training(seq_len=8192, global_batch=64, recompute="full")
    return model, cluster, layout, training


@pytest.fixture(scope="module")
def levers(case) -> list[Lever]:
    return advise(*case)


def _by_name(levers: list[Lever]) -> dict[str, Lever]:
    return {lv.name: lv for lv in levers}


def test_selective_recompute_gains_and_costs_memory(levers) -> None:
    lv = _by_name(levers)["recompute selective"]
    assert lv.applicable
    assert lv.gain_pct is not None and lv.gain_pct > 0
    assert lv.memory_change_gib is not None and lv.memory_change_gib > 0
    assert lv.step_time_change_s is not None and lv.step_time_change_s < 0
    assert lv.training.recompute == "selective"


def test_in_place_loss_saves_logits_memory(case, levers) -> None:
    lv = _by_name(levers)["in-place cross-entropy"]
    assert lv.training.cross_entropy == "in_place"
    assert lv.memory_change_gib is not None and lv.memory_change_gib <= 0
    assert lv.gain_pct is not None and lv.gain_pct >= 0
    model, cluster, layout, training = case
    done = training.model_copy(update={"cross_entropy": "in_place"})
    assert "in-place cross-entropy" not in _by_name(advise(model, cluster, layout, done))


def test_sequence_parallel_reduces_memory(levers) -> None:
    lv = _by_name(levers)["sequence parallel"]
    assert lv.layout.sequence_parallel
    assert lv.memory_change_gib is not None and lv.memory_change_gib < 0


def test_levers_sorted_fitting_first_then_by_gain(levers) -> None:
    assert len(levers) >= 8
    fits = [lv.fits for lv in levers]
    assert fits == sorted(fits, reverse=True)  # True before False
    for group in (True, False):
        gains = [lv.gain_pct for lv in levers if lv.fits is group]
        assert gains == sorted(gains, reverse=True)


def test_every_lever_layout_is_legal(case, levers) -> None:
    model, cluster, _, _ = case
    for lv in levers:
        assert lv.applicable
        assert lv.layout.world_size == GPUS
        planner.check_layout(model, cluster, lv.layout, lv.training, gpus=GPUS)


def test_expected_levers_present(levers) -> None:
    names = set(_by_name(levers))
    for name in (
        "interleave vpp=2",
        "interleave vpp=4",
        "sequence parallel",
        "overlap TP comm",
        "recompute selective",
        "recompute none",
        "fp8",
        "micro-batch 2",
        "ZeRO-1",
        "tp4 pp8",
    ):
        assert name in names, name
    # tp 16 does not divide the 8 KV heads: not offered by default
    assert "tp16 pp2" not in names


def test_gain_matches_resimulation(case, levers) -> None:
    model, cluster, layout, training = case
    base = planner.simulate(model, cluster, layout, training)
    lv = _by_name(levers)["interleave vpp=2"]
    rep = planner.simulate(model, cluster, lv.layout, lv.training)
    assert lv.tokens_per_s == pytest.approx(rep.tokens_per_s)
    assert lv.gain_pct == pytest.approx(100 * (rep.tokens_per_s / base.tokens_per_s - 1))
    assert lv.memory_change_gib == pytest.approx(rep.peak_memory_gib - base.peak_memory_gib)
    assert lv.layout.vpp == 2 and lv.layout.pipeline_schedule == "interleaved"


def test_unavailable_levers_listed_with_reason(case) -> None:
    levers = advise(*case, include_unavailable=True)
    bad = [lv for lv in levers if not lv.applicable]
    assert [lv.name for lv in bad] == ["tp16 pp2"]
    assert "kv_heads" in bad[0].reason
    assert levers[-1] is bad[-1]  # unavailable ones last


def test_no_fp8_lever_on_a100(case) -> None:
    model, _, layout, training = case
    a100 = planner.load_cluster("dgx-a100-80gb")
    levers = advise(model, a100, layout, training)
    assert all(lv.name != "fp8" and lv.training.precision != "fp8" for lv in levers)
    listed = _by_name(advise(model, a100, layout, training, include_unavailable=True))
    assert not listed["fp8"].applicable and "fp8" in listed["fp8"].reason


def test_levers_in_effect_are_not_offered(case) -> None:
    model, cluster, layout, training = case
    tuned = layout.model_copy(update={"sequence_parallel": True, "overlap_tp_comm": True})
    names = set(_by_name(advise(model, cluster, tuned, training)))
    assert "sequence parallel" not in names and "overlap TP comm" not in names
    assert "recompute full" not in names


def test_illegal_baseline_raises(case) -> None:
    model, cluster, _, training = case
    with pytest.raises(PlannerError, match="tp"):
        advise(model, cluster, planner.Layout(tp=16, pp=2, dp=2), training)


def test_cli_advise_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(ADVISE_70B) == 0
    out = capsys.readouterr().out
    for text in ("baseline", "recompute selective", "sequence parallel", "tokens/s"):
        assert text in out, text


def test_cli_advise_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(ADVISE_70B + ["--all", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["baseline"]["fits"] is True
    names = [lv["name"] for lv in d["levers"]]
    assert "recompute selective" in names and "tp16 pp2" in names
    first = d["levers"][0]
    assert {"gain_pct", "memory_change_gib", "step_time_change_s", "fits", "layout"} <= set(first)


def test_cli_advise_bad_layout_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [a if a != "8" else "16" for a in ADVISE_70B]  # --tp 16
    assert run_cli(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ")


def test_unavailable_reasons_are_the_rules_messages() -> None:
    """--all says why with the first legality rule the lever breaks (planner.legality)."""
    from planner.legality import first_violation

    model, cluster = planner.load_model("mixtral-8x7b"), planner.load_cluster("dgx-a100-80gb")
    layout = planner.Layout(tp=2, pp=2, dp=8, ep=8)  # pp > 1 without interleaving
    training = planner.Training(seq_len=4096, global_batch=8)  # micro-batch 2 x dp 8 > 8
    listed = _by_name(advise(model, cluster, layout, training, include_unavailable=True))
    for name, rule in (
        ("overlap EP comm", "overlap_ep_needs_interleaving"),
        ("micro-batch 2", "global_batch_divisible"),
        ("fp8", "precision_supported"),
        ("offload 16 layers", "offload_without_pp"),
    ):
        lv = listed[name]
        v = first_violation(model, cluster, lv.layout, lv.training, gpus=layout.world_size)
        assert not lv.applicable and v is not None and v.rule == rule, name
        assert lv.reason == str(v.error())
    assert listed["interleave vpp=2"].applicable  # the rules accept it: pp*vpp divides 32


def test_interleaving_follows_the_rules_when_tp_pp_shift(case) -> None:
    model, cluster, _, training = case  # 80 layers
    base = planner.Layout(tp=4, pp=8, dp=2, vpp=10)  # pp 8 x vpp 10 = 80
    levers = _by_name(advise(model, cluster, base, training, include_unavailable=True))
    assert levers["tp8 pp4"].layout.vpp == 10  # 40 stages <= 82: legal, kept
    assert levers["tp2 pp16"].layout.vpp is None  # 160 stages > 82: dropped
    assert "interleaving dropped" in levers["tp2 pp16"].description


def test_schedule_levers_say_whether_megatron_runs_them(case, levers) -> None:
    by = _by_name(levers)
    for name in ("zb-h1", "zbv", "dualpipev"):
        lv = by[name]
        assert lv.layout.pipeline_schedule == name
        assert "not in Megatron-LM" in lv.description  # none of the three is in Megatron-LM
    assert by["zb-h1"].layout.vpp is None and by["zbv"].layout.vpp == 2
    # ZB-H1 keeps 1F1B's activations in flight and removes part of its bubble
    assert by["zb-h1"].gain_pct > 0
    assert by["zb-h1"].memory_change_gib == pytest.approx(0.0, abs=0.5)


def test_schedule_levers_unavailable_with_the_rules_reason(case) -> None:
    model, cluster, layout, _ = case
    few = planner.Training(seq_len=8192, global_batch=8, recompute="full")  # 4 micro-batches
    listed = _by_name(advise(model, cluster, layout, few, include_unavailable=True))
    assert not listed["dualpipev"].applicable
    assert "needs at least 8 micro-batches" in listed["dualpipev"].reason
    assert "zb-h1" not in _by_name(
        advise(model, cluster, layout.model_copy(update={"schedule": "zb-h1"}), few)
    )
    flat = planner.Layout(tp=8, dp=8)  # pp 1: no schedule lever
    assert not {"zb-h1", "zbv", "dualpipev"} & set(_by_name(advise(model, cluster, flat, few)))


def test_rebalanced_pipeline_edges_are_offered_when_they_gain() -> None:
    """Llama 3.1 8B at PP 4: the last rank carries its layers and the 128k-entry head; the
    lever states a split (Megatron --decoder-first/last-pipeline-num-layers) that runs faster,
    keeps the middle ranks even and is legal."""
    model, cluster = planner.load_model("llama3.1-8b"), planner.load_cluster("dgx-h100")
    layout = planner.Layout(tp=2, pp=4, dp=2, zero=1)
    training = planner.Training(seq_len=4096, global_batch=256)
    lever = _by_name(advise(model, cluster, layout, training))["rebalance pipeline edges"]
    lay = lever.layout
    assert lever.gain_pct > 0 and lever.fits
    assert lay.last_stage_layers < model.layers // layout.pp  # layers moved off the head
    assert (model.layers - lay.first_stage_layers - lay.last_stage_layers) % (layout.pp - 2) == 0
    planner.check_layout(model, cluster, lay, training)
    assert f"--decoder-last-pipeline-num-layers {lay.last_stage_layers}" in lever.description
    # an even split of one layer per rank leaves nothing to move
    flat = planner.Layout(tp=2, pp=1, dp=8, zero=1)
    assert "rebalance pipeline edges" not in _by_name(advise(model, cluster, flat, training))


def test_selective_recompute_modules_do_not_break_the_other_recompute_levers() -> None:
    """A selective baseline with its modules listed: the none / full levers drop the list
    (Training refuses modules without selective recompute)."""
    model, cluster = planner.load_model("llama3.1-8b"), planner.load_cluster("dgx-h100")
    layout = planner.Layout(tp=2, pp=1, dp=8, zero=1)
    training = planner.Training(
        seq_len=4096, global_batch=256, recompute="selective", recompute_modules=["core_attn"]
    )
    names = _by_name(advise(model, cluster, layout, training))
    assert names["recompute none"].training.recompute_modules is None
    assert names["recompute full"].training.recompute == "full"


def test_hybrid_sharding_is_offered_across_scale_up_domains_and_undone_within() -> None:
    """ZeRO over several scale-up domains: a lever shards within each domain (Layout.dp_shard,
    the gathers stay on NVLink, each GPU holds the domain's share of the state); it is
    unavailable under a stack that cannot run it, naming the stack; a hybrid layout is offered
    full sharding."""
    model, cluster = planner.load_model("llama3.1-8b"), planner.load_cluster("dgx-h100")
    training = planner.Training(seq_len=4096, global_batch=64, recompute="full")
    full = planner.Layout(dp=64, zero=3)
    lever = _by_name(advise(model, cluster, full, training))["hybrid sharding"]
    assert lever.applicable and lever.layout.dp_shard == 8
    assert lever.memory_change_gib is not None and lever.memory_change_gib > 0
    refused = advise(
        model, cluster, full, training, include_unavailable=True,
        stack=planner.load_stack("deepspeed-zero"),
    )  # fmt: skip
    hybrid = _by_name(refused)["hybrid sharding"]
    assert not hybrid.applicable and "deepspeed-zero" in hybrid.reason
    back = _by_name(advise(model, cluster, lever.layout, training))["full sharding"]
    assert back.layout.dp_shard is None and back.memory_change_gib < 0
    one_node = planner.Layout(dp=8, zero=3)
    assert "hybrid sharding" not in _by_name(advise(model, cluster, one_node, training))
