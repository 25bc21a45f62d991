"""Optimizer offload (ZeRO-Offload) and checkpoint offload to host memory
(planner/costs/host_offload.py): what leaves the GPU, what the step pays, who may run it."""

from __future__ import annotations

import json

import pytest

import planner
from planner.costs import host_offload as ho
from planner.errors import PlannerError
from planner.search.dialects.deepspeed import deepspeed_json
from planner.search.dialects.megatron import megatron_deepspeed_args
from planner.search.dialects.torchtitan import torchtitan_toml
from planner.specs.layout import Layout, Training

GiB = 2**30


@pytest.fixture(scope="module")
def problem():
    return planner.load_model("llama3.1-8b"), planner.load_cluster("dgx-h100")


def _sim(problem, layout: Layout, training: Training, stack: str = "deepspeed-zero"):
    model, cluster = problem
    return planner.simulate(model, cluster, layout, training, stack=stack)


def _t(**kw) -> Training:
    return Training(**{"seq_len": 4096, "global_batch": 64, "micro_batch": 1, **kw})


@pytest.mark.parametrize("zero", [1, 2, 3])
def test_optimizer_states_leave_the_gpu_and_from_zero_2_the_gradients(problem, zero: int):
    layout = Layout(dp=8, zero=zero)
    base = _sim(problem, layout, _t())
    off = _sim(problem, layout, _t(optimizer_offload=True))
    assert base.memory_breakdown_gib["optimizer_states"] > 1.0
    assert off.memory_breakdown_gib["optimizer_states"] == 0.0
    grads = off.memory_breakdown_gib["gradients"]
    if zero >= 2:
        assert grads == 0.0
    else:  # ZeRO-1 holds every gradient until the reduction
        assert grads == pytest.approx(base.memory_breakdown_gib["gradients"])
    assert off.memory_breakdown_gib["weights"] == pytest.approx(
        base.memory_breakdown_gib["weights"]
    )
    assert off.peak_memory_gib < base.peak_memory_gib
    assert any("optimizer offload" in a for a in off.assumptions)


def test_the_cpu_update_is_the_node_s_dram_traffic_over_its_bandwidth(problem):
    model, cluster = problem
    layout = Layout(dp=8, zero=3)
    off = _sim(problem, layout, _t(optimizer_offload=True))
    params = model.total_params / 8  # each GPU owns its ZeRO shard
    host_bw = cluster.spec.host_memory_bandwidth_gb_per_s
    link = cluster.accelerator.host_link_gb_per_s
    cpu = params * 8 * ho.CPU_ADAM_BYTES_PER_PARAM / (host_bw * 1e9 * ho.HOST_DRAM_EFFICIENCY)
    back = params * ho.WEIGHT_TO_GPU_BYTES / (link * 1e9 * ho.HOST_LINK_EFFICIENCY)
    assert off.time_breakdown_s["optimizer"] == pytest.approx(max(cpu, back), rel=0.02)
    base = _sim(problem, layout, _t())
    assert off.time_breakdown_s["optimizer"] > 10 * base.time_breakdown_s["optimizer"]
    assert off.step_time_s > base.step_time_s


def test_one_node_updates_the_whole_model_however_it_is_sharded(problem):
    """dp 8 on one node: eight shards share the host's DRAM, as one GPU's whole model would."""
    one = _sim(problem, Layout(dp=1, zero=1), _t(global_batch=8, optimizer_offload=True))
    eight = _sim(problem, Layout(dp=8, zero=1), _t(optimizer_offload=True))
    cpu_one = ho.cpu_adam_time_s(1.0, 1, 100.0)
    cpu_eight = ho.cpu_adam_time_s(1.0 / 8, 8, 100.0)
    assert cpu_one == pytest.approx(cpu_eight)
    assert one.time_breakdown_s["optimizer"] == pytest.approx(
        eight.time_breakdown_s["optimizer"], rel=0.02
    )


def test_gradient_copies_show_only_what_backward_cannot_hide(problem):
    layout = Layout(dp=8, zero=3)
    base = _sim(problem, layout, _t())
    off = _sim(problem, layout, _t(optimizer_offload=True))
    assert off.time_breakdown_s["dp_comm"] >= base.time_breakdown_s["dp_comm"] - 1e-12
    # a copy at least as long as a backward shows its excess, a short one shows nothing
    assert ho.layer_copy_exposed_s(63e9 * ho.HOST_LINK_EFFICIENCY, 0.5, 2.0, 63) == 0.5
    assert ho.layer_copy_exposed_s(1e6, 0.5, 2.0, 63) == 0.0


def test_checkpoint_offload_keeps_two_layers_of_checkpoints(problem):
    model, _ = problem
    layout = Layout(dp=8, zero=1)
    full = _sim(problem, layout, _t(recompute="full", micro_batch=4), "megatron-deepspeed")
    off = _sim(
        problem,
        layout,
        _t(recompute="full", micro_batch=4, checkpoint_offload=True),
        "megatron-deepspeed",
    )
    # full recompute: L checkpoints + one layer rebuilt; offloaded: 2 checkpoints + that layer
    per_checkpoint = (
        full.memory_breakdown_gib["activations"] - off.memory_breakdown_gib["activations"]
    ) / (model.layers - 2)
    # a checkpoint is the layer input: micro-batch x sequence x hidden, 2 B
    assert per_checkpoint == pytest.approx(4 * 4096 * model.hidden * 2 / GiB, rel=1e-6)
    assert off.time_breakdown_s["activation_offload"] >= 0.0
    assert off.step_time_s == pytest.approx(
        full.step_time_s + off.time_breakdown_s["activation_offload"], rel=1e-6
    )
    assert any("checkpoints kept in host memory" in a for a in off.assumptions)


def test_stacks_that_cannot_offload_say_so(problem):
    with pytest.raises(PlannerError, match="stack 'megatron-core' cannot run optimizer offload"):
        _sim(problem, Layout(dp=8, zero=1), _t(optimizer_offload=True), "megatron-core")
    with pytest.raises(PlannerError, match="cannot run activation checkpoints in host memory"):
        _sim(problem, Layout(dp=8, zero=3), _t(recompute="full", checkpoint_offload=True))
    with pytest.raises(PlannerError, match="optimizer_offload"):
        _sim(problem, Layout(dp=8), _t(optimizer_offload=True))  # ZeRO-0


def test_exports_write_the_offloads_or_say_they_cannot(problem):
    model, _ = problem
    layout = Layout(dp=8, zero=3)
    tr = _t(recompute="full", optimizer_offload=True, checkpoint_offload=True)
    cfg = json.loads(deepspeed_json(model, 8, layout, tr, with_megatron=True))
    assert cfg["zero_optimization"]["offload_optimizer"] == {"device": "cpu", "pin_memory": True}
    assert cfg["activation_checkpointing"]["cpu_checkpointing"] is True
    assert not [n for n in cfg["planner_notes"] if "offload" in n]
    alone = json.loads(deepspeed_json(model, 8, layout, tr))
    assert any("checkpoint_offload = True" in n for n in alone["planner_notes"])
    args = megatron_deepspeed_args(model, 8, layout, tr).split("\n")
    assert "--cpu-optimizer" in args and "--checkpoint-in-cpu" in args
    toml = torchtitan_toml(model, 8, layout, tr)
    assert "optimizer_offload = True" in toml and "checkpoint_offload = True" in toml


def test_no_offload_no_offload_keys(problem):
    model, _ = problem
    cfg = json.loads(deepspeed_json(model, 8, Layout(dp=8, zero=3), _t()))
    assert "offload_optimizer" not in cfg["zero_optimization"]
    assert "--cpu-optimizer" not in megatron_deepspeed_args(model, 8, Layout(dp=8, zero=3), _t())


def test_the_refusal_names_exactly_the_shipped_stacks_that_offload():
    from planner.resources import STACKS_DIR
    from planner.specs.loading import shipped_ids
    from planner.stacks import HOST_OFFLOADS

    for name, _, named in HOST_OFFLOADS:
        listed = set()
        for part in named.split(", "):
            base = part.replace("(-2022)", "")
            listed |= {base, base + "-2022"} if "(-2022)" in part else {base}
        can = {
            sid
            for sid in shipped_ids(STACKS_DIR)
            if getattr(planner.load_stack(sid).capabilities, name)
        }
        assert can == listed, name


@pytest.mark.parametrize("stack", ["megatron-deepspeed", "deepspeed-zero3-2021"])
def test_every_offload_combination_gives_finite_consistent_figures(stack: str):
    import itertools
    import math

    # the 2021 stack's code ran GPT-3's model (GeLU, multi-head, tied), not Llama's
    model = planner.load_model("gpt3-1.3b" if stack.endswith("2021") else "llama2-7b")
    for cluster_id, zero, recompute, opt, ckpt, dp in itertools.product(
        ("dgx-a100-80gb", "dgx-h200"),
        (1, 2, 3),
        ("none", "full"),
        (False, True),
        (False, True),
        (1, 8),
    ):
        if ckpt and recompute != "full":
            continue
        cluster = planner.load_cluster(cluster_id)
        layout = Layout(dp=dp, zero=zero)
        tr = _t(
            global_batch=8 * dp, recompute=recompute, optimizer_offload=opt, checkpoint_offload=ckpt
        )
        try:
            r = planner.simulate(model, cluster, layout, tr, stack=stack)
        except PlannerError as exc:  # what the stack cannot run, named
            assert exc.field.startswith(("layout.", "training.")), exc
            continue
        figures = [
            r.step_time_s,
            r.peak_memory_gib,
            *r.time_breakdown_s.values(),
            *r.memory_breakdown_gib.values(),
        ]
        assert all(math.isfinite(x) and x >= 0 for x in figures)
        assert sum(r.time_breakdown_s.values()) == pytest.approx(r.step_time_s, rel=1e-9)


def test_search_with_optimizer_offload_finds_what_fits_and_ranks_it_by_the_same_figures():
    from planner.search import search

    model, cluster = planner.load_model("llama3.1-70b"), planner.load_cluster("dgx-a100-80gb")
    stack = planner.load_stack("deepspeed-zero")
    plain = search(model, cluster, 8, 64, 4096, precision=None, stack=stack)
    assert not any(e.feasible for e in plain.ranked)  # 70B states do not fit on 8 x 80 GB
    off = search(model, cluster, 8, 64, 4096, precision=None, stack=stack, optimizer_offload=True)
    fits = [e for e in off.ranked if e.feasible]
    assert fits and all(e.training.optimizer_offload and e.layout.zero >= 1 for e in fits)
    assert off.rejected_by_rule.get("optimizer_offload_needs_zero", 0) > 0
    best = fits[0]
    again = planner.simulate(model, cluster, best.layout, best.training, stack=stack)
    assert best.report.step_time_s == pytest.approx(again.step_time_s, rel=1e-9)
    assert again.memory_breakdown_gib["optimizer_states"] == 0.0


def test_the_cli_search_points_at_offload_when_nothing_fits(capsys):
    from planner.cli import main

    argv = [
        "search",
        "--model",
        "llama3.1-70b",
        "--cluster",
        "dgx-a100-80gb",
        "--gpus",
        "8",
        "--global-batch",
        "64",
        "--stack",
        "deepspeed-zero",
    ]
    assert main(argv) == 2
    assert "--optimizer-offload" in capsys.readouterr().err
    assert main([*argv, "--optimizer-offload", "--json"]) == 0
