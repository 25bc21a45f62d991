"""The web app (app.py, app_pages/) under streamlit.testing.v1.AppTest: every page renders,
widgets change the numbers, bad uploads show an error box and never a traceback."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

pytest.importorskip("streamlit.testing.v1")
pytest.importorskip("plotly")

from streamlit.testing.v1 import AppTest  # noqa: E402

import planner  # noqa: E402
from planner.resources import STACKS_DIR  # noqa: E402
from planner.specs.loading import shipped_ids  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
APP = str(ROOT / "app.py")
PAGES = (
    "app_pages/estimate.py",
    "app_pages/search.py",
    "app_pages/compare.py",
    "app_pages/validation.py",
    "app_pages/calibration.py",
)
# small jobs keep every page fast
SMALL = {
    "srch_model": "llama3.1-8b",
    "srch_gpus": 8,
    "srch_global_batch": 32,
    "srch_seq_len": 2048,
    "srch_space": "coarse",
    "cmp_model": "llama3.1-8b",
    "cmp_gpus": 64,
    "cmp_global_batch": 256,
    "cmp_seq_len": 4096,
}


def _app(page: str | None = None, **state: object) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60)
    for key, value in {**SMALL, **state}.items():
        at.session_state[key] = value
    if page is not None:
        at.switch_page(page)
    return at.run()


def _ok(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]


def _metric(at: AppTest, label: str) -> str:
    return next(m.value for m in at.metric if m.label == label)


def _errors(at: AppTest) -> list[str]:
    return [e.value for e in at.error]


def _spec(element: object) -> dict:
    return json.loads(element.proto.spec)  # type: ignore[attr-defined]


def _datasets(element: object) -> dict[str, list[dict]]:
    """A Vega-Lite chart's named datasets (sent as Arrow IPC streams), as rows."""
    import pyarrow as pa

    return {
        d.name: pa.ipc.open_stream(d.data.data).read_all().to_pylist()
        for d in element.proto.datasets  # type: ignore[attr-defined]
    }


@pytest.mark.parametrize("page", PAGES)
def test_every_page_renders_without_error(page: str) -> None:
    at = _app(page)
    _ok(at)
    assert not _errors(at)
    assert at.title


# ---- Estimate -----------------------------------------------------------------------------------
def test_estimate_shows_numbers_and_charts() -> None:
    at = _app()
    _ok(at)
    assert _metric(at, "Tokens/s").endswith(" k")  # ~82 k tokens/s
    assert _metric(at, "MFU").endswith("%")
    assert _metric(at, "Memory per GPU").endswith("GiB")
    charts = at.get("vega_lite_chart")
    assert len(charts) == 2 and not at.get("plotly_chart")  # pp = 1: timeline in its expander
    mem, time_ = (_spec(ch) for ch in charts)
    mem_data, time_data = (_datasets(ch) for ch in charts)
    assert "Memory" in mem["title"] and "Where the time goes" in time_["title"]
    bars = mem["layer"][0]
    assert "GiB" in bars["encoding"]["y"]["title"]
    gib = sum(row["gib"] for row in mem_data[bars["data"]["name"]])
    assert gib == pytest.approx(float(_metric(at, "Memory per GPU").split()[0]), rel=0.01)
    assert mem_data["lines"][0]["label"].startswith("usable HBM")
    assert time_["layer"][0]["encoding"]["x"]["title"].startswith("time per step (")
    assert time_data["rows"] and all("%" in row["label"] for row in time_data["rows"])
    # the spec carries no input-dependent figure: a cluster change swaps only the datasets
    at.selectbox(key="est_cluster").set_value("dgx-h200")
    at.run()
    _ok(at)
    after = at.get("vega_lite_chart")
    assert [_spec(ch) for ch in after] == [mem, time_]
    assert _datasets(after[0])["lines"] != mem_data["lines"]  # H200's usable HBM
    assert any(s.value.startswith("Fits in memory") for s in at.success)
    at.session_state["est_timeline_open"] = True
    at.run()
    _ok(at)
    (gantt,) = (_spec(ch) for ch in at.get("plotly_chart"))
    assert "Pipeline timeline" in gantt["layout"]["title"]["text"]
    assert {y for trace in gantt["data"] for y in trace["y"]} == {"stage 1"}


def test_estimate_details_are_drawn_when_opened() -> None:
    at = _app()
    _ok(at)
    assert not at.table  # collapsed: not drawn (a browser widget change costs it otherwise)
    at.session_state["est_details_open"] = True
    at.run()
    _ok(at)
    (table,) = at.table
    assert "placement" in table.value.columns
    assert any("GFLOP" in m.value for m in at.markdown)
    assert any(cap.value.startswith("MFU = model FLOPs") for cap in at.caption)


def test_estimate_power_limit_caps_the_cluster() -> None:
    at = _app()
    _ok(at)
    box = at.number_input(key="est_power_limit")
    assert box.value == 0  # the accelerator's own board power
    free = _metric(at, "Tokens/s per GPU")
    # the metric's help carries the planner's error band around the figure
    (tip,) = [m.proto.help for m in at.metric if m.label == "Tokens/s per GPU"]
    lo, hi = (float(x.replace(",", "")) for x in re.findall(r"([\d,]+) to ([\d,]+)", tip)[0])
    assert lo < float(free.replace(",", "")) < hi
    cluster = planner.load_cluster(at.selectbox(key="est_cluster").value)
    box.set_value(0.6 * cluster.accelerator.tdp_w).run()
    _ok(at)
    capped = _metric(at, "Tokens/s per GPU")
    assert float(capped.replace(",", "")) < float(free.replace(",", ""))
    at.session_state["est_details_open"] = True
    at.run()
    assert any("power cap" in m.value for m in at.markdown)
    # above the accelerator's rated power: one line naming the field and the range
    at.number_input(key="est_power_limit").set_value(5000.0).run()
    assert any("power_limit_w" in e and "to" in e for e in _errors(at))


def test_estimate_tp_and_gpus_change_tokens_per_s() -> None:
    at = _app()
    base = _metric(at, "Tokens/s")
    at.number_input(key="est_tp").set_value(4).run()
    _ok(at)
    assert _metric(at, "Tokens/s") != base
    tp4 = _metric(at, "Tokens/s")
    at.number_input(key="est_gpus").set_value(16).run()
    _ok(at)
    assert _metric(at, "Tokens/s") != tp4
    assert "dp = gpus / (tp x pp x cp) = 16 / 4 = **4**" in [c.value for c in at.caption]


def test_estimate_pipeline_timeline_has_stages() -> None:
    at = _app(est_pp=4, est_tp=1, est_gpus=8, est_vpp=2)
    _ok(at)
    (gantt,) = (_spec(ch) for ch in at.get("plotly_chart"))
    names = {trace["name"] for trace in gantt["data"]}
    assert {"forward", "bubble (idle)", "optimizer step"} <= names
    assert set(gantt["data"][0]["y"]) == {f"stage {s}" for s in range(1, 5)}
    assert any("schematic" in c.value.lower() for c in at.caption)
    # each pipeline rank's allocated peak, the largest of which is the metric
    (ranks,) = [c.value for c in at.caption if c.value.startswith("Allocated peak by")]
    assert "first" in ranks and "middle" in ranks and "last" in ranks
    peak = float(_metric(at, "Memory per GPU").split()[0])
    gibs = [float(part.split()[1]) for part in ranks.split(": ")[1].rstrip(".").split(", ")]
    assert max(gibs) == pytest.approx(peak, rel=0.01)


def test_estimate_selective_recompute_modules_change_memory() -> None:
    at = _app(est_recompute="selective")
    _ok(at)
    assert at.multiselect(key="est_recompute_modules").value == ["core_attn"]
    before = _metric(at, "Memory per GPU")
    at.multiselect(key="est_recompute_modules").set_value(["core_attn", "mlp", "layernorm"]).run()
    _ok(at)
    assert _metric(at, "Memory per GPU") != before


def test_estimate_cuda_graphs_remove_host_overhead() -> None:
    at = _app(
        est_model="qwen3-30b-a3b",
        est_cluster="dgx-b200",
        est_gpus=8,
        est_tp=1,
        est_ep=8,
        est_precision="fp8",
        est_global_batch=64,
    )
    _ok(at)
    before = _metric(at, "Tokens/s")
    at.checkbox(key="est_cuda_graphs").check().run()
    _ok(at)
    assert _metric(at, "Tokens/s") != before


def test_estimate_in_place_loss_lowers_memory() -> None:
    at = _app(est_pp=1, est_tp=1, est_gpus=8, est_model="llama3.1-8b")
    _ok(at)
    before = _metric(at, "Memory per GPU")
    at.selectbox(key="est_loss").set_value("in_place").run()
    _ok(at)
    after = _metric(at, "Memory per GPU")
    assert float(after.split()[0]) < float(before.split()[0]), (before, after)


def test_estimate_offload_lowers_memory_and_explains_limits() -> None:
    at = _app(est_pp=1, est_tp=1, est_gpus=8, est_model="llama3.1-8b")
    _ok(at)
    before = _metric(at, "Memory per GPU")
    at.number_input(key="est_offload_layers").set_value(16).run()
    _ok(at)
    after = _metric(at, "Memory per GPU")
    assert float(after.split()[0]) < float(before.split()[0]), (before, after)
    at.number_input(key="est_offload_layers").set_value(32).run()
    _ok(at)
    (err,) = _errors(at)
    assert "offload_layers" in err and "32 layers" in err


def test_estimate_illegal_tp_explains_valid_values() -> None:
    at = _app()
    at.number_input(key="est_tp").set_value(3).run()
    _ok(at)
    (err,) = _errors(at)
    assert "tp" in err and "heads=32" in err
    assert "Nearest valid tp: 2 or 4" in err
    assert not at.metric  # no numbers for an illegal layout


def test_estimate_gpu_count_not_divisible_suggests_counts() -> None:
    at = _app(est_gpus=12, est_tp=8)
    _ok(at)
    (err,) = _errors(at)
    assert "does not divide gpus = 12" in err and "8 GPUs (dp = 1), 16 GPUs (dp = 2)" in err


def test_estimate_global_batch_not_divisible_suggests_batches() -> None:
    at = _app(est_global_batch=30)  # dp = 4 with tp 2 on 8 GPUs
    _ok(at)
    (err,) = _errors(at)
    assert "global_batch" in err and "28 or 32" in err


def test_estimate_goodput_section_is_lazy_and_follows_mtbf() -> None:
    at = _app()
    assert "Goodput" not in [m.label for m in at.metric]  # closed: nothing computed
    at.session_state["est_goodput_open"] = True
    at.run()
    _ok(at)
    goodput = _metric(at, "Goodput")
    assert goodput.endswith("%") and 90 < float(goodput.split()[0]) <= 100
    assert _metric(at, "Checkpoint size").endswith("GiB")
    assert _metric(at, "Effective MFU").endswith("%")
    assert _metric(at, "Optimal checkpoint interval")
    split = at.dataframe[0].value
    assert list(split["share"])[0] == "training (goodput)"
    assert split["% of wall time"].sum() == pytest.approx(100.0)
    at.number_input(key="est_gp_mtbf").set_value(500.0).run()
    _ok(at)
    worse = _metric(at, "Goodput")
    assert float(worse.split()[0]) < float(goodput.split()[0])
    at.toggle(key="est_gp_async").set_value(True).run()
    _ok(at)
    assert float(_metric(at, "Goodput").split()[0]) > float(worse.split()[0])


def test_estimate_levers_table_has_rows() -> None:
    at = _app()
    assert not at.dataframe  # closed: advise() not run
    at.session_state["est_levers_open"] = True
    at.run()
    _ok(at)
    (table,) = (d.value for d in at.dataframe)
    assert len(table) >= 3
    assert list(table.columns)[:4] == ["lever", "gain (%)", "memory change (GiB)", "fits"]
    assert "micro-batch 2" in set(table["lever"])
    fits = table["fits"].tolist()
    assert fits == sorted(fits, reverse=True)  # levers that fit come first


BAD_UPLOADS = {
    "invalid YAML": ("bad.yaml", b"name: [unclosed\nlayers: : 3\n", "invalid YAML"),
    "object tag": (
        "tag.yaml",
        b"!!python/object/apply:os.system ['echo pwned']\n",
        "object tags",
    ),
    "oversize": ("big.yaml", b"# " + b"x" * 1_100_000 + b"\nname: m\n", "1 MB"),
    "wrong schema": ("schema.yaml", b"name: m\nlayers: 2\n", "required field"),
}


@pytest.mark.parametrize("case", list(BAD_UPLOADS))
def test_estimate_bad_model_upload_shows_error(case: str) -> None:
    name, data, expected = BAD_UPLOADS[case]
    at = _app(est_model_source="Upload model YAML")
    at.file_uploader(key="est_upload").set_value((name, data, "application/x-yaml")).run()
    _ok(at)
    errors = _errors(at)
    assert len(errors) == 1 and expected in errors[0], errors
    assert not at.metric


def test_estimate_model_yaml_upload_is_used() -> None:
    at = _app(est_model_source="Upload model YAML")
    text = (ROOT / "models" / "llama3.1-8b.yaml").read_bytes()
    at.file_uploader(key="est_upload").set_value(("mine.yaml", text, "application/x-yaml")).run()
    _ok(at)
    assert not _errors(at)
    assert _metric(at, "Tokens/s").endswith(" k")


def test_estimate_hf_config_upload() -> None:
    pytest.importorskip("planner.hf_import")
    at = _app(est_model_source="Upload HuggingFace config.json")
    config = (ROOT / "models" / "hf" / "Llama-3.1-8B.json").read_bytes()
    at.file_uploader(key="est_upload").set_value(("config.json", config, "application/json")).run()
    _ok(at)
    assert not _errors(at)
    assert _metric(at, "Tokens/s")
    at.file_uploader(key="est_upload").set_value(
        ("config.json", b"{oops", "application/json")
    ).run()
    _ok(at)
    assert any("invalid JSON" in e for e in _errors(at))


# ---- Search -------------------------------------------------------------------------------------
def test_search_runs_and_offers_downloads() -> None:
    at = _app("app_pages/search.py")
    at.button(key="srch_submit").click().run()
    _ok(at)
    assert not _errors(at)
    assert len(at.dataframe) == 1 and len(at.dataframe[0].value) >= 2
    assert "tokens/s" in _metric(at, "Tokens/s")
    labels = {b.proto.label for b in at.get("download_button")}
    assert labels == {"Layout YAML", "Megatron-LM arguments", "torchtitan TOML", "JSON report"}
    pareto = [_spec(ch) for ch in at.get("plotly_chart")]
    assert len(pareto) == 2 and all(p["data"][1]["name"] == "Pareto front" for p in pareto)
    codes = " ".join(c.value for c in at.code)
    assert "--tensor-model-parallel-size" in codes and "[parallelism]" in codes


def test_search_under_a_stack_searches_only_what_it_runs() -> None:
    """torchtitan runs no ZeRO-1 (only DDP, reshard-never and full shard): no layout shown
    under it uses ZeRO-1, and the page says the search ran under the stack."""
    at = _app("app_pages/search.py", srch_stack="torchtitan-compiled")
    at.button(key="srch_submit").click().run()
    _ok(at)
    assert not _errors(at)
    rows = at.dataframe[0].value
    assert len(rows) >= 1
    layouts = list(rows["layout"])
    assert all(" Z" in x for x in layouts), layouts  # compact: '... Z3 ...'
    assert not any(" Z1" in x for x in layouts), layouts
    text = " ".join(m.value for m in at.markdown) + " ".join(x.value for x in at.caption)
    assert "torchtitan-compiled" in text
    # the downloads are in the stack's dialect: torchtitan TOML with compile on, no Megatron args
    labels = [b.proto.label for b in at.get("download_button")]
    assert labels == ["Layout YAML", "torchtitan TOML", "JSON report"]
    assert any("compile = true" in c.value for c in at.code)


def test_search_with_optimizer_offload_fits_what_does_not_fit_without() -> None:
    """Llama 3.1 70B on 8 x A100 80GB under DeepSpeed ZeRO: nothing fits until the optimizer
    goes to the host; the layouts shown then use ZeRO >= 1."""
    kw = {"srch_model": "llama3.1-70b", "srch_cluster": "dgx-a100-80gb", "srch_gpus": 8}
    kw |= {"srch_space": "full", "srch_global_batch": 64, "srch_seq_len": 4096}
    at = _app("app_pages/search.py", srch_stack="deepspeed-zero", **kw)
    at.button(key="srch_submit").click().run()
    assert any("no feasible layout" in e for e in _errors(at))
    at = _app("app_pages/search.py", srch_stack="deepspeed-zero", srch_optimizer_offload=True, **kw)
    at.button(key="srch_submit").click().run()
    _ok(at)
    assert not _errors(at)
    layouts = list(at.dataframe[0].value["layout"])
    assert layouts and not any(" Z0" in x for x in layouts), layouts


def test_search_with_no_feasible_layout_explains() -> None:
    at = _app("app_pages/search.py", srch_model="llama3.1-405b", srch_gpus=8)
    at.button(key="srch_submit").click().run()
    _ok(at)
    assert any("no feasible layout" in e for e in _errors(at))


# ---- Compare ------------------------------------------------------------------------------------
def test_compare_lists_generations_and_prices_move_cost() -> None:
    at = _app("app_pages/compare.py")
    _ok(at)
    table = at.dataframe[0].value
    assert len(table) >= 4
    assert {"dgx-a100-80gb", "dgx-h100", "dgx-b200"} <= set(table["cluster"])
    assert table["tokens/s"].notna().sum() >= 4
    charts = at.get("vega_lite_chart")
    assert len(charts) == 4 and not at.get("plotly_chart")
    tps = {r["cluster"]: r["value"] for r in _datasets(charts[0])["bars"]}
    assert tps == pytest.approx(dict(zip(table["cluster"], table["tokens/s"], strict=True)))
    titles = {_spec(ch)["layer"][0]["encoding"]["y"]["title"] for ch in charts}
    assert titles == {"tokens/s", "days", "$ millions", "MWh"}
    assert [b.proto.label for b in at.get("download_button")] == ["Download the table (CSV)"]
    h100 = table.set_index("cluster").loc["dgx-h100"]
    at.number_input(key="cmp_price_dgx-h100").set_value(2 * float(h100["price ($/GPU-h)"])).run()
    _ok(at)
    again = at.dataframe[0].value.set_index("cluster").loc["dgx-h100"]
    assert again["cost ($M)"] == pytest.approx(2 * h100["cost ($M)"], rel=0.01)
    assert again["tokens/s"] == h100["tokens/s"]


def test_compare_under_a_stack() -> None:
    """The stack enters each generation's search: eager torchtitan is slower than the
    planner's generic best on the same hardware, and the caption names the stack."""
    at = _app("app_pages/compare.py", cmp_clusters=["dgx-h100"])
    _ok(at)
    generic = at.dataframe[0].value.set_index("cluster").loc["dgx-h100", "tokens/s"]
    at.selectbox(key="cmp_stack").set_value("torchtitan-eager").run()
    _ok(at)
    eager = at.dataframe[0].value.set_index("cluster").loc["dgx-h100", "tokens/s"]
    assert 0 < eager < generic
    assert any("stack torchtitan-eager" in x.value for x in at.caption)


def test_compare_budget_mode() -> None:
    at = _app("app_pages/compare.py", cmp_mode="Budget", cmp_gpus_max=64, cmp_budget_musd=1e4)
    _ok(at)
    table = at.dataframe[0].value
    assert (table["GPUs"].dropna() <= 64).all()
    assert (table["note"] == "fastest count within budget").sum() >= 4


# ---- Validation ---------------------------------------------------------------------------------
PUBLIC = ROOT / "calibration" / "validation" / "public.yaml"  # shipped with the package


def test_validation_scatter_and_mape() -> None:
    at = _app("app_pages/validation.py")
    _ok(at)
    assert _metric(at, "MAPE").endswith("%")
    (scatter,) = at.get("plotly_chart")
    spec = _spec(scatter)
    points = [t for t in spec["data"] if t.get("mode") == "markers"]
    assert sum(len(t["x"]) for t in points) > 50
    assert any(t["name"] == "y = x" for t in spec["data"])
    assert spec["layout"]["xaxis"]["type"] == "log"


def test_validation_heldout_moe_rows() -> None:
    at = _app("app_pages/validation.py", val_source="Held-out MoE rows")
    _ok(at)
    assert _metric(at, "Cases scored").endswith("of 33")
    assert any("heldout_moe.yaml" in c.value for c in at.caption)


def test_validation_upload_own_cases() -> None:
    import yaml

    cases = yaml.safe_load(PUBLIC.read_text())["cases"][:3]  # schema 2
    at = _app("app_pages/validation.py", val_source="My cases (upload)")
    at.file_uploader(key="val_upload").set_value(
        ("mine.yaml", yaml.safe_dump({"schema": 2, "cases": cases}).encode(), "application/x-yaml")
    ).run()
    _ok(at)
    assert not _errors(at)
    assert _metric(at, "Cases scored").endswith("of 3")
    at.file_uploader(key="val_upload").set_value(
        ("mine.yaml", b"id: not-a-list\n", "application/x-yaml")
    ).run()
    _ok(at)
    assert any("schema" in e for e in _errors(at)), _errors(at)


def test_validation_upload_of_hand_written_schema_1_cases() -> None:
    """A schema 1 file as written by hand: other field names, a case without a measured
    tokens/s (a peak only) and a repeated id. Every case runs; only measured ones are scored."""
    import yaml

    cases = []
    for raw in yaml.safe_load(PUBLIC.read_text())["cases"][:2]:  # schema 2 -> schema 1
        raw["framework"] = raw.pop("stack")
        for knob in raw.pop("unstated", []):
            raw["layout" if knob in ("vpp", "zero", "ep") else "training"][knob] = None
        raw["training"]["global_batch_size"] = raw["training"].pop("global_batch")
        cases.append(raw)
    cases[1]["measured"] = {"peak_memory_gib": 60.0}
    cases.append({**cases[0], "layout": {**cases[0]["layout"], "tp": 1}})  # same id
    at = _app("app_pages/validation.py", val_source="My cases (upload)")
    at.file_uploader(key="val_upload").set_value(
        ("mine.yaml", yaml.safe_dump(cases).encode(), "application/x-yaml")
    ).run()
    _ok(at)
    assert not _errors(at)
    assert _metric(at, "Cases scored") == "2 of 3"


# ---- Calibration --------------------------------------------------------------------------------
def test_calibration_bad_profile_shows_error() -> None:
    at = _app("app_pages/calibration.py")
    for data, expected in (
        (b'{"schema_version": 1, "id": ', "invalid JSON"),
        (b'{"schema_version": 7}', "unsupported profile version"),
        (b'{"schema_version": 1, "id": "x"}', "required field"),
    ):
        at.file_uploader(key="cal_upload").set_value(("p.json", data, "application/json")).run()
        _ok(at)
        errors = _errors(at)
        assert len(errors) == 1 and expected in errors[0], errors


def test_calibration_profile_curves_and_use_everywhere() -> None:
    at = _app()
    base = _metric(at, "Tokens/s")
    at.switch_page("app_pages/calibration.py").run()
    prof = json.loads((ROOT / "calibration" / "profiles" / "h100-sxm5-80gb.json").read_text())
    prof["id"] = "slow-h100"
    prof["gemm"]["eta_max"] = {k: v * 0.7 for k, v in prof["gemm"]["eta_max"].items()}
    at.file_uploader(key="cal_upload").set_value(
        ("slow.json", json.dumps(prof).encode(), "application/json")
    ).run()
    _ok(at)
    gemm, comm = (_spec(ch) for ch in at.get("plotly_chart"))
    assert len(gemm["data"]) == 2 and "%" in gemm["layout"]["yaxis"]["title"]["text"]
    assert gemm["data"][1]["y"][-1] < gemm["data"][0]["y"][-1]
    assert "GB/s" in comm["layout"]["yaxis"]["title"]["text"]
    at.button(key="cal_use").click().run()
    _ok(at)
    assert any("slow-h100" in s.value for s in at.success)
    at.switch_page("app_pages/estimate.py").run()
    _ok(at)
    assert _metric(at, "Tokens/s") != base
    assert any("slow-h100" in c.value for c in at.caption)


def test_validation_file_missing_is_said(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import sys

    at = _app("app_pages/validation.py")  # imports app_pages.common
    monkeypatch.setattr(
        sys.modules["app_pages.common"], "VALIDATION_FILE", tmp_path / "public.yaml"
    )
    at.run()
    _ok(at)
    assert any("missing" in w.value for w in at.warning)


# ---- never a traceback --------------------------------------------------------------------------
def test_unexpected_error_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    at = _app()

    def boom(*args: object, **kwargs: object) -> None:
        raise RuntimeError("simulator exploded\nsecond line")

    monkeypatch.setattr(sys.modules["app_pages.common"], "simulate", boom)
    at.number_input(key="est_tp").set_value(4).run()
    _ok(at)
    assert _errors(at) == ["Unexpected error (RuntimeError): simulator exploded second line"]


# ---- hostile and extreme input: one error line, no hang, no NaN --------------------------------
HANG_GUARD_S = 120  # AppTest timeout: only catches a hang, asserts nothing about speed


def _upload(at: AppTest, key: str, name: str, data: bytes) -> AppTest:
    at.file_uploader(key=key).set_value((name, data, "application/octet-stream"))
    return at.run(timeout=HANG_GUARD_S)


def test_estimate_huge_heads_upload_is_an_error_line_not_a_hang() -> None:
    import re

    text = (ROOT / "models" / "llama3.1-8b.yaml").read_text()
    text = re.sub(r"(?m)^heads: .*$", "heads: 1000000000000", text)
    at = _app(est_model_source="Upload model YAML", est_tp=3, est_gpus=6)
    _upload(at, "est_upload", "huge.yaml", text.encode())
    _ok(at)
    errors = _errors(at)
    assert len(errors) == 1 and "heads" in errors[0], errors
    assert "\n" not in errors[0].split("  \n")[0] and not at.metric


BILLION_LAUGHS = b"""\
- id: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]
""" + b"".join(
    f"- id: &a{i} [*a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, "
    f"*a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}]\n".encode()
    for i in range(1, 9)
)


def test_validation_billion_laughs_upload_is_one_error_line() -> None:
    at = _app("app_pages/validation.py", val_source="My cases (upload)")
    _upload(at, "val_upload", "laughs.yaml", BILLION_LAUGHS)
    _ok(at)
    errors = _errors(at)
    assert len(errors) == 1 and "aliases expand" in errors[0], errors
    assert "MemoryError" not in errors[0] and not at.metric


@pytest.mark.parametrize(
    ("page", "state", "key", "name"),
    [
        (
            "app_pages/estimate.py",
            {"est_model_source": "Upload model YAML"},
            "est_upload",
            "m.yaml",
        ),
        (
            "app_pages/estimate.py",
            {"est_model_source": "Upload HuggingFace config.json"},
            "est_upload",
            "config.json",
        ),
        ("app_pages/validation.py", {"val_source": "My cases (upload)"}, "val_upload", "v.yaml"),
        ("app_pages/calibration.py", {}, "cal_upload", "p.json"),
    ],
)
def test_non_utf8_upload_is_one_error_line(page: str, state: dict, key: str, name: str) -> None:
    at = _app(page, **state)
    _upload(at, key, name, '{"name": "caf\u00e9"}\n'.encode("latin-1"))
    _ok(at)
    errors = _errors(at)
    assert len(errors) == 1 and "not UTF-8" in errors[0] and "0xe9" in errors[0], errors


def test_validation_upload_runs_under_a_time_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    at = _app("app_pages/validation.py", val_source="My cases (upload)")
    monkeypatch.setattr(sys.modules["app_pages.common"], "CASES_BUDGET_S", 0.0)
    cases = b"- id: a\n- id: b\n"
    _upload(at, "val_upload", "cases.yaml", cases)
    _ok(at)
    errors = _errors(at)
    assert len(errors) == 1 and "budget" in errors[0], errors


def test_validation_upload_cannot_name_a_server_file() -> None:
    import yaml

    case = {"id": "x", "cluster": "/etc/hosts"}
    at = _app("app_pages/validation.py", val_source="My cases (upload)")
    _upload(at, "val_upload", "cases.yaml", yaml.safe_dump([case]).encode())
    _ok(at)
    assert any("unknown preset" in w.value for w in at.warning)


def _b200_profile() -> bytes:
    return (ROOT / "calibration" / "profiles" / "b200.json").read_bytes()


def test_calibration_profile_for_another_accelerator_needs_the_checkbox() -> None:
    at = _app("app_pages/calibration.py", cal_cluster="dgx-h100")
    _upload(at, "cal_upload", "b200.json", _b200_profile())
    _ok(at)
    errors = _errors(at)
    assert len(errors) == 1 and "measured on 'b200'" in errors[0], errors
    assert not [b for b in at.button if b.key == "cal_use"]
    assert len(_spec(at.get("plotly_chart")[0])["data"]) == 1  # shipped curve only
    at.checkbox(key="cal_all").check().run(timeout=HANG_GUARD_S)
    _ok(at)
    assert not _errors(at)
    assert len(_spec(at.get("plotly_chart")[0])["data"]) == 2
    at.button(key="cal_use").click().run(timeout=HANG_GUARD_S)
    _ok(at)
    assert any("`b200`" in s.value for s in at.success)
    at.switch_page("app_pages/estimate.py").run(timeout=HANG_GUARD_S)
    _ok(at)
    assert any("**b200** (measured on `b200`)" in x.value for x in at.caption)


def test_estimate_says_when_the_active_profile_is_for_another_accelerator() -> None:
    at = _app("app_pages/calibration.py", cal_cluster="dgx-b200")
    _upload(at, "cal_upload", "b200.json", _b200_profile())
    at.button(key="cal_use").click().run(timeout=HANG_GUARD_S)
    _ok(at)
    at.switch_page("app_pages/estimate.py").run(timeout=HANG_GUARD_S)  # dgx-h100
    _ok(at)
    captions = " ".join(x.value for x in at.caption)
    assert "(measured on `h100-sxm5-80gb`)" in captions and "not used here" in captions


@pytest.mark.parametrize(("field", "value"), [("mfu_pct", 155.0), ("step_time_s", math.nan)])
def test_estimate_never_shows_non_finite_or_impossible_figures(
    monkeypatch: pytest.MonkeyPatch, field: str, value: float
) -> None:
    import dataclasses
    import sys

    at = _app()
    common = sys.modules["app_pages.common"]
    real = common._simulate

    def broken(*args: object, **kwargs: object) -> object:
        return dataclasses.replace(real(*args, **kwargs), **{field: value})

    monkeypatch.setattr(common, "_simulate", broken)
    at.number_input(key="est_tp").set_value(4).run(timeout=HANG_GUARD_S)
    _ok(at)
    errors = _errors(at)
    assert len(errors) == 1 and f"report.{field}" in errors[0], errors
    assert not at.metric


def test_search_runs_under_a_time_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    at = _app("app_pages/search.py")
    monkeypatch.setattr(sys.modules["app_pages.common"], "SEARCH_BUDGET_S", 1e-9)
    at.button(key="srch_submit").click().run(timeout=HANG_GUARD_S)
    _ok(at)
    errors = _errors(at)
    assert len(errors) == 1 and "search.time_budget_s" in errors[0], errors


def test_compare_search_budget_is_said_per_generation(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    at = _app("app_pages/compare.py")
    monkeypatch.setattr(sys.modules["app_pages.common"], "SEARCH_BUDGET_S", 1e-9)
    at.number_input(key="cmp_gpus").set_value(32).run(timeout=HANG_GUARD_S)
    _ok(at)
    assert not _errors(at)
    table = at.dataframe[0].value
    assert table["note"].str.contains("search.time_budget_s").all()
    assert table["profile"].str.contains("measured on").all()


def test_estimate_deep_pipeline_is_not_drawn() -> None:
    at = _app(est_model="llama3.1-405b", est_gpus=63, est_tp=1, est_pp=63, est_global_batch=63)
    _ok(at)
    assert _metric(at, "Tokens/s")
    assert len(at.get("vega_lite_chart")) == 2 and not at.get("plotly_chart")
    assert any("timeline not drawn" in i.value for i in at.info)


def test_stack_selector_sets_inputs_and_the_comparison_runs_every_stack() -> None:
    at = _app("app_pages/estimate.py")
    _ok(at)
    assert at.selectbox(key="est_stack").value == "megatron-core"
    at.selectbox(key="est_stack").set_value("torchtitan-eager").run()
    _ok(at)
    assert not at.error, [e.value for e in at.error]
    assert at.session_state["est_execution"] == "eager"
    assert "norm" in at.session_state["est_unfused_elementwise"]
    assert at.session_state["est_zero"] in (0, 2, 3)  # moved inside what the stack runs
    assert any("Stack torchtitan-eager: reserved peak" in c.value for c in at.caption)
    at.session_state["est_stacks_open"] = True
    at.run()
    _ok(at)
    (table,) = (d.value for d in at.dataframe if "stack" in d.value.columns)
    refused = [c.value for c in at.caption if "cannot run this layout" in c.value]
    assert len(table) + len(refused) == len(shipped_ids(STACKS_DIR))
    assert (table["reserved GiB"] >= table["memory GiB"]).all()


def test_stack_none_costs_the_inputs_as_given() -> None:
    at = _app("app_pages/estimate.py")
    at.selectbox(key="est_stack").set_value("none").run()
    _ok(at)
    assert not at.error, [e.value for e in at.error]
    assert not any("reserved peak" in c.value for c in at.caption)


def test_estimate_misfit_names_the_cheapest_changes_that_fit() -> None:
    """Issue 15 item 3 in the app: a layout that does not fit lists what would."""
    at = _app(est_pp=1, est_tp=1, est_gpus=8, est_model="llama3.1-8b", est_zero=0)
    _ok(at)
    (warn,) = [w.value for w in at.warning if "Does not fit" in w.value]
    assert "Cheapest changes that fit:" in warn
    assert "--zero 2" in warn and "tokens/s/GPU" in warn
