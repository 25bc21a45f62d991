"""planner/unknowns.py: the tuned prediction over unstated knobs, its range, and how validate
uses it for an unpublished micro-batch."""

from __future__ import annotations

import itertools
import json

import pytest

import planner
from planner.cli import main
from planner.errors import PlannerError
from planner.unknowns import tuned_prediction

MODEL = planner.load_model("llama3.1-70b")
CLUSTER = planner.load_cluster("dgx-h100")
LAYOUT = planner.Layout(tp=8, pp=4, dp=2, sequence_parallel=True)
TRAIN = planner.Training(seq_len=4096, global_batch=64)
PROFILE = planner.default_profile(CLUSTER)


def test_the_range_contains_the_tuned_prediction_which_is_its_top() -> None:
    t = tuned_prediction(MODEL, CLUSTER, LAYOUT, TRAIN, PROFILE, ("micro_batch", "vpp"))
    rate = t.report.tokens_per_s_per_gpu
    assert t.tokens_per_s_per_gpu_min <= rate == t.tokens_per_s_per_gpu_max
    assert t.settings >= 2 and t.report.fits
    assert t.training.micro_batch == t.picked["micro_batch"]
    assert t.layout.vpp == t.picked["vpp"]
    # every picked value is legal and the tuned one is at least micro-batch 1 without interleaving
    plain = planner.simulate(MODEL, CLUSTER, LAYOUT, TRAIN)
    assert rate >= plain.tokens_per_s_per_gpu


def test_under_a_stack_only_what_it_runs_is_tried() -> None:
    stack = planner.load_stack("nemo")
    t = tuned_prediction(MODEL, CLUSTER, LAYOUT, TRAIN, PROFILE, ("zero",), stack)
    assert t.picked["zero"] in stack.capabilities.zero_stages
    assert t.report.stack == "nemo"


def test_unknown_names_and_nothing_that_fits_are_one_line_errors() -> None:
    with pytest.raises(PlannerError, match="micro_batch, vpp, recompute, zero"):
        tuned_prediction(MODEL, CLUSTER, LAYOUT, TRAIN, PROFILE, ("bogus",))
    huge = planner.Training(seq_len=131072, global_batch=64)
    with pytest.raises(PlannerError, match="fits in memory"):
        tuned_prediction(MODEL, CLUSTER, planner.Layout(dp=64), huge, PROFILE, ("micro_batch",))


SIM_70B = [
    "--model",
    "llama3.1-70b",
    "--cluster",
    "dgx-h100",
    "--gpus",
    "64",
    "--tp",
    "8",
    "--pp",
    "4",
    "--sequence-parallel",
    "--global-batch",
    "64",
]


def test_cli_unknown_reports_the_pick_and_range(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", *SIM_70B, "--unknown", "micro_batch", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    lo, hi = out["tuned"]["tokens_per_s_per_gpu_range"]
    assert lo <= out["tokens_per_s_per_gpu"] <= hi
    assert out["training"]["micro_batch"] == out["tuned"]["picked"]["micro_batch"]
    # one knob: every combination was costed, and the JSON says how many
    assert out["tuned"]["combinations_costed"] == out["tuned"]["combinations"] >= 2


def test_cli_says_when_a_large_space_was_not_costed_whole(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """All five knobs of an MoE model: more than 1,000 combinations, so a spread grid and a
    coordinate search cost part of them, and both the JSON and the table say how many."""
    argv = [
        "simulate",
        "--model",
        "mixtral-8x7b",
        "--cluster",
        "dgx-h100",
        "--gpus",
        "64",
        "--tp",
        "2",
        "--pp",
        "4",
        "--sequence-parallel",
        "--global-batch",
        "512",
        "--unknown",
        "micro_batch,vpp,recompute,zero,ep",
    ]
    assert main([*argv, "--json"]) == 0
    tuned = json.loads(capsys.readouterr().out)["tuned"]
    assert tuned["combinations"] > 1_000 > tuned["combinations_costed"] / 2
    assert tuned["combinations_costed"] < tuned["combinations"]
    assert main(argv) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert f"of {tuned['combinations']:,} combinations costed" in text


def test_a_knob_flag_given_unknown_is_tuned_as_with_unknown(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["simulate", *SIM_70B, "--unknown", "micro_batch,zero", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    flags = ["--micro-batch", "unknown", "--zero", "UNKNOWN", "--json"]
    assert main(["simulate", *SIM_70B, *flags]) == 0
    given = json.loads(capsys.readouterr().out)
    assert given["tuned"] == listed["tuned"]
    assert set(given["tuned"]["picked"]) == {"micro_batch", "zero"}
    assert given["tokens_per_s_per_gpu"] == listed["tokens_per_s_per_gpu"]


def test_commands_that_do_not_tune_refuse_unknown(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["goodput", *SIM_70B, "--recompute", "unknown"]) != 0
    err = capsys.readouterr().err
    assert "--recompute" in err and "planner simulate" in err and "Traceback" not in err


def test_validate_tunes_every_unstated_knob() -> None:
    from planner.resources import shipped_cases
    from planner.validate import validate_file

    result = validate_file(shipped_cases()["public"], planner.default_profile)
    ranged = [c for c in result["cases"] if c.get("predicted_range_tokens_per_s_per_gpu")]
    assert ranged
    for c in ranged:
        lo, hi = c["predicted_range_tokens_per_s_per_gpu"]
        assert lo <= c["predicted_tokens_per_s_per_gpu"] <= hi + 0.01
        assert "not stated, tuned:" in c["reason"]
        assert c["in_range"] == (lo <= c["measured_tokens_per_s_per_gpu"] <= hi)
    s = result["summary"]
    assert s["n_ranged"] == len([c for c in ranged if c["status"] == "ok"])
    assert 0 <= s["range_coverage_pct"] <= 100


def test_a_knob_named_twice_is_one_knob() -> None:
    once = tuned_prediction(MODEL, CLUSTER, LAYOUT, TRAIN, PROFILE, ("micro_batch",))
    twice = tuned_prediction(MODEL, CLUSTER, LAYOUT, TRAIN, PROFILE, ("micro_batch", "micro_batch"))
    assert twice.settings == once.settings and twice.picked == once.picked


def test_an_unknown_recompute_ranges_over_the_stacks_selective_module_sets() -> None:
    """Which submodules selective recompute re-ran is as unknown as its level: under a stack
    that takes a module list (Megatron-Core --recompute-modules) the knob also tries the
    default set widened one submodule at a time. DeepSeek-V3 on 2,048 H800s at PP 16 and
    EP 64 fits neither without recompute nor with the core attention alone; the norms and the
    MLA up-projections recomputed fit, faster than full recompute, which the range keeps."""
    model, cluster = planner.load_model("deepseek-v3"), planner.load_cluster("hgx-h800")
    layout = planner.Layout(pp=16, dp=128, ep=64, zero=1)
    training = planner.Training(seq_len=4096, global_batch=15360, micro_batch=1, precision="fp8")
    profile = planner.default_profile(cluster)
    stack = planner.load_stack("megatron-core")
    t = tuned_prediction(model, cluster, layout, training, profile, ("recompute",), stack)
    assert t.picked["recompute"] == "selective"
    assert t.picked["recompute_modules"] == "core_attn, layernorm, mla_up_proj"
    assert t.training.recompute_modules == ("core_attn", "layernorm", "mla_up_proj")
    full = planner.simulate(
        model, cluster, layout, training.with_changes(recompute="full"), stack=stack
    )
    assert t.report.tokens_per_s_per_gpu > full.tokens_per_s_per_gpu
    assert t.tokens_per_s_per_gpu_min <= full.tokens_per_s_per_gpu * (1 + 1e-9)
    # a stack without a module list tries its levels only
    lm = planner.load_stack("megatron-lm-2022")
    gpt = planner.load_model("gpt3-175b")
    a100 = planner.load_cluster("dgx-a100-80gb")
    t2 = tuned_prediction(
        gpt,
        a100,
        planner.Layout(tp=8, pp=8, dp=1, zero=1),
        planner.Training(seq_len=2048, global_batch=64, micro_batch=1, precision="fp16"),
        planner.default_profile(a100),
        ("recompute",),
        lm,
    )
    assert "recompute_modules" not in t2.picked


def test_an_unknown_micro_batch_tries_every_divisor_of_the_per_replica_batch() -> None:
    """A run steps with whole micro-batches of its per-replica batch (global_batch / dp), any
    divisor, not only powers of two: MosaicML's MPT 7B on 512 H100s ran 6 sequences per GPU
    (global batch 3,072), which a power-of-two grid cannot reach (it stops at 2)."""
    from planner.stacks import apply_stack
    from planner.unknowns import MAX_TUNED_MICRO_BATCH, micro_batch_choices

    layout = planner.Layout(dp=512, zero=3)
    training = planner.Training(seq_len=2048, global_batch=3072)
    assert micro_batch_choices(layout, training) == (1, 2, 3, 6)
    big = planner.Training(seq_len=2048, global_batch=720 * 8)
    choices = micro_batch_choices(planner.Layout(dp=8), big)
    assert 5 in choices and 9 in choices and max(choices) <= MAX_TUNED_MICRO_BATCH
    assert all(720 % c == 0 for c in choices)
    model, cluster = planner.load_model("llama3.1-8b"), planner.load_cluster("dgx-h100")
    stack = planner.load_stack("llm-foundry")
    t = tuned_prediction(
        model, cluster, layout, training, planner.default_profile(cluster), ("micro_batch",), stack
    )
    assert t.picked["micro_batch"] in (3, 6)  # larger than any power of two that divides 6
    two = apply_stack(stack, model, layout, training.with_changes(micro_batch=2))
    at_two = planner.simulate(model, cluster, *two, stack=stack)
    assert t.report.tokens_per_s_per_gpu > at_two.tokens_per_s_per_gpu


def test_a_batch_with_many_divisors_is_tuned_over_a_spread_of_them() -> None:
    """720,720 sequences per replica have 38 divisors up to 64: with the interleaving depth and
    the recompute also unknown that would pass the enumeration's bound, so the micro-batches
    tried are a log-spaced spread of them, the smallest and the largest kept, never an error."""
    from planner.unknowns import MAX_COMBINATIONS, micro_batch_choices, spread

    assert spread((1, 2, 3, 6), 8) == (1, 2, 3, 6)
    few = spread(tuple(range(1, 65)), 5)
    assert len(few) <= 5 and few[0] == 1 and few[-1] == 64
    layout = planner.Layout(tp=8, pp=4, dp=1, sequence_parallel=True)
    training = planner.Training(seq_len=4096, global_batch=720720)
    assert len(micro_batch_choices(layout, training)) > MAX_COMBINATIONS // (6 * 9)
    stack = planner.load_stack("megatron-core")
    t = tuned_prediction(
        MODEL, CLUSTER, layout, training, PROFILE, ("micro_batch", "vpp", "recompute"), stack
    )
    assert t.legal <= MAX_COMBINATIONS and t.report.fits
    assert 720720 % t.picked["micro_batch"] == 0


def test_an_unknown_expert_parallel_size_is_tuned_over_the_legal_ones() -> None:
    """EP of an MoE model, unstated: every divisor of the experts that divides tp x dp x cp is
    tried; a dense model has only EP 1; schema 1 reads a null ep of an MoE case as unstated."""
    from planner.unknowns import ep_choices

    moe = planner.load_model("mixtral-8x7b")
    layout = planner.Layout(tp=2, pp=1, dp=8, sequence_parallel=True)
    assert ep_choices(moe, layout) == (1, 2, 4, 8)
    assert ep_choices(MODEL, layout) == (1,)
    tr = planner.Training(seq_len=4096, global_batch=64, micro_batch=1)
    t = tuned_prediction(moe, CLUSTER, layout, tr, PROFILE, ("ep",))
    assert t.picked["ep"] in (1, 2, 4, 8) and t.layout.ep == t.picked["ep"]
    assert t.tokens_per_s_per_gpu_min <= t.report.tokens_per_s_per_gpu
    assert t.report.tokens_per_s_per_gpu == t.tokens_per_s_per_gpu_max
    stated = planner.simulate(moe, CLUSTER, layout.with_changes(ep=t.picked["ep"]), tr)
    assert stated.tokens_per_s_per_gpu == pytest.approx(t.report.tokens_per_s_per_gpu)


def test_schema_1_tunes_a_null_expert_parallel_size_of_an_moe_case() -> None:
    from planner.validate import run_case

    moe = planner.load_model("mixtral-8x7b")
    keys = {"name", "layers", "hidden", "ffn_hidden", "activation", "heads", "kv_heads"}
    keys |= {"head_dim", "vocab", "tied_embeddings", "moe", "mla"}
    case = {
        "id": "mixtral",
        "source": "test",
        "quality": "partial",
        "model": moe.model_dump(mode="json", include=keys),
        "cluster": "dgx-h100",
        "num_gpus": 16,
        "framework": "megatron-core",
        "layout": {"tp": 2, "pp": 1, "dp": 8, "ep": None, "zero": 1},
        "training": {"seq_len": 4096, "global_batch": 64, "micro_batch": 1, "recompute": "none"},
        "measured": {"tokens_per_s_per_gpu": 5000.0},
    }
    row = run_case(case, planner.default_profile, 1)
    assert row["status"] == "ok" and "not stated, tuned: ep" in row["reason"], row["reason"]
    lo, hi = row["predicted_range_tokens_per_s_per_gpu"]
    assert lo <= row["predicted_tokens_per_s_per_gpu"] <= hi


def test_a_space_past_the_bound_is_searched_on_a_spread_grid_then_one_knob_at_a_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Five unknown knobs of an MoE model: with the bound lowered below the full space, the
    search costs a log-spread grid and then walks one knob at a time; it says it was not
    exhaustive, costs fewer combinations than the full space, and finds a setting at least as
    fast as the best on the spread grid alone and no faster than the exhaustive best."""
    import planner.unknowns as unknowns

    moe = planner.load_model("mixtral-8x7b")
    layout = planner.Layout(tp=2, pp=4, dp=8, sequence_parallel=True)
    tr = planner.Training(seq_len=4096, global_batch=512)
    knobs = ("micro_batch", "vpp", "recompute", "zero", "ep")
    stack = planner.load_stack("megatron-core")
    monkeypatch.setattr(unknowns, "MAX_COMBINATIONS", 10_000)
    full = tuned_prediction(moe, CLUSTER, layout, tr, PROFILE, knobs, stack)
    assert full.exhaustive and full.searched == full.combinations > 1_000
    monkeypatch.setattr(unknowns, "MAX_COMBINATIONS", 1_000)
    grids = unknowns.thinned([unknowns._choices(k, stack, moe, layout, tr) for k in knobs], knobs)
    assert min(len(g) for g in grids) >= 2
    part = tuned_prediction(moe, CLUSTER, layout, tr, PROFILE, knobs, stack)
    assert not part.exhaustive and part.searched < part.combinations == full.combinations
    assert part.report.fits
    rate = part.report.tokens_per_s_per_gpu
    assert rate <= full.report.tokens_per_s_per_gpu
    assert full.tokens_per_s_per_gpu_min <= part.tokens_per_s_per_gpu_min <= rate
    for k, grid in zip(knobs, grids, strict=True):  # the spread grid keeps each grid's ends
        whole = unknowns._choices(k, stack, moe, layout, tr)
        assert grid[0] == whole[0] and grid[-1] == whole[-1]
    spread_best = max(
        (
            got[0].tokens_per_s_per_gpu
            for values in itertools.product(*grids)
            if (
                got := unknowns._setting(
                    moe, CLUSTER, layout, tr, PROFILE, stack, None, knobs, values
                )
            )
            is not None
            and got[0].fits
        ),
        default=0.0,
    )
    assert rate >= spread_best > 0


def test_the_lightest_setting_is_the_least_memory() -> None:
    """ZeRO at the stack's highest stage, micro-batch 1, EP at its largest, no interleaving:
    no other setting of those knobs needs less memory per GPU."""
    from planner.unknowns import lightest_setting

    moe = planner.load_model("mixtral-8x7b")
    layout = planner.Layout(tp=2, pp=4, dp=8, sequence_parallel=True)
    tr = planner.Training(seq_len=4096, global_batch=512, recompute="full")
    stack = planner.load_stack("megatron-core")
    knobs = ("micro_batch", "vpp", "zero", "ep")
    lay, trl, picked = lightest_setting(moe, layout, tr, knobs, stack)
    assert picked == {"micro_batch": 1, "vpp": None, "zero": 3, "ep": 8}
    assert (lay.zero, lay.ep, lay.vpp, trl.micro_batch) == (3, 8, None, 1)
    light = planner.simulate(moe, CLUSTER, lay, trl, PROFILE, stack=stack).peak_memory_gib
    t = tuned_prediction(moe, CLUSTER, layout, tr, PROFILE, knobs, stack)
    assert light <= t.report.peak_memory_gib
    # the highest stage the stack runs with the layout: DeepSpeed's pipeline engine stops at 1
    deepspeed = planner.load_stack("megatron-deepspeed")
    assert lightest_setting(MODEL, LAYOUT, TRAIN, ("zero",), deepspeed)[2] == {"zero": 1}
    flat = planner.Layout(tp=8, dp=8, sequence_parallel=True)
    assert lightest_setting(MODEL, flat, TRAIN, ("zero",), deepspeed)[2] == {"zero": 3}
