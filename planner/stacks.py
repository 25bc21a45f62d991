"""A software stack applied to one step: its defaults, its capabilities, its host cost.

A :class:`~planner.specs.stack.StackSpec` enters a simulation in three ways:

* :func:`apply_stack` fills every Layout / Training field the caller left unset with the
  stack's value (pydantic's ``model_fields_set`` says what was set): attention kernel, unfused
  elementwise chains, loss kernel, dropout, precision, gradient-reduce dtype, overlaps,
  pipeline scatter/gather, selective-recompute modules;
* :func:`stack_violation` refuses what the stack cannot run (a parallelism, ZeRO stage,
  schedule, recompute granularity or fp8), naming the stack and the field;
* the execution mode (eager, compiled, CUDA graphs) is the ``Training.execution`` default,
  which scales the host time per framework op (:func:`planner.costs.host.host_op_factor`).

``DEFAULT_STACK`` is the stack a command uses when none is given: Megatron-Core with
Transformer Engine, whose defaults are the planner's field defaults, so a prediction without
``--stack`` is the one this planner has always made.
"""

from __future__ import annotations

from typing import Any, TypeVar

from planner.errors import PlannerError
from planner.schedules import SCHEDULES, default_schedule_name
from planner.specs.knobs import fp8_gatherable
from planner.specs.layout import Layout, Training
from planner.specs.model import ModelSpec
from planner.specs.stack import AttentionImpl, StackSpec

SpecT = TypeVar("SpecT", Layout, Training)

DEFAULT_STACK = "megatron-core"

# the Layout / Training fields a stack sets when the caller leaves them unset
STACK_LAYOUT_FIELDS = (
    "overlap_tp_comm",
    "overlap_dp_grad_reduce",
    "overlap_zero3_param_gather",
    "pp_scatter_gather",
    "overlap_pp_comm",
    "zero3_reshard_after_forward",
    "zero3_collectives",
    "overlap_ep_comm",
)
STACK_TRAINING_FIELDS = (
    "attention_kernel",
    "unfused_elementwise",
    "cross_entropy",
    "fp8_recipe",
    "fp8_param_gather",
    "fp8_weight_cache",
    "moe_dispatcher",
    "fp8_dispatch",
    "optimizer_kernel",
    "dropout",
    "linear_bias",
    "vocab_multiple",
    "fp32_grad_accumulation_pass",
    "grad_accumulation_add",
    "overlap_tp_backward",
    "precision",
    "grad_reduce_dtype",
    "execution",
    "backward_host_ops",
    "recompute_modules",
)

# the stack's attention implementation as the planner's attention-kernel model
ATTENTION_KERNEL: dict[AttentionImpl, str] = {
    "cudnn_fused": "cudnn",
    "flash3": "fused",
    "flash2": "flash2",
    "flash_triton": "flash_triton",
    "sdpa_flash": "flash2",  # SDPA's flash backend runs FlashAttention-2 kernels
    "sdpa_mem_efficient": "flash2",  # tiled, scores never materialised: the flash2 curve
    "math": "unfused",
    "unfused": "unfused",
}


def unfused_chains(stack: StackSpec) -> tuple[str, ...]:
    """The elementwise chains the stack runs as separate kernels (Training order)."""
    k = stack.kernels
    flags = (
        ("norm", k.fused_norm),
        ("glu", k.fused_glu),
        ("rope", k.fused_rope),
        ("bias_dropout_add", k.fused_bias_dropout_add),
        ("expert_bias", k.fused_expert_bias),
    )
    return tuple(name for name, fused in flags if not fused)


def training_defaults(
    stack: StackSpec, model: ModelSpec | None, training: Training
) -> dict[str, Any]:
    """Training fields the stack sets, for ``training`` (recompute modules only apply to
    selective recompute; ``model`` None: not an MLA model)."""
    out: dict[str, Any] = {
        "attention_kernel": ATTENTION_KERNEL[stack.kernels.attention],
        "unfused_elementwise": unfused_chains(stack),
        "cross_entropy": stack.kernels.cross_entropy,
        "fp8_recipe": stack.kernels.fp8_recipe,
        "fp8_param_gather": stack.kernels.fp8_param_gather and _fp8_gatherable(stack, training),
        "fp8_weight_cache": stack.kernels.fp8_weight_cache,
        "moe_dispatcher": stack.kernels.moe_dispatcher,
        "fp8_dispatch": stack.kernels.fp8_dispatch,
        "optimizer_kernel": stack.kernels.optimizer,
        "dropout": stack.dropout,
        "linear_bias": stack.linear_bias,
        "vocab_multiple": stack.vocab_multiple,
        "fp32_grad_accumulation_pass": stack.data_parallel.fp32_grad_accumulation_pass,
        "grad_accumulation_add": stack.data_parallel.grad_accumulation_add,
        "overlap_tp_backward": stack.overlap.tp_backward_async,
        "precision": stack.precision,
        "grad_reduce_dtype": stack.data_parallel.grad_reduce_dtype,
        "execution": stack.execution.mode,
        "backward_host_ops": stack.execution.backward_ops,
    }
    if training.recompute == "selective":
        mla_modules = stack.selective_recompute_modules_mla
        mla = model is not None and model.mla is not None
        modules = mla_modules if mla and mla_modules else None
        out["recompute_modules"] = modules or stack.selective_recompute_modules
    return out


def _fp8_gatherable(stack: StackSpec, training: Training) -> bool:
    """Whether ``training`` under ``stack`` (its precision and recipe, else the stack's) runs
    fp8 with a recipe whose weights can be gathered cast (:func:`layout.fp8_gatherable`)."""
    given = training.model_fields_set
    precision = training.precision if "precision" in given else stack.precision
    recipe = training.fp8_recipe if "fp8_recipe" in given else stack.kernels.fp8_recipe
    return fp8_gatherable(precision, recipe)


# the submodules Megatron-Core's selective recompute can add to its default set, lightest
# first (TransformerConfig.recompute_modules, core_v0.12.0 and later): the norms, the MLA
# up-projection, the MoE activation, the shared experts, then whole dense MLPs and MoE layers
WIDER_MODULES: tuple[str, ...] = (
    "layernorm",
    "mla_up_proj",
    "moe_act",
    "shared_experts",
    "mlp",
    "moe",
)


def wider_selective(
    stack: StackSpec, model: ModelSpec, training: Training
) -> list[tuple[str, ...]]:
    """The selective set of ``training`` (at recompute selective: its modules, else the
    stack's, :func:`training_defaults`) widened one submodule at a time, lightest first
    (:data:`WIDER_MODULES`), by those the stack's selective recompute takes
    (``capabilities.recompute_modules``) and the model has; empty for a stack that takes no
    module list."""
    modules = tuple(
        training.recompute_modules
        or training_defaults(stack, model, training).get("recompute_modules")
        or ()
    )
    moe = model.moe
    has = {
        "layernorm": True,
        "mla_up_proj": model.mla is not None,
        "moe_act": moe is not None,
        "shared_experts": moe is not None and bool(moe.shared_experts),
        "mlp": moe is None or bool(moe.dense_layers) or moe.layer_freq > 1,
        "moe": moe is not None,
    }
    runs = set(stack.capabilities.recompute_modules)
    out: list[tuple[str, ...]] = []
    for module in WIDER_MODULES:
        if module in modules or module not in runs or not has[module]:
            continue
        modules = (*modules, module)
        out.append(modules)
    return out


def layout_defaults(stack: StackSpec, layout: Layout) -> dict[str, Any]:
    """Layout fields the stack sets: its overlaps, pipeline scatter/gather and whether FSDP
    layers stay gathered under a pipeline."""
    o = stack.overlap
    tp_overlap = o.tp_comm == "with_sequence_parallel" and layout.sequence_parallel
    return {
        "overlap_tp_comm": tp_overlap and layout.tp > 1,
        "overlap_dp_grad_reduce": o.dp_grad_reduce and (layout.pp == 1 or o.dp_grad_reduce_with_pp),
        "overlap_zero3_param_gather": o.zero3_param_gather,
        "pp_scatter_gather": o.pp_scatter_gather and layout.pp > 1,
        "overlap_pp_comm": o.pp_p2p_interleaved and layout.pp > 1,
        "zero3_reshard_after_forward": not (stack.data_parallel.gathered_with_pp and layout.pp > 1),
        "zero3_collectives": stack.data_parallel.zero3_collectives,
        # where the schedule gives it another micro-batch to hide behind (legality
        # overlap_ep_needs_interleaving)
        "overlap_ep_comm": o.ep_comm and layout.ep > 1 and layout.pairs_microbatches,
    }


def unset_fields(spec: Layout | Training, values: dict[str, Any]) -> dict[str, Any]:
    """The entries of ``values`` whose field ``spec`` does not set explicitly."""
    return {k: v for k, v in values.items() if k not in spec.model_fields_set}


def apply_stack(
    stack: StackSpec, model: ModelSpec, layout: Layout, training: Training
) -> tuple[Layout, Training]:
    """``layout`` and ``training`` with every field the caller did not set taken from the
    stack (a field set explicitly, even to the planner's default, is kept)."""
    return stack_layout(stack, layout), stack_training(stack, model, training)


def stack_layout(stack: StackSpec, layout: Layout) -> Layout:
    """``layout`` with the fields it leaves unset taken from ``stack`` (:func:`apply_stack`).

    The stack sets only boolean switches (:func:`layout_defaults`), which the Layout validator
    does not read (it checks the world size and the schedule's chunk count): the copy is not
    validated again, and the fields it sets count as set, as with ``with_changes``."""
    update = unset_fields(layout, layout_defaults(stack, layout))
    return layout.model_copy(update=update) if update else layout


def stack_training(stack: StackSpec, model: ModelSpec, training: Training) -> Training:
    """``training`` with the fields it leaves unset taken from ``stack`` (:func:`apply_stack`)."""
    update = unset_fields(training, training_defaults(stack, model, training))
    out = _with_changes(stack, training, update)
    conflict = out.fp8_gather_conflict
    if conflict is not None:
        raise PlannerError(
            "training.fp8_param_gather", f"stack {stack.name!r}: {conflict}", "fp8_param_gather off"
        )
    return out


def _with_changes(stack: StackSpec, spec: SpecT, update: dict[str, Any]) -> SpecT:
    """``spec.with_changes(**update)``; the stack's values count as set, so applying the stack
    again changes nothing. A rejected value is a PlannerError naming the stack."""
    if not update:
        return spec
    try:
        return spec.with_changes(**update)
    except ValueError as exc:
        raise PlannerError(
            "stack", f"{stack.name}: its defaults do not apply ({str(exc).splitlines()[0]})"
        ) from None


# host-memory offloads a stack may run: (Training and capability field, what, shipped stacks)
HOST_OFFLOADS = (
    (
        "optimizer_offload",
        "optimizer offload to the CPU",
        "deepspeed-zero, deepspeed-zero3-2021, megatron-deepspeed(-2022)",
    ),
    (
        "checkpoint_offload",
        "activation checkpoints in host memory",
        "deepspeed-zero3-2021, megatron-deepspeed(-2022)",
    ),
)


def stack_violation(stack: StackSpec, layout: Layout, training: Training) -> PlannerError | None:
    """What ``stack`` cannot run of this layout, as the error to raise (None: it can): the
    first of :func:`stack_violations`."""
    return next(iter(stack_violations(stack, layout, training)), None)


def stack_violations(stack: StackSpec, layout: Layout, training: Training) -> list[PlannerError]:
    """Everything ``stack`` cannot run of this layout, one error each, in the order the fields
    are checked (empty: it runs it)."""
    c = stack.capabilities
    found: list[PlannerError] = []
    checks = (
        ("layout.tp", layout.tp > 1 and not c.tp, f"tp={layout.tp}", "tp=1"),
        (
            "layout.sequence_parallel",
            layout.sequence_parallel and not c.sequence_parallel,
            "sequence parallelism",
            "sequence_parallel off",
        ),
        ("layout.pp", layout.pp > 1 and not c.pp, f"pp={layout.pp}", "pp=1"),
        ("layout.cp", layout.cp > 1 and not c.cp, f"cp={layout.cp}", "cp=1"),
        ("layout.ep", layout.ep > 1 and not c.ep, f"ep={layout.ep}", "ep=1"),
        (
            "layout.overlap_tp_comm",
            layout.overlap_tp_comm and not c.tp_comm_overlap,
            "TP communication overlap",
            "overlap_tp_comm off",
        ),
        (
            "layout.zero",
            layout.zero not in c.zero_stages,
            f"ZeRO stage {layout.zero}",
            "zero " + " / ".join(map(str, c.zero_stages)),
        ),
        (
            "training.recompute",
            training.recompute not in c.recompute,
            f"recompute {training.recompute}",
            "recompute " + " / ".join(c.recompute),
        ),
        (
            "training.recompute_fraction",
            training.recompute_share not in (0.0, 1.0) and not c.partial_recompute,
            f"full recompute of a share of the layers (recompute_fraction "
            f"{training.recompute_fraction})",
            "recompute_fraction unset, or a stack with capabilities.partial_recompute",
        ),
        (
            "layout.dp_shard",
            layout.dp_replicas > 1 and not c.hybrid_shard,
            f"hybrid sharding (dp_shard {layout.dp_shard} of dp*cp {layout.dp * layout.cp})",
            "dp_shard unset, or a stack with capabilities.hybrid_shard",
        ),
        ("training.precision", training.precision == "fp8" and not c.fp8, "fp8", "bf16, fp16"),
        (
            "training.optimizer_states",
            training.optimizer_states != "fp32" and not c.reduced_optimizer_states,
            f"optimizer_states {training.optimizer_states}",
            "optimizer_states fp32, or a stack with capabilities.reduced_optimizer_states "
            "(megatron-core, megatron-bridge, nemo)",
        ),
        *(
            (
                f"training.{name}",
                getattr(training, name) and not getattr(c, name),
                what,
                f"{name} off, or a stack with capabilities.{name} ({stacks})",
            )
            for name, what, stacks in HOST_OFFLOADS
        ),
    )
    for field, broken, what, valid in checks:
        if broken:
            found.append(PlannerError(field, f"stack {stack.name!r} cannot run {what}", valid))
    return found + _module_violations(stack, training) + _pipeline_violations(stack, layout)


def _pipeline_violations(stack: StackSpec, layout: Layout) -> list[PlannerError]:
    """What ``stack`` cannot run of ``layout``'s pipeline: its ZeRO stage beside pp > 1, its
    schedule."""
    c, found = stack.capabilities, []
    pp_zero = c.pp_zero_stages
    if layout.pp > 1 and pp_zero is not None and layout.zero not in pp_zero:
        found.append(
            PlannerError(
                "layout.zero",
                f"stack {stack.name!r} cannot run ZeRO stage {layout.zero} with pipeline "
                "parallelism",
                "zero " + " / ".join(map(str, pp_zero)) + " with pp > 1, or pp 1",
            )
        )
    if layout.pp > 1:
        schedule = layout.schedule or default_schedule_name(layout.vpp)
        if schedule not in c.schedules:
            hint = "; no shipped stack runs it: --stack none costs it as given"
            if SCHEDULES[schedule].torchtitan:
                hint = "; torch.distributed.pipelining runs it: --stack torchtitan-eager"
            found.append(
                PlannerError(
                    "layout.schedule",
                    f"stack {stack.name!r} cannot run the {schedule} pipeline schedule",
                    ", ".join(c.schedules) + hint,
                )
            )
    return found


def _module_violations(stack: StackSpec, training: Training) -> list[PlannerError]:
    """The selective-recompute submodules ``training`` names that ``stack`` cannot re-run
    (beyond its own sets, ``capabilities.recompute_modules``), as one error; else none."""
    modules = training.recompute_modules if training.recompute == "selective" else None
    runs = {*stack.capabilities.recompute_modules, *stack.selective_recompute_modules}
    runs |= set(stack.selective_recompute_modules_mla or ())
    if not modules or set(modules) <= runs:
        return []
    return [
        PlannerError(
            "training.recompute_modules",
            f"stack {stack.name!r} cannot re-run "
            f"{', '.join(sorted(set(modules) - runs))} in selective recompute",
            " / ".join(sorted(runs)),
        )
    ]


def model_violations(stack: StackSpec, model: ModelSpec) -> list[PlannerError]:
    """What ``stack``'s model definitions cannot express of ``model``, one error each
    (empty: it runs the model): its activation, grouped-query attention, an untied output
    layer, multi-head latent attention (``capabilities.activations``, ``gqa``,
    ``untied_embeddings``, ``mla``)."""
    c = stack.capabilities
    gqa = model.n_kv_heads < model.heads and model.mla is None
    checks = (
        (
            "model.activation",
            model.activation not in c.activations,
            f"the {model.activation} activation",
            " / ".join(c.activations),
        ),
        ("model.kv_heads", gqa and not c.gqa, "grouped-query attention", "kv_heads = heads"),
        (
            "model.tied_embeddings",
            not model.tied_embeddings and not c.untied_embeddings,
            "an untied output layer",
            "tied_embeddings true",
        ),
        ("model.mla", model.mla is not None and not c.mla, "multi-head latent attention", "none"),
    )
    later = "; or a later stack of the same software (planner list stacks)"
    return [
        PlannerError(field, f"stack {stack.name!r} cannot run {what}", valid + later)
        for field, broken, what, valid in checks
        if broken
    ]


def check_model_stack(stack: StackSpec, model: ModelSpec) -> None:
    """Raise the first of :func:`model_violations`, if any."""
    found = model_violations(stack, model)
    if found:
        raise found[0]


def applied_violation(
    stack: StackSpec, model: ModelSpec, layout: Layout, training: Training
) -> PlannerError | None:
    """:func:`stack_violation` of ``layout`` and ``training`` once the stack has filled the
    fields they leave unset (what the stack would be asked to run)."""
    return stack_violation(stack, *apply_stack(stack, model, layout, training))


def check_stack(stack: StackSpec, layout: Layout, training: Training) -> None:
    """Raise :func:`stack_violation`'s error, if any."""
    err = stack_violation(stack, layout, training)
    if err is not None:
        raise err


def reserved_peak_gib(stack: StackSpec, allocated_gib: float) -> float:
    """The caching allocator's reserved peak for an allocated peak, GiB."""
    return allocated_gib * (1.0 + stack.memory.reserved_overhead)


__all__ = [
    "ATTENTION_KERNEL",
    "DEFAULT_STACK",
    "STACK_LAYOUT_FIELDS",
    "STACK_TRAINING_FIELDS",
    "applied_violation",
    "apply_stack",
    "check_model_stack",
    "check_stack",
    "layout_defaults",
    "model_violations",
    "reserved_peak_gib",
    "stack_violation",
    "stack_violations",
    "training_defaults",
    "unfused_chains",
]
