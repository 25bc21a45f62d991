"""What every launch-file writer needs: batch arithmetic, the pipeline split, and the rule that a
layout field a dialect cannot express is stated, never dropped."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from planner.costs.flops import padded_vocab
from planner.costs.pipeline import layers_per_rank
from planner.costs.recompute import block_layers
from planner.errors import PlannerError
from planner.specs.knobs import DEFAULT_RECOMPUTE_MODULES
from planner.specs.layout import Layout, Training
from planner.specs.model import ModelSpec

NOT_EXPRESSED = "NOT EXPRESSED"  # every statement of a dropped field carries this marker
# Megatron-LM --make-vocab-size-divisible-by default (megatron/training/arguments.py,
# core_v0.15.0); the exports state the flag only when Training.vocab_multiple differs
MEGATRON_VOCAB_MULTIPLE = 128


def grad_accumulation_steps(layout: Layout, training: Training) -> int:
    """Micro-batches per DP rank and step: global_batch / (micro_batch x dp), which must be whole
    (DeepSpeed asserts train_batch_size = micro x accumulation x data-parallel world size)."""
    per_step = training.micro_batch * layout.dp
    if training.global_batch % per_step:
        raise PlannerError(
            "training.global_batch",
            f"{training.global_batch} sequences are not a whole number of accumulation steps of "
            f"micro_batch {training.micro_batch} x dp {layout.dp}",
            f"a multiple of {per_step}",
        )
    return training.global_batch // per_step


@dataclass(frozen=True)
class PartialRecompute:
    """``Training.recompute_fraction`` as a count of layers per model chunk (Megatron's
    ``--recompute-num-layers`` with the block method): ``layers`` of ``chunk``; ``note`` says
    where the count's share differs from the fraction the planner costed (else empty)."""

    layers: int
    chunk: int
    note: list[str]


def partial_recompute(model: ModelSpec, layout: Layout, training: Training) -> PartialRecompute:
    """The recompute fraction of ``training`` (set: the caller checks) as whole layers of a
    model chunk of the mean size (``model.layers / (pp x vpp)``), at least one."""
    share = training.recompute_share
    layers, chunk = block_layers(model.layers, layout.pp, layout.virtual_stages, share)
    note = []
    if abs(layers / chunk - share) > 1e-9:
        note.append(
            f"training.recompute_fraction = {share:g}: written as {layers} of the {chunk} "
            f"layers of a model chunk ({layers / chunk:.3g}); the planner costed {share:g}"
        )
    return PartialRecompute(layers, chunk, note)


def megatron_full_recompute_args(model: ModelSpec, layout: Layout, training: Training) -> list[str]:
    """Megatron's arguments for full recompute (``#`` lines: what they cannot say exactly):
    every layer checkpointed (the uniform method, one layer a unit), or with
    ``recompute_fraction`` the block method's count of layers per model chunk."""
    if training.recompute_fraction is None:
        return [
            "--recompute-granularity full",
            "--recompute-method uniform",
            "--recompute-num-layers 1",
        ]
    part = partial_recompute(model, layout, training)
    return [
        "--recompute-granularity full",
        "--recompute-method block",
        f"--recompute-num-layers {part.layers}",
        *(f"# {n}" for n in part.note),
    ]


@dataclass(frozen=True)
class PipelineSplit:
    """How ``model.layers`` split over pp x vpp stages, in Megatron-Core's terms.

    ``even``: every (virtual) stage holds ``per_stage`` layers. Otherwise one of:
    ``account_for_embedding_and_loss`` (counting the embedding and the loss as a layer each makes
    the split even), ``first_stage_layers`` / ``last_stage_layers`` (the edge stages take the
    smaller share, as planner/costs/pipeline.py models it), or neither: set it by hand.
    """

    even: bool
    per_stage: int | None = None
    account_for_embedding_and_loss: bool = False
    first_stage_layers: int | None = None
    last_stage_layers: int | None = None
    # a stated split the first / last counts cannot express (a count of 0, or one interleaving
    # does not divide): Megatron-Core's pipeline_model_parallel_layout string, where one exists
    layout_string: str | None = None


def _stated_split(model: ModelSpec, layout: Layout) -> PipelineSplit | None:
    """The split a layout states (Layout.first_stage_layers / last_stage_layers), None when
    it states none or one equal to the even split."""
    if layout.first_stage_layers is None and layout.last_stage_layers is None:
        return None
    pp, vpp = layout.pp, layout.virtual_stages
    ranks = layers_per_rank(model.layers, pp, layout.first_stage_layers, layout.last_stage_layers)
    if len(set(ranks)) == 1 and ranks[0] % vpp == 0:
        return None
    first, last = ranks[0], ranks[-1]
    if first > 0 and last > 0 and first % vpp == 0 and last % vpp == 0:
        return PipelineSplit(even=False, first_stage_layers=first, last_stage_layers=last)
    if vpp > 1:
        return PipelineSplit(even=False)
    # 'Et*4|(t*4|)*14t*1mL' (Megatron-Core PipelineParallelLayerLayout.parse_str_to_list)
    middle = f"(t*{ranks[1]}|)*{pp - 2}" if pp > 2 else ""
    head = "m" * model.mtp_layers + "L"
    return PipelineSplit(even=False, layout_string=f"Et*{first}|{middle}t*{last}{head}")


def pipeline_split(model: ModelSpec, layout: Layout) -> PipelineSplit:
    """The split of ``model`` over ``layout``'s (virtual) pipeline stages: the one it states,
    else the even one or the uneven one Megatron-Core's knobs make."""
    stated = _stated_split(model, layout)
    if stated is not None:
        return stated
    pp, vpp, layers = layout.pp, layout.virtual_stages, model.layers
    if layers % (pp * vpp) == 0:
        return PipelineSplit(even=True, per_stage=layers // (pp * vpp))
    if (layers + 2) % (pp * vpp) == 0:
        return PipelineSplit(even=False, account_for_embedding_and_loss=True)
    middle = -(-layers // pp)
    rest = layers - (pp - 2) * middle
    if vpp == 1 and pp > 2 and rest >= 2:
        return PipelineSplit(
            even=False, first_stage_layers=rest // 2, last_stage_layers=rest - rest // 2
        )
    return PipelineSplit(even=False)


def by_hand_note(model: ModelSpec, layout: Layout) -> str:
    """The statement for a split none of the Megatron-Core knobs makes even, or a stated one
    their first / last counts cannot express."""
    if layout.first_stage_layers is not None or layout.last_stage_layers is not None:
        ranks = layers_per_rank(
            model.layers, layout.pp, layout.first_stage_layers, layout.last_stage_layers
        )
        return (
            f"the stated split (layers per rank {ranks[0]}, ..., {ranks[-1]}) over pp*vpp = "
            f"{layout.pp * layout.virtual_stages} stages: {NOT_EXPRESSED} by the first / last "
            "counts, set pipeline_model_parallel_layout by hand"
        )
    return (
        f"{model.layers} layers do not split evenly over pp*vpp = "
        f"{layout.pp * layout.virtual_stages} stages: {NOT_EXPRESSED}, set the first / last "
        "stage layer counts by hand"
    )


# the Megatron-family dialects: what they cannot say of Training.fp8_dispatch
FP8_DISPATCH_REASON = (
    "Megatron-Core's flex dispatcher has no switch the planner knows of for FP8 dispatch with a "
    "BF16 combine (DeepSeek-V3's scheme)"
)


def field_value(layout: Layout, training: Training, name: str) -> Any:
    """A layout or training field's effective value (vpp 1 for none, the resolved schedule)."""
    if name == "vpp":
        return layout.virtual_stages
    if name == "schedule":
        return layout.pipeline_schedule
    if name in Layout.model_fields:
        return getattr(layout, name)
    return getattr(training, name)


def _in_use(layout: Layout, training: Training, name: str) -> bool:
    """Whether the field asks for something (a degree above 1, a switch on, a non-default)."""
    value = field_value(layout, training, name)
    if name == "sequence_parallel":
        return bool(value) and layout.tp > 1
    if name == "dp_shard":
        return layout.dp_replicas > 1
    if name == "overlap_tp_comm":
        return bool(value) and layout.tp > 1
    if name == "overlap_ep_comm":
        return bool(value) and layout.ep > 1
    if name == "moe_dispatcher":
        return value != "alltoall" and layout.ep > 1
    if name == "fp8_dispatch":
        return bool(value) and training.precision == "fp8" and layout.ep > 1
    if name in ("schedule", "pp_scatter_gather"):
        return layout.pp > 1 and value not in ("1f1b", False)
    if name == "recompute":
        return value != "none"
    if name == "recompute_modules":
        modules = value or DEFAULT_RECOMPUTE_MODULES
        return training.recompute == "selective" and tuple(modules) != DEFAULT_RECOMPUTE_MODULES
    if name == "cross_entropy":
        return value == "in_place"
    if name == "optimizer_states":
        return value != "fp32"
    if name == "overlap_dp_grad_reduce":
        return value is False and layout.dp > 1  # asked NOT to overlap
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value > (0 if name == "offload_layers" else 1)
    return True


def not_expressed(layout: Layout, training: Training, reasons: dict[str, str]) -> list[str]:
    """``"layout.tp = 2: <reason>"`` for each field of ``reasons`` the layout uses: the dialect
    has no key for it, and the statement says so instead of dropping it."""
    out = []
    for name, reason in reasons.items():
        if _in_use(layout, training, name):
            owner = "layout" if name in Layout.model_fields else "training"
            value = field_value(layout, training, name)
            shown = list(value) if isinstance(value, tuple) else value
            out.append(f"{owner}.{name} = {shown}: {NOT_EXPRESSED} ({reason})")
    return out


def vocab_padding_note(
    model: ModelSpec, layout: Layout, training: Training, framework: str
) -> list[str]:
    """A statement when the planner costed a padded vocabulary (``Training.vocab_multiple``)
    that ``framework``, which builds the tokenizer's size as it is, will not pad."""
    padded = padded_vocab(model, layout, training)
    bare = padded_vocab(model, layout, training.model_copy(update={"vocab_multiple": 1}))
    if padded == bare:
        return []
    return [
        f"training.vocab_multiple = {training.vocab_multiple}: {NOT_EXPRESSED} ({framework} "
        f"builds the {bare:,}-row vocabulary as it is; the planner costed {padded:,} padded rows)"
    ]


def host_offload_reasons(framework: str) -> dict[str, str]:
    """:func:`not_expressed` reasons for the host-memory offloads, in an export of
    ``framework`` that writes neither (the DeepSpeed dialects write them)."""
    return {
        "optimizer_offload": f"this {framework} export writes no optimizer offload; DeepSpeed's "
        "offload_optimizer is what the planner costs",
        "checkpoint_offload": f"this {framework} export writes no checkpoint offload; DeepSpeed's "
        "cpu_checkpointing is what the planner costs",
    }


def fp32_states_reason(framework: str) -> dict[str, str]:
    """:func:`not_expressed` reason for reduced optimizer states in an export of ``framework``,
    whose AdamW keeps an fp32 master and fp32 moments."""
    return {
        "optimizer_states": f"{framework}'s AdamW keeps an fp32 master weight and fp32 moments "
        "(12 B per parameter); reduced states are Transformer Engine / Apex optimizers under "
        "Megatron-Core, NeMo and Megatron-Bridge"
    }


# Megatron-Core's precision-aware optimizer (Transformer Engine FusedAdam) keeps fp32 master
# remainders (store_param_remainders) beside the moments; it has no master-free form
MEGATRON_BF16_STATES = {
    "optimizer_states": "Megatron-Core's precision-aware optimizer keeps the master weight "
    "(as remainders) beside bf16 moments (--exp-avg-dtype bf16 --exp-avg-sq-dtype bf16 gives "
    "6 B, not 4); a master-free bf16 AdamW is NeMo 1's distributed_fused_adam with dtype bf16"
}


__all__ = [
    "FP8_DISPATCH_REASON",
    "MEGATRON_BF16_STATES",
    "NOT_EXPRESSED",
    "fp32_states_reason",
    "host_offload_reasons",
    "PartialRecompute",
    "PipelineSplit",
    "by_hand_note",
    "field_value",
    "grad_accumulation_steps",
    "megatron_full_recompute_args",
    "not_expressed",
    "partial_recompute",
    "pipeline_split",
]
