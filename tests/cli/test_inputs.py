"""planner/cli/fields.py and planner/cli/inputs.py: the layout and training flags are the
fields of Layout and Training, so a field added to a spec is a flag with no other edit."""

from __future__ import annotations

import argparse
import json
from typing import Literal

import pytest
from pydantic import BaseModel, Field

from planner.cli import inputs, main
from planner.cli.fields import add_field_flags, comma_list
from planner.specs.fields import input_fields
from planner.specs.layout import Layout, Training

SMALL = [
    "simulate",
    "--model",
    "llama3.1-8b",
    "--cluster",
    "dgx-h100",
    "--gpus",
    "8",
    "--global-batch",
    "16",
    "--seq-len",
    "2048",
]


class ChunkedLayout(Layout):
    """Layout with two fields the command line has never heard of."""

    message_chunks: int = Field(default=1, ge=1, le=8, description="pieces per pipeline message")
    fused_grad_copy: bool = Field(default=True, description="copy gradients in one kernel")


class LossScaleTraining(Training):
    loss_scale: Literal["static", "dynamic"] = Field(
        default="dynamic", description="fp16 loss scaling (100% of steps checked)"
    )


@pytest.fixture
def extended(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(inputs, "LAYOUT_SPEC", ChunkedLayout)
    monkeypatch.setattr(inputs, "TRAINING_SPEC", LossScaleTraining)


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    inputs.add_layout_flags(parser)
    return parser.parse_args(["--model", "m", "--cluster", "c", *argv])


def test_input_fields_read_kinds_choices_bounds_and_defaults() -> None:
    layout = {f.name: f for f in input_fields(Layout)}
    assert (layout["tp"].kind, layout["tp"].default, layout["tp"].minimum) == ("int", 1, 1)
    assert layout["zero"].kind == "choice" and layout["zero"].choices == (0, 1, 2, 3)
    assert layout["vpp"].optional and layout["vpp"].default is None
    assert layout["overlap_dp_grad_reduce"].flag == "--no-overlap-dp-grad-reduce"
    training = {f.name: f for f in input_fields(Training)}
    assert training["seq_len"].required and training["seq_len"].default is None
    modules = training["recompute_modules"]
    assert modules.kind == "list" and "core_attn" in modules.choices and modules.optional
    assert [f.name for f in input_fields(Layout)] == list(Layout.model_fields)


def test_legacy_flag_names_build_the_same_layout() -> None:
    args = _parse(
        "--gpus", "64", "--tp", "8", "--pp", "2", "--vpp", "2", "--zero", "1",
        "--sequence-parallel", "--overlap-tp", "--no-overlap-dp", "--no-overlap-zero3",
        "--overlap-ep", "--pp-scatter-gather", "--schedule", "interleaved",
    )  # fmt: skip
    layout = inputs.layout_from_flags(args)
    assert layout == Layout(
        tp=8, pp=2, dp=4, vpp=2, zero=1, sequence_parallel=True, overlap_tp_comm=True,
        overlap_dp_grad_reduce=False, overlap_zero3_param_gather=False, overlap_ep_comm=True,
        pp_scatter_gather=True, schedule="interleaved",
    )  # fmt: skip


def test_training_flags_build_the_training() -> None:
    args = _parse(
        "--gpus", "8", "--global-batch", "32", "--micro-batch", "2", "--recompute", "selective",
        "--recompute-modules", "core_attn, mlp", "--precision", "fp8", "--dropout",
        "--cross-entropy", "in_place", "--attention-kernel", "flash2",
    )  # fmt: skip
    training = inputs.training_from_flags(args)
    assert training == Training(
        seq_len=4096, global_batch=32, micro_batch=2, recompute="selective",
        recompute_modules=("core_attn", "mlp"), precision="fp8", dropout=True,
        cross_entropy="in_place", attention_kernel="flash2",
    )  # fmt: skip


def test_flag_defaults_are_the_spec_defaults() -> None:
    args = _parse("--gpus", "8", "--global-batch", "8")
    assert inputs.layout_from_flags(args) == Layout(dp=8)
    assert inputs.training_from_flags(args) == Training(seq_len=4096, global_batch=8)


def test_a_new_field_is_a_flag_in_help(extended: None, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["simulate", "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert "--message-chunks MESSAGE_CHUNKS" in out and "pieces per pipeline message" in out
    assert "--no-fused-grad-copy" in out
    assert "--loss-scale {static,dynamic}" in out and "100% of steps" in out


def test_a_new_field_reaches_the_built_specs(extended: None, capsys: pytest.CaptureFixture) -> None:
    argv = [*SMALL, "--message-chunks", "4", "--no-fused-grad-copy", "--loss-scale", "static"]
    assert main([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["layout"]["message_chunks"] == 4 and out["layout"]["fused_grad_copy"] is False
    assert out["training"]["loss_scale"] == "static"
    assert main([*SMALL, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["layout"]["message_chunks"], out["layout"]["fused_grad_copy"]) == (1, True)


def test_a_new_field_out_of_range_is_one_line(extended: None, capsys) -> None:
    assert main([*SMALL, "--message-chunks", "9"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: layout.message_chunks") and err.count("\n") == 1
    with pytest.raises(SystemExit):
        main([*SMALL, "--loss-scale", "none"])  # argparse: not one of the choices


def test_a_field_without_an_input_form_is_refused_by_name() -> None:
    class Odd(BaseModel):
        table: dict[str, int] = {}

    with pytest.raises(TypeError, match="'table'"):
        add_field_flags(argparse.ArgumentParser(), Odd)


def test_comma_list() -> None:
    assert comma_list(" a, b,,c ") == ("a", "b", "c")
    assert comma_list("") == ()
