"""Activation offloading to host memory (Megatron-Core --cpu-offloading-num-layers)."""

from __future__ import annotations

import pytest

import planner
from planner.advise import advise
from planner.errors import PlannerError
from planner.search.export import megatron_args
from planner.simulate import HOST_LINK_EFFICIENCY
from planner.specs.layout import Layout, Training


@pytest.fixture(scope="module")
def run():
    model = planner.load_model("llama3.1-70b")
    cluster = planner.load_cluster("gb200-nvl72")
    layout = Layout(dp=64, zero=3)
    training = Training(seq_len=8192, global_batch=256, micro_batch=2, precision="fp8")
    return model, cluster, layout, training


def _with(training: Training, n: int) -> Training:
    return training.model_copy(update={"offload_layers": n})


def test_offloaded_layers_leave_the_gpu_but_one_in_transit(run):
    model, cluster, layout, training = run
    base = planner.simulate(model, cluster, layout, training)
    off = planner.simulate(model, cluster, layout, _with(training, 40))
    per_layer = base.memory_breakdown_gib["activations"] / model.layers
    assert off.memory_breakdown_gib["activations"] == pytest.approx(
        base.memory_breakdown_gib["activations"] - 39 * per_layer
    )
    assert off.peak_memory_gib < base.peak_memory_gib


def test_exposed_copy_is_what_one_layer_of_compute_cannot_hide(run):
    """GB200 (C2C) hides most of each copy; H100 over PCIe shows much more of it."""
    model, cluster, layout, training = run
    gb = planner.simulate(model, cluster, layout, _with(training, 40))
    assert gb.time_breakdown_s["activation_offload"] >= 0.0
    h100 = planner.load_cluster("dgx-h100")
    lay = Layout(tp=8, dp=8, sequence_parallel=True)
    tr = Training(seq_len=8192, global_batch=64, micro_batch=1)
    base = planner.simulate(model, h100, lay, tr)
    slow = planner.simulate(model, h100, lay, _with(tr, 40))
    assert slow.time_breakdown_s["activation_offload"] > 0.0
    assert slow.step_time_s == pytest.approx(
        base.step_time_s + slow.time_breakdown_s["activation_offload"], rel=1e-6
    )
    # the copy of one layer at the host link's achieved bandwidth bounds the exposed time
    act_per_layer = base.memory_breakdown_gib["activations"] * 2**30 / model.layers
    copy = act_per_layer / (63e9 * HOST_LINK_EFFICIENCY)
    per_mb = slow.time_breakdown_s["activation_offload"] / (64 // 8)
    assert 0.0 < per_mb <= 40 * 2 * copy
    assert any("offloaded to host memory" in a for a in slow.assumptions)


@pytest.mark.parametrize(
    ("layout", "update", "says"),
    [
        (Layout(dp=32, pp=2), {"offload_layers": 4}, "pp"),
        (Layout(dp=64), {"offload_layers": 80}, "80 layers"),
        (Layout(dp=64), {"offload_layers": 4, "recompute": "full"}, "recompute"),
    ],
)
def test_illegal_offload_names_the_field(run, layout, update, says):
    model, cluster, _, training = run
    tr = training.model_copy(update=update)
    with pytest.raises(PlannerError) as exc:
        planner.check_layout(model, cluster, layout, tr)
    assert exc.value.field == "training.offload_layers"
    assert says in str(exc.value)


def test_offload_in_cli_export_and_advice(run, capsys):
    import json

    from planner.cli import main

    model, cluster, layout, training = run
    args = megatron_args(model, 64, layout, _with(training, 40))
    assert "--cpu-offloading-num-layers 40" in args
    assert "--cpu-offloading" not in megatron_args(model, 64, layout, training)
    argv = ["simulate", "--model", "llama3.1-8b", "--cluster", "dgx-h100", "--gpus", "8"]
    assert main([*argv, "--global-batch", "8", "--offload-layers", "8", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["training"]["offload_layers"] == 8
    assert main([*argv, "--global-batch", "8", "--pp", "2", "--offload-layers", "8"]) == 2
    err = capsys.readouterr().err
    assert "offload_layers" in err and "Traceback" not in err
    names = {lv.name for lv in advise(model, cluster, layout, training)}
    assert "offload 40 layers" in names
