"""planner/legality.py: every rule fires with its field, message and valid values, and passes
when the layout is fixed; check_layout raises the first violation, violations lists them all;
the search space decides legality through the rules and counts what each removed."""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Any

import pytest

import planner
from planner.legality import (
    RULES,
    SEARCH_RULES,
    Candidate,
    Violation,
    check_layout,
    first_violation,
    violations,
)
from planner.search.space import (
    INNER_FIELDS,
    KNOB_FIELDS,
    OUTER_FIELDS,
    POW2,
    Knobs,
    SearchSpace,
    Structure,
    default_space,
    legal_layouts,
    repaired_candidate,
    rule_levels,
)
from planner.specs.layout import Layout, Training

RULE = {r.name: r for r in SEARCH_RULES}


def _no_host_link(cluster: Any) -> Any:
    accel = cluster.accelerator.model_copy(update={"host_link_gb_per_s": None})
    return cluster.model_copy(update={"accelerator": accel})


# rule: (model, cluster, firing layout, firing training, gpus, passing layout, passing training,
#        expected (field, message, valid))
LLAMA, MIXTRAL, HYBRID = "llama3.1-8b", "mixtral-8x7b", "nemotron-h-8b"
H100, A100 = "dgx-h100", "dgx-a100-80gb"
T = {"seq_len": 4096, "global_batch": 64}
CASES: dict[str, tuple] = {
    "world_size": (
        LLAMA,
        H100,
        {"tp": 2, "dp": 2},
        T,
        8,
        {"tp": 2, "dp": 4},
        T,
        ("layout", "tp*cp*dp*pp = 2*1*2*1 = 4 but gpus = 8", "factors whose product equals gpus"),
    ),
    "tp_divides_heads": (
        LLAMA,
        H100,
        {"tp": 3},
        T,
        None,
        {"tp": 4},
        T,
        ("layout.tp", "tp=3 does not divide heads=32", "1, 2, 4, 8, 16, 32"),
    ),
    "tp_divides_kv_heads": (
        LLAMA,
        H100,
        {"tp": 16},
        T,
        None,
        {"tp": 8},
        T,
        ("layout.tp", "tp=16 does not divide kv_heads=8", "1, 2, 4, 8"),
    ),
    "stages_within_layers": (
        LLAMA,
        H100,
        {"pp": 16, "vpp": 3},
        T,
        None,
        {"pp": 16, "vpp": 2},
        T,
        (
            "layout.pp",
            "pp*vpp = 48 exceeds layers + 2 = 34",
            "pp*vpp <= 34 (embedding and loss may count as stages)",
        ),
    ),
    "vpp_needs_pp": (
        LLAMA,
        H100,
        {"vpp": 2},
        T,
        None,
        {"pp": 2, "vpp": 2},
        T,
        ("layout.vpp", "virtual pipeline stages need pp > 1", "vpp=1 or pp>1"),
    ),
    "schedule": (
        LLAMA,
        H100,
        {"pp": 2, "schedule": "interleaved"},  # built without the Layout validator below
        T,
        None,
        {"pp": 2, "vpp": 2, "schedule": "interleaved"},
        T,
        ("layout.schedule", "schedule 'interleaved' needs vpp >= 2", "vpp >= 2"),
    ),
    "stated_stage_split": (
        LLAMA,
        H100,
        {"pp": 4, "first_stage_layers": 4, "last_stage_layers": 3},  # 25 left for 2 ranks
        T,
        None,
        {"pp": 4, "first_stage_layers": 4, "last_stage_layers": 2},  # 13 each in the middle
        T,
        (
            "layout.first_stage_layers",
            "32 layers do not split as first 4, last 3 over pp = 4: 25 layers left for 2 rank(s)",
            "counts that leave a positive multiple of 2 layers to the 2 rank(s) not stated",
        ),
    ),
    "cp_divides_seq_len": (
        LLAMA,
        H100,
        {"cp": 3},
        T,
        None,
        {"cp": 2},
        T,
        ("layout.cp", "seq_len=4096 is not divisible by 2*cp", "cp with seq_len % (2*cp) == 0"),
    ),
    "cp_attention_only": (
        HYBRID,
        H100,
        {"cp": 2},
        T,
        None,
        {"cp": 1},
        T,
        (
            "layout.cp",
            "context parallelism of state-space / linear-attention layers is not modelled",
            "cp=1 for models with such layers",
        ),
    ),
    "ep_needs_experts": (
        LLAMA,
        H100,
        {"ep": 2, "dp": 2},
        T,
        None,
        {"dp": 2},
        T,
        ("layout.ep", "ep=2 but llama3.1-8b has no experts", "1"),
    ),
    "ep_divides_experts": (
        MIXTRAL,
        H100,
        {"ep": 3, "dp": 3},
        {"seq_len": 4096, "global_batch": 48},
        None,
        {"ep": 4, "dp": 4},
        T,
        ("layout.ep", "ep=3 does not divide experts=8", "1, 2, 4, 8"),
    ),
    "ep_divides_tp_dp_cp": (
        MIXTRAL,
        H100,
        {"ep": 8, "dp": 4},
        T,
        None,
        {"ep": 8, "dp": 8},
        T,
        (
            "layout.ep",
            "ep=8 must divide tp*dp*cp=4 (expert parallelism is carved out of TP x DP x CP)",
            "1, 2, 4",
        ),
    ),
    "dp_shard_tiles_dp_cp": (
        LLAMA,
        H100,
        {"dp": 16, "zero": 1, "dp_shard": 6},
        T,
        None,
        {"dp": 16, "zero": 1, "dp_shard": 8},
        T,
        (
            "layout.dp_shard",
            "dp_shard=6 does not divide dp*cp=16 (the shard groups must tile the DP x CP ranks)",
            "1, 2, 4, 8, 16",
        ),
    ),
    "overlap_ep_needs_interleaving": (
        MIXTRAL,
        H100,
        {"pp": 2, "dp": 4, "ep": 4, "overlap_ep_comm": True},
        T,
        None,
        {"pp": 2, "vpp": 2, "dp": 4, "ep": 4, "overlap_ep_comm": True},
        T,
        (
            "layout.overlap_ep_comm",
            "all-to-all overlap pairs the forward of one micro-batch with the backward of "
            "another, which with pp > 1 needs the interleaved schedule",
            "vpp >= 2, pp = 1, or overlap_ep_comm false",
        ),
    ),
    "global_batch_divisible": (
        LLAMA,
        H100,
        {"dp": 3},
        {"seq_len": 4096, "global_batch": 64, "micro_batch": 2},
        None,
        {"dp": 4},
        {"seq_len": 4096, "global_batch": 64, "micro_batch": 2},
        (
            "training.global_batch",
            "global_batch=64 is not divisible by micro_batch*dp = 2*3 = 6",
            "a multiple of 6",
        ),
    ),
    "precision_supported": (
        LLAMA,
        A100,
        {},
        {**T, "precision": "fp8"},
        None,
        {},
        {**T, "precision": "bf16"},
        ("training.precision", "A100-SXM4-80GB has no fp8 tensor throughput", "bf16, fp16"),
    ),
    "offload_below_layers": (
        LLAMA,
        H100,
        {},
        {**T, "offload_layers": 32},
        None,
        {},
        {**T, "offload_layers": 31},
        ("training.offload_layers", "offload_layers=32 but the model has 32 layers", "0 to 31"),
    ),
    "offload_without_pp": (
        LLAMA,
        H100,
        {"pp": 2},
        {**T, "offload_layers": 4},
        None,
        {"pp": 1},
        {**T, "offload_layers": 4},
        (
            "training.offload_layers",
            "activation offloading with pp=2: Megatron-Core supports it only without pipeline "
            "parallelism",
            "pp 1, or offload_layers 0",
        ),
    ),
    "offload_without_recompute": (
        LLAMA,
        H100,
        {},
        {**T, "offload_layers": 4, "recompute": "full"},
        None,
        {},
        {**T, "offload_layers": 4},
        (
            "training.offload_layers",
            "activation offloading with recompute full: Megatron-Core does not combine them",
            "recompute none, or offload_layers 0",
        ),
    ),
    "offload_needs_host_link": (
        LLAMA,
        "no-host-link",
        {},
        {**T, "offload_layers": 4},
        None,
        {},
        {**T, "offload_layers": 0},
        (
            "training.offload_layers",
            "H100-SXM5-80GB has no host link bandwidth in its spec (host_link_gb_per_s)",
            "offload_layers 0, or a spec with host_link_gb_per_s",
        ),
    ),
    "optimizer_offload_needs_zero": (
        LLAMA,
        H100,
        {"dp": 8},
        {**T, "optimizer_offload": True},
        None,
        {"dp": 8, "zero": 1},
        {**T, "optimizer_offload": True},
        (
            "training.optimizer_offload",
            "optimizer offload with ZeRO stage 0: DeepSpeed offloads the optimizer of a ZeRO "
            "optimizer only",
            "zero 1, 2 or 3, or optimizer_offload off",
        ),
    ),
    "optimizer_offload_needs_host": (
        LLAMA,
        "dgx-b200",  # its spec gives no host DRAM bandwidth
        {"dp": 8, "zero": 3},
        {**T, "optimizer_offload": True},
        None,
        {"dp": 8, "zero": 3},
        T,
        (
            "training.optimizer_offload",
            "cluster 'dgx-b200' has no host_memory_bandwidth_gb_per_s in its spec (the CPU's "
            "Adam update is costed from it)",
            "optimizer_offload off, or a cluster spec with host_memory_bandwidth_gb_per_s",
        ),
    ),
    "checkpoint_offload_needs_full_recompute": (
        LLAMA,
        H100,
        {"dp": 8},
        {**T, "checkpoint_offload": True},
        None,
        {"dp": 8},
        {**T, "checkpoint_offload": True, "recompute": "full"},
        (
            "training.checkpoint_offload",
            "checkpoint offload with recompute none: only full recompute keeps layer-input "
            "checkpoints to offload",
            "recompute full, or checkpoint_offload off",
        ),
    ),
    "interleaved_even_split": (
        LLAMA,
        H100,
        {"pp": 4, "vpp": 3},
        T,
        None,
        {"pp": 2, "vpp": 17},  # 34 = layers + embedding + loss
        T,
        (
            "layout.vpp",
            "layers=32 (+ embedding and loss) not divisible by pp*vpp = 12",
            "pp*vpp dividing 32 or 34",
        ),
    ),
}


def _problem(model_id: str, cluster_id: str) -> tuple:
    if cluster_id == "no-host-link":
        return planner.load_model(model_id), _no_host_link(planner.load_cluster(H100))
    return planner.load_model(model_id), planner.load_cluster(cluster_id)


def test_every_rule_has_a_case() -> None:
    assert list(CASES) == [r.name for r in SEARCH_RULES]
    assert len({r.name for r in SEARCH_RULES}) == len(SEARCH_RULES)


@pytest.mark.parametrize("name", list(CASES))
def test_rule_fires_with_field_message_and_valid_values(name: str) -> None:
    model_id, cluster_id, bad, tr, gpus, _, _, (field, message, valid) = CASES[name]
    model, cluster = _problem(model_id, cluster_id)
    layout = Layout.model_construct(**bad) if name == "schedule" else Layout(**bad)
    v = RULE[name](model, cluster, layout, Training(**tr), gpus)
    assert v == Violation(name, field, message, valid)
    assert str(v.error()) == f"{field}: {message} (valid: {valid})"


@pytest.mark.parametrize("name", list(CASES))
def test_rule_passes_the_fixed_layout(name: str) -> None:
    model_id, cluster_id, _, _, gpus, good, tr, _ = CASES[name]
    model, cluster = _problem(model_id, cluster_id)
    assert RULE[name](model, cluster, Layout(**good), Training(**tr), gpus) is None


@pytest.mark.parametrize("name", list(CASES))
def test_rule_reads_only_what_it_declares(name: str) -> None:
    """The search checks a rule as soon as its ``reads`` are set: the declared fields must be
    real Layout / Training fields (or gpus)."""
    known = set(Layout.model_fields) | set(Training.model_fields) | {"gpus"}
    assert RULE[name].reads and RULE[name].reads <= known


def test_check_layout_raises_the_first_violation_and_violations_lists_all() -> None:
    model, cluster = planner.load_model(LLAMA), planner.load_cluster(A100)
    layout = Layout(tp=3, dp=3, pp=2, vpp=3)
    training = Training(seq_len=4096, global_batch=64, precision="fp8", offload_layers=4)
    found = violations(model, cluster, layout, training, gpus=8)
    assert [v.rule for v in found] == [
        "world_size",
        "tp_divides_heads",
        "tp_divides_kv_heads",
        "global_batch_divisible",
        "precision_supported",
        "offload_without_pp",
    ]
    assert first_violation(model, cluster, layout, training, gpus=8) == found[0]
    with pytest.raises(planner.PlannerError) as err:
        check_layout(model, cluster, layout, training, gpus=8)
    assert (err.value.field, err.value.message, err.value.valid) == (
        found[0].field,
        found[0].message,
        found[0].valid,
    )
    # without gpus the world size is not checked; the search-only rule is not legality
    assert violations(model, cluster, layout, training)[0].rule == "tp_divides_heads"
    assert "interleaved_even_split" in [
        v.rule for v in violations(model, cluster, layout, training, rules=SEARCH_RULES)
    ]
    assert planner.check_layout is check_layout
    legal = Layout(tp=8, pp=4, vpp=3)  # an uneven interleaved split is legal (DeepSeek-V3 runs)
    assert violations(model, planner.load_cluster(H100), legal, Training(**T), gpus=32) == []


# ---- the search space -------------------------------------------------------------------------


def _brute_force(model: Any, cluster: Any, training: Training, space: SearchSpace) -> tuple:
    """Every candidate of the space's full product (knobs that cannot matter collapsed), the
    legal ones and, for the others, the rule the search must charge: the first broken one of
    the first level (outer, inner, knobs) that rejects it, checked on the whole candidate."""
    levels = rule_levels(SEARCH_RULES)
    domain = cluster.spec.scale_up_domain_gpus
    tps = [t for t in (space.tp or POW2) if t <= domain]
    legal, charged = set(), Counter()
    for gpus, tp, cp, pp, vpp, ep, mb in itertools.product(
        space.gpus, tps, space.cp, space.pp, space.vpp, space.ep, space.micro_batch
    ):
        for k in {
            Knobs(rc, z, sp and tp > 1, otp and tp > 1, odp, oep and ep > 1)
            for rc, z, sp, otp, odp, oep in itertools.product(
                space.recompute,
                space.zero,
                space.sequence_parallel,
                space.overlap_tp_comm,
                space.overlap_dp_grad_reduce,
                space.overlap_ep_comm,
            )
        }:
            dp = max(1, gpus // (tp * cp * pp))
            layout = Layout(
                tp=tp,
                pp=pp,
                dp=dp,
                cp=cp,
                ep=ep,
                vpp=vpp if vpp > 1 else None,
                sequence_parallel=k.sequence_parallel,
                zero=k.zero,
                overlap_tp_comm=k.overlap_tp_comm,
                overlap_dp_grad_reduce=k.overlap_dp_grad_reduce,
                overlap_ep_comm=k.overlap_ep_comm,
            )
            tr = training.model_copy(update={"micro_batch": mb, "recompute": k.recompute})
            c = Candidate(model, cluster, layout, tr, gpus)
            broken = next(
                (r.name for rules in levels for r in rules if r.check(c) is not None), None
            )
            if broken is None:
                legal.add((gpus, layout, tr))
            else:
                charged[broken] += 1
    return legal, charged


SPACES = {
    # 24 GPUs: tp*pp that do not divide it; global batch 48: micro-batches that do not fit;
    # pp 32 x vpp 2 over 32 layers; ep on a dense model
    "dense": (
        LLAMA,
        H100,
        Training(seq_len=4096, global_batch=48),
        {
            "gpus": (24, 32),
            "pp": (1, 2, 4, 32),
            "vpp": (1, 2, 3),
            "ep": (1, 2),
            "micro_batch": (1, 4),
        },
    ),
    "moe": (
        MIXTRAL,
        H100,
        Training(seq_len=4096, global_batch=64),
        {"gpus": (16,), "pp": (1, 4), "vpp": (1, 2), "ep": (1, 3, 4, 8), "micro_batch": (1, 2)},
    ),
    "hybrid-cp": (
        HYBRID,
        H100,
        Training(seq_len=4100, global_batch=32),
        {"gpus": (16,), "pp": (1, 2), "cp": (1, 2, 4), "micro_batch": (1,)},
    ),
    "no-fp8": (
        LLAMA,
        A100,
        Training(seq_len=4096, global_batch=32, precision="fp8"),
        {"gpus": (8,), "pp": (1, 2), "micro_batch": (1,)},
    ),
}


@pytest.mark.parametrize("case", list(SPACES))
def test_search_space_is_the_rules_and_counts_what_each_removed(case: str) -> None:
    model_id, cluster_id, training, axes = SPACES[case]
    model, cluster = _problem(model_id, cluster_id)
    space = SearchSpace(
        **{
            "recompute": ("none", "full"),
            "zero": (0, 1),
            "ep": (1,),
            "overlap_ep_comm": (False, True) if model.moe else (False,),
            **axes,
        }
    )
    got = list(legal_layouts(model, cluster, training, space))
    legal, charged = _brute_force(model, cluster, training, space)
    assert len(got) == len(set(got)) and set(got) == legal
    assert dict(space.rejected) == dict(charged)
    total = len(legal) + sum(charged.values())
    assert sum(space.rejected.values()) == total - len(got)  # counts sum to the rejected ones


def test_every_rule_belongs_to_one_level() -> None:
    outer, inner, knobs = rule_levels(SEARCH_RULES)
    assert sorted(r.name for r in (*outer, *inner, *knobs)) == sorted(RULE)
    assert all(r.reads & KNOB_FIELDS for r in knobs)
    assert all(not r.reads & (INNER_FIELDS | KNOB_FIELDS) for r in outer)
    assert "world_size" in {r.name for r in outer} and RULE["world_size"].reads <= OUTER_FIELDS
    assert SEARCH_RULES[: len(RULES)] == RULES


def test_search_reports_rejections_by_rule() -> None:
    model, cluster = planner.load_model(LLAMA), planner.load_cluster(H100)
    r = planner.search(model, cluster, gpus=16, global_batch=64, method="exhaustive")
    assert r.rejected_by_rule and set(r.rejected_by_rule) <= set(RULE)
    assert all(r.infeasible[name] == n for name, n in r.rejected_by_rule.items())
    assert r.space_size == r.evaluated


def test_optuna_repair_switches_off_a_knob_a_rule_rejects() -> None:
    model, cluster = planner.load_model(MIXTRAL), planner.load_cluster(H100)
    training = Training(seq_len=4096, global_batch=64)
    s = Structure(gpus=16, tp=1, cp=1, pp=2, vpp=1, ep=4, dp=8, micro_batch=1)
    k = Knobs("none", 1, False, False, True, overlap_ep_comm=True)
    layout, tr = repaired_candidate(model, cluster, s, k, training)
    assert not layout.overlap_ep_comm
    check_layout(model, cluster, layout, tr, gpus=16)
    interleaved = Structure(gpus=16, tp=1, cp=1, pp=2, vpp=2, ep=4, dp=8, micro_batch=1)
    assert repaired_candidate(model, cluster, interleaved, k, training)[0].overlap_ep_comm


def test_default_space_rejections_name_rules() -> None:
    model, cluster = planner.load_model(LLAMA), planner.load_cluster(H100)
    training = Training(seq_len=4096, global_batch=64)
    space = default_space(model, cluster, (16,), 4096)
    n = sum(1 for _ in legal_layouts(model, cluster, training, space))
    assert n == 5_652  # the count before the rules were objects
    assert set(space.rejected) <= set(RULE)


def test_schedule_rule_asks_the_schedule_object() -> None:
    """The "schedule" rule is planner.schedules' verdict (here: ZB-H1's warm-up micro-batches)."""
    from planner.schedules import schedule_violation

    model, cluster = planner.load_model(LLAMA), planner.load_cluster(H100)
    layout = Layout(pp=4, dp=2, schedule="zb-h1")
    short = Training(seq_len=4096, global_batch=4)  # 2 micro-batches per step, 4 needed
    v = RULE["schedule"](model, cluster, layout, short)
    assert v is not None and (v.field, v.message, v.valid) == schedule_violation(
        model, layout, short
    )
    assert RULE["schedule"](model, cluster, layout, Training(**T)) is None
