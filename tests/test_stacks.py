"""Software stacks (planner/stacks.py, stacks/*.yaml): each loads and cites its sources, its
defaults fill only what the caller left unset, what it cannot run is refused by name, and
switching stacks moves the figures the way the mechanisms say."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest
import yaml

import planner
from planner.cli import main
from planner.costs import elementwise
from planner.errors import PlannerError
from planner.resources import STACKS_DIR
from planner.specs.layout import Layout, Training
from planner.specs.loading import shipped_ids
from planner.stacks import DEFAULT_STACK, apply_stack, model_violations, stack_violation

STACKS = shipped_ids(STACKS_DIR)
MODEL = planner.load_model("llama3.1-8b")
CLUSTER = planner.load_cluster("dgx-h100")
TRAIN = Training(seq_len=4096, global_batch=64, micro_batch=1)
SIMULATE_8B = [
    "simulate",
    "--model",
    "llama3.1-8b",
    "--cluster",
    "dgx-h100",
    "--gpus",
    "8",
    "--global-batch",
    "64",
]


def _tokens(stack: str, layout: Layout, training: Training = TRAIN) -> float:
    return planner.simulate(MODEL, CLUSTER, layout, training, stack=stack).tokens_per_s_per_gpu


def test_at_least_the_issue_s_stacks_ship_and_cite_sources() -> None:
    assert len(STACKS) >= 11 and DEFAULT_STACK in STACKS
    for stack_id in STACKS:
        text = (STACKS_DIR / f"{stack_id}.yaml").read_text()
        stack = planner.load_stack(stack_id)
        assert stack.name == stack_id and stack.sources
        # the one number of a stack says where it comes from (a source or "assumption")
        line = next(x for x in text.splitlines() if "reserved_overhead:" in x)
        assert "#" in line, (stack_id, line)
        assert yaml.safe_load(text)["kernels"]  # plain YAML, no tags


def test_the_default_stack_is_the_planner_s_defaults() -> None:
    """Megatron-Core's values are the field defaults: with or without it, the same step."""
    for layout in (Layout(dp=8), Layout(tp=2, dp=4, sequence_parallel=True), Layout(pp=2, dp=4)):
        bare = planner.simulate(MODEL, CLUSTER, layout, TRAIN)
        with_stack = planner.simulate(MODEL, CLUSTER, layout, TRAIN, stack=DEFAULT_STACK)
        assert with_stack.step_time_s == bare.step_time_s
        assert with_stack.peak_memory_gib == bare.peak_memory_gib
        assert with_stack.stack == DEFAULT_STACK and bare.stack == ""


def test_defaults_fill_only_unset_fields() -> None:
    nemo = planner.load_stack("nemo")
    layout = Layout(tp=2, dp=4, sequence_parallel=True)
    filled, training = apply_stack(nemo, MODEL, layout, TRAIN)
    assert filled.overlap_tp_comm and training.grad_reduce_dtype == "bf16"
    explicit = Layout(tp=2, dp=4, sequence_parallel=True, overlap_tp_comm=False)
    kept, _ = apply_stack(nemo, MODEL, explicit, TRAIN)
    assert kept.overlap_tp_comm is False
    again = apply_stack(nemo, MODEL, filled, training)
    assert again == (filled, training)


def test_eager_is_slower_than_compiled_and_cuda_graphs_never_wait_on_the_host() -> None:
    layout = Layout(dp=8)
    eager, compiled = _tokens("torchtitan-eager", layout), _tokens("torchtitan-compiled", layout)
    assert eager < compiled
    small = Training(seq_len=1024, global_batch=8, micro_batch=1)
    moe = planner.load_model("qwen3-30b-a3b")
    host = {}
    for mode in ("eager", "compiled", "cuda_graphs"):
        t = small.model_copy(update={"execution": mode})
        rep = planner.simulate(moe, CLUSTER, Layout(dp=8, ep=8), t)
        host[mode] = rep.time_breakdown_s.get("host_overhead", 0.0)
    assert host["eager"] > host["compiled"] > host["cuda_graphs"] == 0.0


def test_unfused_chains_cost_their_extra_passes() -> None:
    layer = MODEL.layer_kinds()[0][0]
    fused = elementwise.layer_elementwise(MODEL, Layout(), 4096.0, layer, (), None)
    norm = elementwise.layer_elementwise(
        MODEL, Layout(), 4096.0, layer, (), None, unfused=("norm",)
    )
    # 5 extra passes over the hidden state of both blocks, 2-byte activations
    assert norm.fwd_bytes - fused.fwd_bytes == 5 * 4096 * MODEL.hidden * 2 * 2
    every = elementwise.layer_elementwise(
        MODEL, Layout(), 4096.0, layer, (), None, unfused=("norm", "glu", "rope")
    )
    assert every.fwd_bytes > norm.fwd_bytes and every.fwd_kernels > norm.fwd_kernels


def test_reserved_is_at_least_allocated_and_fsdp_stacks_report_reserved() -> None:
    gpt = planner.load_model("gpt3-1.3b")  # for the stacks whose code predates Llama's model
    for stack_id in STACKS:
        stack = planner.load_stack(stack_id)
        model = gpt if model_violations(stack, MODEL) else MODEL
        layout = Layout(dp=8, zero=stack.capabilities.zero_stages[-1])
        rep = planner.simulate(model, CLUSTER, layout, TRAIN, stack=stack)
        assert rep.peak_reserved_gib >= rep.peak_memory_gib
    assert planner.load_stack("torchtitan-eager").memory.reported_peak == "reserved"


@pytest.mark.parametrize(
    ("stack", "layout", "field"),
    [
        ("deepspeed-zero", Layout(tp=2, dp=4), "layout.tp"),
        ("llm-foundry", Layout(pp=2, dp=4, zero=3), "layout.pp"),
        ("nemo", Layout(dp=8, zero=2), "layout.zero"),
        ("megatron-core", Layout(pp=2, dp=4, schedule="zbv", vpp=2), "layout.schedule"),
    ],
)
def test_what_a_stack_cannot_run_is_refused_by_name(stack, layout, field) -> None:
    spec = planner.load_stack(stack)
    err = stack_violation(spec, layout, TRAIN)
    assert err is not None and err.field == field and stack in err.message
    with pytest.raises(PlannerError, match=stack):
        planner.simulate(MODEL, CLUSTER, layout, TRAIN, stack=spec)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"activation": "swiglu"}, "model.activation"),
        ({"kv_heads": 8}, "model.kv_heads"),
        ({"tied_embeddings": False}, "model.tied_embeddings"),
    ],
)
def test_a_legacy_stack_refuses_a_model_its_code_could_not_express(change, field) -> None:
    gpt = planner.load_model("gpt3-175b")  # GeLU, multi-head, tied: what the 2021 code ran
    assert not model_violations(planner.load_stack("megatron-lm-2021"), gpt)
    # kv_heads unset means one K/V head per query head (ModelSpec.n_kv_heads): multi-head
    unset = gpt.model_copy(update={"kv_heads": None})
    assert not model_violations(planner.load_stack("megatron-lm-2021"), unset)
    model = gpt.model_copy(update=change)
    a100 = planner.load_cluster("dgx-a100-80gb")
    layout, training = Layout(tp=8, pp=8, dp=1), Training(seq_len=2048, global_batch=64)
    for legacy in ("megatron-lm-2021", "megatron-lm-2022", "megatron-deepspeed-2022"):
        err = model_violations(planner.load_stack(legacy), model)[0]
        assert err.field == field and legacy in err.message
        with pytest.raises(PlannerError, match=legacy):
            planner.simulate(model, a100, layout, training, stack=legacy)
    # the code base that came after runs it; no layout makes the old one run it
    assert planner.simulate(model, a100, layout, training, stack="megatron-core").stack == (
        "megatron-core"
    )
    from planner.search import search

    legacy = planner.load_stack("megatron-lm-2021")
    with pytest.raises(PlannerError, match="megatron-lm-2021"):
        search(model, a100, 64, 64, seq_len=2048, stack=legacy, method="exhaustive")
    from planner.simulate.batch import BatchSimulator  # the search's path refuses it too

    sim = BatchSimulator(model, a100, planner.default_profile(a100), legacy)
    with pytest.raises(PlannerError) as err:
        sim.figures(layout, training)
    assert err.value.field == field


def test_cli_stack_errors_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    base = SIMULATE_8B
    assert main([*base, "--stack", "no-such-stack"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "torchtitan-eager" in err
    assert main([*base, "--stack", "deepspeed-zero", "--tp", "2"]) == 2
    err = capsys.readouterr().err
    assert "deepspeed-zero" in err and "layout.tp" in err


def test_cli_turns_a_stack_default_off(capsys: pytest.CaptureFixture[str]) -> None:
    base = [*SIMULATE_8B, "--tp", "2", "--sequence-parallel", "--stack", "nemo", "--json"]
    import json

    assert main(base) == 0
    on = json.loads(capsys.readouterr().out)
    assert main([*base, "--no-overlap-tp"]) == 0
    off = json.loads(capsys.readouterr().out)
    assert on["layout"]["overlap_tp_comm"] and not off["layout"]["overlap_tp_comm"]
    assert on["stack"] == "nemo" and on["peak_reserved_gib"] >= on["peak_memory_gib"]


def test_a_stack_file_path_loads(tmp_path: Path) -> None:
    data = yaml.safe_load((STACKS_DIR / "nemo.yaml").read_text())
    data["name"] = "my-nemo"
    data["execution"]["mode"] = "cuda_graphs"
    path = tmp_path / "my-nemo.yaml"
    path.write_text(yaml.safe_dump(data))
    rep = planner.simulate(MODEL, CLUSTER, Layout(dp=8), TRAIN, stack=str(path))
    assert rep.stack == "my-nemo"


def test_every_stack_on_random_legal_layouts_is_finite() -> None:
    rng = random.Random(20261202)
    models = [planner.load_model(m) for m in ("llama3.1-8b", "mixtral-8x7b", "jamba-v0.1")]
    checked = 0
    for _ in range(300):
        stack = planner.load_stack(rng.choice(STACKS))
        model = rng.choice(models)
        tp, pp = rng.choice((1, 2, 4)), rng.choice((1, 2))
        zero, dp = rng.choice(stack.capabilities.zero_stages), 16 // (tp * pp)
        hybrid = zero and dp > 2 and stack.capabilities.hybrid_shard and rng.random() < 0.3
        layout = Layout(
            tp=tp,
            pp=pp,
            dp=dp,
            zero=zero,
            dp_shard=2 if hybrid else None,
            ep=2 if model.moe and stack.capabilities.ep else 1,
            sequence_parallel=tp > 1 and rng.random() < 0.5,
        )
        training = Training(
            seq_len=rng.choice((1024, 4096)),
            global_batch=64,
            micro_batch=rng.choice((1, 2)),
            recompute=rng.choice(stack.capabilities.recompute),
        )
        try:
            rep = planner.simulate(model, CLUSTER, layout, training, stack=stack)
        except PlannerError:
            continue  # illegal for this model or stack: refused by name, not a report
        figures = [
            rep.step_time_s,
            rep.tokens_per_s,
            rep.mfu_pct,
            rep.peak_memory_gib,
            rep.peak_reserved_gib,
            *rep.time_breakdown_s.values(),
            *rep.memory_breakdown_gib.values(),
        ]
        assert all(math.isfinite(x) and x >= 0 for x in figures), (stack.name, layout)
        checked += 1
    assert checked > 100


def test_search_under_a_stack_searches_only_what_it_runs() -> None:
    from planner.search import search

    stack = planner.load_stack("torchtitan-compiled")
    result = search(MODEL, CLUSTER, 16, 64, seq_len=2048, stack=stack, method="exhaustive")
    top = result.top(20)
    assert top and all(e.layout.zero in (0, 2, 3) for e in top)
    assert all(e.report.stack == "torchtitan-compiled" for e in top)
    assert any("torchtitan-compiled" in n for n in result.notes)
    ds = planner.load_stack("deepspeed-zero")
    found = search(MODEL, CLUSTER, 16, 64, seq_len=2048, stack=ds, method="exhaustive")
    assert found.ranked and all(e.layout.tp == 1 and e.layout.pp == 1 for e in found.ranked)


def test_advise_under_a_stack_marks_what_it_cannot_run() -> None:
    from planner.advise import advise

    stack = planner.load_stack("deepspeed-zero")
    levers = advise(MODEL, CLUSTER, Layout(dp=8), TRAIN, include_unavailable=True, stack=stack)
    fp8 = next(lever for lever in levers if lever.name == "fp8")
    assert fp8.tokens_per_s is None and "deepspeed-zero" in fp8.reason
    plain = advise(MODEL, CLUSTER, Layout(dp=8), TRAIN, include_unavailable=True)
    assert next(lever for lever in plain if lever.name == "fp8").tokens_per_s


def test_stack_none_costs_a_schedule_no_stack_runs(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [*SIMULATE_8B, "--pp", "4", "--dp", "2", "--schedule", "zb-h1"]
    assert main(argv) == 2
    assert "--stack none" in capsys.readouterr().err
    assert main([*argv, "--stack", "none", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["layout"]["schedule"] == "zb-h1" and out["stack"] == ""


def test_the_stack_field_lists_are_the_fields_a_stack_sets() -> None:
    from planner.stacks import (
        STACK_LAYOUT_FIELDS,
        STACK_TRAINING_FIELDS,
        layout_defaults,
        training_defaults,
    )

    selective = Training(seq_len=4096, global_batch=64, recompute="selective")
    for stack_id in STACKS:
        stack = planner.load_stack(stack_id)
        assert set(layout_defaults(stack, Layout())) == set(STACK_LAYOUT_FIELDS)
        assert set(training_defaults(stack, MODEL, selective)) == set(STACK_TRAINING_FIELDS)


def test_changed_copies_keep_the_stack_s_fields_unset() -> None:
    """Tuned settings and advise levers built from unset inputs still get the stack's values."""
    from planner.unknowns import tuned_prediction

    stack = planner.load_stack("torchtitan-eager")
    t = tuned_prediction(
        MODEL,
        CLUSTER,
        Layout(dp=8, zero=3),
        TRAIN,
        planner.default_profile(CLUSTER),
        ("micro_batch",),
        stack,
    )
    assert "norm" in t.training.unfused_elementwise and t.training.attention_kernel == "flash2"
    assert Layout(dp=8).with_changes(zero=3).model_fields_set == {"dp", "zero"}


def test_torchtitan_fsdp_under_a_pipeline_stays_gathered() -> None:
    """torchtitan with pp > 1 keeps its FSDP layers gathered and reduces the gradients once
    after the last backward: more weights and gradients held than when each layer reshards, no
    per-micro-batch ZeRO-3 traffic; without a pipeline the layers reshard as before."""
    model = planner.load_model("llama3.1-70b")
    cluster = planner.load_cluster("dgx-h100")
    stack = planner.load_stack("torchtitan-compiled")
    tr = planner.Training(seq_len=8192, global_batch=64, micro_batch=1, recompute="full")
    piped = planner.Layout(tp=8, pp=4, dp=4, zero=3)
    kept = planner.simulate(model, cluster, piped, tr, stack=stack)
    resharded = planner.simulate(
        model, cluster, piped.with_changes(zero3_reshard_after_forward=True), tr, stack=stack
    )
    assert kept.plan is not None and resharded.plan is not None
    for category in ("weights", "gradients"):
        assert kept.memory_breakdown_gib[category] > resharded.memory_breakdown_gib[category]
    assert kept.plan.recipe.dp_per_mb == 0.0 < resharded.plan.recipe.dp_per_mb
    flat = planner.simulate(model, cluster, planner.Layout(tp=8, dp=8, zero=3), tr, stack=stack)
    mega = planner.load_stack("megatron-core")
    assert flat.memory_breakdown_gib["gradients"] < kept.memory_breakdown_gib["gradients"]
    assert not stack_layout_default(stack, piped) and stack_layout_default(mega, piped)


def test_torchtitan_zero2_under_a_pipeline_defers_its_gradient_sync_too() -> None:
    """torch.distributed.pipelining syncs FSDP gradients after the last micro-batch whatever
    the reshard policy: ZeRO 2 (reshard never) under torchtitan with pp > 1 reduce-scatters
    once per step, not per micro-batch, and holds the unreduced gradients meanwhile, as its
    ZeRO 3 does; a ZeRO 2 stack without that pipeline (DeepSpeed, pp 1) still reduces each
    micro-batch."""
    model = planner.load_model("llama3.1-70b")
    cluster = planner.load_cluster("dgx-h100")
    stack = planner.load_stack("torchtitan-compiled")
    tr = planner.Training(seq_len=8192, global_batch=64, micro_batch=1, recompute="full")
    z2 = planner.simulate(model, cluster, planner.Layout(tp=8, pp=4, dp=4, zero=2), tr, stack=stack)
    z3 = planner.simulate(model, cluster, planner.Layout(tp=8, pp=4, dp=4, zero=3), tr, stack=stack)
    assert z2.plan is not None and z2.plan.recipe.dp_per_mb == 0.0
    assert z2.memory_breakdown_gib["gradients"] == pytest.approx(
        z3.memory_breakdown_gib["gradients"]
    )
    assert z2.time_breakdown_s["dp_comm"] <= z3.time_breakdown_s["dp_comm"]
    ds = planner.simulate(
        model,
        cluster,
        planner.Layout(dp=32, zero=2),
        tr.with_changes(global_batch=128),
        stack="deepspeed-zero",
    )
    assert ds.plan is not None and ds.plan.recipe.dp_per_mb > 0.0


def test_deepspeed_pipeline_engine_reduces_gradients_after_the_flush() -> None:
    """Megatron-DeepSpeed under a pipeline runs DeepSpeed's PipelineEngine, which all-reduces
    the gradients once after the last backward: nothing of it overlaps, so the exposed DP time
    is the whole reduction; without a pipeline ZeRO's overlap_comm hides part of it.
    Megatron-LM 2021 (local DDP) never overlaps it."""
    from planner.stacks import layout_defaults

    model = planner.load_model("gpt3-175b")
    cluster = planner.load_cluster("dgx-a100-80gb")
    tr = planner.Training(seq_len=2048, global_batch=256, micro_batch=1, recompute="full")
    piped = planner.Layout(tp=8, pp=8, dp=4, zero=1)
    mds = planner.load_stack("megatron-deepspeed-2022")
    assert layout_defaults(mds, planner.Layout(tp=8, dp=4))["overlap_dp_grad_reduce"]
    assert not layout_defaults(mds, piped)["overlap_dp_grad_reduce"]
    after = planner.simulate(model, cluster, piped, tr, stack=mds)
    hidden = planner.simulate(
        model, cluster, piped.with_changes(overlap_dp_grad_reduce=True), tr, stack=mds
    )
    assert after.plan is not None and hidden.plan is not None
    assert after.time_breakdown_s["dp_comm"] > hidden.time_breakdown_s["dp_comm"] > 0.0
    assert after.step_time_s > hidden.step_time_s
    mlm = planner.load_stack("megatron-lm-2021")
    for layout in (piped, planner.Layout(tp=8, dp=4)):
        assert not layout_defaults(mlm, layout)["overlap_dp_grad_reduce"]
    assert layout_defaults(planner.load_stack("megatron-core"), piped)["overlap_dp_grad_reduce"]


def stack_layout_default(stack, layout) -> bool:  # noqa: ANN001
    from planner.stacks import layout_defaults

    return layout_defaults(stack, layout)["zero3_reshard_after_forward"]


# ------------------------------------------------------------------ cuDNN vs FlashAttention-3


@pytest.mark.parametrize("stack", ["megatron-core", "nemo", "megatron-bridge"])
def test_transformer_engine_stacks_run_cudnn_attention(stack: str) -> None:
    _, training = apply_stack(planner.load_stack(stack), MODEL, Layout(tp=1, dp=8), TRAIN)
    assert training.attention_kernel == "cudnn"


def test_cudnn_attention_is_slower_than_flashattention_3_on_hopper_only() -> None:
    from planner.costs import compute

    def seconds(cluster: str, kernel: str) -> tuple[float, float]:
        accel = planner.load_cluster(cluster).accelerator
        prof = planner.default_profile(planner.load_cluster(cluster))
        dev = compute.make_device(accel, prof, "bf16", kernel)
        return compute.attention_time_s(1e12, 16384, dev, head_dim=128)

    fa3, cudnn = seconds("dgx-h100", "fused"), seconds("dgx-h100", "cudnn")
    # FA3 paper at 16k, causal d=128: forward 616 vs 539, backward 561 vs 516 TFLOP/s
    assert cudnn[0] / fa3[0] == pytest.approx(616 / 539, rel=1e-3)
    assert cudnn[1] / fa3[1] == pytest.approx(561 / 516, rel=1e-3)
    # no cuDNN figure apart from the best kernel on A100 or Blackwell: the fused curve
    for cluster in ("dgx-a100-80gb", "dgx-b200"):
        assert seconds(cluster, "cudnn") == seconds(cluster, "fused")
