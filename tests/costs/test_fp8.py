"""FP8 scaling recipes (planner/costs/fp8.py, Training.fp8_recipe / fp8_param_gather): the cast
bytes follow each recipe's kernels, and the figures move the way the mechanisms say."""

from __future__ import annotations

import pytest

import planner
from planner.costs import elementwise, fp8, memory
from planner.errors import PlannerError
from planner.specs.layout import Layout, Training

MODEL = planner.load_model("llama3.1-8b")
CLUSTER = planner.load_cluster("dgx-h100")
LAYOUT = Layout(dp=8, zero=3)


def _train(**kw: object) -> Training:
    base: dict[str, object] = dict(seq_len=8192, global_batch=8, micro_batch=1, precision="fp8")
    base.update(kw)
    return Training(**base)


def _run(stack: str = "torchtitan-compiled-float8", **kw: object) -> planner.StepReport:
    return planner.simulate(MODEL, CLUSTER, LAYOUT, _train(**kw), stack=planner.load_stack(stack))


def test_cast_bytes_by_hand() -> None:
    """One operand of each role, 1,000 elements each: the per-recipe kernel accounting."""
    n = 1000.0
    # cast + transpose of input and output gradient; TE reuses the step's fp8 weights
    assert fp8.cast_bytes("delayed", n, n, n) == (4 * n, 4 * n)
    assert fp8.cast_bytes("tensorwise", n, n, n) == (11 * n, 9 * n)  # + amax passes
    assert fp8.cast_bytes("rowwise", n, n, n) == (8 * n, 18 * n)  # a cast per layout
    assert fp8.cast_bytes("rowwise_gw_hp", n, n, n) == (6 * n, 6 * n)
    # weights that arrive in fp8 are not cast on this GPU
    assert fp8.cast_bytes("tensorwise", n, n, n, weights_cast=False) == (6 * n, 6 * n)


def test_only_gw_hp_keeps_the_weight_gradient_in_bf16() -> None:
    assert [r for r in fp8.RECIPES if not fp8.wgrad_fp8(r)] == ["rowwise_gw_hp"]


def test_layer_casts_split_forward_and_backward() -> None:
    layer = MODEL.layer_kinds()[0][0]
    gemms = planner.costs.flops.layer_flops(MODEL, Layout(), _train(), layer).gemms
    none = elementwise.layer_elementwise(MODEL, Layout(), 8192.0, layer, gemms, None)
    row = elementwise.layer_elementwise(MODEL, Layout(), 8192.0, layer, gemms, "rowwise")
    assert none.cast_fwd_bytes == none.cast_bwd_bytes == 0.0
    assert row.fwd_bytes - none.fwd_bytes == pytest.approx(row.cast_fwd_bytes)
    assert row.cast_bwd_bytes > row.cast_fwd_bytes > 0.0


def test_rowwise_is_slower_than_tensorwise_and_gw_hp_between_them_and_bf16() -> None:
    tps = {r: _run(fp8_recipe=r).tokens_per_s for r in ("tensorwise", "rowwise", "rowwise_gw_hp")}
    bf16 = _run("torchtitan-compiled", precision="bf16").tokens_per_s
    assert tps["tensorwise"] > tps["rowwise"] > bf16
    assert tps["tensorwise"] > tps["rowwise_gw_hp"] > bf16


def test_fp8_param_gather_halves_the_gather_and_the_gathered_copy() -> None:
    bf16 = _run(fp8_recipe="tensorwise")
    f8 = _run(fp8_recipe="tensorwise", fp8_param_gather=True)
    assert memory.param_gather_bytes(_train(fp8_param_gather=True)) == 1.0
    assert memory.param_gather_bytes(_train()) == 2.0
    assert f8.peak_memory_gib < bf16.peak_memory_gib
    assert f8.tokens_per_s > bf16.tokens_per_s


@pytest.mark.parametrize(
    "kw",
    [
        dict(fp8_recipe="rowwise", fp8_param_gather=True),
        dict(precision="bf16", fp8_param_gather=True),
    ],
)
def test_fp8_param_gather_needs_an_fp8_recipe_that_can_gather(kw: dict) -> None:
    with pytest.raises(PlannerError, match="training.fp8_param_gather.*tensorwise"):
        _run(
            "torchtitan-compiled-float8"
            if kw.get("precision") != "bf16"
            else "torchtitan-compiled",
            **kw,
        )


def test_stack_sets_the_recipe_and_a_stated_one_wins() -> None:
    from planner.stacks import stack_training

    stack = planner.load_stack("torchtitan-compiled-float8")
    assert stack_training(stack, MODEL, Training(seq_len=2048, global_batch=8)).fp8_recipe == (
        "tensorwise"
    )
    stated = Training(seq_len=2048, global_batch=8, fp8_recipe="rowwise")
    assert stack_training(stack, MODEL, stated).fp8_recipe == "rowwise"
    core = planner.load_stack("megatron-core")
    assert stack_training(core, MODEL, Training(seq_len=2048, global_batch=8)).fp8_recipe == (
        "delayed"
    )


def test_stack_fp8_presets_gather_fp8_weights_and_cache_copies() -> None:
    """NeMo 2 and Megatron-Bridge fp8 presets set fp8_param_gather (mixed_precision.py), so
    their fp8 runs keep no extra weight copy; Megatron-Core leaves it off and TE caches the
    fp8 weights; torchao (torchtitan) casts per GEMM and caches nothing. A stated value wins
    and a bf16 run or a recipe that cannot gather never gets it."""
    from planner.stacks import stack_training

    def applied(stack: str, **kw: object) -> Training:
        base: dict[str, object] = dict(seq_len=2048, global_batch=8)
        base.update(kw)
        return stack_training(planner.load_stack(stack), MODEL, Training(**base))

    for name in ("nemo", "megatron-bridge"):
        tr = applied(name, precision="fp8")
        assert tr.fp8_param_gather and tr.fp8_weight_cache
        assert memory.fp8_weight_cache_bytes(tr) == 0.0
        assert not applied(name, precision="bf16").fp8_param_gather
        assert not applied(name, precision="fp8", fp8_recipe="rowwise").fp8_param_gather
        assert not applied(name, precision="fp8", fp8_param_gather=False).fp8_param_gather
    core = applied("megatron-core", precision="fp8")
    assert not core.fp8_param_gather and memory.fp8_weight_cache_bytes(core) == 2.0
    titan = applied("torchtitan-compiled-float8")
    assert memory.fp8_weight_cache_bytes(titan) == 0.0
    # the copies show in the predicted peak: Megatron-Core fp8 holds more than NeMo fp8
    layout = Layout(dp=8, zero=1)
    peak = {
        s: planner.simulate(
            MODEL, CLUSTER, layout, _train(global_batch=64), stack=planner.load_stack(s)
        ).memory_breakdown_gib["weights"]
        for s in ("megatron-core", "nemo")
    }
    assert peak["megatron-core"] > 1.5 * peak["nemo"]


def test_compiled_loss_holds_less_than_eager_and_more_than_in_place() -> None:
    per = {k: memory.LOSS_BYTES_PER_LOGIT[k](2.0) for k in memory.LOSS_BYTES_PER_LOGIT}
    assert per["in_place"] < per["compiled"] < per["fp32_copy"] < per["fp32_log_softmax"]
    eager = _run("torchtitan-compiled", precision="bf16", cross_entropy="fp32_log_softmax")
    comp = _run("torchtitan-compiled", precision="bf16")
    assert comp.peak_memory_gib < eager.peak_memory_gib
    assert comp.tokens_per_s > eager.tokens_per_s
