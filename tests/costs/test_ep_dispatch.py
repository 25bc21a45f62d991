"""MoE token dispatch: one copy per expert (alltoall) or one per destination node (deepep),
FP8 dispatch, group-limited routing, and the HAI-LLM stack that runs them
(planner/costs/comms.py dispatch_time_s, planner/simulate/layers.py _ep_s)."""

from __future__ import annotations

import math

import pytest

import planner
from planner.costs.comms import domains_hit
from planner.errors import PlannerError
from planner.search.export import exports
from planner.specs.layout import Layout, Training
from planner.specs.loading import parse_spec
from planner.specs.model import ModelSpec
from planner.stacks import apply_stack
from planner.validate import parse_case, run_case
from planner.validate.frameworks import normalise, stack_for_framework
from planner.validate.inputs import V1_MODEL_KEYS, case_inputs

DSV3 = planner.load_model("deepseek-v3")


def _ep_s(layout: Layout, **training) -> float:
    base = {"seq_len": 4096, "global_batch": 4096, "micro_batch": 1, "recompute": "full"}
    tr = Training(**(base | training))
    cluster = planner.load_cluster("dgx-h100")
    r = planner.simulate(DSV3, cluster, layout, tr)
    return r.time_breakdown_s["ep_comm"]


@pytest.mark.parametrize(
    ("experts", "top_k", "domains"), [(256, 8, 8), (128, 8, 4), (64, 6, 2), (8, 2, 8)]
)
def test_domains_a_token_reaches(experts: int, top_k: int, domains: int) -> None:
    """Without a group limit: domains x (1 - C(E - E/D, k) / C(E, k)); at least one domain,
    at most min(k, D); a group limit can only lower it, and choosing every group is none."""
    hit = domains_hit(experts, top_k, domains)
    miss = math.comb(experts - experts // domains, top_k) / math.comb(experts, top_k)
    assert hit == pytest.approx(domains * (1 - miss))
    assert 1.0 <= hit <= min(top_k, domains) + 1e-9
    assert domains_hit(experts, top_k, 1) == 1.0
    groups = domains * 2 if experts % (domains * 2) == 0 else domains
    assert domains_hit(experts, top_k, domains, groups, groups) == pytest.approx(hit)
    limited = domains_hit(experts, top_k, domains, groups, max(groups // 2, 1))
    per_group_room = max(groups // 2, 1) * (experts // groups)
    if top_k <= per_group_room:
        assert limited <= hit + 1e-9


def test_deepseek_v3_node_limited_routing_reaches_fewer_nodes() -> None:
    """DeepSeek-V3's 256 experts over 8 nodes, 8 per token: about 5.3 nodes at random, at most
    4 with its node-limited routing (4 of 8 groups), about 3.6 on average."""
    assert domains_hit(256, 8, 8) == pytest.approx(5.29, abs=0.01)
    limited = domains_hit(256, 8, 8, 8, 4)
    assert limited < 4.0
    assert limited == pytest.approx(3.63, abs=0.01)
    # groups that do not tile the nodes: the limit is ignored (an upper bound)
    assert domains_hit(256, 8, 8, 4, 2) == domains_hit(256, 8, 8)


@pytest.mark.parametrize(
    "args",
    [(65536, 8, 8, 65536, 32768), (65536, 8, 2, 65536, 32768), (65536, 32768, 8, None, None)],
)
def test_the_largest_expert_counts_give_a_finite_count(args: tuple) -> None:
    """At the field's bounds (65,536 experts, as many one-expert groups) the sum runs in
    logarithms: a finite count between one domain and every domain (exact binomials of that
    size did not finish)."""
    hit = domains_hit(*args)
    assert math.isfinite(hit)
    assert 1.0 - 1e-9 <= hit <= args[2] + 1e-9


def test_deepep_crosses_the_network_once_per_node_and_changes_nothing_inside_one() -> None:
    across = Layout(tp=1, pp=1, dp=64, ep=64, zero=1)  # 8 nodes of 8 H100
    inside = Layout(tp=1, pp=1, dp=64, ep=8, zero=1)
    a2a, deep = (_ep_s(across, moe_dispatcher=d) for d in ("alltoall", "deepep"))
    assert 0 < deep < a2a
    assert _ep_s(inside, moe_dispatcher="deepep") == _ep_s(inside, moe_dispatcher="alltoall")


def test_fp8_dispatch_halves_the_dispatch_only_in_fp8() -> None:
    across = Layout(tp=1, pp=1, dp=64, ep=64, zero=1)
    fp8 = [_ep_s(across, precision="fp8", fp8_dispatch=f) for f in (False, True)]
    assert fp8[1] < fp8[0]
    assert fp8[1] > 0.5 * fp8[0]  # the combine stays in bf16
    bf16 = [_ep_s(across, precision="bf16", fp8_dispatch=f) for f in (False, True)]
    assert bf16[0] == bf16[1]


def test_router_groups_are_validated() -> None:
    data = DSV3.model_dump(mode="json")
    for moe, field in (
        ({"router_groups": 8}, "router_group_topk"),
        ({"router_groups": 7, "router_group_topk": 2}, "must divide"),
        ({"router_groups": 8, "router_group_topk": 9}, "exceeds router_groups"),
        ({"router_groups": 128, "router_group_topk": 1}, "exceeds the experts"),
    ):
        bad = data | {"moe": data["moe"] | {"router_groups": None, "router_group_topk": None}}
        bad["moe"] |= moe
        with pytest.raises(PlannerError) as exc:
            parse_spec(bad, ModelSpec, "model")
        assert field in str(exc.value)


def test_hai_llm_overlaps_the_all_to_all_where_its_schedule_allows() -> None:
    """The stack's EP overlap default is set only where another micro-batch is there to hide
    behind (pp 1, or two chunks per rank), so the default never makes a layout illegal."""
    stack = planner.load_stack("hai-llm")
    tr = Training(seq_len=4096, global_batch=1024, precision="fp8")
    cases = {
        Layout(tp=1, pp=16, dp=128, ep=64, zero=1): False,
        Layout(tp=1, pp=16, dp=128, ep=64, vpp=2, zero=1): True,
        Layout(tp=1, pp=1, dp=64, ep=64, zero=1): True,
        Layout(tp=1, pp=1, dp=64, ep=1, zero=1): False,
    }
    for layout, overlapped in cases.items():
        lay, t = apply_stack(stack, DSV3, layout, tr)
        assert lay.overlap_ep_comm is overlapped
        assert t.moe_dispatcher == "deepep" and t.fp8_dispatch and t.fp8_recipe == "blockwise"
    core = planner.load_stack("megatron-core")
    lay, t = apply_stack(core, DSV3, Layout(tp=1, pp=1, dp=64, ep=64, zero=1), tr)
    assert not lay.overlap_ep_comm and t.moe_dispatcher == "alltoall" and not t.fp8_dispatch


@pytest.mark.parametrize("name", ["HAI-LLM", "hai_llm", "DeepSeek HAI-LLM", "in-house (HAI-LLM)"])
def test_hai_llm_is_in_the_framework_table(name: str) -> None:
    cluster = planner.load_cluster("hgx-h800")
    assert stack_for_framework(name, cluster, "fp8") == ("hai-llm", None), normalise(name)


def _dsv3_v1(framework: str, **model_changes) -> dict:
    model = DSV3.model_dump(mode="json", include={"name", "moe", *V1_MODEL_KEYS})
    model["moe"] = {k: v for k, v in model["moe"].items() if not k.startswith("router_")}
    model |= model_changes
    return {
        "id": "dsv3",
        "source": "test",
        "quality": "partial",
        "model": model,
        "cluster": "hgx-h800",
        "num_gpus": 2048,
        "framework": framework,
        "layout": {"tp": 1, "pp": 16, "dp": 128, "ep": 64, "vpp": 2, "zero": 1},
        "training": {
            "seq_len": 4096,
            "global_batch": 15360,
            "micro_batch": 1,
            "recompute": "full",
            "precision": "fp8",
        },
        "measured": {"tokens_per_s_per_gpu": 1500.0},
    }


def test_schema_1_takes_the_routing_limit_from_the_shipped_model_of_its_name() -> None:
    inputs = case_inputs(parse_case(_dsv3_v1("HAI-LLM"), 1))
    assert (inputs.model.moe.router_groups, inputs.model.moe.router_group_topk) == (8, 4)
    assert any("group-limited routing (4 of 8 groups)" in n for n in inputs.notes)
    other = case_inputs(parse_case(_dsv3_v1("HAI-LLM", vocab=129024), 1))
    assert other.model.moe.router_groups is None  # a stated dimension differs: as stated


def test_the_same_deepseek_run_is_faster_on_hai_llm_than_on_megatron_core() -> None:
    """Schema 1 costs a framework's stack: the DeepSeek-V3 run on 2,048 H800 under HAI-LLM
    (dispatch once per node in FP8, the all-to-all overlapped) against the same row written
    with Megatron-Core (one copy per expert, nothing overlapped)."""
    rows = {f: run_case(_dsv3_v1(f), planner.default_profile, 1) for f in ("hai-llm", "mcore")}
    assert all(r["status"] == "ok" for r in rows.values()), rows
    hai, core = (rows[f]["predicted_tokens_per_s_per_gpu"] for f in ("hai-llm", "mcore"))
    assert hai > 1.2 * core


def test_megatron_exports_name_the_flex_dispatcher_and_say_what_they_cannot() -> None:
    stack = planner.load_stack("hai-llm")
    layout = Layout(tp=1, pp=1, dp=64, ep=64, zero=1)
    tr = Training(seq_len=4096, global_batch=1024, micro_batch=1, precision="fp8")
    lay, tr = apply_stack(stack, DSV3, layout, tr)
    args = exports(DSV3, 64, lay, tr, stack)["megatron_args"]
    assert "--moe-token-dispatcher-type flex" in args
    assert "--moe-flex-dispatcher-backend deepep" in args
    assert "training.fp8_dispatch = True: NOT EXPRESSED" in args
    bridge = planner.load_stack("megatron-bridge")
    text = exports(DSV3, 64, lay, tr, bridge)["megatron_bridge_overrides"]
    assert "moe_flex_dispatcher_backend" in text
    titan = exports(DSV3, 64, lay, tr, planner.load_stack("torchtitan-eager"))["torchtitan_toml"]
    assert "training.moe_dispatcher = deepep: NOT EXPRESSED" in titan
