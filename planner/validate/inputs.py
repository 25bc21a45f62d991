"""One case of either schema as the specs the simulator costs, and what the case left open.

:func:`case_inputs` turns a :class:`~planner.validate.cases.Case` (schema 1) or
:class:`~planner.validate.cases.CaseV2` into a :class:`CaseInputs`: the model, the cluster, the
stack (schema 1: :func:`~planner.validate.frameworks.stack_for_framework`; schema 2: the
case's own), a Layout and a Training holding only what the case states (the stack fills the
rest when the case is run), and the unstated knobs the run will tune. No free text is read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, get_args

from planner.errors import PlannerError
from planner.resources import MODELS_DIR, STACKS_DIR
from planner.specs.base import MAX_GLOBAL_BATCH
from planner.specs.hardware import Cluster
from planner.specs.layout import Layout, Training
from planner.specs.loading import load_cluster, load_model, load_stack, shipped_ids
from planner.specs.model import ModelSpec, MoESpec
from planner.specs.stack import StackSpec
from planner.validate.cases import Case, CaseV2, Knob
from planner.validate.framework_names import JAX_NAMES
from planner.validate.frameworks import (
    V1_LOSS,
    code_bases,
    normalise,
    stack_for_framework,
)


@dataclass
class CaseInputs:
    """What one case gives the simulator."""

    model: ModelSpec
    cluster: Cluster
    layout: Layout  # only the stated fields are set (``model_fields_set``)
    training: Training
    stack: StackSpec
    # schema 2 names the stack that ran: what it cannot run is the case's error. Schema 1 only
    # names a framework: a layout its stack cannot run is costed as given (and noted).
    enforce_stack: bool
    unstated: tuple[str, ...]  # knobs to tune (planner.unknowns)
    memory_kind: str  # which measured peak: allocated or reserved
    notes: list[str] = field(default_factory=list)
    # schema 1: the other code bases its framework name could stand for that run what the
    # case states (planner.validate.frameworks.code_bases); the predicted range spans them
    other_code_bases: tuple[StackSpec, ...] = ()


def _unstated(case: Case | CaseV2, listed: tuple[str, ...]) -> tuple[str, ...]:
    """Listed knobs plus those the case leaves null: micro_batch, vpp (with a pipeline),
    recompute, zero and ep (of an MoE model)."""
    nulls = {
        "micro_batch": case.training.micro_batch is None,
        "vpp": case.layout.vpp is None and case.layout.pp > 1,
        "recompute": case.training.recompute is None,
        "zero": case.layout.zero is None,
        "ep": case.layout.ep is None and case.model.moe is not None,
    }
    return tuple(k for k in get_args(Knob) if k in listed or nulls[k])


def implied_cp(case: Case | CaseV2) -> int | None:
    """The context-parallel size a case that leaves ``cp`` null but states ``dp`` implies:
    the GPUs that tp*pp*dp leave, ``num_gpus / (tp * pp * dp)``, where that is a whole
    number above 1; else None (cp 1, the default, or the world-size error names the
    mismatch)."""
    lay = case.layout
    if lay.cp is not None or lay.dp is None:
        return None
    copies, rest = divmod(case.num_gpus, lay.tp * lay.pp * lay.dp)
    return copies if not rest and copies > 1 else None


def dp_with_cp(case: Case | CaseV2) -> int | None:
    """The data-parallel size of a case whose stated ``dp`` counted its context-parallel ranks
    too (tp*pp*dp = num_gpus with cp > 1 stated, and cp dividing dp: the data-parallel group
    of torchtitan's FSDP mesh and Megatron's gradient reduction spans DP x CP): dp / cp; else
    None (as stated, or the world-size error names the mismatch)."""
    lay = case.layout
    cp = lay.cp or 1
    if lay.dp is None or cp <= 1 or lay.tp * lay.pp * lay.dp != case.num_gpus:
        return None
    return lay.dp // cp if lay.dp % cp == 0 else None


def dp_without_ep(case: Case | CaseV2) -> int | None:
    """The data-parallel size of an MoE case whose stated ``dp`` left out its expert-parallel
    ranks (tp*pp*cp*dp*ep = num_gpus with ep > 1, where tp*pp*cp*dp falls short: the
    "expert data parallel" size of DeepSpeed-MoE's terms, ranks that run the non-expert
    layers data parallel too, as EP is carved out of DP in Megatron-Core and schema 1):
    dp x ep; else None (as stated, or the world-size error names the mismatch)."""
    lay = case.layout
    ep, cp = lay.ep or 1, lay.cp or 1
    if lay.dp is None or ep <= 1 or case.model.moe is None:
        return None
    copy = lay.tp * lay.pp * cp * lay.dp
    return lay.dp * ep if copy != case.num_gpus and copy * ep == case.num_gpus else None


def _stated(case: Case | CaseV2, notes: list[str]) -> tuple[Layout, Training]:
    """The case's stated layout and training, with dp and cp as the job's size reads them
    (:func:`_sized`)."""
    layout = Layout(**case.layout.model_dump(exclude_none=True) | _sized(case, notes))
    return layout, Training(**case.training.model_dump(exclude_none=True))


def _sized(case: Case | CaseV2, notes: list[str]) -> dict[str, int]:
    """The dp and cp that tp*pp*cp*dp = num_gpus gives where the case states them otherwise,
    each noted: a dp that left the EP ranks out multiplied by them (then cp is as stated:
    the factor left over is EP, not CP), else a dp that counted the CP ranks divided by them,
    a null cp beside a stated dp, a null dp, implied by the job's size, and (schema 1) a
    stated dp the job's size contradicts where num_gpus is a multiple of tp*pp*cp."""
    dp = dp_without_ep(case)
    if dp is not None:
        notes.append(
            f"layout.dp {case.layout.dp} leaves out the expert-parallel ranks (tp*pp*cp*dp*ep "
            f"= num_gpus with ep {case.layout.ep}): costed as dp {dp}, EP carved out of it"
        )
        return {"dp": dp}
    sized: dict[str, int] = {}
    dp = dp_with_cp(case)
    if dp is not None:  # the stated dp counted the CP ranks
        sized["dp"] = dp
        notes.append(
            f"layout.dp {case.layout.dp} counts the context-parallel ranks (tp*pp*dp = "
            f"num_gpus with cp {case.layout.cp}): costed as dp {dp} x cp {case.layout.cp}"
        )
    cp = implied_cp(case)
    if cp is not None:  # implied by the job's size, as dp is below
        sized["cp"] = cp
        notes.append(
            f"layout.cp not stated: {cp}, the GPUs tp*pp*dp = "
            f"{case.layout.tp * case.layout.pp * (case.layout.dp or 1)} leave of num_gpus"
        )
    copy = case.layout.tp * case.layout.pp * sized.get("cp", case.layout.cp or 1)
    stated = case.layout.dp
    if (
        isinstance(case, Case)
        and "dp" not in sized
        and stated is not None
        and copy * stated != case.num_gpus
        and case.num_gpus % copy == 0
    ):  # schema 1: a dp the job's size contradicts; num_gpus (the figure tokens/s/GPU is per)
        sized["dp"] = case.num_gpus // copy
        notes.append(
            f"layout.dp {stated} disagrees with num_gpus {case.num_gpus} (tp*pp*cp*dp = "
            f"{copy * stated}): costed as dp {sized['dp']}, the GPUs one model copy of tp*pp*cp "
            f"= {copy} leaves"
        )
    if case.layout.dp is None:  # implied by the job's size: the GPUs one model copy leaves
        if case.num_gpus % copy:
            raise PlannerError(
                "layout.dp",
                f"not stated, and num_gpus = {case.num_gpus} is not a multiple of tp*pp*cp = "
                f"{copy}",
                "a dp with tp*cp*dp*pp = num_gpus",
            )
        sized["dp"] = case.num_gpus // copy
    return sized


# The model keys a schema 1 case states (shared/validation/README.md): the rest of a ModelSpec
# (per-layer mixers and windows, biased experts) it cannot say.
V1_MODEL_KEYS = (
    "layers",
    "hidden",
    "ffn_hidden",
    "activation",
    "heads",
    "kv_heads",
    "head_dim",
    "vocab",
    "tied_embeddings",
    "mla",
)
V1_MOE_KEYS = (
    "experts",
    "top_k",
    "expert_ffn_hidden",
    "shared_experts",
    "shared_expert_ffn_hidden",
    "dense_layers",
    "layer_freq",
)


def v1_model_structure(model: ModelSpec) -> tuple[ModelSpec, str | None]:
    """A schema 1 case's model with what that schema cannot state (``layer_groups``,
    ``moe.expert_bias``, ``moe.router_groups`` and ``router_group_topk``) taken from the
    shipped model of the same name, when every key the case states agrees with it; else the
    model as stated. Also the note saying so (None: none
    taken)."""
    if model.name not in shipped_ids(MODELS_DIR):
        return model, None
    shipped = load_model(model.name)
    if any(getattr(model, k) != getattr(shipped, k) for k in V1_MODEL_KEYS):
        return model, None
    if (model.moe is None) != (shipped.moe is None):
        return model, None
    update: dict = {}
    if model.moe is not None and shipped.moe is not None:
        if any(getattr(model.moe, k) != getattr(shipped.moe, k) for k in V1_MOE_KEYS):
            return model, None
        routing = ("expert_bias", "router_groups", "router_group_topk")
        moe_update = {
            k: getattr(shipped.moe, k)
            for k in routing
            if getattr(shipped.moe, k) != getattr(model.moe, k)
        }
        if moe_update:
            update["moe"] = model.moe.model_copy(update=moe_update)
    if shipped.layer_groups != model.layer_groups:
        update["layer_groups"] = shipped.layer_groups
    if not update:
        return model, None
    taken = " and ".join(
        "per-layer mixers" if k == "layer_groups" else _moe_taken(update[k]) for k in update
    )
    return ModelSpec.model_validate({**model.model_dump(), **update}), (
        f"model {model.name!r}: {taken} from the shipped model of that name "
        "(schema 1 cannot state them; every stated dimension agrees)"
    )


def _moe_taken(moe: MoESpec) -> str:
    """What :func:`v1_model_structure` took into an MoE block, in words."""
    parts = ["biased experts"] if moe.expert_bias else []
    if moe.router_groups:
        parts.append(
            f"group-limited routing ({moe.router_group_topk} of {moe.router_groups} groups)"
        )
    return " and ".join(parts) or "the MoE block's routing"


def v1_replicated_kv(model: ModelSpec, tp: int) -> tuple[ModelSpec, str | None]:
    """A schema 1 case's model where fewer KV heads than TP ranks ran: the run replicated
    them, one per rank (the forks that train multi-query models under TP do: bigcode's
    Megatron-LM for StarCoder, MQA at TP 4; Megatron-Core itself needs kv_heads % tp == 0), so
    each rank projects and holds one KV head: costed as ``kv_heads = tp``, with the note
    saying so. Else the model as stated and None."""
    kv = model.n_kv_heads
    if model.mla is not None or kv >= tp or tp % kv or model.heads % tp:
        return model, None
    return model.model_copy(update={"kv_heads": tp}), (
        f"model: {kv} KV head(s) under TP {tp}: costed replicated, one per TP rank "
        f"(kv_heads {tp}; Megatron-Core splits KV heads over TP and cannot run this)"
    )


def v1_whole_batch(layout: Layout, training: Training) -> tuple[Training, str | None]:
    """A schema 1 case whose global batch is not a whole number of micro-batches on every
    data-parallel rank (a batch written from a token count, "4M tokens"), which no run can
    step: costed at the nearest global batch that is, with the note saying so; else as stated
    and None. Its per-GPU rate moves only through the pipeline's micro-batch count."""
    per_step = (training.micro_batch or 1) * layout.dp
    stated = training.global_batch
    if stated % per_step == 0:
        return training, None
    whole = max(per_step, round(stated / per_step) * per_step)
    if whole > MAX_GLOBAL_BATCH:  # the nearest below, within the field's range
        whole = MAX_GLOBAL_BATCH // per_step * per_step
    if whole < 1:
        raise PlannerError(
            "training.global_batch",
            f"{stated} is not a multiple of micro_batch x dp = {per_step}, and no multiple is "
            f"at most {MAX_GLOBAL_BATCH:,}",
            f"a multiple of {per_step}",
        )
    return training.with_changes(global_batch=whole), (
        f"global_batch {stated} is not a multiple of micro_batch x dp = {per_step}: costed at "
        f"{whole}, the nearest that is"
    )


def _v1_stack(
    case: Case, cluster: Cluster, strict: bool, notes: list[str]
) -> tuple[ModelSpec, StackSpec, tuple[StackSpec, ...]]:
    """A schema 1 case's model (what schema 1 cannot state from the shipped model of its name,
    KV heads replicated over TP where needed), the stack its framework maps to and the other
    code bases the name could stand for; what was read goes to ``notes``."""
    model, model_note = v1_model_structure(case.model)
    framework = case.framework or ""  # null: not published, as an empty name
    stated = _code_base_facts(case, model)
    precision = case.training.precision
    stack_id, note = stack_for_framework(framework, cluster, precision, strict, **stated)
    notes.append(note or f"framework {framework!r}: stack {stack_id}")
    bases = code_bases(framework, cluster, precision=precision, **stated)
    others = tuple(load_stack(s) for s in bases if s != stack_id) if stack_id in bases else ()
    if model_note:
        notes.append(model_note)
    model, kv_note = v1_replicated_kv(model, case.layout.tp)
    notes += [kv_note] if kv_note else []
    return model, load_stack(stack_id), others


def _code_base_facts(case: Case, model: ModelSpec) -> dict[str, Any]:
    """What a schema 1 case states that picks among its framework's code bases
    (:func:`~planner.validate.frameworks.stack_for_framework`'s keyword arguments)."""
    return {
        "zero": case.layout.zero,
        "sequence_parallel": bool(case.layout.sequence_parallel),
        "recompute": case.training.recompute,
        "model": model,
        "tp": case.layout.tp,
        "pp": case.layout.pp,
    }


def v1_zero3_stack(case: Case | CaseV2, inputs: CaseInputs) -> StackSpec | None:
    """The code base a schema 1 case's framework name stands for at ZeRO stage 3, where the
    case leaves its ZeRO stage null and that is another stack than the one it is costed under
    (Megatron-LM on an A100 without TP or PP: DeepSpeed's 2021 ZeRO-3,
    :data:`~planner.validate.frameworks.BY_ZERO3`); else None. The framework table picks the
    oldest code base that runs what a case states, and an unstated ZeRO stage states nothing,
    so a run only ZeRO-3 could fit (a 175B model data-parallel only) needs this one."""
    if not isinstance(case, Case) or case.layout.zero is not None:
        return None
    facts = _code_base_facts(case, inputs.model) | {"zero": 3}
    stack_id, _ = stack_for_framework(
        case.framework or "", inputs.cluster, case.training.precision, **facts
    )
    return None if stack_id == inputs.stack.name else load_stack(stack_id)


def _v1_specs(case: Case, stack: StackSpec, notes: list[str]) -> tuple[Layout, Training]:
    """A schema 1 case's layout and training, read as the run must have been: an interleaving
    depth without a pipeline as none, an expert-parallel size without experts as 1, an
    unstated (null) sequence parallelism on where the
    stack runs it and TP splits the layer, the global batch whole per rank
    (:func:`v1_whole_batch`), the loss of :data:`~planner.validate.frameworks.V1_LOSS`."""
    reread: dict[str, int | None] = {}
    if case.layout.pp == 1 and (case.layout.vpp or 1) > 1:
        # interleaving needs a pipeline: a depth written for a run without one means none
        notes.append(f"layout.vpp {case.layout.vpp} without a pipeline (pp 1): not interleaved")
        reread["vpp"] = None
    if case.model.moe is None and (case.layout.ep or 1) > 1:
        # EP splits experts and is carved out of the DP ranks (Megatron-Core): without experts
        # those ranks are data parallel and the size splits nothing
        notes.append(f"layout.ep {case.layout.ep} for a model without experts: costed as ep 1")
        reread["ep"] = 1
    if reread:
        case = case.model_copy(update={"layout": case.layout.model_copy(update=reread)})
    layout, training = _stated(case, notes)
    if (
        case.layout.sequence_parallel is None
        and layout.tp > 1
        and stack.capabilities.sequence_parallel
    ):
        # not stated: the stacks that run it turn it on with TP (NeMo and Megatron-Bridge
        # recipes set sequence_parallel = tp > 1; torchtitan's TP plan shards the norms' inputs)
        layout = layout.with_changes(sequence_parallel=True)
        notes.append(
            f"layout.sequence_parallel not stated: on, as {stack.name} runs it with TP {layout.tp}"
        )
    training, batch_note = v1_whole_batch(layout, training)
    notes += [batch_note] if batch_note else []
    loss = V1_LOSS.get(stack.kernels.cross_entropy)
    if loss is not None and normalise(case.framework or "") not in JAX_NAMES:
        training = training.model_copy(update={"cross_entropy": loss})
        notes.append(
            f"loss: {loss} (schema 1 cannot state whether {stack.name}'s version compiled its "
            "loss; the uncompiled loss has the larger peak)"
        )
    return layout, training


def case_inputs(case: Case | CaseV2, strict: bool = False) -> CaseInputs:
    """The specs of one case; a PlannerError naming the field when they cannot be built."""
    cluster = load_cluster(case.cluster)
    notes: list[str] = []
    if isinstance(case, CaseV2):
        stacks = shipped_ids(STACKS_DIR)  # a case names a shipped stack, never a path
        if case.stack not in stacks:
            raise PlannerError("stack", f"{case.stack!r} is not a shipped stack", ", ".join(stacks))
        model, stack, others = case.model, load_stack(case.stack), ()
        if case.power_limit_w is not None:
            cluster = cluster.with_power_limit(case.power_limit_w)
            notes.append(f"GPUs power-limited to {case.power_limit_w:.0f} W (as the source states)")
        layout, training = _stated(case, notes)
    else:
        model, stack, others = _v1_stack(case, cluster, strict, notes)
        layout, training = _v1_specs(case, stack, notes)
    if layout.world_size != case.num_gpus:
        raise PlannerError(
            "layout",
            f"tp*cp*dp*pp = {layout.world_size} but num_gpus = {case.num_gpus}",
            "factors whose product equals num_gpus",
        )
    memory_kind = getattr(case.measured, "peak_memory_kind", None) or stack.memory.reported_peak
    v2 = isinstance(case, CaseV2)
    return CaseInputs(
        model,
        cluster,
        layout,
        training,
        stack,
        v2,  # schema 2 names the stack that ran: what it cannot run is the case's error
        _unstated(case, case.unstated if v2 else ()),
        memory_kind,
        notes,
        others,
    )


__all__ = [
    "CaseInputs",
    "case_inputs",
    "dp_with_cp",
    "dp_without_ep",
    "implied_cp",
    "v1_replicated_kv",
    "v1_zero3_stack",
    "v1_whole_batch",
]
