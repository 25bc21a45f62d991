"""``planner search`` over several global batches and sequence lengths: the flag syntax, one-line
errors naming the flag, the table's batch/seq columns, the JSON rows and the batch front."""

from __future__ import annotations

from typing import Any

import pytest
from cli_run import one_line_error, run_json

import planner
from planner.cli import main
from planner.cli.search import sweep_values
from planner.errors import PlannerError

BASE = ["search", "--model", "llama3.1-8b", "--cluster", "dgx-h100", "--gpus", "8"]
SWEEP = [*BASE, "--global-batch", "8:16", "--seq-len", "1024,2048", "--top", "40"]
MAX = 16_777_216


@pytest.mark.parametrize(
    ("text", "values"),
    [
        ("512", (512,)),
        ("512,1024,2048", (512, 1024, 2048)),
        (" 2048 , 512,512 ", (512, 2048)),
        ("256:2048", (256, 512, 1024, 2048)),
        ("256:1500", (256, 512, 1024, 1500)),
        ("64:64", (64,)),
        ("2048:8192:2048", (2048, 4096, 6144, 8192)),
        ("1000:2000:300", (1000, 1300, 1600, 1900, 2000)),
        ("8192,1024:2048", (1024, 2048, 8192)),
    ],
)
def test_sweep_values(text: str, values: tuple[int, ...]) -> None:
    assert sweep_values("--global-batch", text, MAX) == values


@pytest.mark.parametrize(
    ("flag", "text", "says"),
    [
        ("--global-batch", "abc", "'abc' is not an integer or a range"),
        ("--global-batch", "512,", "an empty item is not an integer or a range"),
        ("--global-batch", "0", "0 is out of range"),
        ("--global-batch", "-8", "-8 is out of range"),
        ("--global-batch", "16777217", "16777217 is out of range"),
        ("--global-batch", "1" + "0" * 400, "(401 characters) is out of range"),
        ("--global-batch", "2048:256", "'2048:256' ends below its start"),
        ("--global-batch", "16:32:0", "0 is out of range"),
        ("--global-batch", "1:2:3:4", "'1:2:3:4' is not an integer or a range"),
        ("--global-batch", "1:1000:1", "'1:1000:1' has more than 64 values"),
        ("--global-batch", ",".join(map(str, range(1, 70))), "has more than 64 values"),
        ("--seq-len", "4096,x", "'x' is not an integer or a range"),
        ("--seq-len", "0", "0 is out of range"),
        ("--seq-len", "4096;8192", "is not an integer or a range"),
    ],
)
def test_bad_sweep_flag_is_one_line_naming_the_flag(
    capsys: pytest.CaptureFixture[str], flag: str, text: str, says: str
) -> None:
    argv = [*BASE, "--global-batch", "16", f"{flag}={text}"]
    line = one_line_error(capsys, argv)
    assert line.startswith(f"error: {flag}: "), line
    assert says in line, line
    assert "(valid: an integer, a comma list (512,1024,2048), a doubling range A:B" in line
    with pytest.raises(PlannerError) as exc:
        sweep_values(flag, text, MAX)
    assert exc.value.field == flag


@pytest.fixture(scope="module")
def swept() -> dict[str, Any]:
    return run_json([*SWEEP, "--method", "exhaustive", "--pareto", "--json"])


def test_json_rows_carry_their_batch_and_sequence(swept: dict[str, Any]) -> None:
    assert swept["sweep"] == {"global_batch": [8, 16], "seq_len": [1024, 2048]}
    rows = [*swept["top"], *(e for front in swept["pareto"].values() for e in front)]
    combos = {(t["training"]["global_batch"], t["training"]["seq_len"]) for t in rows}
    assert len(combos) >= 3 and combos <= {(8, 1024), (8, 2048), (16, 1024), (16, 2048)}
    for row in rows:  # the report is the row's own: tokens per step / step time
        tokens = row["training"]["global_batch"] * row["training"]["seq_len"]
        report = row["report"]
        assert report["tokens_per_s"] == pytest.approx(tokens / report["step_time_s"])
    scores = [t["score"] for t in swept["top"]]
    assert scores == sorted(scores, reverse=True)
    assert swept["best"] == swept["top"][0]


def test_json_best_is_the_best_of_the_single_searches(swept: dict[str, Any]) -> None:
    model, cluster = planner.load_model("llama3.1-8b"), planner.load_cluster("dgx-h100")
    singles = [
        planner.search(
            model,
            cluster,
            gpus=8,
            global_batch=b,
            seq_len=s,
            method="exhaustive",
            memory_headroom=0.05,  # the CLI's default
            cross_entropy=None,
            precision=None,
        ).best.score
        for b in (8, 16)
        for s in (1024, 2048)
    ]
    assert swept["best"]["score"] == pytest.approx(max(singles), rel=1e-12)


def test_json_pareto_has_the_batch_front(swept: dict[str, Any]) -> None:
    fronts = swept["pareto"]
    assert set(fronts) == {
        "tokens_per_s_vs_memory_headroom",
        "tokens_per_s_vs_gpus",
        "tokens_per_s_vs_batch_tokens",
    }
    front = fronts["tokens_per_s_vs_batch_tokens"]
    points = [
        (e["report"]["tokens_per_s"], e["training"]["global_batch"] * e["training"]["seq_len"])
        for e in front
    ]
    assert points[0][0] == swept["best"]["report"]["tokens_per_s"]
    assert points[-1][1] == 8 * 1024  # the smallest batch in tokens searched
    # down the front, speed falls and so does the batch: each member is a trade-off
    assert [p[0] for p in points] == sorted((p[0] for p in points), reverse=True)
    assert [p[1] for p in points] == sorted((p[1] for p in points), reverse=True)
    assert len({p[1] for p in points}) == len(points)


def test_single_values_keep_the_single_search_output(capsys: pytest.CaptureFixture[str]) -> None:
    data = run_json([*BASE, "--global-batch", "16", "--seq-len", "1024", "--pareto", "--json"])
    assert "sweep" not in data and "tokens_per_s_vs_batch_tokens" not in data["pareto"]
    assert not any("global batch" in n for n in data["notes"])
    assert main([*BASE, "--global-batch", "16", "--seq-len", "1024", "--top", "3"]) == 0
    out = capsys.readouterr().out
    ranking = out.split("Top 3 layouts")[1].split("Why the best")[0]
    assert "global" not in ranking and "seq" not in ranking


def test_table_shows_batch_and_sequence_columns(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [*BASE, "--global-batch", "8,16", "--seq-len", "1024", "--top", "5", "--pareto"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    ranking = out.split("Top 5 layouts")[1].split("Why the best")[0]
    assert "global" in ranking and "batch" in ranking and "seq" in ranking
    assert "global batches searched: 8, 16; sequence lengths: 1024" in " ".join(out.split())
    assert "Pareto front: tokens per s vs batch tokens" in out
