"""The one validator of "is this layout legal for this model, cluster and batch": a list of rules.

Each rule is a named check ``(model, cluster, layout, training, gpus) -> Violation | None``;
``RULES`` is their order, so :func:`check_layout` raises the first violation and
:func:`violations` lists them all. ``planner.check_layout``, the search space, ``advise`` and
the exports all decide legality through these rules only. ``SEARCH_RULES`` adds what the search
asks of the layouts it proposes (an interleaved split Megatron-LM's flags express).

>>> import planner
>>> from planner.legality import violations
>>> model, cluster = planner.load_model("llama3.1-8b"), planner.load_cluster("dgx-h100")
>>> layout, training = planner.Layout(tp=3, dp=2), planner.Training(seq_len=4096, global_batch=9)
>>> [v.rule for v in violations(model, cluster, layout, training)]
['tp_divides_heads', 'tp_divides_kv_heads', 'global_batch_divisible']
>>> planner.check_layout(model, cluster, layout, training)
Traceback (most recent call last):
...
planner.errors.PlannerError: layout.tp: tp=3 does not divide heads=32 (valid: 1, 2, 4, 8, 16, 32)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from planner.costs.pipeline import stated_split_error
from planner.divisors import divisors_text
from planner.errors import PlannerError
from planner.schedules import schedule_of, schedule_violation
from planner.specs.hardware import Cluster
from planner.specs.layout import Layout, Training
from planner.specs.model import ModelSpec

# what a rule's check returns when it fires: (field, message, valid values)
Found = tuple[str, str, str]


@dataclass(frozen=True, slots=True)
class Candidate:
    """What a rule looks at. ``gpus`` None: the world size is not checked."""

    model: ModelSpec
    cluster: Cluster
    layout: Layout
    training: Training
    gpus: int | None = None


@dataclass(frozen=True, slots=True)
class Violation:
    """One broken rule: the field to change, what is wrong, and the values that would do."""

    rule: str
    field: str
    message: str
    valid: str

    def error(self) -> PlannerError:
        return PlannerError(self.field, self.message, self.valid)


@dataclass(frozen=True, slots=True)
class Rule:
    """A named legality check. ``reads``: the Layout / Training fields (and ``gpus``) it looks
    at besides the model and the cluster, so the search can check it as soon as those are set."""

    name: str
    check: Callable[[Candidate], Found | None]
    reads: frozenset[str]

    def __call__(
        self,
        model: ModelSpec,
        cluster: Cluster,
        layout: Layout,
        training: Training,
        gpus: int | None = None,
    ) -> Violation | None:
        return self.on(Candidate(model, cluster, layout, training, gpus))

    def on(self, c: Candidate) -> Violation | None:
        found = self.check(c)
        return None if found is None else Violation(self.name, *found)


def _rule(name: str, *reads: str) -> Callable[[Callable[[Candidate], Found | None]], Rule]:
    return lambda check: Rule(name, check, frozenset(reads))


@_rule("world_size", "gpus", "tp", "cp", "dp", "pp")
def world_size(c: Candidate) -> Found | None:
    if c.gpus is not None and c.layout.world_size != c.gpus:
        return (
            "layout",
            f"tp*cp*dp*pp = {c.layout.tp}*{c.layout.cp}*{c.layout.dp}*{c.layout.pp} = "
            f"{c.layout.world_size} but gpus = {c.gpus}",
            "factors whose product equals gpus",
        )
    return None


@_rule("tp_divides_heads", "tp")
def tp_divides_heads(c: Candidate) -> Found | None:
    if c.model.heads % c.layout.tp:
        return (
            "layout.tp",
            f"tp={c.layout.tp} does not divide heads={c.model.heads}",
            divisors_text(c.model.heads),
        )
    return None


@_rule("tp_divides_kv_heads", "tp")
def tp_divides_kv_heads(c: Candidate) -> Found | None:
    # Megatron-Core splits the KV heads (query groups) over TP: kv_heads % tp == 0
    if c.model.mla is None and c.model.n_kv_heads % c.layout.tp:
        return (
            "layout.tp",
            f"tp={c.layout.tp} does not divide kv_heads={c.model.n_kv_heads}",
            divisors_text(c.model.n_kv_heads),
        )
    return None


@_rule("stages_within_layers", "pp", "vpp")
def stages_within_layers(c: Candidate) -> Found | None:
    # Megatron may count the embedding and the loss as pipeline layers (account-for-* splits)
    stages = c.layout.pp * c.layout.virtual_stages
    if stages > c.model.layers + 2:
        return (
            "layout.pp",
            f"pp*vpp = {stages} exceeds layers + 2 = {c.model.layers + 2}",
            f"pp*vpp <= {c.model.layers + 2} (embedding and loss may count as stages)",
        )
    return None


@_rule("stated_stage_split", "pp", "vpp", "schedule", "first_stage_layers", "last_stage_layers")
def stated_stage_split(c: Candidate) -> Found | None:
    # an uneven split as Megatron-Core states it (num_layers_in_first/last_pipeline_stage, or a
    # pipeline_model_parallel_layout whose middle ranks are even); V-shaped schedules place two
    # chunks per rank, which these counts do not describe
    first, last = c.layout.first_stage_layers, c.layout.last_stage_layers
    if first is None and last is None:
        return None
    field = "layout.first_stage_layers" if first is not None else "layout.last_stage_layers"
    if c.layout.pp > 1 and schedule_of(c.layout).placement == "v":
        return (
            field,
            f"schedule {c.layout.pipeline_schedule} places two chunks per rank: a first / last "
            "rank layer count does not describe its split",
            "a schedule that is not V-shaped, or leave both unset",
        )
    wrong = stated_split_error(c.model.layers, c.layout.pp, first, last)
    return None if wrong is None else (field, *wrong)


@_rule("vpp_needs_pp", "pp", "vpp")
def vpp_needs_pp(c: Candidate) -> Found | None:
    if c.layout.vpp and c.layout.vpp > 1 and c.layout.pp == 1:
        return ("layout.vpp", "virtual pipeline stages need pp > 1", "vpp=1 or pp>1")
    return None


@_rule("schedule", "pp", "vpp", "schedule", "dp", "micro_batch", "global_batch")
def schedule(c: Candidate) -> Found | None:
    # the schedule object knows its chunks, pipeline, layer placement and warm-up micro-batches
    return schedule_violation(c.model, c.layout, c.training)


@_rule("cp_divides_seq_len", "cp", "seq_len")
def cp_divides_seq_len(c: Candidate) -> Found | None:
    if c.layout.cp > 1 and c.training.seq_len % (2 * c.layout.cp):
        return (
            "layout.cp",
            f"seq_len={c.training.seq_len} is not divisible by 2*cp",
            "cp with seq_len % (2*cp) == 0",
        )
    return None


@_rule("cp_attention_only", "cp")
def cp_attention_only(c: Candidate) -> Found | None:
    if c.layout.cp > 1 and any(
        layer.mixer.kind != "attention" for layer, _ in c.model.layer_kinds()
    ):
        return (
            "layout.cp",
            "context parallelism of state-space / linear-attention layers is not modelled",
            "cp=1 for models with such layers",
        )
    return None


@_rule("ep_needs_experts", "ep")
def ep_needs_experts(c: Candidate) -> Found | None:
    if c.model.moe is None and c.layout.ep > 1:
        return ("layout.ep", f"ep={c.layout.ep} but {c.model.name} has no experts", "1")
    return None


@_rule("ep_divides_experts", "ep")
def ep_divides_experts(c: Candidate) -> Found | None:
    if c.model.moe is not None and c.model.moe.experts % c.layout.ep:
        return (
            "layout.ep",
            f"ep={c.layout.ep} does not divide experts={c.model.moe.experts}",
            divisors_text(c.model.moe.experts),
        )
    return None


@_rule("ep_divides_tp_dp_cp", "ep", "tp", "dp", "cp")
def ep_divides_tp_dp_cp(c: Candidate) -> Found | None:
    grid = c.layout.tp * c.layout.dp * c.layout.cp
    if c.model.moe is not None and grid % c.layout.ep:
        return (
            "layout.ep",
            f"ep={c.layout.ep} must divide tp*dp*cp={grid} "
            "(expert parallelism is carved out of TP x DP x CP)",
            divisors_text(grid),
        )
    return None


@_rule("dp_shard_tiles_dp_cp", "dp_shard", "dp", "cp", "zero")
def dp_shard_tiles_dp_cp(c: Candidate) -> Found | None:
    shard, grid = c.layout.dp_shard, c.layout.dp * c.layout.cp
    if shard is None:
        return None
    if grid % shard:
        return (
            "layout.dp_shard",
            f"dp_shard={shard} does not divide dp*cp={grid} (the shard groups must tile the "
            "DP x CP ranks)",
            divisors_text(grid),
        )
    if shard < grid and c.layout.zero == 0:
        return (
            "layout.dp_shard",
            f"dp_shard={shard} shards ZeRO state, and zero is 0",
            "zero 1, 2 or 3, or dp_shard unset",
        )
    return None


@_rule("overlap_ep_needs_interleaving", "overlap_ep_comm", "pp", "vpp")
def overlap_ep_needs_interleaving(c: Candidate) -> Found | None:
    if c.layout.overlap_ep_comm and not c.layout.pairs_microbatches:
        return (
            "layout.overlap_ep_comm",
            "all-to-all overlap pairs the forward of one micro-batch with the backward of "
            "another, which with pp > 1 needs the interleaved schedule",
            "vpp >= 2, pp = 1, or overlap_ep_comm false",
        )
    return None


@_rule("global_batch_divisible", "global_batch", "micro_batch", "dp")
def global_batch_divisible(c: Candidate) -> Found | None:
    per_step = c.training.micro_batch * c.layout.dp
    if c.training.global_batch % per_step:
        return (
            "training.global_batch",
            f"global_batch={c.training.global_batch} is not divisible by "
            f"micro_batch*dp = {c.training.micro_batch}*{c.layout.dp} = {per_step}",
            f"a multiple of {per_step}",
        )
    return None


@_rule("precision_supported", "precision")
def precision_supported(c: Candidate) -> Found | None:
    try:  # the accelerator spec is the one place that knows its precisions
        c.cluster.accelerator.peak_flops_per_s(c.training.precision)
    except PlannerError as exc:
        return (exc.field, exc.message, exc.valid or "")
    return None


# Activation offloading as Megatron-Core allows it (TransformerConfig): fewer layers than the
# model has, no pipeline parallelism, no activation recompute; and a known host link.


@_rule("offload_below_layers", "offload_layers")
def offload_below_layers(c: Candidate) -> Found | None:
    n = c.training.offload_layers
    if n and n >= c.model.layers:
        return (
            "training.offload_layers",
            f"offload_layers={n} but the model has {c.model.layers} layers",
            f"0 to {c.model.layers - 1}",
        )
    return None


@_rule("offload_without_pp", "offload_layers", "pp")
def offload_without_pp(c: Candidate) -> Found | None:
    if c.training.offload_layers and c.layout.pp > 1:
        return (
            "training.offload_layers",
            f"activation offloading with pp={c.layout.pp}: Megatron-Core supports it only "
            "without pipeline parallelism",
            "pp 1, or offload_layers 0",
        )
    return None


@_rule("offload_without_recompute", "offload_layers", "recompute")
def offload_without_recompute(c: Candidate) -> Found | None:
    if c.training.offload_layers and c.training.recompute != "none":
        return (
            "training.offload_layers",
            f"activation offloading with recompute {c.training.recompute}: Megatron-Core does "
            "not combine them",
            "recompute none, or offload_layers 0",
        )
    return None


def _no_host_link(c: Candidate, field: str, off: str) -> Found | None:
    """``training.<field>`` moves data to host memory: refused when the accelerator's spec
    gives no host link bandwidth (``off``: the value that turns the offload off)."""
    if c.cluster.accelerator.host_link_gb_per_s is not None:
        return None
    return (
        f"training.{field}",
        f"{c.cluster.accelerator.name} has no host link bandwidth in its spec (host_link_gb_per_s)",
        f"{field} {off}, or a spec with host_link_gb_per_s",
    )


@_rule("offload_needs_host_link", "offload_layers")
def offload_needs_host_link(c: Candidate) -> Found | None:
    return _no_host_link(c, "offload_layers", "0") if c.training.offload_layers else None


# Host-memory offload as DeepSpeed runs it (deepspeed/runtime/zero/config.py offload_optimizer:
# ZeRO stages 1-3; activation_checkpointing cpu_checkpointing: the checkpoints of full
# recompute) and as the planner costs it: a known host link, and for the optimizer the node's
# host DRAM bandwidth (planner/costs/host_offload.py).


@_rule("optimizer_offload_needs_zero", "optimizer_offload", "zero")
def optimizer_offload_needs_zero(c: Candidate) -> Found | None:
    if c.training.optimizer_offload and c.layout.zero == 0:
        return (
            "training.optimizer_offload",
            "optimizer offload with ZeRO stage 0: DeepSpeed offloads the optimizer of a ZeRO "
            "optimizer only",
            "zero 1, 2 or 3, or optimizer_offload off",
        )
    return None


@_rule("optimizer_offload_needs_host", "optimizer_offload")
def optimizer_offload_needs_host(c: Candidate) -> Found | None:
    if not c.training.optimizer_offload:
        return None
    if (found := _no_host_link(c, "optimizer_offload", "off")) is not None:
        return found
    if c.cluster.spec.host_memory_bandwidth_gb_per_s is None:
        return (
            "training.optimizer_offload",
            f"cluster {c.cluster.id!r} has no host_memory_bandwidth_gb_per_s in its spec (the "
            "CPU's Adam update is costed from it)",
            "optimizer_offload off, or a cluster spec with host_memory_bandwidth_gb_per_s",
        )
    return None


@_rule(
    "checkpoint_offload_needs_full_recompute",
    "checkpoint_offload",
    "recompute",
    "recompute_fraction",
    "pp",
)
def checkpoint_offload_needs_full_recompute(c: Candidate) -> Found | None:
    t = c.training
    if not t.checkpoint_offload:
        return None
    if t.recompute != "full":
        return (
            "training.checkpoint_offload",
            f"checkpoint offload with recompute {t.recompute}: only full recompute keeps "
            "layer-input checkpoints to offload",
            "recompute full, or checkpoint_offload off",
        )
    if t.recompute_share < 1.0:
        return (
            "training.checkpoint_offload",
            f"checkpoint offload with recompute_fraction {t.recompute_fraction:g}: costed with "
            "every layer's checkpoint on the host only",
            "recompute_fraction unset (every layer), or checkpoint_offload off",
        )
    if c.layout.pp > 1:
        return (
            "training.checkpoint_offload",
            f"checkpoint offload with pp={c.layout.pp}: costed without pipeline parallelism only",
            "pp 1, or checkpoint_offload off",
        )
    return _no_host_link(c, "checkpoint_offload", "off")


RULES: tuple[Rule, ...] = (
    world_size,
    tp_divides_heads,
    tp_divides_kv_heads,
    stages_within_layers,
    vpp_needs_pp,
    schedule,
    stated_stage_split,
    cp_divides_seq_len,
    cp_attention_only,
    ep_needs_experts,
    ep_divides_experts,
    ep_divides_tp_dp_cp,
    dp_shard_tiles_dp_cp,
    overlap_ep_needs_interleaving,
    global_batch_divisible,
    precision_supported,
    offload_below_layers,
    offload_without_pp,
    offload_without_recompute,
    offload_needs_host_link,
    optimizer_offload_needs_zero,
    optimizer_offload_needs_host,
    checkpoint_offload_needs_full_recompute,
)


@_rule("interleaved_even_split", "pp", "vpp")
def interleaved_even_split(c: Candidate) -> Found | None:
    # legal uneven splits exist (DeepSeek-V3's --pipeline-model-parallel-layout), but the
    # search proposes only those that Megatron-LM's split flags express (search/export.py)
    stages = c.layout.pp * c.layout.virtual_stages
    if c.layout.virtual_stages > 1 and c.model.layers % stages and (c.model.layers + 2) % stages:
        return (
            "layout.vpp",
            f"layers={c.model.layers} (+ embedding and loss) not divisible by pp*vpp = {stages}",
            f"pp*vpp dividing {c.model.layers} or {c.model.layers + 2}",
        )
    return None


# The search proposes legal layouts only, and of those only the ones every export can express.
SEARCH_RULES: tuple[Rule, ...] = (*RULES, interleaved_even_split)


def violations(
    model: ModelSpec,
    cluster: Cluster,
    layout: Layout,
    training: Training,
    gpus: int | None = None,
    rules: Sequence[Rule] = RULES,
) -> list[Violation]:
    """Every rule the layout breaks, in rule order (empty: legal)."""
    c = Candidate(model, cluster, layout, training, gpus)
    return [v for v in (rule.on(c) for rule in rules) if v is not None]


def first_violation(
    model: ModelSpec,
    cluster: Cluster,
    layout: Layout,
    training: Training,
    gpus: int | None = None,
    rules: Sequence[Rule] = RULES,
) -> Violation | None:
    """The first rule the layout breaks, or None when it breaks none."""
    c = Candidate(model, cluster, layout, training, gpus)
    for rule in rules:
        v = rule.on(c)
        if v is not None:
            return v
    return None


def check_layout(
    model: ModelSpec, cluster: Cluster, layout: Layout, training: Training, gpus: int | None = None
) -> None:
    """Raise PlannerError naming the first illegal field and the values that would be valid."""
    v = first_violation(model, cluster, layout, training, gpus)
    if v is not None:
        raise v.error()
