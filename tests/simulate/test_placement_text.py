"""The report's group placement line (issue 15 item 6: 12 GPUs at TP 4 put DP 3 on 2 + 1)."""

from __future__ import annotations

import json

import planner
from planner.simulate.step import placement_text


def test_uneven_group_names_each_domain():
    assert placement_text(3, 2, 2) == "3 GPUs over 2 scale-up domains (2 + 1)"
    assert placement_text(16, 8, 2) == "16 GPUs over 2 scale-up domains, 8 in each"
    assert placement_text(4, 4, 1) == "4 GPUs in 1 scale-up domain"
    assert placement_text(1, 1, 1) == "single GPU"


def test_twelve_gpus_at_tp4_in_the_report():
    model = planner.load_model("llama3.1-8b")
    cluster = planner.load_cluster("dgx-h100")
    layout = planner.Layout(tp=4, dp=3, zero=1)
    training = planner.Training(seq_len=4096, global_batch=60)
    report = planner.simulate(model, cluster, layout, training)
    text = json.dumps(report.to_dict())
    assert "3 GPUs over 2 scale-up domains (2 + 1)" in text
    assert "domain(s)" not in text
