"""``planner search``: JSON, ranking, the three exports, Pareto fronts, ``simulate --layout``."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from cli_run import one_line_error, run_json

import planner
from planner.cli import main
from planner.cli.search import gpu_counts
from planner.errors import PlannerError
from planner.search.export import (
    LAYOUT_FIELDS,
    TRAINING_FIELDS,
    layout_yaml,
    load_layout_file,
    megatron_args,
    parse_layout_document,
    torchtitan_toml,
)
from planner.specs.layout import Layout, Training

BASE = [
    "search",
    "--model",
    "llama3.1-8b",
    "--cluster",
    "dgx-h100",
    "--gpus",
    "16",
    "--global-batch",
    "64",
    "--seq-len",
    "4096",
    "--method",
    "exhaustive",
]


@pytest.fixture(scope="module")
def searched(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    """One exhaustive search with --pareto and --export-dir, shared by the tests below."""
    out = tmp_path_factory.mktemp("exports")
    return run_json([*BASE, "--json", "--pareto", "--export-dir", str(out)]), out


def test_json_best_is_the_max_of_a_sorted_top(searched: tuple[dict[str, Any], Path]) -> None:
    data, _ = searched
    assert data["method"] == "exhaustive"
    assert data["evaluated"] > 0 and data["seconds"] > 0
    assert "out of memory (with headroom)" in data["infeasible"]
    rates = [t["report"]["tokens_per_s"] for t in data["top"]]
    assert len(rates) == 10
    assert rates == sorted(rates, reverse=True)
    assert data["best"]["report"]["tokens_per_s"] == max(rates)
    assert data["best"] == data["top"][0]
    for t in data["top"]:
        assert set(t) >= {"gpus", "layout", "training", "report"}
        assert t["gpus"] == 16
        assert t["report"]["peak_memory_gib"] <= 0.95 * t["report"]["usable_memory_gib"] + 1e-9
    assert set(data["exports"]) == {"layout_yaml", "megatron_args", "torchtitan_toml"}
    assert len(data["why"]) <= 3


def test_exported_layout_round_trips_through_simulate(
    searched: tuple[dict[str, Any], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    data, out = searched
    path = out / "layout.yaml"
    assert path.read_text() == data["exports"]["layout_yaml"]
    argv = ["simulate", "--model", "llama3.1-8b", "--cluster", "dgx-h100", "--layout", str(path)]
    assert main([*argv, "--json"]) == 0
    sim = json.loads(capsys.readouterr().out)
    assert sim["step_time_s"] == pytest.approx(data["best"]["report"]["step_time_s"], rel=1e-12)
    assert sim["layout"]["tp"] == data["best"]["layout"]["tp"]
    assert sim["training"] == data["best"]["training"]


def test_megatron_args_name_the_best_layout(searched: tuple[dict[str, Any], Path]) -> None:
    data, out = searched
    args = (out / "megatron_args.txt").read_text()
    best = data["best"]
    for flag, value in (
        ("--tensor-model-parallel-size", best["layout"]["tp"]),
        ("--pipeline-model-parallel-size", best["layout"]["pp"]),
        ("--micro-batch-size", best["training"]["micro_batch"]),
        ("--global-batch-size", 64),
        ("--seq-length", 4096),
    ):
        assert f"{flag} {value}\n" in args
    assert "--bf16" in args


def test_torchtitan_toml_parses(searched: tuple[dict[str, Any], Path]) -> None:
    data, out = searched
    cfg = tomllib.loads((out / "torchtitan.toml").read_text())
    par, lay = cfg["parallelism"], data["best"]["layout"]
    assert par["tensor_parallel_degree"] == lay["tp"]
    assert par["pipeline_parallel_degree"] == lay["pp"]
    assert par["data_parallel_replicate_degree"] * par["data_parallel_shard_degree"] == lay["dp"]
    assert cfg["training"]["global_batch_size"] == 64
    assert cfg["activation_checkpoint"]["mode"] == data["best"]["training"]["recompute"]


def test_pareto_fronts_are_non_dominated(searched: tuple[dict[str, Any], Path]) -> None:
    data, _ = searched
    axes = {
        "tokens_per_s_vs_memory_headroom": ("tokens_per_s", "memory_headroom_gib"),
        "tokens_per_s_vs_gpus": ("tokens_per_s", "gpus"),
    }
    assert set(data["pareto"]) == set(axes)
    for name, front in data["pareto"].items():
        assert front, name

        def point(e: dict[str, Any], name: str = name) -> tuple[float, float]:
            a, b = axes[name]
            second = -e["gpus"] if b == "gpus" else e["report"][b]
            return e["report"][a], second

        pts = [point(e) for e in front]
        for i, p in enumerate(pts):
            for j, q in enumerate(pts):
                if i != j:
                    assert not (q[0] >= p[0] and q[1] >= p[1]), (name, p, q)


def test_table_output_explains_the_winner(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*BASE, "--top", "3"]) == 0
    out = capsys.readouterr().out
    for text in (
        "Layout search",
        "exhaustive",
        "Top 3 layouts",
        "Why the best beats the runner-up",
        "s per step",
        "--tensor-model-parallel-size",
        "[parallelism]",
        "planner layout: llama3.1-8b",
    ):
        assert text in out, text


def test_cost_over_a_gpu_range_prefers_cheap_tokens() -> None:
    data = run_json([*BASE, "--gpus", "8", "--gpus-max", "32", "--objective", "cost", "--json"])
    assert {t["gpus"] for t in data["top"]} <= {8, 16, 32}
    scores = [t["score"] for t in data["top"]]
    assert scores == sorted(scores, reverse=True) and all(s < 0 for s in scores)
    assert any("GPU counts searched: 8, 16, 32" in n for n in data["notes"])


def test_gpu_counts() -> None:
    assert gpu_counts(16, None, 8) == (16,)
    assert gpu_counts(16, 128, 8) == (16, 32, 64, 128)
    assert gpu_counts(64, 300, 72) == (64, 72, 128, 144, 256, 288, 300)
    with pytest.raises(PlannerError, match="gpus-max"):
        gpu_counts(16, 8, 8)


def test_cost_on_a_cluster_without_price(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [*BASE, "--cluster", "dgx-a100-40gb", "--objective", "cost"]
    assert "error: objective:" in one_line_error(capsys, argv)


def test_time_to_train_needs_tokens(capsys: pytest.CaptureFixture[str]) -> None:
    assert "tokens" in one_line_error(capsys, [*BASE, "--objective", "time_to_train"])


def test_unknown_method_is_an_argparseone_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main([*BASE, "--method", "foo"])
    assert exc.value.code == 2
    assert "--method" in capsys.readouterr().err


def test_no_feasible_layout(capsys: pytest.CaptureFixture[str]) -> None:
    line = one_line_error(capsys, [*BASE, "--gpus", "3"])
    assert "no feasible layout" in line and "3 GPUs" in line


@pytest.mark.parametrize(
    ("flag", "value"), [("--top", "0"), ("--memory-headroom", "1.5"), ("--trials", "0")]
)
def test_bad_numbers(capsys: pytest.CaptureFixture[str], flag: str, value: str) -> None:
    assert flag in one_line_error(capsys, [*BASE, flag, value])


# ---- exports and layout files ------------------------------------------------------------------


def test_exports_of_a_pipelined_moe_zero3_layout() -> None:
    model = planner.load_model("mixtral-8x7b")
    layout = planner.Layout(tp=2, pp=4, dp=8, ep=8, vpp=2, zero=3, sequence_parallel=True)
    training = planner.Training(
        seq_len=4096, global_batch=256, micro_batch=2, recompute="full", precision="fp8"
    )
    args = megatron_args(model, 64, layout, training)
    per_stage = model.layers // 8
    assert f"--num-layers-per-virtual-pipeline-stage {per_stage}\n" in args
    assert "--expert-model-parallel-size 8\n" in args
    assert "--recompute-method uniform\n--recompute-num-layers 1\n" in args
    assert "--fp8-format hybrid" in args and "--use-distributed-optimizer" in args
    assert any(line.startswith("# ZeRO-3") and "FSDP" in line for line in args.splitlines())
    cfg = tomllib.loads(torchtitan_toml(model, 64, layout, training))
    assert cfg["parallelism"]["data_parallel_shard_degree"] == 8
    assert cfg["parallelism"]["data_parallel_replicate_degree"] == 1
    assert cfg["parallelism"]["pipeline_parallel_schedule"] == "Interleaved1F1B"
    assert cfg["training"]["local_batch_size"] == 256 // 8
    assert cfg["model"]["converters"] == ["float8"]
    back = parse_layout_document(yaml.safe_load(layout_yaml(model, 64, layout, training)))
    assert back == (layout, training, 64)


@pytest.mark.parametrize(
    ("layers", "pp", "vpp", "expected"),
    [
        (126, 16, None, "--account-for-loss-in-pipeline-split"),
        (126, 8, 2, "--virtual-pipeline-model-parallel-size 2"),
        (100, 8, None, "--decoder-first-pipeline-num-layers 11"),
        (96, 8, 3, "--num-layers-per-virtual-pipeline-stage 4"),
    ],
)
def test_megatron_pipeline_splits(layers: int, pp: int, vpp: int | None, expected: str) -> None:
    model = planner.load_model("llama3.1-8b").model_copy(update={"layers": layers})
    layout = planner.Layout(tp=1, pp=pp, dp=1, vpp=vpp)
    args = megatron_args(model, pp, layout, planner.Training(seq_len=4096, global_batch=64))
    assert expected in args.splitlines()


def test_layout_file_errors_name_the_field(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("gpus: 8\nlayout: {tp: 0, pp: 1, dp: 8}\n")
    with pytest.raises(PlannerError) as exc:
        load_layout_file(bad)
    assert exc.value.field == "layout.tp"
    bad.write_text("layout: {tp: 1, pp: 1, dp: 8}\nmicro: 2\n")
    with pytest.raises(PlannerError) as exc:
        load_layout_file(bad)
    assert exc.value.field == "micro"
    bad.write_text("[1, 2]\n")
    with pytest.raises(PlannerError, match="mapping"):
        load_layout_file(bad)


def test_simulate_layout_without_training_needs_global_batch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "l.yaml"
    path.write_text("layout: {tp: 2, pp: 1, dp: 4}\n")
    argv = ["simulate", "--model", "llama3.1-8b", "--cluster", "dgx-h100", "--layout", str(path)]
    assert "--global-batch" in one_line_error(capsys, argv)
    assert main([*argv, "--global-batch", "32", "--json"]) == 0
    sim = json.loads(capsys.readouterr().out)
    assert sim["gpus"] == 8 and sim["training"]["global_batch"] == 32
    assert "layout" in one_line_error(capsys, [*argv, "--global-batch", "32", "--gpus", "16"])


def test_simulate_without_gpus_or_layout(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", "--model", "llama3.1-8b", "--cluster", "dgx-h100", "--global-batch", "8"]
    assert "--gpus" in one_line_error(capsys, argv)


def test_cross_entropy_reaches_every_candidate_and_the_export(tmp_path: Path) -> None:
    """The in-place loss moves less and keeps less: the best layout is never slower than with
    the fp32 copy, and the chosen loss reaches the best layout and the exported file."""
    small = ["search", "--model", "llama3.1-8b", "--cluster", "dgx-h100", "--gpus", "8"]
    small += ["--global-batch", "32", "--method", "exhaustive", "--json", "--top", "3"]
    copy = run_json(small)
    inplace = run_json([*small, "--cross-entropy", "in_place", "--export-dir", str(tmp_path)])
    assert inplace["best"]["score"] >= copy["best"]["score"]
    assert inplace["best"]["training"]["cross_entropy"] == "in_place"
    assert copy["best"]["training"]["cross_entropy"] == "fp32_copy"
    _, training, _ = load_layout_file(tmp_path / "layout.yaml")
    assert training is not None
    assert training.cross_entropy == "in_place"


# ---- the pipeline schedule knob ---------------------------------------------------------------

GOLDEN = json.loads(
    (Path(__file__).resolve().parents[1] / "assets" / "search_default_schedules.json").read_text()
)


def test_default_schedules_leave_the_ranking_unchanged(
    searched: tuple[dict[str, Any], Path],
) -> None:
    """The ranking of the search before schedules were a knob (tests/assets)."""
    data, _ = searched
    golden = GOLDEN["llama3.1-8b_16"]
    assert data["space_size"] == golden["space_size"]
    assert data["infeasible"] == golden["infeasible"]

    def kept(entry: dict[str, Any], reference: dict[str, Any], spec: type) -> dict[str, Any]:
        # fields added since the golden file was written must sit at their defaults
        new = {k: v for k, v in entry.items() if k not in reference}
        defaults = {k: spec.model_fields[k].default for k in new}
        assert new == json.loads(json.dumps(defaults)), new
        return {k: entry[k] for k in reference}

    def keyed(entry: dict[str, Any], reference: dict[str, Any]) -> tuple:
        layout = kept(entry["layout"], reference["layout"], Layout)
        return entry["gpus"], layout, kept(entry["training"], reference["training"], Training)

    got = [keyed(e, g) for e, g in zip(data["top"], golden["top"], strict=True)]
    assert got == [(g["gpus"], g["layout"], g["training"]) for g in golden["top"]]
    for e, g in zip(data["top"], golden["top"], strict=True):
        assert e["report"]["tokens_per_s"] == pytest.approx(g["tokens_per_s"], rel=1e-9)
    # every rule's count is in the JSON, and in infeasible as before
    assert data["rejected_by_rule"]
    assert all(data["infeasible"][k] == n for k, n in data["rejected_by_rule"].items())


def test_all_schedules_on_a_pipelined_problem() -> None:
    data = run_json(
        [
            "search",
            "--model",
            "llama3.1-70b",
            "--cluster",
            "dgx-h100",
            "--gpus",
            "64",
            "--global-batch",
            "256",
            "--schedules",
            "all",
            "--json",
        ]
    )
    schedules = {e["layout"]["schedule"] for e in data["top"]}
    assert schedules & {"zb-h1", "zb-h2", "interleaved-zb", "zbv", "dualpipev"}
    default_best = GOLDEN["llama3.1-70b_64_gb256_best_tokens_per_s"]
    assert data["best"]["report"]["tokens_per_s"] >= default_best * (1 - 1e-9)
    assert data["rejected_by_rule"]["schedule"] > 0


def test_summary_lists_the_rules_counts(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*BASE, "--top", "1"]) == 0
    out = capsys.readouterr().out
    assert "removed by rule" in out and "world_size" in out
    rows = [line for line in out.splitlines() if "world_size" in line]
    assert len(rows) == 1 and "removed by rule" in rows[0]  # not repeated as "rejected"


def test_unknown_schedule_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    line = one_line_error(capsys, [*BASE, "--schedules", "1f1b,zb"])
    assert "--schedules" in line and "'zb'" in line and "dualpipev" in line


def test_layout_file_writes_every_field_no_stack_fills() -> None:
    """A layout file keeps every layout and training field a stack does not set (the stack
    named in its header fills the rest): hybrid sharding, the edge ranks' layer counts and a
    partial recompute come back as written."""
    from planner.stacks import STACK_LAYOUT_FIELDS, STACK_TRAINING_FIELDS

    kept = set(LAYOUT_FIELDS) | set(STACK_LAYOUT_FIELDS)
    assert {f for f in planner.Layout.model_fields if f not in kept} == set()
    kept = set(TRAINING_FIELDS) | set(STACK_TRAINING_FIELDS)
    assert {f for f in planner.Training.model_fields if f not in kept} == set()
    model = planner.load_model("llama3.1-70b")
    layout = planner.Layout(tp=4, pp=4, dp=4, zero=1, dp_shard=2, first_stage_layers=18)
    training = planner.Training(
        seq_len=8192,
        global_batch=64,
        recompute="full",
        recompute_fraction=0.25,
        optimizer_states="fp32_remainders",
    )
    back = parse_layout_document(yaml.safe_load(layout_yaml(model, 64, layout, training)))
    assert back == (layout, training, 64)


@pytest.mark.parametrize("flag", ["abc", "0.5,x", ",", "0,0.5", "1.5"])
def test_recompute_fractions_flag_errors_name_it(
    capsys: pytest.CaptureFixture[str], flag: str
) -> None:
    argv = ["search", "--model", "llama3.1-8b", "--cluster", "dgx-h100", "--gpus", "8"]
    argv += ["--global-batch", "64", "--recompute-fractions", flag]
    assert "recompute" in one_line_error(capsys, argv)
