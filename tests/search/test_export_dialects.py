"""Launch-file exports per software stack (planner/search/export.py DIALECTS,
planner/search/dialects/): every shipped stack's files parse, carry the layout's parallel sizes,
batch sizes and ZeRO stage back, and state what they cannot express."""

from __future__ import annotations

import ast
import io
import json
import shlex
import tomllib
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any, get_args

import pytest
import yaml

import planner
from planner.cli import main
from planner.errors import PlannerError
from planner.resources import STACKS_DIR
from planner.search.dialects import (
    NOT_EXPRESSED,
    deepspeed_json,
    llm_foundry_yaml,
    megatron_args,
    megatron_bridge_overrides,
    megatron_deepspeed_args,
    nemo_overrides,
    torchtitan_toml,
)
from planner.search.export import DIALECTS, EXPORT_FILES, exports, write_exports
from planner.specs.layout import Layout, Training
from planner.specs.loading import parse_spec, shipped_ids
from planner.specs.stack import ExportDialect, StackSpec
from planner.stacks import applied_violation

GPUS = 16
STACK_IDS = shipped_ids(STACKS_DIR)
MODEL = planner.load_model("llama3.1-8b")
MOE = planner.load_model("mixtral-8x7b")


def _zero_stages(stack: StackSpec, pp: int) -> tuple[int, ...]:
    cap = stack.capabilities
    return cap.pp_zero_stages if pp > 1 and cap.pp_zero_stages else cap.zero_stages


def _sample(stack: StackSpec, zero: int) -> tuple[Layout, Training]:
    """A layout the stack runs: TP 2 and PP 2 where it has them, DP over the rest."""
    cap = stack.capabilities
    tp, pp = (2 if cap.tp else 1), (2 if cap.pp else 1)
    layout = Layout(
        tp=tp,
        pp=pp,
        dp=GPUS // (tp * pp),
        zero=zero,
        sequence_parallel=cap.sequence_parallel and tp > 1,
    )
    training = Training(seq_len=4096, global_batch=64, micro_batch=2, recompute=cap.recompute[-1])
    assert applied_violation(stack, MODEL, layout, training) is None
    return layout, training


CASES = [
    (sid, zero)
    for sid in STACK_IDS
    for zero in _zero_stages(
        planner.load_stack(sid), 2 if planner.load_stack(sid).capabilities.pp else 1
    )
]


# ---- parsers: each file back to {tp, pp, dp, micro, global, zero} (what it states) ----------
def _args(text: str) -> dict[str, str]:
    flags: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        words = shlex.split(line)
        flags[words[0]] = " ".join(words[1:])
    return flags


def _overrides(text: str, literal: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        (word,) = shlex.split(line)  # one override per line, shell-quoted where needed
        key, _, value = word.partition("=")
        out[key] = literal(value)
    return out


def _nemo_literal(value: str) -> Any:
    """NeMo-Run's parser: a Python literal, else the bare string."""
    try:
        return ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return value


def _megatron(text: str) -> dict[str, Any]:
    f = _args(text)
    tp, pp = int(f["--tensor-model-parallel-size"]), int(f["--pipeline-model-parallel-size"])
    out = {"tp": tp, "pp": pp, "dp": GPUS // (tp * pp)}
    out |= {"micro": int(f["--micro-batch-size"]), "global": int(f["--global-batch-size"])}
    if "--zero-stage" in f:
        out["zero"] = int(f["--zero-stage"])
    else:  # Megatron-LM: the distributed optimizer is ZeRO >= 1
        out["zero>=1"] = "--use-distributed-optimizer" in f
    return out


def _deepspeed(text: str) -> dict[str, Any]:
    cfg = json.loads(text)
    micro, total = cfg["train_micro_batch_size_per_gpu"], cfg["train_batch_size"]
    dp = total // (micro * cfg["gradient_accumulation_steps"])
    out = {"micro": micro, "global": total, "dp": dp, "zero": cfg["zero_optimization"]["stage"]}
    assert total == micro * cfg["gradient_accumulation_steps"] * dp  # DeepSpeed's assertion
    return out


def _nemo(text: str) -> dict[str, Any]:
    o = _overrides(text, _nemo_literal)
    tp = o["trainer.strategy.tensor_model_parallel_size"]
    pp = o["trainer.strategy.pipeline_model_parallel_size"]
    fsdp = o.get("trainer.strategy.fsdp") == "megatron"
    zero = 3 if fsdp else int(o["optim.config.use_distributed_optimizer"])
    return {
        "tp": tp,
        "pp": pp,
        "dp": GPUS // (tp * pp * o["trainer.strategy.context_parallel_size"]),
        "micro": o["data.micro_batch_size"],
        "global": o["data.global_batch_size"],
        "zero": zero,
    }


def _bridge(text: str) -> dict[str, Any]:
    o = _overrides(text, yaml.safe_load)  # Hydra's grammar: true/false, null, numbers, lists
    tp, pp = o["model.tensor_model_parallel_size"], o["model.pipeline_model_parallel_size"]
    assert o["model.seq_length"] == o["dataset.seq_length"]  # Bridge asserts they match
    zero = 3 if o.get("ddp.use_megatron_fsdp") else int(o["ddp.use_distributed_optimizer"])
    return {
        "tp": tp,
        "pp": pp,
        "dp": GPUS // (tp * pp * o["model.context_parallel_size"]),
        "micro": o["train.micro_batch_size"],
        "global": o["train.global_batch_size"],
        "zero": zero,
    }


def _torchtitan(text: str) -> dict[str, Any]:
    cfg = tomllib.loads(text)
    par, tr = cfg["parallelism"], cfg["training"]
    pp, shard = par["pipeline_parallel_degree"], par["data_parallel_shard_degree"]
    zero = 0 if shard == 1 else (2 if par.get("fsdp_reshard_after_forward") == "never" else 3)
    return {
        "tp": par["tensor_parallel_degree"],
        "pp": pp,
        "dp": par["data_parallel_replicate_degree"] * shard,
        "micro": par["pipeline_parallel_microbatch_size"] if pp > 1 else tr["local_batch_size"],
        "global": tr["global_batch_size"],
        "zero": zero,
    }


def _llm_foundry(text: str) -> dict[str, Any]:
    cfg = yaml.safe_load(text)
    zero = {"NO_SHARD": 0, "SHARD_GRAD_OP": 2, "FULL_SHARD": 3}
    return {
        "micro": cfg["device_train_microbatch_size"],
        "global": cfg["global_train_batch_size"],
        "zero": zero[cfg["fsdp_config"]["sharding_strategy"]],
    }


PARSERS = {
    "megatron_args": _megatron,
    "megatron_deepspeed_args": _megatron,
    "deepspeed_json": _deepspeed,
    "nemo_overrides": _nemo,
    "megatron_bridge_overrides": _bridge,
    "torchtitan_toml": _torchtitan,
    "llm_foundry_yaml": _llm_foundry,
}


# ---- the registry -----------------------------------------------------------------------------
def test_one_writer_and_file_per_dialect_and_every_stack_names_known_ones() -> None:
    assert set(DIALECTS) == {"layout_yaml", *get_args(ExportDialect)}
    assert set(PARSERS) == set(get_args(ExportDialect))
    names = [d.file_name for d in DIALECTS.values()]
    assert len(set(names)) == len(names) and EXPORT_FILES["deepspeed_json"] == "ds_config.json"
    for sid in STACK_IDS:
        dialects = planner.load_stack(sid).export_dialects
        assert dialects and set(dialects) <= set(get_args(ExportDialect)), sid
    # Megatron-DeepSpeed's arguments name the DeepSpeed file the registry writes
    layout, training = _sample(planner.load_stack("megatron-deepspeed"), 1)
    text = megatron_deepspeed_args(MODEL, GPUS, layout, training)
    assert _args(text)["--deepspeed_config"] == EXPORT_FILES["deepspeed_json"]


@pytest.mark.parametrize(
    ("sid", "expected"),
    [
        ("megatron-core", ["megatron_args"]),
        ("megatron-deepspeed", ["megatron_deepspeed_args", "deepspeed_json"]),
        ("deepspeed-zero", ["deepspeed_json"]),
        ("nemo", ["nemo_overrides"]),
        ("megatron-bridge", ["megatron_bridge_overrides"]),
        ("torchtitan-async-tp", ["torchtitan_toml"]),
        ("llm-foundry", ["llm_foundry_yaml"]),
    ],
)
def test_stacks_launch_with_their_framework_s_files(sid: str, expected: list[str]) -> None:
    assert list(planner.load_stack(sid).export_dialects) == expected


def test_a_dialect_listed_twice_is_refused_and_a_missing_list_is_the_old_pair() -> None:
    data = yaml.safe_load((STACKS_DIR / "nemo.yaml").read_text())
    with pytest.raises(PlannerError) as exc:
        parse_spec(data | {"export_dialects": ["nemo_overrides"] * 2}, StackSpec, "stack")
    assert exc.value.field == "stack.export_dialects"
    with pytest.raises(PlannerError) as exc:
        parse_spec(data | {"export_dialects": []}, StackSpec, "stack")
    assert exc.value.field == "stack.export_dialects"
    del data["export_dialects"]  # a stack file written before the field existed
    spec = parse_spec(data, StackSpec, "stack")
    assert spec.export_dialects == ("megatron_args", "torchtitan_toml")


def test_without_a_stack_the_exports_are_the_old_three() -> None:
    layout, training = Layout(tp=2, dp=4, zero=1), Training(seq_len=4096, global_batch=64)
    texts = exports(MODEL, 8, layout, training)
    assert set(texts) == {"layout_yaml", "megatron_args", "torchtitan_toml"}
    assert texts["megatron_args"] == megatron_args(MODEL, 8, layout, training)


# ---- every shipped stack: parse and round-trip ------------------------------------------------
@pytest.mark.parametrize(("sid", "zero"), CASES)
def test_every_stack_s_exports_parse_and_carry_the_layout(sid: str, zero: int) -> None:
    stack = planner.load_stack(sid)
    layout, training = _sample(stack, zero)
    texts = exports(MODEL, GPUS, layout, training, stack)
    assert list(texts) == ["layout_yaml", *stack.export_dialects]
    assert f"--stack {stack.name}" in texts["layout_yaml"].splitlines()[1]
    want = {
        "tp": layout.tp,
        "pp": layout.pp,
        "dp": layout.dp,
        "micro": training.micro_batch,
        "global": training.global_batch,
        "zero": zero,
        "zero>=1": zero >= 1,
    }
    for name in stack.export_dialects:
        got = PARSERS[name](texts[name])
        assert got == {k: want[k] for k in got}, (name, texts[name])
        assert {"micro", "global"} <= set(got)


def test_megatron_family_states_the_same_uneven_split_as_megatron_lm() -> None:
    model = MODEL.model_copy(update={"layers": 126})
    layout = Layout(tp=1, pp=16, dp=1)
    training = Training(seq_len=4096, global_batch=64)
    assert "--account-for-loss-in-pipeline-split" in megatron_args(model, 16, layout, training)
    nemo = _overrides(nemo_overrides(model, 16, layout, training), _nemo_literal)
    assert nemo["trainer.strategy.account_for_loss_in_pipeline_split"] is True
    model = model.model_copy(update={"layers": 100})
    layout = Layout(tp=1, pp=8, dp=1)
    assert "--decoder-first-pipeline-num-layers 11" in megatron_args(model, 8, layout, training)
    bridge = _overrides(megatron_bridge_overrides(model, 8, layout, training), yaml.safe_load)
    assert bridge["model.num_layers_in_first_pipeline_stage"] == 11
    assert bridge["model.num_layers_in_last_pipeline_stage"] == 100 - 6 * 13 - 11


def test_a_stated_split_is_written_back() -> None:
    """Layout.first_stage_layers / last_stage_layers: Megatron-Core's first / last counts, or,
    with a count of 0 (a stage of only the head and the loss), a pipeline layout string."""
    training = Training(seq_len=4096, global_batch=64)
    layout = Layout(tp=1, pp=4, dp=1, first_stage_layers=2, last_stage_layers=6)  # 2, 12, 12, 6
    args = megatron_args(MODEL, 4, layout, training)
    assert "--decoder-first-pipeline-num-layers 2" in args
    assert "--decoder-last-pipeline-num-layers 6" in args
    bridge = _overrides(megatron_bridge_overrides(MODEL, 4, layout, training), yaml.safe_load)
    assert bridge["model.num_layers_in_first_pipeline_stage"] == 2
    assert bridge["model.num_layers_in_last_pipeline_stage"] == 6
    empty_last = Layout(tp=1, pp=4, dp=1, first_stage_layers=2, last_stage_layers=0)
    args = megatron_args(MODEL, 4, empty_last, training)
    assert "--pipeline-model-parallel-layout 'Et*2|(t*15|)*2t*0L'" in args
    assert "decoder-first" not in args
    # a stated split equal to the even one needs no flag
    even = Layout(tp=1, pp=4, dp=1, first_stage_layers=8, last_stage_layers=8)
    assert "pipeline-num-layers" not in megatron_args(MODEL, 4, even, training)


def test_torchtitan_stacks_set_compile_float8_and_async_tp() -> None:
    def toml(sid: str, **layout: Any) -> dict[str, Any]:
        lay = Layout(tp=2, dp=8, zero=3, sequence_parallel=True, **layout)
        tr = Training(seq_len=4096, global_batch=64, micro_batch=2)
        return tomllib.loads(
            exports(MODEL, GPUS, lay, tr, planner.load_stack(sid))["torchtitan_toml"]
        )

    assert "compile" not in toml("torchtitan-eager")["training"]
    assert toml("torchtitan-compiled")["training"]["compile"] is True
    assert toml("torchtitan-compiled-float8")["model"]["converters"] == ["float8"]
    assert "model" not in toml("torchtitan-compiled")
    assert toml("torchtitan-async-tp")["parallelism"]["enable_async_tensor_parallel"] is True
    assert "enable_async_tensor_parallel" not in toml("torchtitan-compiled")["parallelism"]


def test_megatron_deepspeed_writes_its_attention_flag() -> None:
    """The rebased fork's recipes run flash-attn's Triton kernel (--use-flash-attn-triton);
    the 2022 code materialises the scores and needs no flag."""

    def args(sid: str, **training: Any) -> str:
        lay, tr = Layout(tp=2, dp=8, zero=1), Training(seq_len=4096, global_batch=64, **training)
        return exports(MODEL, GPUS, lay, tr, planner.load_stack(sid))["megatron_deepspeed_args"]

    assert "--use-flash-attn-triton" in args("megatron-deepspeed").splitlines()
    assert "--use-flash-attn-v2" in args("megatron-deepspeed", attention_kernel="flash2")
    gpt = MODEL.model_copy(update={"activation": "gelu", "kv_heads": 32, "tied_embeddings": True})
    lay, tr = Layout(tp=2, dp=8, zero=1), Training(seq_len=2048, global_batch=64)
    old = exports(gpt, GPUS, lay, tr, planner.load_stack("megatron-deepspeed-2022"))
    assert "flash" not in old["megatron_deepspeed_args"]


def test_nemo_and_bridge_express_overlaps_precision_and_fsdp() -> None:
    layout = Layout(tp=2, dp=8, zero=3, sequence_parallel=True, overlap_tp_comm=True)
    training = Training(seq_len=4096, global_batch=64, precision="fp8", grad_reduce_dtype="bf16")
    bridge = _overrides(megatron_bridge_overrides(MODEL, GPUS, layout, training), yaml.safe_load)
    assert bridge["comm_overlap.tp_comm_overlap"] is True
    assert bridge["mixed_precision"] == "bf16_with_fp8_delayed_scaling_mixed"
    assert bridge["ddp.data_parallel_sharding_strategy"] == "optim_grads_params"
    assert bridge["ddp.grad_reduce_in_fp32"] is False
    text = nemo_overrides(MODEL, GPUS, layout, training)
    nemo = _overrides(text, _nemo_literal)
    assert nemo["trainer.plugins.fp8"] == "hybrid"
    assert nemo["trainer.plugins.grad_reduce_in_fp32"] is False
    assert "MegatronCommOverlapCallback(tp_comm_overlap=True)" in text  # a callback: a comment


# ---- what a dialect cannot express is stated, never dropped -----------------------------------
def _stated(text: str) -> list[str]:
    """The NOT EXPRESSED statements of a file (comments, or planner_notes in JSON)."""
    if text.lstrip().startswith("{"):
        return [n for n in json.loads(text)["planner_notes"] if NOT_EXPRESSED in n]
    return [line for line in text.splitlines() if line.startswith("#") and NOT_EXPRESSED in line]


TRAINING = Training(seq_len=4096, global_batch=64, micro_batch=2)


@pytest.mark.parametrize(
    ("writer", "layout", "field"),
    [
        (deepspeed_json, Layout(tp=2, dp=8, zero=1), "layout.tp = 2"),
        (deepspeed_json, Layout(pp=2, dp=8, zero=1), "layout.pp = 2"),
        (llm_foundry_yaml, Layout(pp=2, dp=8, zero=3), "layout.pp = 2"),
        (llm_foundry_yaml, Layout(tp=2, dp=8, zero=3), "layout.tp = 2"),
        (llm_foundry_yaml, Layout(dp=16, zero=1), "layout.zero = 1"),
        (megatron_deepspeed_args, Layout(tp=2, cp=2, dp=4, zero=1), "layout.cp = 2"),
        (megatron_deepspeed_args, Layout(pp=4, dp=4, vpp=2, zero=1), "layout.vpp = 2"),
        (megatron_deepspeed_args, Layout(pp=2, dp=8, zero=2), "layout.zero = 2 with pp = 2"),
        (nemo_overrides, Layout(pp=4, dp=4, schedule="zb-h1"), "pipeline schedule zb-h1"),
        (megatron_bridge_overrides, Layout(pp=4, dp=4, pp_scatter_gather=True), "pp_scatter"),
        (megatron_args, Layout(tp=2, pp=4, dp=2, pp_scatter_gather=True), "scatter/gather"),
        (deepspeed_json, Layout(dp=16, zero=3, dp_shard=8), "layout.dp_shard = 8"),
        (megatron_deepspeed_args, Layout(dp=16, zero=1, dp_shard=8), "layout.dp_shard = 8"),
        (llm_foundry_yaml, Layout(dp=16, zero=2, dp_shard=8), "layout.dp_shard = 8"),
        (megatron_args, Layout(dp=16, zero=3, dp_shard=8), "dp_shard 8 at ZeRO-3"),
    ],
)
def test_an_inexpressible_field_is_stated(writer: Any, layout: Layout, field: str) -> None:
    stated = _stated(writer(MODEL, GPUS, layout, TRAINING))
    assert any(field in s for s in stated), stated


def test_reduced_optimizer_states_are_written_where_megatron_has_them_and_stated_elsewhere() -> (
    None
):
    """fp32 remainders are Megatron-Core's precision-aware optimizer; bf16 states without a
    master have no Megatron flag, and no other framework writes either."""
    layout = Layout(tp=2, pp=2, dp=4, zero=1)
    remainders = TRAINING.model_copy(update={"optimizer_states": "fp32_remainders"})
    bf16 = TRAINING.model_copy(update={"optimizer_states": "bf16"})
    args = megatron_args(MODEL, GPUS, layout, remainders)
    assert "--use-precision-aware-optimizer" in args.splitlines()
    assert _stated(args) == []
    assert "--use-precision-aware-optimizer" not in megatron_args(MODEL, GPUS, layout, TRAINING)
    bridge = megatron_bridge_overrides(MODEL, GPUS, layout, remainders)
    assert _overrides(bridge, yaml.safe_load)["optimizer.use_precision_aware_optimizer"] is True
    for writer in (megatron_args, nemo_overrides, megatron_bridge_overrides):
        stated = _stated(writer(MODEL, GPUS, layout, bf16))
        assert any("training.optimizer_states = bf16" in s for s in stated), (writer, stated)
    plain = Layout(dp=16, zero=3)
    for writer in (deepspeed_json, llm_foundry_yaml, torchtitan_toml, megatron_deepspeed_args):
        stated = _stated(writer(MODEL, GPUS, plain, remainders))
        assert any("training.optimizer_states = fp32_remainders" in s for s in stated), writer


@pytest.mark.parametrize(
    "writer",
    [
        deepspeed_json,
        llm_foundry_yaml,
        megatron_deepspeed_args,
        nemo_overrides,
        megatron_bridge_overrides,
        megatron_args,
        torchtitan_toml,
    ],
)
def test_a_plain_data_parallel_layout_needs_no_statement(writer: Any) -> None:
    """The statements are not boilerplate: ZeRO-3 data parallelism every framework runs."""
    layout = Layout(dp=16, zero=3, overlap_dp_grad_reduce=True)
    assert _stated(writer(MODEL, GPUS, layout, TRAINING)) == []


def test_deepspeed_alone_points_recompute_at_transformers_and_with_megatron_at_the_args() -> None:
    layout = Layout(dp=16, zero=2)
    full = Training(seq_len=4096, global_batch=64, micro_batch=2, recompute="full")
    alone = json.loads(deepspeed_json(MODEL, GPUS, layout, full))
    assert any("gradient_checkpointing=True" in n for n in alone["planner_notes"])
    assert "activation_checkpointing" not in alone
    mds = json.loads(deepspeed_json(MODEL, GPUS, layout, full, with_megatron=True))
    assert mds["activation_checkpointing"]["partition_activations"] is False
    assert any("megatron_deepspeed_args.txt" in n for n in mds["planner_notes"])
    moe = Layout(dp=8, ep=2, zero=1)  # expert parallelism alone: stated
    assert any("layout.ep = 2" in n for n in _stated(deepspeed_json(MOE, GPUS, moe, TRAINING)))


def test_a_batch_that_is_not_whole_accumulation_steps_is_one_error() -> None:
    training = Training(seq_len=4096, global_batch=60, micro_batch=4)
    with pytest.raises(PlannerError) as exc:
        deepspeed_json(MODEL, GPUS, Layout(dp=16, zero=1), training)
    assert exc.value.field == "training.global_batch" and "64" in (exc.value.valid or "")


# ---- writing and the CLI ----------------------------------------------------------------------
def test_write_exports_writes_whatever_keys_are_present(tmp_path: Path) -> None:
    paths = write_exports(tmp_path, {"layout_yaml": "a\n", "deepspeed_json": "{}\n"})
    assert [p.name for p in paths] == ["layout.yaml", "ds_config.json"]
    assert (tmp_path / "ds_config.json").read_text() == "{}\n"
    assert not (tmp_path / "megatron_args.txt").exists()
    with pytest.raises(PlannerError, match="unknown export"):
        write_exports(tmp_path, {"slurm": ""})


def test_cli_search_under_deepspeed_zero_writes_the_deepspeed_json(tmp_path: Path) -> None:
    argv = ["search", "--model", "llama3.1-8b", "--cluster", "dgx-h100", "--gpus", "8"]
    argv += ["--global-batch", "32", "--method", "exhaustive", "--top", "3", "--json"]
    argv += ["--stack", "deepspeed-zero", "--export-dir", str(tmp_path)]
    buf = io.StringIO()
    with redirect_stdout(buf):
        assert main(argv) == 0
    data = json.loads(buf.getvalue())
    assert set(data["exports"]) == {"layout_yaml", "deepspeed_json"}
    assert sorted(Path(p).name for p in data["export_files"]) == ["ds_config.json", "layout.yaml"]
    cfg = json.loads((tmp_path / "ds_config.json").read_text())
    best = data["best"]
    assert cfg["zero_optimization"]["stage"] == best["layout"]["zero"]
    assert cfg["train_batch_size"] == 32
    assert cfg["train_micro_batch_size_per_gpu"] == best["training"]["micro_batch"]
    assert cfg["train_batch_size"] == (
        cfg["train_micro_batch_size_per_gpu"] * cfg["gradient_accumulation_steps"] * 8
    )
    assert not (tmp_path / "megatron_args.txt").exists()
    assert (tmp_path / "ds_config.json").read_text() == data["exports"]["deepspeed_json"]
    # the layout file is what was costed: simulated under the stack, the same step time
    argv = ["simulate", "--model", "llama3.1-8b", "--cluster", "dgx-h100", "--json"]
    argv += ["--layout", str(tmp_path / "layout.yaml"), "--stack", "deepspeed-zero"]
    buf = io.StringIO()
    with redirect_stdout(buf):
        assert main(argv) == 0
    assert json.loads(buf.getvalue())["step_time_s"] == pytest.approx(
        best["report"]["step_time_s"], rel=1e-12
    )


def test_vocabulary_padding_is_written_where_megatron_pads_and_stated_where_nothing_pads() -> None:
    """Training.vocab_multiple: Megatron's --make-vocab-size-divisible-by (written only when it
    is not the default 128); the frameworks that build the tokenizer's size as it is say when
    the planner costed padded rows (Llama 3's 128,256 at TP 4 -> 128,512)."""
    layout = Layout(tp=4, dp=4, zero=1)
    unpadded = TRAINING.model_copy(update={"vocab_multiple": 1})
    assert "--make-vocab-size-divisible-by 1" in megatron_args(MODEL, GPUS, layout, unpadded)
    assert "--make-vocab-size-divisible-by" not in megatron_args(MODEL, GPUS, layout, TRAINING)
    mds = megatron_deepspeed_args(MODEL, GPUS, layout, unpadded)
    assert "--make-vocab-size-divisible-by 1" in mds.splitlines()
    for writer in (nemo_overrides, megatron_bridge_overrides):
        text = writer(MODEL, GPUS, layout, unpadded)
        assert "make_vocab_size_divisible_by" in text, writer
        assert "make_vocab_size_divisible_by" not in writer(MODEL, GPUS, layout, TRAINING)
    plain = Layout(tp=4, dp=4, zero=3)
    for writer in (torchtitan_toml, llm_foundry_yaml, deepspeed_json):
        padded = _stated(writer(MODEL, GPUS, plain, TRAINING))
        assert any("training.vocab_multiple = 128" in s and "128,512" in s for s in padded), writer
        assert not any("vocab_multiple" in s for s in _stated(writer(MODEL, GPUS, plain, unpadded)))


def test_megatron_args_state_the_fp8_recipe_and_fp8_weights() -> None:
    """Megatron-LM's --fp8-recipe (delayed is its default) and --fp8-param-gather are written
    when the training asks for them; a torchao-only recipe is stated as not expressed."""
    lay = Layout(tp=2, dp=8, zero=1)

    def lines(**kw: Any) -> list[str]:
        tr = Training(seq_len=4096, global_batch=64, precision="fp8", **kw)
        return megatron_args(MODEL, GPUS, lay, tr).splitlines()

    plain = lines()
    assert "--fp8-format hybrid" in plain
    assert not any(x.startswith(("--fp8-recipe", "--fp8-param-gather")) for x in plain)
    assert "--fp8-recipe mxfp8" in lines(fp8_recipe="mxfp8")
    assert "--fp8-param-gather" in lines(fp8_recipe="tensorwise", fp8_param_gather=True)
    rowwise = lines(fp8_recipe="rowwise")
    assert any(NOT_EXPRESSED in x and "rowwise" in x for x in rowwise)


def test_hybrid_sharding_is_written_where_the_framework_has_a_key() -> None:
    """Layout.dp_shard: torchtitan's replicate x shard degrees, Megatron-Core's distributed-
    optimizer instances, FSDP HYBRID_SHARD; no statement where it is written."""
    layout = Layout(dp=16, zero=3, dp_shard=4)
    toml = torchtitan_toml(MODEL, GPUS, layout, TRAINING)
    assert "data_parallel_replicate_degree = 4" in toml.splitlines()
    assert "data_parallel_shard_degree = 4" in toml.splitlines()
    assert _stated(toml) == []
    assert "HYBRID_SHARD" in llm_foundry_yaml(MODEL, GPUS, layout, TRAINING)
    partial = Layout(dp=16, zero=1, dp_shard=4)
    args = megatron_args(MODEL, GPUS, partial, TRAINING)
    assert "--num-distributed-optimizer-instances 4" in args.splitlines() and not _stated(args)
    bridge = megatron_bridge_overrides(MODEL, GPUS, partial, TRAINING)
    assert _overrides(bridge, yaml.safe_load)["ddp.num_distributed_optimizer_instances"] == 4
