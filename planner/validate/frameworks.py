"""Schema 1's free-text ``framework`` mapped to a shipped software stack: one explicit table.

Schema 1 names the training software as published (``megatron-lm``, ``nemo``, ...), not the
stack that ran it. :data:`FRAMEWORK_STACKS` (the table, with where each framework's behaviour
was read: :mod:`planner.validate.framework_names`) says which shipped stack each name stands for;
nothing else about a case (its source, year or notes) is read. Two rows depend on the case:

* ``megatron-lm`` on an accelerator without FP8 tensor cores (A100 and older, the GPUs of the
  2021-22 Megatron-LM papers) is the oldest Megatron-LM code base that can run the stated
  case: ``megatron-lm-2021`` (v2.5, Narayanan et al. 2021), unless the case states sequence
  parallelism, selective recompute or the distributed optimizer (ZeRO 1), which came with the
  2022 code (Korthikanti et al. 2022), ``megatron-lm-2022``; on Hopper and later it can only be
  the Megatron-Core code base that reached those GPUs (2023-), so ``megatron-core``;
* a model the 2021-22 code could not express (a GLU activation, grouped-query attention or an
  untied output layer, which came to Megatron-LM between 2022-12 and 2023-06) dates the case
  later still: ``megatron-core``, the first shipped Megatron code base that runs it
  (:func:`planner.stacks.model_violations`, the stacks' ``capabilities.activations``,
  ``gqa``, ``untied_embeddings``, ``mla``);
* ``megatron-deepspeed`` on such a GPU is ``megatron-deepspeed-2022`` (the BLOOM / MT-NLG code:
  full activation checkpointing only, no sequence parallelism), or, where the case states what
  that code could not run (sequence parallelism, selective recompute, a model it could not
  express), the fork after its July 2023 rebase on Megatron-LM, ``megatron-deepspeed``, which
  is also the stack on Hopper and later;
* ``megatron-lm`` with ``zero: 3`` on such a GPU ran DeepSpeed's ZeRO-3 of the day on
  Megatron's model (``deepspeed-zero3-2021``): Megatron-LM itself never had ZeRO-3 (its
  distributed optimizer is ZeRO-1), and Narayanan et al. 2021 section 5.2 compares with
  DeepSpeed ZeRO-3 (a model that code could not express, a GLU activation or grouped-query
  attention, dates the row later: Megatron-Core's FSDP);
* ``deepspeed`` with tensor or pipeline parallelism ran Megatron's model on DeepSpeed (its
  "3D parallelism"): it reads as ``megatron-deepspeed`` (:data:`WITH_MODEL_PARALLEL`);
* ``torchtitan`` with ``precision: fp8`` is ``torchtitan-compiled-float8`` (torchao Float8
  needs torch.compile); otherwise ``torchtitan-eager``: its train configs leave compile off
  (``[compile] enable = false``), and a compiled run's range is spanned (below).

Schema 1 does not say which version of a code base ran, nor whether torchtitan compiled:
where several of a framework's code bases (:data:`BY_CAPABILITY`) run what a case states,
:func:`stack_for_framework` costs the oldest, a bf16 ``torchtitan`` row is costed eager
(:data:`EXECUTION_MODES`), :func:`code_bases` lists them all, and ``planner validate`` reports
the range of tokens/s/GPU over them (with the range over any unstated knob) as the case's
predicted range. Nor does it say whether torchtitan compiled its loss (:data:`V1_LOSS`): the
row is costed with the uncompiled loss, the larger peak.

``planner list frameworks`` prints the table. A framework that is not in it is costed under
:data:`planner.stacks.DEFAULT_STACK` (under :data:`UNKNOWN_FSDP_STACK`, PyTorch FSDP2, where
the case states ZeRO stage 2 or 3) and the case's row says so (schema 1 says an unknown
framework must still be simulated); ``planner validate --strict`` makes it the case's error.
"""

from __future__ import annotations

import re

from planner.errors import PlannerError
from planner.specs.hardware import Cluster
from planner.specs.layout import Layout, Training
from planner.specs.loading import load_stack
from planner.specs.model import ModelSpec
from planner.stacks import DEFAULT_STACK, model_violations, stack_violations
from planner.validate.framework_names import COMPILED_FP8, FRAMEWORK_STACKS

# a framework outside the table that states ZeRO stage 2 or 3: sharded gradients (stage 3 is
# "FSDP full shard" in schema 1, shared/validation/README.md), so PyTorch's FSDP2 eager, the
# shipped stack that runs them under tensor, context and pipeline parallelism (not the default
# stack's Megatron-FSDP, which reduces every micro-batch's gradients, and at stage 3 gathers
# every layer again, for each micro-batch of a pipeline)
UNKNOWN_FSDP_STACK = "torchtitan-eager"
UNKNOWN_FSDP_FROM_ZERO = 2
# frameworks whose stack depends on the GPU generation: (framework, has FP8 tensor cores)
BY_GENERATION: dict[tuple[str, bool], str] = {
    ("megatron-lm", True): "megatron-core",
    ("megatron", True): "megatron-core",
    ("megatron-deepspeed", True): "megatron-deepspeed",
    ("gpt-neox", True): "megatron-deepspeed",
    ("deepspeed-moe", True): "megatron-deepspeed",
    ("megatron-ds", True): "megatron-deepspeed",
    ("deepspeed-megatron", True): "megatron-deepspeed",
}
# frameworks whose stack depends on the ZeRO stage: (framework, has FP8 tensor cores, zero 3)
BY_ZERO3: dict[tuple[str, bool], str] = {
    ("megatron-lm", False): "deepspeed-zero3-2021",
    ("megatron", False): "deepspeed-zero3-2021",
}
# frameworks whose code base grew under one name: (framework, has FP8 tensor cores) -> its
# shipped stacks oldest first; a case gets the first that can run what it states, its model
# included (a GLU activation, grouped-query attention or an untied output layer came with the
# 2023 code: Megatron-LM 82c7ba57f4 untied 2022-12, 2cc3dac719 swiglu 2023-04, 6902465a83 GQA
# 2023-06; Megatron-DeepSpeed's July 2023 rebase on it, 9e72d571)
BY_CAPABILITY: dict[tuple[str, bool], tuple[str, ...]] = {
    ("megatron-lm", False): ("megatron-lm-2021", "megatron-lm-2022", "megatron-core"),
    ("megatron", False): ("megatron-lm-2021", "megatron-lm-2022", "megatron-core"),
    ("megatron-deepspeed", False): ("megatron-deepspeed-2022", "megatron-deepspeed"),
    ("gpt-neox", False): ("megatron-deepspeed-2022", "megatron-deepspeed"),
    ("deepspeed-moe", False): ("megatron-deepspeed-2022", "megatron-deepspeed"),
    ("megatron-ds", False): ("megatron-deepspeed-2022", "megatron-deepspeed"),
    ("deepspeed-megatron", False): ("megatron-deepspeed-2022", "megatron-deepspeed"),
}
# frameworks published under one name whose execution mode a schema 1 case cannot state: the
# stack the table costs first, then the others the name could stand for (torchtitan compiles
# only with training.compile / compile.enable, off in its train configs' defaults, e.g.
# torchtitan/models/llama3/train_configs/llama3_8b.toml [compile] enable=false: the default,
# eager, first; its paper's tables, arXiv 2410.06511 Tables 1 and 3, publish both)
EXECUTION_MODES: dict[str, tuple[str, ...]] = {
    "torchtitan": ("torchtitan-eager", "torchtitan-compiled"),
}
# what changed inside one stack's code base and a schema 1 case cannot state: torchtitan
# compiles its loss with the model from 2024-10-22 to 2024-12-18 and again since 2025-04-02
# (stacks/torchtitan-compiled.yaml); the runs before and between (its paper's tables, arXiv
# 2410.06511, and the torchao Float8 tables of 2025-03) ran F.cross_entropy on an fp32 copy of
# the logits. A schema 1 row on a stack whose loss compiles is costed with that uncompiled
# loss: its peak is the larger (12 B per logit in backward against 4), so the answer to "does it
# fit" holds for whichever version ran
V1_LOSS: dict[str, str] = {"compiled": "fp32_log_softmax"}
# stacks whose tensor parallelism shards the sequence by default: torchtitan's TP plan puts
# SequenceParallel on the norms (apply_tp: torchtitan/parallelisms/parallelize_llama.py to
# 2025-02, torchtitan/models/llama3/infra/parallelize.py to 2026-02; a switch only since
# aa68af18e, 2026-03-29, ParallelismConfig.enable_sequence_parallel, default True), and NeMo's
# and Megatron-Bridge's recipes set sequence_parallel = tp > 1. A schema 1 row of these stacks
# that writes sequence_parallel false (the schema's example value) and does not fit in memory
# without it is costed with it on (planner/validate/v1_readings.py)
SEQUENCE_PARALLEL_BY_DEFAULT: frozenset[str] = frozenset(
    {
        "torchtitan-eager",
        "torchtitan-compiled",
        "torchtitan-compiled-float8",
        "torchtitan-async-tp",
        "nemo",
        "megatron-bridge",
    }
)
# a framework name that says the state was sharded within groups and replicated across them
# ("PyTorch FSDP (HSDP)", "FSDP HYBRID_SHARD", "torchtitan hybrid sharding"): FSDP's
# HYBRID_SHARD shards within a node by default (torch.distributed.fsdp ShardingStrategy
# HYBRID_SHARD: "shard within a node, replicate across nodes"), so a schema 1 row that says so
# is costed with Layout.dp_shard the smallest group of whole scale-up domains it fits in
# (planner/validate/v1_readings.py)
HYBRID_SHARD_WORDS = re.compile(r"\bhsdp\b|hybrid[\s_-]*shard", re.IGNORECASE)
# DeepSpeed by itself is data parallel (ZeRO); a DeepSpeed row that states tensor or pipeline
# parallelism ran Megatron's model on it: DeepSpeed's "3D parallelism" is Megatron-LM's TP
# with DeepSpeed's pipeline engine and ZeRO (Rasley et al. 2020, KDD, and the DeepSpeed blog
# of 2020-09-10; its code, Megatron-DeepSpeed, trained BLOOM and MT-NLG), so the name reads as
# megatron-deepspeed, with that name's code bases
WITH_MODEL_PARALLEL: dict[str, str] = {
    "deepspeed": "megatron-deepspeed",
    "deepspeed-zero": "megatron-deepspeed",
    "deepspeed-zero3": "megatron-deepspeed",
    # Colossal-AI's HybridParallelPlugin (4f9953be colossalai/booster/plugin/
    # hybrid_parallel_plugin.py): Megatron TP with the backward all-reduce under the weight
    # gradient, 1F1B, ZeRO 0-1 with a pipeline and the DP reduce after the flush
    "colossal-ai": "colossal-ai-hybrid",
    "colossalai": "colossal-ai-hybrid",
}
# frameworks whose stack depends on the training precision
BY_PRECISION: dict[tuple[str, str], str] = {
    ("torchtitan", "fp8"): "torchtitan-compiled-float8",
    **{(key, "fp8"): stack for key, stack in COMPILED_FP8.items()},
}
# how a PyTorch-native run was issued, where its framework name says so in words
# ("torchtitan (compiled)", "FSDP2 + torch.compile", "torchtitan async TP"): the shipped stack
# that runs it, in place of the eager one the table gives (fp8 runs are torchao Float8 under
# torch.compile whatever the words: torchtitan-compiled-float8). First match wins.
NAMED_EXECUTION: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"async[\s-]*tp|asynctp|async[\s-]*tensor"), "torchtitan-async-tp"),
    (re.compile(r"compile|inductor"), "torchtitan-compiled"),
)
# the eager PyTorch stacks whose execution the words refine: FSDP2 (torchtitan-eager) and FSDP1
# (llm-foundry: "PyTorch FSDP + torch.compile" is compiled kernels, costed as FSDP2 compiled,
# the shipped stack that compiles; fms-fsdp's compiled table ran so)
NAMED_EXECUTION_OF = ("torchtitan-eager", "llm-foundry")
NAMED_EXECUTION_FP8 = "torchtitan-compiled-float8"


def named_execution(framework: str, stack: str, precision: str | None) -> str | None:
    """The stack a framework name's own words put in place of ``stack`` (the table's), by
    :data:`NAMED_EXECUTION`; None where they say nothing or ``stack`` is not an eager one
    (:data:`NAMED_EXECUTION_OF`)."""
    if stack not in NAMED_EXECUTION_OF:
        return None
    words = framework.lower().replace("_", " ")
    named = next((s for pattern, s in NAMED_EXECUTION if pattern.search(words)), None)
    if named is None:
        return None
    return NAMED_EXECUTION_FP8 if precision == "fp8" else named


# a version as published after a framework's name: 2.0, v0.8.0, 24.07, r0.9, 0.15.0rc1
_VERSION = re.compile(r"^[vr]?\d+(\.\d+)*([a-z]+\d*)?$")


# vendor names a framework is published under ("NVIDIA Megatron-LM", "MosaicML Composer")
_VENDORS = frozenset(
    {
        "nvidia",
        "microsoft",
        "mosaicml",
        "mosaic",
        "meta",
        "eleutherai",
        "bigscience",
        "hf",
        "pytorch",  # "PyTorch torchtitan" (alone, "pytorch" is a key of its own)
        "ai2",
        "allenai",
        "ibm",
        "google",
        "alibaba",
        "amd",
        "bytedance",
    }
)
# the table's keys spelled without hyphens ("MegatronLM", "MegatronBridge")
_UNHYPHENATED = {k.replace("-", ""): k for k in FRAMEWORK_STACKS}


def _table_key(words: list[str]) -> str | None:
    """The table key these words name: as they are, without version tokens, without a leading
    vendor word, or spelled without hyphens; None when none of them is in the table."""
    kept = [w for w in words if not _VERSION.match(w)]
    stripped = "-".join(kept)
    while stripped and stripped not in FRAMEWORK_STACKS:  # "megatron-lm-v2.5", "nemo-2.0"
        head, _, tail = stripped.rpartition("-")
        if not head or not _VERSION.match(tail):
            break
        stripped = head
    for key in ("-".join(words), stripped):
        if key in FRAMEWORK_STACKS:
            return key
    if len(kept) > 1 and kept[0] in _VENDORS:
        vendorless = _table_key(kept[1:])
        if vendorless is not None:
            return vendorless
    return _UNHYPHENATED.get(stripped.replace("-", ""))


def normalise(framework: str) -> str:
    """The table key of a published framework name: lower case, spaces and underscores as
    "-", and, when that is not a key, without what is in parentheses, without version tokens,
    without a leading vendor word, spelled without hyphens, or the first part of a compound
    name that is one ("NeMo 2.0", "Megatron-LM (v2.5)", "DeepSpeed v0.9.2", "NVIDIA
    Megatron-LM", "MegatronLM" and "HF Transformers + DeepSpeed" are nemo, megatron-lm,
    deepspeed, megatron-lm, megatron-lm and deepspeed); else what is in parentheses ("OLMo
    (PyTorch FSDP)"), else the first single word that is a key ("torch.distributed FSDP2",
    "Megatron-LM core_r0.9.0"). A name none of these maps is returned as its lower-case
    hyphenated self (not a key: costed under the default stack)."""
    words = framework.lower().replace("_", " ").replace("w/", "with ").split()
    key = "-".join(words)
    if key in FRAMEWORK_STACKS:
        return key
    text = " ".join(words)
    bare = re.sub(r"\([^)]*\)", " ", text)
    found = _table_key(bare.split())
    if found is None:  # "Megatron-LM + DeepSpeed": the one code base of both names
        found = _combined(bare)
    if found is None:  # "llm-foundry/Composer", "HF Transformers + DeepSpeed"
        found = _first_part(bare)
    if found is None:  # "OLMo (PyTorch FSDP)"
        found = next(filter(None, map(_first_part, re.findall(r"\(([^)]*)\)", text))), None)
    if found is None:  # "torch.distributed FSDP2"
        found = next((w for w in bare.split() if w in FRAMEWORK_STACKS), None)
    return found or key


# compound names whose parts are two frameworks that ran as one code base: Megatron's model and
# parallelism on DeepSpeed is Megatron-DeepSpeed (the BLOOM and MT-NLG papers name it
# "Megatron-DeepSpeed"; others write "Megatron-LM + DeepSpeed")
_COMBINED: tuple[tuple[frozenset[str], frozenset[str], str], ...] = (
    (
        frozenset({"megatron-lm", "megatron", "megatron-core", "mcore"}),
        frozenset({"deepspeed", "deepspeed-zero", "deepspeed-zero3"}),
        "megatron-deepspeed",
    ),
)


def _parts(text: str) -> list[str]:
    """The table keys of a compound name's parts (split at "/", "+", ",", "&", "and",
    "with", "on"), in order; a part that is no key is left out."""
    parts = (p.split() for p in re.split(r"[/+,&]|\band\b|\bwith\b|\bon\b", text))
    return [k for k in map(_table_key, parts) if k is not None]


def _combined(text: str) -> str | None:
    """The key of a compound name whose parts name two frameworks that ran as one code base
    (:data:`_COMBINED`), else None."""
    keys = set(_parts(text))
    return next((key for a, b, key in _COMBINED if keys & a and keys & b), None)


def _first_part(text: str) -> str | None:
    """The table key of the first part of a compound name that is one (split at "/", "+",
    ",", "&", "and", "with", "on"), else None."""
    return next(iter(_parts(text)), None)


# what a schema 1 case states that picks among a framework's code bases (BY_CAPABILITY)
_ERA_FIELDS = frozenset({"layout.zero", "layout.sequence_parallel", "training.recompute"})


def _runs(
    stack_id: str,
    zero: int | None,
    sequence_parallel: bool,
    recompute: str | None,
    model: ModelSpec | None = None,
) -> bool:
    """Whether the shipped stack ``stack_id`` can run the stated ZeRO stage, sequence
    parallelism and recompute (None: not stated), by :func:`planner.stacks.stack_violations`,
    and the model (None: not asked), by :func:`planner.stacks.model_violations`."""
    stack = load_stack(stack_id)
    if model is not None and model_violations(stack, model):
        return False
    caps = stack.capabilities
    layout = Layout(
        sequence_parallel=sequence_parallel, zero=caps.zero_stages[0] if zero is None else zero
    )
    # a placeholder batch: only the recompute level is read here
    training = Training(seq_len=2048, global_batch=1, recompute=recompute or caps.recompute[0])
    return not any(e.field in _ERA_FIELDS for e in stack_violations(stack, layout, training))


def _key(framework: str, tp: int, pp: int) -> str:
    """The table key a case's framework name stands for, given its TP and PP
    (:data:`WITH_MODEL_PARALLEL`)."""
    key = normalise(framework)
    return WITH_MODEL_PARALLEL.get(key, key) if max(tp, pp) > 1 else key


def _has_fp8(cluster: Cluster) -> bool:
    return cluster.accelerator.peak_tflops.fp8 is not None


def _running_eras(
    key: str,
    has_fp8: bool,
    zero: int | None,
    sequence_parallel: bool,
    recompute: str | None,
    model: ModelSpec | None,
) -> tuple[str, ...]:
    """The code bases of :data:`BY_CAPABILITY` under ``key`` that run what a case states,
    oldest first."""
    eras = BY_CAPABILITY.get((key, has_fp8), ())
    return tuple(s for s in eras if _runs(s, zero, sequence_parallel, recompute, model))


def _zero3_stack(
    key: str, has_fp8: bool, zero: int | None, model: ModelSpec | None, tp: int, pp: int
) -> str | None:
    """:data:`BY_ZERO3`'s stack for a case that states ZeRO 3, where that code could express
    the model and run its tensor and pipeline parallelism (DeepSpeed's 2021 ZeRO-3 ran
    Megatron's GPT data-parallel only: a SwiGLU or grouped-query model, or TP / PP beside
    ZeRO 3, of a ``megatron-lm`` row is later code, Megatron-Core's FSDP); else None."""
    stack = BY_ZERO3.get((key, has_fp8)) if (zero or 0) >= 3 else None
    if stack is None:
        return None
    spec = load_stack(stack)
    if (tp > 1 and not spec.capabilities.tp) or (pp > 1 and not spec.capabilities.pp):
        return None
    if model is not None and model_violations(spec, model):
        return None
    return stack


def stack_for_framework(
    framework: str,
    cluster: Cluster,
    precision: str | None,
    strict: bool = False,
    zero: int | None = None,
    sequence_parallel: bool = False,
    recompute: str | None = None,
    model: ModelSpec | None = None,
    tp: int = 1,
    pp: int = 1,
) -> tuple[str, str | None]:
    """The shipped stack id for a schema 1 case, and a note when the framework is not in the
    table (costed under the default stack); ``strict``: that is a PlannerError instead.
    ``zero``, ``sequence_parallel``, ``recompute``, ``model``, ``tp`` and ``pp`` are what the
    case states (None: not stated): they pick among a framework's code bases
    (:data:`BY_CAPABILITY`, :data:`BY_ZERO3`, :data:`WITH_MODEL_PARALLEL`)."""
    key = _key(framework, tp, pp)
    if key not in FRAMEWORK_STACKS:
        valid = ", ".join(sorted(FRAMEWORK_STACKS))
        if strict:
            raise PlannerError("framework", f"{framework!r} is not a known framework", valid)
        if (zero or 0) >= UNKNOWN_FSDP_FROM_ZERO:
            return UNKNOWN_FSDP_STACK, (
                f"framework {framework!r} is not in the framework table ({valid}): its ZeRO "
                f"stage {zero} (sharded gradients) costed under {UNKNOWN_FSDP_STACK}, PyTorch "
                "FSDP2"
            )
        return DEFAULT_STACK, (
            f"framework {framework!r} is not in the framework table ({valid}): costed under "
            f"the default stack {DEFAULT_STACK}"
        )
    has_fp8 = _has_fp8(cluster)
    eras = BY_CAPABILITY.get((key, has_fp8), ())
    running = _running_eras(key, has_fp8, zero, sequence_parallel, recompute, model)
    stack = (
        _zero3_stack(key, has_fp8, zero, model, tp, pp)
        or BY_GENERATION.get((key, has_fp8))
        or BY_PRECISION.get((key, precision or ""))
        or (running[0] if running else None)
        or (eras[-1] if eras else None)
    )
    stack = stack or FRAMEWORK_STACKS[key]
    return named_execution(framework, stack, precision) or stack, None


def code_bases(
    framework: str,
    cluster: Cluster,
    zero: int | None = None,
    sequence_parallel: bool = False,
    recompute: str | None = None,
    model: ModelSpec | None = None,
    precision: str | None = None,
    tp: int = 1,
    pp: int = 1,
) -> tuple[str, ...]:
    """Every code base a schema 1 framework name could stand for that runs what the case
    states, the one :func:`stack_for_framework` costs first: the code bases of
    :data:`BY_CAPABILITY`, oldest first (``megatron-lm`` on an A100 running full recompute
    without sequence parallelism could be the 2021 code, the 2022 code or Megatron-Core), or
    the execution modes of :data:`EXECUTION_MODES` (``torchtitan`` compiled or eager; fp8 runs
    compiled only). Empty where the name stands for one stack here (every other framework,
    Megatron on Hopper and later, a ZeRO-3 case). Validation ranges over all of them."""
    key = _key(framework, tp, pp)
    if key in FRAMEWORK_STACKS and named_execution(framework, FRAMEWORK_STACKS[key], precision):
        return ()  # the name says how the run was issued
    if key in EXECUTION_MODES and not BY_PRECISION.get((key, precision or "")):
        return EXECUTION_MODES[key]
    # BY_CAPABILITY has no row on Hopper and later, and a ZeRO-3 case leaves at most
    # Megatron-Core running: both come back empty here
    running = _running_eras(key, _has_fp8(cluster), zero, sequence_parallel, recompute, model)
    return running if len(running) > 1 else ()


__all__ = [
    "BY_CAPABILITY",
    "BY_GENERATION",
    "BY_PRECISION",
    "BY_ZERO3",
    "EXECUTION_MODES",
    "FRAMEWORK_STACKS",
    "HYBRID_SHARD_WORDS",
    "NAMED_EXECUTION",
    "NAMED_EXECUTION_FP8",
    "NAMED_EXECUTION_OF",
    "SEQUENCE_PARALLEL_BY_DEFAULT",
    "V1_LOSS",
    "UNKNOWN_FSDP_STACK",
    "code_bases",
    "named_execution",
    "normalise",
    "stack_for_framework",
]
