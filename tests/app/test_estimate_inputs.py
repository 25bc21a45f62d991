"""The Estimate page's layout and training inputs are the fields of Layout and Training
(app_pages/estimate_extras.py): a field added to a spec is a widget, and its value reaches the
simulated layout."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import pytest

pytest.importorskip("streamlit.testing.v1")
pytest.importorskip("plotly")

from pydantic import Field  # noqa: E402
from streamlit.testing.v1 import AppTest  # noqa: E402

from app_pages import estimate_extras as extras  # noqa: E402
from planner.specs.layout import Layout, Training  # noqa: E402

APP = str(Path(__file__).resolve().parents[2] / "app.py")


class ChunkedLayout(Layout):
    message_chunks: int = Field(default=2, ge=1, le=8, description="pieces per pipeline message")


class LossScaleTraining(Training):
    loss_scale: Literal["static", "dynamic"] = Field(default="dynamic", description="fp16 scaling")


def _run(**state: object) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60)
    for key, value in state.items():
        at.session_state[key] = value
    return at.run()


def test_every_field_has_a_widget_and_the_page_keys_stay() -> None:
    at = _run()
    assert not at.exception and not at.error
    for key in ("est_tp", "est_vpp", "est_seq_len", "est_offload_layers"):
        assert at.number_input(key=key) is not None
    for key in ("est_recompute", "est_zero", "est_precision", "est_schedule"):
        assert at.selectbox(key=key) is not None
    for key in ("est_sp", "est_overlap_tp", "est_overlap_dp", "est_dropout"):
        assert at.checkbox(key=key) is not None
    schedule = at.selectbox(key="est_schedule")
    assert schedule.value is None and "interleaved" in schedule.options


def test_spec_inputs_build_the_specs() -> None:
    values = {f: extras.spec_fields()[f].default for f in extras.spec_fields()}
    values |= {"tp": 2, "pp": 1, "cp": 1, "ep": 1, "vpp": 1, "seq_len": 1024, "global_batch": 8}
    values |= {"sequence_parallel": True, "overlap_ep_comm": True, "cross_entropy": "in_place"}
    layout, training = extras.specs_from_inputs(values, dp=4)
    assert layout == Layout(tp=2, dp=4, sequence_parallel=True)  # EP overlap off at ep 1
    assert training == Training(seq_len=1024, global_batch=8, cross_entropy="in_place")


def test_a_new_field_is_a_widget_that_reaches_the_layout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(extras, "LAYOUT_SPEC", ChunkedLayout)
    monkeypatch.setattr(extras, "TRAINING_SPEC", LossScaleTraining)
    seen: list[tuple[Layout, Training]] = []
    build = extras.specs_from_inputs
    monkeypatch.setattr(
        extras, "specs_from_inputs", lambda v, dp: seen.append(build(v, dp)) or seen[-1]
    )
    at = _run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    chunks = at.number_input(key="est_message_chunks")
    assert chunks.value == 2 and chunks.max == 8
    assert at.selectbox(key="est_loss_scale").options == ["static", "dynamic"]
    chunks.set_value(5).run()
    at.selectbox(key="est_loss_scale").set_value("static").run()
    layout, training = seen[-1]
    assert layout.message_chunks == 5 and training.loss_scale == "static"


def test_the_recompute_share_shows_under_full_recompute_and_reaches_the_training(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[tuple[Layout, Training]] = []
    build = extras.specs_from_inputs
    monkeypatch.setattr(
        extras, "specs_from_inputs", lambda v, dp: seen.append(build(v, dp)) or seen[-1]
    )
    at = _run(est_recompute="none")
    assert not at.exception and not at.error
    assert not [w for w in at.number_input if w.key == "est_recompute_fraction"]
    at.selectbox(key="est_recompute").set_value("full").run()
    share = at.number_input(key="est_recompute_fraction")
    assert share.value is None and seen[-1][1].recompute_fraction is None
    share.set_value(0.5).run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert seen[-1][1].recompute == "full" and seen[-1][1].recompute_fraction == 0.5
